package e2e

import (
	"net"
	"os"
	"testing"
)

// TestListens: a port this process listens on is found among its sockets;
// a port it has closed, or one only another process could hold, is not
// (StartService's check that /healthz came from its own child).
func TestListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if !listens(os.Getpid(), port) {
		t.Fatalf("listens(self, %d) = false while listening", port)
	}
	if listens(1, port) {
		t.Fatalf("listens(1, %d) = true: the socket is this process's", port)
	}
	_ = ln.Close()
	if listens(os.Getpid(), port) {
		t.Fatalf("listens(self, %d) = true after close", port)
	}
}
