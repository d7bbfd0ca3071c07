// Package overload is an instance's overload manager (docs/contract.md
// §16), in the manner of Envoy's: it measures the process's memory from
// the Go runtime's own figures (runtime/metrics) rather than counting
// known buffers, so that no allocation site the memory budget does not
// know can grow the instance past its thresholds.
//
// Past the soft threshold the instance refuses new work (the handler asks
// Level) and sheds what callers hold open and waiting, oldest first:
// waiting acquires and streams end with their error or overflow event.
// Past the hard threshold it also closes everything the heaviest callers
// (by their memory-budget charge) hold, session sockets included, one
// caller a sample. Nothing here releases a holding: a session whose
// socket is closed lives on for its window and is resumed elsewhere.
package overload

import (
	"cmp"
	"context"
	"errors"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Level is how loaded the instance is.
type Level int32

// The levels, in order.
const (
	// Normal: below the soft threshold.
	Normal Level = iota
	// Soft: new work is refused and waits and streams are shed.
	Soft
	// Hard: the heaviest callers' connections are closed too.
	Hard
)

// String names the level as metrics and audit lines do.
func (l Level) String() string {
	switch l {
	case Soft:
		return "soft"
	case Hard:
		return "hard"
	}
	return "normal"
}

// Kinds of what a caller holds, as Register takes them. Soft sheds waits
// and streams; Hard sheds every kind of the heaviest callers.
const (
	KindWait   = "wait"   // a waiting acquire (REST or session)
	KindStream = "stream" // a :watch stream
	KindSocket = "socket" // a session socket
)

// Defaults of Config.
const (
	DefaultInterval = 100 * time.Millisecond
	// DefaultSoft and DefaultHard suit Cloud Run's 512 MiB instance: the
	// memory the Go runtime holds in use (heap objects, stacks and its own
	// structures; not what it has freed or returned) is kept under 384 MiB,
	// with the process's binary and the kernel's share of the rest.
	DefaultSoft = 288 << 20
	DefaultHard = 336 << 20
	// shedFraction: at each sample past Soft, up to 1/shedFraction of the
	// waits and streams (at least one) are shed, oldest first.
	shedFraction = 8
)

// Config configures a Manager.
type Config struct {
	// Soft and Hard are the thresholds in bytes of memory in use
	// (Soft < Hard; zero: the defaults).
	Soft, Hard int64
	// Interval is how often memory is sampled (zero: DefaultInterval).
	Interval time.Duration
	// Sample reads the memory in use; nil reads runtime/metrics
	// (InUse). Tests set it.
	Sample func() int64
	// Heaviest returns callers by what the memory budget charges them,
	// heaviest first (membudget.Budget.Heaviest); nil: Hard sheds the
	// callers holding the most entries.
	Heaviest func(n int) []string
	// OnLevel is called when the level changes; OnShed for each entry
	// shed (metrics and audit lines). Either may be nil.
	OnLevel func(from, to Level, inUse int64)
	OnShed  func(at Level, caller, kind string, inUse int64)
	// OnRefuse is called for each request refused as new work (Refused).
	OnRefuse func(op string)
}

// Manager samples memory and sheds load. Its methods are safe for
// concurrent use; a nil *Manager is always Normal and sheds nothing.
type Manager struct {
	cfg   Config
	level atomic.Int32
	inUse atomic.Int64

	mu      sync.Mutex
	seq     uint64
	entries map[uint64]*entry
}

type entry struct {
	caller, kind string
	seq          uint64
	shed         func(Level)
}

// New returns a Manager, or an error naming a bad threshold.
func New(cfg Config) (*Manager, error) {
	cfg.Soft = cmp.Or(cfg.Soft, DefaultSoft)
	cfg.Hard = cmp.Or(cfg.Hard, DefaultHard)
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	if cfg.Soft <= 0 || cfg.Hard <= cfg.Soft {
		return nil, errors.New("overload: want 0 < soft threshold < hard threshold")
	}
	if cfg.Sample == nil {
		cfg.Sample = InUse
	}
	return &Manager{cfg: cfg, entries: map[uint64]*entry{}}, nil
}

// Level is the level at the last sample.
func (m *Manager) Level() Level {
	if m == nil {
		return Normal
	}
	return Level(m.level.Load())
}

// InUseBytes is the memory in use at the last sample.
func (m *Manager) InUseBytes() int64 {
	if m == nil {
		return 0
	}
	return m.inUse.Load()
}

// Thresholds returns the soft and hard thresholds.
func (m *Manager) Thresholds() (soft, hard int64) {
	if m == nil {
		return 0, 0
	}
	return m.cfg.Soft, m.cfg.Hard
}

// Register records something caller holds open that can be shed: shed
// ends it (it is called at most once, off the caller's goroutine, with the
// level that shed it). The returned function unregisters it; call it
// when the thing ends by itself.
func (m *Manager) Register(caller, kind string, shed func(Level)) (unregister func()) {
	if m == nil {
		return func() {}
	}
	m.mu.Lock()
	m.seq++
	e := &entry{caller: caller, kind: kind, seq: m.seq, shed: shed}
	m.entries[e.seq] = e
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.entries, e.seq)
		m.mu.Unlock()
	}
}

