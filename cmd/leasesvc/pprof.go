package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves Go's runtime profiles (net/http/pprof, under
// /debug/pprof/) on addr, a loopback address of its own, apart from the
// API: what docs/performance.md's CPU profiles of an instance are taken
// from. Off when addr is empty. A non-loopback host is refused: the
// profiles show request contents and cost CPU, and are for the operator at
// the machine, never the network.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("LEASESVC_PPROF_ADDR=%q: want host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("LEASESVC_PPROF_ADDR=%q: must be a loopback address (127.0.0.1:6060, [::1]:6060, localhost:6060)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("LEASESVC_PPROF_ADDR=%q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Warn("runtime profiles served: keep this address private", "pprofAddr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
