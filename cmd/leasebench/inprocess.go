package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// countingStore counts the writes that reach a store: the Try calls that
// stored a record, for names under prefix and for the sessions' records.
type countingStore struct {
	backend.Store
	prefix           string
	leases, sessions atomic.Int64
}

// Try implements backend.Store, counting a write when decide's last answer
// was a row and the attempt stored it.
func (s *countingStore) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	wrote := false
	snap, err := s.Store.Try(ctx, name, func(cur backend.Snapshot) (*backend.Row, error) {
		r, err := decide(cur)
		wrote = r != nil && err == nil
		return r, err
	})
	if err == nil && wrote {
		switch {
		case strings.HasPrefix(name, s.prefix):
			s.leases.Add(1)
		case strings.HasPrefix(name, lease.SessionRecordPrefix):
			s.sessions.Add(1)
		}
	}
	return snap, err
}

// read implements writeCount.
func (s *countingStore) read(context.Context) (int64, int64, error) {
	return s.leases.Load(), s.sessions.Load(), nil
}

// inProcess is a leasesvc instance in leasebench's own process, with
// sessions, over a counting memory store: the memory backend's writes can
// be counted only in process.
type inProcess struct {
	url   string
	store *countingStore
	stop  func()
}

func startInProcess(prefix string) (*inProcess, error) {
	cs := &countingStore{Store: memory.New(), prefix: prefix}
	h := hub.New()
	m, err := lease.NewManager(cs, lease.Config{OnChange: h.Publish})
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := session.New(session.Manager{M: m}, session.Config{Events: h, Logger: log, MaxSessions: 100_000, MaxPerCaller: 100_000})
	if err != nil {
		return nil, err
	}
	api, err := httpapi.New(m, httpapi.Config{Logger: log, Events: h, Sessions: reg})
	if err != nil {
		reg.Stop()
		return nil, err
	}
	srv := httptest.NewServer(api)
	return &inProcess{url: srv.URL, store: cs, stop: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		reg.Shutdown(ctx, context.WithoutCancel(ctx))
		srv.Close()
		reg.Stop()
	}}, nil
}
