package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// TestStopDuringAcquireReleasesWhatItTook: an Elector stopped while its
// acquire is in flight gives up the holding that acquire took, even when
// the service decides it only after the Elector stopped (the request was
// on its way). It used to cancel the request and read the lease at once:
// a holding decided after that read was left to run out, unrenewed, as
// leasectl mcp's TestSIGTERMReleases once saw.
func TestStopDuringAcquireReleasesWhatItTook(t *testing.T) {
	arrived, proceed := make(chan struct{}, 1), make(chan struct{})
	srv, _ := newTestService(t, testService{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, ":acquire") {
				arrived <- struct{}{}
				<-proceed // the service decides only now, whether or not the client still waits
				r = r.WithContext(context.WithoutCancel(r.Context()))
			}
			h.ServeHTTP(w, r)
		})
	}})
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.NewElector("abandon.me", client.ElectorConfig{Holder: "a",
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no acquire reached the service")
	}
	cancel()
	close(proceed)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
	}
	l, err := c.Get(t.Context(), "abandon.me")
	if err != nil || l.Held {
		t.Fatalf("after the Elector stopped: %+v, %v; want the holding its acquire took released", l, err)
	}
}
