package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// command is one leasectl subcommand. Adding a subcommand is one entry in
// commands: its help, its completion and its dispatch all come from it. Its
// run function makes its FlagSet with e.flags and parses it with parse (or
// parseFlags), which answer --help and name the flag of a bad value.
type command struct {
	name    string // what the user types
	args    string // the usage line after the name, e.g. "NAME" or "NAME [flags] -- CMD [ARGS...]"
	summary string // one line for `leasectl --help`
	about   string // paragraphs for `leasectl NAME --help`
	example string // one or more example command lines
	json    bool   // it takes --json
	offline bool   // it never calls the service: no --url or credential flags
	run     func(ctx context.Context, e *env, args []string) error
}

// commands is the table of subcommands, in the order `leasectl --help`
// lists them. It is a function, not a variable, because the commands' own
// functions refer back to it.
func commands() []command {
	return []command{
		{
			name: "acquire", args: "NAME", json: true, run: cmdAcquire,
			summary: "acquire a lease, or wait for another's holding to end",
			about: "Acquires the lease NAME for the holder and prints it, with the fencing token that renew\n" +
				"and release need. If another holder has it, prints that holding and exits 3; with --wait,\n" +
				"first waits up to that long for it to end. Acquiring a lease you already hold renews it.\n" +
				"A free lease reserved for another holder (the best waiting candidate, or a transfer's\n" +
				"successor) also exits 3. With --wait and --priority the acquire waits as a ranked candidate;\n" +
				"--preempt also asks a holder of a lower priority to step down.",
			example: "leasectl acquire team-a.scheduler --holder agent-1 --ttl 30s\nLEASESVC_HOLDER=agent-1 leasectl acquire team-a.scheduler --wait 20s --json",
		},
		{
			name: "renew", args: "NAME", json: true, run: cmdRenew,
			summary: "extend a holding before it expires",
			about: "Renews the holding of NAME by the holder with the given fencing token: the lease then\n" +
				"expires a TTL from now. Exits 4 if that holding is over (the lease is lost: stop acting on it).",
			example: "leasectl renew team-a.scheduler --holder agent-1 --fencing-token 3",
		},
		{
			name: "release", args: "NAME", json: true, run: cmdRelease,
			summary: "end a holding",
			about: "Releases the holding of NAME by the holder with the given fencing token, so that another\n" +
				"holder can acquire it at once. Exits 4 if that holding is already over.",
			example: "leasectl release team-a.scheduler --holder agent-1 --fencing-token 3",
		},
		{
			name: "transfer", args: "NAME", json: true, run: cmdTransfer,
			summary: "hand a holding over to a named successor",
			about: "Ends the holding of NAME by the holder with the given fencing token, as release does, and\n" +
				"reserves the lease for the holder --to for --reserve: its acquire gets the next fencing token\n" +
				"and the checkpoint (--checkpoint, else the last one written), anyone else's exits 3 meanwhile.\n" +
				"Repeating it succeeds while nobody has acquired since. Exits 4 if that holding is already over.",
			example: "leasectl transfer team-a.scheduler --holder agent-1 --fencing-token 3 --to agent-2 --checkpoint '{\"offset\":812}'",
		},
		{
			name: "revoke", args: "NAME", json: true, run: cmdRevoke,
			summary: "end another's holding as an operator (admin)",
			about: "Ends the live holding of NAME as an operator (the admin verb of the policy) and prints the\n" +
				"lease after it. The holder's next renew fails; the next acquire gets the next fencing token.\n" +
				"With --fencing-token, revokes only that holding and exits 4 if it is not the live one; a lease\n" +
				"that is not held is printed unchanged. Exits 5 if NAME never existed.",
			example: "leasectl revoke team-a.scheduler --reason \"stuck leader\" --fencing-token 3",
		},
		{
			name: "delete", args: "NAME", json: true, run: cmdDelete,
			summary: "delete a lease nobody holds",
			about: "Deletes the lease NAME, which nobody may hold or have reserved, and prints it as it was\n" +
				"(the delete verb of the policy, or admin). It is then not found to get, list and watch, but\n" +
				"its fencing token is kept: the next acquire of NAME gets the next token. Exits 3 if it is\n" +
				"held or reserved, 5 if it never existed or is already deleted.",
			example: "leasectl delete team-a.old-job",
		},
		{
			name: "get", args: "NAME", json: true, run: cmdGet,
			summary: "show a lease",
			about:   "Prints the lease NAME: its holder, fencing token and remaining time. Exits 5 if it never existed.",
			example: "leasectl get team-a.scheduler --json | jq .fencingToken",
		},
		{
			name: "list", json: true, run: cmdList,
			summary: "list leases",
			about: "Lists the leases whose names start with --prefix (all of them by default), every page, or\n" +
				"one page with --page-size; the next page's token is printed under the table.",
			example: "leasectl list --prefix team-a.",
		},
		{
			name: "watch", args: "NAME | --prefix P", json: true, run: cmdWatch,
			summary: "print a lease, then each change of its holding",
			about: "Prints the lease NAME as it is now, then one line per change of holding (acquired,\n" +
				"released, revoked, expired) until interrupted; with --json, one JSON event per line. Exits 5\n" +
				"if NAME has never been acquired, unless --missing-ok, which waits for its first acquire.\n" +
				"With --prefix P, follows every lease whose name starts with P instead: one line per lease\n" +
				"now, then every change. A watch reconnects by itself for as long as it runs, resuming after\n" +
				"the last event it printed.",
			example: "leasectl watch team-a.scheduler\nleasectl watch team-a.scheduler --missing-ok --json\nleasectl watch --prefix team-a.",
		},
		{
			name: "run", args: "NAME [flags] -- CMD [ARGS...]", run: cmdRun,
			summary: "run a command only while holding a lease",
			about: "Campaigns for the lease NAME and runs CMD only while it leads, with LEASE_NAME, LEASE_HOLDER,\n" +
				"LEASE_FENCING_TOKEN and LEASESVC_PROOF (the service's signed proof of the holding: pass it, not\n" +
				"the bare token, to stores that verify it, docs/fencing.md) in its environment. When leadership\n" +
				"ends, CMD gets SIGTERM, then SIGKILL after --grace, and is gone a grace period before anyone\n" +
				"else can hold the lease; run then campaigns again (a new acquire, a new fencing token) and\n" +
				"starts CMD again when it leads, or exits 4 with --exit-on-loss. When CMD ends by itself, the\n" +
				"lease is released and leasectl exits with CMD's status; on SIGINT or SIGTERM it stops CMD the\n" +
				"same way, releases the lease and exits with CMD's status. The holder is --holder, else\n" +
				"$LEASESVC_HOLDER, else {hostname}-{pid}. --lease NAME is the older spelling of NAME; give the\n" +
				"name once.\n\n" +
				"run holds the lease through a session (docs/contract.md §14): it heartbeats every window/4 and,\n" +
				"if leasectl crashes, the service frees the lease within the window. The window is --window, else\n" +
				"$LEASESVC_WINDOW, else 1s (or 6×--grace when that is longer); CMD's grace is a tenth of it unless\n" +
				"--grace says otherwise. A leader whose heartbeats are not answered within the window loses its\n" +
				"term: on a busy host (a browser starting, a build) pick a window of a few seconds, which is then\n" +
				"also how long a crashed leader keeps the lease (docs/agents.md). Through a session --ttl does not\n" +
				"apply (the service holds the lease at its session TTL; a line on stderr says so). Against a\n" +
				"service without sessions, or with --plain-renewals, run renews every --ttl/3 instead. A line on\n" +
				"stderr says which.\n\n" +
				"On Linux a guard process watches CMD's whole process tree (every process CMD starts, even one\n" +
				"that leaves its process group) and holds the safe deadline: it stops the tree the same way when\n" +
				"the deadline passes without a renewal, even if leasectl is frozen, and as soon as leasectl\n" +
				"dies (SIGKILL, the OOM killer); what CMD leaves running when it ends is stopped too.\n\n" +
				"While it waits, run is a candidate of --priority; with --preempt it asks a leader of a lower\n" +
				"priority to step down. A leader asked to step down stops CMD the same way, releases the lease\n" +
				"and exits 4. $LEASE_CHECKPOINT_FILE holds the checkpoint CMD's term inherited (a JSON object;\n" +
				"empty when there is none; $LEASE_CHECKPOINT_TOKEN is the fencing token that wrote it). CMD\n" +
				"records its progress by replacing the file with a JSON object of at most 16 KiB (write a file\n" +
				"next to it and rename it over it); run sends each new content with its next renewal and the\n" +
				"last with its release, so the next leader inherits it.",
			example: "leasectl run team-a.scheduler -- ./scheduler --flag\n" +
				"leasectl run team-a.scheduler --window 5s --exit-on-loss -- ./scheduler\n" +
				"leasectl run team-a.scheduler --priority 10 --preempt -- ./scheduler --resume-from-checkpoint",
		},
		{
			name: "mcp", run: cmdMCP,
			summary: "serve leases to an LLM agent as MCP tools (stdio)",
			about: "Serves the Model Context Protocol on stdin and stdout for one LLM agent: tools to acquire,\n" +
				"release, read, list and claim leases; each holding comes with its fencing token. The leases\n" +
				"are held through a session of the service (docs/contract.md §14): released when stdin closes\n" +
				"or on SIGINT/SIGTERM, and freed within the session's window (--window, else $LEASESVC_WINDOW,\n" +
				"else 1s) after SIGKILL. Through a session --ttl and a tool's ttlSeconds do not apply. With\n" +
				"--plain-renewals, or against a service without sessions, the leases are renewed every ttl/3\n" +
				"instead and expire at their TTL after SIGKILL; a line on stderr and the server's instructions\n" +
				"say which. The holder is --holder, else $LEASESVC_HOLDER, else {hostname}-{pid}. See\n" +
				"docs/agents.md.",
			example: "leasectl mcp --url http://localhost:8080 --holder agent-7 --window 3s",
		},
		{
			name: "fence", args: "jwks", run: cmdFence,
			summary: "print the service's public keys of fencing proofs (JWKS)",
			about: "Prints the JSON Web Key Set of GET /.well-known/jwks.json: the keys that verify the proofs\n" +
				"the service hands to holders (docs/contract.md §17). Save it for a sink without network, which\n" +
				"loads it with fence.ParseJWKS; a sink with network fetches it itself. The route is public: no\n" +
				"credentials are sent. See docs/fencing.md.",
			example: "leasectl fence jwks > jwks.json",
		},
		{
			name: "version", offline: true, run: cmdVersion,
			summary: "print leasectl's version",
			about:   "Prints the version of leasectl, the commit it was built from (when known) and its Go version.",
			example: "leasectl version",
		},
		{
			name: "completion", args: "bash|zsh|fish", offline: true, run: cmdCompletion,
			summary: "print a shell completion script",
			about: "Prints the completion script of a shell: commands, their flags, and files for --token-file.\n" +
				"Load it in the shell's start-up file.",
			example: "source <(leasectl completion bash)                      # ~/.bashrc\n" +
				"leasectl completion zsh > \"${fpath[1]}/_leasectl\"        # then: autoload -U compinit && compinit\n" +
				"leasectl completion fish > ~/.config/fish/completions/leasectl.fish",
		},
	}
}

