package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Shutdown checks what SIGTERM does to the requests in flight
// (docs/contract.md §9, Shutdown): it holds a lease, opens its watch stream
// and starts three acquires that wait 60 s for it; once they are in flight
// it runs beforeStop, if not nil, and stops svc with SIGTERM at once. The
// process must exit cleanly within 9 s, every waiting acquire must be
// answered at once with 503 unavailable and Retry-After: 1, and the stream
// must end. It returns how long the exit took.
func Shutdown(t *testing.T, svc *Service, beforeStop func()) time.Duration {
	t.Helper()
	c := Client{URL: svc.URL}
	name := UniqueName("drain")
	if r := c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"a","ttlMs":60000}`); r.Status != http.StatusOK {
		t.Fatalf("acquire: %s", r.Raw)
	}
	stream := Watch(t, svc.URL, name)
	stream.Next(t)
	var wg sync.WaitGroup
	waited := make([]Response, 3)
	answered := make([]time.Time, 3)
	for i := range waited {
		wg.Go(func() {
			waited[i] = c.Post(t, "/v1/leases/"+name+":acquire", fmt.Sprintf(`{"holder":"w%d","ttlMs":1000,"waitMs":60000}`, i))
			answered[i] = time.Now()
		})
	}
	time.Sleep(500 * time.Millisecond) // the waiting acquires are in flight
	if beforeStop != nil {
		beforeStop()
	}
	sent := time.Now()
	took, err := svc.Stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.Output())
	}
	for i, w := range waited {
		if w.Status != http.StatusServiceUnavailable || w.Code() != "unavailable" || w.Header.Get("Retry-After") != "1" {
			t.Errorf("waiting acquire answered %d %s (Retry-After %q), want 503 unavailable, Retry-After: 1", w.Status, w.Raw, w.Header.Get("Retry-After"))
		}
		if d := answered[i].Sub(sent); d > 2*time.Second {
			t.Errorf("a waiting acquire was answered %v after SIGTERM, want at once", d)
		}
	}
	if !stream.Closed(time.Second) {
		t.Error("the watch stream is still open after exit")
	}
	if took >= 9*time.Second {
		t.Errorf("exit took %v after SIGTERM, want < 9s", took)
	}
	return took
}
