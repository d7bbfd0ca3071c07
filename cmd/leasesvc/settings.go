package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/leasesvc/leasesvc/backend"
)

// coreSettings declares the service's own settings. With the settings of
// every registered backend (backend.Registered) they make `leasesvc -h` and
// README's settings table, which a test compares, so neither can drift.
// Default and Usage are Markdown (code spans and links); -h prints them
// without the marks.
var coreSettings = []backend.Setting{
	{Env: "PORT", Default: "`8080`", Usage: "listen port (Cloud Run sets it)"},
	{Env: "LEASESVC_BACKEND", Default: "`memory`", Usage: "the backend (below)"},
	{Env: "LEASESVC_MIN_TTL", Default: "`1s`", Usage: "shortest `ttlMs` a holder may ask for (a Go duration)"},
	{Env: "LEASESVC_MAX_TTL", Default: "`1h`", Usage: "longest `ttlMs` a holder may ask for"},
	{Env: "LEASESVC_LOG_LEVEL", Default: "`info`", Usage: "`debug`, `info`, `warn`, `error`; logs are JSON lines on stdout"},
	{Env: "LEASESVC_DRAIN_TIMEOUT", Default: "`5s`", Usage: "on SIGTERM, how long in-flight requests may finish (waiting acquires and `:watch` streams are ended at once); shorter than `LEASESVC_SHUTDOWN_TIMEOUT`"},
	{Env: "LEASESVC_PROJECT", Default: "`GOOGLE_CLOUD_PROJECT`", Usage: "Google Cloud project (Firestore, Pub/Sub topic IDs, trace IDs)"},
	{Env: "LEASESVC_PUBSUB_TOPIC", Default: "(no events)", Usage: "leadership events: a topic ID in `LEASESVC_PROJECT`, or `projects/P/topics/T` ([docs/events.md](docs/events.md))"},
	{Env: "LEASESVC_RECENT_EVENTS", Default: "`2048`", Usage: "how many recent changes of holding (all leases) each instance keeps in memory (each about 1 KiB plus its lease's metadata), 0 … 1,000,000: what a resumed prefix stream replays and the dashboard's timelines show ([docs/contract.md §10](docs/contract.md#10-watching-many-leases))"},
	{Env: "LEASESVC_INSTANCE_ID", Default: "host name + random", Usage: "this instance's name: its Pub/Sub subscription and sweeper identity (`[a-z][a-z0-9-]{0,59}`)"},
	{Env: "LEASESVC_TELEMETRY", Default: "`none`", Usage: "`none`, `stdout` or `otlp` (OpenTelemetry traces and metrics; `otlp` honours `OTEL_EXPORTER_OTLP_*`, and on Cloud Run defaults to Google Cloud's telemetry endpoint)"},
	{Env: "LEASESVC_PPROF_ADDR", Default: "(off)", Usage: "a loopback `host:port` on which the instance serves Go's runtime profiles (`/debug/pprof/`), apart from the API; for an operator at the machine ([docs/performance.md](docs/performance.md#where-a-heartbeats-cpu-goes))"},
	{Env: "LEASESVC_METRICS_LEASES", Default: "`100`", Usage: "how many lease names get metric series of their own on each instance, 0 … 10,000; the others share `lease=\"_other\"` ([docs/operations.md](docs/operations.md#metrics))"},
	{Env: "LEASESVC_AUTH", Default: "`none`", Usage: "`none` (anyone may do anything; logs a warning), `google` (Google-signed ID tokens; the principal is the verified email) or `static` (a tokens file)"},
	{Env: "LEASESVC_AUTH_AUDIENCES", Default: "on Cloud Run `https://$K_SERVICE-PROJECT_NUMBER.REGION.run.app`; elsewhere required", Usage: "`google`: accepted ID-token audiences, comma-separated; never taken from the request"},
	{Env: "LEASESVC_AUTH_TOKENS", Usage: "`static`: path of the tokens file (bearer token → principal)"},
	{Env: "LEASESVC_POLICY", Usage: "path of the policy file (YAML or JSON) granting principals `read`, `acquire`, `delete` or `admin` on lease-name prefixes; required with `google` and `static`, refused with `none`"},
	{Env: "LEASESVC_RATE_LIMIT", Default: "`100` with auth, `0` (off) with `none`", Usage: "requests per second per principal (per client address with `none`), session `acquire`, `renew`, `release` and `transfer` included (they leave half the burst to the rest); over it `429` + `Retry-After` (a session message: `error` `429` with `retryAfter`)"},
	{Env: "LEASESVC_RATE_BURST", Default: "2 × the rate", Usage: "requests at once per principal"},
	{Env: "LEASESVC_ALLOWED_HOSTS", Default: "loopback names only", Usage: "with `LEASESVC_AUTH=none`: the `Host` names besides `localhost`, `*.localhost`, `127.0.0.0/8` and `[::1]` that the API answers (comma-separated; `*`: any); another is `403 host_not_allowed`, so DNS rebinding reaches nothing. Set it when clients reach the service by another name (Cloud Run URL, container name) ([docs/security.md](docs/security.md#cross-site-requests))"},
	{Env: "LEASESVC_ALLOWED_ORIGINS", Default: "the service's own origin", Usage: "other origins (`https://tools.example.com`, comma-separated) whose requests, by their `Origin` header, are served; any other is `403 origin_not_allowed`. No CORS preflight is answered"},
	{Env: "LEASESVC_LISTEN", Default: "`127.0.0.1` with `LEASESVC_AUTH=none` off Cloud Run; every interface otherwise", Usage: "IP address to listen on (`0.0.0.0`, `::`, `127.0.0.1`)"},
	{Env: "LEASESVC_HEADER_TIMEOUT", Default: "`10s`", Usage: "a request's headers must arrive within it, and an upgraded session socket's `open` or `resume` (else `error` `408 request_timeout` and close `1008`)"},
	{Env: "LEASESVC_BODY_TIMEOUT", Default: "`10s`", Usage: "a request's body must arrive within it of its headers; else `408` and the connection is closed"},
	{Env: "LEASESVC_IDLE_TIMEOUT", Default: "`2m`", Usage: "idle keep-alive connections are closed after it"},
	{Env: "LEASESVC_MAX_STREAMS_PER_CALLER", Default: "`100`", Usage: "open `:watch` streams per caller (principal; client address with `none`); beyond, `429` + `Retry-After`"},
	{Env: "LEASESVC_MAX_STREAMS", Default: "`10000`", Usage: "open `:watch` streams per instance; beyond, `429` + `Retry-After`"},
	{Env: "LEASESVC_STREAM_LIFETIME", Default: "`1h`", Usage: "a `:watch` stream then ends cleanly; clients reconnect"},
	{Env: "LEASESVC_STREAM_REFRESH", Default: "`1s`", Usage: "while a prefix stream asks for `refresh` events (the dashboard does), how often the instance re-reads the leases under its prefix, once for all such streams of the prefix; `0` turns refresh events off, at least `100ms` otherwise. Each re-read reads every lease under the prefix: on Firestore, billed reads ([docs/contract.md §10](docs/contract.md#10-watching-many-leases))"},
	{Env: "LEASESVC_MAX_REFRESH_PREFIXES", Default: "`64`", Usage: "prefixes an instance re-reads for `refresh` events at once (each a read of every lease under it per `LEASESVC_STREAM_REFRESH`); a stream asking for refresh of another is `429` + `Retry-After`"},
	{Env: "LEASESVC_WRITE_TIMEOUT", Default: "`30s`", Usage: "a response must be written within it of its first byte, and each event of a `:watch` stream within it; a client that does not read loses its connection"},
	{Env: "LEASESVC_STREAM_BUFFER", Default: "`262144`", Usage: "bytes a `:watch` stream queues for a client that reads slower than its changes come (4,096 … 67,108,864); a client further behind gets a final `overflow` event and the stream ends"},
	{Env: "LEASESVC_MAX_PAGE_BYTES", Default: "`4194304`", Usage: "a list page's encoded size (65,536 … 33,554,432): the page ends early, with a `nextPageToken`; it always holds at least one lease"},
	{Env: "LEASESVC_MEMORY_BUDGET", Default: "`117440512`", Usage: "bytes this instance queues and buffers for its clients, all together: stream backlogs and snapshot chunks, list pages in flight, request bodies, session queues and sockets (≥ 1,048,576; 112 MiB suits Cloud Run's 512 MiB instance). A stream whose charge cannot be met ends with an `overflow` event; a request is `503` + `Retry-After` ([docs/contract.md §16](docs/contract.md#16-one-memory-budget))"},
	{Env: "LEASESVC_MEMORY_PER_CALLER", Default: "`29360128`", Usage: "one caller's share of `LEASESVC_MEMORY_BUDGET` (principal; client address with `none`), at most the budget; beyond, a stream ends with `overflow`, a request is `429` + `Retry-After`"},
	{Env: "GOMEMLIMIT", Default: "`LEASESVC_MEMORY_BUDGET` + 64 MiB", Usage: "the Go runtime's soft memory limit (its own syntax, such as `400MiB`): the collector runs sooner as the heap nears it, so what the budget holds is not doubled by garbage between collections; set, it replaces the default"},
	{Env: "LEASESVC_OVERLOAD_SOFT", Default: "`301989888`", Usage: "bytes of memory in use (the Go runtime's own figure, sampled every 100 ms) past which the overload manager refuses new work (acquires, reads, lists, streams, session upgrades: `503` + `Retry-After`) and sheds waiting acquires and streams, oldest first; renewals, releases and heartbeats go on. `0` with `LEASESVC_OVERLOAD_HARD` `0` turns it off ([docs/contract.md §16](docs/contract.md#16-one-memory-budget))"},
	{Env: "LEASESVC_OVERLOAD_HARD", Default: "`352321536`", Usage: "bytes of memory in use past which the overload manager also closes everything the heaviest callers (by their budget charge) hold, session sockets included (`1013`; their sessions live on, to be resumed); above `LEASESVC_OVERLOAD_SOFT`"},
	{Env: "LEASESVC_MAX_HEADER_BYTES", Default: "`65536`", Usage: "bytes of request line and headers a request may carry (4,096 … 1,048,576); beyond, `431`"},
	{Env: "LEASESVC_MAX_CONNECTIONS", Default: "`1500`", Usage: "connections open at once on this instance, idle keep-alives and session sockets included; beyond, a new connection is answered `503` + `Retry-After` and closed before any HTTP work. `0` off"},
	{Env: "LEASESVC_MAX_CONNECTIONS_PER_ADDRESS", Default: "`1024`; off on Cloud Run", Usage: "connections open at once from one client IP address (on Cloud Run every connection comes from its front end, so the caller is the principal and this is off); beyond, as `LEASESVC_MAX_CONNECTIONS`. `0` off"},
	{Env: "LEASESVC_SESSION_RECORD_RETENTION", Default: "`1m`", Usage: "an ended session's record (closed, expired, or left by an instance that died) is removed for good this long after its end, by the sweeping instance, within about 10 s more (`1m` … `1h`): a resume under way as the session ended still finds it ended ([docs/contract.md §14](docs/contract.md#14-sessions))"},
	{Env: "LEASESVC_MAX_WAITING_PER_CALLER", Default: "`100`", Usage: "waiting acquires (`waitMs` > 0) per caller; beyond, `429` + `Retry-After`"},
	{Env: "LEASESVC_MAX_WAITING", Default: "`10000`", Usage: "waiting acquires per instance; beyond, `429` + `Retry-After`"},
	{Env: "LEASESVC_MAX_CANDIDATES", Default: "`64`", Usage: "registered candidates (waiting acquires with a `priority`) per lease; a newcomer ranking below all of a full list waits unregistered"},
	{Env: "LEASESVC_SESSION_LEASE_TTL", Default: "`30s`", Usage: "backend TTL of the leases held through a session: max(it, 3 × the window), renewed by the owning instance every third of it; if that instance dies, its sessions' leases outlive it by at most this (≥ `1s`) ([docs/contract.md §14](docs/contract.md#14-sessions))"},
	{Env: "LEASESVC_MAX_SESSIONS", Default: "`900`", Usage: "sessions per instance, upgraded sockets not yet in a session included (on Cloud Run each socket is a request of the container's 1,000: leave room for REST); beyond, the upgrade is `429 resource_exhausted`"},
	{Env: "LEASESVC_MAX_SESSIONS_PER_CALLER", Default: "`100`", Usage: "sessions per caller (principal; client address with `none`) per instance, its upgraded sockets not yet in a session included (plus one socket per session it has there, which can only resume one); beyond, `429 resource_exhausted`"},
	{Env: "LEASESVC_MAX_SESSION_LEASES", Default: "`1000`", Usage: "leases per session; an acquire beyond is `429 resource_exhausted`"},
	{Env: "LEASESVC_SESSION_MESSAGE_RATE", Default: "`200`", Usage: "messages per second per session socket (burst the same); beyond, the socket is closed (`1008`, `429 resource_exhausted`)"},
	{Env: "LEASESVC_SESSION_MAX_MESSAGE", Default: "`1048576`", Usage: "bytes of one session message (4,096 … 67,108,864); a larger one gets `error` `413 payload_too_large` and closes the socket (`1009`)"},
	{Env: "LEASESVC_SESSION_OUT_BUFFER", Default: "`262144`", Usage: "bytes queued on a session socket for a client that reads slower than its answers come (4,096 … 67,108,864), charged to `LEASESVC_MEMORY_BUDGET`; a message that finds that much queued closes the socket (`1013`), and its session lives on for its window, to be resumed ([docs/contract.md §14](docs/contract.md#14-sessions))"},
	{Env: "LEASESVC_SESSION_MAX_AGE", Default: "`55m`", Usage: "a session socket is then asked to `move` (the agent resumes on a new socket); keep it below Cloud Run's request timeout (3600 s)"},
	{Env: "LEASESVC_RETAIN_FREE", Default: "`off`", Usage: "the sweeper deletes the leases that have been free this long (a Go duration ≥ `1m`, such as `720h`), keeping each name's fencing token in a tombstone; `leasectl mcp`'s `.done` markers are kept ([docs/contract.md §15](docs/contract.md#15-leases-that-come-and-go))"},
	{Env: "LEASESVC_PROOF_ISSUER", Default: "`leasesvc`", Usage: "the `iss` of every fencing proof, the name sinks check ([docs/contract.md §17](docs/contract.md#17-fencing-that-reaches-the-data))"},
	{Env: "LEASESVC_PROOF_KEY_RETENTION", Default: "`720h`", Usage: "how long an instance's proof key stays in `/.well-known/jwks.json` after the instance ended (≥ `1h`); a proof signed with a key no longer listed is refused by a sink that never saw the key ([docs/security.md](docs/security.md#fencing-proofs))"},
	{Env: "LEASESVC_PROOF_MAX_KEYS", Default: "`100`", Usage: "the most keys `/.well-known/jwks.json` lists (1 … 10,000): the instance's own, then the latest ended; keep it above the number of instances that run at once ([docs/security.md](docs/security.md#fencing-proofs))"},
	{Env: "LEASESVC_READY_CACHE", Default: "`1s`", Usage: "how long a `/readyz` answer is reused"},
	{Env: "LEASESVC_LIST_SCAN_BUDGET", Default: "`10000`", Usage: "with a policy: unreadable leases one list page passes over, at most; beyond, the page ends early (short, even empty) with a `nextPageToken`"},
	{Env: "LEASESVC_PAGE_TOKEN_KEY", Default: "random per process", Usage: "32 bytes, standard base64 (`openssl rand -base64 32`): the key that seals list page tokens; give every instance behind one load balancer the same key, or a next page served by another instance is `400`"},
	{Env: "LEASESVC_SHUTDOWN_TIMEOUT", Default: "`9s`", Usage: "SIGTERM to exit: waits and streams end, in-flight requests drain, events are flushed, the subscription deleted, telemetry flushed"},
}

