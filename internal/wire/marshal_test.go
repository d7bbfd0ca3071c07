package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/lease"
)

// TestEventsAreNotHTMLEscaped: an event's JSON (a watch stream's data and
// a Pub/Sub message's) keeps <, > and & as they are, and means what
// json.Marshal's escaped form means.
func TestEventsAreNotHTMLEscaped(t *testing.T) {
	ev := lease.Event{Type: lease.EventAcquired, Lease: lease.Lease{Record: lease.Record{Name: "a", Holder: "h", FencingToken: 1,
		Metadata: []byte(`{"html":"<b>&amp;</b>"}`)}}}
	got, err := MarshalEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `<b>&amp;</b>`) || strings.Contains(string(got), `\u003c`) {
		t.Fatalf("event %s, want its metadata unescaped", got)
	}
	escaped, _ := json.Marshal(FromEvent(ev))
	var x, y any
	if err := json.Unmarshal(got, &x); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(escaped, &y)
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("%s means other than %s", got, escaped)
	}
}
