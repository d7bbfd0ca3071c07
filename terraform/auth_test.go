package terraform_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/leasesvc/leasesvc/auth"
)

// This file checks how the module configures leasesvc's own authentication:
// LEASESVC_AUTH=google, the policy file mounted from a Secret Manager secret
// version that holds var.policy, the runtime service account's access to that
// secret, the rate limits and the audiences; and that the examples pass a
// policy the service accepts.

// testPolicy is the policy the tests give the module (inputs). The service
// must accept it: TestPolicyValidationAgreesWithService parses it.
const testPolicy = `grants:
  - principals: [agents@test-project.iam.gserviceaccount.com]
    verbs: [acquire]
    prefixes: [team-a.]
`

// resourceRef reports whether v is the placeholder of a reference to an
// attribute of a resource of type typ, such as
// "<google_secret_manager_secret.policy.secret_id>", and returns the
// resource's name and the attribute.
func resourceRef(v cty.Value, typ string) (name, attr string, ok bool) {
	if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return "", "", false
	}
	m := regexp.MustCompile(`^<` + regexp.QuoteMeta(typ) + `\.([a-z0-9_-]+)(?:\.([a-z0-9_]+))?>$`).FindStringSubmatch(v.AsString())
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// attrOf evaluates a block attribute that must be set.
func attrOf(t *testing.T, e *evaluator, s blockScope, what, name string) cty.Value {
	t.Helper()
	v, ok := e.attr(t, s, name)
	if !ok {
		t.Fatalf("%s sets no %s", what, name)
	}
	return v
}

// oneNested returns the single nested block of a type.
func oneNested(t *testing.T, e *evaluator, s blockScope, what, typ string) blockScope {
	t.Helper()
	bs := e.nested(t, s, typ)
	if len(bs) != 1 {
		t.Fatalf("%s: want one %s block, got %d", what, typ, len(bs))
	}
	return bs[0]
}

