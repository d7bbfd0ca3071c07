output "service_url" {
  description = "URL of the service; the audience of the callers' ID tokens."
  value       = module.leasesvc.service_url
}

output "image_repository" {
  description = "Where to push the image."
  value       = module.leasesvc.image_repository
}

output "events_topic" {
  description = "The leadership events topic."
  value       = module.leasesvc.events_topic
}
