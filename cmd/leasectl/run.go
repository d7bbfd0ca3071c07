package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/googleauth"
)

// env is what one invocation works with.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// idTokens makes a source of Google ID tokens for an audience; hc, if
	// not nil, is the HTTP client of the Client. Tests replace both.
	idTokens func(ctx context.Context, audience string) (oauth2.TokenSource, error)
	hc       *http.Client

	cmd       *command      // the command being run
	fs        *flag.FlagSet // its flags, once it made them (for its --help)
	json      bool
	url       string
	token     string // --token
	tokenFile string // --token-file
	creds     credentials
}

// run is leasectl: main only calls it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr, idTokens: googleauth.IDTokenSource}
	return e.run(ctx, args)
}

// run runs the command of args.
func (e *env) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		_, _ = io.WriteString(e.stderr, "usage: leasectl COMMAND [ARGS] [flags]; run 'leasectl --help' for the commands\n")
		return &exitError{code: exitUsage, quiet: true}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return writeTopHelp(e.stdout)
	case "--version":
		return e.run(ctx, []string{"version"})
	case "help":
		if len(args) == 1 {
			return writeTopHelp(e.stdout)
		}
		return e.run(ctx, []string{args[1], "--help"})
	}
	cmd, ok := lookup(args[0])
	if !ok {
		return usageError("unknown command %q (run 'leasectl --help' for the commands)", args[0])
	}
	e.cmd = &cmd
	err := cmd.run(ctx, e, args[1:])
	if errors.Is(err, flag.ErrHelp) && e.fs != nil {
		return writeCommandHelp(e.stdout, cmd, e.fs)
	}
	return e.creds.explain(explainInvalid(cmd.name, err))
}

// flags returns the FlagSet of the command name with the flags every
// command takes: --url and the credentials (unless the command is
// offline), and --json for the commands that print leases.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasectl "+name, flag.ContinueOnError)
	// Nothing printed by the flag package: parseFlags reports mistakes in
	// one line, and the dispatcher prints --help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	e.fs = fs
	if e.cmd != nil && e.cmd.offline {
		return fs
	}
	if e.cmd == nil || e.cmd.json {
		fs.BoolVar(&e.json, "json", false, "print JSON instead of a table")
	}
	url := e.getenv("LEASESVC_URL")
	if url == "" {
		url = "http://localhost:8080"
	}
	fs.StringVar(&e.url, "url", url, "the service's base `URL` (env LEASESVC_URL)")
	// No defaults from the environment here: credentials() reads it.
	fs.StringVar(&e.token, "token", "", "bearer `token` to send (env LEASESVC_TOKEN); never printed")
	fs.StringVar(&e.tokenFile, "token-file", "", "`file` holding the bearer token, trimmed (env LEASESVC_TOKEN_FILE)")
	return fs
}

// parse parses args, which hold exactly `want` positional arguments, before
// or among the flags; it returns them.
func parse(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != len(want) {
		if len(want) == 0 {
			return nil, flagError(fs, "takes no argument, got %q", pos)
		}
		if len(pos) < len(want) {
			return nil, flagError(fs, "missing %s", strings.Join(want[len(pos):], " "))
		}
		return nil, flagError(fs, "want %s, got %q", strings.Join(want, " "), pos)
	}
	return pos, nil
}

// holder returns --holder, else LEASESVC_HOLDER; a usage error when
// neither is set. There is no made-up default: renew and release must send
// the holder that acquired, so the user must know it.
func (e *env) holder(fs *flag.FlagSet, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if h := e.getenv("LEASESVC_HOLDER"); h != "" {
		return h, nil
	}
	return "", flagError(fs, "--holder is required (or set LEASESVC_HOLDER): the holder's identity, which renew and release must repeat")
}

// client returns a Client of the chosen service, with the invocation's
// credentials.
func (e *env) client(ctx context.Context) (*client.Client, error) {
	ts, err := e.credentials(ctx)
	if err != nil {
		return nil, err
	}
	c, err := client.New(e.url, client.Config{HTTPClient: e.hc, TokenSource: ts})
	if err != nil {
		return nil, usageError("%v", err)
	}
	return c, nil
}

