package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// language is one SDK's agent.
type language struct {
	name string
	// prepare builds what the agent needs (once per test process) and
	// returns the command line before CASE; it fails or skips the test when
	// a tool is missing.
	prepare func(t testing.TB) []string
	env     []string // added to the agent's environment
	// sessions: the agent runs the session case (docs/contract.md §14).
	sessions bool
	// lifecycle: the agent runs the lifecycle_* cases (PROTOCOL.md, L1–L4).
	lifecycle bool
}

var languages = []language{
	{name: "go", prepare: prepareGo, sessions: true, lifecycle: true},
	{name: "python", prepare: preparePython, env: []string{"PYTHONPATH=" + filepath.Join(repoRoot(), "sdk", "python")}, sessions: true, lifecycle: true},
	{name: "typescript", prepare: prepareTypeScript, sessions: true, lifecycle: true},
}

func prepareGo(t testing.TB) []string {
	t.Helper()
	return []string{e2e.Build(t, "./sdk/conformance/goagent")}
}

func preparePython(t testing.TB) []string {
	t.Helper()
	py := need(t, "python3", "apt-get install -y python3 (3.9 or newer)")
	return []string{py, filepath.Join("sdk", "python", "conformance_agent.py")}
}

var tsBuild struct {
	once sync.Once
	err  error
}

// prepareTypeScript runs `npm ci` and `npm run build` in sdk/typescript
// when dist/conformance/agent.js is missing or older than any source file.
func prepareTypeScript(t testing.TB) []string {
	t.Helper()
	node := need(t, "node", "apt-get install -y nodejs npm (Node 20 or newer)")
	need(t, "npm", "apt-get install -y npm")
	dir := filepath.Join(repoRoot(), "sdk", "typescript")
	agent := filepath.Join("sdk", "typescript", "dist", "conformance", "agent.js")
	tsBuild.once.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
			tsBuild.err = fmt.Errorf("the TypeScript SDK is missing (%v): its agent is %s", err, agent)
			return
		}
		if !stale(filepath.Join(repoRoot(), agent), dir) {
			return
		}
		for _, args := range [][]string{{"ci"}, {"run", "build"}} {
			cmd := exec.Command("npm", args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				tsBuild.err = fmt.Errorf("npm %s in sdk/typescript: %w\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if tsBuild.err != nil {
		t.Fatal(tsBuild.err)
	}
	return []string{node, agent}
}

// stale reports whether built is missing or older than a file of dir
// outside node_modules and dist.
func stale(built, dir string) bool {
	st, err := os.Stat(built)
	if err != nil {
		return true
	}
	newer := false
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if info, err := d.Info(); err == nil && !d.IsDir() && info.ModTime().After(st.ModTime()) {
			newer = true
			return filepath.SkipAll
		}
		return nil
	})
	return newer
}

// agent is one running agent process.
type agent struct {
	t      testing.TB
	label  string // language/case, for messages
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *e2e.SyncBuffer
	seen   []string
	done   chan struct{}
	err    error
}

// startAgent runs the agent of lang for case cse with the protocol's
// environment; it is killed when the test ends, if still running.
func startAgent(t testing.TB, lang language, argv []string, cse string, env map[string]string) *agent {
	t.Helper()
	a := &agent{t: t, label: lang.name + "/" + cse, lines: make(chan string, 100), stderr: &e2e.SyncBuffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(argv[0], append(argv[1:], cse)...)
	a.cmd.Dir = repoRoot()
	a.cmd.Env = append(os.Environ(), lang.env...)
	for k, v := range env {
		a.cmd.Env = append(a.cmd.Env, k+"="+v)
	}
	a.cmd.Stderr = a.stderr
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("%s: start %v: %v", a.label, argv, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
		a.err = a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	})
	return a
}

// fail ends the test with what the agent printed so far.
func (a *agent) fail(format string, args ...any) {
	a.t.Helper()
	a.t.Fatalf("%s: %s\nstdout so far:\n%s\nstderr:\n%s", a.label, fmt.Sprintf(format, args...),
		strings.Join(a.seen, "\n"), a.stderr.String())
}

// next returns the agent's next step line, decoded.
func (a *agent) next(timeout time.Duration) map[string]any {
	a.t.Helper()
	select {
	case line, ok := <-a.lines:
		if !ok {
			<-a.done
			a.fail("exited (%v) while a step line was expected", a.err)
		}
		a.seen = append(a.seen, line)
		d := json.NewDecoder(bytes.NewReader([]byte(line)))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil || m["step"] == nil {
			a.fail("line %q is not a JSON object with a step", line)
		}
		return m
	case <-time.After(timeout):
		a.fail("no step line in %v", timeout)
	}
	return nil
}

// number matches any JSON number and checks it.
type number func(v float64) error

// text matches any JSON string and checks it.
type text func(s string) error

// expect reads the next line and checks it field by field: the same
// fields as want, each equal (a number func checks a measured value). It
// returns the line.
func (a *agent) expect(timeout time.Duration, want map[string]any) map[string]any {
	a.t.Helper()
	got := a.next(timeout)
	a.check(got, want)
	return got
}

func (a *agent) check(got, want map[string]any) {
	a.t.Helper()
	var problems []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s missing", k))
			continue
		}
		if msg := matches(g, w); msg != "" {
			problems = append(problems, fmt.Sprintf("%s: %s", k, msg))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s unexpected", k))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		a.fail("step %v: %s (want %v)", want["step"], strings.Join(problems, "; "), want)
	}
}

// matches compares one field; "" when it matches.
func matches(got, want any) string {
	switch w := want.(type) {
	case text:
		s, ok := got.(string)
		if !ok {
			return fmt.Sprintf("%v is not a string", got)
		}
		if err := w(s); err != nil {
			return err.Error()
		}
		return ""
	case number:
		n, ok := got.(json.Number)
		if !ok {
			return fmt.Sprintf("%v is not a number", got)
		}
		f, err := n.Float64()
		if err != nil {
			return err.Error()
		}
		if err := w(f); err != nil {
			return err.Error()
		}
		return ""
	case int:
		if n, ok := got.(json.Number); !ok || n.String() != fmt.Sprint(w) {
			return fmt.Sprintf("%v, want %d", got, w)
		}
		return ""
	case float64:
		n, ok := got.(json.Number)
		if f, err := n.Float64(); !ok || err != nil || f != w {
			return fmt.Sprintf("%v, want %v", got, w)
		}
		return ""
	}
	if got != want {
		return fmt.Sprintf("%v (%T), want %v (%T)", got, got, want, want)
	}
	return ""
}

// stop writes "stop", closes stdin and waits for a clean exit.
func (a *agent) stop(timeout time.Duration) {
	a.t.Helper()
	_, _ = io.WriteString(a.stdin, "stop\n")
	_ = a.stdin.Close()
	a.exit(timeout)
}

// exit waits for the agent to exit 0, draining its lines.
func (a *agent) exit(timeout time.Duration) {
	a.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-a.lines:
			if ok {
				a.seen = append(a.seen, line)
				continue
			}
			<-a.done
			if a.err != nil {
				a.fail("exit: %v", a.err)
			}
			return
		case <-deadline:
			a.fail("did not exit within %v", timeout)
		}
	}
}
