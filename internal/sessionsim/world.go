package sessionsim

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// recentEvents is how many events an instance's hub keeps for watch
// streams that resume (none do here).
const recentEvents = 16

// URL is the address every agent dials: the load balancer, which sends
// each new connection to the next instance in turn (Route points it at
// one).
const URL = "http://lb.localhost"

// Config describes a simulated deployment.
type Config struct {
	// Instances is how many instances share the backend.
	Instances int
	// Window is the agents' session window.
	Window time.Duration
	// LeaseTTL is the instances' session.Config.LeaseTTL.
	LeaseTTL time.Duration
	// Rates are the rates of the instances' clocks against the bubble's
	// (1 where missing).
	Rates []float64
	// Latencies are the instances' one-way latencies: of the network to
	// and from their agents, of the events that reach them, and of their
	// calls to the backend, each way (0 where missing).
	Latencies []time.Duration
}

// World is a simulated deployment inside a synctest bubble: instances
// (each a real session.Registry behind a real httpapi handler and
// net/http server) over one lease.Manager and memory backend, agents
// (internal/rawsession) and candidates, joined by an in-memory network
// whose faults the simulation drives. Build it, act on it, and Close it,
// all in one bubble.
type World struct {
	cfg   Config
	start time.Time
	Store *Store
	M     *lease.Manager
	check *Checker
	ctx   context.Context
	stop  context.CancelFunc
	// lifted is closed when Close lifts the faults: the late answers and
	// the stalls under way end.
	lifted chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex // the network, the instances' pauses and holds, the agents
	Insts  []*Instance
	conns  []*Conn
	route  int
	agents []*Agent

	logMu sync.Mutex
	lines []line
}

// line is a line of the trace, formatted only when read.
type line struct {
	at     time.Duration
	format string
	args   []any
}

// Instance is one instance of the service.
type Instance struct {
	w     *World
	K     int
	Clock *Clock
	Reg   *session.Registry
	hub   *hub.Hub
	srv   *http.Server
	ln    *listener
	cond  *sync.Cond // on World.mu: what waits for the instance to wake
	// Latency is the instance's one-way latency (Config.Latencies).
	Latency time.Duration
	paused  bool
	holdIn  bool // frames to it wait, on every connection
	events  []event
	done    bool        // the event forwarder stops
	lates   []lateRule  // answers of the backend that come late (Late)
	stalls  []stallRule // answers that stall before they are queued (Stall)
}

// event is an event of the backend on its way to an instance.
type event struct {
	ev lease.Event
	at time.Time // when it arrives
}

// Agent is an agent under test: the real rawsession.Agent, and its Spec.
type Agent struct {
	*rawsession.Agent
	Spec   *Spec
	tr     *http.Transport
	opened bool
}

// NewWorld builds a deployment; call it inside a synctest bubble.
func NewWorld(cfg Config) (*World, error) {
	w := &World{cfg: cfg, start: time.Now(), lifted: make(chan struct{})}
	w.check = newChecker(w)
	w.ctx, w.stop = context.WithCancel(context.Background())
	w.Store = newStore(w)
	var err error
	w.M, err = lease.NewManager(w.Store, lease.Config{OnChange: w.publish})
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for k := range cfg.Instances {
		in := &Instance{w: w, K: k, hub: hub.NewWithRecent(recentEvents)}
		in.cond = sync.NewCond(&w.mu)
		in.ln = &listener{in: in, cond: sync.NewCond(&w.mu)}
		rate := 1.0
		if k < len(cfg.Rates) {
			rate = cfg.Rates[k]
		}
		if k < len(cfg.Latencies) {
			in.Latency = cfg.Latencies[k]
		}
		in.Clock = &Clock{in: in, Rate: rate, t0: time.Now()}
		in.Reg, err = newRegistry(gate{in: in, b: session.Manager{M: w.M}},
			session.Config{LeaseTTL: cfg.LeaseTTL, Events: in.hub, Logger: quiet}, in.Clock)
		if err != nil {
			return nil, err
		}
		// Providers of their own: the global ones keep every instrument,
		// and so every world, for ever.
		h, err := httpapi.New(w.M, httpapi.Config{Logger: quiet, Events: in.hub, Sessions: in.Reg, Proofs: signer{in},
			TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
		if err != nil {
			return nil, err
		}
		in.srv = &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
		w.Insts = append(w.Insts, in)
		go func() { _ = in.srv.Serve(in.ln) }()
		go in.forward()
	}
	return w, nil
}

// publish hands an event of the backend to every instance, as Pub/Sub
// would, after the instance's latency; a paused instance reads it when it
// wakes.
func (w *World) publish(ev lease.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, in := range w.Insts {
		in.events = append(in.events, event{ev: ev, at: now.Add(in.Latency)})
		in.cond.Broadcast()
	}
}

// forward publishes the instance's events on its hub, in order, as they
// arrive while it is awake.
func (in *Instance) forward() {
	w := in.w
	for {
		w.mu.Lock()
		for !in.done && (in.paused || len(in.events) == 0) {
			in.cond.Wait()
		}
		if in.done {
			w.mu.Unlock()
			return
		}
		e := in.events[0]
		if d := time.Until(e.at); d > 0 {
			w.mu.Unlock()
			time.Sleep(d)
			continue
		}
		in.events = in.events[1:]
		w.mu.Unlock()
		in.hub.Publish(e.ev)
	}
}

// awaitAwake returns once the instance is not paused.
func (in *Instance) awaitAwake() {
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	for in.paused {
		in.cond.Wait()
	}
}

// Pause stops instance k as SIGSTOP would: it reads no frame, writes
// nothing (to its sockets or the backend), accepts no connection, and no
// timer of its clock fires, until Wake.
func (w *World) Pause(k int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Insts[k].paused = true
	w.logf("instance %d paused", k)
}

// Wake resumes instance k.
func (w *World) Wake(k int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.Insts[k]
	if !in.paused {
		return
	}
	in.paused = false
	w.logf("instance %d wakes", k)
	for _, c := range w.conns {
		if c.Inst == in && c.server.pending {
			c.server.closeLocked()
		}
	}
	w.broadcast(in)
}

// broadcast wakes whatever waits on in; w.mu held.
func (w *World) broadcast(in *Instance) {
	in.cond.Broadcast()
	in.ln.cond.Broadcast()
	for _, c := range w.conns {
		if c.Inst == in {
			c.up.cond.Broadcast()
			c.down.cond.Broadcast()
		}
	}
}

// Route sends the next connection dialled to instance k (and the one
// after to k+1, in turn).
func (w *World) Route(k int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.route = k
	w.logf("route to instance %d", k)
}

// HoldIn makes the frames to instance k wait, on its connections and on
// those dialled later, until ReleaseIn.
func (w *World) HoldIn(k int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Insts[k].holdIn = true
	for _, c := range w.conns {
		if c.Inst.K == k {
			c.up.held = true
		}
	}
	w.logf("frames to instance %d held", k)
}

// ReleaseIn delivers the frames held on the way to instance k, in order.
func (w *World) ReleaseIn(k int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Insts[k].holdIn = false
	for _, c := range w.conns {
		if c.Inst.K == k {
			c.up.held = false
			c.up.deliver()
		}
	}
	w.logf("frames to instance %d released", k)
}

// NewAgent starts an agent that holds as holder: it opens its session on
// the instance the route points at, in the background.
func (w *World) NewAgent(holder string) *Agent {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := &Agent{Spec: w.check.addSpec(holder, w.cfg.Window)}
	a.tr = &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return w.dial(ctx, a.Spec)
	}}
	a.Agent = &rawsession.Agent{URLs: []string{URL}, Window: w.cfg.Window,
		Trace: func(line string) { w.logf("agent %s: %s", holder, line) }}
	setHTTPClient(a.Agent, &http.Client{Transport: a.tr})
	w.agents = append(w.agents, a)
	w.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := a.Open(ctx); err != nil {
			w.logf("agent %s: open failed: %v", holder, err)
			return
		}
		w.mu.Lock()
		a.opened = true
		w.mu.Unlock()
	})
	return a
}

