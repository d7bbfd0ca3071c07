# The leasesvc Cloud Run service.
#
# The container's environment uses the service's own configuration names (the
# README's "Configuration" table; cmd/leasesvc reads them). module_test.go
# parses the Go sources and fails if this map sets a name the service does not
# read, or leaves out one the chosen backend needs.
#
# Authentication: LEASESVC_AUTH is google, so leasesvc verifies the Google ID
# token of every request itself and checks its email against the policy file
# LEASESVC_POLICY, mounted from Secret Manager (policy.tf). Cloud Run's
# invoker check (iam.tf) still runs in front of it. The rate limit applies per
# principal and per instance.
#
# The audiences leasesvc accepts (LEASESVC_AUTH_AUDIENCES) are the service's
# deterministic URL (local.service_url, below) and var.auth_audiences; the
# service never takes the audience from the request (docs/contract.md §9).
# Callers mint their tokens for service_url (outputs.tf), not for the URL
# google_cloud_run_v2_service.uri reports, which may be the older hashed
# https://SERVICE-HASH-REGION.a.run.app that leasesvc refuses.
#
# List page tokens are sealed with LEASESVC_PAGE_TOKEN_KEY, the same key on
# every instance, from a Secret Manager secret (page_token_key.tf).
#
# Not set, on purpose:
#   PORT                       Cloud Run sets it (to the container port, 8080).
#   LEASESVC_SPANNER_MIGRATE   Terraform owns the schema (spanner.tf); the
#                              service only checks it at start-up.
#   LEASESVC_AUTH_TOKENS       the tokens file of LEASESVC_AUTH=static; on
#                              Cloud Run callers have Google identities.

locals {
  # Memory limits Cloud Run allows per CPU count, in MiB ("vCPU and memory
  # table", https://cloud.google.com/run/docs/configuring/services/cpu).
  cpu_memory_mib = {
    "1" = { min = 128, max = 4096 }
    "2" = { min = 128, max = 8192 }
    "4" = { min = 2048, max = 16384 }
    "6" = { min = 4096, max = 24576 }
    "8" = { min = 4096, max = 32768 }
  }
  memory_mib = tonumber(regex("^[0-9]+", var.memory)) * (can(regex("Gi$", var.memory)) ? 1024 : 1)

  # The service's deterministic URL, https://SERVICE_NAME-PROJECT_NUMBER.REGION.run.app
  # (Cloud Run, "Deterministic URL": https://cloud.google.com/run/docs/triggering/https-request).
  # Cloud Run assigns it when the DNS segment SERVICE_NAME-PROJECT_NUMBER has
  # at most 63 characters, which var.name's validation (at most 24) leaves
  # room for. It is known before the service exists, and it is the URL
  # leasesvc derives itself on Cloud Run when LEASESVC_AUTH_AUDIENCES is
  # unset (cmd/leasesvc/auth.go, cloudRunAudience); the module sets it
  # explicitly, so the service needs no metadata server lookup for it.
  service_url = "https://${var.name}-${data.google_project.this.number}.${var.region}.run.app"

  service_env = merge(
    {
      LEASESVC_BACKEND      = var.backend
      LEASESVC_PROJECT      = var.project_id
      LEASESVC_LOG_LEVEL    = var.log_level
      LEASESVC_PUBSUB_TOPIC = google_pubsub_topic.events.id # projects/P/topics/T
      LEASESVC_TELEMETRY    = "otlp"                        # OTLP to telemetry.googleapis.com with the service's credentials
      LEASESVC_AUTH         = "google"                      # verify every caller's Google ID token
      LEASESVC_RATE_LIMIT   = tostring(var.rate_limit)      # requests/s per principal and instance
      LEASESVC_RATE_BURST   = tostring(var.rate_burst)      # a whole number: the service parses it as one

      # Sessions (one WebSocket per agent process) each hold a request slot
      # for as long as they stay open: they may take what max_concurrency
      # leaves after the slots kept for REST calls, and each socket is asked
      # to move to a new one before Cloud Run's request timeout cuts it
      # (11/12 of it: 55 min of 60, time enough to resume elsewhere).
      LEASESVC_MAX_SESSIONS    = tostring(var.max_concurrency - var.rest_concurrency_reserve)
      LEASESVC_SESSION_MAX_AGE = "${floor(var.request_timeout_seconds * 11 / 12)}s"

      # The policy file, in the secret volume of the template below.
      LEASESVC_POLICY = "${local.policy_mount_path}/${local.policy_file}"

      # The deterministic URL first, then any custom audiences (a custom
      # domain, a load balancer's URL).
      LEASESVC_AUTH_AUDIENCES = join(",", concat([local.service_url], var.auth_audiences))
    },
    local.is_firestore ? {
      LEASESVC_FIRESTORE_DATABASE   = google_firestore_database.leases[0].name
      LEASESVC_FIRESTORE_COLLECTION = var.firestore_collection
    } : {},
    local.is_spanner ? {
      LEASESVC_SPANNER_DATABASE = "projects/${var.project_id}/instances/${google_spanner_instance.leases[0].name}/databases/${google_spanner_database.leases[0].name}"
    } : {},
  )
}

