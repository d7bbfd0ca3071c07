# The runtime identity of leasesvc and every role it holds, each on the
# narrowest resource Google Cloud lets it be granted on, plus who may invoke
# the service. module_test.go fails the build if a broad role creeps in.
#
#   role                              granted on             why
#   roles/datastore.user              project, conditioned   Firestore reads and writes (Firestore IAM is project-level;
#                                     on the database        the IAM condition narrows it to the module's database)
#   <name>_spanner_data (custom)      the database           Spanner reads, writes and the schema check; no DDL
#                                                            (see "Spanner" below)
#   roles/pubsub.publisher            the topic              publish leadership events
#   roles/pubsub.subscriber           the topic              attach the per-instance subscription to the topic
#   <name>_event_subscriptions        project, conditioned   create, pull from and delete the per-instance
#                    (custom)         on leasesvc-* names    subscription (see "Subscriptions" below)
#   roles/cloudtrace.agent            project                write spans (also through telemetry.googleapis.com)
#   roles/monitoring.metricWriter     project                write metrics (also through telemetry.googleapis.com)
#   roles/logging.logWriter           project                write logs
#   roles/secretmanager.secretAccessor
#                                     the policy secret      read the policy file (LEASESVC_POLICY) mounted from it
#   roles/secretmanager.secretAccessor
#                                     the page token key     read LEASESVC_PAGE_TOKEN_KEY, an env var from the secret
#                                     secret
#
# Spanner: the predefined roles/spanner.databaseUser also holds
# spanner.databases.updateDdl and spanner.databaseOperations.cancel ("View
# and update schema for the database",
# https://cloud.google.com/iam/docs/roles-permissions/spanner#spanner.databaseUser),
# so a compromised instance could drop the Leases table. The schema is
# Terraform's (spanner.tf) and the service only checks it, so the service
# account gets a custom role with the data permissions of databaseUser and
# none of its schema ones (local.spanner_data_permissions; module_test.go
# refuses databaseUser and any DDL permission).
#
# Subscriptions: each instance creates its own subscription when it starts,
# named leasesvc-<instance ID> (cmd/leasesvc/transport.go; module_test.go checks
# the prefix against it), under a name nobody knows in advance, so the
# permissions cannot be granted on the subscription itself. The custom role
# keeps them to the three notify/listen.go uses: CreateSubscription
# (pubsub.subscriptions.create), Receive, a streaming pull
# (pubsub.subscriptions.consume), and DeleteSubscription
# (pubsub.subscriptions.delete); it never reads a subscription's
# configuration (no GetSubscription, so no pubsub.subscriptions.get), which
# module_test.go checks against the Go sources. The grant's IAM condition
# limits it, on subscriptions, to those whose name starts with
# projects/<project>/subscriptions/leasesvc-: the service may not delete or
# pull from the project's other subscriptions. The condition's first clause
# (the resource is not a subscription) keeps the grant for a check made on
# another resource, such as the project a subscription is created in. The
# condition narrows the grant only as far as Pub/Sub reports subscription
# names to IAM conditions, which is to be confirmed on a real project
# (docs/operations.md, "Least privilege"). Run leasesvc in a project of
# its own if that project's other subscriptions carry data leasesvc must not
# read.

locals {
  # The permissions of roles/spanner.databaseUser the service uses: sessions,
  # reads, queries (the schema check reads INFORMATION_SCHEMA), read-write
  # transactions and their mutations. Not updateDdl, databaseOperations.*,
  # partitioned DML, partitioned reads, or adapt/changequorum.
  spanner_data_permissions = [
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
  ]

  # Every instance's subscription is leasesvc-<instance ID>
  # (cmd/leasesvc/transport.go).
  subscription_name_prefix = "projects/${var.project_id}/subscriptions/leasesvc-"
}

resource "google_service_account" "leasesvc" {
  project      = var.project_id
  account_id   = var.name
  display_name = "leasesvc runtime (${var.name})"
  description  = "Identity of the ${var.name} Cloud Run service: its backend, events topic and telemetry. Managed by Terraform."

  depends_on = [google_project_service.apis]
}

# --- Telemetry: these roles exist only at project level. ---------------------

resource "google_project_iam_member" "telemetry" {
  for_each = toset([
    "roles/cloudtrace.agent",
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
  ])

  project = var.project_id
  role    = each.value
  member  = google_service_account.leasesvc.member
}

# --- Backend ------------------------------------------------------------------

# Firestore has no per-database IAM policy: roles are granted on the project.
# The condition limits the grant to the module's own database.
resource "google_project_iam_member" "firestore_user" {
  count = local.is_firestore ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.leasesvc.member

  condition {
    title       = "${var.name} Firestore database only"
    description = "leasesvc may read and write its own Firestore database and no other."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${var.firestore_database_id}\""
  }
}

resource "google_project_iam_custom_role" "spanner_data" {
  count = local.is_spanner ? 1 : 0

  project     = var.project_id
  role_id     = "${replace(var.name, "-", "_")}_spanner_data"
  title       = "leasesvc Spanner data (${var.name})"
  description = "Reads and writes the leasesvc database and checks its schema; no schema changes (roles/spanner.databaseUser without updateDdl)."
  stage       = "GA"
  permissions = local.spanner_data_permissions

  depends_on = [google_project_service.apis]
}

