package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// The session sockets' faults: each instance's front proxy (toxiproxy),
// through which the agents' sockets reach it, and the faults injected on
// it beside the run's others (safety_late_test.go has those that act on
// one socket of one session).

// startFront starts the front proxy of an instance: agents' sockets reach
// the instance through it, so that faults can cut and delay them.
func startFront(t *testing.T, srv *toxiproxy.ApiServer, in *safetyInstance) {
	t.Helper()
	in.front = toxiproxy.NewProxy(srv, fmt.Sprintf("front-%d", in.idx), "127.0.0.1:0", hostOf(t, in.url()))
	if err := in.front.Start(); err != nil {
		t.Fatalf("start front proxy %d: %v", in.idx, err)
	}
	// Read once, before any contender runs: a restart of the proxy writes
	// Listen again (the same address) while the contenders dial.
	in.frontURL = "http://" + in.front.Listen
	t.Cleanup(in.front.Stop)
}

// retargetFront points an instance's front proxy at its (restarted)
// process.
func retargetFront(t *testing.T, in *safetyInstance) {
	t.Helper()
	if in.front == nil {
		return
	}
	in.frontMu.Lock()
	defer in.frontMu.Unlock()
	in.front.Stop()
	in.front.Lock()
	in.front.Upstream = hostOf(t, in.url())
	in.front.Unlock()
	if err := in.front.Start(); err != nil {
		t.Fatalf("restart front proxy %d: %v", in.idx, err)
	}
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("instance URL %q: %v", u, err)
	}
	return p.Host
}

// sessionFault is a fault of the agents' sockets to one instance.
type sessionFault struct {
	name string
	do   func(r *safetyRun, in *safetyInstance) error
	// once: injected in the first round only (it is long).
	once bool
	// alone: it needs the run's other faults out of the way, and takes
	// safetyRun.mainMu itself; the others do not run during a pause.
	alone bool
}

// sessionFaults are injected, in turn over the instances, beside the
// run's other faults (injectSessionFaults) when it has session contenders.
var sessionFaults = []sessionFault{
	{name: "session sockets delayed 150±100 ms each way for 3s", do: func(r *safetyRun, in *safetyInstance) error {
		for _, dir := range []string{"upstream", "downstream"} {
			spec := fmt.Sprintf(`{"name":"sdelay-%s","type":"latency","stream":%q,"attributes":{"latency":150,"jitter":100}}`, dir, dir)
			if _, err := in.front.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
				return err
			}
		}
		faultWait(r.ctx, 3*time.Second)
		return errors.Join(in.front.Toxics.RemoveToxic(context.Background(), "sdelay-upstream"),
			in.front.Toxics.RemoveToxic(context.Background(), "sdelay-downstream"))
	}},
	{name: "session sockets cut (front proxy stopped) for 2s", do: func(r *safetyRun, in *safetyInstance) error {
		in.front.Stop()
		faultWait(r.ctx, 2*time.Second)
		return in.front.Start()
	}},
	{name: "session sockets blackholed for 2s (bytes dropped)", do: func(r *safetyRun, in *safetyInstance) error {
		if _, err := in.front.Toxics.AddToxicJson(strings.NewReader(`{"name":"sblackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)); err != nil {
			return err
		}
		faultWait(r.ctx, 2*time.Second)
		return in.front.Toxics.RemoveToxic(context.Background(), "sblackhole")
	}},
	{name: "late frames: a socket's renew and the next socket's resume held at the front until the agent resumed elsewhere, then delivered; the resume that took the session replayed on new sockets",
		do: lateFrames, once: true, alone: true},
	{name: "resumes replayed on new sockets", do: replayResumes},
}

// injectSessionFaults injects sessionFaults one after another, with 1 s
// between them, until the fault-free tail before end; it returns what it
// did and the first error.
func (r *safetyRun) injectSessionFaults(end time.Time) ([]string, error) {
	start := time.Now()
	var log []string
	for i := 0; ; i++ {
		if !faultWait(r.ctx, time.Second) {
			return log, nil
		}
		f := sessionFaults[i%len(sessionFaults)]
		need := 3 * time.Second
		if f.once && i >= len(sessionFaults) {
			continue
		} else if f.once {
			need = lateNeed
		}
		if time.Until(end) < need+faultTail {
			if time.Until(end) < 3*time.Second+faultTail {
				return log, nil
			}
			continue
		}
		in := r.insts[(i+1)%len(r.insts)]
		at := time.Since(start)
		var err error
		if f.alone {
			err = f.do(r, in)
		} else {
			r.pauseMu.Lock()  // not during a pause
			in.frontMu.Lock() // not while a restart retargets it
			err = f.do(r, in)
			in.frontMu.Unlock()
			r.pauseMu.Unlock()
		}
		if err != nil {
			return log, fmt.Errorf("%s (instance %d): %w", f.name, in.idx, err)
		}
		log = append(log, fmt.Sprintf("+%v %s (instance %d)", at.Round(100*time.Millisecond), f.name, in.idx))
	}
}
