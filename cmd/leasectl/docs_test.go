package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docPages are the pages whose leasectl command lines and exit statuses
// TestDocsNameOnlyWhatLeasectlHas checks, relative to this directory.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	return append([]string{"../../README.md", "../../sdk/python/README.md", "../../sdk/typescript/README.md"}, pages...)
}

// cliFlags returns, by command, the flags `leasectl COMMAND --help` lists
// (its own and the global ones), and --help.
func cliFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	flagLine := regexp.MustCompile(`^\s+(--[a-z][a-z0-9-]*)\b`)
	out := map[string]map[string]bool{}
	for _, c := range commands() {
		help, _, code := runCtl(t, c.name, "--help")
		if code != 0 {
			t.Fatalf("leasectl %s --help: exit %d", c.name, code)
		}
		flags := map[string]bool{"--help": true}
		for _, l := range strings.Split(help, "\n") {
			if m := flagLine.FindStringSubmatch(l); m != nil {
				flags[m[1]] = true
			}
		}
		out[c.name] = flags
	}
	return out
}

// cliStatuses returns the exit statuses `leasectl --help` lists, each with
// its entry of the table ("4 lease lost (renew, release, …)"; run's own
// statuses as "run: 127 when CMD cannot be started"), and the text of the
// whole table.
func cliStatuses(t *testing.T) (map[int]string, string) {
	t.Helper()
	top, _, _ := runCtl(t, "--help")
	_, table, ok := strings.Cut(top, "Exit status: ")
	if !ok {
		t.Fatalf("leasectl --help lists no exit statuses:\n%s", top)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	table = strings.Join(strings.Fields(table), " ")
	out := map[int]string{}
	for _, part := range strings.Split(table, "; ") {
		part, _, _ = strings.Cut(part, ". ")
		if m := regexp.MustCompile(`^(\d+) `).FindStringSubmatch(part); m != nil {
			n, _ := strconv.Atoi(m[1])
			out[n] = part
		}
	}
	_, runs, _ := strings.Cut(table, ". run exits ")
	for _, m := range regexp.MustCompile(`\b(\d+) when [^,;]*`).FindAllStringSubmatch(runs, -1) {
		n, _ := strconv.Atoi(m[1])
		out[n] = "run: " + m[0]
	}
	return out, table
}

// statusCommands returns the commands an entry of the exit status table
// names in its parentheses ("4 lease lost (renew, release, …)": renew,
// release, …), and run for run's own; nil for a status of every command.
func statusCommands(entry string, names map[string]bool) map[string]bool {
	if strings.HasPrefix(entry, "run: ") {
		return map[string]bool{"run": true}
	}
	_, list, ok := strings.Cut(entry, "(")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, ")")
	out := map[string]bool{}
	for _, item := range strings.Split(list, ", ") {
		if w := strings.Fields(item); len(w) > 0 && names[w[0]] {
			out[w[0]] = true
		}
	}
	return out
}

// sentenceCommands returns the leasectl commands a sentence names: `X`,
// `X --flag …` or `leasectl X …` in code, or leasectl X in prose.
func sentenceCommands(sentence string, names map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`(?:leasectl )?([a-z]+)(?: [^`]*)?`|\\bleasectl ([a-z]+)").FindAllStringSubmatch(sentence, -1) {
		for _, w := range m[1:] {
			if names[w] {
				out[w] = true
			}
		}
	}
	return out
}

// TestExitStatusTableListsEveryStatus: every exit status errors.go
// defines, and run's own (127, 130), is in `leasectl --help`'s table.
func TestExitStatusTableListsEveryStatus(t *testing.T) {
	statuses, table := cliStatuses(t)
	for _, n := range []int{0, exitFailure, exitUsage, exitHeld, exitLost, exitNotFound, exitUnavailable, exitDenied, 127, 130} {
		if _, ok := statuses[n]; !ok {
			t.Errorf("leasectl --help's exit status table lacks %d: %s", n, table)
		}
	}
}

// mention is one `leasectl …` line that a page shows.
type mention struct {
	page, cmd string
	flags     []string
	line      string
}

// shellWords splits a line as a shell roughly would: quotes kept
// together, and stops at the end of the command (|, ;, &&, #, a closing
// parenthesis or backtick, a redirection) unless inside brackets, where
// `[--token T | --token-file F]` lists alternatives.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	depth := 0
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote = r
			cur.WriteRune(r)
		case r == '[':
			depth++
			flush()
		case r == ']':
			depth = max(0, depth-1)
			flush()
		case r == ' ' || r == '\t':
			flush()
		case depth == 0 && (r == '|' || r == ';' || r == '#' || r == ')' || r == '`' || r == '>' || r == '<' ||
			(r == '&' && strings.HasPrefix(s[i:], "&&"))):
			flush()
			return words
		case r == '|':
			flush()
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return words
}

