# What callers, CI and docs/deploy.md need after apply.

output "service_url" {
  description = "HTTPS URL of the service. Callers use it as the audience of their Google ID token."
  value       = google_cloud_run_v2_service.leasesvc.uri
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

output "service_env" {
  description = "The environment the container gets (PORT comes from Cloud Run)."
  value       = local.service_env
}

output "alert_policies" {
  description = "IDs of the alert policies (empty when alerts_enabled is false)."
  value = concat(
    google_monitoring_alert_policy.lease_unheld[*].id,
    google_monitoring_alert_policy.leadership_flapping[*].id,
    google_monitoring_alert_policy.event_publish_failures[*].id,
  )
}
