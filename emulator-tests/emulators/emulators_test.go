package emulators

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(Main(m))
}

func TestFirestoreAnswers(t *testing.T) {
	addr := Firestore(t)
	if got := os.Getenv(FirestoreHostEnv); got != addr {
		t.Errorf("%s = %q, want %q", FirestoreHostEnv, got, addr)
	}
	if err := httpOK(t.Context(), addr); err != nil {
		t.Fatalf("Firestore emulator at %s: %v", addr, err)
	}
	if again := Firestore(t); again != addr {
		t.Errorf("second Firestore() = %q, want the same emulator %q", again, addr)
	}
}

func TestSpannerAnswers(t *testing.T) {
	addr := Spanner(t)
	if got := os.Getenv(SpannerHostEnv); got != addr {
		t.Errorf("%s = %q, want %q", SpannerHostEnv, got, addr)
	}
	if err := tcpOpen(t.Context(), addr); err != nil {
		t.Fatalf("Spanner emulator at %s: %v", addr, err)
	}
}

func TestPubSubStopRestart(t *testing.T) {
	addr := PubSub(t)
	if err := httpOK(t.Context(), addr); err != nil {
		t.Fatalf("Pub/Sub emulator at %s: %v", addr, err)
	}
	e := reg.emulator(pubsubKind)
	e.mu.Lock()
	p := e.proc
	e.mu.Unlock()
	if p == nil { // given through PUBSUB_EMULATOR_HOST: StopPubSub skips, or fails under CI=true
		StopPubSub(t)
		t.Fatal("StopPubSub returned for an emulator this process did not start")
	}
	if len(sessionMembers(p.sid)) < 2 {
		t.Fatalf("process group %d has members %v, want the supervisor and the emulator", p.sid, sessionMembers(p.sid))
	}
	StopPubSub(t)
	if err := tcpOpen(t.Context(), addr); err == nil {
		t.Fatalf("port %s still open after StopPubSub", addr)
	}
	if left := sessionMembers(p.sid); len(left) != 0 {
		t.Fatalf("processes %v of group %d left after StopPubSub", left, p.sid)
	}
	if got := os.Getenv(PubSubHostEnv); got != addr {
		t.Errorf("%s = %q after stop, want the dead %q", PubSubHostEnv, got, addr)
	}
	if got := RestartPubSub(t); got != addr {
		t.Fatalf("RestartPubSub() = %q, want the old address %q", got, addr)
	}
	if err := httpOK(t.Context(), addr); err != nil {
		t.Fatalf("restarted Pub/Sub emulator at %s: %v", addr, err)
	}
}

// helperEnv makes the test binary act as a test process that starts a fake
// emulator and is then killed.
const helperEnv = "LEASESVC_EMULATORS_HELPER"

// helperMain starts a fake emulator (a shell whose child moves to a process
// group of its own, as the gcloud wrapper does), prints its session id and
// waits to be killed.
func helperMain() int {
	k := &kind{name: "fake", id: "fake"}
	p, err := start(k, []string{"bash", "-c", "set -m; sleep 600 & wait"})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(p.sid)
	// The test kills this process (SIGKILL); an interrupt, or ten minutes,
	// ends it too, should that test have gone.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	select {
	case <-stop:
	case <-time.After(10 * time.Minute):
	}
	return 0
}

// TestEmulatorDiesWithTestProcess kills a test process with SIGKILL and
// checks that the emulator group it started goes away.
func TestEmulatorDiesWithTestProcess(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read helper output: %v", err)
	}
	sid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q, want a process group id", line)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sessionMembers(sid)) < 3 { // supervisor, bash, sleep
		if time.Now().After(deadline) {
			t.Fatalf("fake emulator session %d has members %v, want 3", sid, sessionMembers(sid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait() // killed
	deadline = time.Now().Add(5 * time.Second)
	for {
		left := sessionMembers(sid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of session %d outlived the killed test process", left, sid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recordingTB records Skip and Fatal and ends the calling goroutine, as the
// real ones do.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// TestMissingGcloud checks that without gcloud a test skips, saying what to
// install, and fails under CI=true.
func TestMissingGcloud(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(FirestoreHostEnv, "")
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			r := &registry{emus: map[*kind]*emulator{}}
			rec := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.get(rec, firestoreKind)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("get did not return without gcloud")
			}
			msg := rec.skipped
			if ci == "true" {
				msg = rec.failed
				if rec.skipped != "" {
					t.Errorf("skipped under CI=true: %s", rec.skipped)
				}
			} else if rec.failed != "" {
				t.Errorf("failed without CI: %s", rec.failed)
			}
			for _, want := range []string{"gcloud", "cloud-firestore-emulator", FirestoreHostEnv} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not mention %q", msg, want)
				}
			}
		})
	}
}

func TestProject(t *testing.T) {
	if Project() == "" {
		t.Fatal("Project() is empty")
	}
}
