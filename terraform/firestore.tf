# The Firestore database of the firestore backend: native mode, one document
# per lease in LEASESVC_FIRESTORE_COLLECTION.
#
# The backend decides with plain reads and update-time preconditions, never
# with transactions (backend/firestore/doc.go), so the concurrency mode only
# matters to other clients; OPTIMISTIC takes no locks on reads.

resource "google_firestore_database" "leases" {
  count = local.is_firestore ? 1 : 0

  project                           = var.project_id
  name                              = var.firestore_database_id
  location_id                       = coalesce(var.firestore_location, var.region)
  type                              = "FIRESTORE_NATIVE"
  concurrency_mode                  = "OPTIMISTIC"
  app_engine_integration_mode       = "DISABLED"
  point_in_time_recovery_enablement = var.firestore_point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"

  # Deleting the database restarts every fencing token at 1, which breaks the
  # guarantee downstream systems rely on. With protection on, Firestore refuses
  # the delete and `terraform destroy` only forgets the database (ABANDON).
  delete_protection_state = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy         = var.deletion_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.apis]
}
