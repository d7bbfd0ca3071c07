package sessionmodel

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A bound is the size of a model: the -D flags that set its constants
// (sessions.pml, "Bounds").
type bound struct {
	name  string
	flags []string
}

// The bounds the tests check at. CI checks the new rules at ciBounds;
// LEASESVC_MODEL_BOUND=long checks them at longBounds instead (doc.go).
// The findings need one socket and one lease: findingBound keeps their
// search, shortest trail included, to seconds.
var (
	ciBounds = []bound{
		{"one lease, two sockets", []string{"-DNS=2", "-DNL=1", "-DMAXTOK=2", "-DQA=1", "-DQB=1"}},
		{"two leases, one socket", []string{"-DNS=1", "-DNL=2", "-DMAXTOK=2", "-DQA=1", "-DQB=1"}},
	}
	longBounds = []bound{
		{"one lease, three sockets", []string{"-DNS=3", "-DNL=1", "-DMAXTOK=2", "-DQA=1", "-DQB=1"}},
		{"two leases, two sockets", []string{"-DNS=2", "-DNL=2", "-DMAXTOK=2", "-DQA=1", "-DQB=1"}},
		{"one lease, two sockets, deeper queues", []string{"-DNS=2", "-DNL=1", "-DMAXTOK=3", "-DQA=2", "-DQB=2"}},
	}
	findingBound = bound{"one lease, one socket", []string{"-DNS=1", "-DNL=1", "-DMAXTOK=2"}}
)

// long reports whether the long bound was asked for.
func long() bool { return os.Getenv("LEASESVC_MODEL_BOUND") == "long" }

// newRulesBounds returns the bounds the new rules are checked at.
func newRulesBounds() []bound {
	if long() {
		return longBounds
	}
	return ciBounds
}

// TestNewRules checks the new rules (S5, S6, A4, A5) exhaustively: no
// state breaks the invariant, and the search was complete (not cut by the
// depth bound or memory).
func TestNewRules(t *testing.T) {
	needTools(t)
	for _, b := range newRulesBounds() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := verify(t, append([]string{"-DNEW_RULES"}, b.flags...), false)
			r.wantClean(t)
		})
	}
}

// TestEachRuleAlone checks that every new rule is one of two that each
// close a finding alone: with any one of them off (the three others on)
// the model still verifies. S5 (service) and A4 (agent) each close F1; S6
// (service) and A5 (agent) each close F2. CI checks this where the
// findings live (findingBound), the long bound at its first bound.
func TestEachRuleAlone(t *testing.T) {
	needTools(t)
	rules := []string{"S5", "S6", "A4", "A5"}
	b := findingBound
	if long() {
		b = longBounds[0]
	}
	for _, off := range rules {
		t.Run("without "+off, func(t *testing.T) {
			t.Parallel()
			var flags []string
			for _, r := range rules {
				if r != off {
					flags = append(flags, "-D"+r)
				}
			}
			r := verify(t, append(flags, b.flags...), false)
			r.wantClean(t)
		})
	}
}

// TestTodaysRules checks that today's rules break the invariant, with the
// two findings of issue 44 as (short) counterexamples: F1 (a late
// acquire answer, acked meanwhile, led) when neither S5 nor A4 is there,
// and F2 (a lost queued before its result, then ignored) when neither S6
// nor A5 is. Each trail is logged, in words and as Spin's steps.
func TestTodaysRules(t *testing.T) {
	needTools(t)
	cases := []struct {
		name  string
		flags []string
		// want are lines of the trail, in this order, that make it the
		// finding it stands for.
		want []string
	}{
		{"F1 late answer led (no S5, no A4)", []string{"-DS6", "-DA5"}, []string{
			"backend: L0/1 begins for the session",
			"backend: L0/2 begins for the contender",
			"owner0: L0/1 into the table, result queued",
			"agent: result L0/1: leads it",
			"VIOLATION",
		}},
		{"F2 lost before result (no S6, no A5)", []string{"-DS5", "-DA4"}, []string{
			"owner0: L0/1 into the table (result not queued yet)",
			"backend: L0/2 begins for the contender",
			"lost queued",
			"agent: lost L0/1 for a holding it does not hold: ignored",
			"owner0: result L0/1 queued",
			"agent: result L0/1: leads it",
			"agent: ack",
			"VIOLATION",
		}},
		{"today (none of the four)", nil, []string{"agent: result L0/1: leads it", "VIOLATION"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := verify(t, append(c.flags, findingBound.flags...), true)
			if r.errors == 0 {
				t.Fatalf("no counterexample found; want one\n%s", r.out)
			}
			if _, err := os.Stat(filepath.Join(r.dir, "sessions.pml.trail")); err != nil {
				t.Fatalf("no trail written: %v", err)
			}
			story, steps := r.trail(t)
			t.Logf("counterexample (%d steps), in words:\n%s\nthe last of Spin's steps:\n%s", r.steps, story, steps)
			at := 0
			for _, w := range c.want {
				i := strings.Index(story[at:], w)
				if i < 0 {
					t.Fatalf("the trail does not show %q (after the lines before it); it is not the finding named", w)
				}
				at += i + len(w)
			}
		})
	}
}

