package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/leasesvc/leasesvc/internal/cloudlog"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/telemetry"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// observability is the service's telemetry: Cloud Logging JSON logs,
// OpenTelemetry traces and metrics.
type observability struct {
	log       *slog.Logger
	providers telemetry.Providers
	metrics   *telemetry.Metrics
}

// newLogger returns the service's logger: Cloud Logging structured JSON on
// stdout, linked to traces.
func newLogger(cfg config, getenv func(string) string, stdout io.Writer) *slog.Logger {
	return slog.New(cloudlog.NewHandler(stdout, cfg.logLevel, project(getenv)))
}

// project is the Google Cloud project: LEASESVC_PROJECT, else
// GOOGLE_CLOUD_PROJECT; "" when neither is set.
func project(getenv func(string) string) string {
	if p := getenv("LEASESVC_PROJECT"); p != "" {
		return p
	}
	return getenv("GOOGLE_CLOUD_PROJECT")
}

// newObservability sets up the exporter LEASESVC_TELEMETRY names and the
// service's instruments.
func newObservability(ctx context.Context, cfg config, getenv func(string) string, stdout io.Writer, log *slog.Logger, instance string, g telemetry.Gauges) (*observability, error) {
	project := project(getenv)
	maxLeases, err := telemetry.ParseMaxLeaseSeries(getenv("LEASESVC_METRICS_LEASES"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	o := &observability{log: log}
	p, err := telemetry.Setup(ctx, telemetry.Config{
		Exporter: cfg.telemetry, ServiceName: "leasesvc", ServiceVersion: version, InstanceID: instance,
		Project: project, Stdout: stdout, Getenv: getenv,
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	o.providers = p
	if o.metrics, err = telemetry.NewMetrics(p.Meter, g, telemetry.WithMaxLeaseSeries(maxLeases)); err != nil {
		_ = p.Shutdown(ctx)
		return nil, err
	}
	return o, nil
}

// decided records a change of holding decided on this instance.
func (o *observability) decided(ev lease.Event) {
	o.metrics.Decided(context.Background(), ev)
	o.metrics.Seen(ev)
}

// shutdown flushes telemetry.
func (o *observability) shutdown(ctx context.Context) {
	if err := o.metrics.Close(); err != nil {
		o.log.Warn("telemetry: close metrics", "err", err)
	}
	if err := o.providers.Shutdown(ctx); err != nil {
		o.log.Warn("telemetry: flush", "err", err)
	}
}
