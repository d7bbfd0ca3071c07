package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// config is leasesoak's configuration.
type config struct {
	bin         string        // the leasesvc binary
	leases      int           // leases held in all
	agents      int           // simulated agents sharing them
	ttl         time.Duration // the leases' TTL; each is renewed every ttl/3
	duration    time.Duration // how long the load runs
	sample      time.Duration // how often the process is sampled
	concurrency int           // acquires in flight while setting up
	json        bool
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := config{leases: 10_000, agents: 1_000, ttl: 30 * time.Second, duration: 10 * time.Minute, sample: 10 * time.Second, concurrency: 64}
	fs := flag.NewFlagSet("leasesoak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "", "the leasesvc binary to run (go build -o /tmp/leasesvc ./cmd/leasesvc); required")
	fs.IntVar(&c.leases, "leases", c.leases, "leases held in all")
	fs.IntVar(&c.agents, "agents", c.agents, "simulated agents sharing the leases")
	fs.DurationVar(&c.ttl, "ttl", c.ttl, "the leases' TTL; each is renewed every ttl/3")
	fs.DurationVar(&c.duration, "duration", c.duration, "how long the load runs")
	fs.DurationVar(&c.sample, "sample", c.sample, "how often the process is sampled")
	fs.IntVar(&c.concurrency, "concurrency", c.concurrency, "acquires in flight while setting up")
	fs.BoolVar(&c.json, "json", false, "write JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("flags: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.bin == "":
		return c, errors.New("-bin is required: the leasesvc binary (go build -o /tmp/leasesvc ./cmd/leasesvc)")
	case c.leases < 1 || c.agents < 1 || c.agents > c.leases:
		return c, fmt.Errorf("-leases %d, -agents %d: want 1 ≤ agents ≤ leases", c.leases, c.agents)
	case c.ttl < time.Second || c.ttl%time.Millisecond != 0:
		return c, fmt.Errorf("-ttl %v: want a whole number of milliseconds, at least 1s", c.ttl)
	case c.sample <= 0 || c.duration < 2*c.sample:
		return c, fmt.Errorf("-duration %v, -sample %v: want a positive sample interval and a duration of at least two", c.duration, c.sample)
	case c.concurrency < 1:
		return c, fmt.Errorf("-concurrency %d: must be at least 1", c.concurrency)
	}
	return c, nil
}

// sample is one sampling interval of the run.
type sample struct {
	Seconds        float64 `json:"seconds"` // since the load started
	RSSMiB         float64 `json:"rssMiB"`
	CPUPercent     float64 `json:"cpuPercent"` // of one core, over the interval
	CPUMsPer1000   float64 `json:"cpuMsPer1000Renewals"`
	Threads        int     `json:"threads"`
	OpenFiles      int     `json:"openFiles"`
	RenewalsPerSec float64 `json:"renewalsPerSecond"`
	RenewP50Ms     float64 `json:"renewP50Ms"`
	RenewP99Ms     float64 `json:"renewP99Ms"`
}

// summary is the verdict of the run, over the steady state (the samples
// after the first quarter).
type summary struct {
	Leases, Agents      int
	TTL, Duration       string
	Renewals            int64          `json:"renewals"`
	Lost                int64          `json:"lost"`   // renew answered lease_lost
	Failed              int64          `json:"failed"` // errors and 5xx
	RenewalsPerSec      float64        `json:"renewalsPerSecond"`
	RSSMiBMedian        float64        `json:"rssMiBMedian"`
	RSSMiBMin           float64        `json:"rssMiBMin"`
	RSSMiBMax           float64        `json:"rssMiBMax"`
	RSSSlopeMiBPerMin   float64        `json:"rssSlopeMiBPerMinute"`
	CPUPercent          float64        `json:"cpuPercent"`
	CPUMsPer1000        float64        `json:"cpuMsPer1000Renewals"`
	ThreadsFirst        int            `json:"threadsFirst"`
	ThreadsLast         int            `json:"threadsLast"`
	FilesFirst          int            `json:"openFilesFirst"`
	FilesLast           int            `json:"openFilesLast"`
	FilesSlopePerMin    float64        `json:"openFilesSlopePerMinute"`
	Goroutines          int            `json:"goroutinesAtEnd"`
	GoroutineCreators   map[string]int `json:"goroutineCreators"`
	LoadGeneratorCPUPct float64        `json:"loadGeneratorCpuPercent"`
	LoadAvg             string         `json:"loadavg"`
}

type result struct {
	Summary summary  `json:"summary"`
	Samples []sample `json:"samples"`
}

// run starts the service, loads it, samples it and writes the report.
func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	svc, err := startService(ctx, cfg.bin)
	if err != nil {
		return err
	}
	defer svc.kill()
	logf("leasesvc pid %d at %s", svc.cmd.Process.Pid, svc.url)

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	l := &load{cfg: cfg, hc: hc, url: svc.url, tokens: make([]atomic.Int64, cfg.leases)}
	if err := l.acquireAll(ctx, logf); err != nil {
		return err
	}
	selfStart := selfCPU()
	started := time.Now()
	loadCtx, stop := context.WithTimeout(ctx, cfg.duration)
	defer stop()
	var wg sync.WaitGroup
	for a := range cfg.agents {
		wg.Go(func() { l.agent(loadCtx, a) })
	}

	var samples []sample
	var procs []procSample
	prev, err := sampleProc(svc.cmd.Process.Pid)
	if err != nil {
		return err
	}
	prevRenewals := l.renewals.Load()
	tick := time.NewTicker(cfg.sample)
	defer tick.Stop()
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
			continue
		case <-tick.C:
		}
		cur, err := sampleProc(svc.cmd.Process.Pid)
		if err != nil {
			return err
		}
		renewals := l.renewals.Load()
		lat := l.window()
		dt := cur.at.Sub(prev.at).Seconds()
		dcpu := cur.cpu - prev.cpu
		dn := renewals - prevRenewals
		s := sample{
			Seconds: cur.at.Sub(started).Seconds(), RSSMiB: float64(cur.rssKiB) / 1024,
			CPUPercent: 100 * dcpu.Seconds() / dt, Threads: cur.threads, OpenFiles: cur.fds,
			RenewalsPerSec: float64(dn) / dt, RenewP50Ms: q(lat, 0.5), RenewP99Ms: q(lat, 0.99),
		}
		if dn > 0 {
			s.CPUMsPer1000 = float64(dcpu.Milliseconds()) / (float64(dn) / 1000)
		}
		samples, procs = append(samples, s), append(procs, cur)
		logf("t=%4.0fs rss %.1f MiB, cpu %.1f%%, %.0f renewals/s (%.1f ms cpu per 1000), renew p99 %.2f ms, %d threads, %d files, %d lost, %d failed",
			s.Seconds, s.RSSMiB, s.CPUPercent, s.RenewalsPerSec, s.CPUMsPer1000, s.RenewP99Ms, s.Threads, s.OpenFiles, l.lost.Load(), l.failed.Load())
		prev, prevRenewals = cur, renewals
	}
	wg.Wait()
	elapsed := time.Since(started)
	gen := selfCPU() - selfStart

	dump, err := svc.goroutineDump()
	if err != nil {
		logf("goroutine dump: %v", err)
	}
	res := result{Samples: samples, Summary: summarize(cfg, samples, procs, l, elapsed)}
	res.Summary.Goroutines, res.Summary.GoroutineCreators = countGoroutines(dump)
	res.Summary.LoadGeneratorCPUPct = 100 * gen.Seconds() / elapsed.Seconds()
	return res.write(stdout, cfg.json)
}