// globalTakesValue are the global flags that take a value, as they may
// come before the command's name.
var globalTakesValue = map[string]bool{"--url": true, "--token": true, "--token-file": true}

// mentions returns the leasectl command lines of a Markdown page: every
// line of a code block, and every inline code span, that says `leasectl
// COMMAND …`, with the flags given to COMMAND (up to a `--`, after which
// run's CMD has its own).
func mentions(page, text string, commandNames map[string]bool) []mention {
	var out []mention
	var spans []string
	inBlock := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			spans = append(spans, line)
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(line, -1) {
			spans = append(spans, m[1])
		}
	}
	at := regexp.MustCompile(`(^|[\s(=$"'])leasectl\s`)
	for _, span := range spans {
		for _, loc := range at.FindAllStringIndex(span, -1) {
			words := shellWords(span[loc[1]:])
			i := 0
			for i < len(words) && strings.HasPrefix(words[i], "--") { // global flags first
				name, _, hasValue := strings.Cut(words[i], "=")
				i++
				if globalTakesValue[name] && !hasValue {
					i++
				}
			}
			if i >= len(words) || !commandNames[words[i]] {
				continue // `leasectl COMMAND --help`, `leasectl [global flags] …`: no command named
			}
			m := mention{page: page, cmd: words[i], line: strings.TrimSpace(span)}
			for _, w := range words[i+1:] {
				if w == "--" {
					break
				}
				if f := regexp.MustCompile(`^(--[a-z][a-z0-9-]*)(=.*)?$`).FindStringSubmatch(w); f != nil {
					m.flags = append(m.flags, f[1])
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// statusMention is an exit status a page names for leasectl.
type statusMention struct {
	page, sentence string
	status         int
}

// statusMentions returns the exit statuses named in the paragraphs of text
// that are about leasectl (they say "leasectl"): "exits N", "exit N",
// "exit status N", "fails with status N", "with status N", "status (N",
// and every "; N …" entry of an "Exit status …" list.
func statusMentions(page, text string) []statusMention {
	var out []statusMention
	said := regexp.MustCompile(`(?i)\b(?:exits?|exit status|exit code|with status|status \()\s*(\d+)\b(?:[^.\d]|\.\s|\.$|$)`)
	list := regexp.MustCompile(`(?:[:;]\s+|\bstatus\s+)(\d+)\s+[a-z]`)
	for _, para := range strings.Split(text, "\n\n") {
		if !strings.Contains(para, "leasectl") {
			continue
		}
		flat := strings.Join(strings.Fields(para), " ")
		for _, sentence := range regexp.MustCompile(`[.!?](?:\s|$)`).Split(flat, -1) {
			for _, m := range said.FindAllStringSubmatch(sentence, -1) {
				n, _ := strconv.Atoi(m[1])
				out = append(out, statusMention{page, sentence, n})
			}
			if strings.Contains(strings.ToLower(sentence), "exit status") {
				for _, m := range list.FindAllStringSubmatch(sentence, -1) {
					n, _ := strconv.Atoi(m[1])
					out = append(out, statusMention{page, sentence, n})
				}
			}
		}
	}
	return out
}

// TestDocsNameOnlyWhatLeasectlHas: every `leasectl COMMAND --flag` that
// README.md, the SDK READMEs and docs/*.md show is a flag `leasectl
// COMMAND --help` lists, and every exit status they name for leasectl is
// in `leasectl --help`'s table of exit statuses, so that the docs cannot
// drift from the CLI.
func TestDocsNameOnlyWhatLeasectlHas(t *testing.T) {
	cli := newCLIFacts(t)
	var lines, said int
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		problems, l, s := cli.check(strings.TrimPrefix(page, "../../"), string(b))
		for _, p := range problems {
			t.Error(p)
		}
		lines, said = lines+l, said+s
	}
	// The walk found what it should: the pages show dozens of command lines
	// and name most statuses.
	if lines < 30 || said < 10 {
		t.Fatalf("found only %d leasectl command lines and %d exit statuses in the docs: the extraction is broken", lines, said)
	}
	t.Logf("%d leasectl command lines and %d exit statuses checked", lines, said)
}

// cliFacts is what leasectl's help says: each command's flags and the
// exit status table.
type cliFacts struct {
	flags    map[string]map[string]bool
	names    map[string]bool
	statuses map[int]string
	table    string
}

func newCLIFacts(t *testing.T) cliFacts {
	t.Helper()
	c := cliFacts{flags: cliFlags(t), names: map[string]bool{}}
	for n := range c.flags {
		c.names[n] = true
	}
	c.statuses, c.table = cliStatuses(t)
	return c
}

// check returns what the page rel (text) says of leasectl that its help
// does not, and how many command lines and statuses it checked.
func (c cliFacts) check(rel, text string) (problems []string, lines, said int) {
	for _, m := range mentions(rel, text, c.names) {
		lines++
		for _, f := range m.flags {
			if !c.flags[m.cmd][f] {
				have := slices.Sorted(maps.Keys(c.flags[m.cmd]))
				problems = append(problems, fmt.Sprintf("%s: `%s` gives %s %s, which `leasectl %s --help` does not list (it has %s)",
					rel, m.line, m.cmd, f, m.cmd, strings.Join(have, " ")))
			}
		}
	}
	found := statusMentions(rel, text)
	inSentence := map[string]int{}
	for _, m := range found {
		inSentence[m.sentence]++
	}
	for _, m := range found {
		said++
		entry, ok := c.statuses[m.status]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %q names exit status %d, which `leasectl --help` does not list (%s)", rel, m.sentence, m.status, c.table))
			continue
		}
		// A sentence about one command and one status gives the command a
		// status the table gives it.
		cmds, of := sentenceCommands(m.sentence, c.names), statusCommands(entry, c.names)
		if inSentence[m.sentence] != 1 || len(cmds) != 1 || of == nil {
			continue
		}
		for cmd := range cmds {
			if !of[cmd] {
				problems = append(problems, fmt.Sprintf("%s: %q gives %s exit status %d, but `leasectl --help` gives %d to other commands: %q",
					rel, m.sentence, cmd, m.status, m.status, entry))
			}
		}
	}
	return problems, lines, said
}

// TestDocsExtraction: the extraction finds flags where a page gives them,
// and would catch a flag or a status the CLI does not have.
func TestDocsExtraction(t *testing.T) {
	names := map[string]bool{"run": true, "mcp": true, "get": true, "revoke": true}
	page := "Run it:\n\n```sh\nLEASESVC_URL=u leasectl --url U run team-a.x --window 5s --exit-on-loss -- ./cmd --ttl 3 # comment --no\n" +
		"leasectl mcp [--holder H] [--token T | --token-file F]\n```\n\n" +
		"Then `leasectl get X --json | jq .fencingToken --raw`, and `leasectl COMMAND --help`.\n"
	got := mentions("p", page, names)
	want := []mention{
		{"p", "run", []string{"--window", "--exit-on-loss"}, ""},
		{"p", "mcp", []string{"--holder", "--token", "--token-file"}, ""},
		{"p", "get", []string{"--json"}, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("mentions = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].cmd != want[i].cmd || !slices.Equal(got[i].flags, want[i].flags) {
			t.Errorf("mention %d = %s %v, want %s %v", i, got[i].cmd, got[i].flags, want[i].cmd, want[i].flags)
		}
	}
	text := "leasectl watch of a lease never acquired fails with status 5 (not found). A typo exits 2.\n" +
		"Exit status (as leasectl lists them): 0 success; 1 error; 9 made up.\n\n" +
		"python3 exits 3 here, but this paragraph does not name the CLI."
	var ns []int
	for _, m := range statusMentions("p", text) {
		ns = append(ns, m.status)
	}
	if !slices.Equal(ns, []int{5, 2, 0, 1, 9}) {
		t.Errorf("statusMentions = %v, want [5 2 0 1 9]", ns)
	}

	// Against the real help: a flag run lacks, a status nobody has, a
	// status of another command; and the true page passes.
	cli := newCLIFacts(t)
	bad := "Use leasectl:\n\n```sh\nleasectl run team-a.x --ttl 30s --restart-always -- ./cmd --restart-always\n```\n\n" +
		"A `leasectl get` of a missing lease exits 8. `leasectl get` exits 4 when the lease is lost.\n"
	problems, lines, said := cli.check("bad.md", bad)
	if lines != 3 || said != 2 || len(problems) != 3 ||
		!strings.Contains(problems[0], "run --restart-always") || !strings.Contains(problems[1], "exit status 8") || !strings.Contains(problems[2], "get exit status 4") {
		t.Errorf("check of a wrong page: %d lines, %d statuses, problems:\n%s", lines, said, strings.Join(problems, "\n"))
	}
	good := "```sh\nleasectl run team-a.x --window 5s --exit-on-loss -- ./cmd\n```\n\n" +
		"`leasectl watch` of a lease never acquired exits 5. `leasectl run --exit-on-loss` exits 4 when leadership ends.\n"
	if problems, _, _ := cli.check("good.md", good); len(problems) != 0 {
		t.Errorf("check of a true page: %s", strings.Join(problems, "\n"))
	}
}

// markdownSection returns the part of text under the heading (such as
// "## Set up" or "## 6. `leasectl`") up to the next heading of that level
// or above.
func markdownSection(t *testing.T, page, text, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", page, heading)
	}
	level := strings.Index(heading, " ")
	lines := strings.Split(rest, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			in = !in
		}
		if n := len(l) - len(strings.TrimLeft(l, "#")); !in && n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
			return strings.Join(lines[:i], "\n")
		}
	}
	return rest
}

