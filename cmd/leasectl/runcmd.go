package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// outcome is what became of CMD in `leasectl run`.
type outcome struct {
	started bool
	status  int   // CMD's exit status (128+signal when killed)
	stopped bool  // leasectl stopped it
	cause   error // why leadership ended, when leasectl stopped it
	err     error // CMD could not be started
	setup   error // leasectl could not prepare CMD's term (its checkpoint file, its guard)
	guard   error // CMD's guard ended before CMD's status was known

	lostTerms int // terms lost before this one, after which run campaigned again
}

func cmdRun(ctx context.Context, e *env, args []string) error {
	fs := e.flags("run")
	name := fs.String("lease", "", "the `name` of the lease to lead, if not given as NAME")
	ttl := duration(fs, "ttl", client.DefaultTTL, "lease duration with plain renewals (renewed every ttl/3); a session holds the lease at the service's session TTL instead")
	holder := fs.String("holder", "", "the holder's identity (default $LEASESVC_HOLDER, else {hostname}-{pid})")
	grace := duration(fs, "grace", 0, "how long CMD has between SIGTERM and SIGKILL (default: a tenth of the session's window, or of --ttl with plain renewals)")
	windowFlag := duration(fs, "window", 0, "the session's heartbeat window, 200ms … 60s: a crashed leasectl's lease is free within it, and a leader that misses it loses its term (default $LEASESVC_WINDOW, else 1s, or 6×--grace when longer)")
	priority := fs.Int("priority", 0, "rank among the waiting candidates, 0 … 1000: the best one leads next")
	preempt := fs.Bool("preempt", false, "ask a leader of a lower --priority to step down")
	plain := fs.Bool("plain-renewals", false, "hold the lease with plain renewals every ttl/3 rather than through a session")
	exitOnLoss := fs.Bool("exit-on-loss", false, "exit 4 when leadership is lost, rather than stopping CMD and campaigning again")
	err := runFlags(e, fs, args, name, ttl, holder, grace)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	window := client.DefaultSessionWindow
	if !*plain {
		if window, err = runWindow(e, fs, *windowFlag, set["window"], *grace, set["grace"]); err != nil {
			return err
		}
	}
	if *priority < 0 || *priority > client.MaxPriority {
		return flagError(fs, "--priority %d: must be between 0 and %d", *priority, client.MaxPriority)
	}
	argv := fs.Args()
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	e.stdout, e.stderr = lockedWriters(e.stdout, e.stderr)
	logf := func(format string, args ...any) {
		_, _ = fmt.Fprintf(e.stderr, "leasectl run: "+format+"\n", args...)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var mu sync.Mutex
	var out outcome
	var el *client.Elector
	var again atomic.Bool   // the term that just ended was lost: campaign again
	feed := &deadlineFeed{} // each safe deadline, for CMD's guard
	cfg := client.ElectorConfig{
		Holder: *holder,
		// CMD gets SIGTERM 2×grace before the safe deadline and SIGKILL one
		// grace later: it is gone a grace period before the deadline. Set
		// again once the Keeper's span gives the default grace.
		CancelBefore: 2 * *grace,
		Priority:     *priority,
		Preempt:      *preempt,
		// Asked to yield, the Elector steps down by itself (no callback):
		// the leading ctx ends with ErrYielded, CMD is stopped as on any
		// end of leadership, and the release carries its checkpoint.
		Callbacks: client.LeaderCallbacks{
			OnNewLeader: func(h string) {
				logf("leader of %s: %s", *name, h)
			},
			// When CMD's term is over, so is leasectl, unless the term was
			// lost: then the Elector campaigns again (a fresh acquire, a new
			// token), as it does for any lost term, and starts CMD again if it
			// wins. (Stopping in OnStoppedLeading, not OnStartedLeading, leaves
			// the Elector to release the lease only when CMD ended by itself or
			// on a signal; a lost lease is not released through a service that
			// is gone.)
			OnStoppedLeading: func() {
				if !again.Load() {
					stopRun()
				}
			},
			OnSafeDeadline: feed.set,
			OnStartedLeading: func(lctx context.Context) {
				again.Store(false)
				token, _ := client.TokenFromContext(lctx)
				cpf, err := newCheckpointFile(lctx, el, logf)
				if err != nil {
					mu.Lock()
					out = outcome{started: true, setup: err}
					mu.Unlock()
					return
				}
				defer cpf.close()
				logf("leading %s with fencing token %d: starting %q", *name, token, argv)
				env := append(os.Environ(), "LEASE_NAME="+*name, "LEASE_HOLDER="+el.Holder(),
					"LEASE_FENCING_TOKEN="+strconv.FormatInt(token, 10), "LEASE_CHECKPOINT_FILE="+cpf.path)
				if _, by := client.CheckpointFromContext(lctx); by != 0 {
					env = append(env, "LEASE_CHECKPOINT_TOKEN="+strconv.FormatInt(by, 10))
				}
				// The service's signed proof of the holding (docs/contract.md
				// §17), for CMD to pass to stores that verify it; never logged.
				if p, ok := client.ProofFromContext(lctx); ok {
					env = append(env, "LEASESVC_PROOF="+string(p))
				}
				watchCtx, stopWatch := context.WithCancel(lctx)
				watched := make(chan struct{})
				go func() {
					defer close(watched)
					cpf.watch(watchCtx, max(100*time.Millisecond, min(time.Second, *ttl/6)))
				}()
				o, finish := supervise(lctx, argv, env, *grace, cpf.dir, feed, e, logf)
				stopWatch()
				<-watched
				cpf.send() // CMD is gone: its last word goes with the release
				cpf.close()
				finish()
				o.started = true
				if o.stopped && ctx.Err() == nil && o.cause == nil {
					o.cause = context.Cause(lctx)
				}
				lost := o.stopped && ctx.Err() == nil && o.cause != nil && !errors.Is(o.cause, client.ErrYielded)
				if lost && !*exitOnLoss && o.err == nil && o.guard == nil {
					logf("leadership of %s ended (%v); CMD was stopped (status %d); campaigning again (--exit-on-loss exits instead)", *name, o.cause, o.status)
					o.lostTerms = out.lostTerms + 1
					o.started = false // until a new term starts CMD again
					again.Store(true)
				}
				mu.Lock()
				out = o
				mu.Unlock()
			},
		},
	}
	// The flags are checked before anything reaches the service: the
	// Elector's (all but CancelBefore, checked against the ttl and window
	// above) and the Keeper's.
	kcfg := keeperConfig(*plain, window, *ttl)
	// The release after CMD's end has a grace period, 1s at least (a
	// session's default grace, a tenth of its window, is known once it is
	// open).
	kcfg.ReleaseTimeout = time.Second
	if set["grace"] || *plain {
		kcfg.ReleaseTimeout = max(*grace, time.Second)
	}
	if set["grace"] {
		kcfg.CancelBefore = cfg.CancelBefore // a session window it does not fit: plain renewals
	}
	for _, err := range []error{cfg.Validate(), kcfg.Validate()} {
		if err != nil {
			return flagError(fs, "%s", electorFlags.Replace(err.Error()))
		}
	}
	k, err := openKeeper(ctx, c, kcfg, logf)
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: errors.New("run: interrupted before leading; CMD never started")}
		}
		return fmt.Errorf("run: %w", err)
	}
	defer k.Close()
	if !set["grace"] {
		*grace = k.Span() / 10
		cfg.CancelBefore = 2 * *grace
	}
	logf("holding %s %s", *name, holdingMode(k))
	if set["ttl"] && k.Span() != *ttl {
		logf("--ttl %v does not apply: %v the service frees the lease within %v of leasectl's end; give --window, or --plain-renewals to renew every ttl/3", *ttl, k, k.Span())
	}
	if el, err = client.NewElector(k, *name, cfg); err != nil {
		return flagError(fs, "%s", electorFlags.Replace(err.Error()))
	}
	if err := el.Run(runCtx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !out.started && out.lostTerms > 0:
		return &exitError{code: 130, err: fmt.Errorf("run: interrupted while campaigning again after %d lost term(s) of %s; CMD is not running", out.lostTerms, *name)}
	case !out.started && ctx.Err() != nil:
		return &exitError{code: 130, err: errors.New("run: interrupted before leading; CMD never started")}
	case !out.started:
		return errors.New("run: stopped before leading")
	case out.setup != nil:
		return fmt.Errorf("run: %w; CMD was not started", out.setup)
	case out.guard != nil:
		return fmt.Errorf("run: %w", out.guard)
	case out.err != nil:
		return &exitError{code: 127, err: fmt.Errorf("run: start %q: %w", argv[0], out.err)}
	case errors.Is(out.cause, client.ErrYielded):
		return &exitError{code: exitLost, err: fmt.Errorf("run: %w; CMD was stopped (status %d) and the lease released with its checkpoint", out.cause, out.status)}
	case out.cause != nil:
		return &exitError{code: exitLost, err: fmt.Errorf("run: leadership of %s ended (%w); CMD was stopped (status %d)", *name, out.cause, out.status)}
	case out.status != 0:
		return &exitError{code: out.status, quiet: true}
	}
	return nil
}

