package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/oauth2"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/googleauth"
)

// defaultURL is the service leasectl calls without --url or LEASESVC_URL.
const defaultURL = "http://localhost:8080"

// env is what one invocation works with.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// idTokens makes a source of Google ID tokens for an audience; hc, if
	// not nil, is the HTTP client of the Client. Tests replace both.
	idTokens func(ctx context.Context, audience string) (oauth2.TokenSource, error)
	hc       *http.Client

	cmd       *command      // the command being run
	fs        *flag.FlagSet // its flags, once it made them (for its --help)
	json      bool
	url       string
	token     string // --token
	tokenFile string // --token-file
	creds     credentials
}

// run is leasectl: main only calls it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr, idTokens: googleauth.IDTokenSource}
	return e.run(ctx, args)
}

// run runs the command of args. The global flags may come before the
// command's name (leasectl --url U get X) as well as after it.
func (e *env) run(ctx context.Context, args []string) error {
	pre, args, err := leadingFlags(args)
	if err != nil {
		return err
	}
	if len(args) == 0 && len(pre) > 0 {
		return usageError("missing COMMAND after %s (run 'leasectl --help' for the commands)", strings.Join(pre, " "))
	}
	if len(args) == 0 {
		_, _ = io.WriteString(e.stderr, "usage: leasectl [global flags] COMMAND [ARGS] [flags]; run 'leasectl --help' for the commands\n")
		return &exitError{code: exitUsage, quiet: true}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return writeTopHelp(e.stdout)
	case "--version":
		return e.run(ctx, []string{"version"})
	case "help":
		if len(args) == 1 {
			return writeTopHelp(e.stdout)
		}
		return e.run(ctx, []string{args[1], "--help"})
	}
	cmd, ok := lookup(args[0])
	if !ok {
		return usageError("unknown command %q (run 'leasectl --help' for the commands)", args[0])
	}
	e.cmd = &cmd
	err = cmd.run(ctx, e, append(cmd.takes(pre), args[1:]...))
	if errors.Is(err, flag.ErrHelp) && e.fs != nil {
		return writeCommandHelp(e.stdout, cmd, e.fs)
	}
	return e.unreachable(e.creds.explain(explainInvalid(cmd.name, err)))
}

// unreachable adds to an error of a service that refused the connection,
// or whose host is unknown, where leasectl looked for it and how to point
// it elsewhere.
func (e *env) unreachable(err error) error {
	var dns *net.DNSError
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.As(err, &dns) {
		return err
	}
	from := "--url"
	if e.url == e.getenv("LEASESVC_URL") {
		from = "LEASESVC_URL"
	}
	if e.getenv("LEASESVC_URL") == "" && e.url == defaultURL {
		from = "the default"
	}
	return hintError{err: err, hint: fmt.Sprintf("no leasesvc answers at %s (%s): start it, or point leasectl at it with --url URL or LEASESVC_URL", e.url, from)}
}

// hintError is an error with a hint after it; it unwraps to the error, so
// the exit status stays the error's.
type hintError struct {
	err  error
	hint string
}

func (h hintError) Error() string { return h.err.Error() + "\n  hint: " + h.hint }
func (h hintError) Unwrap() error { return h.err }

// leadingFlags splits the global flags (and their values) that come before
// the command's name off args. --help, -h and --version are not among them:
// they are commands of their own there.
func leadingFlags(args []string) (pre, rest []string, err error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		switch args[0] {
		case "-h", "-help", "--help", "--version":
			return pre, args, nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !slices.Contains(globalFlags, name) {
			return nil, nil, usageError("unknown flag %s before the command: only the global flags (--%s) may come before it (run 'leasectl --help')",
				args[0], strings.Join(globalFlags, ", --"))
		}
		n := 1
		if !hasValue && name != "json" { // json is the only bool among them
			if len(args) < 2 {
				return nil, nil, usageError("%s needs a value", args[0])
			}
			n = 2
		}
		pre, args = append(pre, args[:n]...), args[n:]
	}
	return pre, args, nil
}

// takes returns the leading global flags that c takes: an alias such as
// leasectl --url U --json works with every command, and a command that
// does not call the service (or print leases) ignores them.
func (c command) takes(pre []string) []string {
	var out []string
	for i := 0; i < len(pre); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(pre[i], "-"), "=")
		n := 1
		if !hasValue && name != "json" {
			n = 2
		}
		if !c.offline && (name != "json" || c.json) {
			out = append(out, pre[i:i+n]...)
		}
		i += n - 1
	}
	return out
}

// flags returns the FlagSet of the command name with the flags every
// command takes: --url and the credentials (unless the command is
// offline), and --json for the commands that print leases.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasectl "+name, flag.ContinueOnError)
	// Nothing printed by the flag package: parseFlags reports mistakes in
	// one line, and the dispatcher prints --help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	e.fs = fs
	if e.cmd != nil && e.cmd.offline {
		return fs
	}
	if e.cmd == nil || e.cmd.json {
		fs.BoolVar(&e.json, "json", false, "print JSON instead of a table")
	}
	url := e.getenv("LEASESVC_URL")
	if url == "" {
		url = defaultURL
	}
	fs.StringVar(&e.url, "url", url, "the service's base `URL` (env LEASESVC_URL)")
	// No defaults from the environment here: credentials() reads it.
	fs.StringVar(&e.token, "token", "", "bearer `token` to send (env LEASESVC_TOKEN); never printed")
	fs.StringVar(&e.tokenFile, "token-file", "", "`file` holding the bearer token, trimmed (env LEASESVC_TOKEN_FILE)")
	return fs
}

// parse parses args, which hold exactly `want` positional arguments, before
// or among the flags; it returns them.
func parse(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != len(want) {
		if len(want) == 0 {
			return nil, flagError(fs, "takes no argument, got %q", pos)
		}
		if len(pos) < len(want) {
			return nil, flagError(fs, "missing %s", strings.Join(want[len(pos):], " "))
		}
		return nil, flagError(fs, "want %s, got %q", strings.Join(want, " "), pos)
	}
	return pos, nil
}

// holder returns --holder, else LEASESVC_HOLDER; a usage error when
// neither is set. There is no made-up default: renew and release must send
// the holder that acquired, so the user must know it.
func (e *env) holder(fs *flag.FlagSet, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if h := e.getenv("LEASESVC_HOLDER"); h != "" {
		return h, nil
	}
	return "", flagError(fs, "--holder is required (or set LEASESVC_HOLDER): the holder's identity, which renew and release must repeat")
}

// client returns a Client of the chosen service, with the invocation's
// credentials.
func (e *env) client(ctx context.Context) (*client.Client, error) {
	ts, err := e.credentials(ctx)
	if err != nil {
		return nil, err
	}
	c, err := client.New(e.url, client.Config{HTTPClient: e.hc, TokenSource: ts})
	if err != nil {
		return nil, usageError("%v", err)
	}
	return c, nil
}

// metadataFlag parses --metadata: a JSON object.
func metadataFlag(fs *flag.FlagSet, s string) (json.RawMessage, error) {
	return objectFlag(fs, "metadata", s)
}

// objectFlag parses the flag name whose value s must be a JSON object;
// nil when it is empty.
func objectFlag(fs *flag.FlagSet, name, s string) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("got null")
		}
		return nil, flagError(fs, "--%s must be a JSON object: %v", name, err)
	}
	return json.RawMessage(s), nil
}
