package terraform_test

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fakeTool is the stand-in for every command the walkthrough calls that
// would reach a cloud, a registry or the network: it appends its working
// directory and arguments to $FAKE_LOG, one call a line (fields separated
// by tabs), and prints what the walkthrough reads from it.
const fakeTool = `#!/bin/sh
tool="$(basename "$0")"
{ printf '%s\t%s' "$PWD" "$tool"; for a in "$@"; do printf '\t%s' "$a"; done; printf '\n'; } >> "$FAKE_LOG"
case "$tool $*" in
"git rev-parse --show-toplevel") echo "$FAKE_ROOT" ;;
"git describe "*) echo v0.0.0-test ;;
"go env GOPATH") echo "$FAKE_GOPATH" ;;
"gcloud config get-value account") echo deployer@example.com ;;
"gcloud beta monitoring channels create "*) echo projects/my-project/notificationChannels/123 ;;
"gcloud artifacts docker images describe "*) echo sha256:0123abcd ;;
"gcloud auth print-identity-token "*|"gcloud auth print-access-token"*) echo fake-token ;;
"terraform output -raw service_url")
	# Only the example's directory has the state that knows the URL;
	# elsewhere terraform prints nothing (and a warning) and exits 0.
	if [ "$PWD" = "$FAKE_STATE_DIR" ]; then echo "https://leasesvc-123456789012.europe-west1.run.app"; fi ;;
esac
exit 0
`

// call is one command the walkthrough ran: where, and its arguments.
type call struct {
	dir  string
	args []string // args[0] is the tool
}

func (c call) String() string { return "(in " + c.dir + ") " + strings.Join(c.args, " ") }

// has reports whether the call's arguments include every one of want.
func (c call) has(want ...string) bool {
	for _, w := range want {
		if !slices.Contains(c.args, w) {
			return false
		}
	}
	return true
}

