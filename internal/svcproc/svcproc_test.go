package svcproc_test

import (
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/svcproc"
)

// TestStartProbeAndStop: Start runs the binary on a free port and returns
// once the probe answers 200; the process answers there, its CPU time and
// memory read from /proc, and Stop ends it.
func TestStartProbeAndStop(t *testing.T) {
	p, err := svcproc.Start(t.Context(), svcproc.Options{Bin: e2e.Binary(t), Probe: "/readyz",
		Env: []string{"LEASESVC_BACKEND=memory", "LEASESVC_AUTH=none", "LEASESVC_LISTEN=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(syscall.SIGKILL, 0)
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") || p.URL != "http://"+p.Addr {
		t.Fatalf("URL %q, Addr %q", p.URL, p.Addr)
	}
	resp, err := http.Get(p.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	if rss, err := svcproc.RSS(p.Pid()); err != nil || rss < 1<<20 {
		t.Fatalf("RSS %d, %v: want at least 1 MiB", rss, err)
	}
	if _, err := svcproc.CPUTime(p.Pid()); err != nil {
		t.Fatal(err)
	}
	p.Stop(syscall.SIGTERM, 10*time.Second)
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before the process ended")
	}
}

// TestStartReportsAnEarlyExit: a binary that exits at once is reported as
// such, not waited on until the probe's 30 s run out.
func TestStartReportsAnEarlyExit(t *testing.T) {
	_, err := svcproc.Start(t.Context(), svcproc.Options{Bin: "/bin/false", Probe: "/readyz"})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("err %v, want an exit during start-up", err)
	}
}

// TestCPUTimeAndRSSOfThisProcess: both read this process's /proc entries;
// an unknown pid is an error.
func TestCPUTimeAndRSSOfThisProcess(t *testing.T) {
	if rss, err := svcproc.RSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("RSS %d, %v", rss, err)
	}
	if _, err := svcproc.CPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := svcproc.RSS(1 << 30); err == nil {
		t.Fatal("RSS of no process: no error")
	}
}