resource "google_spanner_database_iam_member" "spanner_user" {
  count = local.is_spanner ? 1 : 0

  project  = var.project_id
  instance = google_spanner_instance.leases[0].name
  database = google_spanner_database.leases[0].name
  role     = google_project_iam_custom_role.spanner_data[0].name
  member   = google_service_account.leasesvc.member
}

# --- Policy -----------------------------------------------------------------

# Cloud Run reads the mounted secret as the runtime service account, and
# refuses to deploy a revision whose account cannot.
resource "google_secret_manager_secret_iam_member" "policy" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.policy.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.leasesvc.member
}

# --- Page token key -----------------------------------------------------------

# Cloud Run reads LEASESVC_PAGE_TOKEN_KEY from the secret as the runtime
# service account when an instance starts, and refuses to deploy a revision
# whose account cannot.
resource "google_secret_manager_secret_iam_member" "page_token_key" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.page_token_key.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.leasesvc.member
}

# --- Events -----------------------------------------------------------------

resource "google_pubsub_topic_iam_member" "events" {
  for_each = toset([
    "roles/pubsub.publisher",  # pubsub.topics.publish on this topic only
    "roles/pubsub.subscriber", # pubsub.topics.attachSubscription on this topic only
  ])

  project = var.project_id
  topic   = google_pubsub_topic.events.name
  role    = each.value
  member  = google_service_account.leasesvc.member
}

resource "google_project_iam_custom_role" "event_subscriptions" {
  project     = var.project_id
  role_id     = "${replace(var.name, "-", "_")}_event_subscriptions"
  title       = "leasesvc event subscriptions (${var.name})"
  description = "Lets each leasesvc instance create, pull from and delete its own subscription to the events topic."
  stage       = "GA"
  permissions = [
    "pubsub.subscriptions.consume", # Receive (StreamingPull, acknowledge)
    "pubsub.subscriptions.create",  # CreateSubscription at start-up
    "pubsub.subscriptions.delete",  # DeleteSubscription at shutdown
  ]

  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "event_subscriptions" {
  project = var.project_id
  role    = google_project_iam_custom_role.event_subscriptions.name
  member  = google_service_account.leasesvc.member

  condition {
    title       = "${var.name} own subscriptions only"
    description = "On subscriptions, only those named leasesvc-<instance>: the ones leasesvc instances create for themselves."
    expression  = "resource.type != \"pubsub.googleapis.com/Subscription\" || resource.name.startsWith(\"${local.subscription_name_prefix}\")"
  }
}

# --- Waiting for the grants -------------------------------------------------
#
# IAM is eventually consistent: "Changes to allow or deny policies typically
# propagate in 2 minutes, but could potentially take 7 minutes or longer"
# (https://cloud.google.com/iam/docs/access-change-propagation). The first
# revision reads its secrets (the policy, the page token key) at deploy time and the backend at its
# start-up check (/readyz), so on the first apply Cloud Run would start it
# with grants that are made but not yet in force, and refuse the revision.
# The service waits for this sleep, which starts once every grant above is
# made. time_sleep is the hashicorp/time provider's resource for waiting on
# such asynchronous operations
# (https://registry.terraform.io/providers/hashicorp/time/latest/docs/resources/sleep).
# It sleeps again only when it is replaced: with a new service account or a
# new backend, whose grants are new too. If an apply still fails on a slow
# propagation, the next apply succeeds (docs/deploy.md).
resource "time_sleep" "iam_propagation" {
  create_duration = "${var.iam_propagation_wait_seconds}s"

  triggers = {
    service_account = google_service_account.leasesvc.email
    backend         = var.backend
  }

  depends_on = [
    google_project_iam_member.telemetry,
    google_project_iam_member.firestore_user,
    google_spanner_database_iam_member.spanner_user,
    google_pubsub_topic_iam_member.events,
    google_project_iam_member.event_subscriptions,
    google_secret_manager_secret_iam_member.policy,
    google_secret_manager_secret_iam_member.page_token_key,
  ]
}

# --- Who may call the service -------------------------------------------------
#
# Two layers check every request (README "Authentication"): Cloud Run lets in
# only a Google ID token of a principal with roles/run.invoker (below), then
# leasesvc verifies the same token itself (LEASESVC_AUTH=google) and checks
# its email against var.policy for the lease the request names.

resource "google_cloud_run_v2_service_iam_member" "invokers" {
  for_each = toset(var.invoker_members)

  project  = var.project_id
  location = google_cloud_run_v2_service.leasesvc.location
  name     = google_cloud_run_v2_service.leasesvc.name
  role     = "roles/run.invoker"
  member   = each.value
}

# Only when the caller opts in: anyone on the network may invoke the service.
resource "google_cloud_run_v2_service_iam_member" "public" {
  count = var.allow_unauthenticated ? 1 : 0

  project  = var.project_id
  location = google_cloud_run_v2_service.leasesvc.location
  name     = google_cloud_run_v2_service.leasesvc.name
  role     = "roles/run.invoker"
  member   = "allUsers"
}
