package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// series is a set of latencies.
type series []time.Duration

// q returns the p-quantile (0 < p ≤ 1) in milliseconds: the smallest sample
// with at least p of the samples at or below it.
func (s series) q(p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(float64(len(c))*p+0.999999) - 1
	i = min(max(i, 0), len(c)-1)
	return float64(c[i]) / float64(time.Millisecond)
}

// row is one figure of the report.
type row struct {
	Scenario string   `json:"scenario"`
	Metric   string   `json:"metric"`
	Unit     string   `json:"unit"`
	Service  float64  `json:"service"`
	Direct   *float64 `json:"direct,omitempty"`
	Ratio    *float64 `json:"ratio,omitempty"` // service ÷ direct
	N        int      `json:"n"`               // samples behind the figure
	Note     string   `json:"note,omitempty"`
}

// pair returns a row comparing the service with the direct path.
func pair(scenario, metric, unit string, svc, dir float64, n int) row {
	r := row{Scenario: scenario, Metric: metric, Unit: unit, Service: svc, N: n, Direct: &dir}
	if dir > 0 {
		ratio := svc / dir
		r.Ratio = &ratio
	}
	return r
}

// report is leasebench's output.
type report struct {
	Started  time.Time      `json:"started"`
	Machine  machine        `json:"machine"`
	Settings map[string]any `json:"settings"`
	Results  []row          `json:"results"`
}

// machine describes where the benchmark ran.
type machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	Go        string `json:"go"`
	LoadAvg   string `json:"loadavg,omitempty"` // /proc/loadavg at the start
	CPUModel  string `json:"cpuModel,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	LoadAfter string `json:"loadavgAfter,omitempty"`
}

func thisMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(), LoadAvg: loadAvg()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
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

// write writes the report as JSON or as a table.
func (r report) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	fmt.Fprintf(w, "leasebench %s: %d CPUs (%s), load %s → %s\n", r.Started.Format(time.RFC3339), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.LoadAvg, r.Machine.LoadAfter)
	keys := make([]string, 0, len(r.Settings))
	for k := range r.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %v\n", k, r.Settings[k])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\tservice\tdirect\tservice/direct\tn\tnote")
	for _, x := range r.Results {
		dir, ratio := "-", "-"
		if x.Direct != nil {
			dir = num(*x.Direct)
		}
		if x.Ratio != nil {
			ratio = strconv.FormatFloat(*x.Ratio, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\t%d\t%s\n", x.Scenario, x.Metric, x.Unit, num(x.Service), dir, ratio, x.N, x.Note)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// num formats a figure with three significant digits or so.
func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