// TestProbes checks that the new rules' model gets where it must for the
// clean result to mean anything (sessions.pml, "Reachability probes"):
// a lease led across a move, a second holding led after the first ended,
// both leases led at once.
func TestProbes(t *testing.T) {
	needTools(t)
	cases := []struct {
		probe string
		b     bound
	}{
		{"1", ciBounds[0]},
		{"2", ciBounds[0]},
		{"3", ciBounds[1]},
	}
	for _, c := range cases {
		t.Run("probe "+c.probe, func(t *testing.T) {
			t.Parallel()
			r := verify(t, append([]string{"-DNEW_RULES", "-DPROBE=" + c.probe}, c.b.flags...), true)
			if r.errors == 0 {
				t.Fatalf("probe %s never reached: the model does not get there\n%s", c.probe, r.out)
			}
			story, _ := r.trail(t)
			if !strings.Contains(story, "PROBE "+c.probe+" reached") {
				t.Fatalf("the search stopped short of the probe:\n%s", story)
			}
			t.Logf("probe %s reached in %d steps:\n%s", c.probe, r.steps, story)
		})
	}
}

// result is what a run of pan said.
type result struct {
	dir      string
	flags    []string
	out      string
	errors   int
	states   string // stored
	depth    int    // reached
	elapsed  string // pan's own, seconds
	complete bool
	wall     time.Duration
	steps    int // of the trail, once replayed
}

// wantClean fails t unless r found no error in a complete search.
func (r *result) wantClean(t *testing.T) {
	t.Helper()
	t.Logf("%s: %s states, depth %d, pan %s s, %s in all", strings.Join(r.flags, " "), r.states, r.depth, r.elapsed, r.wall.Round(time.Millisecond))
	if r.errors != 0 {
		story, steps := r.trail(t)
		t.Fatalf("the invariant breaks: %d errors\n%s\n%s\n%s", r.errors, story, steps, r.out)
	}
	if !r.complete {
		t.Fatalf("the search was not complete:\n%s", r.out)
	}
}

var (
	reErrors  = regexp.MustCompile(`errors: (\d+)`)
	reStates  = regexp.MustCompile(`(\S+) states, stored`)
	reDepth   = regexp.MustCompile(`depth reached (\d+)`)
	reElapsed = regexp.MustCompile(`pan: elapsed time (\S+) seconds`)
)

