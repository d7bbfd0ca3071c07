package terraform_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// databaseUserPermissions are the permissions of roles/spanner.databaseUser,
// as Google publishes them
// (https://cloud.google.com/iam/docs/roles-permissions/spanner#spanner.databaseUser).
// The role's description says it may "view and update schema for the
// database": updateDdl and the schema operations are why the module grants
// a custom role instead.
var databaseUserPermissions = []string{
	"monitoring.timeSeries.create",
	"spanner.databaseOperations.cancel",
	"spanner.databaseOperations.get",
	"spanner.databaseOperations.list",
	"spanner.databases.adapt",
	"spanner.databases.beginOrRollbackReadWriteTransaction",
	"spanner.databases.beginPartitionedDmlTransaction",
	"spanner.databases.beginReadOnlyTransaction",
	"spanner.databases.changequorum",
	"spanner.databases.get",
	"spanner.databases.getDdl",
	"spanner.databases.partitionQuery",
	"spanner.databases.partitionRead",
	"spanner.databases.read",
	"spanner.databases.select",
	"spanner.databases.updateDdl",
	"spanner.databases.write",
	"spanner.instancePartitions.get",
	"spanner.instances.get",
	"spanner.sessions.create",
	"spanner.sessions.delete",
	"spanner.sessions.get",
	"spanner.sessions.list",
}

// schemaPermission matches permissions that change a Spanner database's
// schema, its IAM policy or its existence.
var schemaPermission = regexp.MustCompile(`updateDdl|databaseOperations|setIamPolicy|^spanner\.databases\.(drop|create|update|changequorum|adapt)$`)

// TestSpannerRoleHasNoSchemaPermissions checks that the Spanner backend's
// service account gets, on its database, a custom role holding only data
// permissions of roles/spanner.databaseUser (a subset of what that role has,
// so nothing a data user lacks) and none that change the schema Terraform
// owns, and at least those the Go client needs for reads, queries and
// read-write transactions.
func TestSpannerRoleHasNoSchemaPermissions(t *testing.T) {
	m := loadModule(t, moduleDir)
	e := m.evaluate(t, inputs("spanner", nil))
	perms, ok := customRoles(t, e)["spanner_data"]
	if !ok {
		t.Fatal("backend spanner: no custom role spanner_data")
	}
	for _, p := range perms {
		if !slices.Contains(databaseUserPermissions, p) {
			t.Errorf("spanner_data holds %s, which roles/spanner.databaseUser does not: more than a data user needs", p)
		}
		if schemaPermission.MatchString(p) {
			t.Errorf("spanner_data holds %s: it changes the database's schema, IAM or existence, which are Terraform's", p)
		}
	}
	for _, p := range []string{"spanner.sessions.create", "spanner.databases.read", "spanner.databases.select", "spanner.databases.write", "spanner.databases.beginOrRollbackReadWriteTransaction"} {
		if !slices.Contains(perms, p) {
			t.Errorf("spanner_data lacks %s, which the service's reads, queries and transactions need", p)
		}
	}
	for _, g := range grants(t, e) {
		if g.role == "roles/spanner.databaseUser" {
			t.Errorf("%s grants roles/spanner.databaseUser, which holds spanner.databases.updateDdl", g.addr)
		}
	}
}

// subscriptionName is how cmd/leasesvc names an instance's subscription.
var subscriptionName = regexp.MustCompile(`sub := "([a-z][a-z0-9-]*)" \+ instance`)

// TestSubscriptionConditionMatchesCode checks that the subscription role's
// IAM condition lets through exactly the subscriptions the service creates:
// the prefix of its names in cmd/leasesvc/transport.go.
func TestSubscriptionConditionMatchesCode(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "leasesvc", "transport.go"))
	if err != nil {
		t.Fatal(err)
	}
	sm := subscriptionName.FindSubmatch(src)
	if sm == nil {
		t.Fatalf("cmd/leasesvc/transport.go: found no `sub := \"<prefix>\" + instance`: the scan is broken, or the subscription is named another way (update the IAM condition in iam.tf and this test)")
	}
	m := loadModule(t, moduleDir)
	e := m.evaluate(t, inputs("firestore", nil))
	prefix, err := e.local("subscription_name_prefix")
	if err != nil {
		t.Fatal(err)
	}
	want := "projects/" + testProject + "/subscriptions/" + string(sm[1])
	if got := prefix.AsString(); got != want {
		t.Errorf("local.subscription_name_prefix = %q, want %q (the service names its subscriptions %s<instance>)", got, want, sm[1])
	}
	if !strings.Contains(subscriptionCondition, `startsWith("`+want+`")`) {
		t.Errorf("subscriptionCondition %q does not match %q", subscriptionCondition, want)
	}
}