// runFlags parses and checks the flags of run: a usage error names the flag
// at fault, in the flags' terms rather than ElectorConfig's or
// KeeperConfig's.
func runFlags(e *env, fs *flag.FlagSet, args []string, name *string, ttl *time.Duration, holder *string, grace *time.Duration) error {
	if err := runArgs(fs, args, name); err != nil {
		return err
	}
	if *name == "" {
		return flagError(fs, "missing NAME: the name of the lease to lead, as in: leasectl run team-a.scheduler -- ./worker")
	}
	if len(fs.Args()) == 0 {
		return flagError(fs, "missing CMD: give the command to run after --, as in: leasectl run %s -- ./worker", *name)
	}
	if err := checkTTL(fs, "ttl", *ttl); err != nil {
		return err
	}
	if *holder == "" {
		*holder = e.getenv("LEASESVC_HOLDER") // else the Elector's {hostname}-{pid}
	}
	if *grace == 0 {
		*grace = *ttl / 10
	}
	if *grace <= 0 {
		return flagError(fs, "--grace %v: must be positive", *grace)
	}
	// The Elector cancels the term 2×grace before the safe deadline
	// (client.StopAt), which must fit the ttl (client.FitCancelBefore).
	if below, ok := graceFits(*ttl, *grace); !ok {
		return flagError(fs, "--grace %v is too long for --ttl %v: it must be below %v (CMD gets SIGTERM 2×grace before the safe deadline, which must leave half the ttl for a renewal); lower --grace or raise --ttl",
			*grace, *ttl, below)
	}
	return nil
}

