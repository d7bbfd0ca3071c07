package terraform_test

import (
	"slices"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/leasesvc/leasesvc/httpapi"
)

// This file checks the list page token key (LEASESVC_PAGE_TOKEN_KEY,
// docs/contract.md §9): one key for every instance, so that a next page
// served by another instance is not refused.

// TestPageTokenKeySecret follows LEASESVC_PAGE_TOKEN_KEY from the container
// to its value: an env var from a secret_key_ref that pins a version of a
// module's secret, the version holding random_id's standard base64 of
// exactly httpapi.PageTokenKeySize bytes, the runtime service account's
// access to that secret (which the service waits for), and the random
// provider's pin.
func TestPageTokenKeySecret(t *testing.T) {
	m := loadModule(t, moduleDir)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := m.evaluate(t, inputs(backend, nil))
			run := onlyInstance(t, e, "google_cloud_run_v2_service")
			values, secrets := containerEnvVars(t, e)
			if _, plain := values["LEASESVC_PAGE_TOKEN_KEY"]; plain {
				t.Fatalf("LEASESVC_PAGE_TOKEN_KEY is a plain value of the template; want it from a secret")
			}
			ref, ok := secrets["LEASESVC_PAGE_TOKEN_KEY"]
			if !ok {
				t.Fatalf("the container does not get LEASESVC_PAGE_TOKEN_KEY from a secret: each instance would seal page tokens with a key of its own, and a next page served by another instance is 400")
			}
			secretName, attr, ok := resourceRef(cty.StringVal(ref.secret), "google_secret_manager_secret")
			if !ok || attr != "secret_id" {
				t.Fatalf("LEASESVC_PAGE_TOKEN_KEY: secret_key_ref.secret = %q, want google_secret_manager_secret.<name>.secret_id (the secret in the service's project)", ref.secret)
			}
			versionName, attr, ok := resourceRef(cty.StringVal(ref.version), "google_secret_manager_secret_version")
			if !ok || attr != "version" {
				t.Fatalf("LEASESVC_PAGE_TOKEN_KEY: secret_key_ref.version = %q, want google_secret_manager_secret_version.<name>.version, so that the revision pins the version (\"latest\" would change the key under running instances)", ref.version)
			}

			// The version belongs to that secret and holds a random_id's b64_std.
			var keyName string
			for _, v := range instancesOf(t, e, "google_secret_manager_secret_version") {
				if v.addr != "google_secret_manager_secret_version."+versionName {
					continue
				}
				if s, _, ok := resourceRef(attrOf(t, e, v.block, v.addr, "secret"), "google_secret_manager_secret"); !ok || s != secretName {
					t.Errorf("%s.secret = %#v, want google_secret_manager_secret.%s, the secret LEASESVC_PAGE_TOKEN_KEY names", v.addr, attrOf(t, e, v.block, v.addr, "secret"), secretName)
				}
				name, attr, ok := resourceRef(attrOf(t, e, v.block, v.addr, "secret_data"), "random_id")
				if !ok || attr != "b64_std" {
					t.Errorf("%s.secret_data = %#v, want random_id.<name>.b64_std: the service decodes standard base64 (not b64_url, hex or dec)", v.addr, attrOf(t, e, v.block, v.addr, "secret_data"))
				}
				keyName = name
				cbd := false
				for _, lc := range e.nested(t, v.block, "lifecycle") {
					if got, ok := e.attr(t, lc, "create_before_destroy"); ok && got.RawEquals(cty.True) {
						cbd = true
					}
				}
				if !cbd {
					t.Errorf("%s has no lifecycle { create_before_destroy = true }: a new key would delete the version the serving revision pins before the new revision is up", v.addr)
				}
			}
			if keyName == "" {
				t.Fatalf("LEASESVC_PAGE_TOKEN_KEY pins google_secret_manager_secret_version.%s, which the module does not declare (or does not fill from a random_id)", versionName)
			}

			// The key is httpapi.PageTokenKeySize random bytes.
			var found bool
			for _, k := range instancesOf(t, e, "random_id") {
				if k.addr != "random_id."+keyName {
					continue
				}
				found = true
				if got := attrOf(t, e, k.block, k.addr, "byte_length"); !got.RawEquals(cty.NumberIntVal(httpapi.PageTokenKeySize)) {
					t.Errorf("%s.byte_length = %#v, want %d: the service refuses a LEASESVC_PAGE_TOKEN_KEY of another length and does not start", k.addr, got, httpapi.PageTokenKeySize)
				}
				if _, ok := e.attr(t, k.block, "prefix"); ok {
					t.Errorf("%s sets prefix, which b64_std would start with: the key would not decode", k.addr)
				}
			}
			if !found {
				t.Fatalf("no random_id.%s (or it has count/for_each)", keyName)
			}

			// The runtime service account may read the secret, and the
			// service waits for the grant.
			grant := secretAccessor(t, e, secretName)
			if grant == "" {
				t.Fatalf("no google_secret_manager_secret_iam_member grants roles/secretmanager.secretAccessor on google_secret_manager_secret.%s to the runtime service account: Cloud Run would refuse the revision", secretName)
			}
			if deps := stringsOf(t, run.addr+".depends_on", attrOf(t, e, run.block, run.addr, "depends_on")); !slices.Contains(deps, "<"+grant+">") {
				t.Errorf("%s.depends_on = %v lacks %s: the first revision may be deployed before its service account can read the key", run.addr, deps, grant)
			}

			// Every secret the service account may read is one the
			// container reads: the policy volume or a secret env var.
			used := map[string]bool{secretName: true}
			for _, vol := range e.nested(t, oneNested(t, e, run.block, run.addr, "template"), "volumes") {
				for _, sb := range e.nested(t, vol, "secret") {
					if name, _, ok := resourceRef(attrOf(t, e, sb, run.addr+" volumes.secret", "secret"), "google_secret_manager_secret"); ok {
						used[name] = true
					}
				}
			}
			for _, g := range instancesOf(t, e, "google_secret_manager_secret_iam_member") {
				if s, _, ok := resourceRef(attrOf(t, e, g.block, g.addr, "secret_id"), "google_secret_manager_secret"); !ok || !used[s] {
					t.Errorf("%s grants on %#v, a secret the container does not read", g.addr, attrOf(t, e, g.block, g.addr, "secret_id"))
				}
			}
		})
	}

	// The module pins the provider of random_id to a major version.
	var constraint string
	for _, tf := range m.blocksOf("terraform", "") {
		for _, b := range tf.Body.Blocks {
			if a, ok := b.Body.Attributes["random"]; b.Type == "required_providers" && ok {
				v, diags := a.Expr.Value(nil)
				if !diags.HasErrors() && v.Type().IsObjectType() && v.Type().HasAttribute("source") && v.Type().HasAttribute("version") &&
					v.GetAttr("source").RawEquals(cty.StringVal("hashicorp/random")) {
					constraint = v.GetAttr("version").AsString()
				}
			}
		}
	}
	if lo, hi, err := versionRange(constraint); constraint == "" || err != nil || lo.less(version{3, 0, 0}) || (version{4, 0, 0}).less(hi) {
		t.Errorf(`required_providers: random = %q (err %v), want { source = "hashicorp/random", version = "~> 3.x" }, within the 3.x line`, constraint, err)
	}
}

// secretAccessor returns the address of the grant of
// roles/secretmanager.secretAccessor on google_secret_manager_secret.<secret>
// to the runtime service account, or "" if there is none.
func secretAccessor(t *testing.T, e *evaluator, secret string) string {
	t.Helper()
	for _, g := range instancesOf(t, e, "google_secret_manager_secret_iam_member") {
		role := str(t, g.addr+".role", attrOf(t, e, g.block, g.addr, "role"))
		member := str(t, g.addr+".member", attrOf(t, e, g.block, g.addr, "member"))
		s, _, ok := resourceRef(attrOf(t, e, g.block, g.addr, "secret_id"), "google_secret_manager_secret")
		if role == "roles/secretmanager.secretAccessor" && member == "<google_service_account.leasesvc.member>" && ok && s == secret {
			return g.addr
		}
	}
	return ""
}
