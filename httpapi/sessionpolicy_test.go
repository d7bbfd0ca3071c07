package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/session"
)

// sessionPolicy grants "agent" acquire under own. and read under t01.;
// "nobody" is granted nothing.
const sessionPolicy = `grants:
  - principals: [agent]
    verbs: [acquire]
    prefixes: [own.]
  - principals: [agent]
    verbs: [read]
    prefixes: [t01.]
  - principals: [other]
    verbs: [acquire]
    prefixes: [t01., zz.]
`

func policyInstance(t *testing.T) (*sessionInstance, *auditSink) {
	t.Helper()
	pol, err := auth.ParsePolicy([]byte(sessionPolicy), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sink, log := newAuditSink()
	return newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Authenticator: tokenAuth{}, Policy: pol, Audit: log}), sink
}

// TestSessionConnectNeedsAGrant: a principal the policy grants acquire on
// no name may not open a session: its upgrade is 403 and audited, and it
// takes no slot.
func TestSessionConnectNeedsAGrant(t *testing.T) {
	in, sink := policyInstance(t)
	if st, code := dialStatus(t, wsURL(in.srv), "nobody"); st != http.StatusForbidden || code != "permission_denied" {
		t.Fatalf("an ungranted principal's upgrade: %d %s; want 403 permission_denied", st, code)
	}
	if l := sink.wait(t, "session"); l.Outcome != "permission_denied" || l.Principal != "nobody" {
		t.Fatalf("audit line %+v", l)
	}
	if taken, spare := in.reg.Slots(); taken+spare != 0 {
		t.Fatalf("the refused upgrade took a slot (%d, %d)", taken, spare)
	}
	w := dial(t, in.srv.URL, "agent") // granted acquire on some name
	w.open(1000)
}

// TestSessionResumeClaimsFollowThePolicy: a resume's claims of names the
// caller may not acquire are not taken over; one it may not even read is
// lost as a lease that does not exist ("deleted"), whatever the lease's
// real state, so that claims reveal nothing the policy hides.
func TestSessionResumeClaimsFollowThePolicy(t *testing.T) {
	in, _ := policyInstance(t)
	o := dial(t, in.srv.URL, "other")
	o.open(1000)
	o.send("acquire", map[string]any{"name": "t01.x", "holder": "o"})
	held := o.expect("result")["lease"].(map[string]any)
	o.send("acquire", map[string]any{"name": "zz.y", "holder": "o"})
	o.expect("result")

	a := dial(t, in.srv.URL, "agent")
	opened := a.open(1000)
	a.send("acquire", map[string]any{"name": "own.z", "holder": "a"})
	own := a.expect("result")["lease"].(map[string]any)
	r := dial(t, in.srv.URL, "agent")
	r.send("resume", map[string]any{"sessionId": opened["sessionId"], "epoch": opened["epoch"].(float64) + 1,
		"leases": []map[string]any{
			{"name": "own.z", "holder": "a", "fencingToken": own["fencingToken"]},
			{"name": "t01.x", "holder": "o", "fencingToken": held["fencingToken"]},
			{"name": "zz.y", "holder": "o", "fencingToken": 1},
			{"name": "zz.none", "holder": "o", "fencingToken": 7},
		}})
	got := r.expect("resumed")
	if ls, _ := got["leases"].([]any); len(ls) != 1 || ls[0].(map[string]any)["name"] != "own.z" {
		t.Fatalf("resumed leases %v; want own.z only", got["leases"])
	}
	reasons := map[string]string{}
	for _, l := range got["lost"].([]any) {
		m := l.(map[string]any)
		reasons[m["name"].(string)] = m["reason"].(string)
	}
	want := map[string]string{"t01.x": "revoked", "zz.y": "deleted", "zz.none": "deleted"}
	for name, reason := range want {
		if reasons[name] != reason {
			t.Fatalf("lost %v; want %v (zz.y, held, answers as zz.none, which does not exist)", reasons, want)
		}
	}
	// Nothing was taken over: other still holds both.
	o.ackedHeartbeat()
	for _, name := range []string{"t01.x", "zz.y"} {
		req, _ := http.NewRequest("GET", in.srv.URL+"/v1/leases/"+name, nil)
		req.Header.Set("Authorization", "Bearer other")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		if resp.StatusCode != 200 || !strings.Contains(body, `"holder":"o"`) {
			t.Fatalf("%s after the resume: %d %s; want still held by o", name, resp.StatusCode, body)
		}
	}
}
