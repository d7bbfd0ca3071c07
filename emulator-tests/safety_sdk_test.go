package emulatortests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/history"
)

// The SDK agents of a safety run: the Go client's Elector (in this
// process), and the Python and TypeScript SDKs' Electors (processes, run
// as the conformance agents are: sdk/conformance/PROTOCOL.md), each on one
// of the run's leases, through the Client's shared session (docs/contract.md
// §14), all on one lease of the run (with its REST and session
// contenders). They reach the instances through a frame proxy that sends each new
// connection to the next instance's front proxy, as a load balancer would,
// so the instance faults and the front faults hit them too. Each term an
// agent leads goes to the history as a Led entry (the agent's own start and
// end of leading, on this machine's monotonic clock), preceded by an
// unanswered session acquire by its holder: what the history knows of the
// holdings an Elector makes. As that is not every write an Elector makes
// (an acquire whose answer came too late to lead on, for one), porcupine
// leaves their lease out; the exact check and the all-pairs check do not.

// sdkPriority is the SDK Electors' priority (docs/contract.md §8): above
// every contender's (0–10), so that when a holding ends a waiting Elector
// gets the lease; they resign it again within 1.5 s.
const sdkPriority = 12

// sdkAgent is one SDK agent of a run.
type sdkAgent struct {
	lang   string
	id     int
	holder string
	name   string
	run    *safetyRun

	mu    sync.Mutex
	since time.Time // the end of its last term, or its start
	start time.Time // the start of its current term
	terms int
}

// leading records the start of a term at.
func (a *sdkAgent) leading(at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.run.rec.Add(history.Entry{Client: a.id, Name: a.name, Holder: a.holder, Op: history.Acquire, Outcome: history.Maybe,
		Call: a.since, Session: true, Note: a.lang + " SDK Elector"})
	a.start = at
}

// stopped records the term of token that ended at.
func (a *sdkAgent) stopped(token int64, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.run.rec.Add(history.Entry{Client: a.id, Name: a.name, Holder: a.holder, Op: history.Led, Token: token, Call: a.start, Return: at, Session: true})
	a.since = at
	a.terms++
	a.run.stats.add(a.lang + " SDK term")
}

// startSDKAgents starts the SDK agents on the lease name until ctx ends;
// wg waits for them to stop. It returns a report of each for the log.
func (r *safetyRun) startSDKAgents(t *testing.T, ctx context.Context, name string, wg *sync.WaitGroup) func() string {
	t.Helper()
	var next atomic.Uint64
	lb, err := startFrameProxy(func() string {
		in := r.insts[int(next.Add(1))%len(r.insts)]
		return strings.TrimPrefix(in.frontURL, "http://")
	}, &r.caps)
	if err != nil {
		t.Fatalf("start the SDK agents' balancer: %v", err)
	}
	t.Cleanup(lb.stop)
	base := r.cfg.contenders + r.cfg.leases + r.cfg.sessions + 1 // after the late-frames agent
	var agents []*sdkAgent
	var notes []string
	for i, lang := range []string{"go", "python", "typescript"} {
		a := &sdkAgent{lang: lang, id: base + i, holder: lang + "-elector", name: name, run: r, since: time.Now()}
		var argv, env []string
		switch lang {
		case "go":
			wg.Go(func() { a.goElector(ctx, lb.url) })
			agents = append(agents, a)
			continue
		case "python":
			py, err := exec.LookPath("python3")
			if err != nil {
				notes = append(notes, "python agent skipped: no python3")
				continue
			}
			argv, env = []string{py, filepath.Join("emulator-tests", "safety_agent.py")}, []string{"PYTHONPATH=" + filepath.Join(repoRoot(), "sdk", "python")}
		case "typescript":
			node, err := exec.LookPath("node")
			dist := filepath.Join(repoRoot(), "sdk", "typescript", "dist", "index.js")
			if err != nil || tsStale(dist, filepath.Join(repoRoot(), "sdk", "typescript", "src")) {
				notes = append(notes, "typescript agent skipped: no node, or sdk/typescript/dist missing or older than src (npm run build there)")
				continue
			}
			argv = []string{node, filepath.Join("emulator-tests", "safety_agent.mjs")}
		}
		stop, err := a.process(argv, append(env, "LEASESVC_URL="+lb.url, "LEASE_NAME="+a.name, "LEASE_HOLDER="+a.holder, "LEASE_TTL_MS=3000", fmt.Sprintf("LEASE_PRIORITY=%d", sdkPriority)))
		if err != nil {
			t.Errorf("%s agent: %v", lang, err)
			continue
		}
		agents = append(agents, a)
		wg.Go(func() {
			<-ctx.Done()
			if err := stop(); err != nil {
				r.unexpected("%s SDK agent: %v", lang, err)
			}
		})
	}
	return func() string {
		out := notes
		for _, a := range agents {
			a.mu.Lock()
			out = append(out, fmt.Sprintf("%s Elector led %d terms of %s", a.lang, a.terms, a.name))
			a.mu.Unlock()
		}
		return strings.Join(out, "; ")
	}
}

