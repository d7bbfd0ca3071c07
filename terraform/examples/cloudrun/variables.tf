variable "project_id" {
  description = "Google Cloud project to deploy into."
  type        = string
}

variable "region" {
  description = "Region of the service and its backend."
  type        = string
  default     = "europe-west1"
}

variable "backend" {
  description = "Where the leases are kept: firestore or spanner. Changing it on a deployed configuration replaces the database (deletion protection refuses that)."
  type        = string

  validation {
    condition     = contains(["firestore", "spanner"], var.backend)
    error_message = "backend must be firestore or spanner."
  }
}

variable "image" {
  description = "leasesvc image pushed to the module's repository, e.g. europe-west1-docker.pkg.dev/my-project/leasesvc/leasesvc@sha256:…"
  type        = string
}

variable "invoker_members" {
  description = "Principals allowed to call the service, e.g. [\"serviceAccount:agents@my-project.iam.gserviceaccount.com\"]."
  type        = list(string)
  default     = []
}

variable "operators_domain" {
  description = "Email domain whose principals get admin on every lease (local.policy in main.tf), e.g. the domain of the operators' service accounts, ops-project.iam.gserviceaccount.com. Every principal of that domain that passes Cloud Run's invoker check may revoke any holding."
  type        = string
  default     = "example.com"
}

variable "notification_channels" {
  description = "Notification channels for the alerts: projects/P/notificationChannels/ID."
  type        = list(string)
  default     = []
}

variable "deletion_protection" {
  description = "Protect the service and the database from deletion; set false only to tear the deployment down (docs/deploy.md)."
  type        = bool
  default     = true
}
