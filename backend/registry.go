package backend

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Setting declares one setting of a backend: the service's -h output, its
// configuration errors and README's settings table are made from these.
type Setting struct {
	// Env is the environment variable, e.g. LEASESVC_SPANNER_DATABASE.
	Env string
	// Default is the value used when Env is unset, as people read it ("" for
	// none: the setting is required or optional without a default).
	Default string
	// Usage says what the setting means, in one line (Markdown code spans
	// allowed).
	Usage string
}

// OpenOptions is what the service passes to every Opener.
type OpenOptions struct {
	// OnRetry, if set, is called each time an Update retries an attempt,
	// with the reason, for a metric (see Hints.OnRetry). A backend whose
	// Store has no retry reasons of its own may ignore it.
	OnRetry func(reason string)
	// Logger, if set, is where the backend logs (the service's logger, so
	// its lines have the service's format); nil means slog.Default().
	Logger *slog.Logger
}

// Opener is a registered backend, as gocloud.dev's URL openers: the
// service picks one by the name in LEASESVC_BACKEND and never names a
// backend itself.
type Opener struct {
	// Name selects the backend (LEASESVC_BACKEND=Name).
	Name string
	// Summary says in one line what the backend is and where it keeps the
	// leases.
	Summary string
	// Settings are the backend's own settings, all read through getenv.
	Settings []Setting
	// Open opens the Store from its settings. It checks them first and
	// names the setting at fault; it may do I/O (a schema check) within
	// ctx.
	Open func(ctx context.Context, getenv func(string) string, o OpenOptions) (Opened, error)
}

// Opened is what an Opener opened: the Store, how the backend asks the
// service's Loop over it to be driven, and how to close it.
type Opened struct {
	// Store is the driver.
	Store Store
	// Loop holds the backend's loop settings, from its own settings
	// (WithReadFirst, WithOneAtATime, WithMaxAttempts, WithRetryHook,
	// WithMaxBatch), which the service passes to its Loop (through
	// lease.NewManager), over what the Store declares (Hinter); the Store
	// itself never acts on them. Nil asks for nothing more.
	Loop []LoopOption
	// Close releases what Open acquired; it is never nil.
	Close func() error
}

var registry struct {
	mu      sync.Mutex
	openers map[string]Opener
}

// Register makes a backend available by name. A backend package calls it
// from its init function; registering a name twice panics.
func Register(o Opener) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if o.Name == "" || o.Open == nil {
		panic("backend: Register: an Opener needs a Name and an Open function")
	}
	if _, dup := registry.openers[o.Name]; dup {
		panic(fmt.Sprintf("backend: Register: %q registered twice", o.Name))
	}
	if registry.openers == nil {
		registry.openers = map[string]Opener{}
	}
	registry.openers[o.Name] = o
}

// Lookup returns the backend registered under name.
func Lookup(name string) (Opener, bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	o, ok := registry.openers[name]
	return o, ok
}

// Registered returns every registered backend, ordered by name.
func Registered() []Opener {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := make([]Opener, 0, len(registry.openers))
	for _, o := range registry.openers {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Opener) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Names returns the names of the registered backends, ordered.
func Names() []string {
	var names []string
	for _, o := range Registered() {
		names = append(names, o.Name)
	}
	return names
}

// EnvBool reads a boolean setting ("true"/"false", as strconv.ParseBool
// reads it); unset is def. An error names the variable.
func EnvBool(getenv func(string) string, key string, def bool) (bool, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: must be true or false", key, v)
	}
	return b, nil
}

// NotifierOf returns the Notifier of a Store opened from the registry,
// when its backend offers one (PostgreSQL's LISTEN/NOTIFY): the service
// then carries events between its instances without a message bus.
func NotifierOf(s Store) (Notifier, bool) {
	n, ok := s.(Notifier)
	return n, ok
}