// graceFits reports whether 2×grace, run's CancelBefore, fits span (a
// ttl or a session window) with the Keeper's drift margin
// (client.FitCancelBefore), and gives the longest grace that does
// otherwise, rounded down to the millisecond.
func graceFits(span, grace time.Duration) (below time.Duration, ok bool) {
	if client.FitCancelBefore(span, driftMargin, 2*grace) == nil {
		return 0, true
	}
	return (client.CancelBeforeLimit(span, driftMargin) / 2).Truncate(time.Millisecond), false
}

// runArgs parses run's arguments, NAME [flags] -- CMD [ARGS...], into fs
// and name: fs.Args() is CMD then. NAME may come before or among the flags;
// --lease NAME is the older spelling of it (then CMD may follow the flags
// without --, as it could before NAME was positional). Anything else
// before a -- is refused: `run --lease X NAME -- CMD` would otherwise run
// NAME as the command.
func runArgs(fs *flag.FlagSet, args []string, name *string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	ended := terminated(args, rest)
	if !ended && len(rest) > 0 && *name == "" {
		*name = rest[0]
		if err := parseFlags(fs, rest[1:]); err != nil {
			return err
		}
		if *name != rest[0] {
			return flagError(fs, "the lease is %q or %q? give its name once, as NAME (--lease is its older spelling)", rest[0], *name)
		}
		ended = terminated(rest[1:], fs.Args())
		rest = fs.Args()
	}
	if i := slices.Index(rest, "--"); !ended && i > 0 {
		return flagError(fs, "unexpected %q before --: the lease is %q and CMD comes after --, as in: leasectl run %s -- ./worker (NAME and --lease are one thing: give it once)",
			strings.Join(rest[:i], " "), *name, *name)
	}
	return nil
}

