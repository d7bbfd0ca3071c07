#!/usr/bin/env bash
# Runs leasebench against leasesvc on one backend, from scratch: builds the
# binaries, starts the emulators the backend needs (Google Cloud CLI with
# its Firestore, Spanner and Pub/Sub emulators), starts two leasesvc
# instances on it (one for the memory backend, which shares nothing between
# instances) with leadership events on, runs leasebench with the flags
# given, and stops everything it started when it ends.
#
#   cmd/leasebench/bench.sh memory    [leasebench flags]
#   cmd/leasebench/bench.sh firestore [leasebench flags]
#   cmd/leasebench/bench.sh spanner   [leasebench flags]
#   cmd/leasebench/bench.sh postgres  [leasebench flags]
#
# postgres starts a throwaway cluster (initdb in $BENCH_DIR, as the user
# postgres when root; binaries in $LEASESVC_PG_BIN, default
# /usr/lib/postgresql/15/bin) and no Pub/Sub: waiters on the second instance
# are woken through LISTEN/NOTIFY.
#
# e.g. cmd/leasebench/bench.sh firestore -agents 1000,10000 -json > firestore.json
#      cmd/leasebench/bench.sh postgres -scenarios sessiontakeover,sessionwrites,sessionfailover,sessionscale
# Logs of the emulators and instances are kept in $BENCH_DIR (default a new
# temporary directory), printed at the end. $BENCH_SERVICE_ENV adds settings
# to the instances, e.g. BENCH_SERVICE_ENV="LEASESVC_SPANNER_FAST_PATH=always".
# BENCH_PUBSUB=off runs firestore and spanner without the Pub/Sub emulator
# (no leadership events, so no scenario that needs them): the emulator
# starts a thread for every ordering key of an ordered subscription and
# keeps it, one per lease name and instance, which at 10,000 leases takes
# the machine's cores (docs/performance.md).
set -euo pipefail
backend=${1:?usage: bench.sh memory|firestore|spanner|postgres [leasebench flags]}
shift
case $backend in memory | firestore | spanner | postgres) ;; *)
	echo "bench.sh: backend must be memory, firestore, spanner or postgres" >&2
	exit 2
	;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${BENCH_DIR:-$(mktemp -d /tmp/leasebench-XXXXXX)}
mkdir -p "$dir"
project=leasesvc-bench
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	done
	# Up to 10 s for them to end: an instance drains and logs its counts
	# (the Spanner batcher's attempts per transaction) within its 9 s
	# shutdown budget.
	for _ in $(seq 100); do
		alive=0
		for pid in "${pids[@]}"; do
			if kill -0 "$pid" 2>/dev/null; then alive=1; fi
		done
		[[ $alive == 0 ]] && break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do
		kill -KILL -- "-$pid" 2>/dev/null || true
	done
	echo "bench.sh: logs in $dir" >&2
}
trap cleanup EXIT

# freeport prints a free loopback TCP port.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start runs a command in a session of its own (so the whole group can be
# stopped), logging to $dir/$1.log.
start() {
	local name=$1
	shift
	setsid "$@" >"$dir/$name.log" 2>&1 &
	pids+=($!)
}

# wait_for waits until a command succeeds, for at most 60 s.
wait_for() {
	local what=$1
	shift
	for _ in $(seq 600); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "bench.sh: $what did not come up; see $dir" >&2
	exit 1
}

echo "bench.sh: building into $dir" >&2
(cd "$root" && go build -o "$dir/leasesvc" ./cmd/leasesvc && go build -o "$dir/leasebench" ./cmd/leasebench)

env_common=(LEASESVC_BACKEND="$backend" LEASESVC_PROJECT=$project)
bench_env=(LEASESVC_BACKEND="$backend" LEASESVC_PROJECT=$project)
topic_flag=()
if [[ $backend != memory && $backend != postgres && ${BENCH_PUBSUB:-on} != off ]]; then
	ps_port=$(freeport)
	start pubsub gcloud beta emulators pubsub start --project=$project --host-port=127.0.0.1:"$ps_port"
	wait_for "the Pub/Sub emulator" curl -sf "http://127.0.0.1:$ps_port/"
	curl -sf -X PUT "http://127.0.0.1:$ps_port/v1/projects/$project/topics/leasebench" >/dev/null
	env_common+=(PUBSUB_EMULATOR_HOST=127.0.0.1:"$ps_port" LEASESVC_PUBSUB_TOPIC=leasebench)
	bench_env+=(PUBSUB_EMULATOR_HOST=127.0.0.1:"$ps_port")
	topic_flag=(-pubsub-topic leasebench)
