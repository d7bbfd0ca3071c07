// Package terraform_test checks the leasesvc Terraform module without a
// provider (which cannot be downloaded in CI, so `terraform validate` cannot
// run): it parses every .tf file with hclparse, evaluates the configuration
// for each backend (see hcleval_test.go), and fails if
//
//   - the container gets an environment variable (a value or a secret) the
//     service does not read, or lacks one the chosen backend needs (the
//     service's reads come from its Go sources, see goenv_test.go);
//   - authentication is not LEASESVC_AUTH=google with LEASESVC_POLICY naming
//     the file of a secret volume that pins the version holding var.policy,
//     readable by the runtime service account, or the rate limits and
//     audiences do not come from their variables, or the accepted audience
//     is not the service's deterministic URL, service_url (auth_test.go);
//   - the page token key is not a 32-byte random_id in a secret version the
//     container gets LEASESVC_PAGE_TOKEN_KEY from and the runtime service
//     account may read (pagetoken_test.go);
//   - the Spanner DDL is not read from backend/spanner/schema.sql;
//   - allUsers can be granted by default;
//   - a role broader than the module's least-privilege table is granted;
//   - the provider is not pinned to the hashicorp/google 7.x line;
//   - deletion protection, the health probes, the alert policies, the
//     variables or the examples are not what the docs promise;
//   - `terraform fmt -check -recursive` would change a file (skipped with a
//     message when terraform is not on PATH, a failure when CI=true).
package terraform_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

const (
	moduleDir   = "."
	repoRoot    = ".."
	testProject = "test-project"
	schemaFile  = "backend/spanner/schema.sql" // relative to the repository root
)

// backends are the values of var.backend; each test runs for both.
var backends = []string{"firestore", "spanner"}

// inputs returns the module's inputs for one backend: the required variables
// plus overrides; everything else takes its default.
func inputs(backend string, overrides map[string]cty.Value) map[string]cty.Value {
	in := map[string]cty.Value{
		"project_id": cty.StringVal(testProject),
		"region":     cty.StringVal("europe-west1"),
		"image":      cty.StringVal("europe-west1-docker.pkg.dev/test-project/leasesvc/leasesvc:test"),
		"backend":    cty.StringVal(backend),
		"policy":     cty.StringVal(testPolicy),
	}
	for k, v := range overrides {
		in[k] = v
	}
	return in
}

// --- Environment ---------------------------------------------------------------

// authEnv are the variables every container needs for authentication and
// its limits: the service verifies Google ID tokens for the audiences the
// module lists, which needs a policy file; the module sets the rate limit
// explicitly from its variables, and the page token key every instance
// shares.
var authEnv = []string{"LEASESVC_AUTH", "LEASESVC_AUTH_AUDIENCES", "LEASESVC_POLICY", "LEASESVC_RATE_LIMIT", "LEASESVC_RATE_BURST", "LEASESVC_PAGE_TOKEN_KEY"}

// secretEnv are the variables that hold a secret: the container must get
// them from Secret Manager (env.value_source.secret_key_ref), never as a
// plain value in the service's template.
var secretEnv = []string{"LEASESVC_PAGE_TOKEN_KEY"}

// requiredEnv lists, per backend, the variables the container must get.
var requiredEnv = map[string][]string{
	"firestore": append([]string{"LEASESVC_BACKEND", "LEASESVC_PROJECT", "LEASESVC_FIRESTORE_DATABASE", "LEASESVC_FIRESTORE_COLLECTION", "LEASESVC_PUBSUB_TOPIC", "LEASESVC_TELEMETRY"}, authEnv...),
	"spanner":   append([]string{"LEASESVC_BACKEND", "LEASESVC_SPANNER_DATABASE", "LEASESVC_PUBSUB_TOPIC", "LEASESVC_TELEMETRY"}, authEnv...),
}

// optionalEnvInputs are inputs that make the module set the variables it
// sets only on request, or set differently, so that
// TestContainerEnvironmentMatchesService checks those names and values
// against the service's reads too.
var optionalEnvInputs = map[string]cty.Value{
	"auth_audiences": cty.ListVal([]cty.Value{cty.StringVal("https://leases.example.com")}),
}

// forbiddenEnv lists variables the module must never set, and why.
var forbiddenEnv = map[string]string{
	"PORT":                     "Cloud Run sets it to the container port and refuses it in the service's env",
	"K_SERVICE":                "reserved by Cloud Run",
	"K_REVISION":               "reserved by Cloud Run",
	"K_CONFIGURATION":          "reserved by Cloud Run",
	"LEASESVC_SPANNER_MIGRATE": "Terraform owns the schema (spanner.tf); the service must only check it",
	"LEASESVC_AUTH_TOKENS":     "it is the tokens file of LEASESVC_AUTH=static; the module sets LEASESVC_AUTH=google, callers on Cloud Run have Google identities",
}

// otherBackendPrefix is the prefix of the variables of the backend not chosen.
var otherBackendPrefix = map[string]string{"firestore": "LEASESVC_SPANNER_", "spanner": "LEASESVC_FIRESTORE_"}

// readIndirectly lists variables the service reads in a way the Go scan
// cannot see (through a library, or a name built at run time), each with
// where it is read. Keep it empty where a getenv call can say it instead.
var readIndirectly = map[string]string{}

