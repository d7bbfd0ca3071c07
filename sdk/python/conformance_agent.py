"""The Python agent of the cross-language conformance suite (sdk/conformance).

Run as ``python3 sdk/python/conformance_agent.py CASE`` with
``PYTHONPATH=sdk/python`` and LEASESVC_URL, LEASESVC_TOKEN, LEASE_NAME,
LEASE_HOLDER, LEASE_TTL_MS (and, for some cases, LEASE_KEEPER, LEASE_PROOF,
LEASE_CANCEL_BEFORE_MS) in the environment. It writes one JSON object per
step on stdout; times are milliseconds on its monotonic clock. A ``stop``
line or EOF on stdin stops what runs; it then exits 0. The cases are those
of sdk/conformance/PROTOCOL.md, the ``lifecycle_*`` ones its rules L1–L4.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import sys
import threading
import time
from typing import Any, Callable, Dict, Tuple

import leasesvc
from leasesvc import fence

T0 = time.monotonic()


def ms(t: float) -> int:
    """Monotonic seconds to milliseconds since the agent started."""
    return int(round((t - T0) * 1000))


_out = threading.Lock()


def emit(**kw: Any) -> None:
    """Write one step line and flush it."""
    with _out:
        sys.stdout.write(json.dumps(kw, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def code(e: BaseException) -> str:
    """The API code string of an SDK error."""
    return e.code if isinstance(e, leasesvc.LeaseError) else type(e).__name__


def wait_for_stop() -> None:
    """Block until stdin says stop or ends."""
    for line in sys.stdin:
        if line.strip() == "stop":
            return


def read_line() -> str:
    """The next line on stdin, stripped; "" at EOF."""
    return sys.stdin.readline().strip()


class Env:
    """The agent's environment."""

    def __init__(self) -> None:
        self.url = os.environ["LEASESVC_URL"]
        self.token = os.environ.get("LEASESVC_TOKEN", "") or None
        self.name = os.environ["LEASE_NAME"]
        self.holder = os.environ["LEASE_HOLDER"]
        self.ttl = int(os.environ.get("LEASE_TTL_MS", "3000") or 3000) / 1000
        #: LEASE_KEEPER: "plain" (renewals at the TTL) or "session" (a session of window 1 s).
        self.keeper_mode = os.environ.get("LEASE_KEEPER", "session")
        self.client = leasesvc.Client(self.url, token=self.token)

    def keeper(self) -> leasesvc.Keeper:
        """The keeper LEASE_KEEPER asks for: plain renewals at LEASE_TTL_MS,
        or a session of its own of window 1 s."""
        plain = self.keeper_mode == "plain"
        return leasesvc.Keeper(self.client, plain_renewals=plain, window=None if plain else 1.0, ttl=self.ttl)


def expect_error(step: str, f: Callable[[], Any], **extra: Any) -> None:
    """Run f, which must fail, and report the error's code."""
    try:
        f()
    except leasesvc.LeaseError as e:
        out: Dict[str, Any] = {"step": step, "error": code(e)}
        if isinstance(e, leasesvc.LeaseHeldError):
            out["holder"] = e.lease.holder
        out.update(extra)
        emit(**out)
        return
    emit(step=step, error="none")
    raise SystemExit(1)


def case_basic(env: Env) -> None:
    c, name, a, b, ttl = env.client, env.name, env.holder, env.holder + "-b", env.ttl
    lease = c.acquire(name, a, ttl)
    emit(step="acquire", holder=lease.holder, token=lease.fencing_token, held=lease.held)
    expect_error("acquire_other", lambda: c.acquire(name, b, ttl))
    again = c.acquire(name, a, ttl)
    emit(step="acquire_again", token=again.fencing_token)
    r = c.renew(name, a, lease.fencing_token)
    emit(step="renew", token=r.fencing_token)
    expect_error("renew_wrong_token", lambda: c.renew(name, a, 99))
    rel = c.release(name, a, lease.fencing_token)
    emit(step="release", token=rel.fencing_token, held=rel.held)
    expect_error("renew_after_release", lambda: c.renew(name, a, lease.fencing_token))
    other = c.acquire(name, b, ttl)
    emit(step="acquire_other", holder=other.holder, token=other.fencing_token)
    g = c.get(name)
    emit(step="get", holder=g.holder, token=g.fencing_token, held=g.held)
    expect_error("get_missing", lambda: c.get(name + "-missing"))
    emit(step="done")