// flagOf names the flag of each setting that has one (see parseConfig).
var flagOf = map[string]string{
	"PORT": "-port", "LEASESVC_BACKEND": "-backend", "LEASESVC_MIN_TTL": "-min-ttl", "LEASESVC_MAX_TTL": "-max-ttl",
	"LEASESVC_LOG_LEVEL": "-log-level", "LEASESVC_DRAIN_TIMEOUT": "-drain", "LEASESVC_TELEMETRY": "-telemetry",
}

// mdLink matches a Markdown link; -h prints its text.
var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// errHelp reports that -h was asked for and answered: main exits 0.
var errHelp = errors.New("help requested")

// settingRow is one row of the settings table.
type settingRow struct{ env, flag, def, usage string }

// settingRows lists every setting: the service's, then each registered
// backend's, with the backend named in its rows' meaning.
func settingRows() []settingRow {
	var rows []settingRow
	for _, s := range coreSettings {
		usage := s.Usage
		if s.Env == "LEASESVC_BACKEND" {
			var names []string
			for _, n := range backend.Names() {
				names = append(names, "`"+n+"`")
			}
			usage = strings.Join(names, ", ")
		}
		rows = append(rows, settingRow{s.Env, flagOf[s.Env], s.Default, usage})
	}
	for _, o := range backend.Registered() {
		for _, s := range o.Settings {
			rows = append(rows, settingRow{s.Env, "", s.Default, o.Name + ": " + s.Usage})
		}
	}
	return rows
}