// envValueChecks checks the values the module gives some variables.
var envValueChecks = map[string]func(backend, v string) bool{
	"LEASESVC_BACKEND":   func(backend, v string) bool { return v == backend },
	"LEASESVC_PROJECT":   func(_, v string) bool { return v == testProject },
	"LEASESVC_TELEMETRY": func(_, v string) bool { return v == "otlp" },
	"LEASESVC_AUTH":      func(_, v string) bool { return v == "google" },
	// The service's own parsing (cmd/leasesvc/auth.go): a float ≥ 0, an int ≥ 1.
	"LEASESVC_RATE_LIMIT": func(_, v string) bool {
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && f >= 0
	},
	"LEASESVC_RATE_BURST": func(_, v string) bool {
		n, err := strconv.Atoi(v)
		return err == nil && n >= 1
	},
	// Comma-separated, and the service drops empty items: none may be empty.
	"LEASESVC_AUTH_AUDIENCES": func(_, v string) bool {
		for a := range strings.SplitSeq(v, ",") {
			if a == "" || strings.TrimSpace(a) != a {
				return false
			}
		}
		return true
	},
	"LEASESVC_SPANNER_DATABASE": func(_, v string) bool {
		return regexp.MustCompile(`^projects/` + testProject + `/instances/[^/]+/databases/[^/]+$`).MatchString(v)
	},
	// The service's own parsing (cmd/leasesvc/sessions.go), and the
	// defaults the module promises: the default concurrency 1000 less the
	// 100 kept for REST, a socket moved at 11/12 of the default request
	// timeout 3600 s (sessions_test.go checks other inputs).
	"LEASESVC_MAX_SESSIONS": func(_, v string) bool { return v == "900" },
	"LEASESVC_SESSION_MAX_AGE": func(_, v string) bool {
		d, err := time.ParseDuration(v)
		return err == nil && d == 55*time.Minute
	},
	// The provider's id of a google_pubsub_topic is projects/P/topics/T.
	"LEASESVC_PUBSUB_TOPIC": func(_, v string) bool {
		return regexp.MustCompile(`^(projects/[^/]+/topics/[^/]+|<google_pubsub_topic\.[a-z0-9_]+\.id>)$`).MatchString(v)
	},
}

// TestContainerEnvironmentMatchesService compares the Cloud Run container's
// environment with what the service reads.
func TestContainerEnvironmentMatchesService(t *testing.T) {
	src := loadServiceSources(t, repoRoot)
	reads, unresolved := src.envReads()
	if len(reads) == 0 {
		t.Fatal("found no environment reads in the service's Go sources: the scan is broken")
	}
	for name, where := range readIndirectly {
		reads[name] = append(reads[name], where+" (readIndirectly)")
	}
	for _, p := range unresolved {
		t.Logf("note: %s reads a variable whose name the scan cannot work out; list it in readIndirectly if the module sets it", p)
	}
	m := loadModule(t, moduleDir)

	for name, why := range forbiddenEnv {
		if _, read := reads[name]; strings.HasPrefix(name, "LEASESVC_") && !read {
			t.Errorf("forbiddenEnv lists %s (%s), but no Go source of the service reads it any more: remove it, or check what replaced it", name, why)
		}
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			env, secrets := containerEnvVars(t, m.evaluate(t, inputs(backend, nil)))
			// The variables set only on request must match the service too.
			optEnv, optSecrets := containerEnvVars(t, m.evaluate(t, inputs(backend, optionalEnvInputs)))
			for name, v := range optEnv {
				if _, set := env[name]; !set {
					env[name] = v
				}
			}
			for name, v := range optSecrets {
				if _, set := secrets[name]; !set {
					secrets[name] = v
				}
			}
			for _, name := range secretEnv {
				if _, plain := env[name]; plain {
					t.Errorf("backend %s: the container gets %s as a plain value, visible to whoever can read the service; give it from a Secret Manager secret (value_source.secret_key_ref)", backend, name)
				}
			}
			for _, name := range sortedKeys(secrets) {
				if _, read := reads[name]; !read {
					t.Errorf("backend %s: the container gets %s from secret %s, but no Go source of the service reads it", backend, name, secrets[name].secret)
				}
				if _, dup := env[name]; dup {
					t.Errorf("backend %s: the container gets %s both as a value and from a secret", backend, name)
				}
				if !slices.Contains(secretEnv, name) {
					t.Errorf("backend %s: the container gets %s from a secret, but secretEnv does not list it", backend, name)
				}
			}
			for _, name := range sortedKeys(env) {
				if why, bad := forbiddenEnv[name]; bad {
					t.Errorf("the container sets %s: %s", name, why)
				}
				if p := otherBackendPrefix[backend]; strings.HasPrefix(name, p) {
					t.Errorf("backend %s: the container sets %s, a variable of the other backend", backend, name)
				}
				if _, read := reads[name]; !read {
					t.Errorf("backend %s: the container sets %s, but no Go source of the service reads it (a getenv/Getenv/LookupEnv call, or a helper passing its argument to one, in cmd/leasesvc or a package it imports)", backend, name)
				}
				if check, ok := envValueChecks[name]; ok && !check(backend, env[name]) {
					t.Errorf("backend %s: %s=%q is not the value the service needs", backend, name, env[name])
				}
			}
			for _, name := range requiredEnv[backend] {
				_, set := env[name]
				_, fromSecret := secrets[name]
				if set || fromSecret {
					continue // checked above
				}
				t.Errorf("backend %s: the container does not set %s, which the service needs with this backend", backend, name)
				if _, read := reads[name]; !read {
					t.Errorf("backend %s: requiredEnv lists %s, but no Go source of the service reads it either", backend, name)
				}
			}
		})
	}
}

// secretRef is where an environment variable's value comes from: a Secret
// Manager secret and version, as evaluated (placeholders such as
// "<google_secret_manager_secret.x.secret_id>" for module resources).
type secretRef struct {
	secret, version string
}

// containerEnv returns the environment the single container of the single
// Cloud Run service gets as plain values, with dynamic env blocks expanded.
func containerEnv(t *testing.T, e *evaluator) map[string]string {
	t.Helper()
	env, _ := containerEnvVars(t, e)
	return env
}

