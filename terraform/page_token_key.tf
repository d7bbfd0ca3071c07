# The key that seals list page tokens (LEASESVC_PAGE_TOKEN_KEY: 32 bytes,
# standard base64; docs/contract.md §9). Without it each instance makes a
# random key of its own, and a next page that Cloud Run routes to another
# instance is refused with 400; the service runs several instances, so they
# share this one.
#
# random_id (hashicorp/random) draws byte_length bytes from a cryptographic
# random source once, at the first apply, and keeps them in the state; b64_std
# is them in standard base64 with padding, the encoding the service decodes
# (https://registry.terraform.io/providers/hashicorp/random/latest/docs/resources/id).
# The key is stored as a Secret Manager secret version, and the container gets
# it as an environment variable from that version (run.tf); the runtime
# service account's roles/secretmanager.secretAccessor on the secret is
# granted in iam.tf.
#
# The key is in the Terraform state (random_id's attributes and the secret
# version's secret_data), as the policy text is: whoever can read the state
# can open page tokens (the lease name a listing continues from) and seal
# tokens of their own. The state must be protected anyway: keep it in a
# backend with access control and encryption at rest, such as a GCS bucket
# only the deployers can read (docs/deploy.md).
#
# To rotate the key: terraform apply -replace=module.leasesvc.random_id.page_token_key.
# That makes a new secret version, which the template pins, so a new revision
# rolls out; page tokens sealed with the old key are then refused (400), and
# clients start their listing again.

resource "random_id" "page_token_key" {
  byte_length = 32 # httpapi.PageTokenKeySize: an AES-256 key
}

resource "google_secret_manager_secret" "page_token_key" {
  project   = var.project_id
  secret_id = "${var.name}-page-token-key"
  labels    = local.labels

  # In the service's region, like the policy secret (policy.tf).
  replication {
    user_managed {
      replicas {
        location = var.region
      }
    }
  }

  depends_on = [google_project_service.apis]
}

# Pinned by number in the template (not "latest"); create_before_destroy keeps
# the version the serving revision pins until the new revision is deployed,
# as for the policy.
resource "google_secret_manager_secret_version" "page_token_key" {
  secret      = google_secret_manager_secret.page_token_key.id
  secret_data = random_id.page_token_key.b64_std

  lifecycle {
    create_before_destroy = true
  }
}