fi
case $backend in
firestore)
	fs_port=$(freeport)
	start firestore gcloud emulators firestore start --host-port=127.0.0.1:"$fs_port"
	wait_for "the Firestore emulator" curl -sf "http://127.0.0.1:$fs_port/"
	env_common+=(FIRESTORE_EMULATOR_HOST=127.0.0.1:"$fs_port" LEASESVC_FIRESTORE_COLLECTION=leasebench)
	bench_env+=(FIRESTORE_EMULATOR_HOST=127.0.0.1:"$fs_port")
	;;
spanner)
	sdk=$(gcloud info --format='value(installation.sdk_root)')
	sp_port=$(freeport)
	sp_http=$(freeport)
	start spanner "$sdk/bin/cloud_spanner_emulator/gateway_main" --hostname 127.0.0.1 --grpc_port "$sp_port" --http_port "$sp_http"
	wait_for "the Spanner emulator" curl -s "http://127.0.0.1:$sp_http/"
	export CLOUDSDK_API_ENDPOINT_OVERRIDES_SPANNER=http://127.0.0.1:$sp_http/ CLOUDSDK_AUTH_DISABLE_CREDENTIALS=true CLOUDSDK_CORE_PROJECT=$project
	gcloud spanner instances create bench --config=emulator-config --description=leasebench --nodes=1 >/dev/null 2>&1
	gcloud spanner databases create leases --instance=bench >/dev/null 2>&1
	db=projects/$project/instances/bench/databases/leases
	env_common+=(SPANNER_EMULATOR_HOST=127.0.0.1:"$sp_port" LEASESVC_SPANNER_DATABASE=$db LEASESVC_SPANNER_MIGRATE=true)
	bench_env+=(SPANNER_EMULATOR_HOST=127.0.0.1:"$sp_port" LEASESVC_SPANNER_DATABASE=$db)
	;;
postgres)
	pgbin=${LEASESVC_PG_BIN:-/usr/lib/postgresql/15/bin}
	pg_port=$(freeport)
	mkdir -p "$dir/pg"
	as_pg=()
	if [[ $(id -u) == 0 ]]; then
		chown postgres "$dir" "$dir/pg"
		as_pg=(runuser -u postgres --)
	fi
	"${as_pg[@]}" "$pgbin/initdb" -D "$dir/pg" -U postgres --auth=trust --no-sync >"$dir/initdb.log" 2>&1
	start postgres "${as_pg[@]}" "$pgbin/postgres" -D "$dir/pg" -p "$pg_port" -k "$dir" -c listen_addresses=127.0.0.1 -c max_connections=200
	wait_for "PostgreSQL" "$pgbin/pg_isready" -h 127.0.0.1 -p "$pg_port"
	url="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
	env_common+=(LEASESVC_POSTGRES_URL="$url" LEASESVC_POSTGRES_MIGRATE=true)
	bench_env+=(LEASESVC_POSTGRES_URL="$url")
	;;
esac

read -r -a extra_env <<<"${BENCH_SERVICE_ENV:-}"
env_common+=("${extra_env[@]}")
urls=()
instances=2
[[ $backend == memory ]] && instances=1
for i in $(seq "$instances"); do
	port=$(freeport)
	start "leasesvc-$i" env "${env_common[@]}" PORT="$port" LEASESVC_INSTANCE_ID="bench-$i" "$dir/leasesvc"
	wait_for "leasesvc instance $i" curl -sf "http://127.0.0.1:$port/readyz"
	urls+=("http://127.0.0.1:$port")
	sleep 1 # the Spanner schema is created by the first instance
done
url_list=$(
	IFS=,
	echo "${urls[*]}"
)
if [[ $backend != memory ]]; then
	echo "bench.sh: warming up the emulator (latency rounds, not reported)" >&2
	env "${bench_env[@]}" "$dir/leasebench" -url "$url_list" -scenarios latency -n 300 >/dev/null
fi
echo "bench.sh: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# -leasesvc: sessionfailover and sessionscale start instances of their own.
env "${bench_env[@]}" "$dir/leasebench" -url "$url_list" "${topic_flag[@]}" -leasesvc "$dir/leasesvc" "$@"
