output "service_url" {
  description = "The service's deterministic URL: callers call it and mint their ID tokens for it (leasesvc refuses tokens for the hashed *.a.run.app URL)."
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