// summarize computes the verdict over the samples after the first quarter.
func summarize(cfg config, samples []sample, procs []procSample, l *load, elapsed time.Duration) summary {
	s := summary{Leases: cfg.leases, Agents: cfg.agents, TTL: cfg.ttl.String(), Duration: elapsed.Round(time.Second).String(),
		Renewals: l.renewals.Load(), Lost: l.lost.Load(), Failed: l.failed.Load(), LoadAvg: loadAvg()}
	s.RenewalsPerSec = float64(s.Renewals) / elapsed.Seconds()
	from := len(samples) / 4
	steady, sp := samples[from:], procs[from:]
	if len(steady) == 0 {
		return s
	}
	var xs, rss, files, cpuFrac []float64
	for _, x := range steady {
		xs = append(xs, x.Seconds/60)
		rss = append(rss, x.RSSMiB)
		files = append(files, float64(x.OpenFiles))
		cpuFrac = append(cpuFrac, x.CPUPercent)
	}
	sorted := slices.Clone(rss)
	slices.Sort(sorted)
	s.RSSMiBMedian, s.RSSMiBMin, s.RSSMiBMax = sorted[len(sorted)/2], sorted[0], sorted[len(sorted)-1]
	s.RSSSlopeMiBPerMin = slope(xs, rss)
	s.FilesSlopePerMin = slope(xs, files)
	s.ThreadsFirst, s.ThreadsLast = steady[0].Threads, steady[len(steady)-1].Threads
	s.FilesFirst, s.FilesLast = steady[0].OpenFiles, steady[len(steady)-1].OpenFiles
	var cpuSum float64
	for _, c := range cpuFrac {
		cpuSum += c
	}
	s.CPUPercent = cpuSum / float64(len(cpuFrac))
	// CPU per 1,000 renewals over the steady state, from the first steady
	// sample's predecessor to the last sample.
	if from > 0 {
		first, last := procs[from-1], sp[len(sp)-1]
		var n float64
		for _, x := range steady {
			n += x.RenewalsPerSec * cfg.sample.Seconds()
		}
		if n > 0 {
			s.CPUMsPer1000 = float64((last.cpu - first.cpu).Milliseconds()) / (n / 1000)
		}
	}
	return s
}

