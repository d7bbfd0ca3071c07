# Inputs of the leasesvc module. Every variable says what it sets, its unit and
# its default; validation refuses values Google Cloud would refuse later.

# ---------------------------------------------------------------------------
# Where and what
# ---------------------------------------------------------------------------

variable "project_id" {
  description = "Google Cloud project that holds every resource of the module (the service, its database, the events topic)."
  type        = string

  validation {
    condition     = can(regex("^([a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID such as my-project-123 (6–30 lowercase letters, digits and hyphens, optionally prefixed by a domain: example.com:my-project)."
  }
}

variable "region" {
  description = "Region of the Cloud Run service, the Artifact Registry repository and, unless overridden, the Firestore database or Spanner instance, e.g. europe-west1."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west1 or us-central1."
  }
}

variable "name" {
  description = "Base name of the resources: the Cloud Run service, its service account, the Artifact Registry repository, the events topic (<name>-events) and, with Spanner, the instance."
  type        = string
  default     = "leasesvc"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,22}[a-z0-9]$", var.name))
    error_message = "name must be 6–24 characters: a lowercase letter, then lowercase letters, digits or hyphens, ending in a letter or digit (it is also the service account ID and the Spanner instance ID)."
  }
}

variable "image" {
  description = "Container image the service runs, preferably pinned by digest: REGION-docker.pkg.dev/PROJECT/REPOSITORY/leasesvc@sha256:… (see docs/deploy.md). Push it to the module's repository (output image_repository) first."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9.-]+(:[0-9]+)?/[^\\s@:]+(:[A-Za-z0-9_.-]+)?(@sha256:[a-f0-9]{64})?$", var.image))
    error_message = "image must be a full image reference such as europe-west1-docker.pkg.dev/my-project/leasesvc/leasesvc:1.2.3 or …/leasesvc@sha256:<64 hex digits>."
  }
}