// containerEnvVars returns the environment of the single container of the
// single Cloud Run service: the plain values (env.value) and the variables
// from secrets (env.value_source.secret_key_ref). Each env block must have
// exactly one of the two.
func containerEnvVars(t *testing.T, e *evaluator) (values map[string]string, secrets map[string]secretRef) {
	t.Helper()
	run := onlyInstance(t, e, "google_cloud_run_v2_service")
	templates := e.nested(t, run.block, "template")
	if len(templates) != 1 {
		t.Fatalf("%s: want one template block, got %d", run.addr, len(templates))
	}
	containers := e.nested(t, templates[0], "containers")
	if len(containers) != 1 {
		t.Fatalf("%s: want one container, got %d", run.addr, len(containers))
	}
	values, secrets = map[string]string{}, map[string]secretRef{}
	for _, b := range e.nested(t, containers[0], "env") {
		nameVal, ok := e.attr(t, b, "name")
		if !ok {
			t.Fatalf("%s: an env block has no name", run.addr)
		}
		name := str(t, run.addr+" env name", nameVal)
		_, dupValue := values[name]
		_, dupSecret := secrets[name]
		if dupValue || dupSecret {
			t.Errorf("%s: env %s is set twice", run.addr, name)
		}
		sources := e.nested(t, b, "value_source")
		v, hasValue := e.attr(t, b, "value")
		switch {
		case hasValue && len(sources) > 0:
			t.Errorf("%s: env %s has both a value and a value_source", run.addr, name)
		case len(sources) > 1:
			t.Errorf("%s: env %s has %d value_source blocks, want one", run.addr, name, len(sources))
		case len(sources) == 1:
			refs := e.nested(t, sources[0], "secret_key_ref")
			if len(refs) != 1 {
				t.Fatalf("%s: env %s: value_source has %d secret_key_ref blocks, want one", run.addr, name, len(refs))
			}
			secret, ok := e.attr(t, refs[0], "secret")
			if !ok {
				t.Fatalf("%s: env %s: secret_key_ref has no secret", run.addr, name)
			}
			version, ok := e.attr(t, refs[0], "version")
			if !ok {
				t.Fatalf("%s: env %s: secret_key_ref has no version (Cloud Run would not know which to read)", run.addr, name)
			}
			secrets[name] = secretRef{
				secret:  str(t, run.addr+" env "+name+" secret", secret),
				version: str(t, run.addr+" env "+name+" version", version),
			}
		default:
			values[name] = ""
			if hasValue && v.IsKnown() && !v.IsNull() && v.Type() == cty.String {
				values[name] = v.AsString()
			}
		}
	}
	return values, secrets
}

// onlyInstance returns the one instance of the one resource of a type.
func onlyInstance(t *testing.T, e *evaluator, typ string) instance {
	t.Helper()
	blocks := e.m.resources(func(rt string) bool { return rt == typ })
	if len(blocks) != 1 {
		t.Fatalf("want one %s resource, got %d", typ, len(blocks))
	}
	insts := e.instances(t, blocks[0])
	if len(insts) != 1 {
		t.Fatalf("want one instance of %s.%s, got %d", typ, blocks[0].Labels[1], len(insts))
	}
	return insts[0]
}

// instancesOf returns every instance of every resource of a type.
func instancesOf(t *testing.T, e *evaluator, typ string) []instance {
	t.Helper()
	var out []instance
	for _, b := range e.m.resources(func(rt string) bool { return rt == typ }) {
		out = append(out, e.instances(t, b)...)
	}
	return out
}

// --- Spanner schema --------------------------------------------------------------

// TestSpannerSchemaFromBackendFile checks that the Spanner database's DDL is
// read from the backend's schema.sql (one source of truth) and holds exactly
// its statements.
func TestSpannerSchemaFromBackendFile(t *testing.T) {
	m := loadModule(t, moduleDir)
	schemaPath, err := filepath.Abs(filepath.Join(repoRoot, filepath.FromSlash(schemaFile)))
	if err != nil {
		t.Fatal(err)
	}

	e := m.evaluate(t, inputs("spanner", nil))
	db := onlyInstance(t, e, "google_spanner_database")
	a, ok := db.block.body.Attributes["ddl"]
	if !ok {
		t.Fatalf("%s sets no ddl: the Leases table would not exist", db.addr)
	}
	v, err := e.valueErr(a.Expr, db.block.extra)
	if err != nil {
		t.Fatalf("%s: ddl: %v (the DDL must be read from %s)", a.SrcRange, err, schemaFile)
	}
	if !e.filesRead[schemaPath] {
		t.Fatalf("%s: ddl is not read from %s with file(): it read %v. Use file(\"${path.module}/../%s\") so the schema has one source of truth", a.SrcRange, schemaFile, sortedKeys(e.filesRead), schemaFile)
	}
	got := stringsOf(t, db.addr+".ddl", v)
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for s := range strings.SplitSeq(string(raw), ";") {
		if s = strings.TrimSpace(s); s != "" {
			want = append(want, s)
		}
	}
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatalf("%s holds no DDL statement", schemaFile)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s.ddl = %q,\nwant the statements of %s without their semicolons: %q", db.addr, got, schemaFile, want)
	}

	if n := len(instancesOf(t, m.evaluate(t, inputs("firestore", nil)), "google_spanner_database")); n != 0 {
		t.Errorf("backend firestore creates %d Spanner databases, want none", n)
	}
}

// --- IAM -------------------------------------------------------------------------

// grant is one IAM grant the configuration makes.
type grant struct {
	addr      string
	typ       string // resource type, e.g. google_pubsub_topic_iam_member
	role      string
	members   []string
	condition string // IAM condition expression, "" for none
}

// grants returns every IAM grant of the configuration.
func grants(t *testing.T, e *evaluator) []grant {
	t.Helper()
	var out []grant
	iamType := func(rt string) bool {
		return strings.HasSuffix(rt, "_iam_member") || strings.HasSuffix(rt, "_iam_binding") || strings.HasSuffix(rt, "_iam_policy")
	}
	for _, b := range e.m.resources(iamType) {
		for _, inst := range e.instances(t, b) {
			if strings.HasSuffix(inst.typ, "_iam_policy") || strings.HasSuffix(inst.typ, "_iam_binding") {
				t.Errorf("%s: %s is authoritative and would remove grants made outside this module; use %s", inst.addr, inst.typ,
					strings.TrimSuffix(strings.TrimSuffix(inst.typ, "_iam_policy"), "_iam_binding")+"_iam_member")
				continue
			}
			g := grant{addr: inst.addr, typ: inst.typ}
			role, ok := e.attr(t, inst.block, "role")
			if !ok {
				t.Fatalf("%s: no role", inst.addr)
			}
			g.role = str(t, inst.addr+".role", role)
			member, ok := e.attr(t, inst.block, "member")
			if !ok {
				t.Fatalf("%s: no member", inst.addr)
			}
			g.members = stringsOf(t, inst.addr+".member", member)
			for _, c := range e.nested(t, inst.block, "condition") {
				if x, ok := e.attr(t, c, "expression"); ok {
					g.condition = str(t, inst.addr+".condition.expression", x)
				}
			}
			out = append(out, g)
		}
	}
	return out
}