// TestPolicySecret follows LEASESVC_POLICY to the file Cloud Run mounts: a
// volume mount whose directory holds it, the secret volume of that mount, the
// secret and the pinned version it mounts, the version's data (var.policy),
// and the runtime service account's access to the secret.
func TestPolicySecret(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := m.evaluate(t, inputs(backend, nil))
			run := onlyInstance(t, e, "google_cloud_run_v2_service")
			template := oneNested(t, e, run.block, run.addr, "template")
			container := oneNested(t, e, template, run.addr+".template", "containers")
			env := containerEnv(t, e)

			if got := env["LEASESVC_AUTH"]; got != "google" {
				t.Errorf("LEASESVC_AUTH = %q, want google: the service must verify callers' Google ID tokens", got)
			}
			policyPath := env["LEASESVC_POLICY"]
			if !strings.HasPrefix(policyPath, "/") {
				t.Fatalf("LEASESVC_POLICY = %q, want an absolute path inside the policy secret volume", policyPath)
			}

			// The mount whose directory holds the file, and the file's path in it.
			var mountName, file string
			for _, vm := range e.nested(t, container, "volume_mounts") {
				dir := str(t, run.addr+" volume_mounts.mount_path", attrOf(t, e, vm, run.addr+" volume_mounts", "mount_path"))
				if rest, ok := strings.CutPrefix(policyPath, strings.TrimSuffix(dir, "/")+"/"); ok && rest != "" {
					mountName = str(t, run.addr+" volume_mounts.name", attrOf(t, e, vm, run.addr+" volume_mounts", "name"))
					file = rest
				}
			}
			if mountName == "" {
				t.Fatalf("LEASESVC_POLICY = %q is not inside any volume mounted into the container", policyPath)
			}

			// The secret volume of that mount, and its item for the file.
			var secretBlock *blockScope
			for _, vol := range e.nested(t, template, "volumes") {
				if str(t, run.addr+" volumes.name", attrOf(t, e, vol, run.addr+" volumes", "name")) == mountName {
					sb := oneNested(t, e, vol, run.addr+" volume "+mountName, "secret")
					secretBlock = &sb
				}
			}
			if secretBlock == nil {
				t.Fatalf("the container mounts volume %q, but the template declares no such volume", mountName)
			}
			secretName, _, ok := resourceRef(attrOf(t, e, *secretBlock, "volume "+mountName, "secret"), "google_secret_manager_secret")
			if !ok {
				t.Fatalf("volume %q mounts secret %#v, want a reference to the module's google_secret_manager_secret", mountName, attrOf(t, e, *secretBlock, "volume "+mountName, "secret"))
			}
			var version cty.Value
			for _, item := range e.nested(t, *secretBlock, "items") {
				if str(t, "volume "+mountName+" items.path", attrOf(t, e, item, "volume "+mountName+" items", "path")) == file {
					version = attrOf(t, e, item, "volume "+mountName+" items", "version")
				}
			}
			if version == cty.NilVal {
				t.Fatalf("volume %q has no item with path %q, the file LEASESVC_POLICY=%q names", mountName, file, policyPath)
			}
			versionName, versionAttr, ok := resourceRef(version, "google_secret_manager_secret_version")
			if !ok || versionAttr != "version" {
				t.Fatalf("volume %q item %q: version = %#v, want google_secret_manager_secret_version.<name>.version, so that the revision pins the version and a policy change rolls out a new revision (\"latest\" or a fixed number would not)", mountName, file, version)
			}

			// The version belongs to the mounted secret and holds var.policy.
			var found bool
			for _, v := range instancesOf(t, e, "google_secret_manager_secret_version") {
				if v.addr != "google_secret_manager_secret_version."+versionName {
					continue
				}
				found = true
				if s, _, ok := resourceRef(attrOf(t, e, v.block, v.addr, "secret"), "google_secret_manager_secret"); !ok || s != secretName {
					t.Errorf("%s.secret = %#v, want google_secret_manager_secret.%s, the secret the volume mounts", v.addr, attrOf(t, e, v.block, v.addr, "secret"), secretName)
				}
				if data := attrOf(t, e, v.block, v.addr, "secret_data"); !data.RawEquals(cty.StringVal(testPolicy)) {
					t.Errorf("%s.secret_data = %#v, want var.policy", v.addr, data)
				}
				cbd := false
				for _, lc := range e.nested(t, v.block, "lifecycle") {
					if got, ok := e.attr(t, lc, "create_before_destroy"); ok && got.RawEquals(cty.True) {
						cbd = true
					}
				}
				if !cbd {
					t.Errorf("%s has no lifecycle { create_before_destroy = true }: a policy change would delete the version the serving revision pins before the new revision is up", v.addr)
				}
			}
			if !found {
				t.Fatalf("the volume pins google_secret_manager_secret_version.%s, which the module does not declare (or declares with count/for_each)", versionName)
			}

			// The runtime service account may read that secret, and the
			// service waits for the grant (Cloud Run refuses the revision
			// otherwise).
			accessor := secretAccessor(t, e, secretName)
			if accessor == "" {
				t.Fatalf("no google_secret_manager_secret_iam_member grants roles/secretmanager.secretAccessor on google_secret_manager_secret.%s to the runtime service account: the revision could not read its policy", secretName)
			}
			deps := stringsOf(t, run.addr+".depends_on", attrOf(t, e, run.block, run.addr, "depends_on"))
			if !slices.Contains(deps, "<"+accessor+">") {
				t.Errorf("%s.depends_on = %v lacks %s: the first revision may be deployed before its service account can read the policy", run.addr, deps, accessor)
			}

			apis, err := e.local("apis")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(stringsOf(t, "local.apis", apis), "secretmanager.googleapis.com") {
				t.Errorf("local.apis lacks secretmanager.googleapis.com, which the policy secret needs")
			}
		})
	}
}

// serviceURL returns the module's service_url output and the project number
// placeholder it is built from: the number attribute of the module's one
// data "google_project", which must read var.project_id.
func serviceURL(t *testing.T, m *module, e *evaluator) (url, numberRef string) {
	t.Helper()
	projects := m.blocksOf("data", "google_project")
	if len(projects) != 1 {
		t.Fatalf("want one data \"google_project\" (the project number of the deterministic URL), got %d", len(projects))
	}
	p := projects[0]
	if got := attrOf(t, e, blockScope{p.Body, nil}, "data.google_project."+p.Labels[1], "project_id"); !got.RawEquals(e.vars["project_id"]) {
		t.Errorf("data.google_project.%s.project_id = %#v, want var.project_id", p.Labels[1], got)
	}
	outs := m.blocksOf("output", "service_url")
	if len(outs) != 1 {
		t.Fatal(`no output "service_url"`)
	}
	a, ok := outs[0].Body.Attributes["value"]
	if !ok {
		t.Fatal(`output "service_url" has no value`)
	}
	return str(t, "output service_url", e.value(t, a.Expr, nil)), "<data.google_project." + p.Labels[1] + ".number>"
}

