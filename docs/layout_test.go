package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goDirs returns the directories under root, one level down (and under
// each of within, one more), that hold Go files, as slash paths relative to
// root.
func goDirs(t *testing.T, root string, within ...string) []string {
	t.Helper()
	var out []string
	add := func(dir string) {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			rel := filepath.ToSlash(filepath.Join(dir, e.Name()))
			if files, _ := filepath.Glob(filepath.Join(root, rel, "*.go")); len(files) > 0 {
				out = append(out, rel)
			}
		}
	}
	add(".")
	for _, d := range within {
		add(d)
	}
	return out
}

// TestREADMELayoutListsEveryPackage: README's layout table names every
// top-level directory that is a Go package, and every package of cmd/ and
// internal/, so that a new one gets its line.
func TestREADMELayoutListsEveryPackage(t *testing.T) {
	section := readmeSection(t, "Layout")
	dirs := goDirs(t, "..", "cmd", "internal")
	if len(dirs) < 10 {
		t.Fatalf("found only %v: the walk is wrong", dirs)
	}
	for _, d := range dirs {
		if !strings.Contains(section, "`"+d+"`") && !strings.Contains(section, "`"+d+"/`") {
			t.Errorf("README.md's layout table does not name `%s/`: add a row saying what it holds", d)
		}
	}
}
