# Alert policies from the operating advice (docs/operations.md says what each
# one means and what to do).
#
# leasesvc exports its metrics over OTLP to the Telemetry API
# (telemetry.googleapis.com, LEASESVC_TELEMETRY=otlp). Cloud Monitoring stores
# OTLP metrics the way Managed Service for Prometheus does (monitored resource
# prometheus_target) and keeps the OpenTelemetry name, dots included: it is
# queried in PromQL by its UTF-8 quoted name, {"leasesvc.lease.transitions"}.
#   https://cloud.google.com/stackdriver/docs/reference/telemetry/v1.metrics
#   https://cloud.google.com/monitoring/promql ("UTF-8 metric names must be
#   quoted and moved inside the braces")
# Cloud Monitoring's PromQL matches metric names exactly only, so no regex on
# __name__ ("Only exact matching on metric names is supported"):
#   https://cloud.google.com/stackdriver/docs/managed-prometheus/promql-differences
#
# Each selector also filters on job, the prometheus_target label that carries
# the OpenTelemetry service.name. On Cloud Run leasesvc sets service.name to
# K_SERVICE, the Cloud Run service name, which is var.name here (telemetry/
# telemetry.go). var.name also names the service account and the events topic,
# so two deployments of this module in one project must have different names,
# and each one's alerts see its own series only.
#
# Every condition sets disable_metric_validation: the policies are created
# before the service has written any metric (publish failures only appear
# after a failure), and without it the first apply fails with "Cannot find
# metric(s)". Provider docs (hashicorp/google ≥ 5.x, 7.x included):
#   https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/monitoring_alert_policy#disable_metric_validation
#
# The instrument names below are a contract with the Go code: module_test.go
# fails if one of them is not an instrument name in telemetry/metrics.go.

locals {
  # OpenTelemetry instrument names the alerts depend on.
  alert_metrics = {
    transitions      = "leasesvc.lease.transitions"       # counter, attribute lease
    unheld_seconds   = "leasesvc.lease.unheld_seconds"    # gauge, attribute lease
    publish_failures = "leasesvc.events.publish.failures" # counter, attribute type
    waiters          = "leasesvc.lease.waiters"           # gauge every instance reports, for absence
  }

  # Cloud Run's own request count, in Cloud Monitoring's PromQL spelling of a
  # system metric (run.googleapis.com/request_count, a delta counter): the
  # first slash becomes a colon, dots underscores, and the monitored
  # resource's labels (service_name) are labels
  # (https://cloud.google.com/monitoring/promql#metric-names).
  run_requests_selector = "run_googleapis_com:request_count{monitored_resource=\"cloud_run_revision\", service_name=\"${var.name}\", response_code_class=\"5xx\"}"

  # The series of this deployment: job is service.name, which is K_SERVICE.
  alert_job = var.name

  alert_selectors = {
    for key, metric in local.alert_metrics :
    key => "{\"${metric}\", job=\"${local.alert_job}\"}"
  }

  alert_documentation_url = "docs/operations.md in the leasesvc repository"
}

