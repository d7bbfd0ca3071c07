# The Docker repository the leasesvc image is pushed to. Cloud Run pulls from
# it with its own service agent, which can read repositories of its project, so
# the runtime service account gets no registry role.

resource "google_artifact_registry_repository" "images" {
  project       = var.project_id
  location      = var.region
  repository_id = var.name
  format        = "DOCKER"
  description   = "leasesvc container images"
  labels        = local.labels

  docker_config {
    # A pushed tag never moves: a deployed revision always runs the bytes that
    # were reviewed under that tag.
    immutable_tags = var.immutable_image_tags
  }

  depends_on = [google_project_service.apis]
}
