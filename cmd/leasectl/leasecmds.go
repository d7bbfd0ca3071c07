package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

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
	req := client.AcquireRequest{Holder: holder, TTL: *ttl, Wait: *wait, Metadata: meta, Preempt: *preempt}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "priority" {
			req.Priority, req.Candidate = *priority, true
		}
	})
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) {
		l, err := c.Acquire(ctx, pos[0], req)
		var held *client.HeldError
		var reserved *client.ReservedError
		switch {
		case errors.As(err, &held):
			_ = e.printLeases(held.Lease) // who holds it, for the caller
		case errors.As(err, &reserved):
			_ = e.printLeases(reserved.Lease) // for whom it is reserved
		}
		return l, err
	})
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
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) {
		cp, err := objectFlag(fs, "checkpoint", *cpFlag)
		if err != nil {
			return client.Lease{}, err
		}
		return c.Renew(ctx, pos[0], client.RenewRequest{Holder: holder, FencingToken: token2, TTL: *ttl, Metadata: meta, Checkpoint: cp})
	})
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
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) {
		return c.ReleaseWith(ctx, pos[0], client.ReleaseRequest{Holder: holder, FencingToken: token2, Checkpoint: cp})
	})
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
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) {
		return c.Transfer(ctx, pos[0], client.TransferRequest{Holder: holder, FencingToken: token2, To: *to, Checkpoint: cp, Reserve: *reserve})
	})
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
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) {
		return c.Revoke(ctx, pos[0], client.RevokeRequest{Reason: *reason, FencingToken: *token})
	})
}

func cmdGet(ctx context.Context, e *env, args []string) error {
	return onName(ctx, e, args, "get", (*client.Client).Get)
}

// onName runs command cmd, whose only argument is a lease NAME: it calls op
// with the client and the name and prints the lease op returns.
func onName(ctx context.Context, e *env, args []string, cmd string, op func(*client.Client, context.Context, string) (client.Lease, error)) error {
	pos, err := parse(e.flags(cmd), args, "NAME")
	if err != nil {
		return err
	}
	return e.printed(ctx, func(c *client.Client) (client.Lease, error) { return op(c, ctx, pos[0]) })
}

// printed opens the client, calls op with it and prints the lease op
// returns; an error of either is the command's.
func (e *env) printed(ctx context.Context, op func(*client.Client) (client.Lease, error)) error {
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := op(c)
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
			head := fmt.Sprintf("%-27s  %-15s  %-6s  %s", "EVENT TIME", "EVENT", "TOKEN", "HOLDER")
			if byPrefix {
				head = fmt.Sprintf("%-27s  %-15s  %-24s  %-6s  %s", "EVENT TIME", "EVENT", "LEASE", "TOKEN", "HOLDER")
			}
			if _, err := fmt.Fprintln(e.stdout, head); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		typ, holder := eventName(ev), ev.Lease.Holder
		switch {
		case ev.Type == client.EventRevoked:
			holder += fmt.Sprintf(" (by %s: %q)", ev.Operator, ev.Reason)
		case typ == reasonSessionExpired:
			holder += " (its agent stopped heartbeating: crashed, frozen or cut off)"
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
		line := fmt.Sprintf("%-27s  %-15s  %-6d  %s", at, typ, ev.Lease.FencingToken, holder)
		if byPrefix {
			line = fmt.Sprintf("%-27s  %-15s  %-24s  %-6d  %s", at, typ, ev.Lease.Name, ev.Lease.FencingToken, holder)
		}
		if _, err := fmt.Fprintln(e.stdout, line); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}

// reasonSessionExpired is the reason of a release by the service because
// the holding's session died (docs/contract.md §14).
const reasonSessionExpired = "session_expired"

// eventName is how the watch table names an event: its type, except that
// a release because the holding's session died is session_expired, not
// the holder's own release.
func eventName(ev client.Event) string {
	if ev.Type == client.EventReleased && ev.Reason == reasonSessionExpired {
		return reasonSessionExpired
	}
	return string(ev.Type)
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