func (r result) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t (s)\tRSS (MiB)\tCPU (% of a core)\tCPU ms / 1000 renewals\trenewals/s\trenew p50 (ms)\trenew p99 (ms)\tthreads\topen files\t")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t%.2f\t%d\t%d\t\n", s.Seconds, s.RSSMiB, s.CPUPercent, s.CPUMsPer1000, s.RenewalsPerSec, s.RenewP50Ms, s.RenewP99Ms, s.Threads, s.OpenFiles)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	s := r.Summary
	fmt.Fprintf(w, "\n%d leases, %d agents, ttl %s, %s: %d renewals (%.0f/s), %d lost, %d failed; load average %s\n",
		s.Leases, s.Agents, s.TTL, s.Duration, s.Renewals, s.RenewalsPerSec, s.Lost, s.Failed, s.LoadAvg)
	fmt.Fprintf(w, "steady state (after the first quarter):\n")
	fmt.Fprintf(w, "  RSS: median %.1f MiB (min %.1f, max %.1f), trend %+.2f MiB/min\n", s.RSSMiBMedian, s.RSSMiBMin, s.RSSMiBMax, s.RSSSlopeMiBPerMin)
	fmt.Fprintf(w, "  CPU: %.1f%% of a core, %.1f ms per 1,000 renewals (load generator: %.1f%%)\n", s.CPUPercent, s.CPUMsPer1000, s.LoadGeneratorCPUPct)
	fmt.Fprintf(w, "  threads %d → %d, open files %d → %d (trend %+.2f/min)\n", s.ThreadsFirst, s.ThreadsLast, s.FilesFirst, s.FilesLast, s.FilesSlopePerMin)
	fmt.Fprintf(w, "  goroutines at the end: %d\n", s.Goroutines)
	type kv struct {
		k string
		v int
	}
	var top []kv
	for k, v := range s.GoroutineCreators {
		top = append(top, kv{k, v})
	}
	slices.SortFunc(top, func(a, b kv) int { return b.v - a.v })
	for i, x := range top {
		if i == 8 {
			break
		}
		fmt.Fprintf(w, "    %5d %s\n", x.v, x.k)
	}
	return nil
}

// load is the simulated agents' state.
type load struct {
	cfg    config
	hc     *http.Client
	url    string
	tokens []atomic.Int64 // by lease index

	renewals, lost, failed atomic.Int64
	mu                     sync.Mutex
	lat                    []time.Duration // since the last window()
}

func leaseName(i int) string { return "soak." + strconv.Itoa(i) }

// holder is the holder of lease i: agent i mod agents.
func (l *load) holder(i int) string { return "agent-" + strconv.Itoa(i%l.cfg.agents) }

