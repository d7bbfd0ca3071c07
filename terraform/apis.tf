# The Google Cloud APIs leasesvc and this module use. The backend's own API
# (Firestore or Spanner) is enabled only for the chosen backend.
#
# disable_on_destroy is false: destroying this module must never switch an API
# off for the whole project, which would break anything else that uses it.

locals {
  apis = toset(concat(
    [
      "artifactregistry.googleapis.com",     # the image repository
      "cloudresourcemanager.googleapis.com", # project IAM bindings
      "cloudtrace.googleapis.com",           # trace storage behind the Telemetry API
      "iam.googleapis.com",                  # service account, custom role
      "logging.googleapis.com",              # structured logs
      "monitoring.googleapis.com",           # metrics and alert policies
      "pubsub.googleapis.com",               # leadership events
      "run.googleapis.com",                  # the service
      "secretmanager.googleapis.com",        # the policy file (policy.tf)
      "telemetry.googleapis.com",            # OTLP endpoint for traces and metrics (LEASESVC_TELEMETRY=otlp)
    ],
    var.backend == "firestore" ? ["firestore.googleapis.com"] : ["spanner.googleapis.com"],
  ))
}

resource "google_project_service" "apis" {
  for_each = var.enable_apis ? local.apis : toset([])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}
