package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// sessionWrites counts the backend's writes per held lease per minute,
// side by side: -write-sessions sessions at window 1 s holding
// -write-leases leases each, then as many leases held with plain renewals
// of TTL 1 s (every 333 ms), each arm for -write-duration. The writes are
// counted, not computed, the scenario's leases and the sessions' own
// records apart: on PostgreSQL, by a row trigger that leasebench adds to
// the leases table of the service at the first URL for the scenario (and
// drops after), which counts every row inserted, updated or deleted; on
// the memory backend, by a counting store under an instance that
// leasebench runs in its own process (the -url instance's writes cannot be
// seen). Firestore and Spanner offer no such count: the scenario says so.
func sessionWrites(ctx context.Context, b *bench) ([]row, error) {
	prefix := b.cfg.prefix + ".writes."
	var (
		cnt writeCount
		url string
		how string
	)
	switch pd, ok := b.direct.(*postgresDirect); {
	case ok:
		tc, err := installWriteCounter(ctx, pd.pool, prefix)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := tc.remove(context.WithoutCancel(ctx)); err != nil {
				b.progress(true, "sessionwrites: %v", err)
			}
		}()
		cnt, url, how = tc, b.cfg.urls[0], "rows written to PostgreSQL, counted by a row trigger"
	case b.cfg.backend == "memory":
		in, err := startInProcess(prefix)
		if err != nil {
			return nil, fmt.Errorf("in-process instance: %w", err)
		}
		defer in.stop()
		cnt, url, how = in.store, in.url, "writes stored by a memory backend under an in-process instance, counted by a wrapper of the store"
	default:
		return []row{{Scenario: "sessionwrites", Metric: "not counted", Unit: "-",
			Note: "writes are counted on PostgreSQL (a row trigger) and on the memory backend (in process) only"}}, nil
	}
	leases := b.cfg.writeSessions * b.cfg.writeLeases

	// Sessions at window 1 s.
	agents := make([]*rawsession.Agent, b.cfg.writeSessions)
	closeAll := func() {
		_ = parallel(context.WithoutCancel(ctx), len(agents), b.cfg.concurrency, func(i int) error {
			if agents[i] != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				_ = agents[i].Close(cctx)
				agents[i] = nil
			}
			return nil
		})
	}
	defer closeAll()
	var lost atomic.Int64
	err := parallel(ctx, len(agents), b.cfg.concurrency, func(i int) error {
		a := &rawsession.Agent{URLs: []string{url}, Window: time.Second, OnPush: func(m rawsession.Message) {
			if m.Type == "lost" || m.Type == "revoked" {
				lost.Add(1)
			}
		}}
		if _, err := a.Open(ctx); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		agents[i] = a
		// Below the service's message rate per session (200/s by
		// default): a thousand acquires at once would close the socket.
		lim := rate.NewLimiter(100, 10)
		for k := range b.cfg.writeLeases {
			if err := lim.Wait(ctx); err != nil {
				return err
			}
			if _, err := a.Acquire(ctx, fmt.Sprintf("%s.writes.s%d.%d", b.cfg.prefix, i, k), "agent-"+strconv.Itoa(i), 0); err != nil {
				return fmt.Errorf("session %d: acquire: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open the sessions: %w", err)
	}
	b.progress(true, "sessionwrites: %d sessions × %d leases held; counting for %v", b.cfg.writeSessions, b.cfg.writeLeases, b.cfg.writeDuration)
	sLeases, sRecords, sElapsed, err := countOver(ctx, cnt, b.cfg.writeDuration)
	if err != nil {
		return nil, err
	}
	closeAll()
	perMin := func(n int64, per int, d time.Duration) float64 { return float64(n) / float64(per) / d.Minutes() }
	sc := "sessionwrites"
	note := fmt.Sprintf("%s, over %v", how, sElapsed.Round(time.Second))
	rows := []row{
		{Scenario: sc, Metric: "writes per held lease per minute, sessions at window 1s (lease rows)", Unit: "/min", Service: perMin(sLeases, leases, sElapsed), N: int(sLeases),
			Note: fmt.Sprintf("%s; %d sessions × %d leases; %d leases lost", note, b.cfg.writeSessions, b.cfg.writeLeases, lost.Load())},
		{Scenario: sc, Metric: "writes per held lease per minute, sessions at window 1s (with the sessions' own records)", Unit: "/min", Service: perMin(sLeases+sRecords, leases, sElapsed), N: int(sLeases + sRecords),
			Note: fmt.Sprintf("the session records: %.1f writes per session per minute", perMin(sRecords, b.cfg.writeSessions, sElapsed))},
	}
	if !b.cfg.writePlain {
		return rows, nil
	}

	// Plain renewals at TTL 1 s.
	ttl := time.Second
	var (
		wg      sync.WaitGroup
		fails   atomic.Int64
		rctx, s = context.WithCancel(ctx)
	)
	defer s()
	err = parallel(ctx, leases, b.cfg.concurrency, func(i int) error {
		name := fmt.Sprintf("%s.writes.p%d", b.cfg.prefix, i)
		a, err := must(b.svc.acquire(ctx, url, name, "agent", ttl, 0))
		if err != nil {
			return err
		}
		wg.Go(func() {
			t := time.NewTicker(ttl / 3)
			defer t.Stop()
			for {
				select {
				case <-rctx.Done():
					_, _ = b.svc.release(context.WithoutCancel(ctx), url, name, "agent", a.lease.FencingToken)
					return
				case <-t.C:
				}
				if _, err := must(b.svc.renew(rctx, url, name, "agent", a.lease.FencingToken)); err != nil && rctx.Err() == nil {
					fails.Add(1)
				}
			}
		})
		return nil
	})
	if err != nil {
		s()
		wg.Wait()
		return nil, fmt.Errorf("acquire the plain leases: %w", err)
	}
	b.progress(true, "sessionwrites: %d leases renewed every %v; counting for %v", leases, (ttl / 3).Round(time.Millisecond), b.cfg.writeDuration)
	pLeases, _, pElapsed, err := countOver(ctx, cnt, b.cfg.writeDuration)
	s()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return append(rows, row{Scenario: sc, Metric: "writes per held lease per minute, plain renewals ttl 1s", Unit: "/min", Service: perMin(pLeases, leases, pElapsed), N: int(pLeases),
		Note: fmt.Sprintf("%d leases renewed every %v for %v; %d renewals failed", leases, (ttl / 3).Round(time.Millisecond), pElapsed.Round(time.Second), fails.Load())}), nil
}

// writeCounter counts the rows written to PostgreSQL's leases table by a trigger:
// those whose name starts with the prefix, and the sessions' records.
type writeCounter struct {
	pool *pgxpool.Pool
}

// The objects installWriteCounter adds, and drops again.
const (
	writeCountLeases   = "leasebench_writes_leases"
	writeCountSessions = "leasebench_writes_sessions"
	writeCountFunc     = "leasebench_count_write"
	writeCountTrigger  = "leasebench_count_writes"
)

func installWriteCounter(ctx context.Context, pool *pgxpool.Pool, prefix string) (*writeCounter, error) {
	// A LIKE pattern matching names that start with prefix, as a literal.
	esc := strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`, "'", "''").Replace(prefix)
	lit := "'" + esc + "%'"
	stmts := []string{
		"CREATE SEQUENCE IF NOT EXISTS " + writeCountLeases,
		"CREATE SEQUENCE IF NOT EXISTS " + writeCountSessions,
		"SELECT nextval('" + writeCountLeases + "'), nextval('" + writeCountSessions + "')",
		`CREATE OR REPLACE FUNCTION ` + writeCountFunc + `() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n text;
BEGIN
	IF TG_OP = 'DELETE' THEN n := OLD.name; ELSE n := NEW.name; END IF;
	IF n LIKE ` + lit + ` THEN PERFORM nextval('` + writeCountLeases + `');
	ELSIF n LIKE 'leasesvc.session.%' THEN PERFORM nextval('` + writeCountSessions + `');
	END IF;
	RETURN NULL;
END $$`,
		"DROP TRIGGER IF EXISTS " + writeCountTrigger + " ON leasesvc_leases",
		"CREATE TRIGGER " + writeCountTrigger + " AFTER INSERT OR UPDATE OR DELETE ON leasesvc_leases FOR EACH ROW EXECUTE FUNCTION " + writeCountFunc + "()",
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("sessionwrites: install the write counter: %w", err)
		}
	}
	return &writeCounter{pool: pool}, nil
}

// read returns the counts so far.
func (w *writeCounter) read(ctx context.Context) (leases, sessions int64, err error) {
	err = w.pool.QueryRow(ctx, "SELECT (SELECT last_value FROM "+writeCountLeases+"), (SELECT last_value FROM "+writeCountSessions+")").Scan(&leases, &sessions)
	if err != nil {
		return 0, 0, fmt.Errorf("sessionwrites: read the write counts: %w", err)
	}
	return leases, sessions, nil
}

// writeCount reads the writes counted so far: of the scenario's leases
// and of the sessions' records.
type writeCount interface {
	read(ctx context.Context) (leases, sessions int64, err error)
}

// countOver returns the writes counted during d from now.
func countOver(ctx context.Context, w writeCount, d time.Duration) (leases, sessions int64, elapsed time.Duration, err error) {
	l0, s0, err := w.read(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	case <-time.After(d):
	}
	l1, s1, err := w.read(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return l1 - l0, s1 - s0, time.Since(start), nil
}

// remove drops what installWriteCounter added.
func (w *writeCounter) remove(ctx context.Context) error {
	var errs []error
	for _, s := range []string{
		"DROP TRIGGER IF EXISTS " + writeCountTrigger + " ON leasesvc_leases",
		"DROP FUNCTION IF EXISTS " + writeCountFunc + "()",
		"DROP SEQUENCE IF EXISTS " + writeCountLeases,
		"DROP SEQUENCE IF EXISTS " + writeCountSessions,
	} {
		if _, err := w.pool.Exec(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the write counter: %w", err)
	}
	return nil
}
