package emulators

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// kind describes one emulator: how to find it, start it and tell it is up.
type kind struct {
	// name is the emulator's name in messages ("Firestore").
	name string
	// id names its log file.
	id string
	// env is the variable the client libraries read its host:port from.
	env string
	// install says what to install to get it.
	install string
	// missing returns what is missing under the Cloud SDK root, or "".
	missing func(sdkRoot string) string
	// command returns the command line that serves the emulator on port.
	command func(sdkRoot string, port int) ([]string, error)
	// ready returns nil once the emulator at addr answers.
	ready func(ctx context.Context, addr string) error
	// warm, if set, loads the emulator once it answers and its environment
	// variable is set, so tests do not meet a cold JVM.
	warm func() error
}

var firestoreKind = &kind{
	name: "Firestore",
	id:   "firestore",
	env:  FirestoreHostEnv,
	install: "the Firestore emulator is not available: install the Google Cloud CLI (gcloud on PATH), " +
		"its cloud-firestore-emulator component (gcloud components install cloud-firestore-emulator) and a Java JRE, " +
		"or set FIRESTORE_EMULATOR_HOST to a running emulator",
	missing: func(root string) string {
		if !fileExists(sdkPath(root, "platform", "cloud-firestore-emulator", "cloud_firestore_emulator")) {
			return "component cloud-firestore-emulator"
		}
		return missingJava()
	},
	command: func(_ string, port int) ([]string, error) {
		return []string{"gcloud", "emulators", "firestore", "start", "--host-port=" + hostPort(port)}, nil
	},
	ready: httpOK,
	warm:  warmFirestore,
}

var pubsubKind = &kind{
	name: "Pub/Sub",
	id:   "pubsub",
	env:  PubSubHostEnv,
	install: "the Pub/Sub emulator is not available: install the Google Cloud CLI (gcloud on PATH), " +
		"its beta and pubsub-emulator components (gcloud components install beta pubsub-emulator) and a Java JRE, " +
		"or set PUBSUB_EMULATOR_HOST to a running emulator",
	missing: func(root string) string {
		if !fileExists(sdkPath(root, "platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator")) {
			return "component pubsub-emulator"
		}
		if !fileExists(sdkPath(root, ".install", "beta.manifest")) {
			return "component beta"
		}
		return missingJava()
	},
	command: func(_ string, port int) ([]string, error) {
		return []string{"gcloud", "beta", "emulators", "pubsub", "start", "--project=" + project, "--host-port=" + hostPort(port)}, nil
	},
	ready: httpOK,
}

var spannerKind = &kind{
	name: "Spanner",
	id:   "spanner",
	env:  SpannerHostEnv,
	install: "the Spanner emulator is not available: install the Google Cloud CLI (gcloud on PATH) " +
		"and its cloud-spanner-emulator component (gcloud components install cloud-spanner-emulator), " +
		"or set SPANNER_EMULATOR_HOST to a running emulator",
	missing: func(root string) string {
		if !fileExists(spannerGateway(root)) {
			return "component cloud-spanner-emulator"
		}
		return ""
	},
	command: func(root string, port int) ([]string, error) {
		httpPort, err := freePort()
		if err != nil {
			return nil, err
		}
		return []string{spannerGateway(root), "--hostname", "127.0.0.1",
			"--grpc_port", strconv.Itoa(port), "--http_port", strconv.Itoa(httpPort)}, nil
	},
	ready: tcpOpen,
}

func spannerGateway(root string) string {
	return sdkPath(root, "bin", "cloud_spanner_emulator", "gateway_main")
}

// missingJava names the Java runtime when it is not on PATH.
func missingJava() string {
	if _, err := exec.LookPath("java"); err != nil {
		return "a Java runtime (java on PATH)"
	}
	return ""
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("emulators: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("emulators: free port %d: %w", port, err)
	}
	return port, nil
}

// tcpOpen returns nil when addr accepts a TCP connection.
func tcpOpen(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("close connection to %s: %w", addr, err)
	}
	return nil
}

// httpOK returns nil when GET http://addr/ answers 200 "Ok", as the Java
// emulators do once they serve requests.
func httpOK(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return fmt.Errorf("build request to %s: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET http://%s/: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return fmt.Errorf("GET http://%s/: read body: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "Ok" {
		return fmt.Errorf("GET http://%s/ = %s %q, want 200 \"Ok\"", addr, resp.Status, body)
	}
	return nil
}
