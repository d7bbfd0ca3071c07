// Package telemetry sets up OpenTelemetry for leasesvc: traces and metrics
// exported as LEASESVC_TELEMETRY says (none, stdout or otlp), W3C trace
// context propagation, and the service's own instruments (Metrics).
//
// With otlp, the standard OTEL_EXPORTER_OTLP_* variables are honoured. On
// Cloud Run (K_SERVICE set) with no OTLP endpoint configured, traces and
// metrics go to Google Cloud's telemetry endpoint (telemetry.googleapis.com)
// over gRPC with the service's default credentials, and the resource is
// described by the GCP resource detector.
//
// On Cloud Run the resource's service.name is K_SERVICE, the Cloud Run
// service's name, so that two deployments in one project export distinct
// series: Cloud Monitoring turns service.name into the job label of the
// prometheus_target resource, and the Terraform module's alerts select their
// own deployment's job (terraform/monitoring.tf). The revision (K_REVISION)
// is the faas.version attribute the GCP detector adds.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/contrib/detectors/gcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"golang.org/x/oauth2/google"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/oauth"
)

// Config configures Setup.
type Config struct {
	// Exporter is none, stdout or otlp.
	Exporter string
	// ServiceName, ServiceVersion and InstanceID describe the resource. On
	// Cloud Run K_SERVICE replaces ServiceName (see the package doc);
	// OTEL_SERVICE_NAME, if set, replaces both.
	ServiceName, ServiceVersion, InstanceID string
	// Project is the Google Cloud project the telemetry belongs to, sent as
	// the gcp.project_id resource attribute; may be empty.
	Project string
	// Stdout receives the stdout exporter's output. Default os.Stdout.
	Stdout io.Writer
	// Getenv reads the environment (OTEL_EXPORTER_OTLP_*, K_SERVICE).
	Getenv func(string) string
}

// Providers are the tracer and meter providers Setup installed.
type Providers struct {
	// Tracer and Meter are nil-safe to use: with Exporter none they are
	// the SDK providers without exporters, so spans still carry trace IDs
	// (for log correlation) and instruments still work.
	Tracer *sdktrace.TracerProvider
	Meter  *sdkmetric.MeterProvider
}

// Shutdown flushes and stops both providers.
func (p Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.Tracer.Shutdown(ctx), p.Meter.Shutdown(ctx))
}

// Setup builds the providers, installs them and the W3C propagators as the
// globals, and returns them.
func Setup(ctx context.Context, cfg Config) (Providers, error) {
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return Providers{}, err
	}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	switch cfg.Exporter {
	case "", "none":
	case "stdout":
		te, err := stdouttrace.New(stdouttrace.WithWriter(cfg.Stdout))
		if err != nil {
			return Providers{}, fmt.Errorf("telemetry: stdout trace exporter: %w", err)
		}
		me, err := stdoutmetric.New(stdoutmetric.WithWriter(cfg.Stdout))
		if err != nil {
			return Providers{}, fmt.Errorf("telemetry: stdout metric exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		mopts = append(mopts, sdkmetric.WithReader(newPeriodicReader(me, time.Minute)))
	case "otlp":
		topt, mopt, err := otlpOptions(ctx, cfg)
		if err != nil {
			return Providers{}, err
		}
		te, err := otlptracegrpc.New(ctx, topt...)
		if err != nil {
			return Providers{}, fmt.Errorf("telemetry: otlp trace exporter: %w", err)
		}
		me, err := otlpmetricgrpc.New(ctx, mopt...)
		if err != nil {
			return Providers{}, fmt.Errorf("telemetry: otlp metric exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(te))
		mopts = append(mopts, sdkmetric.WithReader(newPeriodicReader(me, 30*time.Second)))
	default:
		return Providers{}, fmt.Errorf("LEASESVC_TELEMETRY=%q: must be none, stdout or otlp", cfg.Exporter)
	}
	p := Providers{Tracer: sdktrace.NewTracerProvider(topts...), Meter: sdkmetric.NewMeterProvider(mopts...)}
	otel.SetTracerProvider(p.Tracer)
	otel.SetMeterProvider(p.Meter)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return p, nil
}

// MaxExportBatchSize is the most data points one metric export request
// carries: the Telemetry API (telemetry.googleapis.com) refuses a request
// with more than 200 ("Maximum number of data points per request: 200",
// https://cloud.google.com/stackdriver/quotas#telemetry-api-limits), and a
// refused export loses the whole interval's points, alert metrics
// included. The periodic reader splits a larger collection into several
// requests.
const MaxExportBatchSize = 200

// newPeriodicReader exports exp's metrics every interval, in requests of at
// most MaxExportBatchSize points.
func newPeriodicReader(exp sdkmetric.Exporter, interval time.Duration) *sdkmetric.PeriodicReader {
	return sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(interval), sdkmetric.WithMaxExportBatchSize(MaxExportBatchSize))
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithAttributes(baseAttributes(cfg)...),
		resource.WithFromEnv(),
	}
	if cfg.Getenv("K_SERVICE") != "" {
		opts = append(opts, resource.WithDetectors(gcp.NewDetector()))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil // a partial resource (a detector failed) is still useful
}

// gcpProjectID is the resource attribute that names the Google Cloud project
// telemetry.googleapis.com stores the data in.
const gcpProjectID = attribute.Key("gcp.project_id")

// baseAttributes are the resource attributes leasesvc sets itself; the
// environment (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME) and, on Cloud
// Run, the GCP detector add to them.
func baseAttributes(cfg Config) []attribute.KeyValue {
	name := cfg.ServiceName
	if k := cfg.Getenv("K_SERVICE"); k != "" {
		name = k // one job label per Cloud Run service
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name), semconv.ServiceVersion(cfg.ServiceVersion), semconv.ServiceInstanceID(cfg.InstanceID)}
	if cfg.Project != "" {
		attrs = append(attrs, gcpProjectID.String(cfg.Project))
	}
	return attrs
}

// telemetryEndpoint is Google Cloud's OTLP endpoint.
const telemetryEndpoint = "telemetry.googleapis.com:443"

// otlpOptions returns the exporters' options: the OTEL_EXPORTER_OTLP_*
// variables when an endpoint is set; on Cloud Run without one, Google
// Cloud's telemetry endpoint with default credentials.
//
// No x-goog-user-project header is sent: the credentials are the Cloud Run
// service account's, and for a service account "the project associated
// with the service account is used as the quota project"
// (https://cloud.google.com/docs/quotas/set-quota-project). Naming a quota
// project explicitly would instead require serviceusage.services.use
// (roles/serviceusage.serviceUsageConsumer) on it, a role the runtime
// account has no other use for. Which project stores the data is said by
// the gcp.project_id resource attribute (baseAttributes).
func otlpOptions(ctx context.Context, cfg Config) ([]otlptracegrpc.Option, []otlpmetricgrpc.Option, error) {
	if cfg.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || cfg.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || cfg.Getenv("K_SERVICE") == "" {
		return nil, nil, nil // the exporters read OTEL_EXPORTER_OTLP_* themselves
	}
	ts, err := google.DefaultTokenSource(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: default credentials for %s: %w", telemetryEndpoint, err)
	}
	creds := grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: ts})
	return []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(telemetryEndpoint), otlptracegrpc.WithDialOption(creds)},
		[]otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(telemetryEndpoint), otlpmetricgrpc.WithDialOption(creds)},
		nil
}
