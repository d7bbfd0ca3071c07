package terraform_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// uploadList runs `gcloud meta list-files-for-upload dir`, which applies
// dir's .gcloudignore as `gcloud builds submit` does, and returns the files
// it would upload (slash-separated, relative to dir). gcloud runs with a
// configuration of its own, offline.
func uploadList(t *testing.T, gcloud, dir string) map[string]bool {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), gcloud, "meta", "list-files-for-upload", dir)
	cmd.Env = append(os.Environ(), "CLOUDSDK_CONFIG="+t.TempDir(), "CLOUDSDK_CORE_DISABLE_PROMPTS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gcloud meta list-files-for-upload %s: %v\n%s", dir, err, stderr.String())
	}
	files := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			files[filepath.ToSlash(l)] = true
		}
	}
	return files
}

// gcloudPath returns gcloud's path; without it the test skips, or fails
// when CI=true.
func gcloudPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("gcloud")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("gcloud is not on PATH, and CI=true requires the .gcloudignore check: install the Google Cloud CLI")
		}
		t.Skip("gcloud is not on PATH: skipping the .gcloudignore check (with CI=true this fails)")
	}
	return p
}

// TestGcloudignoreKeepsSecretsAndStateOut checks the repository's
// .gcloudignore with gcloud's own rules, in a tree that has, besides what
// the image build needs, what a deployer's clone may hold: Terraform state
// (which holds the policy and the page token key) inside and outside
// terraform/, provider caches, variable files, policy and tokens files, key
// files, env files and node_modules. None of those may be uploaded to Cloud
// Build; the build's inputs must be.
func TestGcloudignoreKeepsSecretsAndStateOut(t *testing.T) {
	gcloud := gcloudPath(t)
	rules, err := os.ReadFile(filepath.Join(repoRoot, ".gcloudignore"))
	if err != nil {
		t.Fatalf("the repository has no .gcloudignore: gcloud builds submit would upload what .gitignore does not list, Terraform state included: %v", err)
	}
	needed := []string{
		"go.mod", "go.sum", "Dockerfile", ".dockerignore",
		"cmd/leasesvc/main.go", "backend/spanner/schema.sql", "httpapi/openapi.json", "httpapi/ui/index.html",
	}
	secret := []string{
		"terraform/examples/cloudrun/terraform.tfstate",
		"terraform/examples/cloudrun/terraform.tfstate.backup",
		"terraform/examples/cloudrun/.terraform/providers/registry.terraform.io/hashicorp/google/provider",
		"deploy/terraform.tfstate",
		"deploy/terraform.tfstate.1700000000.backup",
		"deploy/.terraform/terraform.tfstate",
		"deploy/prod.tfvars",
		"deploy/plan.tfplan",
		"policy.yaml",
		"config/leasesvc-policy.yaml",
		"config/policy.json",
		"tokens.yaml",
		"config/tokens.json",
		"page-token.key",
		"config/page_token_key",
		"keys/server.pem",
		"credentials.json",
		"service-account-leasesvc.json",
		".env",
		"cmd/leasesvc/.env.local",
		"node_modules/left-pad/index.js",
		"sdk/typescript/node_modules/typescript/package.json",
		"tools/web/node_modules/x/index.js",
	}
	dir := t.TempDir()
	for _, f := range append(append([]string{".gcloudignore"}, needed...), secret...) {
		path := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		content := []byte("x\n")
		if f == ".gcloudignore" {
			content = rules
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	up := uploadList(t, gcloud, dir)
	for _, f := range secret {
		if up[f] {
			t.Errorf(".gcloudignore lets %s go to Cloud Build", f)
		}
	}
	for _, f := range needed {
		if !up[f] {
			t.Errorf(".gcloudignore leaves out %s, which the image build needs", f)
		}
	}
}

// TestGcloudignoreUploadsTheBuildInputs checks, on the repository itself,
// that the upload holds every file the image build reads: go.mod, go.sum,
// the Dockerfile and .dockerignore, every non-test Go file of the module's
// packages, and the files they embed.
func TestGcloudignoreUploadsTheBuildInputs(t *testing.T) {
	gcloud := gcloudPath(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	up := uploadList(t, gcloud, root)
	want := []string{"go.mod", "go.sum", "Dockerfile", ".dockerignore"}
	skip := map[string]bool{".git": true, "terraform": true, "emulator-tests": true, "sdk": true, "docs": true, "node_modules": true, "testdata": true}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		want = append(want, filepath.ToSlash(rel))
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if pats, ok := strings.CutPrefix(line, "//go:embed "); ok {
				for _, p := range strings.Fields(pats) {
					want = append(want, filepath.ToSlash(filepath.Join(filepath.Dir(rel), p)))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 20 {
		t.Fatalf("found %d build inputs: the scan is broken", len(want))
	}
	for _, f := range want {
		if !up[f] {
			t.Errorf(".gcloudignore leaves out %s, which the image build reads", f)
		}
	}
}