// TestAuthSettingsFromVariables checks that the rate limits and the audiences
// reach the container (and Cloud Run) from their variables, and that the
// service accepts its deterministic URL, https://NAME-PROJECT_NUMBER.REGION.run.app
// (the URL cmd/leasesvc derives on Cloud Run, docs/contract.md §9), which is
// the service_url output callers mint their tokens for, never the provider's
// uri (possibly the older hashed *.a.run.app URL).
func TestAuthSettingsFromVariables(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := m.evaluate(t, inputs(backend, nil))
			env := containerEnv(t, e)
			if env["LEASESVC_RATE_LIMIT"] != "100" || env["LEASESVC_RATE_BURST"] != "200" {
				t.Errorf("by default LEASESVC_RATE_LIMIT = %q and LEASESVC_RATE_BURST = %q, want 100 and 200 (the service's own defaults with authentication on)", env["LEASESVC_RATE_LIMIT"], env["LEASESVC_RATE_BURST"])
			}
			url, number := serviceURL(t, m, e)
			if want := "https://leasesvc-" + number + ".europe-west1.run.app"; url != want {
				t.Errorf("output service_url = %q, want the deterministic URL %q", url, want)
			}
			if got, set := env["LEASESVC_AUTH_AUDIENCES"]; !set || got != url {
				t.Errorf("by default LEASESVC_AUTH_AUDIENCES = %q (set %v), want service_url %q: the service accepts only the audiences it is given", got, set, url)
			}
			run := onlyInstance(t, e, "google_cloud_run_v2_service")
			if v, ok := e.attr(t, run.block, "custom_audiences"); ok && !v.IsNull() {
				t.Errorf("by default %s.custom_audiences = %#v, want unset (Cloud Run accepts its run.app URLs)", run.addr, v)
			}

			// name and region come from their variables.
			e = m.evaluate(t, inputs(backend, map[string]cty.Value{
				"name":   cty.StringVal("leases-prod"),
				"region": cty.StringVal("us-central1"),
			}))
			url, number = serviceURL(t, m, e)
			if want := "https://leases-prod-" + number + ".us-central1.run.app"; url != want {
				t.Errorf("with name leases-prod, region us-central1: service_url = %q, want %q", url, want)
			}
			if got := containerEnv(t, e)["LEASESVC_AUTH_AUDIENCES"]; got != url {
				t.Errorf("with name leases-prod, region us-central1: LEASESVC_AUTH_AUDIENCES = %q, want service_url %q", got, url)
			}
			// A real project number makes a host the service's own check
			// (cmd/leasesvc/auth.go) and DNS accept: one label of at most 63
			// characters before the region.
			host := strings.TrimPrefix(strings.Replace(url, number, "123456789012", 1), "https://")
			if label, _, _ := strings.Cut(host, "."); !regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`).MatchString(label) {
				t.Errorf("service_url %q: the label %q is not a Cloud Run deterministic URL's SERVICE-PROJECT_NUMBER (at most 63 characters)", url, label)
			}

			auds := []string{"https://leases.example.com", "leasesvc-prod"}
			e = m.evaluate(t, inputs(backend, map[string]cty.Value{
				"rate_limit":     cty.NumberFloatVal(2.5),
				"rate_burst":     cty.NumberIntVal(7),
				"auth_audiences": cty.ListVal([]cty.Value{cty.StringVal(auds[0]), cty.StringVal(auds[1])}),
			}))
			url, _ = serviceURL(t, m, e)
			env = containerEnv(t, e)
			want := map[string]string{
				"LEASESVC_RATE_LIMIT":     "2.5",
				"LEASESVC_RATE_BURST":     "7",
				"LEASESVC_AUTH_AUDIENCES": strings.Join(append([]string{url}, auds...), ","),
			}
			for _, name := range sortedKeys(want) {
				if env[name] != want[name] {
					t.Errorf("with rate_limit = 2.5, rate_burst = 7, auth_audiences = %q: %s = %q, want %q", auds, name, env[name], want[name])
				}
			}
			// leasesvc then accepts these audiences too, so Cloud Run's
			// invoker check, in front of it, must accept them.
			run = onlyInstance(t, e, "google_cloud_run_v2_service")
			got, _ := e.attr(t, run.block, "custom_audiences")
			if got == cty.NilVal || got.IsNull() || !slices.Equal(stringsOf(t, run.addr+".custom_audiences", got), auds) {
				t.Errorf("with auth_audiences = %q, %s.custom_audiences = %#v, want the same audiences", auds, run.addr, got)
			}
		})
	}
}

// TestPolicyValidationAgreesWithService checks that var.policy's validation
// accepts policies the service accepts, in YAML and JSON.
func TestPolicyValidationAgreesWithService(t *testing.T) {
	m := loadModule(t, moduleDir)
	if _, ok := m.variables["policy"]; !ok {
		t.Fatal(`no variable "policy"`)
	}
	if _, hasDefault := m.variables["policy"].Body.Attributes["default"]; hasDefault {
		t.Error(`variable "policy" has a default: every deployment must say who may do what`)
	}
	policies := []string{
		testPolicy,
		`{"grants": [{"principals": ["*"], "verbs": ["read"], "prefixes": ["*"]}]}`,
		"{\n  \"grants\": [\n    {\"principals\": [\"ops@example.com\"], \"verbs\": [\"admin\"], \"prefixes\": [\"*\"]}\n  ]\n}\n",
		"# leasesvc policy\r\ngrants:\r\n- principals: [\"*@example.com\"]\r\n  verbs: [read]\r\n  prefixes: [team-a.]\r\n",
	}
	for _, p := range policies {
		if _, err := auth.ParsePolicy([]byte(p), "policy.yaml"); err != nil {
			t.Errorf("the service refuses the test policy %q: %v", p, err)
			continue
		}
		if ok, err := validates(t, m, "policy", cty.StringVal(p)); err != nil || !ok {
			t.Errorf("variable policy refuses %q (err %v), which the service accepts", p, err)
		}
	}
}

// TestExamplePolicies checks that each example passes the module a policy
// that passes its validation, that the service accepts, and that grants what
// the example says: its agents acquire team-a. leases, operators administer
// every lease.
func TestExamplePolicies(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			ex := loadModule(t, exampleDir)
			e := ex.evaluate(t, exampleInputs(backend))
			calls := ex.blocksOf("module", "")
			if len(calls) != 1 {
				t.Fatalf("examples/%s: want one module block, got %d", backend, len(calls))
			}
			a, ok := calls[0].Body.Attributes["policy"]
			if !ok {
				t.Fatalf("examples/%s: the module call sets no policy", backend)
			}
			text := str(t, "examples/"+backend+" policy", e.value(t, a.Expr, nil))
			if ok, err := validates(t, m, "policy", cty.StringVal(text)); err != nil || !ok {
				t.Errorf("examples/%s: the policy fails the module's validation (err %v):\n%s", backend, err, text)
			}
			p, err := auth.ParsePolicy([]byte(text), "examples/"+backend+" policy")
			if err != nil {
				t.Fatalf("examples/%s: the service refuses the policy: %v\n%s", backend, err, text)
			}
			agent := "agents@" + testProject + ".iam.gserviceaccount.com"
			operator := "alice@" + str(t, "var.operators_domain", e.vars["operators_domain"])
			checks := []struct {
				principal string
				verb      auth.Verb
				name      string
				want      bool
			}{
				{agent, auth.Acquire, "team-a.scheduler", true},
				{agent, auth.Read, "team-a.scheduler", true},
				{agent, auth.Acquire, "team-b.scheduler", false},
				{agent, auth.Acquire, "team-ab.scheduler", false}, // "team-a" would cover it: prefixes end with "."
				{agent, auth.Admin, "team-a.scheduler", false},
				{operator, auth.Admin, "team-b.scheduler", true},
				{"mallory@evil.example", auth.Read, "team-a.scheduler", false},
			}
			for _, c := range checks {
				if got := p.Allowed(c.principal, c.verb, c.name); got != c.want {
					t.Errorf("examples/%s: the policy allows %s %s on %s: %v, want %v", backend, c.principal, c.verb, c.name, got, c.want)
				}
			}
		})
	}
}