// metadataFlag parses --metadata: a JSON object.
func metadataFlag(fs *flag.FlagSet, s string) (json.RawMessage, error) {
	return objectFlag(fs, "metadata", s)
}

// objectFlag parses the flag name whose value s must be a JSON object;
// nil when it is empty.
func objectFlag(fs *flag.FlagSet, name, s string) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("got null")
		}
		return nil, flagError(fs, "--%s must be a JSON object: %v", name, err)
	}
	return json.RawMessage(s), nil
}

func cmdAcquire(ctx context.Context, e *env, args []string) error {
	fs := e.flags("acquire")
	holderFlag := fs.String("holder", "", "the holder's identity, 1–256 printable characters (env LEASESVC_HOLDER); required")
	ttl := duration(fs, "ttl", client.DefaultTTL, "lease duration")
	wait := duration(fs, "wait", 0, "wait up to this long, 0s … 60s, for another's holding to end")
	md := fs.String("metadata", "", "a JSON object to attach to the lease")
	priority := fs.Int("priority", 0, "rank among the waiting candidates, 0 … 1000; given, even 0, a waiting acquire registers as a candidate")
	preempt := fs.Bool("preempt", false, "with --wait: ask a holder of a lower priority to step down")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := checkTTL(fs, "ttl", *ttl); err != nil {
		return err
	}
	if *priority < 0 || *priority > client.MaxPriority {
		return flagError(fs, "--priority %d: must be between 0 and %d", *priority, client.MaxPriority)
	}
	if *preempt && *wait <= 0 {
		return flagError(fs, "--preempt needs --wait: only a waiting candidate can ask the holder to step down")
	}
	if err := checkWait(fs, *wait); err != nil {
		return err
	}
	meta, err := metadataFlag(fs, *md)
	if err != nil {
		return err
	}
	holder, err := e.holder(fs, *holderFlag)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	req := client.AcquireRequest{Holder: holder, TTL: *ttl, Wait: *wait, Metadata: meta, Preempt: *preempt}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "priority" {
			req.Priority, req.Candidate = *priority, true
		}
	})
	l, err := c.Acquire(ctx, pos[0], req)
	var held *client.HeldError
	var reserved *client.ReservedError
	switch {
	case errors.As(err, &held):
		_ = e.printLeases(held.Lease) // who holds it, for the caller
	case errors.As(err, &reserved):
		_ = e.printLeases(reserved.Lease) // for whom it is reserved
	}
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdRenew(ctx context.Context, e *env, args []string) error {
	fs := e.flags("renew")
	holderFlag := fs.String("holder", "", "the holder's identity, as acquire had it (env LEASESVC_HOLDER); required")
	token := fs.Int64("fencing-token", 0, "the holding's fencing token, as acquire printed it; required")
	ttl := duration(fs, "ttl", 0, "new lease duration (default: keep the holding's)")
	md := fs.String("metadata", "", "a JSON object replacing the metadata")
	cpFlag := fs.String("checkpoint", "", "a JSON object (≤ 16 KiB) replacing the checkpoint the next holder inherits")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	holder, token2, err := e.holding(fs, *holderFlag, *token)
	if err != nil {
		return err
	}
	if *ttl != 0 {
		if err := checkTTL(fs, "ttl", *ttl); err != nil {
			return err
		}
	}
	meta, err := metadataFlag(fs, *md)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	cp, err := objectFlag(fs, "checkpoint", *cpFlag)
	if err != nil {
		return err
	}
	l, err := c.Renew(ctx, pos[0], client.RenewRequest{Holder: holder, FencingToken: token2, TTL: *ttl, Metadata: meta, Checkpoint: cp})
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdRelease(ctx context.Context, e *env, args []string) error {
	fs := e.flags("release")
	holderFlag := fs.String("holder", "", "the holder's identity, as acquire had it (env LEASESVC_HOLDER); required")
	token := fs.Int64("fencing-token", 0, "the holding's fencing token, as acquire printed it; required")
	cpFlag := fs.String("checkpoint", "", "a JSON object (≤ 16 KiB) replacing the checkpoint the next holder inherits")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	holder, token2, err := e.holding(fs, *holderFlag, *token)
	if err != nil {
		return err
	}
	cp, err := objectFlag(fs, "checkpoint", *cpFlag)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.ReleaseWith(ctx, pos[0], client.ReleaseRequest{Holder: holder, FencingToken: token2, Checkpoint: cp})
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdTransfer(ctx context.Context, e *env, args []string) error {
	fs := e.flags("transfer")
	holderFlag := fs.String("holder", "", "the holder's identity, as acquire had it (env LEASESVC_HOLDER); required")
	token := fs.Int64("fencing-token", 0, "the holding's fencing token, as acquire printed it; required")
	to := fs.String("to", "", "the successor's holder identity; required")
	cpFlag := fs.String("checkpoint", "", "a JSON object (≤ 16 KiB) for the successor to inherit")
	reserve := duration(fs, "reserve", 0, "how long the lease waits for the successor, 1ms … 60s (default: the service's, 5s)")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	holder, token2, err := e.holding(fs, *holderFlag, *token)
	if err != nil {
		return err
	}
	if *to == "" {
		return flagError(fs, "--to is required: the holder identity of the successor")
	}
	if *reserve < 0 || *reserve > maxReserve || *reserve%time.Millisecond != 0 {
		return flagError(fs, "--reserve %s: must be between 1ms and %s (whole milliseconds)", seconds(*reserve), seconds(maxReserve))
	}
	cp, err := objectFlag(fs, "checkpoint", *cpFlag)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Transfer(ctx, pos[0], client.TransferRequest{Holder: holder, FencingToken: token2, To: *to, Checkpoint: cp, Reserve: *reserve})
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

// maxReserve is the longest --reserve of transfer (docs/contract.md §8).
const maxReserve = time.Minute

// holding returns the holder and fencing token of renew and release, or a
// usage error naming the missing flag.
func (e *env) holding(fs *flag.FlagSet, holderFlag string, token int64) (string, int64, error) {
	if token < 1 {
		return "", 0, e.fencingUsage(fs, token)
	}
	holder, err := e.holder(fs, holderFlag)
	return holder, token, err
}

// fencingUsage is the usage error of a missing or bad --fencing-token,
// which explains the --token of older leasectl versions.
func (e *env) fencingUsage(fs *flag.FlagSet, token int64) error {
	msg := "--fencing-token is required: the holding's fencing token, as acquire printed it"
	if token != 0 {
		msg = fmt.Sprintf("--fencing-token %d: must be a fencing token, 1 or more", token)
	}
	if e.token != "" {
		msg += " (--token is the credential now; the fencing token is --fencing-token)"
	}
	return flagError(fs, "%s", msg)
}

func cmdRevoke(ctx context.Context, e *env, args []string) error {
	fs := e.flags("revoke")
	reason := fs.String("reason", "", "why, 1–512 printable characters; required")
	token := fs.Int64("fencing-token", 0, "revoke only the holding with this fencing token (default: whatever holding is live)")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *reason == "" {
		return flagError(fs, "--reason is required: why the holding is revoked")
	}
	if *token < 0 {
		return flagError(fs, "--fencing-token %d: must not be negative", *token)
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Revoke(ctx, pos[0], client.RevokeRequest{Reason: *reason, FencingToken: *token})
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdGet(ctx context.Context, e *env, args []string) error {
	fs := e.flags("get")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("list")
	prefix := fs.String("prefix", "", "only names that start with this")
	size := fs.Int("page-size", 0, "leases per page; 0 lists every page")
	token := fs.String("page-token", "", "the nextPageToken of a previous page")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *size < 0 {
		return flagError(fs, "--page-size %d: must be 0 (every page) or more", *size)
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	if *size > 0 || *token != "" {
		p, err := c.List(ctx, client.ListRequest{Prefix: *prefix, PageSize: *size, PageToken: *token})
		if err != nil {
			return err
		}
		if e.json {
			return e.writeJSON(p)
		}
		if err := e.printLeases(p.Leases...); err != nil {
			return err
		}
		if p.NextPageToken != "" {
			_, err = fmt.Fprintf(e.stdout, "next page: --page-token %s\n", p.NextPageToken)
		}
		return err
	}
	all := []client.Lease{}
	for l, err := range c.All(ctx, *prefix) {
		if err != nil {
			return err
		}
		all = append(all, l)
	}
	if e.json {
		return e.writeJSON(client.Page{Leases: all})
	}
	return e.printLeases(all...)
}

func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := e.flags("watch")
	missingOK := fs.Bool("missing-ok", false, "if the lease was never acquired, wait for its first acquire instead of exiting 5")
	prefix := fs.String("prefix", "", "watch every lease whose name starts with this (--prefix= for every lease) instead of NAME")
	byPrefix := slices.ContainsFunc(args, func(a string) bool {
		return a == "--prefix" || a == "-prefix" || strings.HasPrefix(a, "--prefix=") || strings.HasPrefix(a, "-prefix=")
	})
	want := []string{"NAME"}
	if byPrefix {
		want = nil
	}
	pos, err := parse(fs, args, want...)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	var st *client.Stream
	if byPrefix {
		st, err = c.WatchPrefix(ctx, *prefix)
	} else {
		st, err = c.Watch(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	for first := true; ; first = false {
		ev, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of a watch
			}
			return err
		}
		missing := !byPrefix && ev.Type == client.EventState && ev.Lease.Name == ""
		if first && missing && !*missingOK {
			return &exitError{code: exitNotFound, err: fmt.Errorf("watch: no lease %q: it has never been acquired (--missing-ok waits for its first acquire)", pos[0])}
		}
		if e.json {
			if missing { // the service's data: null, not a zero lease
				if _, err := fmt.Fprintln(e.stdout, `{"type":"lease","lease":null}`); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				continue
			}
			if err := e.writeJSON(ev); err != nil {
				return err
			}
			continue
		}
		if first {
			head := fmt.Sprintf("%-27s  %-8s  %-6s  %s", "EVENT TIME", "EVENT", "TOKEN", "HOLDER")
			if byPrefix {
				head = fmt.Sprintf("%-27s  %-8s  %-24s  %-6s  %s", "EVENT TIME", "EVENT", "LEASE", "TOKEN", "HOLDER")
			}
			if _, err := fmt.Fprintln(e.stdout, head); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		typ, holder := string(ev.Type), ev.Lease.Holder
		if ev.Type == client.EventRevoked {
			holder += fmt.Sprintf(" (by %s: %q)", ev.Operator, ev.Reason)
		}
		if ev.Type == client.EventState {
			typ = "now"
			switch {
			case missing:
				holder = "(no such lease yet)"
			case !ev.Lease.Held:
				holder += " (not held)"
			}
		}
		at := ""
		if !ev.Time.IsZero() {
			at = ev.Time.UTC().Format("2006-01-02T15:04:05.000000Z")
		}
		line := fmt.Sprintf("%-27s  %-8s  %-6d  %s", at, typ, ev.Lease.FencingToken, holder)
		if byPrefix {
			line = fmt.Sprintf("%-27s  %-8s  %-24s  %-6d  %s", at, typ, ev.Lease.Name, ev.Lease.FencingToken, holder)
		}
		if _, err := fmt.Fprintln(e.stdout, line); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}

// writeJSON prints v as one line of JSON.
func (e *env) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	if _, err := e.stdout.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// printLeases prints leases as a table, or one as JSON.
func (e *env) printLeases(ls ...client.Lease) error {
	if e.json && len(ls) == 1 {
		return e.writeJSON(ls[0])
	}
	if e.json {
		return e.writeJSON(ls)
	}
	return writeTable(e.stdout, ls)
}

// durationText renders a remaining time compactly.
func durationText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
