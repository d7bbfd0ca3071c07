package typescript_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/npmtest"
)

// consumerESM imports the package by name, as a user's ES module does, and
// uses what it exports.
const consumerESM = `import assert from "node:assert/strict";
import { Client, Elector, Keeper, LeaseLostError, SafeDeadlineError, validName } from "@leasesvc/client";
assert.equal(typeof Client, "function");
assert.equal(typeof Elector, "function");
const client = new Client("http://127.0.0.1:1");
const elector = new Elector(new Keeper(client), "team-a.scheduler", { holder: "consumer", callbacks: { onStartedLeading: async () => {} } });
assert.ok(elector);
assert.ok(Elector.forClient(client, "team-a.scheduler", { callbacks: { onStartedLeading: async () => {} } }));
assert.ok(new LeaseLostError("x", { status: 409 }) instanceof Error);
assert.equal(typeof SafeDeadlineError, "function");
assert.equal(validName("team-a.scheduler"), true);
console.log("imported");
`

// consumerTS type-checks against the package's declarations, as a user's
// TypeScript project does.
const consumerTS = `import { Client, Elector, Keeper, type Lease } from "@leasesvc/client";
const client: Client = new Client("http://127.0.0.1:1");
const keeper: Keeper = new Keeper(client, { ttlMs: 30_000 });
const elector: Elector = new Elector(keeper, "team-a.scheduler", {
  holder: "consumer",
  callbacks: { onStartedLeading: async (signal: AbortSignal, token: number) => { void signal; void token; } },
});
// The deprecated form (LegacyElectorOptions) still type-checks for one release.
const legacy: Elector = new Elector(client, "team-a.scheduler", { holder: "consumer", ttlMs: 30_000, onStartedLeading: async () => {} });
export async function look(): Promise<Lease> { return client.get("team-a.scheduler"); }
void elector;
void legacy;
`

const consumerTSConfig = `{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "lib": ["ES2022"],
    "types": ["node"], "typeRoots": ["TYPEROOTS"], "strict": true, "noEmit": true
  },
  "files": ["check.ts"]
}
`

// TestPackInstallsInAFreshProject: npm pack of the package (its prepack
// script builds dist) gives a tarball with the built code, declarations
// and sources and nothing else; installed from that file into a new
// project with npm install --offline, it is imported by name from an ES
// module (Client, Elector, the errors) and type-checks a TypeScript
// consumer with moduleResolution NodeNext.
func TestPackInstallsInAFreshProject(t *testing.T) {
	npmtest.NeedNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_audit=false", "npm_config_fund=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}

	pkg := copyPackage(t)
	run(pkg, "npm", "ci", "--prefer-offline")
	packed := t.TempDir()
	out := run(pkg, "npm", "pack", "--json", "--pack-destination", packed)
	// npm prints the prepack build's output before the JSON.
	var report []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "\n[")+1:]), &report); err != nil || len(report) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var files []string
	for _, f := range report[0].Files {
		files = append(files, f.Path)
	}
	for _, want := range []string{"package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/elector.js", "src/index.ts"} {
		if !slices.Contains(files, want) {
			t.Errorf("the tarball lacks %s: %v", want, files)
		}
	}
	for _, f := range files {
		if top, _, _ := strings.Cut(f, "/"); !slices.Contains([]string{"package.json", "README.md", "LICENSE", "dist", "src"}, top) {
			t.Errorf("the tarball ships %s", f)
		}
	}

	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name":"consumer","private":true,"type":"module"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(app, "npm", "install", "--offline", filepath.Join(packed, report[0].Filename))
	if err := os.WriteFile(filepath.Join(app, "check.mjs"), []byte(consumerESM), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := run(app, "node", "check.mjs"); strings.TrimSpace(got) != "imported" {
		t.Fatalf("node check.mjs: %s", got)
	}
	// The consumer type-checks with the package's TypeScript and Node
	// types (a Node project has @types/node).
	tsconfig := strings.Replace(consumerTSConfig, "TYPEROOTS", filepath.Join(pkg, "node_modules", "@types"), 1)
	if err := os.WriteFile(filepath.Join(app, "tsconfig.json"), []byte(tsconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "check.ts"), []byte(consumerTS), 0o644); err != nil {
		t.Fatal(err)
	}
	run(app, "node", filepath.Join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json")
}

// TestREADMESaysHowToInstallFirst: the README's first section is Install,
// and it packs and installs the tarball as TestPackInstallsInAFreshProject
// does.
func TestREADMESaysHowToInstallFirst(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## ")
	if !ok || !strings.HasPrefix(rest, "Install\n") {
		t.Fatalf("README.md's first section is not Install: %.40q", rest)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	var pkg struct{ Name, Version string }
	m, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m, &pkg); err != nil {
		t.Fatal(err)
	}
	tarball := strings.ReplaceAll(strings.TrimPrefix(pkg.Name, "@"), "/", "-") + "-" + pkg.Version + ".tgz"
	for _, want := range []string{"npm pack", "npm install /path/to/" + tarball, `from "` + pkg.Name + `"`} {
		if !strings.Contains(section, want) {
			t.Errorf("README.md's Install section lacks %q", want)
		}
	}
}
