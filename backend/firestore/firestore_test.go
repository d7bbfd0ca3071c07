package firestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gfs "cloud.google.com/go/firestore"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClassify(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name     string
		ctx      context.Context
		err      error
		sentinel error // errors.Is must hold
		exact    error // the error must be exactly this
		code     codes.Code
	}{
		{"aborted", t.Context(), status.Error(codes.Aborted, "x"), backend.ErrConflict, nil, codes.Aborted},
		{"failed precondition", t.Context(), status.Error(codes.FailedPrecondition, "x"), backend.ErrConflict, nil, codes.FailedPrecondition},
		{"already exists", t.Context(), status.Error(codes.AlreadyExists, "x"), backend.ErrConflict, nil, codes.AlreadyExists},
		{"unavailable", t.Context(), status.Error(codes.Unavailable, "x"), backend.ErrUnavailable, nil, codes.Unavailable},
		{"resource exhausted", t.Context(), status.Error(codes.ResourceExhausted, "x"), backend.ErrUnavailable, nil, codes.ResourceExhausted},
		{"permission denied", t.Context(), status.Error(codes.PermissionDenied, "x"), backend.ErrUnavailable, nil, codes.PermissionDenied},
		{"internal", t.Context(), status.Error(codes.Internal, "x"), backend.ErrUnavailable, nil, codes.Internal},
		{"plain error", t.Context(), errors.New("x"), backend.ErrUnavailable, nil, codes.Unknown},
		{"deadline code", t.Context(), status.Error(codes.DeadlineExceeded, "x"), nil, context.DeadlineExceeded, 0},
		{"canceled code", t.Context(), status.Error(codes.Canceled, "x"), nil, context.Canceled, 0},
		{"wrapped context error", t.Context(), fmt.Errorf("rpc: %w", context.DeadlineExceeded), nil, context.DeadlineExceeded, 0},
		{"ctx done wins", done, status.Error(codes.Unavailable, "x"), nil, context.Canceled, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.ctx, c.ctx, "get", "n", c.err)
			if c.exact != nil {
				if got != c.exact {
					t.Fatalf("classify = %#v, want exactly %v (context errors are never wrapped)", got, c.exact)
				}
				return
			}
			if !errors.Is(got, c.sentinel) {
				t.Fatalf("classify = %v, want errors.Is %v", got, c.sentinel)
			}
			if status.Code(got) != c.code {
				t.Fatalf("status.Code(classify) = %v, want the native %v still reachable", status.Code(got), c.code)
			}
			if !strings.Contains(got.Error(), `get "n"`) {
				t.Fatalf("classify = %q, want the operation and name in it", got)
			}
		})
	}
	if classify(t.Context(), t.Context(), "get", "n", nil) != nil {
		t.Fatal("classify(nil) != nil")
	}
	// The call timeout ran out while the caller's ctx is live: Firestore did
	// not answer in time, which is ErrUnavailable, not the caller's deadline.
	call, cancel := context.WithTimeout(t.Context(), 0)
	defer cancel()
	<-call.Done()
	got := classify(t.Context(), call, "get", "n", status.Error(codes.DeadlineExceeded, "x"))
	if !errors.Is(got, backend.ErrUnavailable) || errors.Is(got, context.DeadlineExceeded) {
		t.Fatalf("classify after the call timeout = %v, want ErrUnavailable and not a context error", got)
	}
}

func TestPrefixEnd(t *testing.T) {
	alphabet := "-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
	for _, prefix := range []string{"a", "team-a.", "z", "A9", "x_", "a-"} {
		end := prefixEnd(prefix)
		if strings.Contains(end, "/") {
			t.Errorf("prefixEnd(%q) = %q holds a '/'", prefix, end)
		}
		for _, c := range alphabet {
			name := prefix + string(c) + strings.Repeat("z", 120)
			if !(prefix <= name && name < end) {
				t.Errorf("%q starts with %q but is not in [%q, %q)", name, prefix, prefix, end)
			}
			if other := string(c) + prefix; !strings.HasPrefix(other, prefix) && other >= prefix && other < end {
				t.Errorf("%q does not start with %q but is in [%q, %q)", other, prefix, prefix, end)
			}
		}
	}
}