resource "google_monitoring_alert_policy" "lease_unheld" {
  count = var.alerts_enabled ? 1 : 0

  project               = var.project_id
  display_name          = "leasesvc ${var.name}: lease without a holder for more than ${var.unheld_alert_seconds}s"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "a lease has had no holder for more than ${var.unheld_alert_seconds}s"
    condition_prometheus_query_language {
      query               = "max by (job, lease) (${local.alert_selectors.unheld_seconds}) > ${var.unheld_alert_seconds}"
      duration            = "0s"
      evaluation_interval = "30s"

      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "leasesvc ${var.name}: a lease has no holder"
    content   = <<-EOT
      A lease that had a holder has had none for more than ${var.unheld_alert_seconds} s: nobody is leading it.
      The agents that compete for it are down, cannot reach leasesvc (401/403/5xx), or keep failing to acquire it.

      Check the agents' logs and the service's access log for the lease name, then the
      "unheld lease" runbook in ${local.alert_documentation_url}.
    EOT
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "leadership_flapping" {
  count = var.alerts_enabled ? 1 : 0

  project               = var.project_id
  display_name          = "leasesvc ${var.name}: leadership flapping (more than ${var.flapping_transitions_per_hour} transitions per hour)"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "a lease passed to a new holding more than ${var.flapping_transitions_per_hour} times in an hour"
    condition_prometheus_query_language {
      # Each instance counts the transitions it decided; the sum over instances
      # is the lease's total.
      query               = "sum by (job, lease) (increase(${local.alert_selectors.transitions}[1h])) > ${var.flapping_transitions_per_hour}"
      duration            = "0s"
      evaluation_interval = "60s"

      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "3600s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "leasesvc ${var.name}: leadership is flapping"
    content   = <<-EOT
      Leadership of one lease changed hands more than ${var.flapping_transitions_per_hour} times within an hour.
      Leaders are losing their leases (renewals that fail or arrive late, TTLs too short for the agents' pauses,
      crash loops) and every change restarts the work they coordinate.

      See the "flapping" runbook in ${local.alert_documentation_url}.
    EOT
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "event_publish_failures" {
  count = var.alerts_enabled ? 1 : 0

  project               = var.project_id
  display_name          = "leasesvc ${var.name}: leadership events failing to publish"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "more than ${var.publish_failures_alert_threshold} event publish failures in 10 minutes"
    condition_prometheus_query_language {
      query               = "sum by (job) (increase(${local.alert_selectors.publish_failures}[10m])) > ${var.publish_failures_alert_threshold}"
      duration            = "0s"
      evaluation_interval = "60s"

      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "leasesvc ${var.name}: event publish failures"
    content   = <<-EOT
      leasesvc could not publish leadership events to ${google_pubsub_topic.events.id}.
      Lease operations still succeed (a publish failure never fails them), but consumers of the topic
      and waiting acquires on other instances miss or learn late of changes of holding.

      See the "publish failures" runbook in ${local.alert_documentation_url}.
    EOT
  }

  depends_on = [google_project_service.apis]
}

# Telemetry that stops arriving silences every alert above. Every instance
# reports leasesvc.lease.waiters at each export (0 when nothing waits), and
# min_instances is at least 1, so its absence means no instance's export
# reaches Cloud Monitoring.
resource "google_monitoring_alert_policy" "telemetry_absent" {
  count = var.alerts_enabled ? 1 : 0

  project               = var.project_id
  display_name          = "leasesvc ${var.name}: no metrics for ${var.telemetry_absent_minutes} minutes"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "no instance exported metrics for ${var.telemetry_absent_minutes} minutes"
    condition_prometheus_query_language {
      query               = "absent(${local.alert_selectors.waiters})"
      duration            = "${var.telemetry_absent_minutes * 60}s"
      evaluation_interval = "60s"

      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "leasesvc ${var.name}: metrics stopped arriving"
    content   = <<-EOT
      No instance of ${var.name} has exported metrics for ${var.telemetry_absent_minutes} minutes, so the other
      leasesvc alerts cannot fire. Either no instance runs, or their exports fail (look for
      "failed to upload metrics" or OTLP errors in the service's logs: a refused request, a lost
      roles/monitoring.metricWriter, telemetry.googleapis.com unreachable).

      See the "no metrics" runbook in ${local.alert_documentation_url}.
    EOT
  }

  depends_on = [google_project_service.apis]
}

# 5xx answers, from Cloud Run's own metric: it counts the requests leasesvc
# answered with 5xx and those Cloud Run answered itself because no instance
# could take them (instances that fail their startup probe, crash or time
# out), which leasesvc's own metrics cannot see.
resource "google_monitoring_alert_policy" "server_errors" {
  count = var.alerts_enabled ? 1 : 0

  project               = var.project_id
  display_name          = "leasesvc ${var.name}: 5xx responses or failed starts"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.labels

  conditions {
    display_name = "more than ${var.server_errors_alert_threshold} requests answered 5xx in 5 minutes"
    condition_prometheus_query_language {
      query               = "sum by (service_name) (increase(${local.run_requests_selector}[5m])) > ${var.server_errors_alert_threshold}"
      duration            = "0s"
      evaluation_interval = "60s"

      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "leasesvc ${var.name}: 5xx responses"
    content   = <<-EOT
      Cloud Run answered more than ${var.server_errors_alert_threshold} requests to ${var.name} with a 5xx status within 5 minutes:
      instances fail to start (startup probe on /readyz failing: the backend refuses them), crash, or time out,
      or leasesvc itself answered 503 because its backend is unavailable.

      See the "5xx responses" runbook in ${local.alert_documentation_url}.
    EOT
  }

  depends_on = [google_project_service.apis]
}