// lookup returns the command named name.
func lookup(name string) (command, bool) {
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands()[i], true
}

// globalFlags are the flags e.flags adds to every command, in help order.
var globalFlags = []string{"url", "token", "token-file", "json"}

// globalFlagHelp is how the help lists the global flags: their defaults
// come from the environment, which the help names rather than shows.
var globalFlagHelp = map[string]string{
	"url":        "--url URL          the service's base URL (default $LEASESVC_URL, else http://localhost:8080)",
	"token":      "--token TOKEN      bearer token to send (default $LEASESVC_TOKEN); never printed",
	"token-file": "--token-file FILE  file holding the bearer token, trimmed (default $LEASESVC_TOKEN_FILE)",
	"json":       "--json             print JSON instead of a table",
}

// writeTopHelp writes `leasectl --help`.
func writeTopHelp(w io.Writer) error {
	var b strings.Builder
	b.WriteString("leasectl drives leasesvc from a shell: acquire, renew, release, transfer, get, list, watch and\n" +
		"delete leases, revoke a holding as an operator, and run a command only while holding a lease.\n\n" +
		"Usage:\n  leasectl [global flags] COMMAND [ARGS] [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
	}
	b.WriteString("  help        show the help of a command (leasectl help COMMAND)\n\n" +
		"Global flags, of every command that calls the service, before or after COMMAND:\n")
	for _, name := range globalFlags {
		b.WriteString("  " + globalFlagHelp[name])
		if name == "json" {
			b.WriteString(" (commands that print leases)")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nWithout --token or --token-file, an https URL gets Google ID tokens for it when Application\n" +
		"Default Credentials can make them (on Cloud Run, GKE, GCE, or with GOOGLE_APPLICATION_CREDENTIALS).\n" +
		"Durations take a unit: 30s, 1m30s, 500ms.\n\n" +
		"Exit status: 0 success; 1 error; 2 usage; 3 held by or reserved for another (acquire, delete); 4 lease\n" +
		"lost (renew, release, transfer, revoke --fencing-token, run --exit-on-loss losing leadership, run\n" +
		"stepping down); 5 no such lease (get, revoke, watch, delete); 6 service unavailable or rate limited;\n" +
		"7 credentials missing or refused, or permission denied.\n" +
		"run exits with CMD's status when CMD ends by itself (128+signal if it was killed), 127 when CMD\n" +
		"cannot be started, 130 when interrupted before CMD started; after a lost term it campaigns again.\n\n" +
		"Run 'leasectl COMMAND --help' for a command's flags and an example.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCommandHelp writes `leasectl NAME --help`, listing the flags of fs.
func writeCommandHelp(w io.Writer, c command, fs *flag.FlagSet) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: leasectl %s", c.name)
	if c.args != "" {
		b.WriteString(" " + c.args)
	}
	var own, global []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(globalFlags, f.Name) {
			global = append(global, f)
		} else {
			own = append(own, f)
		}
	})
	if len(own)+len(global) > 0 && !strings.Contains(c.args, "[flags]") {
		b.WriteString(" [flags]")
	}
	b.WriteString("\n\n" + c.about + "\n")
	if len(own) > 0 {
		b.WriteString("\nFlags:\n")
		var names []string
		for _, f := range own {
			names = append(names, flagSynopsis(f))
		}
		width := 0
		for _, n := range names {
			width = max(width, len(n))
		}
		for i, f := range own {
			_, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(&b, "  %-*s  %s", width, names[i], usage)
			if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" {
				fmt.Fprintf(&b, " (default %s)", d)
			}
			b.WriteString("\n")
		}
	}
	if len(global) > 0 {
		b.WriteString("\nGlobal flags (before or after the command's name):\n")
		for _, name := range globalFlags {
			if fs.Lookup(name) != nil {
				b.WriteString("  " + globalFlagHelp[name] + "\n")
			}
		}
	}
	b.WriteString("\nExample:\n")
	for l := range strings.SplitSeq(c.example, "\n") {
		b.WriteString("  " + l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// placeholders name the values of the flags whose usage has no `quoted`
// word, by the flag's name (other string flags get VALUE, numbers N).
var placeholders = map[string]string{"holder": "HOLDER", "metadata": "JSON", "reason": "TEXT", "prefix": "PREFIX", "page-token": "TOKEN",
	"checkpoint": "JSON", "to": "HOLDER"}

// flagSynopsis is "--name VALUE" for a flag: VALUE is the `quoted` word of
// its usage, else a placeholder for its name or type.
func flagSynopsis(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	switch _, isDuration := f.Value.(*durationValue); {
	case isDuration:
		name = "duration"
	case placeholders[f.Name] != "":
		name = placeholders[f.Name]
	case name == "string":
		name = "value"
	case name == "int":
		name = "n"
	}
	if name == "" { // a bool flag
		return "--" + f.Name
	}
	return "--" + f.Name + " " + strings.ToUpper(name)
}

// isBoolFlag reports whether f takes no value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// durationValue is a duration flag whose error says what a duration looks
// like.
type durationValue time.Duration

// duration defines a duration flag on fs.
func duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	fs.Var((*durationValue)(p), name, usage)
	return p
}

func (d *durationValue) String() string { return (*time.Duration)(d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return fmt.Errorf("a duration needs a unit, such as %q", s+"s")
		}
		return errors.New("not a duration; write one such as 30s, 1m30s or 500ms")
	}
	*d = durationValue(v)
	return nil
}