def case_wait(env: Env) -> None:
    emit(step="waiting")
    t = time.monotonic()
    lease = env.client.acquire(env.name, env.holder, env.ttl, wait=10.0)
    emit(step="acquired", token=lease.fencing_token, waitedMs=ms(time.monotonic()) - ms(t))
    emit(step="done")


def case_ratelimit(env: Env) -> None:
    t = time.monotonic()
    ok = 0
    for _ in range(3):
        try:
            env.client.get(env.name)
            ok += 1
        except leasesvc.LeaseError as e:
            emit(step="error", error=code(e))
            raise SystemExit(1)
    emit(step="done", ok=ok, elapsedMs=ms(time.monotonic()) - ms(t))


def run_elector(env: Env, on_term: Callable[[leasesvc.Term], None],
                on_renewed: Callable[[leasesvc.Lease, float], None]) -> None:
    """Run an Elector over a keeper of plain renewals at LEASE_TTL_MS, with
    the SDK's other defaults, until stdin says stop."""
    k = leasesvc.Keeper(env.client, plain_renewals=True, ttl=env.ttl)
    e = leasesvc.Elector(k, env.name, holder=env.holder,
                         callbacks=leasesvc.Callbacks(on_started_leading=on_term, on_renewed=on_renewed))
    e.start()
    wait_for_stop()
    e.stop(timeout=15)
    k.close()
    if e.error is not None:
        print(f"elector: {e.error}", file=sys.stderr)
        raise SystemExit(1)


def case_freeze(env: Env) -> None:
    # The driver freezes the service after the first renewed line, so the
    # last successful send is always a renew's. The case is about plain
    # renewals' safe deadline (docs/contract.md §2): a session has no renews.
    # (revoke too keeps plain renewals, as the Go agent's does.)
    last_sent = [time.monotonic()]

    def on_renewed(lease: leasesvc.Lease, sent: float) -> None:
        last_sent[0] = sent
        emit(step="renewed", sentMs=ms(sent))

    def on_term(term: leasesvc.Term) -> None:
        emit(step="leading", token=term.token)
        term.wait()
        now = time.monotonic()
        emit(step="stopped", sinceLastSentMs=round((now - last_sent[0]) * 1000, 3), ttlMs=int(env.ttl * 1000),
             driftMargin=leasesvc.DEFAULT_DRIFT_MARGIN)

    run_elector(env, on_term, on_renewed)


def case_revoke(env: Env) -> None:
    def on_term(term: leasesvc.Term) -> None:
        emit(step="leading", token=term.token)
        term.wait()
        if isinstance(term.cause, leasesvc.LeaseError):
            emit(step="stopped", reason=code(term.cause))

    run_elector(env, on_term, lambda lease, sent: None)  # a renew notices the revoke


def _checkpoint_n(lease: leasesvc.Lease) -> Any:
    """The checkpoint's "n" member, 0 without a checkpoint."""
    return (lease.checkpoint or {}).get("n", 0)


def case_succession(env: Env) -> None:
    c, name, a, b, ttl = env.client, env.name, env.holder, env.holder + "-b", env.ttl
    lease = c.acquire(name, a, ttl, priority=7)
    emit(step="acquire_priority", token=lease.fencing_token, priority=lease.priority)
    t = c.transfer(name, a, lease.fencing_token, b, checkpoint={"n": 1}, reserve=10.0)
    emit(step="transfer", held=t.held, reservedFor=t.reserved_for)
    try:
        c.acquire(name, env.holder + "-c", ttl)
        emit(step="acquire_reserved", error="none")
        raise SystemExit(1)
    except leasesvc.LeaseReservedError as e:
        emit(step="acquire_reserved", error=code(e), reservedFor=e.reserved_for)
    except leasesvc.LeaseError as e:
        emit(step="acquire_reserved", error=code(e))
    s = c.acquire(name, b, ttl)
    emit(step="successor", holder=s.holder, token=s.fencing_token, checkpointN=_checkpoint_n(s),
         checkpointToken=s.checkpoint_token)

    y = name + "-yield"
    h = c.acquire(y, a, ttl, priority=1)
    emit(step="holding", token=h.fencing_token, priority=h.priority)
    deadline = time.monotonic() + 10
    while True:
        r = c.renew(y, a, h.fencing_token)
        if r.yield_requested or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    emit(step="yield_requested", yieldRequested=r.yield_requested, yieldTo=r.yield_to, candidates=r.candidates)
    rel = c.release(y, a, h.fencing_token, checkpoint={"n": 2})
    emit(step="released", held=rel.held, checkpointN=_checkpoint_n(rel))
    emit(step="done")


