package firestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	gfs "cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/backend"
)

// DefaultCollection is the collection the leases live in unless
// WithCollection names another.
const DefaultCollection = "leases"

// clockDocID names a document that is never written: Ping and List read it
// to learn the server's time. It cannot be a lease name, since those start
// with a letter or digit.
const clockDocID = "_leasesvc_clock"

// Store is a backend.Store over one Firestore collection. It is safe for
// concurrent use. It caches no record: every decision is made on a fresh
// read.
type Store struct {
	client      *gfs.Client
	coll        *gfs.CollectionRef
	callTimeout time.Duration
}

var _ backend.Store = (*Store)(nil)

// config is what the options set.
type config struct {
	collection  string
	callTimeout time.Duration
}

// DefaultCallTimeout bounds each Firestore call unless WithCallTimeout says
// otherwise.
const DefaultCallTimeout = 10 * time.Second

// Option configures a Store.
type Option func(*config)

// WithCollection names the collection that holds the lease documents.
// Default DefaultCollection ("leases"). It must be a valid top-level
// collection ID: no "/", not "." or "..", not of the form __.*__, at most
// 1,500 bytes.
func WithCollection(id string) Option { return func(c *config) { c.collection = id } }

// WithCallTimeout bounds each call to Firestore (one read, one write, one
// query) to d; default DefaultCallTimeout (10s). The Firestore client
// retries Unavailable errors by itself for as long as its context allows,
// so an unreachable Firestore never answers Unavailable: this timeout is
// what turns it into backend.ErrUnavailable while the caller's ctx is still
// live. It must be positive.
func WithCallTimeout(d time.Duration) Option { return func(c *config) { c.callTimeout = d } }

// New returns a Store over client. The client stays the caller's: close it
// after the Store is no longer used.
func New(client *gfs.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("backend/firestore: New: client is nil")
	}
	cfg := config{collection: DefaultCollection, callTimeout: DefaultCallTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if err := validCollection(cfg.collection); err != nil {
		return nil, err
	}
	if cfg.callTimeout <= 0 {
		return nil, fmt.Errorf("backend/firestore: call timeout %v must be positive", cfg.callTimeout)
	}
	return &Store{client: client, coll: client.Collection(cfg.collection), callTimeout: cfg.callTimeout}, nil
}

func validCollection(id string) error {
	switch {
	case id == "", id == ".", id == "..", len(id) > 1500, strings.Contains(id, "/"),
		len(id) >= 4 && strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__"):
		return fmt.Errorf("backend/firestore: collection %q is not a valid collection ID (non-empty, no \"/\", not \".\", \"..\" or __.*__, ≤ 1500 bytes)", id)
	}
	return nil
}

// Get implements backend.Store: one document read.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	snap, _, _, err := s.read(ctx, name)
	return snap, err
}

// read gets the document under name and returns it as a snapshot, with the
// document as stored (nil when it is missing) and the update time that a
// conditional write of a decision on it must match (zero when missing).
func (s *Store) read(ctx context.Context, name string) (backend.Snapshot, *leaseDoc, time.Time, error) {
	ref, err := s.doc(name)
	if err != nil {
		return backend.Snapshot{}, nil, time.Time{}, err
	}
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	ds, err := ref.Get(call)
	switch {
	case status.Code(err) == codes.NotFound && ds != nil && !ds.Exists():
		snap, err := s.missing(name, ds)
		return snap, nil, time.Time{}, err
	case err != nil:
		return backend.Snapshot{}, nil, time.Time{}, classify(ctx, call, "get", name, err)
	}
	if ds.ReadTime.IsZero() || ds.UpdateTime.IsZero() {
		return backend.Snapshot{}, nil, time.Time{}, fmt.Errorf("backend/firestore: get %q: %w: the server sent no read or update time", name, backend.ErrUnavailable)
	}
	d, err := decode(ds)
	if err != nil {
		return backend.Snapshot{}, nil, time.Time{}, err
	}
	return backend.Snapshot{Row: d.row(ds.Ref.ID), ServerTime: ds.ReadTime}, &d, ds.UpdateTime, nil
}

// missing is the snapshot of a document that does not exist.
func (s *Store) missing(name string, ds *gfs.DocumentSnapshot) (backend.Snapshot, error) {
	if ds.ReadTime.IsZero() {
		// Firestore returns a read time with a missing document; without it
		// there is no server time to decide on.
		return backend.Snapshot{}, fmt.Errorf("backend/firestore: get %q: %w: the server sent no read time for the missing document", name, backend.ErrUnavailable)
	}
	return backend.Snapshot{ServerTime: ds.ReadTime}, nil
}

func (s *Store) doc(name string) (*gfs.DocumentRef, error) {
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("backend/firestore: %q is not a valid lease name", name)
	}
	return s.coll.Doc(name), nil
}

// Try implements backend.Store: a plain read, decide, and a write
// conditioned on the document being unchanged since that read (Create for a
// missing document, an update with a LastUpdateTime precondition for an
// existing one). decide's answer nil writes nothing, so a refusal costs one
// read. Unavailable is not retried here: the Firestore client retries it
// within each call, up to the call timeout.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	ref, err := s.doc(name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	snap, cur, updateTime, err := s.read(ctx, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	next, err := decide(snap)
	if err != nil || next == nil {
		return snap, err
	}
	stored, err := s.write(ctx, ref, name, cur, next, updateTime)
	if err != nil {
		return backend.Snapshot{}, err
	}
	return backend.Snapshot{Row: stored, ServerTime: snap.ServerTime}, nil
}