variable "backend" {
  description = "Lease backend: firestore (a Firestore native-mode database) or spanner (a Spanner instance and database). Sets LEASESVC_BACKEND."
  type        = string

  validation {
    condition     = contains(["firestore", "spanner"], var.backend)
    error_message = "backend must be firestore or spanner (the memory backend keeps nothing across restarts and is not for Cloud Run)."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels, on top of app=leasesvc and managed-by=terraform."
  type        = map(string)
  default     = {}
}

variable "enable_apis" {
  description = "Enable the Google Cloud APIs the module needs (apis.tf). Set false where APIs are managed elsewhere; they must then be enabled before apply."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the stateful resources from deletion: the Cloud Run service (deletion_protection), the Firestore database (delete protection, and destroy abandons it) or the Spanner database (Terraform deletion_protection and Spanner drop protection, which also blocks deleting its instance). A lost database restarts every fencing token, so leave this true outside throwaway projects."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------
# Cloud Run
# ---------------------------------------------------------------------------

variable "min_instances" {
  description = "Minimum number of instances kept running. At least 1: an instance must be up to publish expired events within 1 s of expiry (docs/contract.md §5) and to wake waiting acquires."
  type        = number
  default     = 1

  validation {
    condition     = var.min_instances >= 1 && var.min_instances <= 100 && floor(var.min_instances) == var.min_instances
    error_message = "min_instances must be a whole number from 1 to 100: with 0, no instance runs the expiry sweeper while the service is idle."
  }
}

variable "max_instances" {
  description = "Maximum number of instances. Every instance holds a Pub/Sub subscription and backend sessions; size it to the backend's capacity. Must be ≥ min_instances."
  type        = number
  default     = 10

  validation {
    condition     = var.max_instances >= 1 && var.max_instances <= 1000 && floor(var.max_instances) == var.max_instances
    error_message = "max_instances must be a whole number from 1 to 1000."
  }
}

variable "max_concurrency" {
  description = "Maximum concurrent requests per instance (Cloud Run max_instance_request_concurrency). Waiting acquires (waitMs), :watch streams and sessions (GET /v1/sessions:connect, one WebSocket per agent process, docs/contract.md) each hold one request slot for their whole duration. The default, 1000, is the Cloud Run maximum: an instance carries max_concurrency − rest_concurrency_reserve sessions (LEASESVC_MAX_SESSIONS) and keeps the rest for REST calls."
  type        = number
  default     = 1000

  validation {
    condition     = var.max_concurrency >= 1 && var.max_concurrency <= 1000 && floor(var.max_concurrency) == var.max_concurrency
    error_message = "max_concurrency must be a whole number from 1 to 1000."
  }
}

variable "rest_concurrency_reserve" {
  description = "Request slots of each instance kept for REST calls, watch streams and waiting acquires: sessions may take only max_concurrency minus this many (the module sets LEASESVC_MAX_SESSIONS to the difference), so a full house of sessions never leaves Cloud Run without a slot to route a plain call to. Must be less than max_concurrency."
  type        = number
  default     = 100

  validation {
    condition     = var.rest_concurrency_reserve >= 1 && var.rest_concurrency_reserve <= 999 && floor(var.rest_concurrency_reserve) == var.rest_concurrency_reserve
    error_message = "rest_concurrency_reserve must be a whole number from 1 to 999 (and less than max_concurrency)."
  }
}

variable "request_timeout_seconds" {
  description = "Longest a request may run, in seconds. It bounds :watch event streams, which clients then reopen, and sessions: each session socket is asked to move (the agent resumes on a new socket, make before break) after 11/12 of it (LEASESVC_SESSION_MAX_AGE: 55 min at the default 3600, the Cloud Run maximum); acquires wait at most 60 s (waitMs)."
  type        = number
  default     = 3600

  validation {
    condition     = var.request_timeout_seconds >= 70 && var.request_timeout_seconds <= 3600 && floor(var.request_timeout_seconds) == var.request_timeout_seconds
    error_message = "request_timeout_seconds must be a whole number from 70 (a 60 s waitMs plus margin) to 3600 (the Cloud Run maximum)."
  }
}

variable "ingress" {
  description = "Who can reach the service over the network: INGRESS_TRAFFIC_ALL (the internet, still subject to IAM), INGRESS_TRAFFIC_INTERNAL_ONLY (the VPC and the project's own services) or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "cpu" {
  description = "CPUs of one instance: \"1\", \"2\", \"4\", \"6\" or \"8\". Cloud Run allows fractions below 1 only with request-based billing, concurrency 1 and the first-generation environment, none of which suits leasesvc (https://cloud.google.com/run/docs/configuring/services/cpu); the provider passes limits through as a map of strings without checking them (its docs list \"1\", \"2\", \"4\" and \"8\", https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/cloud_run_v2_service#limits; Cloud Run's table adds 6), so this validation stands in for Cloud Run's."
  type        = string
  default     = "1"

  validation {
    condition     = contains(["1", "2", "4", "6", "8"], var.cpu)
    error_message = "cpu must be \"1\", \"2\", \"4\", \"6\" or \"8\" (the CPU counts Cloud Run offers a second-generation, always-allocated, concurrent service)."
  }
}

variable "memory" {
  description = "Memory limit of one instance, e.g. 512Mi or 1Gi. It must fit cpu: up to 4Gi with 1 CPU, 8Gi with 2, 2Gi–16Gi with 4, 4Gi–24Gi with 6, 4Gi–32Gi with 8 (a precondition of the service checks it)."
  type        = string
  default     = "512Mi"

  validation {
    condition     = can(regex("^[0-9]+(Mi|Gi)$", var.memory))
    error_message = "memory must be a size in Mi or Gi, such as 512Mi or 1Gi."
  }
}

variable "iam_propagation_wait_seconds" {
  description = "Seconds to wait after granting the service account its roles before deploying the service (time_sleep.iam_propagation in iam.tf), because IAM grants take effect typically within 2 minutes. It applies when the service account or the backend is created or replaced, not on every apply."
  type        = number
  default     = 120
  nullable    = false

  validation {
    condition     = var.iam_propagation_wait_seconds >= 0 && var.iam_propagation_wait_seconds <= 900 && floor(var.iam_propagation_wait_seconds) == var.iam_propagation_wait_seconds
    error_message = "iam_propagation_wait_seconds must be a whole number of seconds from 0 to 900."
  }
}

variable "cpu_always_allocated" {
  description = "Keep CPU allocated between requests (instance-based billing). Required for leasesvc's background work: the expiry sweeper, the Pub/Sub subscriber that wakes waiters, and telemetry export. Turning it off throttles all three while no request is in flight."
  type        = bool
  default     = true
}

variable "log_level" {
  description = "LEASESVC_LOG_LEVEL: debug, info, warn or error."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level must be debug, info, warn or error."
  }
}

# ---------------------------------------------------------------------------
# Who may call the service
# ---------------------------------------------------------------------------

variable "invoker_members" {
  description = "Principals granted roles/run.invoker on the service, e.g. [\"serviceAccount:agents@my-project.iam.gserviceaccount.com\", \"group:schedulers@example.com\"]. Callers send a Google ID token whose audience is the output service_url (docs/deploy.md); Cloud Run checks this role before the request reaches leasesvc, which then checks the caller against policy, so a caller needs both."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.invoker_members : can(regex("^(user|serviceAccount|group|domain|principal|principalSet):.+$", m))])
    error_message = "invoker_members must be IAM principals such as user:…, serviceAccount:…, group:…, domain:…, principal://… or principalSet://…; allUsers and allAuthenticatedUsers are refused here (see allow_unauthenticated)."
  }
}

