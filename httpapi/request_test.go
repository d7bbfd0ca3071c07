package httpapi_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// TestRequestRulesSameOverRESTAndSocket feeds the same bad lease requests
// to REST and to a session socket: both surfaces decode them with one
// decoder per operation (request.go), so both answer with the same code,
// status and field violations, in the same order. REST acquires carry
// ttlMs, which a message may not (a session's leases live by its TTL).
func TestRequestRulesSameOverRESTAndSocket(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	if _, err := in.m.Acquire(t.Context(), lease.AcquireRequest{Name: "held", Holder: "h", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"k": strings.Repeat("x", lease.MaxCheckpointBytes)}
	cases := []struct {
		what, op string
		fields   map[string]any
		want     []string // the fields named, in order
	}{
		{"acquire without holder", "acquire", map[string]any{}, []string{"holder"}},
		{"acquire with a negative waitMs", "acquire", map[string]any{"holder": "h", "waitMs": -1}, []string{"waitMs"}},
		{"acquire with waitMs not an integer", "acquire", map[string]any{"holder": "h", "waitMs": "soon"}, []string{"waitMs"}},
		{"acquire with priority out of range", "acquire", map[string]any{"holder": "h", "priority": 1 << 40}, []string{"priority"}},
		{"acquire that preempts without waiting", "acquire", map[string]any{"holder": "h", "preempt": true}, []string{"preempt"}},
		{"acquire with preempt not a boolean", "acquire", map[string]any{"holder": "h", "preempt": 1}, []string{"preempt"}},
		{"acquire with metadata not an object", "acquire", map[string]any{"holder": "h", "metadata": "m"}, []string{"metadata"}},
		{"acquire with an unknown field", "acquire", map[string]any{"holder": "h", "bogus": 1}, []string{"bogus"}},
		{"acquire with a bad holder and an unknown field", "acquire", map[string]any{"holder": "", "zz": 1}, []string{"zz", "holder"}},
		{"renew without fencingToken", "renew", map[string]any{"holder": "h"}, []string{"fencingToken"}},
		{"renew with fencingToken a string", "renew", map[string]any{"holder": "h", "fencingToken": "1"}, []string{"fencingToken"}},
		{"renew with fencingToken 0", "renew", map[string]any{"holder": "h", "fencingToken": 0}, []string{"fencingToken"}},
		{"renew with fencingToken past 2^53 - 1", "renew", map[string]any{"holder": "h", "fencingToken": int64(1) << 53}, []string{"fencingToken"}},
		{"release with fencingToken past 2^53 - 1", "release", map[string]any{"holder": "h", "fencingToken": int64(1) << 53}, []string{"fencingToken"}},
		{"renew with a checkpoint too large", "renew", map[string]any{"holder": "h", "fencingToken": 1, "checkpoint": big}, []string{"checkpoint"}},
		{"release without holder and fencingToken", "release", map[string]any{}, []string{"holder", "fencingToken"}},
		{"release with checkpoint not an object", "release", map[string]any{"holder": "h", "fencingToken": 1, "checkpoint": []int{1}}, []string{"checkpoint"}},
		{"transfer without to", "transfer", map[string]any{"holder": "h", "fencingToken": 1}, []string{"to"}},
		{"transfer with reserveMs 0", "transfer", map[string]any{"holder": "h", "fencingToken": 1, "to": "n", "reserveMs": 0}, []string{"reserveMs"}},
		{"transfer with reserveMs too long", "transfer", map[string]any{"holder": "h", "fencingToken": 1, "to": "n", "reserveMs": lease.MaxTransferReserve.Milliseconds() + 1}, []string{"reserveMs"}},
		{"transfer naming a principal without authentication", "transfer", map[string]any{"holder": "h", "fencingToken": 1, "to": "n", "toPrincipal": "p"}, []string{"toPrincipal"}},
		{"transfer with an empty toPrincipal and reserveMs 0", "transfer", map[string]any{"holder": "h", "fencingToken": 1, "to": "n", "reserveMs": 0, "toPrincipal": ""}, []string{"reserveMs", "toPrincipal"}},
	}
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	for _, tc := range cases {
		t.Run(tc.what, func(t *testing.T) {
			body := maps.Clone(tc.fields)
			if tc.op == "acquire" {
				body["ttlMs"] = 30000
			}
			raw, _ := json.Marshal(body)
			resp, err := http.Post(in.srv.URL+"/v1/leases/held:"+tc.op, "application/json", bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var rest map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&rest); err != nil {
				t.Fatalf("REST answer: %v", err)
			}
			msg := maps.Clone(tc.fields)
			msg["name"] = "held"
			re := w.send(tc.op, msg)
			m := w.expect("error")
			if m["re"] != float64(re) {
				t.Fatalf("socket answer %v, want one to %d", m, re)
			}
			sock, _ := m["problem"].(map[string]any)
			if resp.StatusCode != 400 || rest["code"] != "invalid_argument" {
				t.Errorf("REST = %d %v; want 400 invalid_argument", resp.StatusCode, rest)
			}
			if got := violated(rest); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("REST names %v, want %v: %v", got, tc.want, rest["errors"])
			}
			for _, k := range []string{"code", "status", "title", "type", "errors"} {
				if !reflect.DeepEqual(rest[k], sock[k]) {
					t.Errorf("%s: REST %v, socket %v", k, rest[k], sock[k])
				}
			}
		})
	}
}

// violated returns the fields a problem's errors name, in order.
func violated(problem map[string]any) []string {
	errs, _ := problem["errors"].([]any)
	out := []string{}
	for _, e := range errs {
		v, _ := e.(map[string]any)
		f, _ := v["field"].(string)
		out = append(out, f)
	}
	return out
}