// verify generates pan from the model with flags, compiles it and runs it
// in a new temporary directory. short makes pan look for a short
// counterexample (-I: each one found halves the depth it searches to).
func verify(t *testing.T, flags []string, short bool) result {
	t.Helper()
	dir := t.TempDir()
	models, err := filepath.Glob("*.pml")
	if err != nil || len(models) == 0 {
		t.Fatalf("no model here: %v", err)
	}
	for _, m := range models {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, m), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	timeout := 5 * time.Minute
	if long() {
		timeout = 24 * time.Hour
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
		}
		return string(out)
	}
	start := time.Now()
	run("spin", append(append([]string{"-a"}, flags...), "sessions.pml")...)
	// -O1 at CI's bounds: -O2 compiles twice as long (6 s) for a search
	// only 10% faster.
	cflags := []string{"-O1", "-w", "-DSAFETY", "-DMEMLIM=" + memlim(), "-o", "pan", "pan.c"}
	panArgs := []string{"-m1000000"}
	switch {
	case short:
		panArgs = append(panArgs, "-I")
	case long():
		cflags[0] = "-O2"
		cflags = append(cflags, "-DCOLLAPSE")
		panArgs = append(panArgs, "-w28")
	}
	run("gcc", cflags...)
	out := run("./pan", panArgs...)
	r := result{dir: dir, flags: flags, out: out, wall: time.Since(start)}
	m := reErrors.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pan said no error count:\n%s", out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := reStates.FindStringSubmatch(out); m != nil {
		r.states = m[1]
	}
	if m := reDepth.FindStringSubmatch(out); m != nil {
		r.depth, _ = strconv.Atoi(m[1])
	}
	if m := reElapsed.FindStringSubmatch(out); m != nil {
		r.elapsed = m[1]
	}
	r.complete = !strings.Contains(out, "max search depth too small") &&
		!strings.Contains(out, "Search not completed") &&
		!strings.Contains(out, "reached -DMEMLIM bound")
	return r
}

// memlim is the memory pan may take, in MB: LEASESVC_MODEL_MEMLIM, or 3
// GB (16 GB for the long bound).
func memlim() string {
	if v := os.Getenv("LEASESVC_MODEL_MEMLIM"); v != "" {
		return v
	}
	if long() {
		return "16000"
	}
	return "3000"
}

var (
	reStory = regexp.MustCompile(`^\s*t\d+ `)
	reStep  = regexp.MustCompile(`^\s*\d+:\s+proc\s`)
	reEnds  = regexp.MustCompile(`trail ends after (\d+) steps`)
)

// trail replays the counterexample of r: its printed steps (story, one
// line per step of the model that prints, each naming its rule) and the
// last of Spin's own steps (spin -t -p).
func (r *result) trail(t *testing.T) (story, steps string) {
	t.Helper()
	replay := func(extra ...string) []string {
		args := append(append(append([]string{"-t"}, extra...), r.flags...), "sessions.pml")
		cmd := exec.CommandContext(t.Context(), "spin", args...)
		cmd.Dir = r.dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, tail(out))
		}
		return strings.Split(string(out), "\n")
	}
	var s []string
	for _, l := range replay() {
		if reStory.MatchString(l) {
			s = append(s, "  "+strings.TrimSpace(l))
		}
		if m := reEnds.FindStringSubmatch(l); m != nil {
			r.steps, _ = strconv.Atoi(m[1])
		}
	}
	var p []string
	for _, l := range replay("-p") {
		if reStep.MatchString(l) {
			p = append(p, "  "+strings.TrimSpace(l))
		}
	}
	if len(p) > 12 {
		p = p[len(p)-12:]
	}
	return strings.Join(s, "\n"), strings.Join(p, "\n")
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// needTools makes sure spin and a C compiler are there: it installs
// Debian's spin when it is missing and the test runs as root (as
// httpapi's browser test installs chromium), and otherwise fails the test
// under CI=true and skips it elsewhere, saying what to install.
func needTools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("spin"); err != nil {
		installSpin(t)
	}
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("the model check of docs/contract.md §14 needs %s: apt-get install -y spin gcc", tool)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// spinOnce makes the tests try to install spin once.
var spinOnce sync.Once

// installSpin installs Debian's spin with apt-get, as root, quietly; a
// failure is logged and left to needTools.
func installSpin(t *testing.T) {
	t.Helper()
	spinOnce.Do(func() {
		if os.Geteuid() != 0 {
			return
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			return
		}
		apt := func(args ...string) error {
			// Another test may be installing (chromium): wait for dpkg's lock.
			args = append([]string{"-q", "-o", "DPkg::Lock::Timeout=300"}, args...)
			cmd := exec.CommandContext(context.Background(), "apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Logf("apt-get %v: %v\n%s", args, err, tail(out))
			}
			return err
		}
		t.Log("installing spin: apt-get install -y spin")
		install := []string{"install", "-y", "--no-install-recommends", "spin"}
		if apt(install...) != nil {
			_ = apt("update")
			_ = apt(install...)
		}
	})
}
