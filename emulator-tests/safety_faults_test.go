package emulatortests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// Fault timings of a safety run.
const (
	faultQuiet = 2 * time.Second // between two faults
	faultTail  = 8 * time.Second // the end of a run is free of faults
)

// fault is one kind of fault the safety run injects.
type fault struct {
	name string
	// need is about how long it takes, to tell whether it fits before the
	// fault-free tail.
	need time.Duration
	do   func(t *testing.T, r *safetyRun, in *safetyInstance, client *pubsub.Client)
}

// faults are injected in this order, round robin over the instances.
var faults = []fault{
	{"backend delayed 150±100 ms each way for 4s", 4 * time.Second, func(t *testing.T, _ *safetyRun, in *safetyInstance, _ *pubsub.Client) {
		for _, dir := range []string{"upstream", "downstream"} {
			addToxic(t, in, fmt.Sprintf(`{"name":"delay-%s","type":"latency","stream":%q,"attributes":{"latency":150,"jitter":100}}`, dir, dir))
		}
		faultWait(t.Context(), 4*time.Second)
		removeToxic(t, in, "delay-upstream")
		removeToxic(t, in, "delay-downstream")
	}},
	{"SIGKILL and restart", 5 * time.Second, func(t *testing.T, _ *safetyRun, in *safetyInstance, _ *pubsub.Client) {
		in.mu.Lock()
		old := in.svc
		in.mu.Unlock()
		old.Kill()
		if !faultWait(t.Context(), 500*time.Millisecond) { // down, then restarted
			return
		}
		svc := e2e.StartService(t, in.env)
		in.mu.Lock()
		in.svc = svc
		in.mu.Unlock()
		retargetFront(t, in)
	}},
	{"paused (SIGSTOP, then SIGCONT) while session agents hold through it", safetyPause + 8*time.Second, pauseInstance},
	{"backend connection cut (refused) for 3s", 3 * time.Second, func(t *testing.T, _ *safetyRun, in *safetyInstance, _ *pubsub.Client) {
		in.proxy.Stop()
		faultWait(t.Context(), 3*time.Second)
		if err := in.proxy.Start(); err != nil {
			t.Fatalf("restore the fault proxy of instance %d: %v", in.idx, err)
		}
	}},
	{"Pub/Sub emulator stopped for 3s and restarted", 20 * time.Second, func(t *testing.T, r *safetyRun, _ *safetyInstance, client *pubsub.Client) {
		emulators.StopPubSub(t)
		faultWait(t.Context(), 3*time.Second)
		emulators.RestartPubSub(t)
		createTopic(t, client, r.cfg.topic) // the restarted emulator has forgotten it
	}},
	{"backend blackholed for 3s (bytes dropped, connections closed after 2.5s)", 3 * time.Second, func(t *testing.T, _ *safetyRun, in *safetyInstance, _ *pubsub.Client) {
		addToxic(t, in, `{"name":"blackhole","type":"timeout","stream":"upstream","attributes":{"timeout":2500}}`)
		faultWait(t.Context(), 3*time.Second)
		removeToxic(t, in, "blackhole")
	}},
}

// injectFaults injects faults one after another, with faultQuiet between
// them, until the next would run into the last faultTail before end. It
// returns what it did, with the times relative to its start.
func (r *safetyRun) injectFaults(t *testing.T, end time.Time, client *pubsub.Client) []string {
	t.Helper()
	start := time.Now()
	var log []string
	for i := 0; ; i++ {
		if !faultWait(r.ctx, faultQuiet) {
			return log
		}
		all := faults
		if r.cfg.faults != nil {
			all = r.cfg.faults
		}
		f := all[i%len(all)]
		if time.Until(end) < f.need+faultTail {
			return log
		}
		in := r.insts[i%len(r.insts)]
		var at time.Duration
		func() {
			r.mainMu.Lock() // not beside a session fault that needs the others out of the way
			defer r.mainMu.Unlock()
			at = time.Since(start)
			f.do(t, r, in, client)
		}()
		log = append(log, fmt.Sprintf("+%v %s (instance %d, %v)", at.Round(100*time.Millisecond), f.name, in.idx, (time.Since(start)-at).Round(100*time.Millisecond)))
	}
}

func addToxic(t *testing.T, in *safetyInstance, spec string) {
	t.Helper()
	if _, err := in.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("add toxic %s to instance %d: %v", spec, in.idx, err)
	}
}

func removeToxic(t *testing.T, in *safetyInstance, name string) {
	t.Helper()
	if err := in.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("remove toxic %s from instance %d: %v", name, in.idx, err)
	}
}

// leaseOfEvent returns the lease an event's data carries.
func leaseOfEvent(data map[string]any) (*lease.Lease, error) {
	raw, err := json.Marshal(data["lease"])
	if err != nil {
		return nil, fmt.Errorf("event lease: %w", err)
	}
	var w wire.Lease
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("event lease: %w", err)
	}
	l, err := w.ToLease()
	if err != nil {
		return nil, fmt.Errorf("event lease: %w", err)
	}
	return &l, nil
}
