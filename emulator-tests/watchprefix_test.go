package emulatortests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// prefixEvent is one change event of a prefix stream.
type prefixEvent struct {
	id, typ, name string
	token         int64
}

func (e prefixEvent) key() string { return fmt.Sprintf("%d/%s", e.token, e.typ) }

// newer is the consumers' order of docs/events.md: by token, and within a
// token acquired before its end.
func newer(a, b prefixEvent) bool {
	if a.token != b.token {
		return b.token > a.token
	}
	return a.typ == "acquired" && b.typ != "acquired"
}

// readPrefix reads a prefix stream until stop says enough (or 60 s pass),
// returning its change events (snapshots skipped) in arrival order.
func readPrefix(t *testing.T, s *e2e.Stream, stop func([]prefixEvent) bool) []prefixEvent {
	t.Helper()
	var out []prefixEvent
	deadline := time.Now().Add(60 * time.Second)
	for !stop(out) {
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not see every change in 60 s; so far %v", out)
		}
		ev := s.Next(t)
		if ev.Event == "snapshot" || ev.Event == "history" {
			continue
		}
		var data struct {
			Lease struct {
				Name         string `json:"name"`
				FencingToken int64  `json:"fencingToken"`
			} `json:"lease"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &data); err != nil {
			t.Fatalf("event %s: %v", ev.Event, err)
		}
		out = append(out, prefixEvent{id: ev.ID, typ: ev.Event, name: data.Lease.Name, token: data.Lease.FencingToken})
	}
	return out
}

// TestPrefixStreamTwoInstances: three leases change hands on two service
// instances over one Firestore collection, each holding acquired on one
// instance and released on the other, so every instance learns half the
// changes from Pub/Sub, out of order with its own. A prefix stream on each
// instance sees every change, in token order per lease; a stream that drops
// half-way and resumes on the other instance with Last-Event-ID misses
// nothing.
func TestPrefixStreamTwoInstances(t *testing.T) {
	t.Parallel()
	topic, _ := eventsTopic(t)
	env := eventsEnv(t, uniqueCollection("wp"), topic)
	prefixStreamTwoInstances(t, startListening(t, env), startListening(t, env))
}

// TestPrefixStreamTwoInstancesPostgres: the same on PostgreSQL without
// Pub/Sub: the instances relay their changes through LISTEN/NOTIFY.
func TestPrefixStreamTwoInstancesPostgres(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t)
	a := startRelaying(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	b := startRelaying(t, postgresServiceEnv(c))
	prefixStreamTwoInstances(t, a, b)
}

// startRelaying starts a service over PostgreSQL without Pub/Sub and waits
// until it listens for the other instances' notifications.
func startRelaying(t *testing.T, env map[string]string) *e2e.Service {
	t.Helper()
	svc := e2e.StartService(t, env)
	eventually(t, 20*time.Second, func() error {
		if !strings.Contains(svc.Output(), `"message":"events: relayed through the backend's notifications"`) {
			return fmt.Errorf("instance not relaying yet:\n%s", svc.Output())
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // the LISTEN itself
	return svc
}

// prefixStreamTwoInstances is the body of the tests above, on instances a
// and b of one backend.
func prefixStreamTwoInstances(t *testing.T, a, b *e2e.Service) {
	inst := []e2e.Client{{URL: a.URL}, {URL: b.URL}}
	prefix := strings.TrimSuffix(e2e.UniqueName("x"), "x")
	names := []string{prefix + "l1", prefix + "l2", prefix + "l3"}

	sa := e2e.WatchPrefix(t, inst[0], prefix, "")
	sb := e2e.WatchPrefix(t, inst[1], prefix, "")
	const holdings = 5
	var want []string // the changes of one lease
	for tok := 1; tok <= holdings; tok++ {
		want = append(want, fmt.Sprintf("%d/acquired", tok))
		if tok < holdings {
			want = append(want, fmt.Sprintf("%d/released", tok))
		}
	}
	done := func(evs []prefixEvent) bool {
		n := 0
		for _, e := range evs {
			if e.token == holdings && e.typ == "acquired" {
				n++
			}
		}
		return n == len(names)
	}

	changes := make(chan struct{})
	half := make(chan struct{})
	go func() {
		defer close(changes)
		for tok := 1; tok <= holdings; tok++ {
			if tok == 3 {
				close(half)
			}
			for i, name := range names {
				on := inst[(tok+i)%2]
				holder := fmt.Sprintf("h%d", tok)
				r := on.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"`+holder+`","ttlMs":60000}`)
				if r.Status != http.StatusOK || r.Token() != int64(tok) {
					t.Errorf("acquire %s on instance %d: %d %s", name, (tok+i)%2, r.Status, r.Raw)
					return
				}
				if tok < holdings {
					other := inst[(tok+i+1)%2]
					if r := other.Post(t, "/v1/leases/"+name+":release", fmt.Sprintf(`{"holder":"%s","fencingToken":%d}`, holder, tok)); r.Status != http.StatusOK {
						t.Errorf("release %s: %d %s", name, r.Status, r.Raw)
						return
					}
				}
			}
		}
	}()

	// Instance B's stream drops half-way; it resumes on instance A.
	<-half
	first := readPrefix(t, sb, func(evs []prefixEvent) bool { return len(evs) >= 9 })
	sb.Close()
	last := first[len(first)-1].id
	resumed := readPrefix(t, e2e.WatchPrefix(t, inst[0], prefix, last), done)
	all := readPrefix(t, sa, done)
	<-changes
	if t.Failed() {
		return
	}

	check := func(label string, evs []prefixEvent, dedup bool) {
		t.Helper()
		for _, name := range names {
			var got []string
			var kept prefixEvent
			for _, e := range evs {
				if e.name != name {
					continue
				}
				if dedup && kept.typ != "" && !newer(kept, e) {
					continue
				}
				if kept.typ != "" && !newer(kept, e) {
					t.Fatalf("%s: %s: %s after %s, out of token order (all: %v)", label, name, e.key(), kept.key(), evs)
				}
				kept = e
				got = append(got, e.key())
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: %s: changes %v, want %v", label, name, got, want)
			}
		}
	}
	check("instance A's stream", all, false)
	// What the client holds after the resume (what it read before, then the
	// resumed stream, repeats dropped) is every change in order. The
	// resumed stream alone may lack the oldest changes: the replay starts
	// with what instance A had received when the client reconnected, and a
	// change Pub/Sub brings A later than a newer one of its lease is older
	// than what the stream already sent (the client had it from B).
	check("instance B's stream, resumed on instance A", append(first, resumed...), true)
	t.Logf("A's stream: %d changes; B's stream: %d, then %d after resuming on A (the replay repeats %d)",
		len(all), len(first), len(resumed), countReplayed(resumed, first))
}

// countReplayed counts the leading events of resumed that repeat what
// first had: the replay from before the cursor.
func countReplayed(resumed, first []prefixEvent) int {
	had := map[string]bool{}
	for _, e := range first {
		had[e.name+"/"+e.key()] = true
	}
	n := 0
	for _, e := range resumed {
		if !had[e.name+"/"+e.key()] {
			break
		}
		n++
	}
	return n
}
