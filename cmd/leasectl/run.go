package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

const usage = `usage: leasectl COMMAND [flags]

  acquire NAME --holder H [--ttl 30s] [--wait 0s] [--metadata JSON]
  renew   NAME --holder H --token N [--ttl D] [--metadata JSON]
  release NAME --holder H --token N
  get     NAME
  list    [--prefix P] [--page-size N] [--page-token T]
  watch   NAME
  run     --lease NAME [--ttl 30s] [--holder H] [--grace D] -- CMD ARGS...

Every command takes --json (JSON output) and --url (default $LEASESVC_URL,
else http://localhost:8080).
`

// env is what one invocation works with.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	json   bool
	url    string
}

// run is leasectl: main only calls it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = io.WriteString(stderr, usage)
		if len(args) == 0 {
			return &exitError{code: exitUsage, quiet: true}
		}
		return nil
	}
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr}
	cmds := map[string]func(context.Context, *env, []string) error{
		"acquire": cmdAcquire, "renew": cmdRenew, "release": cmdRelease, "get": cmdGet,
		"list": cmdList, "watch": cmdWatch, "run": cmdRun,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		_, _ = io.WriteString(stderr, usage)
		return usageError("unknown command %q", args[0])
	}
	return cmd(ctx, e, args[1:])
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

// client returns a Client of the chosen service.
func (e *env) client() (*client.Client, error) {
	c, err := client.New(e.url, client.Config{})
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
	c, err := e.client()
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
	token := fs.Int64("token", 0, "the holding's fencing token")
	ttl := fs.Duration("ttl", 0, "new lease duration (default: keep)")
	md := fs.String("metadata", "", "a JSON object replacing the metadata")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *holder == "" || *token < 1 {
		return usageError("renew: --holder and --token are required")
	}
	meta, err := metadataFlag(*md)
	if err != nil {
		return err
	}
	c, err := e.client()
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
	token := fs.Int64("token", 0, "the holding's fencing token")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *holder == "" || *token < 1 {
		return usageError("release: --holder and --token are required")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	l, err := c.Release(ctx, pos[0], *holder, *token)
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
	c, err := e.client()
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
	c, err := e.client()
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
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	st, err := c.Watch(ctx, pos[0])
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	if !e.json {
		if _, err := fmt.Fprintf(e.stdout, "%-27s  %-8s  %-6s  %s\n", "EVENT TIME", "EVENT", "TOKEN", "HOLDER"); err != nil {
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
		if _, err := fmt.Fprintf(e.stdout, "%-27s  %-8s  %-6d  %s\n", at, typ, ev.Lease.FencingToken, holder); err != nil {
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
