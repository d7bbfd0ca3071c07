# What callers, CI and docs/deploy.md need after apply.

output "service_url" {
  description = "The service's deterministic URL, https://<name>-<project number>.<region>.run.app. Callers must call it and use it as the audience of their Google ID tokens: leasesvc accepts only it and auth_audiences (LEASESVC_AUTH_AUDIENCES), never the hashed *.a.run.app URL Cloud Run may also report."
  value       = local.service_url
}

output "service_name" {
  description = "Name of the Cloud Run service."
  value       = google_cloud_run_v2_service.leasesvc.name
}

output "service_account_email" {
  description = "Email of the service's runtime service account."
  value       = google_service_account.leasesvc.email
}

output "image_repository" {
  description = "Docker repository to push the images to: docker push <image_repository>/leasesvc:<version>, and the leasectl image (Dockerfile target leasectl) as <image_repository>/leasectl:<version>."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "events_topic" {
  description = "Full name of the leadership events topic (projects/P/topics/T), as LEASESVC_PUBSUB_TOPIC gets it."
  value       = google_pubsub_topic.events.id
}

output "firestore_database" {
  description = "Firestore database ID (backend = firestore), else null."
  value       = one(google_firestore_database.leases[*].name)
}

output "spanner_database" {
  description = "Full Spanner database name projects/P/instances/I/databases/D (backend = spanner), else null."
  value       = lookup(local.service_env, "LEASESVC_SPANNER_DATABASE", null)
}

output "policy_secret_version" {
  description = "Secret Manager version holding the policy the latest revision runs with (projects/P/secrets/<name>-policy/versions/N); each policy change makes a new one."
  value       = google_secret_manager_secret_version.policy.name
}

output "page_token_key_secret_version" {
  description = "Secret Manager version holding the list page token key every instance shares (projects/P/secrets/<name>-page-token-key/versions/N); the container gets it as LEASESVC_PAGE_TOKEN_KEY."
  value       = google_secret_manager_secret_version.page_token_key.name
}

output "service_env" {
  description = "The environment the container gets as plain values (PORT comes from Cloud Run; LEASESVC_PAGE_TOKEN_KEY from the secret version page_token_key_secret_version)."
  value       = local.service_env
}

output "alert_policies" {
  description = "IDs of the alert policies (empty when alerts_enabled is false)."
  value = concat(
    google_monitoring_alert_policy.lease_unheld[*].id,
    google_monitoring_alert_policy.leadership_flapping[*].id,
    google_monitoring_alert_policy.event_publish_failures[*].id,
    google_monitoring_alert_policy.telemetry_absent[*].id,
    google_monitoring_alert_policy.server_errors[*].id,
  )
}
