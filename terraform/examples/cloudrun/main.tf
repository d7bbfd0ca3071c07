# leasesvc on Cloud Run, with the Firestore or the Spanner backend: one
# configuration for both, the backend a variable. See docs/deploy.md:
#
#   terraform init
#   terraform apply -var project_id=my-project -var backend=firestore -var image=…
#
# The module is sourced from the repository ("../.."): it reads
# backend/spanner/schema.sql from the repository, so a remote source must keep
# the whole repository, e.g. "git::https://github.com/leasesvc/leasesvc.git//terraform?ref=v1.2.3".

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 7.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

# Who may do what, by lease name prefix (format: auth/doc.go). A principal is
# the email in the caller's Google ID token; Cloud Run lets a caller in only
# if it is also in invoker_members (or in a group or domain listed there).
locals {
  policy = <<-EOT
    grants:
      - principals: ["agents@${var.project_id}.iam.gserviceaccount.com"]
        verbs: [acquire]                  # acquire, renew, release, and read
        prefixes: [team-a.]
        description: the agents of team A hold the leases of their namespace
      - principals: ["*@${var.operators_domain}"]
        verbs: [admin]                    # revoke any holding, and all of the above
        prefixes: ["*"]
        description: operators
  EOT
}

module "leasesvc" {
  source = "../.."

  project_id = var.project_id
  region     = var.region
  image      = var.image
  backend    = var.backend

  policy                = local.policy
  invoker_members       = var.invoker_members
  notification_channels = var.notification_channels
  deletion_protection   = var.deletion_protection

  # Each backend reads its own settings; the other's are not used.
  firestore_database_id    = "leasesvc"
  firestore_collection     = "leases"
  spanner_processing_units = 100
  spanner_database_name    = "leases"
}
