package terraform_test

import (
	"fmt"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
)

// TestSessionsFitCloudRunConcurrency checks what the module gives sessions
// (docs/deploy.md, "Sessions on Cloud Run"):
// each session socket is a Cloud Run request for its whole life, so the
// instance's concurrency is the Cloud Run maximum (1000) by default, the
// service may take all of it but rest_concurrency_reserve for sessions
// (LEASESVC_MAX_SESSIONS, 900 by default), the request timeout is the
// Cloud Run maximum (3600 s), and the service asks each socket to move
// before that timeout cuts it (LEASESVC_SESSION_MAX_AGE below the timeout,
// 55 min by default); a reserve that leaves no slot for sessions is refused
// at plan.
func TestSessionsFitCloudRunConcurrency(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, c := range []struct {
		name                                  string
		in                                    map[string]cty.Value
		concurrency, maxSessions, timeoutSecs int64
		maxAge                                time.Duration
	}{
		{"defaults", nil, 1000, 900, 3600, 55 * time.Minute},
		{"smaller", map[string]cty.Value{
			"max_concurrency":          cty.NumberIntVal(250),
			"rest_concurrency_reserve": cty.NumberIntVal(50),
			"request_timeout_seconds":  cty.NumberIntVal(600),
		}, 250, 200, 600, 550 * time.Second},
		{"shortest timeout", map[string]cty.Value{"request_timeout_seconds": cty.NumberIntVal(70)}, 1000, 900, 70, 64 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, backend := range backends {
				e := m.evaluate(t, inputs(backend, c.in))
				run := onlyInstance(t, e, "google_cloud_run_v2_service")
				tpls := e.nested(t, run.block, "template")
				if len(tpls) != 1 {
					t.Fatalf("%s: want one template, got %d", run.addr, len(tpls))
				}
				conc, ok := e.attr(t, tpls[0], "max_instance_request_concurrency")
				if !ok || conc.Type() != cty.Number || conc.AsBigFloat().Cmp(new(big.Float).SetInt64(c.concurrency)) != 0 {
					t.Errorf("backend %s: max_instance_request_concurrency = %#v, want %d", backend, conc, c.concurrency)
				}
				timeout, ok := e.attr(t, tpls[0], "timeout")
				if want := strconv.FormatInt(c.timeoutSecs, 10) + "s"; !ok || timeout.Type() != cty.String || timeout.AsString() != want {
					t.Errorf("backend %s: template timeout = %#v, want %q", backend, timeout, want)
				}
				env := containerEnv(t, e)
				if got, want := env["LEASESVC_MAX_SESSIONS"], strconv.FormatInt(c.maxSessions, 10); got != want {
					t.Errorf("backend %s: LEASESVC_MAX_SESSIONS = %q, want %q (max_concurrency less rest_concurrency_reserve)", backend, got, want)
				}
				age, err := time.ParseDuration(env["LEASESVC_SESSION_MAX_AGE"])
				if err != nil || age != c.maxAge {
					t.Errorf("backend %s: LEASESVC_SESSION_MAX_AGE = %q (%v), want %v", backend, env["LEASESVC_SESSION_MAX_AGE"], err, c.maxAge)
				}
				if limit := time.Duration(c.timeoutSecs) * time.Second; age >= limit {
					t.Errorf("backend %s: sessions move at %v, not before the request timeout %v cuts them", backend, age, limit)
				}
			}
		})
	}

	holds := func(conc, reserve int64) bool {
		return preconditionsHold(t, m, fmt.Sprintf("max_concurrency %d, rest_concurrency_reserve %d", conc, reserve), map[string]cty.Value{
			"max_concurrency": cty.NumberIntVal(conc), "rest_concurrency_reserve": cty.NumberIntVal(reserve)})
	}
	for _, c := range []struct {
		conc, reserve int64
		ok            bool
	}{{1000, 100, true}, {101, 100, true}, {100, 100, false}, {80, 100, false}} {
		if got := holds(c.conc, c.reserve); got != c.ok {
			t.Errorf("max_concurrency %d with rest_concurrency_reserve %d: the preconditions say %v, want %v", c.conc, c.reserve, got, c.ok)
		}
	}
	for _, v := range []cty.Value{cty.NumberIntVal(0), cty.NumberIntVal(1000), cty.NumberFloatVal(1.5)} {
		if ok, err := validates(t, m, "rest_concurrency_reserve", v); err != nil || ok {
			t.Errorf("rest_concurrency_reserve = %#v passes validation (err %v), want it refused", v, err)
		}
	}
}
