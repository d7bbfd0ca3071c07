package emulators

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// supervisor runs the emulator command ("$@") in the background and watches
// its own standard input, a pipe whose only writer is the test process. EOF
// on it (the test process closed it, or died and the kernel closed it) or the
// end of the emulator makes it kill every process of its session: the gcloud
// wrapper (which makes itself the leader of a new process group), the
// emulator's shell scripts, the JVM, and finally itself.
const supervisor = `"$@" </dev/null &
child=$!
while kill -0 "$child" 2>/dev/null; do
	read -r -t 1 _
	rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then break; fi
done
kill -KILL -- -"$child" 2>/dev/null
pkill -KILL -s $$ 2>/dev/null
kill -KILL -- -$$
`

// Timeouts of the process life cycle.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 15 * time.Second
)

// process is one emulator running under its supervisor. The supervisor
// leads a session (and a process group) of its own; every process of the
// emulator stays in that session, whatever process groups it makes.
type process struct {
	cmd     *exec.Cmd
	stdin   io.Closer // closing it tells the supervisor to kill the session
	sid     int       // the session id: the supervisor's pid
	logPath string
	done    chan struct{} // closed when the supervisor has exited
}

// start starts argv under a supervisor in a new session and process group,
// with its output in a new temporary log file.
func start(k *kind, argv []string) (*process, error) {
	logf, err := os.CreateTemp("", "leasesvc-emulator-"+k.id+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("emulators: create %s log: %w", k.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "$ %s\n", strings.Join(argv, " "))
	cmd := exec.Command("bash", append([]string{"-c", supervisor, "leasesvc-emulator-" + k.id}, argv...)...)
	cmd.Env = append(os.Environ(), "CLOUDSDK_CORE_DISABLE_PROMPTS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("emulators: %s stdin pipe: %w", k.name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulators: start %s supervisor (bash): %w", k.name, err)
	}
	p := &process{cmd: cmd, stdin: stdin, sid: cmd.Process.Pid, logPath: logf.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // killed by design; its exit status means nothing
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until ready(addr) succeeds, the emulator exits or
// startTimeout passes.
func (p *process) waitReady(k *kind, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := k.ready(ctx, addr)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("emulators: %s emulator exited before it answered on %s (last check: %v)\n%s", k.name, addr, err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("emulators: %s emulator did not answer on %s within %v (last check: %v)\n%s", k.name, addr, startTimeout, err, p.logTail())
		case <-tick.C:
		}
	}
}

// stop has the supervisor kill the emulator's session, kills whatever is
// left of it, and waits until no live process is left in the session and
// addr refuses connections.
func (p *process) stop(addr string) error {
	if err := p.stdin.Close(); err != nil {
		return fmt.Errorf("emulators: close supervisor %d stdin: %w", p.sid, err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second): // a stuck supervisor: the sweep below kills it
	}
	deadline := time.Now().Add(stopTimeout)
	for {
		left := sessionMembers(p.sid)
		for _, pid := range left {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("emulators: kill %d of session %d: %w", pid, p.sid, err)
			}
		}
		open := tcpOpen(context.Background(), addr) == nil
		if len(left) == 0 && !open {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("emulators: %v after stopping session %d: live members %v, port %s open: %v", stopTimeout, p.sid, left, addr, open)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTail returns the end of the emulator's log, for error messages.
func (p *process) logTail() string {
	const max = 4000
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", p.logPath, err)
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return fmt.Sprintf("--- tail of %s ---\n%s", p.logPath, b)
}

// sessionMembers returns the pids of the live (not zombie) processes of
// session sid. A zombie holds no port and no memory; where pid 1
// does not reap orphans, killed emulator processes stay zombies for ever.
func sessionMembers(sid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended while we looked
		}
		// pid (comm) state ppid pgrp session ...; comm may contain spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if s, err := strconv.Atoi(f[3]); err == nil && s == sid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			pids = append(pids, pid)
		}
	}
	return pids
}
