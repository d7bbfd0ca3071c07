"""Exactly once with leasesvc: 5 agents, 1,000 tasks, a fencing sink, the
leader killed twice.

Each agent is a process of its own running a :class:`leasesvc.Elector` on
one lease. The leader fences the sink with its term's proof (docs/contract.md
§17: the token, signed by the service), reads which tasks are done, and does
the rest one by one, each write carrying the proof; the sink verifies it
against the service's JWKS with a :class:`leasesvc.fence.Guard`, which
refuses a token lower than the highest it has admitted and any proof the
service did not sign. This process runs the sink and the agents, and kills
the leader twice: once with SIGKILL (a crash: its lease runs out and a
follower takes over), once with SIGSTOP (a paused process whose last write
is still in flight and arrives after the next leader fenced the sink: the
sink refuses it; the process is woken with SIGCONT after the next leader
wrote, and is then killed). Midway it also forges two writes with a far
higher token, as an agent that invents or copies a number would: a bare
number and a JWS under a key the service never had. The sink refuses both,
and the true leader goes on. At the end every task must have been written
exactly once, no stale write accepted, the late write and both forgeries
refused.

Run against a service::

    go build -o /tmp/leasesvc ./cmd/leasesvc && PORT=8080 /tmp/leasesvc &
    PYTHONPATH=sdk/python python3 sdk/python/examples/exactly_once.py --url http://127.0.0.1:8080

It prints one JSON line with the results and exits 0 when they hold.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import leasesvc  # noqa: E402
from leasesvc import fence  # noqa: E402


class _Memo(fence.Verifier):
    """A verifier that remembers the proofs it verified: a leader sends the
    same proof with each of its writes, and a check in pure Python costs
    about 6 ms."""

    def __init__(self, keys: fence.Keys) -> None:
        super().__init__(keys, "leasesvc")
        self._seen: Dict[str, fence.Claims] = {}
        self._mu = threading.Lock()

    def verify(self, proof: str) -> fence.Claims:
        """Verify proof, once per distinct proof that verifies."""
        with self._mu:
            c = self._seen.get(proof)
        if c is None:
            c = super().verify(proof)
            with self._mu:
                self._seen[proof] = c
        return c


class Sink:
    """The downstream system: it accepts a write only with a proof the
    service signed for its lease and a fencing token at least the highest it
    has admitted (a :class:`leasesvc.fence.Guard`), as every downstream of a
    leader must."""

    def __init__(self, url: str, name: str) -> None:
        self.name = name
        self.verifier = _Memo(fence.RemoteKeys(url.rstrip("/") + "/.well-known/jwks.json"))
        self.guard = fence.Guard(self.verifier)
        self.forged: List[str] = []  # the reasons forged writes were refused for
        self.lock = threading.Condition()
        self.highest = 0
        self.hold_for = 0  # a token whose next write is held back (see hold)
        self.held = threading.Event()
        self.writes: Dict[int, int] = {}  # task → accepted writes
        self.order: List[int] = []  # tokens of accepted writes, in order
        self.by_token: Dict[int, int] = {}
        self.holder_of: Dict[int, str] = {}
        self.refused = 0

    def fence(self, proof: str) -> bool:
        """A new leader announces its proof first: from then on every write
        of an older holding is refused."""
        with self.lock:
            try:
                c = self.guard.check(self.name, proof)
            except fence.FenceError:
                return False
            self.highest = c.fencing_token
            self.holder_of[c.fencing_token] = c.holder
            self.lock.notify_all()
            return True

    def hold(self, token: int) -> None:
        """Hold back the next write of token until a newer leader fenced:
        a write delayed in the network while its sender is paused."""
        with self.lock:
            self.hold_for = token

    def write(self, proof: str, task: int) -> bool:
        """Record task as done under proof, unless the Guard refuses it: a
        stale token counts in refused, a forged proof in forged."""
        try:
            token = self.verifier.verify(proof).fencing_token
        except fence.FenceError as e:
            with self.lock:
                self.forged.append(e.reason)
            return False
        with self.lock:
            if token == self.hold_for:
                self.hold_for = 0
                self.held.set()
                while self.highest <= token:
                    self.lock.wait()
            try:
                self.guard.check(self.name, proof)
            except fence.FenceError:
                self.refused += 1
                return False
            self.highest = token
            self.writes[task] = self.writes.get(task, 0) + 1
            self.order.append(token)
            self.by_token[token] = self.by_token.get(token, 0) + 1
            return True

    def done(self) -> List[int]:
        with self.lock:
            return sorted(self.writes)

    def serve(self) -> ThreadingHTTPServer:
        sink = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.answer({"done": sink.done()})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n))
                if self.path == "/fence":
                    ok = sink.fence(str(req.get("proof", "")))
                else:
                    ok = sink.write(str(req.get("proof", "")), int(req["task"]))
                self.answer({"ok": ok})

            def answer(self, body: Dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        return srv


def call(url: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One request to the sink."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def agent(args: argparse.Namespace) -> None:
    """One agent: campaign, and while leading do the tasks not done yet."""

    def lead(term: leasesvc.Term) -> None:
        if not call(args.sink + "/fence", {"proof": term.proof})["ok"]:
            term.wait()  # a newer leader exists: wait for this term to end
            return
        done = set(call(args.sink + "/done")["done"])
        for task in range(args.tasks):
            if task in done:
                continue
            if not term.leading:
                return
            time.sleep(args.work)  # the work; a pause here makes a late write
            if not call(args.sink + "/write", {"proof": term.proof, "task": task})["ok"]:
                print(f"{args.holder}: write of task {task} with token {term.token} refused", file=sys.stderr)
                term.wait()
                return
        term.wait()  # all done: keep leading until stopped

    keeper = leasesvc.Keeper(leasesvc.Client(args.url), ttl=args.ttl)
    e = leasesvc.Elector(keeper, args.name, holder=args.holder, callbacks=leasesvc.Callbacks(on_started_leading=lead))
    e.start()
    sys.stdin.read()  # EOF: stop
    e.stop(10)
    keeper.close()


def orchestrate(args: argparse.Namespace) -> int:
    name = args.name or f"exactly-once-{os.getpid()}-{int(time.time())}"
    sink = Sink(args.url, name)
    srv = sink.serve()
    sink_url = f"http://127.0.0.1:{srv.server_address[1]}"
    procs: Dict[str, subprocess.Popen] = {}
    for i in range(args.agents):
        holder = f"agent-{i + 1}"
        procs[holder] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "agent", "--url", args.url, "--sink", sink_url,
             "--name", name, "--holder", holder, "--ttl", str(args.ttl), "--tasks", str(args.tasks),
             "--work", str(args.work)],
            stdin=subprocess.PIPE)
    start = time.monotonic()
    kills: List[str] = []
    forged_at = 0

    def wait_until(cond: Any, what: str, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {limit}s: {what}")
            time.sleep(0.005)

    def leader() -> tuple:
        with sink.lock:
            return sink.highest, sink.holder_of.get(sink.highest, "")

    try:
        # First kill: a crash at a third of the tasks.
        wait_until(lambda: len(sink.writes) >= args.tasks // 3, "a third of the tasks")
        token, holder = leader()
        procs[holder].send_signal(signal.SIGKILL)
        kills.append(f"{holder} (token {token}) SIGKILL at {len(sink.writes)} tasks")
        # Forgeries at half the tasks: a far higher token, as a bare number
        # and as a JWS under a key the service never had. Both are refused;
        # the true leader goes on (its later writes are accepted).
        wait_until(lambda: len(sink.writes) >= args.tasks // 2, "half the tasks")
        token, holder = leader()
        for proof in forgeries(name, token + 1000):
            if call(sink_url + "/write", {"proof": proof, "task": 0})["ok"]:
                raise AssertionError(f"a forged proof was admitted: {proof[:40]}")
        forged_at = len(sink.writes)
        # Second kill: a pause at two thirds, with a write in flight that
        # arrives late (after the next leader fenced): the sink refuses it.
        # Woken after the next leader wrote, the paused leader is killed.
        wait_until(lambda: len(sink.writes) >= 2 * args.tasks // 3, "two thirds of the tasks")
        token, holder = leader()
        sink.hold(token)
        wait_until(sink.held.is_set, "the leader's next write")
        procs[holder].send_signal(signal.SIGSTOP)
        kills.append(f"{holder} (token {token}) SIGSTOP at {len(sink.writes)} tasks, a write in flight")
        wait_until(lambda: any(t > token for t in sink.by_token), "a newer leader's write")
        procs[holder].send_signal(signal.SIGCONT)
        time.sleep(0.5)  # it wakes, tries its late write
        procs[holder].send_signal(signal.SIGKILL)
        kills.append(f"{holder} SIGCONT then SIGKILL")
        wait_until(lambda: len(sink.writes) >= args.tasks, "all tasks", limit=120.0)
    finally:
        elapsed = time.monotonic() - start
        for p in procs.values():
            if p.poll() is None and p.stdin is not None:
                p.stdin.close()  # stop gracefully
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        srv.shutdown()

    with sink.lock:
        duplicates = sum(1 for n in sink.writes.values() if n > 1)
        missing = sum(1 for t in range(args.tasks) if t not in sink.writes)
        stale_accepted = sum(1 for a, b in zip(sink.order, sink.order[1:]) if b < a)
        result = {
            "agents": args.agents, "tasks": args.tasks, "done": len(sink.writes), "missing": missing,
            "duplicates": duplicates, "staleAccepted": stale_accepted, "staleRefused": sink.refused,
            "terms": len(sink.by_token), "writesPerToken": {str(k): v for k, v in sorted(sink.by_token.items())},
            "kills": kills, "elapsedS": round(elapsed, 2),
            "forgedRefused": sink.forged, "forgedAt": forged_at, "writesAfterForgery": len(sink.writes) - forged_at,
        }
    print(json.dumps(result), flush=True)
    ok = (missing == 0 and duplicates == 0 and stale_accepted == 0 and sink.refused >= 1 and len(sink.by_token) >= 3
          and len(sink.forged) == 2)
    return 0 if ok else 1


def forgeries(name: str, token: int) -> List[str]:
    """Two writes' proofs an agent could invent for token: the bare number,
    and a JWS stating it under a key the service never had (a zero
    signature)."""

    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).decode().rstrip("=")

    header = {"alg": "EdDSA", "kid": b64(b"\x01" * 32), "typ": "leasesvc-fence+jwt"}
    claims = {"lease": name, "fencingToken": token, "holder": "forger", "iat": int(time.time()), "iss": "leasesvc"}
    jws = ".".join((b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(bytes(64))))
    return [str(token), jws]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="run", choices=["run", "agent"])
    p.add_argument("--url", default=os.environ.get("LEASESVC_URL", "http://127.0.0.1:8080"))
    p.add_argument("--name", default="")
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--ttl", type=float, default=1.0, help="lease TTL, seconds")
    p.add_argument("--work", type=float, default=0.002, help="seconds of work per task")
    p.add_argument("--sink", default="")
    p.add_argument("--holder", default="")
    args = p.parse_args()
    if args.mode == "agent":
        agent(args)
        return
    raise SystemExit(orchestrate(args))


if __name__ == "__main__":
    main()