// deniedRoles are roles broader than leasesvc ever needs, with why.
var deniedRoles = map[string]string{
	"roles/owner":                          "basic role: full control of the project",
	"roles/editor":                         "basic role: write access to nearly everything in the project",
	"roles/viewer":                         "basic role: read access to everything in the project",
	"roles/browser":                        "project-wide listing",
	"roles/datastore.owner":                "Firestore administration (indexes, databases, imports)",
	"roles/spanner.admin":                  "Spanner instance administration",
	"roles/spanner.databaseAdmin":          "Spanner DDL and IAM administration; the schema is Terraform's",
	"roles/spanner.databaseUser":           "holds spanner.databases.updateDdl (\"view and update schema\"): the service could change or drop the table Terraform owns; grant the custom spanner_data role",
	"roles/pubsub.admin":                   "Pub/Sub administration",
	"roles/pubsub.editor":                  "creates and deletes any topic and subscription in the project",
	"roles/run.admin":                      "Cloud Run administration, including IAM",
	"roles/run.developer":                  "deploys and changes Cloud Run services",
	"roles/iam.serviceAccountUser":         "acts as other service accounts",
	"roles/iam.serviceAccountTokenCreator": "mints tokens of other service accounts",
}

// deniedRolePattern matches administrative roles of any service.
var deniedRolePattern = regexp.MustCompile(`(?i)(admin|owner)$|^roles/iam\.|^roles/resourcemanager\.`)

// saRole says where the module may grant a role to its service account.
type saRole struct {
	on        string // the IAM resource type that must carry it
	backend   string // the only backend that needs it; "" for both
	condition bool   // an IAM condition must narrow it (project-level grant)
}

// serviceAccountRoles is the least-privilege table of iam.tf.
var serviceAccountRoles = map[string]saRole{
	"roles/datastore.user":          {on: "google_project_iam_member", backend: "firestore", condition: true},
	"roles/pubsub.publisher":        {on: "google_pubsub_topic_iam_member"},
	"roles/pubsub.subscriber":       {on: "google_pubsub_topic_iam_member"},
	"roles/cloudtrace.agent":        {on: "google_project_iam_member"},
	"roles/logging.logWriter":       {on: "google_project_iam_member"},
	"roles/monitoring.metricWriter": {on: "google_project_iam_member"},
	// On the policy and page token key secrets only; TestPolicySecret and
	// TestPageTokenKeySecret check which secrets.
	"roles/secretmanager.secretAccessor": {on: "google_secret_manager_secret_iam_member"},
}

// customRole says what a custom role of the module may hold and where it
// must be granted.
type customRole struct {
	perms     []string // the permissions it may hold
	on        string   // the IAM resource type that must carry it
	backend   string   // the only backend that needs it; "" for both
	condition string   // the IAM condition its grant must have, "" for none
}

// subscriptionCondition is the IAM condition of the subscription role's
// grant: on subscriptions, only those the instances create
// (leasesvc-<instance>, cmd/leasesvc/transport.go); other checks (creating one
// in the project) pass. TestSubscriptionConditionMatchesCode checks the
// prefix against the Go source.
const subscriptionCondition = `resource.type != "pubsub.googleapis.com/Subscription" || resource.name.startsWith("projects/` + testProject + `/subscriptions/leasesvc-")`

// customRoles are the custom roles the module may define, by resource name.
// (TestSubscriptionRoleMatchesCode checks that each subscription permission
// is one the code uses; TestSpannerRoleHasNoSchemaPermissions the Spanner
// one.)
var customRoleSpecs = map[string]customRole{
	"event_subscriptions": {
		perms:     []string{"pubsub.subscriptions.consume", "pubsub.subscriptions.create", "pubsub.subscriptions.delete"},
		on:        "google_project_iam_member",
		condition: subscriptionCondition,
	},
	"spanner_data": {
		perms:   spannerDataPermissions,
		on:      "google_spanner_database_iam_member",
		backend: "spanner",
	},
}

// spannerDataPermissions are the permissions of roles/spanner.databaseUser
// the service's Spanner client needs: sessions, reads, queries, read-write
// transactions and their mutations.
var spannerDataPermissions = []string{
	"spanner.databases.beginOrRollbackReadWriteTransaction",
	"spanner.databases.beginReadOnlyTransaction",
	"spanner.databases.get",
	"spanner.databases.getDdl",
	"spanner.databases.read",
	"spanner.databases.select",
	"spanner.databases.write",
	"spanner.sessions.create",
	"spanner.sessions.delete",
	"spanner.sessions.get",
	"spanner.sessions.list",
}

var customRoleRef = regexp.MustCompile(`^<google_project_iam_custom_role\.([a-z0-9_-]+)(?:\[[0-9]+\])?\.(name|id)>$`)

