# The leasesvc policy file (var.policy): who may do what on which lease names.
#
# Cloud Run gives a container a file only as a Secret Manager secret mounted
# as a volume, so the policy is a secret version, mounted read-only at
# local.policy_mount_path (run.tf) and named by LEASESVC_POLICY. The service
# reads it once at start-up and refuses to start with an invalid one.
#
# A change of var.policy replaces the secret version, which gets a new version
# number; the service template pins that number (not "latest"), so every
# change rolls out a new revision, and a revision keeps the policy it started
# with. create_before_destroy keeps the previous version until the new
# revision is deployed: if the new policy is refused (the revision never
# becomes ready and the apply fails), the old revision keeps serving and can
# still start instances with its own version. The runtime service account's
# roles/secretmanager.secretAccessor on this secret is granted in iam.tf.

locals {
  policy_mount_path = "/etc/leasesvc/policy" # the secret volume's directory
  policy_file       = "policy.yaml"          # the file the version appears as in it
}

resource "google_secret_manager_secret" "policy" {
  project   = var.project_id
  secret_id = "${var.name}-policy"
  labels    = local.labels

  # Kept in the service's region, so a location organization policy that
  # allows the region allows the secret too.
  replication {
    user_managed {
      replicas {
        location = var.region
      }
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_version" "policy" {
  secret      = google_secret_manager_secret.policy.id
  secret_data = var.policy

  lifecycle {
    create_before_destroy = true
  }
}
