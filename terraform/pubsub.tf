# The leadership events topic (docs/contract.md §5). Every instance publishes the events of
# the changes it makes, and every instance creates its own subscription to the
# topic at start-up to learn of the changes the others make (to wake waiting
# acquires and :watch streams). Terraform creates no subscription: consumers
# outside leasesvc create their own.

resource "google_pubsub_topic" "events" {
  project                    = var.project_id
  name                       = local.events_topic_name
  labels                     = local.labels
  message_retention_duration = var.events_message_retention

  depends_on = [google_project_service.apis]
}
