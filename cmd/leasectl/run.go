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

const usage = `usage: leasectl COMMAND [flags]

  acquire NAME --holder H [--ttl 30s] [--wait 0s] [--metadata JSON]
  renew   NAME --holder H --fencing-token N [--ttl D] [--metadata JSON]
  release NAME --holder H --fencing-token N
  revoke  NAME --reason R [--fencing-token N]
  get     NAME
  list    [--prefix P] [--page-size N] [--page-token T]
  watch   NAME | --prefix P
  run     --lease NAME [--ttl 30s] [--holder H] [--grace D] -- CMD ARGS...

Every command takes --json (JSON output), --url (default $LEASESVC_URL,
else http://localhost:8080), and credentials: --token TOKEN or
--token-file FILE (default $LEASESVC_TOKEN, $LEASESVC_TOKEN_FILE); without
them an https URL gets Google ID tokens when Google credentials are found.
`

// env is what one invocation works with.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// idTokens makes a source of Google ID tokens for an audience; hc, if
	// not nil, is the HTTP client of the Client. Tests replace both.
	idTokens func(ctx context.Context, audience string) (oauth2.TokenSource, error)
	hc       *http.Client

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
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = io.WriteString(e.stderr, usage)
		if len(args) == 0 {
			return &exitError{code: exitUsage, quiet: true}
		}
		return nil
	}
	cmds := map[string]func(context.Context, *env, []string) error{
		"acquire": cmdAcquire, "renew": cmdRenew, "release": cmdRelease, "revoke": cmdRevoke, "get": cmdGet,
		"list": cmdList, "watch": cmdWatch, "run": cmdRun,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		_, _ = io.WriteString(e.stderr, usage)
		return usageError("unknown command %q", args[0])
	}
	return e.creds.explain(cmd(ctx, e, args[1:]))
}

// flags returns a FlagSet with the flags every command takes.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasectl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.BoolVar(&e.json, "json", false, "print JSON instead of a table")
	url := e.getenv("LEASESVC_URL")
	if url == "" {
		url = "http://localhost:8080"
	}
	fs.StringVar(&e.url, "url", url, "the service's base URL (env LEASESVC_URL)")
	// No defaults from the environment here: the usage text prints them.
	fs.StringVar(&e.token, "token", "", "bearer token to send (env LEASESVC_TOKEN); never printed")
	fs.StringVar(&e.tokenFile, "token-file", "", "file holding the bearer token, trimmed (env LEASESVC_TOKEN_FILE)")
	return fs
}

// parse parses args, which hold exactly `want` positional arguments, before
// or among the flags; it returns them.
func parse(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != len(want) {
		return nil, usageError("%s: want %s, got %q", fs.Name(), strings.Join(want, " "), pos)
	}
	return pos, nil
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
func metadataFlag(s string) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		return nil, usageError("--metadata must be a JSON object: %v", err)
	}
	return json.RawMessage(s), nil
}

func cmdAcquire(ctx context.Context, e *env, args []string) error {
	fs := e.flags("acquire")
	holder := fs.String("holder", "", "the holder's identity (default hostname-pid)")
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease duration")
	wait := fs.Duration("wait", 0, "wait up to this long (≤ 60s) for another's holding to end")
	md := fs.String("metadata", "", "a JSON object to attach")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	meta, err := metadataFlag(*md)
	if err != nil {
		return err
	}
	if *holder == "" {
		*holder = client.DefaultHolder()
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Acquire(ctx, pos[0], client.AcquireRequest{Holder: *holder, TTL: *ttl, Wait: *wait, Metadata: meta})
	var held *client.HeldError
	if errors.As(err, &held) {
		_ = e.printLeases(held.Lease) // who holds it, for the caller
	}
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdRenew(ctx context.Context, e *env, args []string) error {
	fs := e.flags("renew")
	holder := fs.String("holder", "", "the holder's identity")
	token := fs.Int64("fencing-token", 0, "the holding's fencing token")
	ttl := fs.Duration("ttl", 0, "new lease duration (default: keep)")
	md := fs.String("metadata", "", "a JSON object replacing the metadata")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *holder == "" || *token < 1 {
		return e.fencingUsage("renew: --holder and --fencing-token are required")
	}
	meta, err := metadataFlag(*md)
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Renew(ctx, pos[0], client.RenewRequest{Holder: *holder, FencingToken: *token, TTL: *ttl, Metadata: meta})
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

func cmdRelease(ctx context.Context, e *env, args []string) error {
	fs := e.flags("release")
	holder := fs.String("holder", "", "the holder's identity")
	token := fs.Int64("fencing-token", 0, "the holding's fencing token")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *holder == "" || *token < 1 {
		return e.fencingUsage("release: --holder and --fencing-token are required")
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Release(ctx, pos[0], *holder, *token)
	if err != nil {
		return err
	}
	return e.printLeases(l)
}

// fencingUsage is the usage error of a missing --fencing-token, which
// explains the --token of older leasectl versions.
func (e *env) fencingUsage(msg string) error {
	if e.token != "" {
		msg += " (--token is the credential now; the fencing token is --fencing-token)"
	}
	return usageError("%s", msg)
}

func cmdRevoke(ctx context.Context, e *env, args []string) error {
	fs := e.flags("revoke")
	reason := fs.String("reason", "", "why, 1–512 printable characters (required)")
	token := fs.Int64("fencing-token", 0, "revoke only the holding with this fencing token (default: whatever holding is live)")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *reason == "" || *token < 0 {
		return usageError("revoke: --reason is required, and --fencing-token must not be negative")
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
	if !e.json {
		head := fmt.Sprintf("%-27s  %-8s  %-6s  %s", "EVENT TIME", "EVENT", "TOKEN", "HOLDER")
		if byPrefix {
			head = fmt.Sprintf("%-27s  %-8s  %-24s  %-6s  %s", "EVENT TIME", "EVENT", "LEASE", "TOKEN", "HOLDER")
		}
		if _, err := fmt.Fprintln(e.stdout, head); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	for {
		ev, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of a watch
			}
			return err
		}
		if e.json {
			if err := e.writeJSON(ev); err != nil {
				return err
			}
			continue
		}
		typ, holder := string(ev.Type), ev.Lease.Holder
		if ev.Type == client.EventRevoked {
			holder += fmt.Sprintf(" (by %s: %q)", ev.Operator, ev.Reason)
		}
		if ev.Type == client.EventState {
			typ = "now"
			switch {
			case ev.Lease.Name == "":
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