// TestDeployWalkthroughRuns runs every sh block of docs/deploy.md, in order,
// in one bash, as the page tells the reader to, with stand-ins for gcloud,
// terraform, docker, curl, git, go and leasectl that record where each call
// ran. It checks that each command runs where it must: Terraform's
// state-bearing commands in the example's directory (so `terraform output`
// finds the state, and the tear-down does not plan another deployment),
// builds and uploads at the repository's root; that the service URL reaches
// the calls; and that the Cloud Build step runs as its own service account
// with a regional bucket and a config that logs to Cloud Logging only.
func TestDeployWalkthroughRuns(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("bash is not on PATH, and CI=true requires the walkthrough run")
		}
		t.Skip("bash is not on PATH: skipping the walkthrough run (with CI=true this fails)")
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("set -eu\n")
	for _, blk := range shBlock.FindAllStringSubmatch(string(raw), -1) {
		script.WriteString(blk[1] + "\n")
	}

	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(root, "terraform", "examples", "cloudrun")
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"gcloud", "terraform", "docker", "curl", "git", "go", "leasectl"} {
		if err := os.WriteFile(filepath.Join(bin, tool), []byte(fakeTool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(tmp, "calls.log")
	cmd := exec.CommandContext(t.Context(), bash, "-c", script.String())
	cmd.Dir = t.TempDir() // wherever the reader's shell happens to be
	cmd.Env = []string{
		"PATH=" + bin + ":/usr/bin:/bin",
		"HOME=" + tmp,
		"TMPDIR=" + tmp,
		"FAKE_LOG=" + logPath,
		"FAKE_ROOT=" + root,
		"FAKE_GOPATH=" + filepath.Join(tmp, "go"),
		"FAKE_STATE_DIR=" + example,
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the walkthrough's blocks fail in one shell (set -eu): %v\n%s", err, out)
	}

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var calls []call
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		calls = append(calls, call{dir: fields[0], args: fields[1:]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	find := func(tool string, want ...string) []call {
		var out []call
		for _, c := range calls {
			if c.args[0] == tool && c.has(want...) {
				out = append(out, c)
			}
		}
		return out
	}

	// Terraform: every command but the provider-less validation runs in the
	// example's directory, where its state is.
	var applies, validated int
	validateDirs := map[string]bool{}
	for _, c := range find("terraform") {
		offline := c.has("validate") || c.has("init", "-backend=false")
		if offline {
			validateDirs[c.dir] = true
			validated++
			continue
		}
		if c.dir != example {
			t.Errorf("docs/deploy.md runs terraform %s in %s, not in the example's directory %s: it would see no state", strings.Join(c.args[1:], " "), c.dir, example)
		}
		if c.has("apply") || c.has("destroy") {
			applies++
			if !slices.Contains(c.args, "backend="+"firestore") {
				t.Errorf("docs/deploy.md: %s does not pass -var backend=\"$BACKEND\"", c)
			}
		}
	}
	if applies < 4 || validated == 0 {
		t.Errorf("the walkthrough ran %d terraform apply/destroy and %d validations; want the bootstrap apply, the apply, and the tear-down's apply and destroy, and a validation: the run is broken\n%v", applies, validated, calls)
	}
	for _, dir := range []string{example, filepath.Join(root, "terraform")} {
		if !validateDirs[dir] {
			t.Errorf("the validation block does not validate %s (it validated %v)", dir, sortedKeys(validateDirs))
		}
	}
	if last := find("terraform"); len(last) == 0 || !last[len(last)-1].has("destroy") {
		t.Errorf("the walkthrough's last terraform command is not the tear-down's destroy")
	}

	// Builds and uploads start from the repository's root.
	for _, c := range append(append(find("docker", "build"), find("gcloud", "builds", "submit")...), find("go", "install")...) {
		if c.dir != root {
			t.Errorf("docs/deploy.md runs %s outside the repository's root %s", c, root)
		}
	}

	// The service URL, from the example's state, reaches the calls.
	const url = "https://leasesvc-123456789012.europe-west1.run.app"
	curls := find("curl", "-H")
	if len(curls) == 0 {
		t.Fatal("the walkthrough calls the service with no curl")
	}
	if !slices.ContainsFunc(curls[0].args, func(a string) bool { return strings.HasPrefix(a, url+"/v1/leases/") }) {
		t.Errorf("the first curl call does not go to the service URL %s: %s", url, curls[0])
	}
	if tok := find("gcloud", "auth", "print-identity-token"); len(tok) == 0 || !tok[0].has("--audiences="+url) {
		t.Errorf("the ID token is not minted for the service URL %s: %v", url, tok)
	}

	// Cloud Build: its own service account, regional buckets.
	const builder = "leasesvc-build@my-project.iam.gserviceaccount.com"
	submits := find("gcloud", "builds", "submit")
	if len(submits) != 1 {
		t.Fatalf("want one gcloud builds submit, got %v", submits)
	}
	for _, want := range []string{"--service-account=projects/my-project/serviceAccounts/" + builder, "--default-buckets-behavior=regional-user-owned-bucket", "--region=europe-west1"} {
		if !submits[0].has(want) {
			t.Errorf("gcloud builds submit lacks %s: %s", want, submits[0])
		}
	}
	if len(find("gcloud", "iam", "service-accounts", "create", "leasesvc-build")) != 1 {
		t.Error("the walkthrough does not create the build's service account leasesvc-build")
	}
	roles := map[string]string{}
	for _, c := range calls {
		if c.args[0] == "gcloud" && c.has("--member=serviceAccount:"+builder) {
			for _, a := range c.args {
				if r, ok := strings.CutPrefix(a, "--role="); ok {
					roles[r] = strings.Join(c.args[1:3], " ")
				}
			}
		}
	}
	want := map[string]string{
		"roles/artifactregistry.writer": "artifacts repositories",
		"roles/logging.logWriter":       "projects add-iam-policy-binding",
		"roles/storage.objectViewer":    "storage buckets",
	}
	if !maps.Equal(roles, want) {
		t.Errorf("the build's service account gets %v (role → where), want %v", roles, want)
	}
	config := submits[0].args[slices.Index(submits[0].args, "--config")+1]
	raw, err = os.ReadFile(config)
	if err != nil {
		t.Fatalf("the Cloud Build config %s the walkthrough wrote: %v", config, err)
	}
	var cb struct {
		Steps []struct {
			Name string   `yaml:"name"`
			Env  []string `yaml:"env"`
			Args []string `yaml:"args"`
		} `yaml:"steps"`
		Images  []string          `yaml:"images"`
		Options map[string]string `yaml:"options"`
	}
	if err := yaml.Unmarshal(raw, &cb); err != nil {
		t.Fatalf("the Cloud Build config is not YAML: %v\n%s", err, raw)
	}
	for i, st := range cb.Steps {
		if !slices.Contains(st.Env, "DOCKER_BUILDKIT=1") {
			t.Errorf("Cloud Build step %d does not set DOCKER_BUILDKIT=1: the Dockerfile's platform arguments ($BUILDPLATFORM, $TARGETARCH) need BuildKit", i)
		}
	}
	if len(cb.Steps) != 2 || len(cb.Images) != 2 || cb.Options["logging"] != "CLOUD_LOGGING_ONLY" {
		t.Errorf("the Cloud Build config has %d steps, images %v, options %v; want the two images and logging CLOUD_LOGGING_ONLY (the build's service account writes logs to Cloud Logging only)", len(cb.Steps), cb.Images, cb.Options)
	}
}
