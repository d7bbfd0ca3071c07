package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	_ "github.com/leasesvc/leasesvc/backend/all" // every backend registers itself
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/cloudlog"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
	"github.com/leasesvc/leasesvc/sweeper"
	"github.com/leasesvc/leasesvc/telemetry"
)

// run starts the service and blocks until ctx is done, then drains
// in-flight requests for at most the drain timeout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		if err := writeHelp(stdout); err != nil {
			return err
		}
		return errHelp
	}
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	log := newLogger(cfg, getenv, stdout)
	instance := instanceID(getenv)

	var obs *observability // set before the first request or event
	onRetry := func(reason string) {
		if obs != nil {
			obs.metrics.BackendRetry(context.Background(), cfg.backend, reason)
		}
	}
	opened, err := openStore(ctx, cfg.backend, getenv, backend.OpenOptions{OnRetry: onRetry, Logger: log})
	if err != nil {
		return fmt.Errorf("open backend %s: %w", cfg.backend, err)
	}
	store := opened.Store
	var closeBy time.Time // the shutdown budget's end once SIGTERM came; zero: defaultShutdown
	defer func() {
		if err := closeWithin(opened.Close, closeBy); err != nil {
			log.Error("close backend", "backend", cfg.backend, "err", err)
		}
	}()
	acc, err := newAccess(ctx, getenv, log)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	lim, err := parseLimits(getenv, acc.mode)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	lim.applySoftLimit(getenv)
	if acc.mode == "none" && len(acc.hosts) == 0 && !loopbackListen(lim.listenHost) {
		log.Warn("authentication is off and the service listens beyond loopback: the lease API answers only requests addressed to localhost, 127.0.0.1 or [::1]; set LEASESVC_ALLOWED_HOSTS to the names clients use (such as the Cloud Run URL's host), or * for any", "listen", lim.listenHost)
	}
	scfg, err := parseSessions(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	pcfg, err := parseProofs(getenv, instance)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if cfg.drain >= lim.shutdown {
		return fmt.Errorf("configuration: LEASESVC_DRAIN_TIMEOUT %v must be shorter than LEASESVC_SHUTDOWN_TIMEOUT %v", cfg.drain, lim.shutdown)
	}
	ev, err := newEvents(ctx, getenv, store, instance, log)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	defer func() {
		// Normally stopped after the drain below; this covers early returns.
		_ = ev.stop(context.Background())
	}()
	// Audit lines are written whatever LEASESVC_LOG_LEVEL says.
	ev.audit = audit.New(slog.New(cloudlog.NewHandler(stdout, slog.LevelInfo, project(getenv))))
	m, err := lease.NewManager(store, lease.Config{MinTTL: cfg.minTTL, MaxTTL: cfg.maxTTL, MaxCandidates: lim.maxCandidates, OnChange: func(e lease.Event) {
		ev.changed(e)
		obs.decided(e)
	}}, opened.Loop...)
	if err != nil {
		return fmt.Errorf("lease manager: %w", err)
	}
	obs, err = newObservability(ctx, cfg, getenv, stdout, log, instance, telemetry.Gauges{
		Waiting: m.Waiting, Watchers: ev.hub.Watchers, ReportUnheld: ev.sweeping,
	})
	if err != nil {
		return err
	}
	var flushOnce sync.Once
	flush := func(ctx context.Context) { flushOnce.Do(func() { obs.shutdown(ctx) }) }
	defer flush(context.WithoutCancel(ctx)) // early returns; a normal stop flushes below
	ev.observe(obs)
	smetrics, err := telemetry.NewSessionMetrics(obs.providers.Meter)
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	over, stopOverload, err := lim.edge.newOverload(ctx, lim.api.Memory, log, ev.audit, obs.providers.Meter)
	if err != nil {
		return fmt.Errorf("overload: %w", err)
	}
	defer stopOverload()
	scfg.Events, scfg.Logger, scfg.Audit, scfg.Observer = ev.hub, log, ev.audit, smetrics
	sessions, err := session.New(session.Manager{M: m}, scfg)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	defer sessions.Stop()
	// The proof key is published before the first request can be signed
	// with it (docs/contract.md §17).
	pcfg.Logger = log
	proofs, err := proofkey.Publish(ctx, store, pcfg, opened.Loop...)
	if err != nil {
		return fmt.Errorf("proofs: %w", err)
	}
	proofCtx, stopProofs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProofs()
	proofsDone := make(chan error, 1)
	go func() { proofsDone <- proofs.Run(proofCtx) }()
	h, err := httpapi.New(m, httpapi.Config{Sessions: sessions, Proofs: proofs, Logger: log, Events: ev.hub, Observer: obs.metrics,
		Authenticator: acc.authn, Policy: acc.policy, Limiter: acc.limiter, Audit: ev.audit,
		TracerProvider: obs.providers.Tracer, MeterProvider: obs.providers.Meter,
		Limits: lim.api, Overload: over, PageTokenKey: lim.pageTokenKey, AllowedOrigins: acc.origins, AllowedHosts: acc.hosts,
		Internal: []string{sweeper.DefaultLeaseName, session.RecordPrefix}})
	if err != nil {
		return fmt.Errorf("http handler: %w", err)
	}
	ev.retainFree, ev.recordRetention = lim.retainFree, lim.recordRetention
	if err := ev.start(context.WithoutCancel(ctx), m, store, instance); err != nil {
		return fmt.Errorf("events: %w", err)
	}

	stopPprof, err := startPprof(getenv("LEASESVC_PPROF_ADDR"), log)
	if err != nil {
		return err
	}
	defer stopPprof()
	ln, err := net.Listen("tcp", net.JoinHostPort(lim.listenHost, strconv.Itoa(cfg.port)))
	if err != nil {
		return fmt.Errorf("listen on %s port %d: %w", lim.listenHost, cfg.port, err)
	}
	srv := newServer(ctx, h, lim, log)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lim.edge.listen(ln, log)) }()
	log.Info("leasesvc listening", "version", version, "telemetry", cfg.telemetry, "addr", ln.Addr().String(), "backend", cfg.backend, "instance", instance,
		"events", getenv("LEASESVC_PUBSUB_TOPIC") != "", "auth", acc.mode, "rateLimit", acc.rate, "rateBurst", acc.burst,
		"minTTL", cfg.minTTL.String(), "maxTTL", cfg.maxTTL.String(), lim.logAttrs()[0], lim.edge.logAttrs(), sessionLogAttrs(scfg),
		"proofKid", proofs.Kid(), "proofIssuer", pcfg.Issuer)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// SIGTERM: end waits and streams at once, drain the rest, stop events
	// (delete the subscription, flush), flush telemetry, all within the
	// shutdown budget (Cloud Run kills 10 s after SIGTERM).
	hard := time.Now().Add(lim.shutdown)
	closeBy = hard // the backend closes last (deferred above), within the budget
	log.Info("shutting down: asking sessions to move, ending waits and streams, draining in-flight requests", "drain", cfg.drain.String(), "budget", lim.shutdown.String())
	drainCtx, cancel := context.WithDeadline(context.Background(), earliest(time.Now().Add(cfg.drain), hard.Add(-2*time.Second)))
	defer cancel()
	// Sessions: make before break. Each socket is asked to move; the
	// instance keeps renewing until the drain deadline, then ends only the
	// sessions that neither moved nor heartbeat within their window
	// (docs/contract.md §14). Their sockets were hijacked: srv.Shutdown
	// does not wait for them.
	// Ending the idle ones is backend writes: they stop a second before
	// the budget's end, with the events' flush.
	endCtx, cancelEnd := context.WithDeadline(context.Background(), hard.Add(-time.Second))
	defer cancelEnd()
	sessionsDone := make(chan struct{})
	go func() {
		defer close(sessionsDone)
		sessions.Shutdown(drainCtx, endCtx)
	}()
	h.CloseStreams()
	if err := srv.Shutdown(drainCtx); err != nil {
		log.Warn("shutdown: requests still in flight at the drain deadline; closing their connections", "err", err)
		_ = srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	<-sessionsDone
	// Nothing signs any more: the key's retention counts from now.
	stopProofs()
	if err := <-proofsDone; err != nil {
		log.Error("proofs: renewal", "err", err)
	}
	if err := proofs.Close(endCtx); err != nil {
		log.Warn("proofs: the key record stays until its TTL runs out", "kid", proofs.Kid(), "err", err)
	}
	evCtx, cancelEv := context.WithDeadline(context.Background(), hard.Add(-time.Second))
	defer cancelEv()
	if err := ev.stop(evCtx); err != nil {
		log.Error("events: stop", "err", err)
	}
	telCtx, cancelTel := context.WithDeadline(context.Background(), hard.Add(-200*time.Millisecond))
	defer cancelTel()
	flush(telCtx)
	log.Info("leasesvc stopped")
	return nil
}

// newServer is the service's http.Server: headers within the header
// timeout, idle keep-alive connections closed after the idle timeout; the
// body deadline is the handler's (httpapi.Limits.BodyTimeout), so that
// streams and waiting acquires are not cut by a whole-request timeout.
func newServer(ctx context.Context, h http.Handler, lim limits, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.headerTimeout,
		MaxHeaderBytes:    lim.edge.maxHeaderBytes,
		IdleTimeout:       lim.idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// openStore opens the backend registered under name with the options o.
func openStore(ctx context.Context, name string, getenv func(string) string, o backend.OpenOptions) (backend.Opened, error) {
	opener, ok := backend.Lookup(name)
	if !ok {
		return backend.Opened{}, fmt.Errorf("no backend %q registered: want one of %s", name, strings.Join(backend.Names(), ", "))
	}
	return opener.Open(ctx, getenv, o)
}