// settingsMarkdown renders the settings table as README.md has it.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	for _, r := range settingRows() {
		b.WriteString("|")
		for _, cell := range []string{code(r.env), code(r.flag), r.def, r.usage} {
			if cell == "" {
				b.WriteString(" |")
				continue
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeHelp prints what `leasesvc -h` prints: every setting with its flag,
// default and meaning, and the registered backends.
func writeHelp(w io.Writer) error {
	plain := func(md string) string { return strings.ReplaceAll(mdLink.ReplaceAllString(md, "$1"), "`", "") }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Usage: leasesvc [flags]\n\nSettings come from the environment; a flag overrides its variable.\n\nVARIABLE\tFLAG\tDEFAULT\tMEANING")
	for _, r := range settingRows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.env, r.flag, helpDefault(r.env, plain(r.def)), plain(r.usage))
	}
	fmt.Fprintln(tw, "\nBackends (LEASESVC_BACKEND):")
	for _, o := range backend.Registered() {
		fmt.Fprintf(tw, "  %s\t%s\n", o.Name, o.Summary)
	}
	return tw.Flush()
}

// byteSettings are the settings whose values are byte counts: -h shows
// their defaults in IEC units too, as GOMEMLIMIT writes sizes (the values
// themselves are plain numbers of bytes).
var byteSettings = map[string]bool{
	"LEASESVC_STREAM_BUFFER": true, "LEASESVC_MAX_PAGE_BYTES": true, "LEASESVC_MEMORY_BUDGET": true,
	"LEASESVC_MEMORY_PER_CALLER": true, "LEASESVC_SESSION_MAX_MESSAGE": true, "LEASESVC_SESSION_OUT_BUFFER": true,
	"LEASESVC_OVERLOAD_SOFT": true, "LEASESVC_OVERLOAD_HARD": true, "LEASESVC_MAX_HEADER_BYTES": true,
}

// helpDefault is the default -h shows for the setting env: def, and for a
// byte count its size in IEC units, such as "117440512 (112 MiB)".
func helpDefault(env, def string) string {
	n, err := strconv.ParseInt(def, 10, 64)
	if !byteSettings[env] || err != nil || n < 1024 {
		return def
	}
	size := float64(n)
	unit := "B"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if size < 1024 {
			break
		}
		size, unit = size/1024, u
	}
	return def + " (" + strconv.FormatFloat(math.Round(size*100)/100, 'f', -1, 64) + " " + unit + ")"
}