// window returns the latencies recorded since the last call.
func (l *load) window() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lat
	l.lat = nil
	return out
}

func (l *load) post(ctx context.Context, i int, verb, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+"/v1/leases/"+leaseName(i)+":"+verb, strings.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %d: %w", verb, i, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %d: %w", verb, i, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %d: read answer: %w", verb, i, err)
	}
	return resp.StatusCode, raw, nil
}

// acquire takes lease i for its holder and records the token.
func (l *load) acquire(ctx context.Context, i int) error {
	status, raw, err := l.post(ctx, i, "acquire", fmt.Sprintf(`{"holder":%q,"ttlMs":%d}`, l.holder(i), l.cfg.ttl.Milliseconds()))
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("acquire %d: %d %s", i, status, raw)
	}
	var a struct {
		FencingToken int64 `json:"fencingToken"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return fmt.Errorf("acquire %d: %w", i, err)
	}
	l.tokens[i].Store(a.FencingToken)
	return nil
}

// acquireAll acquires every lease, concurrency at a time.
func (l *load) acquireAll(ctx context.Context, logf func(string, ...any)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, l.cfg.concurrency)
	start := time.Now()
	for range l.cfg.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= l.cfg.leases || ctx.Err() != nil {
					return
				}
				if err := l.acquire(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("acquire the leases: %w", err)
	}
	logf("acquired %d leases in %v", l.cfg.leases, time.Since(start).Round(time.Millisecond))
	return nil
}

// agent renews its leases (a, a+agents, a+2·agents, …) in turn, so that
// each is renewed every ttl/3, until ctx is done.
func (l *load) agent(ctx context.Context, a int) {
	var mine []int
	for i := a; i < l.cfg.leases; i += l.cfg.agents {
		mine = append(mine, i)
	}
	period := l.cfg.ttl / 3
	step := period / time.Duration(len(mine))
	rng := rand.New(rand.NewPCG(uint64(a), 1))
	next := time.Now().Add(time.Duration(rng.Int64N(int64(step))))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		i := mine[k%len(mine)]
		start := time.Now()
		status, _, err := l.post(context.WithoutCancel(ctx), i, "renew", fmt.Sprintf(`{"holder":%q,"fencingToken":%d}`, l.holder(i), l.tokens[i].Load()))
		took := time.Since(start)
		switch {
		case err != nil || status >= 500:
			l.failed.Add(1)
		case status == http.StatusConflict:
			l.lost.Add(1)
			_ = l.acquire(context.WithoutCancel(ctx), i)
		case status == http.StatusOK:
			l.renewals.Add(1)
			l.mu.Lock()
			l.lat = append(l.lat, took)
			l.mu.Unlock()
		default:
			l.failed.Add(1)
		}
		next = next.Add(step)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		t.Reset(time.Until(next))
	}
}

// service is the leasesvc process under test.
type service struct {
	cmd  *exec.Cmd
	url  string
	out  *lockedBuffer
	done chan struct{}
}

// startService runs bin on the memory backend on a free loopback port and
// waits until /healthz answers.
func startService(ctx context.Context, bin string) (*service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return nil, fmt.Errorf("free port %d: %w", port, err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "LEASESVC_BACKEND=memory", "LEASESVC_LOG_LEVEL=warn", "GOTRACEBACK=all")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &service{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port), out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited during start-up:\n%s", bin, out.String())
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("%s did not answer /healthz within 30s:\n%s", bin, out.String())
		}
	}
}

// goroutineDump sends SIGQUIT (the Go runtime prints every goroutine's
// stack and exits) and returns what the process printed.
func (s *service) goroutineDump() (string, error) {
	if err := s.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return "", fmt.Errorf("SIGQUIT: %w", err)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.kill()
		return s.out.String(), errors.New("no exit within 20s of SIGQUIT")
	}
	return s.out.String(), nil
}

// kill ends the process if it still runs.
func (s *service) kill() {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// lockedBuffer is a bytes.Buffer for the process's writers and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// q is the p-quantile of ds in milliseconds.
func q(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	i := min(max(int(float64(len(c))*p+0.999999)-1, 0), len(c)-1)
	return float64(c[i]) / float64(time.Millisecond)
}

// selfCPU is this process's user + system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
