package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// handlerTransport answers requests with the service's handler in-process,
// so that a client and the service run together in a synctest bubble (no
// sockets, whose waits are not durably blocking). The drop fault fails the
// request as a dropped connection would.
type handlerTransport struct{ s *service }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if fault(t.s.fault.Load()) == drop && strings.HasPrefix(r.URL.Path, "/v1/leases") {
		if strings.HasSuffix(r.URL.Path, ":renew") {
			t.s.renews.Add(1)
		}
		return nil, errors.New("connection reset by peer (the test's drop fault)")
	}
	rec := httptest.NewRecorder()
	t.s.serve(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err // the client gave up: its answer is the timeout
	}
	return rec.Result(), nil
}

// bubbleClient returns a Client of s that does not retry and reaches it
// in-process; call it inside synctest.Test.
func (s *service) bubbleClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New("http://localhost", client.Config{MaxAttempts: 1,
		HTTPClient: &http.Client{Transport: handlerTransport{s}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.closing:
		default:
			close(s.closing) // a hanging request returns
		}
	})
	return c
}

// advance lets the bubble's clock run d on, then waits until every
// goroutine of the bubble is blocked again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