var _ backend.Remover = (*Store)(nil)

// Remove implements backend.Remover as Try writes: a plain read, ok, and a
// delete conditioned on the document's update time being still the one
// read (a LastUpdateTime precondition), so a document changed or deleted
// since the read is a lost race (backend.ErrConflict) and stays as the
// other writer left it. ok's false costs one read.
func (s *Store) Remove(ctx context.Context, name string, ok func(backend.Snapshot) bool) (bool, error) {
	ref, err := s.doc(name)
	if err != nil {
		return false, err
	}
	snap, cur, updateTime, err := s.read(ctx, name)
	if err != nil {
		return false, err
	}
	if cur == nil || !ok(snap) {
		return false, nil
	}
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	_, err = ref.Delete(call, gfs.LastUpdateTime(updateTime))
	if status.Code(err) == codes.NotFound {
		// The document was deleted since the read: a lost race like any other.
		return false, fmt.Errorf("backend/firestore: remove %q: %w", name, backend.Conflict("deleted", err))
	}
	if err != nil {
		return false, classify(ctx, call, "remove", name, err)
	}
	return true, nil
}

// Hints implements backend.Hinter: a read costs much less than a
// conditional write, so refusals are answered from a read first.
func (s *Store) Hints() backend.Hints { return backend.Hints{ReadFirst: backend.ReadFirstAdaptive} }

// write stores next under ref if the document's update time is still
// updateTime (zero: if it still does not exist). cur is the document as
// read at updateTime (nil when missing): only the fields that differ from
// it are sent, and when none does nothing is written (the decision changes
// nothing it read). It returns the row as stored.
func (s *Store) write(ctx context.Context, ref *gfs.DocumentRef, name string, cur *leaseDoc, next *backend.Row, updateTime time.Time) (*backend.Row, error) {
	d, rec, err := encode(name, next)
	if err != nil {
		return nil, err
	}
	var update []gfs.Update
	if cur != nil {
		if update = changes(*cur, d); len(update) == 0 {
			return rec, nil
		}
	}
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	if cur == nil {
		_, err = ref.Create(call, d)
	} else {
		_, err = ref.Update(call, update, gfs.LastUpdateTime(updateTime))
	}
	if status.Code(err) == codes.NotFound {
		// The document was deleted since the read: a lost race like any other.
		return nil, fmt.Errorf("backend/firestore: write %q: %w", name, backend.Conflict("deleted", err))
	}
	if err != nil {
		return nil, classify(ctx, call, "write", name, err)
	}
	return rec, nil
}

// List implements backend.Store with one query, ordered by document ID,
// with cursors for prefix and after, so it needs no composite index (the
// built-in document-ID ordering serves it). Its server time is the read
// time of the query's snapshot, which every returned document carries. A
// page without documents carries no read time through the client; its
// server time is then that of a Get of a never-written document issued
// right after the query, a later instant of the server's clock (there is
// no lease in the page whose view it would decide). Cost: one document
// read per row returned, or one read for a query that matches nothing
// plus one for that Get.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	if limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("backend/firestore: list: limit %d must be positive", limit)
	}
	q := s.coll.OrderBy(gfs.DocumentID, gfs.Asc).Limit(limit)
	switch {
	case after != "" && after >= prefix:
		q = q.StartAfter(after)
	case prefix != "":
		q = q.StartAt(prefix)
	}
	if prefix != "" {
		q = q.EndBefore(prefixEnd(prefix))
	}
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	it := q.Documents(call)
	defer it.Stop()
	var (
		out []backend.Row
		at  time.Time
	)
	for {
		ds, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, time.Time{}, classify(ctx, call, "list", prefix, err)
		}
		r, err := fromSnapshot(ds)
		if err != nil {
			return nil, time.Time{}, err
		}
		out = append(out, *r)
		if at.IsZero() || ds.ReadTime.Before(at) {
			at = ds.ReadTime // one snapshot: all equal; keep the earliest to be safe
		}
	}
	if at.IsZero() {
		t, err := s.serverTime(ctx, "list")
		if err != nil {
			return nil, time.Time{}, err
		}
		at = t
	}
	return out, at, nil
}

// prefixEnd is an upper bound for the names that start with prefix: every
// such name sorts before it, and every other name that sorts after prefix
// sorts after it too. Lease names are ASCII, and the bound appends U+F8FF,
// whose UTF-8 encoding (EF A3 BF) sorts after every ASCII byte. (Incrementing
// the last byte would not do: '.' + 1 is '/', which no document ID may hold.)
func prefixEnd(prefix string) string { return prefix + "\uf8ff" }

// serverTime returns the read time of a Get of the clock document.
func (s *Store) serverTime(ctx context.Context, op string) (time.Time, error) {
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	ds, err := s.coll.Doc(clockDocID).Get(call)
	switch {
	case status.Code(err) == codes.NotFound && ds != nil && !ds.ReadTime.IsZero():
		return ds.ReadTime, nil
	case err != nil:
		return time.Time{}, classify(ctx, call, op, clockDocID, err)
	case ds.ReadTime.IsZero():
		return time.Time{}, fmt.Errorf("backend/firestore: %s: %w: the server sent no read time", op, backend.ErrUnavailable)
	}
	return ds.ReadTime, nil // someone wrote the clock document; its read time is as good
}

// Ping implements backend.Store: one read of a document that does not exist.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.serverTime(ctx, "ping")
	return err
}