// goElector runs the Go client's Elector, through the client's shared
// session, until ctx ends: each term resigns after 0.2–1.5 s (Run returns)
// and the Elector campaigns again.
func (a *sdkAgent) goElector(ctx context.Context, url string) {
	c, err := client.New(url, client.Config{})
	if err != nil {
		a.run.unexpected("go SDK agent: %v", err)
		return
	}
	for ctx.Err() == nil {
		e, err := c.NewElector(a.name, client.ElectorConfig{Holder: a.holder, Priority: sdkPriority,
			Callbacks: client.LeaderCallbacks{OnStartedLeading: func(lctx context.Context) {
				token, _ := client.TokenFromContext(lctx)
				a.leading(time.Now())
				t := time.NewTimer(200*time.Millisecond + rand.N(1300*time.Millisecond))
				defer t.Stop()
				select {
				case <-lctx.Done():
				case <-t.C: // returning resigns
				}
				a.stopped(token, time.Now())
			}}})
		if err == nil {
			err = e.Run(ctx)
		}
		if err != nil {
			a.run.stats.add("go SDK agent: " + err.Error())
			pause(ctx, 500*time.Millisecond)
		}
	}
}

// process starts an agent process and reads its lines; stop ends it (a
// stop line, then SIGKILL after 20 s) and says how it exited.
func (a *sdkAgent) process(argv, env []string) (stop func() error, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	trace := a.run.traces.writer(a.holder)
	stderr := &e2e.SyncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		a.read(stdout, trace)
		done <- cmd.Wait()
	}()
	return func() error {
		_, _ = io.WriteString(stdin, "stop\n")
		_ = stdin.Close()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			err = fmt.Errorf("did not stop within 20 s: %w", <-done)
		}
		if err != nil {
			tail := stderr.String()
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("%w; stderr: %s", err, tail)
		}
		return nil
	}, nil
}

// read turns the agent's lines into terms.
func (a *sdkAgent) read(r io.Reader, trace func(string)) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m struct {
			Step  string `json:"step"`
			Token int64  `json:"token"`
			Mono  int64  `json:"mono,string"`
		}
		line := sc.Text()
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Mono == 0 {
			a.run.unexpected("%s SDK agent wrote %q", a.lang, line)
			continue
		}
		at := fromMono(m.Mono)
		trace(at.UTC().Format("15:04:05.000000") + " " + line)
		switch m.Step {
		case "leading":
			a.leading(at)
		case "stopped":
			a.stopped(m.Token, at)
		default:
			a.run.unexpected("%s SDK agent wrote %q", a.lang, line)
		}
	}
}

// monoNow reads CLOCK_MONOTONIC, the clock of Python's time.monotonic
// and Node's process.hrtime on Linux.
func monoNow() time.Duration {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// fromMono returns the time (with this process's monotonic reading) that
// a CLOCK_MONOTONIC reading in nanoseconds stands for.
func fromMono(ns int64) time.Time {
	now, m := time.Now(), monoNow()
	return now.Add(time.Duration(ns) - m)
}

// repoRoot returns the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// tsStale reports whether built is missing or older than a file under src.
func tsStale(built, src string) bool {
	st, err := os.Stat(built)
	if err != nil {
		return true
	}
	stale := false
	_ = filepath.WalkDir(src, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(st.ModTime()) {
			stale = true
			return filepath.SkipAll
		}
		return nil
	})
	return stale
}