variable "allow_unauthenticated" {
  description = "Grant roles/run.invoker to allUsers, so Cloud Run lets every request through to the container. leasesvc still refuses requests without a valid Google ID token (401) or a policy grant (403), but it then answers all of them itself: any Google account, not only invoker_members, reaches its authentication, and unauthenticated floods cost instances. Off by default; leave it off unless callers cannot get roles/run.invoker."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------------------
# What callers may do (leasesvc's own authentication and policy)
# ---------------------------------------------------------------------------

variable "policy" {
  description = "The leasesvc policy file, as YAML (or JSON) text: which principals (the email of the caller's Google ID token) may read, acquire or administer which lease name prefixes. Format in auth/doc.go; for example file(\"policy.yaml\") or a heredoc. It is stored as a Secret Manager secret version, mounted into the container and named by LEASESVC_POLICY; every change rolls out a new revision, which the service refuses to start with an invalid policy."
  type        = string
  nullable    = false

  validation {
    condition     = can(regex("(?m)(^|[{,])\\s*\"?grants\"?\\s*:", var.policy))
    error_message = "policy must be a leasesvc policy file: YAML or JSON whose top level is a grants list (auth/doc.go), such as grants: [{principals: [agents@my-project.iam.gserviceaccount.com], verbs: [acquire], prefixes: [team-a.]}]."
  }

  validation {
    condition     = length(var.policy) <= 65536
    error_message = "policy must be at most 64 KiB, the largest Secret Manager secret version."
  }
}

variable "auth_audiences" {
  description = "Audiences a caller's ID token may carry besides service_url (the deterministic https://<name>-<project number>.<region>.run.app, always accepted), e.g. [\"https://leases.example.com\"] behind a custom domain. LEASESVC_AUTH_AUDIENCES is service_url followed by these; leasesvc never takes the audience from the request. They are also the service's Cloud Run custom audiences, so Cloud Run's invoker check accepts them too."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for a in var.auth_audiences : can(regex("^[^,\\s]+$", a))])
    error_message = "auth_audiences must be non-empty strings without commas or whitespace, such as https://leases.example.com."
  }
}

variable "rate_limit" {
  description = "LEASESVC_RATE_LIMIT: requests per second each principal may make, per instance (each instance limits on its own, so the service-wide rate is up to max_instances times this). 0 turns the limit off. Refused requests get 429 with Retry-After."
  type        = number
  default     = 100
  nullable    = false

  validation {
    condition     = var.rate_limit >= 0
    error_message = "rate_limit must be 0 (no limit) or a positive number of requests per second."
  }
}

variable "rate_burst" {
  description = "LEASESVC_RATE_BURST: requests a principal may make at once before rate_limit applies (the token bucket's size), per instance. Keep it at about twice rate_limit."
  type        = number
  default     = 200
  nullable    = false

  validation {
    condition     = var.rate_burst >= 1 && floor(var.rate_burst) == var.rate_burst
    error_message = "rate_burst must be a whole number of at least 1."
  }
}

# ---------------------------------------------------------------------------
# Firestore backend
# ---------------------------------------------------------------------------

variable "firestore_database_id" {
  description = "ID of the Firestore database the module creates (backend = firestore); LEASESVC_FIRESTORE_DATABASE. A dedicated database, not (default), keeps leasesvc's data and its IAM condition apart from the project's other data."
  type        = string
  default     = "leasesvc"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database_id))
    error_message = "firestore_database_id must be 4–63 characters: a lowercase letter, then lowercase letters, digits or hyphens, ending in a letter or digit."
  }
}

variable "firestore_location" {
  description = "Firestore location: a region (europe-west1) or a multi-region (eur3, nam5). Null uses var.region."
  type        = string
  default     = null

  validation {
    condition     = var.firestore_location == null || can(regex("^[a-z0-9-]+$", var.firestore_location))
    error_message = "firestore_location must be a Firestore location ID such as europe-west1, eur3 or nam5."
  }
}

variable "firestore_collection" {
  description = "LEASESVC_FIRESTORE_COLLECTION: the collection that holds one document per lease."
  type        = string
  default     = "leases"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,100}$", var.firestore_collection)) && !can(regex("^__.*__$", var.firestore_collection))
    error_message = "firestore_collection must be 1–100 letters, digits, underscores or hyphens, and not of the reserved form __name__."
  }
}

