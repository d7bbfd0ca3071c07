package emulatortests

import (
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/lease"
)

// TestAllPairsCheck feeds checkAllPairs small histories: a clean one, and
// one per rule broken by a pair that is not the next token observed.
func TestAllPairsCheck(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// seen is an answer showing holding token of holder, acquired at acq,
	// read at server time s with the given expiry.
	seen := func(token int64, holder string, acq, s, exp int) history.Entry {
		return history.Entry{Client: int(token), Name: "l", Op: history.Get, Outcome: history.OK, Call: at(s), Return: at(s),
			Lease: &lease.Lease{Record: lease.Record{Name: "l", Holder: holder, FencingToken: token, AcquireTime: at(acq), ExpireTime: at(exp)}, ServerTime: at(s)}}
	}
	led := func(token int64, holder string, from, until int) history.Entry {
		return history.Entry{Client: 100 + int(token), Name: "l", Holder: holder, Op: history.Led, Token: token, Call: at(from), Return: at(until), Session: true}
	}
	clean := []history.Entry{
		seen(1, "a", 0, 10, 400), seen(1, "a", 0, 390, 400), led(1, "a", 5, 300),
		seen(2, "b", 400, 410, 800), led(2, "b", 405, 700),
		seen(3, "c", 800, 900, 1200),
	}
	cases := []struct {
		name    string
		entries []history.Entry
		want    string // in the first violation; "" for none
	}{
		{"clean", clean, ""},
		{"a holding shown live after a later one began", append(clean[:len(clean):len(clean)], seen(1, "a", 0, 850, 900)),
			`token 1 ("a") shown live at server time 12:00:00.850000`},
		{"a term ending after a later holding began", append(clean[:len(clean):len(clean)], led(1, "a", 5, 820)),
			`"a" led token 1 until 12:00:00.820000`},
		{"a holding shown live during a later term", append(clean[:len(clean):len(clean)], seen(1, "a", 0, 406, 500)),
			`token 1 ("a") shown live at server time 12:00:00.406000 (by get by client 1 (ok, )), after token 2 ("b") began at 12:00:00.400000`},
		{"two terms at once", append(clean[:len(clean):len(clean)], led(3, "c", 600, 1000)),
			`two leaders at once: "b" led token 2 until 12:00:00.700000 by its own deadline, and "c" led token 3 from 12:00:00.600000`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := checkAllPairs(tc.entries)
			switch {
			case tc.want == "" && res.count != 0:
				t.Fatalf("violations in a clean history: %v", res.violations)
			case tc.want == "":
				if res.holdings != 3 || res.terms != 2 {
					t.Fatalf("compared %d holdings and %d terms, want 3 and 2", res.holdings, res.terms)
				}
			case res.count == 0:
				t.Fatalf("no violation, want one saying %q", tc.want)
			default:
				var all []string
				for _, v := range res.violations {
					all = append(all, v.Msg)
				}
				if !strings.Contains(strings.Join(all, "\n"), tc.want) {
					t.Fatalf("violations:\n%s\nwant one saying %q", strings.Join(all, "\n"), tc.want)
				}
			}
		})
	}
}

// TestAckWatch checks where ackWatch finds a session agent's terms ended:
// at a deadline that passed before the next ack, unless a resume came
// between (which restarts them), and not for a holding dropped before any
// ack.
func TestAckWatch(t *testing.T) {
	day := time.Now().UTC()
	at := func(s string) time.Time { // a time of day today, as the trace writes it
		c, _ := time.Parse("15:04:05.000000", s)
		return time.Date(day.Year(), day.Month(), day.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.UTC)
	}
	feed := func(w *ackWatch, lines ...string) {
		for _, l := range lines {
			w.note(l)
		}
	}
	w := &ackWatch{}
	w.setWindow(400 * time.Millisecond)
	feed(w, "10:00:00.000000 opened on http://x, window 400ms", "10:00:00.100000 dropped l token 3: led until 10:00:00.100000")
	if w.led("l") {
		t.Fatal("a holding dropped before any ack counts as led")
	}
	w.arm(at("10:00:00.500000"))
	feed(w, "10:00:01.000000 ack on http://x of the heartbeat sent at 10:00:00.950000",
		"10:00:01.200000 ack on http://x of the heartbeat sent at 10:00:01.150000")
	if l, ok := w.lapsed(); ok {
		t.Fatalf("lapse at %v with acks in time", l)
	}
	feed(w, "10:00:01.700000 resumed on http://y at epoch 2: leases [], lost []",
		"10:00:01.710000 ack on http://y of the heartbeat sent at 10:00:01.700000")
	if l, ok := w.lapsed(); ok {
		t.Fatalf("lapse at %v though a resume restarted the terms", l)
	}
	feed(w, "10:00:03.000000 ack on http://y of the heartbeat sent at 10:00:02.900000")
	if l, ok := w.lapsed(); !ok || !l.Equal(at("10:00:02.060000")) {
		t.Fatalf("lapse %v, %v; want at 10:00:02.060000 (the deadline that passed)", l, ok)
	}
}