// Go runs f in the background until the world closes (ctx is cancelled then).
func (w *World) Go(f func(ctx context.Context)) {
	w.wg.Go(func() { f(w.ctx) })
}

// logf adds a line to the trace, at the bubble's time since the start.
func (w *World) logf(format string, args ...any) {
	l := line{at: time.Since(w.start), format: format, args: args}
	w.logMu.Lock()
	defer w.logMu.Unlock()
	if len(w.lines) >= maxLines {
		w.lines = append(w.lines[:0], w.lines[len(w.lines)-maxLines/2:]...)
	}
	w.lines = append(w.lines, l)
}

// maxLines bounds the trace kept.
const maxLines = 8000

// Trace returns the last n lines of the trace.
func (w *World) Trace(n int) []string {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	var out []string
	for _, l := range w.lines[max(0, len(w.lines)-n):] {
		out = append(out, fmt.Sprintf("+%.6fs ", l.at.Seconds())+fmt.Sprintf(l.format, l.args...))
	}
	return out
}

// at formats t as the bubble's time since the world began.
func (w *World) at(t time.Time) string {
	return fmt.Sprintf("+%.6fs", t.Sub(w.start).Seconds())
}

// Close ends everything in the world, so that the bubble can end: every
// fault is lifted (late answers and stalls under way included), the agents are killed, the connections cut, and the
// sessions left to die. A session still registered an hour (of the
// bubble) later is a session that never dies: Close ends it as a
// shutdown would, and reports it.
func (w *World) Close() error {
	w.Store.outage.Store(0)
	w.mu.Lock()
	w.clearLate()
	w.mu.Unlock()
	for k := range w.Insts {
		w.ReleaseIn(k)
		w.Wake(k)
	}
	w.mu.Lock()
	for _, c := range w.conns {
		c.up.held = false
		c.up.deliver()
		c.down.held = false
		c.down.deliver()
	}
	agents := append([]*Agent(nil), w.agents...)
	w.mu.Unlock()
	w.stop()
	w.wg.Wait() // the opens too: an agent is opened or never will be
	for _, a := range agents {
		if a.opened {
			a.Kill()
		}
		a.tr.CloseIdleConnections()
	}
	w.mu.Lock()
	for _, c := range w.conns {
		c.cut()
	}
	w.mu.Unlock()
	var err error
	for round := 0; ; round++ {
		// Shutdown waits for every session to leave (they die a window
		// after their agent stopped) and for their ends to be written; an
		// open or resume under way may still register one after it.
		for _, in := range w.Insts {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			in.Reg.Shutdown(ctx, context.Background())
			if ctx.Err() != nil && err == nil {
				err = fmt.Errorf("instance %d still had sessions an hour after every agent stopped", in.K)
				w.logf("%v", err)
			}
			cancel()
		}
		time.Sleep(time.Second)
		left := 0
		for _, in := range w.Insts {
			left += in.Reg.Len()
		}
		if left == 0 || round == 3 {
			break
		}
	}
	for _, in := range w.Insts {
		in.Reg.Stop()
		_ = in.srv.Close()
		w.mu.Lock()
		in.done = true
		in.cond.Broadcast()
		w.mu.Unlock()
	}
	time.Sleep(time.Minute) // what is still on its way
	return err
}