// encodeRecord encodes r as package lease does and then as encode stores
// it, and decodes the row that reads back.
func encodeRecord(name string, r *lease.Record) (leaseDoc, *lease.Record, error) {
	row, err := lease.EncodeRow(r)
	if err != nil {
		return leaseDoc{}, nil, err
	}
	d, got, err := encode(name, &row)
	if err != nil {
		return leaseDoc{}, nil, err
	}
	rec, err := lease.DecodeRow(*got)
	return d, rec, err
}

func TestEncode(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	r := &lease.Record{Name: "ignored", Holder: "h", FencingToken: 3, TTL: 1500 * time.Millisecond,
		AcquireTime: now, RenewTime: now, ExpireTime: now.Add(time.Second), Transitions: 2, Metadata: []byte(`{}`)}
	d, got, err := encodeRecord("n", r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "n" || got.AcquireTime.Nanosecond() != 123456000 || got.AcquireTime.Location() != time.UTC || !got.ExpireTime.Equal(now.Add(time.Second).Truncate(time.Microsecond)) {
		t.Fatalf("encode = %+v, want name n, µs-truncated UTC times", got)
	}
	got.Metadata[0] = 'X'
	if string(r.Metadata) != `{}` || d.Metadata != `{}` {
		t.Fatal("encode's record shares the caller's metadata or the document's")
	}
	if d.Succession != "" || d.TTLMs != 1500 || d.Name != "n" {
		t.Fatalf("the document of a record without succession state = %+v", d)
	}
	if u := changes(leaseDoc{}, d); len(u) != 9 {
		t.Fatalf("changes from nothing = %d fields, want all 9", len(u))
	}
	if u := changes(d, d); len(u) != 0 {
		t.Fatalf("changes from itself = %v, want none", u)
	}
	renewed := d
	renewed.RenewTime = d.RenewTime.Add(time.Second)
	renewed.ExpireTime = d.ExpireTime.Add(time.Second)
	if u := changes(d, renewed); len(u) != 2 || u[0].Path != fieldRenewTime || u[1].Path != fieldExpireTime {
		t.Fatalf("changes of a renew = %v, want renewTime and expireTime", u)
	}
	r.TTL = 1500*time.Millisecond + time.Microsecond
	if _, _, err := encodeRecord("n", r); err == nil {
		t.Fatal("encode accepted a TTL that ttlMs cannot hold")
	}
}

// TestSuccessionField: the encoded value is one field, sent only when it
// changed and deleted when it is cleared; encode copies it.
func TestSuccessionField(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	r := &lease.Record{Name: "n", Holder: "h", FencingToken: 3, TTL: time.Second, AcquireTime: now, RenewTime: now, ExpireTime: now,
		Priority: 2, Checkpoint: []byte(`{"a":1}`), CheckpointToken: 3, Candidates: []lease.Candidate{{ID: "w", Holder: "x", Since: now, Until: now}}}
	with, got, err := encodeRecord("n", r)
	if err != nil {
		t.Fatal(err)
	}
	got.Checkpoint[1], got.Candidates[0].ID = 'X', "z"
	if string(r.Checkpoint) != `{"a":1}` || r.Candidates[0].ID != "w" {
		t.Fatal("encode shares the caller's checkpoint or candidates")
	}
	if !strings.Contains(with.Succession, `"checkpoint":{"a":1}`) {
		t.Fatalf("encode = %+v; want the succession JSON", with)
	}
	without, _, _ := encodeRecord("n", &lease.Record{Name: "n", Holder: "h", FencingToken: 3, TTL: time.Second, AcquireTime: now, RenewTime: now, ExpireTime: now})
	if u := changes(without, with); len(u) != 1 || u[0].Path != fieldSuccession || u[0].Value != with.Succession {
		t.Fatalf("changes adding succession state = %+v, want the one field", u)
	}
	if u := changes(with, without); len(u) != 1 || u[0].Path != fieldSuccession || u[0].Value != gfs.Delete {
		t.Fatalf("changes clearing succession state = %+v, want the field deleted", u)
	}
	r.Checkpoint = []byte(`{"a":`)
	if _, _, err := encodeRecord("n", r); err == nil {
		t.Fatal("encode accepted a checkpoint that is not JSON")
	}
}

// TestLegacyRevocationFields: a document that an older version wrote, with
// the revocation in revokedBy and revokeReason and not in the succession
// field, reads back revoked; a write never sets those fields and deletes
// them from such a document, the revocation moving into the succession
// field when the record keeps it.
func TestLegacyRevocationFields(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	old := leaseDoc{Name: "n", Holder: "h", FencingToken: 3, TTLMs: 1000, AcquireTime: now, RenewTime: now, ExpireTime: now,
		Transitions: 3, RevokedBy: "op", RevokeReason: "stuck", Succession: `{"priority":2}`}
	r, err := lease.DecodeRow(*old.row("n"))
	if err != nil || r.RevokedBy != "op" || r.RevokeReason != "stuck" || r.Priority != 2 {
		t.Fatalf("the older document reads back as %+v, %v; want revoked by op, priority 2", r, err)
	}
	kept, _, err := encodeRecord("n", r) // a write that keeps the revocation
	if err != nil || kept.RevokedBy != "" || kept.RevokeReason != "" || !strings.Contains(kept.Succession, `"revokeReason":"stuck"`) {
		t.Fatalf("the document written = %+v, %v; want the revocation in the succession field alone", kept, err)
	}
	u := changes(old, kept)
	if len(u) != 3 || u[0].Path != fieldRevokedBy || u[0].Value != gfs.Delete || u[1].Path != fieldRevokeReason || u[1].Value != gfs.Delete || u[2].Path != fieldSuccession {
		t.Fatalf("changes from the older document = %+v, want revokedBy and revokeReason deleted, succession set", u)
	}
	next := *r // a new holding: not revoked
	next.RevokedBy, next.RevokeReason, next.Holder, next.FencingToken = "", "", "h2", 4
	d, got, err := encodeRecord("n", &next)
	if err != nil || got.RevokeReason != "" || got.RevokedBy != "" {
		t.Fatalf("a new holding over the older document = %+v, %v", got, err)
	}
	fields := map[string]any{}
	for _, c := range changes(old, d) {
		fields[c.Path] = c.Value
	}
	if fields[fieldRevokedBy] != gfs.Delete || fields[fieldRevokeReason] != gfs.Delete {
		t.Fatalf("changes of a new holding over the older document = %v; want the old revocation deleted", fields)
	}
}

// deadClient returns a client of an "emulator" on a port where nothing
// listens.
func deadClient(t *testing.T) *gfs.Client {
	t.Setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
	c, err := gfs.NewClient(t.Context(), "leasesvc-test")
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNew(t *testing.T) {
	c := deadClient(t)
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	for _, coll := range []string{"", ".", "..", "a/b", "__x__", strings.Repeat("c", 1501)} {
		if _, err := New(c, WithCollection(coll)); err == nil || !strings.Contains(err.Error(), "collection") {
			t.Errorf("New(WithCollection(%q)) = %v, want an error naming the collection", coll, err)
		}
	}
	for _, coll := range []string{"leases", "team-a.leases", "__x", "_"} {
		if _, err := New(c, WithCollection(coll)); err != nil {
			t.Errorf("New(WithCollection(%q)) = %v", coll, err)
		}
	}
}

// TestUnreachable checks the error classes when Firestore cannot be
// reached: ErrUnavailable once the call timeout is spent (the client itself
// retries for ever), and the context's own error when its deadline comes
// first.
func TestUnreachable(t *testing.T) {
	if _, err := New(deadClient(t), WithCallTimeout(0)); err == nil {
		t.Error("New(WithCallTimeout(0)) succeeded")
	}
	s, err := New(deadClient(t), WithCallTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Ping(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Ping = %v, want ErrUnavailable", err)
	}
	if _, err := s.Get(ctx, "n"); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Get = %v, want ErrUnavailable", err)
	}
	if _, _, err := s.List(ctx, "", "", 10); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("List = %v, want ErrUnavailable", err)
	}
	called := false
	decide := func(backend.Snapshot) (*backend.Row, error) { called = true; return nil, nil }
	loop := backend.NewLoop(s)
	if _, err := loop.Update(ctx, "n", decide); !errors.Is(err, backend.ErrUnavailable) || called {
		t.Errorf("Update = %v (decide called: %v), want ErrUnavailable", err, called)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := loop.Update(short, "n", decide); err != context.DeadlineExceeded || called {
		t.Errorf("Update with a short deadline = %v (decide called: %v), want context.DeadlineExceeded unwrapped", err, called)
	}
	if _, err := s.Get(ctx, "a/b"); err == nil {
		t.Error("Get of a name with a slash succeeded")
	}
}
