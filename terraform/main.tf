# Module-wide names and labels. Each concern has its own file:
#
#   apis.tf               the APIs the module enables
#   artifact_registry.tf  the image repository
#   run.tf                the Cloud Run service and the container's environment
#   firestore.tf          the Firestore database          (backend = "firestore")
#   spanner.tf            the Spanner instance and database (backend = "spanner")
#   pubsub.tf             the leadership events topic
#   policy.tf             the leasesvc policy file, a Secret Manager secret the service mounts
#   page_token_key.tf     the list page token key every instance shares, a Secret Manager secret
#   iam.tf                the service account, its roles, and who may invoke
#   monitoring.tf         the alert policies
#   outputs.tf            what callers and docs/deploy.md need

locals {
  labels = merge(
    {
      app        = "leasesvc"
      managed-by = "terraform"
    },
    var.labels,
  )

  is_firestore = var.backend == "firestore"
  is_spanner   = var.backend == "spanner"

  events_topic_name = "${var.name}-events"
}