// codeLines returns the commands of text's code blocks: their non-empty
// lines without `# comments`.
func codeLines(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if cmd, _, _ := strings.Cut(l, " #"); in && strings.TrimSpace(cmd) != "" {
			out = append(out, strings.TrimSpace(cmd))
		}
	}
	return out
}

// TestREADMESetUpAndInstall: README's Set up stays two commands on a fresh
// machine (`go run ./cmd/leasesvc`, `./test.sh`); installing the tools is a
// section of its own, which docs/agents.md's leasectl sections (§6, §8 and
// its MCP configuration) point to; and no page's code runs leasectl with
// `go run`, which loses its exit statuses (3 comes back as 1).
func TestREADMESetUpAndInstall(t *testing.T) {
	readme := readFile(t, "../../README.md")
	if got, want := codeLines(markdownSection(t, "README.md", readme, "## Set up")), []string{"go run ./cmd/leasesvc", "./test.sh"}; !slices.Equal(got, want) {
		t.Errorf("README.md's Set up runs %q, want exactly %q", got, want)
	}
	install := markdownSection(t, "README.md", readme, "## Install the tools")
	for _, want := range []string{"go install ./cmd/leasectl", "go install github.com/leasesvc/leasesvc/cmd/leasectl@latest",
		"go install github.com/leasesvc/leasesvc/cmd/leasesvc@latest", "go get github.com/leasesvc/leasesvc@", "-replace",
		"pip install /path/to/leasesvc/sdk/python", "npm pack", "npm install /path/to/", "npm install ws"} {
		if !strings.Contains(install, want) {
			t.Errorf("README.md's Install the tools section lacks %q", want)
		}
	}
	agents := readFile(t, "../../docs/agents.md")
	const link = "(../README.md#install-the-tools)"
	for _, h := range []string{"## 6. `leasectl`", "## 8. LLM agents: `leasectl mcp`", "### Registering it with an MCP client"} {
		if !strings.Contains(markdownSection(t, "docs/agents.md", agents, h), link) {
			t.Errorf("docs/agents.md's %q section does not link README's Install the tools %s", h, link)
		}
	}
	for _, page := range docPages(t) {
		for _, l := range codeLines(readFile(t, page)) {
			if strings.Contains(l, "go run ./cmd/leasectl") || strings.Contains(l, "go run github.com/leasesvc/leasesvc/cmd/leasectl") {
				t.Errorf("%s runs `%s`: call the installed leasectl (go run loses its exit status)", strings.TrimPrefix(page, "../../"), l)
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
