package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/lease"
)

// TestLargePages: a page of 64 leases of 32 KiB (16 KiB of metadata and
// of checkpoint, the most of each) is 2 MiB; the client reads it whole.
func TestLargePages(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()
	blob := []byte(`{"b":"` + strings.Repeat("x", lease.MaxMetadataBytes-8) + `"}`)
	for i := range 64 {
		name := fmt.Sprintf("big.%02d", i)
		l, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "h", TTL: time.Minute, Metadata: blob})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Renew(ctx, name, client.RenewRequest{Holder: "h", FencingToken: l.FencingToken, Checkpoint: blob}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.List(ctx, client.ListRequest{Prefix: "big.", PageSize: 1000})
	if err != nil || len(p.Leases) != 64 || !bytes.Equal(p.Leases[63].Metadata, blob) {
		t.Fatalf("list of 2 MiB = %d leases, %v; want all 64", len(p.Leases), err)
	}
}

// TestAnswerTooLarge: an answer over MaxAnswerBytes, announced or not, is
// an error that says so, not a JSON error about a cut answer.
func TestAnswerTooLarge(t *testing.T) {
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("prefix") == "announced" {
			w.Header().Set("Content-Length", strconv.Itoa(client.MaxAnswerBytes+1))
			w.WriteHeader(http.StatusOK)
			return // the client gives up before the body
		}
		for range client.MaxAnswerBytes/len(chunk) + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"announced", "chunked"} {
		_, err := c.List(t.Context(), client.ListRequest{Prefix: prefix})
		want := "answer larger than " + strconv.Itoa(client.MaxAnswerBytes) + " bytes"
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, client.ErrInternal) {
			t.Errorf("%s: %v, want ErrInternal saying %q", prefix, err, want)
		}
	}
}