// TestLeastPrivilegeRoles checks every grant against the deny list and the
// least-privilege table, for both backends.
func TestLeastPrivilegeRoles(t *testing.T) {
	m := loadModule(t, moduleDir)
	invoker := "serviceAccount:agents@test-project.iam.gserviceaccount.com"
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := m.evaluate(t, inputs(backend, map[string]cty.Value{"invoker_members": cty.ListVal([]cty.Value{cty.StringVal(invoker)})}))
			customPerms := customRoles(t, e)
			granted := map[string]bool{}
			for _, g := range grants(t, e) {
				if why, bad := deniedRoles[g.role]; bad {
					t.Errorf("%s grants %s to %v: too broad (%s)", g.addr, g.role, g.members, why)
					continue
				}
				if deniedRolePattern.MatchString(g.role) {
					t.Errorf("%s grants %s to %v: an administrative role; leasesvc needs none", g.addr, g.role, g.members)
					continue
				}
				toSA := slices.ContainsFunc(g.members, func(m string) bool { return strings.Contains(m, "google_service_account.") })
				switch {
				case !toSA:
					if g.role != "roles/run.invoker" || g.typ != "google_cloud_run_v2_service_iam_member" {
						t.Errorf("%s grants %s on %s to %v: only roles/run.invoker on the service may go to principals other than the service account", g.addr, g.role, g.typ, g.members)
					}
					if !slices.Equal(g.members, []string{invoker}) {
						t.Errorf("%s grants roles/run.invoker to %v, want only the listed invoker_members %v", g.addr, g.members, []string{invoker})
					}
				case customRoleRef.MatchString(g.role):
					name := customRoleRef.FindStringSubmatch(g.role)[1]
					perms, ok := customPerms[name]
					if !ok {
						t.Errorf("%s grants %s, a custom role the module does not define", g.addr, g.role)
					}
					spec := customRoleSpecs[name]
					if g.typ != spec.on {
						t.Errorf("%s grants custom role %s on %s, want %s", g.addr, name, g.typ, spec.on)
					}
					if spec.backend != "" && spec.backend != backend {
						t.Errorf("backend %s: %s grants custom role %s, which only the %s backend needs", backend, g.addr, name, spec.backend)
					}
					if g.condition != spec.condition {
						t.Errorf("%s grants custom role %s with the IAM condition %q, want %q", g.addr, name, g.condition, spec.condition)
					}
					granted["custom:"+name] = true
					for _, p := range perms {
						granted[p] = true
					}
				default:
					want, ok := serviceAccountRoles[g.role]
					switch {
					case !ok:
						t.Errorf("%s grants %s to the service account: not in the least-privilege table (serviceAccountRoles); add it there with the narrowest resource, or grant a narrower role", g.addr, g.role)
					case g.typ != want.on:
						t.Errorf("%s grants %s on %s, want it on %s only", g.addr, g.role, g.typ, want.on)
					case want.backend != "" && want.backend != backend:
						t.Errorf("backend %s: %s grants %s, which only the %s backend needs", backend, g.addr, g.role, want.backend)
					case want.condition && !strings.Contains(g.condition, "resource.name"):
						t.Errorf("%s grants %s on the whole project without a resource.name IAM condition narrowing it to the module's database", g.addr, g.role)
					}
					granted[g.role] = true
				}
			}
			for _, role := range sortedKeys(serviceAccountRoles) {
				if b := serviceAccountRoles[role].backend; (b == "" || b == backend) && !granted[role] {
					t.Errorf("backend %s: the service account is not granted %s on %s, which the service needs", backend, role, serviceAccountRoles[role].on)
				}
			}
			for _, p := range []string{"pubsub.subscriptions.create", "pubsub.subscriptions.consume"} {
				if !granted[p] {
					t.Errorf("backend %s: no custom role grants %s, which each instance needs for its events subscription", backend, p)
				}
			}
			for _, name := range sortedKeys(customRoleSpecs) {
				if b := customRoleSpecs[name].backend; (b == "" || b == backend) && !granted["custom:"+name] {
					t.Errorf("backend %s: the service account is not granted the custom role %s on %s, which the service needs", backend, name, customRoleSpecs[name].on)
				}
			}
		})
	}
}

// customRoles returns the permissions of each custom role the module defines,
// by resource name, failing the test for a role customRoleSpecs does not
// list or a permission it does not allow that role.
func customRoles(t *testing.T, e *evaluator) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, inst := range instancesOf(t, e, "google_project_iam_custom_role") {
		v, ok := e.attr(t, inst.block, "permissions")
		if !ok {
			t.Fatalf("%s: no permissions", inst.addr)
		}
		perms := stringsOf(t, inst.addr+".permissions", v)
		name := strings.SplitN(strings.TrimPrefix(inst.addr, "google_project_iam_custom_role."), "[", 2)[0]
		spec, ok := customRoleSpecs[name]
		if !ok {
			t.Errorf("%s: a custom role customRoleSpecs does not list (%v)", inst.addr, sortedKeys(customRoleSpecs))
		}
		for _, p := range perms {
			if !slices.Contains(spec.perms, p) {
				t.Errorf("%s holds %s: it may hold only %v", inst.addr, p, spec.perms)
			}
		}
		out[name] = perms
	}
	return out
}

// TestNoPublicAccessByDefault checks that allUsers and allAuthenticatedUsers
// are granted only when var.allow_unauthenticated says so.
func TestNoPublicAccessByDefault(t *testing.T) {
	m := loadModule(t, moduleDir)
	v, ok := m.variables["allow_unauthenticated"]
	if !ok {
		t.Fatal(`no variable "allow_unauthenticated": public access must be an explicit opt-in`)
	}
	if a, ok := v.Body.Attributes["type"]; !ok || hcl.ExprAsKeyword(a.Expr) != "bool" {
		t.Error("variable allow_unauthenticated must have type = bool")
	}
	if a, ok := v.Body.Attributes["default"]; !ok {
		t.Error("variable allow_unauthenticated has no default; it must default to false")
	} else if d, diags := a.Expr.Value(nil); diags.HasErrors() || !d.RawEquals(cty.False) {
		t.Errorf("variable allow_unauthenticated defaults to %#v, want false", d)
	}

	public := func(g grant) bool {
		return slices.ContainsFunc(g.members, func(m string) bool { return m == "allUsers" || m == "allAuthenticatedUsers" })
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := m.evaluate(t, inputs(backend, nil))
			for _, g := range grants(t, e) {
				if public(g) {
					t.Errorf("by default %s grants %s to %v: public access must wait for allow_unauthenticated = true", g.addr, g.role, g.members)
				}
			}
			run := onlyInstance(t, e, "google_cloud_run_v2_service")
			if v, ok := e.attr(t, run.block, "invoker_iam_disabled"); ok && !v.RawEquals(cty.False) {
				t.Errorf("%s.invoker_iam_disabled = %#v by default: that lets anyone invoke the service", run.addr, v)
			}

			e = m.evaluate(t, inputs(backend, map[string]cty.Value{"allow_unauthenticated": cty.True}))
			var publicGrants []string
			for _, g := range grants(t, e) {
				if public(g) {
					publicGrants = append(publicGrants, g.addr)
					if g.role != "roles/run.invoker" || g.typ != "google_cloud_run_v2_service_iam_member" || !slices.Equal(g.members, []string{"allUsers"}) {
						t.Errorf("allow_unauthenticated = true: %s grants %s on %s to %v, want only roles/run.invoker on the service to allUsers", g.addr, g.role, g.typ, g.members)
					}
				}
			}
			if len(publicGrants) != 1 {
				t.Errorf("allow_unauthenticated = true makes %d public grants %v, want exactly one (roles/run.invoker to allUsers)", len(publicGrants), publicGrants)
			}
		})
	}

	for _, member := range []string{"allUsers", "allAuthenticatedUsers"} {
		bad := cty.ListVal([]cty.Value{cty.StringVal(member)})
		if ok, err := validates(t, m, "invoker_members", bad); err != nil || ok {
			t.Errorf("invoker_members = [%q] passes validation (err %v): it would bypass allow_unauthenticated", member, err)
		}
	}
}

