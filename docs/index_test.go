// Package docs holds the documentation pages; its test keeps their index
// whole.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pages returns the names of the Markdown pages in docs/ other than the
// index itself.
func pages(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if n != "README.md" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		t.Fatal("no pages in docs/")
	}
	return out
}

// links returns the Markdown link targets in text, without #fragments.
func links(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`).FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeSection returns the section of the repository README under the
// heading "## heading", up to the next such heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	_, section, ok := strings.Cut(read(t, filepath.Join("..", "README.md")), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", "## "+heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// TestIndexListsEveryPage: docs/README.md links every page in docs/, and
// every page it links exists.
func TestIndexListsEveryPage(t *testing.T) {
	linked := links(read(t, "README.md"))
	for _, p := range pages(t) {
		if !linked[p] {
			t.Errorf("docs/README.md does not list %s: add a row saying which question it answers", p)
		}
	}
	for l := range linked {
		if strings.Contains(l, "://") {
			continue
		}
		if _, err := os.Stat(l); err != nil {
			t.Errorf("docs/README.md links %s, which does not exist", l)
		}
	}
}

// TestREADMEDocumentationLine: the repository README's "Documentation"
// section links the index and every page in docs/.
func TestREADMEDocumentationLine(t *testing.T) {
	linked := links(readmeSection(t, "Documentation"))
	for _, p := range append(pages(t), "README.md") {
		if !linked["docs/"+p] {
			t.Errorf("README.md's Documentation line does not link docs/%s", p)
		}
	}
}