// Refused records that new work (op: acquire, get, list, watch, session)
// was refused because of the level.
func (m *Manager) Refused(op string) {
	if m != nil && m.cfg.OnRefuse != nil {
		m.cfg.OnRefuse(op)
	}
}

// Run samples every Interval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Check()
		}
	}
}

// Check samples memory once, moves the level and sheds what the level
// calls for. A level is left only once memory falls below 15/16 of its
// threshold, so that it does not flap around one.
func (m *Manager) Check() Level {
	used := m.cfg.Sample()
	m.inUse.Store(used)
	from := Level(m.level.Load())
	to := from
	switch {
	case used >= m.cfg.Hard:
		to = Hard
	case used >= m.cfg.Soft:
		to = max(Soft, min(from, Hard))
		if from == Hard && used < m.cfg.Hard*15/16 {
			to = Soft
		}
	case used < m.cfg.Soft*15/16:
		to = Normal
	default:
		to = min(from, Soft)
	}
	if to != from {
		m.level.Store(int32(to))
		if m.cfg.OnLevel != nil {
			m.cfg.OnLevel(from, to, used)
		}
	}
	if to >= Soft {
		m.shed(to, used)
	}
	return to
}

// shed ends, oldest first, a fraction of the waits and streams, and at
// Hard everything of the heaviest caller.
func (m *Manager) shed(at Level, used int64) {
	m.mu.Lock()
	var soft []*entry
	byCaller := map[string]int{}
	for _, e := range m.entries {
		if e.kind != KindSocket {
			soft = append(soft, e)
		}
		byCaller[e.caller]++
	}
	slices.SortFunc(soft, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	victims := soft[:min(len(soft), max(1, len(soft)/shedFraction))]
	if at == Hard {
		if heavy := m.heaviest(byCaller); heavy != "" {
			for _, e := range m.entries {
				if e.caller == heavy && !slices.Contains(victims, e) {
					victims = append(victims, e)
				}
			}
		}
	}
	for _, e := range victims {
		delete(m.entries, e.seq)
	}
	m.mu.Unlock()
	for _, e := range victims {
		if m.cfg.OnShed != nil {
			m.cfg.OnShed(at, e.caller, e.kind, used)
		}
		go e.shed(at)
	}
}

// heaviest is the caller to shed at Hard: the heaviest by the memory
// budget among those holding entries, else the one holding the most;
// m.mu held.
func (m *Manager) heaviest(byCaller map[string]int) string {
	if m.cfg.Heaviest != nil {
		for _, c := range m.cfg.Heaviest(len(byCaller) + 1) {
			if byCaller[c] > 0 {
				return c
			}
		}
	}
	best, n := "", 0
	for c, k := range byCaller {
		if k > n || k == n && c < best {
			best, n = c, k
		}
	}
	return best
}

// inUseMetrics are the runtime/metrics samples InUse reads.
var inUseMetrics = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
}

// InUse is the memory the Go runtime holds in use: everything it has
// mapped, less the heap it holds free or has returned to the system.
// Heap objects not yet collected count: the soft memory limit
// (GOMEMLIMIT) keeps them few near the thresholds.
func InUse() int64 {
	s := make([]metrics.Sample, len(inUseMetrics))
	for i, n := range inUseMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	v := int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64()) - int64(s[2].Value.Uint64())
	return max(v, 0)
}