// The flag package's error messages, whose flag names parseFlags rewrites
// in the --name form of the help.
var (
	flagInvalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:\s]+): (.*)$`)
	flagUndefined    = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNeedsArg     = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// parseFlags parses args into fs. --help gives flag.ErrHelp (the
// dispatcher then prints the command's help); any other mistake is a usage
// error of one line naming the flag.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if m := flagInvalidValue.FindStringSubmatch(msg); m != nil {
		detail := m[3]
		if detail == "parse error" {
			detail = "not a whole number"
		}
		msg = fmt.Sprintf("--%s %s: %s", m[2], m[1], detail)
	} else if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("unknown flag --%s", m[1])
	} else if m := flagNeedsArg.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("--%s needs a value", m[1])
	}
	return usageError("%s: %s (see leasectl %s --help)", commandName(fs), msg, commandName(fs))
}

// commandName is the subcommand of a FlagSet made by e.flags.
func commandName(fs *flag.FlagSet) string { return strings.TrimPrefix(fs.Name(), "leasectl ") }

// flagError is a usage error about one flag's value, with the command's
// help pointed at.
func flagError(fs *flag.FlagSet, format string, args ...any) error {
	return usageError("%s: %s (see leasectl %s --help)", commandName(fs), fmt.Sprintf(format, args...), commandName(fs))
}

// maxWait is the longest --wait: the service's limit on waitMs
// (docs/contract.md).
const maxWait = 60 * time.Second

// checkTTL checks a --ttl (or another lease duration): positive whole
// milliseconds. The service checks its own bounds (1s … 1h by default).
func checkTTL(fs *flag.FlagSet, name string, d time.Duration) error {
	if d <= 0 || d%time.Millisecond != 0 {
		return flagError(fs, "--%s %s: must be a positive whole number of milliseconds, such as 30s", name, seconds(d))
	}
	return nil
}

// checkWait checks --wait: 0 … 60s, whole milliseconds.
func checkWait(fs *flag.FlagSet, d time.Duration) error {
	if d < 0 || d > maxWait || d%time.Millisecond != 0 {
		return flagError(fs, "--wait %s: must be between 0s and %s (whole milliseconds)", seconds(d), seconds(maxWait))
	}
	return nil
}

// seconds writes a duration of whole seconds as the user would ("90s", not
// "1m30s").
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// requestFlags maps the fields of a request, as an invalid_argument
// problem names them, to the flag or argument that set them.
var requestFlags = map[string]string{
	"name": "NAME", "holder": "--holder", "ttlMs": "--ttl", "waitMs": "--wait", "metadata": "--metadata",
	"fencingToken": "--fencing-token", "reason": "--reason", "prefix": "--prefix", "pageSize": "--page-size",
	"pageToken": "--page-token", "priority": "--priority", "preempt": "--preempt", "checkpoint": "--checkpoint",
	"to": "--to", "reserveMs": "--reserve",
}

// explainInvalid turns the service's refusal of an argument
// (invalid_argument naming fields) into a usage error naming the flags.
func explainInvalid(cmd string, err error) error {
	var ce *client.Error
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ce) || len(ce.Fields) == 0 {
		return err
	}
	var parts []string
	for _, f := range ce.Fields {
		name := requestFlags[f.Field]
		if name == "" {
			name = f.Field
		}
		parts = append(parts, name+": "+f.Detail)
	}
	msg := fmt.Sprintf("%s: the service refused %s (see leasectl %s --help)", cmd, strings.Join(parts, "; "), cmd)
	return &exitError{code: exitUsage, err: refusedError{msg: msg, err: err}}
}

// refusedError is the service's refusal retold in the flags' names; it
// unwraps to the client's error.
type refusedError struct {
	msg string
	err error
}

func (e refusedError) Error() string { return e.msg }
func (e refusedError) Unwrap() error { return e.err }
