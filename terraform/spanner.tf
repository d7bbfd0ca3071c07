# The Spanner instance and database of the spanner backend.
#
# The schema has one source of truth: backend/spanner/schema.sql, the file the
# Go backend embeds and checks the table against at start-up. Terraform reads
# the same file, so the service runs without LEASESVC_SPANNER_MIGRATE.
#
# The file holds plain DDL statements separated by semicolons and no comments.
# Change it only by appending statements: the provider applies appended
# statements in place, but an edited or removed statement makes it want to
# recreate the database, which deletion protection then refuses.

locals {
  spanner_ddl_file = "${path.module}/../backend/spanner/schema.sql"

  # Statements without their terminating semicolons, as the Go backend's
  # Statements() returns them.
  spanner_ddl = [
    for statement in split(";", file(local.spanner_ddl_file)) : trimspace(statement)
    if trimspace(statement) != ""
  ]

  spanner_instance_config = coalesce(var.spanner_instance_config, "regional-${var.region}")
}

resource "google_spanner_instance" "leases" {
  count = local.is_spanner ? 1 : 0

  project          = var.project_id
  name             = var.name
  config           = local.spanner_instance_config
  display_name     = var.name
  processing_units = var.spanner_processing_units
  labels           = local.labels

  # Never delete backups with the instance. Spanner itself refuses to delete an
  # instance that holds a drop-protected database (below).
  force_destroy = false

  depends_on = [google_project_service.apis]
}

resource "google_spanner_database" "leases" {
  count = local.is_spanner ? 1 : 0

  project          = var.project_id
  instance         = google_spanner_instance.leases[0].name
  name             = var.spanner_database_name
  database_dialect = "GOOGLE_STANDARD_SQL"
  ddl              = local.spanner_ddl

  # Terraform refuses to destroy the database, and Spanner refuses to drop it
  # (or its instance) while drop protection is on.
  deletion_protection    = var.deletion_protection
  enable_drop_protection = var.deletion_protection
}
