package terraform_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// This file checks what the first real deploy depends on and `terraform
// validate` cannot see without the provider: alert queries that Cloud
// Monitoring accepts and that select this deployment's series, the wait for
// IAM propagation, the CPU and memory Cloud Run accepts, the Pub/Sub
// permissions the code uses, and the leasectl image.

// instrumentNames returns the OpenTelemetry instruments telemetry/metrics.go
// creates, by name, with the constructor that creates each one
// (Int64Counter, Float64ObservableGauge, …).
func instrumentNames(t *testing.T) map[string]string {
	t.Helper()
	path := filepath.Join(repoRoot, "telemetry", "metrics.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ctor := regexp.MustCompile(`^(Int64|Float64)(Counter|UpDownCounter|Histogram|Gauge|ObservableCounter|ObservableUpDownCounter|ObservableGauge)$`)
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !ctor.MatchString(sel.Sel.Name) {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			name, _ := strconv.Unquote(lit.Value)
			out[name] = sel.Sel.Name
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("%s: found no instrument (meter.Int64Counter(\"name\", …) and the like): the scan is broken", path)
	}
	return out
}

var (
	// promSelector is one vector selector of an alert query.
	promSelector = regexp.MustCompile(`\{[^{}]*\}`)
	// exactSelector is the only selector form the alerts may use: the
	// instrument's name, UTF-8 quoted, and this deployment's job.
	exactSelector = regexp.MustCompile(`^\{"([a-z][a-z0-9_.]*)", job="([^"]*)"\}$`)
)

// TestAlertQueriesSelectExportedMetricsOfThisDeployment checks every alert
// condition: PromQL selecting an instrument of telemetry/metrics.go by its
// exact name and this deployment's job, counters only under increase(), and
// disable_metric_validation set, so that the policies can be created before
// the metrics exist.
func TestAlertQueriesSelectExportedMetricsOfThisDeployment(t *testing.T) {
	m := loadModule(t, moduleDir)
	instruments := instrumentNames(t)
	for _, name := range []string{"leasesvc", "leases-blue"} {
		t.Run(name, func(t *testing.T) {
			e := m.evaluate(t, inputs("firestore", map[string]cty.Value{"name": cty.StringVal(name)}))
			policies := instancesOf(t, e, "google_monitoring_alert_policy")
			if len(policies) == 0 {
				t.Fatal("no alert policy")
			}
			seen := map[string]bool{}
			for _, p := range policies {
				conds := e.nested(t, p.block, "conditions")
				if len(conds) == 0 {
					t.Errorf("%s has no conditions", p.addr)
				}
				for _, c := range conds {
					for _, b := range c.body.Blocks {
						if strings.HasPrefix(b.Type, "condition_") && b.Type != "condition_prometheus_query_language" {
							t.Errorf("%s: a %s condition; the alerts are PromQL (condition_prometheus_query_language)", p.addr, b.Type)
						}
					}
					pqs := e.nested(t, c, "condition_prometheus_query_language")
					if len(pqs) != 1 {
						t.Errorf("%s: a condition without condition_prometheus_query_language", p.addr)
						continue
					}
					if v, ok := e.attr(t, pqs[0], "disable_metric_validation"); !ok || !v.RawEquals(cty.True) {
						t.Errorf("%s: disable_metric_validation = %#v, want true: the policy is created before its metric exists, and Cloud Monitoring refuses it otherwise (\"Cannot find metric(s)\")", p.addr, v)
					}
					q, _ := e.attr(t, pqs[0], "query")
					query := str(t, p.addr+" query", q)
					if strings.Contains(query, "__name__") || strings.Contains(query, "=~") {
						t.Errorf("%s: query %q matches names or labels by regex; Cloud Monitoring's PromQL matches metric names exactly only", p.addr, query)
					}
					sels := promSelector.FindAllStringIndex(query, -1)
					if len(sels) == 0 {
						t.Errorf("%s: query %q has no selector {…}", p.addr, query)
					}
					for _, loc := range sels {
						sel := query[loc[0]:loc[1]]
						if before, ok := strings.CutSuffix(query[:loc[0]], runRequestCount); ok {
							checkRunSelector(t, p.addr, name, sel, strings.HasSuffix(strings.TrimSpace(before), "increase("))
							seen[runRequestCount] = true
							continue
						}
						sm := exactSelector.FindStringSubmatch(sel)
						if sm == nil {
							t.Errorf("%s: selector %s: want {\"<instrument name>\", job=\"<name>\"}", p.addr, sel)
							continue
						}
						metric, job := sm[1], sm[2]
						seen[metric] = true
						kind, ok := instruments[metric]
						if !ok {
							t.Errorf("%s: queries %q, which is not an instrument of telemetry/metrics.go (%v): the alert could never fire", p.addr, metric, sortedKeys(instruments))
						}
						if job != name {
							t.Errorf("%s: selector %s filters job=%q, want this deployment's %q (service.name = K_SERVICE = var.name)", p.addr, sel, job, name)
						}
						counter := strings.HasSuffix(kind, "Counter")
						inIncrease := strings.HasSuffix(strings.TrimSpace(query[:loc[0]]), "increase(")
						if counter != inIncrease {
							t.Errorf("%s: %s is a %s; counters go inside increase(…), gauges do not (query %q)", p.addr, metric, kind, query)
						}
					}
				}
			}
			for _, want := range []string{"leasesvc.lease.transitions", "leasesvc.lease.unheld_seconds", "leasesvc.events.publish.failures", "leasesvc.lease.waiters", runRequestCount} {
				if !seen[want] {
					t.Errorf("the alerts query %v; want the transitions, unheld_seconds, publish failures and waiters instruments, and Cloud Run's %s", sortedKeys(seen), runRequestCount)
				}
			}
		})
	}
}

// runRequestCount is Cloud Run's request count (run.googleapis.com/request_count,
// a delta counter) in Cloud Monitoring's PromQL spelling of system metrics.
const runRequestCount = "run_googleapis_com:request_count"

// runSelector is the only selector of runRequestCount the alerts may use:
// this deployment's Cloud Run service, 5xx answers.
var runSelector = regexp.MustCompile(`^\{monitored_resource="cloud_run_revision", service_name="([^"]*)", response_code_class="5xx"\}$`)

// checkRunSelector checks a selector of Cloud Run's request count: this
// deployment's service (service_name = var.name), 5xx answers, inside
// increase(…) as every counter.
func checkRunSelector(t *testing.T, addr, name, sel string, inIncrease bool) {
	t.Helper()
	sm := runSelector.FindStringSubmatch(sel)
	switch {
	case sm == nil:
		t.Errorf("%s: selector %s%s: want {monitored_resource=\"cloud_run_revision\", service_name=\"<name>\", response_code_class=\"5xx\"}", addr, runRequestCount, sel)
	case sm[1] != name:
		t.Errorf("%s: selector %s%s filters service_name=%q, want this deployment's %q", addr, runRequestCount, sel, sm[1], name)
	}
	if !inIncrease {
		t.Errorf("%s: %s is a counter; it goes inside increase(…)", addr, runRequestCount)
	}
}

// TestAlertsCoverSilenceAndServerErrors checks the two alerts that do not
// depend on leasesvc's own series being there: one on their absence, on a
// gauge every instance reports at each export (absent(…) over
// telemetry_absent_minutes), and one on Cloud Run's 5xx answers, which
// count the requests no instance could take (failed starts) too.
func TestAlertsCoverSilenceAndServerErrors(t *testing.T) {
	m := loadModule(t, moduleDir)
	instruments := instrumentNames(t)
	e := m.evaluate(t, inputs("firestore", map[string]cty.Value{"telemetry_absent_minutes": cty.NumberIntVal(15)}))
	var absent, errors5xx int
	for _, p := range instancesOf(t, e, "google_monitoring_alert_policy") {
		for _, c := range e.nested(t, p.block, "conditions") {
			for _, pq := range e.nested(t, c, "condition_prometheus_query_language") {
				q, _ := e.attr(t, pq, "query")
				query := str(t, p.addr+" query", q)
				if sm := regexp.MustCompile(`^absent\(\{"([a-z.]+)", job="leasesvc"\}\)$`).FindStringSubmatch(query); sm != nil {
					absent++
					if kind := instruments[sm[1]]; !strings.HasSuffix(kind, "ObservableGauge") {
						t.Errorf("%s: absent() of %s (%s): want an observable gauge, which every instance reports at every export", p.addr, sm[1], kind)
					}
					if d, _ := e.attr(t, pq, "duration"); !d.RawEquals(cty.StringVal("900s")) {
						t.Errorf("%s: duration = %#v with telemetry_absent_minutes = 15, want \"900s\"", p.addr, d)
					}
				}
				if strings.Contains(query, runRequestCount) && strings.Contains(query, `response_code_class="5xx"`) {
					errors5xx++
				}
			}
		}
	}
	if absent != 1 || errors5xx != 1 {
		t.Errorf("found %d alerts on absent metrics and %d on Cloud Run 5xx answers, want one of each", absent, errors5xx)
	}
	if v := m.variables["min_instances"]; v == nil {
		t.Fatal("no variable min_instances")
	}
	if ok, err := validates(t, m, "min_instances", cty.NumberIntVal(0)); err != nil || ok {
		t.Errorf("min_instances = 0 passes validation (err %v): with no instance, the absence alert would fire whenever the service scales to zero", err)
	}
}

// dependsOn returns the resource addresses of a block's depends_on.
func dependsOn(t *testing.T, b *hclsyntax.Block) []string {
	t.Helper()
	a, ok := b.Body.Attributes["depends_on"]
	if !ok {
		return nil
	}
	exprs, diags := hcl.ExprList(a.Expr)
	if diags.HasErrors() {
		t.Fatalf("%s: depends_on: %s", a.SrcRange, diags.Error())
	}
	var out []string
	for _, x := range exprs {
		tr, diags := hcl.AbsTraversalForExpr(x)
		if diags.HasErrors() || len(tr) != 2 {
			t.Fatalf("%s: depends_on holds %T, want resource addresses", x.Range(), x)
		}
		name, _ := attrName(tr, 1)
		out = append(out, tr.RootName()+"."+name)
	}
	return out
}

// TestServiceWaitsForIAMPropagation checks that the service is created only
// after a time_sleep that follows every grant to the service account, so
// that the first revision starts with its grants in force.
func TestServiceWaitsForIAMPropagation(t *testing.T) {
	m := loadModule(t, moduleDir)
	sleeps := m.resources(func(typ string) bool { return typ == "time_sleep" })
	if len(sleeps) != 1 {
		t.Fatalf("want one time_sleep (the wait for IAM propagation), got %d", len(sleeps))
	}
	sleep := sleeps[0]
	sleepAddr := "time_sleep." + sleep.Labels[1]
	after := dependsOn(t, sleep)
	for _, b := range m.resources(func(typ string) bool { return strings.HasSuffix(typ, "_iam_member") }) {
		addr := b.Labels[0] + "." + b.Labels[1]
		if b.Labels[0] == "google_cloud_run_v2_service_iam_member" {
			continue // grants on the service itself, which come after it
		}
		if !slices.Contains(after, addr) {
			t.Errorf("%s does not depend on %s: the service could start before that grant is in force", sleepAddr, addr)
		}
	}
	run := m.resources(func(typ string) bool { return typ == "google_cloud_run_v2_service" })
	if len(run) != 1 || !slices.Contains(dependsOn(t, run[0]), sleepAddr) {
		t.Errorf("google_cloud_run_v2_service does not depend on %s", sleepAddr)
	}
	for _, backend := range backends {
		e := m.evaluate(t, inputs(backend, nil))
		inst := onlyInstance(t, e, "time_sleep")
		if v, ok := e.attr(t, inst.block, "create_duration"); !ok || !v.RawEquals(cty.StringVal("120s")) {
			t.Errorf("backend %s: %s.create_duration = %#v by default, want \"120s\" (IAM changes typically propagate within 2 minutes)", backend, inst.addr, v)
		}
	}
	e := m.evaluate(t, inputs("firestore", map[string]cty.Value{"iam_propagation_wait_seconds": cty.NumberIntVal(300)}))
	if v, _ := e.attr(t, onlyInstance(t, e, "time_sleep").block, "create_duration"); !v.RawEquals(cty.StringVal("300s")) {
		t.Errorf("iam_propagation_wait_seconds = 300: create_duration = %#v, want \"300s\"", v)
	}

	// The module declares the provider of time_sleep.
	var declared bool
	for _, tf := range m.blocksOf("terraform", "") {
		for _, b := range tf.Body.Blocks {
			if a, ok := b.Body.Attributes["time"]; b.Type == "required_providers" && ok {
				v, diags := a.Expr.Value(nil)
				declared = !diags.HasErrors() && v.Type().IsObjectType() && v.Type().HasAttribute("source") &&
					v.GetAttr("source").RawEquals(cty.StringVal("hashicorp/time")) && v.Type().HasAttribute("version")
			}
		}
	}
	if !declared {
		t.Error(`required_providers does not declare time = { source = "hashicorp/time", version = … }`)
	}
}

// TestCPUAndMemoryCloudRunAccepts checks the cpu validation and the
// precondition that memory fits the CPU count, against Cloud Run's table.
func TestCPUAndMemoryCloudRunAccepts(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, cpu := range []string{"1", "2", "4", "6", "8"} {
		if ok, err := validates(t, m, "cpu", cty.StringVal(cpu)); err != nil || !ok {
			t.Errorf("cpu = %q refused (err %v), want it accepted", cpu, err)
		}
	}
	for _, cpu := range []string{"0.5", "3", "1000m", "16", "", "1 "} {
		if ok, err := validates(t, m, "cpu", cty.StringVal(cpu)); err != nil || ok {
			t.Errorf("cpu = %q accepted (err %v), want it refused: Cloud Run would refuse it at apply", cpu, err)
		}
	}
	fits := func(cpu, memory string) bool {
		return preconditionsHold(t, m, fmt.Sprintf("cpu %s memory %s", cpu, memory), map[string]cty.Value{"cpu": cty.StringVal(cpu), "memory": cty.StringVal(memory)})
	}
	for _, c := range []struct {
		cpu, memory string
		ok          bool
	}{
		{"1", "512Mi", true}, {"1", "4Gi", true}, {"1", "8Gi", false},
		{"2", "8Gi", true}, {"2", "9Gi", false},
		{"4", "512Mi", false}, {"4", "2Gi", true}, {"4", "2048Mi", true},
		{"6", "2Gi", false}, {"6", "4Gi", true},
		{"8", "3Gi", false}, {"8", "32Gi", true}, {"8", "33Gi", false},
	} {
		if got := fits(c.cpu, c.memory); got != c.ok {
			t.Errorf("cpu %s with memory %s: the preconditions say %v, want %v", c.cpu, c.memory, got, c.ok)
		}
	}
}

// subscriptionCalls maps the Pub/Sub calls of notify/ to the permission
// each needs on the subscription
// (https://cloud.google.com/pubsub/docs/access-control#permissions_and_roles).
var subscriptionCalls = map[string]string{
	"CreateSubscription": "pubsub.subscriptions.create",
	"DeleteSubscription": "pubsub.subscriptions.delete",
	"GetSubscription":    "pubsub.subscriptions.get",
	"UpdateSubscription": "pubsub.subscriptions.update",
	"Receive":            "pubsub.subscriptions.consume",
	"Pull":               "pubsub.subscriptions.consume",
	"StreamingPull":      "pubsub.subscriptions.consume",
	"Seek":               "pubsub.subscriptions.consume",
}

// TestSubscriptionRoleMatchesCode checks that the custom role holds exactly
// the permissions of the subscription calls notify/ makes.
func TestSubscriptionRoleMatchesCode(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(repoRoot, "notify", "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("notify/*.go: %v", err)
	}
	want := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if p, ok := subscriptionCalls[sel.Sel.Name]; ok {
						want[p] = true
					}
				}
			}
			return true
		})
	}
	if !want["pubsub.subscriptions.create"] || !want["pubsub.subscriptions.consume"] {
		t.Fatalf("found the permissions %v in notify/: the scan is broken (no CreateSubscription or Receive)", sortedKeys(want))
	}
	m := loadModule(t, moduleDir)
	e := m.evaluate(t, inputs("firestore", nil))
	perms, ok := customRoles(t, e)["event_subscriptions"]
	if !ok {
		t.Fatal("no custom role event_subscriptions")
	}
	got := map[string]bool{}
	for _, p := range perms {
		got[p] = true
	}
	if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
		t.Errorf("custom role event_subscriptions holds %v; notify/ calls need exactly %v", sortedKeys(got), sortedKeys(want))
	}
}

// dockerStage is one stage of the Dockerfile: its name, its FROM flags
// (--platform=…), and its instructions after FROM, one a line with
// continuations joined.
type dockerStage struct {
	name  string
	flags []string
	body  string
}

// dockerStages parses the repository's Dockerfile into its stages.
func dockerStages(t *testing.T) []dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var stages []dockerStage
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, `\`); ok { // continuation
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(l)
		full := line.String()
		line.Reset()
		if fields := strings.Fields(full); strings.EqualFold(fields[0], "FROM") {
			st := dockerStage{}
			args := fields[1:]
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				st.flags = append(st.flags, args[0])
				args = args[1:]
			}
			if len(args) == 3 && strings.EqualFold(args[1], "AS") {
				st.name = args[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].body += full + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stages) == 0 {
		t.Fatal("the Dockerfile has no FROM: the parse is broken")
	}
	return stages
}

// TestDockerfileCrossCompiles checks that the build stage runs on the
// builder's platform and cross-compiles to the image's: FROM
// --platform=$BUILDPLATFORM, ARG TARGETOS and TARGETARCH declared, and
// every go build given GOOS and GOARCH from them; while the runtime stages
// take the target platform (no --platform), so that `docker build
// --platform linux/amd64` on an ARM machine compiles natively instead of
// under emulation, and yields an amd64 image.
func TestDockerfileCrossCompiles(t *testing.T) {
	var build *dockerStage
	stages := dockerStages(t)
	for i, st := range stages {
		if st.name == "build" {
			build = &stages[i]
			continue
		}
		if len(st.flags) > 0 {
			t.Errorf("stage %q has FROM flags %v: a runtime stage must take the target platform", st.name, st.flags)
		}
	}
	if build == nil {
		t.Fatal("no stage named build")
	}
	if !slices.Equal(build.flags, []string{"--platform=$BUILDPLATFORM"}) {
		t.Errorf("the build stage's FROM flags are %v, want [--platform=$BUILDPLATFORM]: it would run under emulation when the target differs from the builder", build.flags)
	}
	lines := strings.Split(build.body, "\n")
	argAt := func(name string) int {
		return slices.IndexFunc(lines, func(l string) bool { return l == "ARG "+name })
	}
	builds := 0
	for i, l := range lines {
		for cmd := range strings.SplitSeq(l, "&&") {
			if !strings.Contains(cmd, "go build") {
				continue
			}
			builds++
			if !strings.Contains(cmd, "GOOS=${TARGETOS") || !strings.Contains(cmd, "GOARCH=${TARGETARCH}") {
				t.Errorf("the build stage runs go build without GOOS=${TARGETOS…} GOARCH=${TARGETARCH}: %s", strings.TrimSpace(cmd))
			}
			for _, a := range []string{"TARGETOS", "TARGETARCH"} {
				if at := argAt(a); at < 0 || at > i {
					t.Errorf("the build stage does not declare ARG %s before its go build: the variable would be empty", a)
				}
			}
		}
	}
	if builds < 2 {
		t.Errorf("found %d go build commands in the build stage, want leasesvc's and leasectl's: the parse is broken", builds)
	}
}

// TestLeasectlImage checks that the Dockerfile builds a leasectl image
// besides the service's (which stays the default, last stage), and that
// docs/agents.md shows how to copy leasectl into an agent's image.
func TestLeasectlImage(t *testing.T) {
	stages := dockerStages(t)
	byName := map[string]string{}
	for _, s := range stages {
		byName[s.name] = s.body
	}
	build := regexp.MustCompile(`go build .*-o /out/leasectl \./cmd/leasectl`)
	if !build.MatchString(byName["build"]) {
		t.Errorf("the build stage does not build ./cmd/leasectl to /out/leasectl:\n%s", byName["build"])
	}
	ctl, ok := byName["leasectl"]
	if !ok {
		t.Fatalf("no stage named leasectl (docker build --target leasectl); stages: %v", stages)
	}
	if !strings.Contains(ctl, "COPY --from=build /out/leasectl /leasectl") || !strings.Contains(ctl, `ENTRYPOINT ["/leasectl"]`) {
		t.Errorf("the leasectl stage must copy /out/leasectl to /leasectl and run it:\n%s", ctl)
	}
	if strings.Contains(ctl, "leasesvc") {
		t.Errorf("the leasectl stage ships leasesvc too:\n%s", ctl)
	}
	if last := stages[len(stages)-1]; !strings.Contains(last.body, `ENTRYPOINT ["/leasesvc"]`) {
		t.Errorf("the last stage (what `docker build .` and Cloud Run get) must be the service's, not %q", last.name)
	}

	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	copyLine := regexp.MustCompile(`(?m)^COPY --from=\S+/leasectl(:\S+|@sha256:\S+)? /leasectl \S+$`)
	if !copyLine.Match(doc) {
		t.Error("docs/agents.md shows no `COPY --from=…/leasectl:VERSION /leasectl /usr/local/bin/leasectl` line for an agent's Dockerfile")
	}
}

// deployerRoles maps the resource types the module creates, by prefix, to
// the role docs/deploy.md must list for the person who applies it.
var deployerRoles = map[string]string{
	"google_project_service":           "roles/serviceusage.serviceUsageAdmin",
	"google_cloud_run_v2_service":      "roles/run.admin",
	"google_service_account":           "roles/iam.serviceAccountAdmin",
	"google_project_iam_custom_role":   "roles/iam.roleAdmin",
	"google_project_iam_member":        "roles/resourcemanager.projectIamAdmin",
	"google_artifact_registry":         "roles/artifactregistry.admin",
	"google_pubsub":                    "roles/pubsub.admin",
	"google_secret_manager":            "roles/secretmanager.admin",
	"google_monitoring_alert_policy":   "roles/monitoring.alertPolicyEditor",
	"google_firestore":                 "roles/datastore.owner",
	"google_spanner":                   "roles/spanner.admin",
	"google_cloud_run_v2_service_iam_": "roles/run.admin",
}

var (
	shBlock  = regexp.MustCompile("(?s)```sh\n(.*?)```")
	shAssign = regexp.MustCompile(`(?:^|[\s;(&])(?:export\s+)?([A-Z][A-Z0-9_]*)=`)
	shUse    = regexp.MustCompile(`\$\{?([A-Z][A-Z0-9_]*)`)
	tfVarArg = regexp.MustCompile(`-var "?([a-z_]+)=`)
)

// TestDeployWalkthrough checks docs/deploy.md as a new user on an empty
// project would walk it: the deployer's roles cover every resource type
// the module creates, the agents' service account is created and can be
// impersonated, no command uses a shell variable before a step sets it,
// every -var is a variable of the example, no placeholder notification
// channel is there to copy, and the Go example sends both headers
// (googleauth.NewClient, not a bare idtoken client).
func TestDeployWalkthrough(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	m := loadModule(t, moduleDir)
	for _, b := range m.blocksOf("resource", "") {
		matched := false
		for prefix, role := range deployerRoles {
			if strings.HasPrefix(b.Labels[0], prefix) {
				matched = true
				if !strings.Contains(doc, "`"+role+"`") {
					t.Errorf("the module creates %s, but docs/deploy.md's deployer roles lack `%s`", b.Labels[0], role)
				}
			}
		}
		// time_ and random_ resources live in the state only: no role.
		if !matched && !strings.HasPrefix(b.Labels[0], "time_") && !strings.HasPrefix(b.Labels[0], "random_") {
			t.Errorf("the module creates %s: add the role a deployer needs for it to deployerRoles and to docs/deploy.md", b.Labels[0])
		}
	}
	for _, want := range []string{
		"gcloud iam service-accounts create agents",
		"iamcredentials.googleapis.com",
		"roles/iam.serviceAccountTokenCreator",
		"--impersonate-service-account=",
		"googleauth.NewClient(",
		"gcloud beta monitoring channels create",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/deploy.md lacks %q", want)
		}
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`notificationChannels/[0-9]`),
		regexp.MustCompile(`idtoken\.New(TokenSource|Client)\(`),
	} {
		if loc := bad.FindString(doc); loc != "" {
			t.Errorf("docs/deploy.md holds %q: a placeholder that fails when copied, or a client Cloud Run's invoker check strips", loc)
		}
	}

	example := loadModule(t, exampleDir)
	defined := map[string]bool{"PATH": true, "HOME": true, "TMPDIR": true}
	for _, blk := range shBlock.FindAllStringSubmatch(doc, -1) {
		for line := range strings.SplitSeq(blk[1], "\n") {
			code, _, _ := strings.Cut(line, " #") // comments
			for _, u := range shUse.FindAllStringSubmatch(code, -1) {
				if !defined[u[1]] && !strings.Contains(code, u[1]+"=") {
					t.Errorf("docs/deploy.md uses $%s before any step sets it: %s", u[1], strings.TrimSpace(line))
				}
			}
			for _, a := range shAssign.FindAllStringSubmatch(code, -1) {
				defined[a[1]] = true
			}
			for _, v := range tfVarArg.FindAllStringSubmatch(code, -1) {
				if _, ok := example.variables[v[1]]; !ok {
					t.Errorf("docs/deploy.md passes -var %s, which examples/cloudrun does not declare", v[1])
				}
			}
		}
	}
	if !defined["AGENTS"] || !defined["CHANNELS"] || !defined["IMAGE"] {
		t.Errorf("docs/deploy.md sets none of AGENTS, CHANNELS or IMAGE: the scan is broken (%v)", sortedKeys(defined))
	}
}

// preconditionsHold reports whether every precondition of the Cloud Run
// service holds with vars set (the Firestore example otherwise); what names
// the case in a failure.
func preconditionsHold(t *testing.T, m *module, what string, vars map[string]cty.Value) bool {
	t.Helper()
	e := m.evaluate(t, inputs("firestore", vars))
	run := m.resources(func(typ string) bool { return typ == "google_cloud_run_v2_service" })[0]
	for _, lc := range run.Body.Blocks {
		if lc.Type != "lifecycle" {
			continue
		}
		for _, pc := range lc.Body.Blocks {
			if pc.Type != "precondition" {
				continue
			}
			v, err := e.valueErr(pc.Body.Attributes["condition"].Expr, nil)
			if err != nil {
				t.Fatalf("%s: precondition: %v", what, err)
			}
			if !v.RawEquals(cty.True) {
				return false
			}
		}
	}
	return true
}