// terminated reports whether the flag package, parsing args, stopped at a
// "--" (which it drops) rather than at the first argument that is no flag
// (which it keeps in rest).
func terminated(args, rest []string) bool {
	return len(rest) < len(args) && args[len(args)-len(rest)-1] == "--"
}

// electorFlags renames ElectorConfig's and KeeperConfig's fields in their
// errors to run's flags.
var electorFlags = strings.NewReplacer("ElectorConfig.Holder", "--holder", "KeeperConfig.TTL", "--ttl",
	"ElectorConfig.CancelBefore", "2×--grace", "KeeperConfig.CancelBefore", "2×--grace", "CancelBefore", "2×--grace",
	"KeeperConfig.RenewInterval", "the renewal interval (--ttl/3)", "KeeperConfig.ReleaseTimeout", "--grace")

// lockedWriters returns stdout and stderr such that leasectl's own lines
// and the copies of CMD's output do not write to them at once. A file is
// returned as it is: CMD (and its guard) write to it directly, with no copy
// in leasectl, and keep it when leasectl dies.
func lockedWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	mu := new(sync.Mutex)
	wrap := func(w io.Writer) io.Writer {
		if _, ok := w.(*os.File); ok {
			return w
		}
		return &lockedWriter{mu: mu, w: w}
	}
	return wrap(stdout), wrap(stderr)
}

// lockedWriter is a writer used by more than one goroutine.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runWindow returns the session window of run and mcp: --window (set
// says it was given), else $LEASESVC_WINDOW, else 1s, or 6×grace when
// that is longer (graceSet: --grace was given). CMD gets SIGTERM 2×grace
// before the session's deadline (window × 0.9 after an acknowledged
// heartbeat, sent every window/4), which must leave room for a heartbeat
// that goes unanswered: 2×grace below window × 0.4.
func runWindow(e *env, fs *flag.FlagSet, w time.Duration, set bool, grace time.Duration, graceSet bool) (time.Duration, error) {
	src := "--window"
	if !set {
		if v := e.getenv("LEASESVC_WINDOW"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, flagError(fs, "LEASESVC_WINDOW %q: not a duration; write one such as 5s", v)
			}
			w, set, src = d, true, "LEASESVC_WINDOW"
		}
	}
	if !set {
		w = client.DefaultSessionWindow
		if graceSet {
			w = max(w, (6 * grace).Round(time.Millisecond))
		}
		if w > client.MaxSessionWindow {
			return 0, flagError(fs, "--grace %v is too long for a session (its window, 6×grace, must be at most %v): lower --grace, or give --plain-renewals", grace, client.MaxSessionWindow)
		}
		return w, nil
	}
	if w < client.MinSessionWindow || w > client.MaxSessionWindow || w%time.Millisecond != 0 {
		return 0, flagError(fs, "%s %v: must be whole milliseconds within %v … %v", src, w, client.MinSessionWindow, client.MaxSessionWindow)
	}
	if below, ok := graceFits(w, grace); graceSet && !ok {
		return 0, flagError(fs, "--grace %v is too long for %s %v: CMD gets SIGTERM 2×grace before the session's deadline, which must leave half the window for a heartbeat; give --grace below %v or a longer window",
			grace, src, w, below)
	}
	return w, nil
}
