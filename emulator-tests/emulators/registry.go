package emulators

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// reg holds the emulators of this test process.
var reg = &registry{emus: map[*kind]*emulator{}}

// registry is the set of emulators of one test process.
type registry struct {
	mu   sync.Mutex
	emus map[*kind]*emulator

	sdkOnce sync.Once
	sdkRoot string // "" when gcloud cannot be found
	sdkErr  error
}

// emulator is the state of one kind of emulator in this process.
type emulator struct {
	mu       sync.Mutex
	addr     string   // host:port; set once the emulator is had
	port     int      // the port it was started on
	external bool     // given through its environment variable
	proc     *process // nil when not running under this process
	// fatal is a start failure, reported again to every later caller;
	// missing, what is not installed.
	fatal   error
	missing string
}

func (r *registry) emulator(k *kind) *emulator {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.emus[k]
	if !ok {
		e = &emulator{}
		r.emus[k] = e
	}
	return e
}

// sdk returns the Cloud SDK root, asking gcloud once.
func (r *registry) sdk() (string, error) {
	r.sdkOnce.Do(func() {
		if _, err := exec.LookPath("gcloud"); err != nil {
			r.sdkErr = fmt.Errorf("gcloud is not on PATH: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "gcloud", "info", "--format=value(installation.sdk_root)").Output()
		if err != nil {
			r.sdkErr = fmt.Errorf("gcloud info: %w", err)
			return
		}
		r.sdkRoot = strings.TrimSpace(string(out))
		if r.sdkRoot == "" {
			r.sdkErr = fmt.Errorf("gcloud info reported no SDK root")
		}
	})
	return r.sdkRoot, r.sdkErr
}

// get returns the address of k's emulator, starting it if needed.
func (r *registry) get(t testing.TB, k *kind) string {
	t.Helper()
	e := r.emulator(k)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.fatal != nil:
		t.Fatal(e.fatal)
	case e.missing != "":
		unavailable(t, e.missing)
	case e.addr != "":
		return e.addr
	}
	if v := os.Getenv(k.env); v != "" {
		e.addr, e.external = v, true
		return v
	}
	root, err := r.sdk()
	if err != nil {
		e.missing = fmt.Sprintf("%s (%v)", k.install, err)
		unavailable(t, e.missing)
	}
	if what := k.missing(root); what != "" {
		e.missing = fmt.Sprintf("%s (missing: %s under %s)", k.install, what, root)
		unavailable(t, e.missing)
	}
	port, err := freePort()
	if err != nil {
		e.fatal = err
		t.Fatal(err)
	}
	if err := e.start(k, root, port); err != nil {
		e.fatal = err
		t.Fatal(err)
	}
	return e.addr
}

// start starts k on port and waits until it answers; e.mu must be held.
func (e *emulator) start(k *kind, root string, port int) error {
	argv, err := k.command(root, port)
	if err != nil {
		return fmt.Errorf("emulators: %s command: %w", k.name, err)
	}
	addr := hostPort(port)
	p, err := start(k, argv)
	if err != nil {
		return err
	}
	if err := p.waitReady(k, addr); err != nil {
		if stopErr := p.stop(addr); stopErr != nil {
			slog.Warn("emulators: stop after failed start", "emulator", k.name, "err", stopErr)
		}
		return err
	}
	if err := os.Setenv(k.env, addr); err != nil {
		return fmt.Errorf("emulators: set %s: %w", k.env, err)
	}
	e.addr, e.port, e.proc = addr, port, p
	if k.warm != nil {
		if err := k.warm(); err != nil {
			return fmt.Errorf("%w\n%s", err, p.logTail())
		}
	}
	return nil
}

// stop stops k's emulator; see StopPubSub.
func (r *registry) stop(t testing.TB, k *kind) {
	t.Helper()
	e := r.emulator(k)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.external:
		unavailable(t, fmt.Sprintf("cannot stop the %s emulator at %s=%s: it was not started by this test process; unset %s to run this test", k.name, k.env, e.addr, k.env))
	case e.addr == "":
		t.Fatalf("emulators: stop %s: no emulator started (call %s first)", k.name, k.name)
	case e.proc == nil:
		return // already stopped
	}
	if err := e.proc.stop(e.addr); err != nil {
		t.Fatal(err)
	}
	removeLog(e.proc)
	e.proc = nil
}

// restart starts k's emulator again on its old port; see RestartPubSub.
func (r *registry) restart(t testing.TB, k *kind) string {
	t.Helper()
	e := r.emulator(k)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.external:
		unavailable(t, fmt.Sprintf("cannot restart the %s emulator at %s=%s: it was not started by this test process; unset %s to run this test", k.name, k.env, e.addr, k.env))
	case e.addr == "":
		t.Fatalf("emulators: restart %s: no emulator started (call %s first)", k.name, k.name)
	case e.proc != nil:
		return e.addr
	}
	root, err := r.sdk()
	if err != nil {
		t.Fatalf("emulators: restart %s: %v", k.name, err)
	}
	// The old port may take a moment to be free again; try a few times.
	for attempt := 1; ; attempt++ {
		err = e.start(k, root, e.port)
		if err == nil {
			return e.addr
		}
		if attempt == 3 {
			t.Fatalf("emulators: restart %s on port %d: %v", k.name, e.port, err)
		}
		time.Sleep(time.Second)
	}
}

// stopAll stops every emulator this process started. It keeps the logs of
// a failed run and says where they are.
func (r *registry) stopAll(passed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.emus {
		e.mu.Lock()
		if p := e.proc; p != nil {
			if err := p.stop(e.addr); err != nil {
				slog.Warn("emulators: stop", "emulator", k.name, "err", err)
			}
			if passed {
				removeLog(p)
			} else {
				slog.Info("emulators: log kept", "emulator", k.name, "path", p.logPath)
			}
			e.proc = nil
		}
		e.mu.Unlock()
	}
}

func removeLog(p *process) {
	if err := os.Remove(p.logPath); err != nil {
		slog.Warn("emulators: remove log", "path", p.logPath, "err", err)
	}
}