# The project's number, for local.service_url.
data "google_project" "this" {
  project_id = var.project_id
}

resource "google_cloud_run_v2_service" "leasesvc" {
  project     = var.project_id
  name        = var.name
  location    = var.region
  description = "leasesvc: leases with fencing tokens (${var.backend} backend)"
  labels      = local.labels
  ingress     = var.ingress

  # Every request is checked against the service's IAM policy (iam.tf) before
  # leasesvc checks it against its own policy.
  invoker_iam_disabled = false

  # Cloud Run's invoker check accepts tokens for the service's run.app URLs;
  # with auth_audiences, it must accept tokens for them too.
  custom_audiences = length(var.auth_audiences) > 0 ? var.auth_audiences : null

  deletion_protection = var.deletion_protection

  template {
    service_account                  = google_service_account.leasesvc.email
    max_instance_request_concurrency = var.max_concurrency
    timeout                          = "${var.request_timeout_seconds}s"
    execution_environment            = "EXECUTION_ENVIRONMENT_GEN2"
    labels                           = local.labels

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    # The policy file: the pinned secret version (not "latest"), so a policy
    # change is a template change and rolls out a new revision (policy.tf).
    volumes {
      name = "policy"
      secret {
        secret = google_secret_manager_secret.policy.secret_id
        items {
          version = google_secret_manager_secret_version.policy.version
          path    = local.policy_file
        }
      }
    }

    containers {
      name  = "leasesvc"
      image = var.image

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        cpu_idle          = !var.cpu_always_allocated
        startup_cpu_boost = true
      }

      volume_mounts {
        name       = "policy"
        mount_path = local.policy_mount_path
      }

      dynamic "env" {
        for_each = local.service_env
        content {
          name  = env.key
          value = env.value
        }
      }

      # The page token key, from the pinned secret version (page_token_key.tf);
      # Cloud Run reads it as the runtime service account when an instance
      # starts. value_source.secret_key_ref: secret is the secret's ID in the
      # same project, version a version number or "latest"
      # (https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/cloud_run_v2_service#nested_secret_key_ref).
      env {
        name = "LEASESVC_PAGE_TOKEN_KEY"
        value_source {
          secret_key_ref {
            secret  = google_secret_manager_secret.page_token_key.secret_id
            version = google_secret_manager_secret_version.page_token_key.version
          }
        }
      }

      # Traffic reaches a new instance only once /readyz answers 200, that is
      # once the backend answers (and, with Spanner, the schema check passed).
      # /readyz gives its backend check up to 2 s (httpapi.DefaultReadyTimeout)
      # and then answers 503 itself: the probe waits 4 s, so a slow backend
      # gets that answer rather than a probe timeout (module_test.go checks
      # the margin against the Go constant). Cloud Run wants the timeout no
      # longer than the period; 5 s × 12 gives a cold backend a minute.
      startup_probe {
        initial_delay_seconds = 0
        period_seconds        = 5
        timeout_seconds       = 4
        failure_threshold     = 12
        http_get {
          path = "/readyz"
        }
      }

      # /healthz answers while the process serves; it does not depend on the
      # backend, so a backend outage does not restart every instance.
      liveness_probe {
        initial_delay_seconds = 0
        period_seconds        = 10
        timeout_seconds       = 2
        failure_threshold     = 3
        http_get {
          path = "/healthz"
        }
      }
    }
  }

  traffic {
    type    = "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST"
    percent = 100
  }

  lifecycle {
    precondition {
      condition     = var.min_instances <= var.max_instances
      error_message = "min_instances (${var.min_instances}) must not exceed max_instances (${var.max_instances})."
    }
    precondition {
      condition     = var.rest_concurrency_reserve < var.max_concurrency
      error_message = "rest_concurrency_reserve (${var.rest_concurrency_reserve}) must be less than max_concurrency (${var.max_concurrency}): sessions get the request slots between them (LEASESVC_MAX_SESSIONS)."
    }
    # Memory a number of CPUs may have (https://cloud.google.com/run/docs/configuring/services/cpu).
    precondition {
      condition     = local.memory_mib >= local.cpu_memory_mib[var.cpu].min && local.memory_mib <= local.cpu_memory_mib[var.cpu].max
      error_message = "memory ${var.memory} does not fit cpu ${var.cpu}: Cloud Run allows ${local.cpu_memory_mib[var.cpu].min}–${local.cpu_memory_mib[var.cpu].max} MiB with ${var.cpu} CPU."
    }
  }

  # The first revision must be able to reach its backend and topic, or its
  # startup probe fails, and Cloud Run refuses a revision whose service
  # account cannot read its secrets: grant the roles, and wait for them to
  # take effect (time_sleep.iam_propagation, iam.tf), before deploying.
  depends_on = [
    google_project_service.apis,
    time_sleep.iam_propagation,
    google_project_iam_member.telemetry,
    google_project_iam_member.firestore_user,
    google_spanner_database_iam_member.spanner_user,
    google_pubsub_topic_iam_member.events,
    google_project_iam_member.event_subscriptions,
    google_secret_manager_secret_iam_member.policy,
    google_secret_manager_secret_iam_member.page_token_key,
  ]
}
