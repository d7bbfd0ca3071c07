package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasesvc/leasesvc/backend"
)

// TestHelpListsEverySetting: -h answers (run returns errHelp, so main exits
// 0) with every declared setting, its flag and default, and every backend.
func TestHelpListsEverySetting(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{arg}, func(string) string { return "" }, &stdout, &stderr)
		if err != errHelp {
			t.Fatalf("run(%s) = %v, want errHelp (exit 0)", arg, err)
		}
		out := stdout.String()
		for _, r := range settingRows() {
			if !strings.Contains(out, r.env) || !strings.Contains(out, r.flag) {
				t.Errorf("%s output lacks %s %s:\n%s", arg, r.env, r.flag, out)
			}
		}
		for _, o := range backend.Registered() {
			if !strings.Contains(out, "  "+o.Name+" ") {
				t.Errorf("%s output lacks backend %s", arg, o.Name)
			}
		}
	}
}

// TestREADMESettingsTable: README's settings table is the one the
// declarations make, row for row.
func TestREADMESettingsTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| variable | flag | default | meaning |\n"
	i := bytes.Index(readme, []byte(header))
	if i < 0 {
		t.Fatal("README.md has no settings table")
	}
	var table []string
	for _, line := range strings.Split(string(readme[i:]), "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		table = append(table, line)
	}
	want := strings.Split(strings.TrimSuffix(settingsMarkdown(), "\n"), "\n")
	if diff := cmp.Diff(want, table); diff != "" {
		t.Fatalf("README.md's settings table differs from the declarations (-declared +README):\n%s", diff)
	}
}

// TestEverySettingReadIsDeclared: every LEASESVC_* variable that the service
// or a backend reads is declared, so -h and README list it.
func TestEverySettingReadIsDeclared(t *testing.T) {
	declared := map[string]bool{}
	for _, r := range settingRows() {
		declared[r.env] = true
	}
	read := regexp.MustCompile(`"(LEASESVC_[A-Z0-9_]+|PORT)"`)
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("../../backend/*/*.go")
	for _, f := range append(files, more...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range read.FindAllStringSubmatch(string(src), -1) {
			if !declared[m[1]] {
				t.Errorf("%s reads %s, which no setting declares", f, m[1])
			}
		}
	}
}