def case_delete(env: Env) -> None:
    """The ``delete`` case of PROTOCOL.md (docs/contract.md §15)."""
    c, name, a, b, ttl = env.client, env.name, env.holder, env.holder + "-b", env.ttl
    lease = c.acquire(name, a, ttl)
    emit(step="acquire", token=lease.fencing_token)
    expect_error("delete_held", lambda: c.delete(name))
    rel = c.release(name, a, lease.fencing_token)
    emit(step="release", held=rel.held)
    d = c.delete(name)
    emit(step="delete", holder=d.holder, token=d.fencing_token, held=d.held)
    expect_error("get_deleted", lambda: c.get(name))
    expect_error("delete_again", lambda: c.delete(name))
    other = c.acquire(name, b, ttl)
    emit(step="acquire_after", holder=other.holder, token=other.fencing_token)
    emit(step="done")


def case_session(env: Env) -> None:
    """The ``session`` case of PROTOCOL.md (docs/contract.md §14): a session
    of window 1 s, its deadline after the first acknowledged heartbeat, an
    acquire through it, a plain renew refused as session_held, a checkpoint
    and a release over it, then a holding the driver frees by killing the
    agent (or a stop line closes the session)."""
    c, name, a, b, ttl = env.client, env.name, env.holder, env.holder + "-b", env.ttl
    s = c.open_session(window=1.0)
    emit(step="opened", windowMs=int(round(s.window * 1000)))
    while s.deadline() is None:  # the first heartbeat goes out at once
        time.sleep(0.005)
    emit(step="deadline", aheadMs=int(((s.deadline() or 0) - time.monotonic()) * 1000))
    lease = s.acquire(name, a)
    emit(step="acquire", holder=lease.holder, token=lease.fencing_token, held=lease.held, session=lease.session,
         sessionWindowMs=lease.session_window_ms)
    expect_error("renew_plain", lambda: c.renew(name, a, lease.fencing_token))
    expect_error("acquire_other", lambda: c.acquire(name, b, ttl))
    r = s.renew(name, a, lease.fencing_token, checkpoint={"n": 1})
    emit(step="checkpoint", token=r.fencing_token, checkpointN=_checkpoint_n(r))
    rel = s.release(name, a, lease.fencing_token, checkpoint={"n": 2})
    emit(step="release", held=rel.held, checkpointN=_checkpoint_n(rel))
    h = s.acquire(name, a)
    emit(step="holding", token=h.fencing_token)
    wait_for_stop()  # the driver kills the agent here; a stop closes the session
    s.close()


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def case_fence(env: Env) -> None:
    """The ``fence`` case of PROTOCOL.md (docs/contract.md §17): the
    service's proofs verify through its JWKS, and a Guard refuses altered,
    re-signed, unknown-key, other-lease, stale and bare-number proofs, each
    with its reason."""
    c, name, a, b, ttl = env.client, env.name, env.holder, env.holder + "-b", env.ttl
    v = fence.Verifier(fence.RemoteKeys(env.url.rstrip("/") + "/.well-known/jwks.json"), "leasesvc")
    g = fence.Guard(v)
    lease = c.acquire(name, a, ttl)
    mine, driver = lease.proof, os.environ["LEASE_PROOF"]
    for step, proof in (("verify", mine), ("verify_driver", driver)):
        cl = v.verify(proof)
        emit(step=step, lease=cl.lease, holder=cl.holder, token=cl.fencing_token)
    h, p, s = mine.split(".")
    ds = driver.split(".")[2]
    tampered = ".".join((h, _b64(_unb64(p).replace(b'"fencingToken":1,', b'"fencingToken":1000000,', 1)), s))
    hdr = _unb64(h)
    at = hdr.index(b'"kid":"') + len(b'"kid":"')
    unknown = ".".join((_b64(hdr[:at] + (b"B" if hdr[at:at + 1] == b"A" else b"A") + hdr[at + 1:]), p, s))

    def refused(step: str, f: Callable[[], Any]) -> None:
        try:
            f()
        except fence.FenceError as e:
            emit(step=step, error=e.reason, message=str(e))
            return
        emit(step=step, error="none")
        raise SystemExit(1)

    refused("tampered", lambda: v.verify(tampered))
    refused("wrong_signature", lambda: v.verify(".".join((h, p, ds))))
    refused("unknown_kid", lambda: v.verify(unknown))
    emit(step="guard", token=g.check(name, mine).fencing_token)
    refused("other_lease", lambda: g.check(name, driver))
    c.release(name, a, lease.fencing_token)
    nxt = g.check(name, c.acquire(name, b, ttl).proof)
    emit(step="next_holder", holder=nxt.holder, token=nxt.fencing_token)
    refused("stale", lambda: g.check(name, mine))
    refused("forged", lambda: g.check(name, "1000000"))
    refused("missing", lambda: g.check(name, ""))
    emit(step="highest", token=g.highest(name))
    emit(step="done")


