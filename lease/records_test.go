package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// TestUpdateWithCodec: UpdateWith hands decide the stored row decoded and
// stores the row of the record decide returns; a row that does not decode
// fails without calling decide or writing, and decide's own error comes
// back unchanged.
func TestUpdateWithCodec(t *testing.T) {
	s := memory.New()
	loop := backend.NewLoop(s)
	wrote, err := lease.UpdateWith(t.Context(), loop.Update, "a", func(cur lease.Snapshot) (*lease.Record, error) {
		if cur.Record != nil {
			t.Errorf("decide saw %+v for a missing lease", cur.Record)
		}
		return &lease.Record{Name: "a", Holder: "h", FencingToken: 1, TTL: time.Second, ExpireTime: cur.ServerTime.Add(time.Second),
			Priority: 7, RevokeReason: "r"}, nil
	})
	if err != nil || wrote.Record == nil || wrote.Record.Priority != 7 || wrote.Record.RevokeReason != "r" {
		t.Fatalf("UpdateWith = %+v, %v; want the written record", wrote.Record, err)
	}
	row, _ := s.Get(t.Context(), "a")
	if row.Row == nil || string(row.Row.Value) != `{"revokeReason":"r","priority":7}` {
		t.Fatalf("stored row %+v; want the encoded value", row.Row)
	}
	kept, err := lease.UpdateWith(t.Context(), loop.Update, "a", func(cur lease.Snapshot) (*lease.Record, error) { return nil, nil })
	if err != nil || kept.Record == nil || kept.Record.Priority != 7 {
		t.Fatalf("UpdateWith writing nothing = %+v, %v; want the stored record", kept.Record, err)
	}
	boom := errors.New("boom")
	if _, err := lease.UpdateWith(t.Context(), loop.Update, "a", func(lease.Snapshot) (*lease.Record, error) { return nil, boom }); err != boom {
		t.Fatalf("UpdateWith with a failing decide = %v, want decide's error itself", err)
	}
	if _, err := s.Try(t.Context(), "bad", func(backend.Snapshot) (*backend.Row, error) {
		return &backend.Row{Name: "bad", Value: []byte(`{"priority":`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	called := false
	_, err = lease.UpdateWith(t.Context(), loop.Update, "bad", func(cur lease.Snapshot) (*lease.Record, error) {
		called = true
		return &lease.Record{Name: "bad"}, nil
	})
	if err == nil || called {
		t.Fatalf("UpdateWith over a row that does not decode = %v (decide called: %v); want an error, decide not called", err, called)
	}
	if got, _ := s.Get(t.Context(), "bad"); got.Row == nil || string(got.Row.Value) != `{"priority":` {
		t.Fatalf("the row that does not decode was changed: %+v", got.Row)
	}
}