// --- Provider, deletion protection, probes, variables, alerts -------------

// TestProviderPinned checks the Terraform and provider version constraints
// of the module and its examples.
func TestProviderPinned(t *testing.T) {
	dirs := map[string]string{
		"module":            moduleDir,
		"examples/cloudrun": exampleDir,
	}
	for _, name := range sortedKeys(dirs) {
		dir := dirs[name]
		t.Run(name, func(t *testing.T) {
			m := loadModule(t, dir)
			blocks := m.blocksOf("terraform", "")
			if len(blocks) != 1 {
				t.Fatalf("%s: want one terraform block, got %d", dir, len(blocks))
			}
			tf := blocks[0]
			rv, ok := tf.Body.Attributes["required_version"]
			if !ok {
				t.Errorf("%s: terraform block has no required_version", dir)
			} else if lo, _, err := versionRange(literalString(t, rv)); err != nil || lo.less(version{1, 5, 0}) {
				t.Errorf("%s: required_version = %q: want a lower bound of at least 1.5 (err %v)", rv.SrcRange, literalString(t, rv), err)
			}
			var google *hclsyntax.Attribute
			for _, b := range tf.Body.Blocks {
				if b.Type == "required_providers" {
					google = b.Body.Attributes["google"]
				}
			}
			if google == nil {
				t.Fatalf("%s: required_providers does not declare google", dir)
			}
			v, diags := google.Expr.Value(nil)
			if diags.HasErrors() || !v.Type().IsObjectType() || !v.Type().HasAttribute("source") || !v.Type().HasAttribute("version") {
				t.Fatalf("%s: google must be { source = \"hashicorp/google\", version = \"~> 7.0\" }", google.SrcRange)
			}
			if src := v.GetAttr("source").AsString(); src != "hashicorp/google" {
				t.Errorf("%s: source = %q, want hashicorp/google", google.SrcRange, src)
			}
			c := v.GetAttr("version").AsString()
			lo, hi, err := versionRange(c)
			if err != nil || lo.less(version{7, 0, 0}) || (version{8, 0, 0}).less(hi) || !lo.less(hi) {
				t.Errorf("%s: version = %q allows versions outside the 7.x line (err %v); want \"~> 7.0\"", google.SrcRange, c, err)
			}
		})
	}
}

// TestDeletionProtection checks that the stateful resources are protected by
// default.
func TestDeletionProtection(t *testing.T) {
	m := loadModule(t, moduleDir)
	if v, ok := m.variables["deletion_protection"]; !ok {
		t.Fatal(`no variable "deletion_protection"`)
	} else if d, diags := v.Body.Attributes["default"].Expr.Value(nil); diags.HasErrors() || !d.RawEquals(cty.True) {
		t.Errorf("variable deletion_protection defaults to %#v, want true", d)
	}
	want := map[string]map[string]cty.Value{
		"google_cloud_run_v2_service": {"deletion_protection": cty.True},
		"google_firestore_database":   {"delete_protection_state": cty.StringVal("DELETE_PROTECTION_ENABLED"), "deletion_policy": cty.StringVal("ABANDON")},
		"google_spanner_database":     {"deletion_protection": cty.True, "enable_drop_protection": cty.True},
		"google_spanner_instance":     {"force_destroy": cty.False},
	}
	for _, backend := range backends {
		e := m.evaluate(t, inputs(backend, nil))
		for _, typ := range sortedKeys(want) {
			for _, inst := range instancesOf(t, e, typ) {
				for _, attr := range sortedKeys(want[typ]) {
					got, ok := e.attr(t, inst.block, attr)
					if !ok || !got.RawEquals(want[typ][attr]) {
						t.Errorf("backend %s: %s.%s = %#v by default, want %#v", backend, inst.addr, attr, got, want[typ][attr])
					}
				}
			}
		}
	}
}

// TestHealthProbes checks the startup probe on /readyz and the liveness probe
// on /healthz, paths the service serves.
func TestHealthProbes(t *testing.T) {
	m := loadModule(t, moduleDir)
	e := m.evaluate(t, inputs("firestore", nil))
	run := onlyInstance(t, e, "google_cloud_run_v2_service")
	container := e.nested(t, e.nested(t, run.block, "template")[0], "containers")[0]
	literals := loadServiceSources(t, repoRoot).stringLiterals()
	for probe, path := range map[string]string{"startup_probe": "/readyz", "liveness_probe": "/healthz"} {
		probes := e.nested(t, container, probe)
		if len(probes) != 1 {
			t.Errorf("%s: want one %s, got %d", run.addr, probe, len(probes))
			continue
		}
		gets := e.nested(t, probes[0], "http_get")
		if len(gets) != 1 {
			t.Errorf("%s: %s must be an http_get probe", run.addr, probe)
			continue
		}
		if got, ok := e.attr(t, gets[0], "path"); !ok || !got.RawEquals(cty.StringVal(path)) {
			t.Errorf("%s: %s path = %#v, want %q", run.addr, probe, got, path)
		}
		if probe == "startup_probe" {
			checkStartupProbeTimeout(t, e, run.addr, probes[0])
		}
		served := false
		for lit := range literals {
			served = served || strings.HasSuffix(lit, " "+path) || lit == path
		}
		if !served {
			t.Errorf("%s probes %s, but no Go source of the service has a route for it", probe, path)
		}
	}
}

