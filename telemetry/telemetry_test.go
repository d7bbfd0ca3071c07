package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// TestBaseAttributesNameTheCloudRunService: on Cloud Run, service.name (the
// job label of the series in Cloud Monitoring, which the Terraform module's
// alerts filter on) is the Cloud Run service's name, so two deployments in
// one project do not share series; elsewhere it is the configured name. The
// project goes into gcp.project_id.
func TestBaseAttributesNameTheCloudRunService(t *testing.T) {
	for _, c := range []struct {
		kService, project string
		wantName          string
	}{
		{"", "", "leasesvc"},
		{"leases-blue", "my-project", "leases-blue"},
		{"leasesvc", "my-project", "leasesvc"},
	} {
		cfg := Config{ServiceName: "leasesvc", ServiceVersion: "v1", InstanceID: "i-1", Project: c.project,
			Getenv: func(k string) string {
				if k == "K_SERVICE" {
					return c.kService
				}
				return ""
			}}
		got := map[attribute.Key]string{}
		for _, kv := range baseAttributes(cfg) {
			got[kv.Key] = kv.Value.String()
		}
		if got["service.name"] != c.wantName || got["service.version"] != "v1" || got["service.instance.id"] != "i-1" {
			t.Errorf("K_SERVICE=%q: attributes %v, want service.name %q", c.kService, got, c.wantName)
		}
		if p, ok := got[gcpProjectID]; ok != (c.project != "") || p != c.project {
			t.Errorf("project %q: gcp.project_id = %q (set %v)", c.project, p, ok)
		}
	}
}
