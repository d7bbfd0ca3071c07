package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Overload are the overload manager's instruments (docs/operations.md):
// leasesvc.memory.in_use and leasesvc.overload.level, read at each
// collection, and leasesvc.overload.actions, counted by action and kind.
type Overload struct {
	actions  metric.Int64Counter
	registry metric.Registration
}

// NewOverload creates the instruments on mp: inUse reads the memory in use
// in bytes, level the overload level (0 normal, 1 soft, 2 hard).
func NewOverload(mp metric.MeterProvider, inUse, level func() int64) (*Overload, error) {
	meter := mp.Meter("github.com/leasesvc/leasesvc")
	o := &Overload{}
	var errs []error
	var err error
	o.actions, err = meter.Int64Counter("leasesvc.overload.actions",
		metric.WithDescription("What the overload manager did: action refuse (new work refused 503), shed (a wait, stream or socket ended) or level (the level changed), by kind."))
	errs = append(errs, err)
	used, err := meter.Int64ObservableGauge("leasesvc.memory.in_use", metric.WithUnit("By"),
		metric.WithDescription("Memory the Go runtime holds in use, as the overload manager measures it."))
	errs = append(errs, err)
	lvl, err := meter.Int64ObservableGauge("leasesvc.overload.level",
		metric.WithDescription("The overload manager's level: 0 normal, 1 soft (new work refused), 2 hard (the heaviest callers shed)."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: overload instruments: %w", err)
	}
	o.registry, err = meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(used, inUse())
		obs.ObserveInt64(lvl, level())
		return nil
	}, used, lvl)
	if err != nil {
		return nil, fmt.Errorf("telemetry: overload callback: %w", err)
	}
	return o, nil
}

// Action counts one action of the overload manager.
func (o *Overload) Action(ctx context.Context, action, kind string) {
	if o == nil {
		return
	}
	o.actions.Add(ctx, 1, metric.WithAttributes(attribute.String("action", action), attribute.String("kind", kind)))
}

// Close unregisters the gauges' callback.
func (o *Overload) Close() error {
	if o == nil {
		return nil
	}
	return o.registry.Unregister()
}