// TestVariables checks that every variable is described and typed, that the
// validations evaluate and accept the defaults and the test inputs, and that
// they refuse some bad values.
func TestVariables(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, name := range sortedKeys(m.variables) {
		b := m.variables[name]
		if a, ok := b.Body.Attributes["description"]; !ok || strings.TrimSpace(literalString(t, a)) == "" {
			t.Errorf("%s: variable %q has no description", b.DefRange(), name)
		}
		if _, ok := b.Body.Attributes["type"]; !ok {
			t.Errorf("%s: variable %q has no type", b.DefRange(), name)
		}
	}
	for _, backend := range backends {
		e := m.evaluate(t, inputs(backend, nil))
		for _, name := range sortedKeys(m.variables) {
			if ok, err := validates(t, m, name, e.vars[name]); err != nil || !ok {
				t.Errorf("backend %s: variable %q = %#v fails its own validation (err %v)", backend, name, e.vars[name], err)
			}
		}
	}
	bad := map[string][]cty.Value{
		"backend":         {cty.StringVal("memory")},
		"name":            {cty.StringVal("LeaseSvc")},
		"min_instances":   {cty.NumberIntVal(0)},
		"invoker_members": {cty.ListVal([]cty.Value{cty.StringVal("alice@example.com")})},
		"region":          {cty.StringVal("Europe West")},
		"policy": {
			cty.StringVal(""),
			cty.StringVal(" \n\t"),
			cty.StringVal("tokens:\n  - principal: alice@example.com\n    token: alice-token-0123456789\n"),
			cty.StringVal("# grants: none\nprincipals: [alice@example.com]\n"),
			cty.StringVal("grants:\n" + strings.Repeat("#", 65536)),
		},
		"auth_audiences": {
			cty.ListVal([]cty.Value{cty.StringVal("")}),
			cty.ListVal([]cty.Value{cty.StringVal("https://a.example.com,https://b.example.com")}),
			cty.ListVal([]cty.Value{cty.StringVal(" https://a.example.com")}),
		},
		"rate_limit": {cty.NumberIntVal(-1)},
		"rate_burst": {cty.NumberIntVal(0), cty.NumberFloatVal(1.5)},
	}
	for _, name := range sortedKeys(bad) {
		for _, v := range bad[name] {
			if ok, err := validates(t, m, name, v); err != nil || ok {
				t.Errorf("variable %q = %.200s passes validation (err %v), want it refused", name, v.GoString(), err)
			}
		}
	}
	good := map[string][]cty.Value{
		"rate_limit":     {cty.NumberIntVal(0), cty.NumberFloatVal(0.5)},
		"rate_burst":     {cty.NumberIntVal(1)},
		"auth_audiences": {cty.ListVal([]cty.Value{cty.StringVal("https://leases.example.com"), cty.StringVal("leasesvc")})},
	}
	for _, name := range sortedKeys(good) {
		for _, v := range good[name] {
			if ok, err := validates(t, m, name, v); err != nil || !ok {
				t.Errorf("variable %q = %#v fails validation (err %v), want it accepted", name, v, err)
			}
		}
	}
}

// validates evaluates every validation condition of a variable for value.
func validates(t *testing.T, m *module, name string, value cty.Value) (bool, error) {
	t.Helper()
	return validatesWith(t, m, inputs("firestore", nil), name, value)
}

// validatesWith is validates for a module whose other variables take base.
func validatesWith(t *testing.T, m *module, base map[string]cty.Value, name string, value cty.Value) (bool, error) {
	t.Helper()
	b, ok := m.variables[name]
	if !ok {
		t.Fatalf("no variable %q", name)
	}
	e := m.evaluate(t, base)
	e.vars[name] = value
	for _, vb := range b.Body.Blocks {
		if vb.Type != "validation" {
			continue
		}
		v, err := e.valueErr(vb.Body.Attributes["condition"].Expr, nil)
		if err != nil {
			return false, err
		}
		if !v.RawEquals(cty.True) {
			return false, nil
		}
	}
	return true, nil
}

// TestAlertPolicies checks the alert policies: each one notifies the given
// channels and queries a metric the service exports and docs/operations.md
// documents; alerts_enabled = false removes them.
func TestAlertPolicies(t *testing.T) {
	m := loadModule(t, moduleDir)
	channels := cty.ListVal([]cty.Value{cty.StringVal("projects/test-project/notificationChannels/42")})
	e := m.evaluate(t, inputs("spanner", map[string]cty.Value{"notification_channels": channels}))
	metrics, err := e.local("alert_metrics")
	if err != nil {
		t.Fatal(err)
	}
	selectors, err := e.local("alert_selectors")
	if err != nil {
		t.Fatal(err)
	}
	policies := instancesOf(t, e, "google_monitoring_alert_policy")
	if len(policies) < 3 {
		t.Errorf("want at least 3 alert policies (unheld lease, flapping, publish failures), got %d", len(policies))
	}
	used := map[string]bool{}
	for _, p := range policies {
		if got, _ := e.attr(t, p.block, "notification_channels"); !got.Equals(channels).True() {
			t.Errorf("%s.notification_channels = %#v, want var.notification_channels", p.addr, got)
		}
		for _, c := range e.nested(t, p.block, "conditions") {
			for _, pq := range e.nested(t, c, "condition_prometheus_query_language") {
				q, _ := e.attr(t, pq, "query")
				query := str(t, p.addr+" query", q)
				for key, sel := range selectors.AsValueMap() {
					if strings.Contains(query, sel.AsString()) {
						used[key] = true
					}
				}
			}
		}
	}

	literals := loadServiceSources(t, repoRoot).stringLiterals()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range metrics.AsValueMap() {
		name := v.AsString()
		if !used[key] {
			t.Errorf("local.alert_metrics.%s (%s): no alert policy queries it", key, name)
		}
		if !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("docs/operations.md does not document the metric `%s` that an alert policy queries", name)
		}
		if _, ok := literals[name]; !ok {
			t.Errorf("an alert policy queries the metric %s, but no Go source of the service names it (as a string literal of the instrument name): the alert could never fire", name)
		}
	}

	off := m.evaluate(t, inputs("spanner", map[string]cty.Value{"alerts_enabled": cty.False}))
	if n := len(instancesOf(t, off, "google_monitoring_alert_policy")); n != 0 {
		t.Errorf("alerts_enabled = false still creates %d alert policies", n)
	}
}