def case_keeper(env: Env) -> None:
    """The ``keeper`` case of PROTOCOL.md (issue 38): a Keeper (LEASE_KEEPER
    = plain: renewals at LEASE_TTL_MS; session: a session of window 1 s)
    holds LEASE_NAME, moves its deadline by itself, writes a checkpoint,
    reports the loss the driver's revoke causes, holds it again and
    releases it with a checkpoint. A stop line or EOF at any time closes
    the keeper and exits 0."""
    mode = env.keeper_mode
    k = env.keeper()

    def stop_on_stdin() -> None:
        wait_for_stop()
        k.close()
        sys.stdout.flush()
        os._exit(0)

    threading.Thread(target=stop_on_stdin, daemon=True).start()
    emit(step="keeper", mode=mode)
    changes: "queue.Queue[Tuple[str, Dict[str, Any]]]" = queue.Queue()

    def hold() -> leasesvc.Holding:
        h = k.hold(env.name, env.holder)
        h.on_change(lambda kind, info: changes.put((kind, info)))
        d = h.wait_deadline(float("-inf"), 5.0)  # (a session's first ack came with its open)
        emit(step="held", token=h.token, mode=h.mode, aheadMs=int(((d or 0) - time.monotonic()) * 1000))
        return h

    def next_change(want: str, until: Callable[[Dict[str, Any]], bool]) -> Dict[str, Any]:
        while True:
            kind, info = changes.get(timeout=30)
            if kind == want and until(info):
                return info
            if kind == "lost":
                emit(step="lost", token=h.token, error=code(info["error"]))
                raise SystemExit(1)

    h = hold()
    first = h.deadline or 0.0
    info = next_change("moved", lambda i: not i["call"] and i["deadline"] is not None and i["deadline"] > first)
    emit(step="moved", token=h.token, aheadMs=int((info["deadline"] - time.monotonic()) * 1000))
    r = h.renew({"n": 1})
    emit(step="checkpoint", token=r.fencing_token, checkpointN=_checkpoint_n(r))
    info = next_change("lost", lambda i: True)
    emit(step="lost", token=h.token, error=code(info["error"]))
    h = hold()
    rel = h.release({"n": 2})
    emit(step="released", held=rel.held, checkpointN=_checkpoint_n(rel))
    emit(step="done")
    k.close()


def case_lifecycle_limit(env: Env) -> None:
    """``lifecycle_limit`` (rule L1): the agent's principal has no session
    left; the keeper asks for one (window 1 s), is refused at the session
    limit and holds by plain renewals for its life, even once a session
    would be granted."""
    k = leasesvc.Keeper(env.client, window=1.0, ttl=env.ttl)
    h = k.hold(env.name, env.holder)
    emit(step="held", token=h.token, mode=k.mode, reason=k.plain_reason)
    emit(step="waiting")
    if read_line() != "go":
        k.close()
        return
    h2 = k.hold(env.name + "-2", env.holder)
    emit(step="held2", token=h2.token, mode=k.mode)
    k.close()
    emit(step="done")


