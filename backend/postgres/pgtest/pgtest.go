// Package pgtest starts throwaway PostgreSQL clusters for tests: initdb in
// a temporary directory, a server on a free loopback port, torn down when
// the test ends. As root it runs the server as the user postgres (which
// initdb requires). Without the binaries a test fails under CI=true and is
// skipped elsewhere, with what to install.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// binDir holds the PostgreSQL binaries; $LEASESVC_PG_BIN overrides it.
const binDir = "/usr/lib/postgresql/15/bin"

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	// URL connects to its database "postgres" as the superuser.
	URL string
	// Port is its loopback TCP port.
	Port int

	t    testing.TB
	bin  string
	dir  string
	mu   sync.Mutex
	proc *exec.Cmd
}

// Bin returns the directory of the PostgreSQL binaries, or fails (CI=true)
// or skips the test when they are missing.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("LEASESVC_PG_BIN")
	if bin == "" {
		bin = binDir
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		msg := fmt.Sprintf("PostgreSQL binaries not found in %s (install postgresql-15, e.g. apt-get install -y postgresql-15, or set LEASESVC_PG_BIN)", bin)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// Start initializes and starts a cluster, stopped and removed when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgtest-") // not t.TempDir: its parent is closed to the user postgres
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c := &Cluster{t: t, bin: Bin(t), dir: dir}
	data := filepath.Join(c.dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	c.chown(c.dir, data)
	if out, err := c.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

// command runs a PostgreSQL binary, as the user postgres when root.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// chown gives the directories to the user postgres when root.
func (c *Cluster) chown(dirs ...string) {
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		c.t.Fatalf("user postgres: %v (the PostgreSQL package creates it)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range dirs {
		if err := os.Chown(d, uid, gid); err != nil {
			c.t.Fatal(err)
		}
	}
}

// Start starts the server (again, after Stop or Kill) and waits until it
// accepts connections.
func (c *Cluster) Start() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := c.command("postgres", "-D", filepath.Join(c.dir, "data"), "-p", strconv.Itoa(c.Port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.OpenFile(filepath.Join(c.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start postgres: %v", err)
	}
	c.proc = cmd
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.URL)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
			c.t.Fatalf("postgres did not accept connections within 30s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server at once (immediate shutdown: no checkpoint, as a
// crash would) and waits for it to exit.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return
	}
	// SIGQUIT to the postmaster is PostgreSQL's immediate shutdown.
	_ = syscall.Kill(-c.proc.Process.Pid, syscall.SIGQUIT)
	for i := 0; i < 200 && c.running(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-c.proc.Process.Pid, syscall.SIGKILL)
	c.proc = nil
}

// running reports whether the server's pid file is still there.
func (c *Cluster) running() bool {
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// Restart stops the server and starts it again on the same data and port.
func (c *Cluster) Restart() {
	c.Stop()
	c.Start()
}