// exampleDir is the example configuration docs/deploy.md walks through: one
// for both backends, the backend a variable.
var exampleDir = filepath.Join(moduleDir, "examples", "cloudrun")

// exampleInputs are the example's required variables, for one backend.
func exampleInputs(backend string) map[string]cty.Value {
	return map[string]cty.Value{
		"project_id": cty.StringVal(testProject),
		"image":      cty.StringVal("europe-west1-docker.pkg.dev/test-project/leasesvc/leasesvc:test"),
		"backend":    cty.StringVal(backend),
	}
}

// TestExamples checks that the examples directory holds one configuration
// (not a copy per backend), that it calls the module from the repository
// with arguments the module declares and its backend variable, and that for
// each backend its arguments pass every validation of the module.
func TestExamples(t *testing.T) {
	m := loadModule(t, moduleDir)
	dirs, err := filepath.Glob(filepath.Join(moduleDir, "examples", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 1 || dirs[0] != exampleDir {
		t.Errorf("terraform/examples holds %v, want only %s: one configuration serves both backends, so that no copy can drift", dirs, exampleDir)
	}
	ex := loadModule(t, exampleDir)
	calls := ex.blocksOf("module", "")
	if len(calls) != 1 {
		t.Fatalf("%s: want one module block, got %d", exampleDir, len(calls))
	}
	call := calls[0]
	if a, ok := call.Body.Attributes["source"]; !ok || literalString(t, a) != "../.." {
		t.Errorf("%s: module source must be \"../..\"", exampleDir)
	}
	meta := map[string]bool{"source": true, "version": true, "providers": true, "depends_on": true, "count": true, "for_each": true}
	for name, a := range call.Body.Attributes {
		if _, ok := m.variables[name]; !ok && !meta[name] {
			t.Errorf("%s: the module has no variable %q", a.SrcRange, name)
		}
	}
	for name, v := range m.variables {
		if _, hasDefault := v.Body.Attributes["default"]; !hasDefault {
			if _, set := call.Body.Attributes[name]; !set {
				t.Errorf("%s: the module call does not set the required variable %q", exampleDir, name)
			}
		}
	}
	for _, bad := range []string{"memory", "Firestore", ""} {
		if ok, err := validatesWith(t, ex, exampleInputs("firestore"), "backend", cty.StringVal(bad)); err != nil || ok {
			t.Errorf("%s: backend = %q passes validation (err %v), want it refused", exampleDir, bad, err)
		}
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := ex.evaluate(t, exampleInputs(backend))
			args := map[string]cty.Value{}
			for name, a := range call.Body.Attributes {
				if !meta[name] {
					args[name] = e.value(t, a.Expr, nil)
				}
			}
			if !args["backend"].RawEquals(cty.StringVal(backend)) {
				t.Errorf("%s with backend = %q passes the module backend = %#v", exampleDir, backend, args["backend"])
			}
			for _, name := range sortedKeys(args) {
				if ok, err := validates(t, m, name, args[name]); err != nil || !ok {
					t.Errorf("%s with backend = %q: the module refuses %s = %.200s (err %v)", exampleDir, backend, name, args[name].GoString(), err)
				}
			}
		})
	}
}

// TestTerraformFmt runs `terraform fmt -check -recursive` on the module and
// its examples.
func TestTerraformFmt(t *testing.T) {
	bin, err := exec.LookPath("terraform")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("terraform is not on PATH, and CI=true requires the format check: install Terraform ≥ 1.5")
		}
		t.Skip("terraform is not on PATH: skipping `terraform fmt -check -recursive` (with CI=true this fails)")
	}
	cfg := filepath.Join(t.TempDir(), "terraformrc")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "fmt", "-check", "-recursive", "-diff", ".")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cfg, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("terraform fmt -check -recursive terraform: %v; run `terraform fmt -recursive terraform`:\n%s", err, out)
	}
}

// --- helpers -----------------------------------------------------------------

// literalString returns the value of an attribute that must be a literal
// string (no references).
func literalString(t *testing.T, a *hclsyntax.Attribute) string {
	t.Helper()
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String || v.IsNull() {
		t.Fatalf("%s: %s must be a literal string", a.SrcRange, a.Name)
	}
	return v.AsString()
}

// version is a semantic version major.minor.patch.
type version [3]int

func (v version) less(w version) bool { return slices.Compare(v[:], w[:]) < 0 }

var constraintRE = regexp.MustCompile(`^(~>|>=|<=|>|<|=|!=)?\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?$`)

// versionRange returns the half-open range [lo, hi) of versions a Terraform
// version constraint allows; hi is {1<<30} when unbounded. != is ignored.
func versionRange(constraint string) (lo, hi version, err error) {
	hi = version{1 << 30}
	for part := range strings.SplitSeq(constraint, ",") {
		m := constraintRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return lo, hi, &constraintError{constraint}
		}
		var v version
		parts := 0
		for i, s := range m[2:] {
			if s != "" {
				v[i], _ = strconv.Atoi(s)
				parts++
			}
		}
		next := func(i int) version { // the first version past v's last given part
			w := v
			w[i]++
			for j := i + 1; j < 3; j++ {
				w[j] = 0
			}
			return w
		}
		raise := func(w version) {
			if lo.less(w) {
				lo = w
			}
		}
		lower := func(w version) {
			if w.less(hi) {
				hi = w
			}
		}
		switch m[1] {
		case "~>":
			raise(v)
			lower(next(max(parts-2, 0)))
		case ">=":
			raise(v)
		case ">":
			raise(next(parts - 1))
		case "<":
			lower(v)
		case "<=":
			lower(next(parts - 1))
		case "", "=":
			raise(v)
			lower(next(2))
		}
	}
	return lo, hi, nil
}

// constraintError reports a version constraint versionRange cannot read.
type constraintError struct{ constraint string }

func (e *constraintError) Error() string {
	return "cannot read version constraint " + strconv.Quote(e.constraint)
}