def case_lifecycle_reopen(env: Env) -> None:
    """``lifecycle_reopen`` (rule L2): a keeper of a session of window 1 s
    holds LEASE_NAME-h and runs an Elector on LEASE_NAME; the driver pauses
    the agent past the window, the service ends the session: the holding
    ends with the lost error, the term ends, and the keeper's new session
    lets the Elector lead again."""
    k = leasesvc.Keeper(env.client, window=1.0)

    def on_change(kind: str, info: Dict[str, Any]) -> None:
        if kind == "lost":
            emit(step="lost", token=h.token, error=code(info["error"]))

    h = k.hold(env.name + "-h", env.holder)
    h.on_change(on_change)
    if h.lost:  # (lost before the listener was there)
        emit(step="lost", token=h.token, error=code(h.cause or leasesvc.LeaseLostError()))
    emit(step="holding", token=h.token)

    def on_term(term: leasesvc.Term) -> None:
        emit(step="leading", token=term.token, mode=k.mode)
        term.wait()
        emit(step="stopped")

    e = leasesvc.Elector(k, env.name, holder=env.holder, callbacks=leasesvc.Callbacks(on_started_leading=on_term))
    e.start()
    wait_for_stop()
    e.stop(timeout=15)
    k.close()
    if e.error is not None:
        print(f"elector: {e.error}", file=sys.stderr)
        raise SystemExit(1)


def case_lifecycle_cancel(env: Env) -> None:
    """``lifecycle_cancel`` (rule L3): an Elector with LEASE_CANCEL_BEFORE_MS
    over the keeper of LEASE_KEEPER is refused (invalid_argument, by its
    constructor or its run) when it does not fit the TTL or the window, and
    leads when it fits."""
    k = env.keeper()
    cb = int(os.environ["LEASE_CANCEL_BEFORE_MS"]) / 1000
    events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()

    def on_term(term: leasesvc.Term) -> None:
        events.put(("leading", term.token))
        term.wait()

    def run(e: leasesvc.Elector) -> None:
        try:
            e.run()
            events.put(("returned", None))
        except BaseException as err:  # (reported by the main thread)
            events.put(("error", err))

    try:
        e = leasesvc.Elector(k, env.name, holder=env.holder, cancel_before=cb,
                             callbacks=leasesvc.Callbacks(on_started_leading=on_term))
        threading.Thread(target=run, args=(e,), daemon=True).start()
        what, v = events.get(timeout=30)
        if what == "error":
            raise v
    except leasesvc.InvalidArgumentError as err:  # (InvalidOptionError: the SDK's invalid argument)
        emit(step="refused", error=code(err), message=str(err))
        k.close()
        return
    if what != "leading":
        print(f"agent: the Elector's run returned: {what}", file=sys.stderr)
        raise SystemExit(1)
    emit(step="leading", token=v)
    wait_for_stop()
    e.stop(timeout=15)
    k.close()


def case_lifecycle_renewal(env: Env) -> None:
    """``lifecycle_renewal`` (rule L4): a plain keeper renews what it holds
    without its owner renewing; closing it releases the lease and stops the
    renewals."""
    k = env.keeper()
    h = k.hold(env.name, env.holder)
    emit(step="held", token=h.token)
    time.sleep(3 * env.ttl)  # the agent never renews itself
    g = env.client.get(env.name)
    emit(step="slept", held=g.held and g.holder == env.holder, token=g.fencing_token)
    line = read_line()
    k.close()
    if line != "go":
        return
    emit(step="closed")
    wait_for_stop()


CASES = {"basic": case_basic, "wait": case_wait, "ratelimit": case_ratelimit,
         "freeze": case_freeze, "revoke": case_revoke, "succession": case_succession, "delete": case_delete,
         "session": case_session, "fence": case_fence, "keeper": case_keeper,
         "lifecycle_limit": case_lifecycle_limit, "lifecycle_reopen": case_lifecycle_reopen,
         "lifecycle_cancel": case_lifecycle_cancel, "lifecycle_renewal": case_lifecycle_renewal}


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: conformance_agent.py {{{'|'.join(CASES)}}}", file=sys.stderr)
        raise SystemExit(2)
    env = Env()
    try:
        CASES[sys.argv[1]](env)
    except leasesvc.LeaseError as e:
        emit(step="error", error=code(e))
        print(f"agent: {e}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