variable "firestore_point_in_time_recovery" {
  description = "Enable Firestore point-in-time recovery (7 days of versions) on the database."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------
# Spanner backend
# ---------------------------------------------------------------------------

variable "spanner_instance_config" {
  description = "Spanner instance configuration, e.g. regional-europe-west1 or nam-eur-asia1. Null uses regional-<region>."
  type        = string
  default     = null

  validation {
    condition     = var.spanner_instance_config == null || can(regex("^[a-z0-9-]+$", var.spanner_instance_config))
    error_message = "spanner_instance_config must be an instance configuration ID such as regional-europe-west1."
  }
}

variable "spanner_processing_units" {
  description = "Compute capacity of the Spanner instance in processing units: 100–900 in steps of 100, or a multiple of 1000 (1000 = one node)."
  type        = number
  default     = 100

  validation {
    condition     = (var.spanner_processing_units >= 100 && var.spanner_processing_units < 1000 && var.spanner_processing_units % 100 == 0) || (var.spanner_processing_units >= 1000 && var.spanner_processing_units % 1000 == 0)
    error_message = "spanner_processing_units must be 100–900 in steps of 100, or a multiple of 1000."
  }
}

variable "spanner_database_name" {
  description = "ID of the Spanner database the module creates (backend = spanner); its full name goes to LEASESVC_SPANNER_DATABASE."
  type        = string
  default     = "leases"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_-]{0,28}[a-z0-9]$", var.spanner_database_name))
    error_message = "spanner_database_name must be 2–30 characters: a lowercase letter, then lowercase letters, digits, underscores or hyphens, ending in a letter or digit."
  }
}

# ---------------------------------------------------------------------------
# Events and alerts
# ---------------------------------------------------------------------------

variable "events_message_retention" {
  description = "How long the events topic keeps published messages, so a subscription created later can seek back to them (a duration in seconds such as \"86400s\"). Null keeps none beyond what subscriptions hold."
  type        = string
  default     = null

  validation {
    condition     = var.events_message_retention == null ? true : try(can(regex("^[0-9]+s$", var.events_message_retention)) && tonumber(trimsuffix(var.events_message_retention, "s")) >= 600 && tonumber(trimsuffix(var.events_message_retention, "s")) <= 2678400, false)
    error_message = "events_message_retention must be a number of seconds with an s suffix, from 600s to 2678400s (31 days)."
  }
}

variable "alerts_enabled" {
  description = "Create the alert policies of monitoring.tf (docs/operations.md)."
  type        = bool
  default     = true
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels the alerts notify, as projects/PROJECT/notificationChannels/ID. Empty: the alerts open incidents in the console but notify nobody."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels must be full channel names: projects/PROJECT/notificationChannels/ID."
  }
}

variable "unheld_alert_seconds" {
  description = "Alert when a lease that had a holder has had none for longer than this many seconds (operating advice: 60)."
  type        = number
  default     = 60

  validation {
    condition     = var.unheld_alert_seconds >= 10
    error_message = "unheld_alert_seconds must be at least 10."
  }
}

variable "flapping_transitions_per_hour" {
  description = "Alert when one lease passes to a new holding more than this many times within an hour (leadership flapping)."
  type        = number
  default     = 10

  validation {
    condition     = var.flapping_transitions_per_hour >= 1
    error_message = "flapping_transitions_per_hour must be at least 1."
  }
}

variable "publish_failures_alert_threshold" {
  description = "Alert when more than this many event publish attempts failed within 10 minutes. 0 alerts on the first failure."
  type        = number
  default     = 0

  validation {
    condition     = var.publish_failures_alert_threshold >= 0
    error_message = "publish_failures_alert_threshold must be 0 or more."
  }
}

variable "telemetry_absent_minutes" {
  description = "Alert when no instance of the service has exported metrics for this many minutes: telemetry is failing (exports refused, the Telemetry API unreachable, a permission lost) or no instance runs, and the other alerts cannot fire."
  type        = number
  default     = 10

  validation {
    condition     = var.telemetry_absent_minutes >= 5 && var.telemetry_absent_minutes <= 1440 && floor(var.telemetry_absent_minutes) == var.telemetry_absent_minutes
    error_message = "telemetry_absent_minutes must be a whole number from 5 to 1440."
  }
}

variable "server_errors_alert_threshold" {
  description = "Alert when Cloud Run answered more than this many requests to the service with a 5xx status within 5 minutes: instances that fail to start or crash, a backend that is down, requests that time out. 0 alerts on the first."
  type        = number
  default     = 5

  validation {
    condition     = var.server_errors_alert_threshold >= 0
    error_message = "server_errors_alert_threshold must be 0 or more."
  }
}

variable "immutable_image_tags" {
  description = "Make tags in the Artifact Registry repository immutable, so a tag always names the image it was first pushed as."
  type        = bool
  default     = true
}
