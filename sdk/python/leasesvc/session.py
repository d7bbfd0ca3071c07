"""``Session``: leases held through one WebSocket that heartbeats
(docs/contract.md §14), over :mod:`leasesvc._websocket`.

The service holds a session's leases in its backend at a long TTL and
releases them as soon as the agent's heartbeats stop for a window, so a
crashed agent's leases free within that window. The agent leads until the
session's deadline: the :func:`time.monotonic` send time of the last
heartbeat the service acknowledged + window × (1 − drift margin). The
service receives a heartbeat after it was sent and waits a full window from
its receipt before it ends the session, so the agent always stops first.

Threads: one sends a heartbeat every window/4 (the service's
``heartbeatMs``); one per socket reads what the service sends (answers,
acks, and the pushes ``lost``, ``revoked``, ``yield`` and ``move``). A
dropped socket is reconnected and the session resumed with the leases and
tokens it holds (on any instance); a ``move`` opens the new socket and
resumes on it before the old one is closed (make before break).

Resumes race with what the replaced socket still delivers: the old
instance answers and acks until its next renewal fails. The session counts
the resumes begun and stamps each socket with the count when it became
current. An acquire answered on a socket a resume began after was not
claimed by that resume: the holding stays in the table (a later resume
lists it) and is acquired again through the current socket before the
caller gets it. From the moment a resume is sent, the older socket gets no
heartbeat and its acks count only for heartbeats sent before. A resume that
fails after it was sent leaves its outcome unknown: the older socket is
abandoned and the session resumes again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import _websocket
from .backoff import Backoff
from .errors import (InternalError, InvalidArgumentError, LeaseError, LeaseLostError, NotFoundError,
                     RateLimitedError, SessionsUnsupportedError, UnavailableError)
from .lease import Lease

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, _Cancel

__all__ = ["Session", "SUBPROTOCOL", "DEFAULT_WINDOW", "MIN_WINDOW", "MAX_WINDOW"]

#: The WebSocket subprotocol of sessions.
SUBPROTOCOL = "leasesvc.session.v1"
#: The route of sessions.
ROUTE = "/v1/sessions:connect"
#: The heartbeat window, seconds: the default and its bounds.
DEFAULT_WINDOW = 1.0
MIN_WINDOW = 0.2
MAX_WINDOW = 60.0
#: A socket on which nothing at all arrived for this many windows (at least
#: SILENT_MIN seconds) while heartbeats went out is taken for dead (a
#: half-open connection) and replaced: the session resumes on a new one.
SILENT_WINDOWS = 4
SILENT_MIN = 5.0
#: The statuses of an upgrade that mean "no sessions here".
UNSUPPORTED_STATUSES = (404, 405, 501)

#: A push handler: ``f(kind, message)``, kind one of "deadline" (message
#: ``{"deadline": float}``), "lost", "revoked", "yield" (the push as sent).
Watcher = Callable[[str, Dict[str, Any]], None]


class SessionLimitError(RateLimitedError):
    """The service refused to open a session at its session limit
    (``LEASESVC_MAX_SESSIONS`` or ``LEASESVC_MAX_SESSIONS_PER_CALLER``: 429
    ``resource_exhausted`` answered to ``open``, docs/contract.md §14). An
    Elector then holds with plain renewals, and asks for a session again on
    its next campaign. (A 429 before the upgrade is the caller's rate
    limit, a plain :class:`~leasesvc.RateLimitedError`.)"""


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class _Call:
    """One request awaiting its answer (its state guarded by the session's
    lock)."""

    __slots__ = ("op", "name", "holder", "done", "answer", "err", "abandoned", "vouched")

    def __init__(self, op: str, name: str, holder: str) -> None:
        self.op, self.name, self.holder = op, name, holder
        self.done = threading.Event()
        self.answer: Optional[Dict[str, Any]] = None
        self.err: Optional[LeaseError] = None
        self.abandoned = False  # the caller stopped waiting
        # an acquire's holding was answered on the socket of the latest
        # resume begun, so that socket's acks vouch for it
        self.vouched = True


class _Conn:
    """One socket of the session and the requests sent on it."""

    def __init__(self, ws: _websocket.WebSocket, gen: int) -> None:
        self.ws = ws
        #: the session's count of resumes begun when this socket became
        #: current (right after its own resume's snapshot, or at open)
        self.gen = gen
        self.pending: Dict[int, _Call] = {}
        self.moved = False  # replaced by a newer socket: its end is no drop
        self.last_rx = time.monotonic()  # when a message last arrived on it
        #: the session clock's time a resume was first sent on a newer
        #: socket: no heartbeat goes out on this one after it, and its acks
        #: count only for heartbeats sent before it
        self.superseded: Optional[float] = None


class Session:
    """Leases held through one heartbeating WebSocket (docs/contract.md
    §14); open one with :meth:`leasesvc.Client.open_session`. Safe for use
    by many threads; a context manager (the block's end closes it).

    :meth:`acquire`, :meth:`renew`, :meth:`release` and :meth:`transfer`
    travel over the socket and answer like the Client's (a session lease has
    no TTL of its own: the service holds it at its session lease TTL).
    :meth:`deadline` is when leading on the session's leases must stop.
    Electors share one session per Client by default.

    Attributes:
        window: the heartbeat window the service granted, seconds.
        heartbeat_interval: how often a heartbeat is sent, seconds.
        lease_ttl: the TTL the service holds the session's leases at.
        drift_margin: the fraction of the window given up to clock-rate
            differences.
    """

    def __init__(self, client: "Client", *, window: float = DEFAULT_WINDOW, drift_margin: float = 0.1,
                 logger: Optional[logging.Logger] = None, clock: Callable[[], float] = time.monotonic,
                 heartbeats: bool = True) -> None:
        """Use :meth:`leasesvc.Client.open_session`. ``heartbeats=False``
        (tests) sends heartbeats only when :meth:`_heartbeat` is called."""
        if not MIN_WINDOW <= window <= MAX_WINDOW:
            raise ValueError(f"leasesvc.Session: window {window} must be within {MIN_WINDOW} … {MAX_WINDOW} s")
        if not 0.01 <= drift_margin <= 0.5:
            raise ValueError(f"leasesvc.Session: drift_margin {drift_margin} must be within 0.01 … 0.5")
        self._c = client
        self.window = window
        self.drift_margin = drift_margin
        self.heartbeat_interval = window / 4
        self.lease_ttl = 0.0
        self._log = logger or logging.getLogger("leasesvc")
        self._clock = clock
        self._heartbeats = heartbeats
        u = urllib.parse.urlsplit(client.base_url)
        scheme = "wss" if u.scheme == "https" else "ws"
        self._url = urllib.parse.urlunsplit((scheme, u.netloc, u.path.rstrip("/") + ROUTE, "", ""))
        self._mu = threading.Lock()
        self._cond = threading.Condition(self._mu)
        self._send_mu = threading.Lock()  # ids are sent in increasing order
        self._seq = 0
        self._sid = ""  # the session id: a bearer secret, never logged
        self._epoch = 0
        self._conn: Optional[_Conn] = None
        self._gen = 0  # resumes begun: +1 at each resume's snapshot of the leases
        self._hb: Dict[int, float] = {}  # heartbeat id → its send time
        self._deadline: Optional[float] = None
        self._acks = 0
        self._held: Dict[str, Tuple[str, int]] = {}  # name → (holder, token)
        self._watchers: Dict[int, Tuple[str, int, Watcher]] = {}
        self._seq_w = 0
        self._closing = False
        self._done = threading.Event()  # close() finished
        self._reconnecting = False
        self._moving = False
        #: How many times the session was resumed on a new socket (after a
        #: drop or a move), and how many times it had to start anew.
        self.resumes = 0
        self.restarts = 0

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- state ----------------------------------------------------------

    def deadline(self) -> Optional[float]:
        """When leading on this session's leases must stop, on its monotonic
        clock (:func:`time.monotonic` by default): the send time of the last
        acknowledged heartbeat + window × (1 − drift margin). ``None``
        before the first acknowledgement."""
        with self._mu:
            return self._deadline

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    @property
    def epoch(self) -> int:
        """The session's ownership epoch: 1 when opened, +1 per resume."""
        return self._epoch

    def held(self) -> Dict[str, Tuple[str, int]]:
        """The leases the session holds as far as it knows: name →
        (holder, fencing token)."""
        with self._mu:
            return dict(self._held)

    # --- operations -----------------------------------------------------

    def acquire(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]] = None, wait: float = 0.0,
                priority: Optional[int] = None, preempt: bool = False) -> Lease:
        """Take the lease into the session, as :meth:`leasesvc.Client.acquire`
        does (no TTL: the session holds it).

        Raises:
            LeaseHeldError, LeaseReservedError: as the Client's acquire.
            UnavailableError: the socket dropped before the answer, or no
                answer in time.
        """
        return Lease.from_json(self._acquire(name, holder, metadata=metadata, wait=wait, priority=priority,
                                             preempt=preempt))

    def renew(self, name: str, holder: str, fencing_token: int, *, metadata: Optional[Dict[str, Any]] = None,
              checkpoint: Optional[Dict[str, Any]] = None) -> Lease:
        """Write ``metadata`` and/or ``checkpoint`` on the session-held
        holding (the session keeps it alive; a renew is needed only to
        write).

        Raises:
            LeaseLostError: not the session's live holding.
        """
        return Lease.from_json(self._renew(name, holder, fencing_token, metadata=metadata, checkpoint=checkpoint))

    def release(self, name: str, holder: str, fencing_token: int, *,
                checkpoint: Optional[Dict[str, Any]] = None) -> Lease:
        """End the session-held holding now, as :meth:`leasesvc.Client.release`.

        Raises:
            LeaseLostError: anything else.
        """
        return Lease.from_json(self._release(name, holder, fencing_token, checkpoint=checkpoint))

    def transfer(self, name: str, holder: str, fencing_token: int, to: str, *,
                 checkpoint: Optional[Dict[str, Any]] = None, reserve: Optional[float] = None,
                 to_principal: Optional[str] = None) -> Lease:
        """Hand the session-held holding over to ``to``, as
        :meth:`leasesvc.Client.transfer`."""
        body: Dict[str, Any] = {"name": name, "holder": holder, "fencingToken": fencing_token, "to": to}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        if reserve is not None:
            body["reserveMs"] = max(1, _ms(reserve))
        if to_principal is not None:
            body["toPrincipal"] = to_principal
        return Lease.from_json(self._transfer(body))

    def _acquire(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]] = None, wait: float = 0.0,
                 priority: Optional[int] = None, preempt: bool = False,
                 cancel: Optional["_Cancel"] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": name, "holder": holder}
        if metadata is not None:
            body["metadata"] = metadata
        if wait > 0:
            body["waitMs"] = _ms(wait)
        if priority is not None or preempt:
            body["priority"] = priority or 0
        if preempt:
            body["preempt"] = True
        return self._request("acquire", body, extra=max(wait, 0.0), cancel=cancel)

    def _renew(self, name: str, holder: str, fencing_token: int, *, metadata: Optional[Dict[str, Any]] = None,
               checkpoint: Optional[Dict[str, Any]] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": name, "holder": holder, "fencingToken": fencing_token}
        if metadata is not None:
            body["metadata"] = metadata
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        return self._request("renew", body, timeout=timeout)

    def _release(self, name: str, holder: str, fencing_token: int, *, checkpoint: Optional[Dict[str, Any]] = None,
                 timeout: Optional[float] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": name, "holder": holder, "fencingToken": fencing_token}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        return self._request("release", body, timeout=timeout)

    def _transfer(self, body: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        return self._request("transfer", body, timeout=timeout)

    # --- requests -------------------------------------------------------

    def _request(self, op: str, body: Dict[str, Any], *, timeout: Optional[float] = None, extra: float = 0.0,
                 cancel: Optional["_Cancel"] = None) -> Dict[str, Any]:
        """Send one request on the current socket and return the answer's
        lease JSON; keep the session's list of held leases up to date. An
        acquire answered on a socket that a resume replaced is acquired
        again through the current socket (:meth:`_vouch`)."""
        t = (timeout or self._c.request_timeout) + extra
        end = time.monotonic() + t
        lease, vouched = self._exchange(op, body, t, min(t, self._c.request_timeout), cancel)
        if vouched:
            return lease
        return self._vouch(body, lease, end, cancel)

    def _vouch(self, body: Dict[str, Any], lease: Dict[str, Any], end: float,
               cancel: Optional["_Cancel"]) -> Dict[str, Any]:
        """The acquire of ``body`` was answered with ``lease`` on a socket a
        resume began after, so that resume did not claim the holding and the
        acks of its socket do not vouch for it. The holding stays in the
        table (a later resume lists it); acquire it again, without waiting,
        through the socket of the latest resume (the service answers the same
        holder through the same session with the same token, moved to the
        new epoch: docs/contract.md §14, Resume) until an answer is vouched
        for or ``end`` (:func:`time.monotonic`) passes; then, or on an error,
        release the holding best-effort and raise."""
        name, holder = str(body.get("name", "")), str(body.get("holder", ""))
        again = {k: v for k, v in body.items() if k != "waitMs"}
        while True:
            token = int(lease.get("fencingToken") or 0)
            self._log.info("leasesvc session: lease %s (fencing token %d) was answered on a socket a resume "
                           "replaced; acquiring it again through the current one", name, token)
            try:
                left = end - time.monotonic()
                if cancel is not None and cancel.cancelled:
                    raise UnavailableError("cancelled")._named("acquire", name)
                if left <= 0:
                    raise UnavailableError("no answer through the session's current socket in time")._named(
                        "acquire", name)
                lease, vouched = self._exchange("acquire", again, left, left, cancel, fresh=True)
            except LeaseError:
                self._release_unvouched(name, holder, token)
                raise
            if vouched:
                return lease

    def _release_unvouched(self, name: str, holder: str, token: int) -> None:
        """Release a holding no socket vouched for, best-effort, and drop it
        from the table whatever the answer."""
        try:
            self._release(name, holder, token)
        except LeaseError as e:
            self._log.warning("leasesvc session: could not release %s (fencing token %d), acquired on a socket "
                              "a resume replaced: %s", name, token, e)
            self._forget(name, token)

    def _exchange(self, op: str, body: Dict[str, Any], t: float, wait: float, cancel: Optional["_Cancel"],
                  fresh: bool = False) -> Tuple[Dict[str, Any], bool]:
        """Send one request on the current socket (waiting up to ``wait``
        seconds for one; with ``fresh``, for the socket of the latest
        resume), wait up to ``t`` seconds for its answer, and return the
        answer's lease JSON and whether an acquire's holding was vouched for
        (always True for the other operations)."""
        name, holder = str(body.get("name", "")), str(body.get("holder", ""))
        conn = self._current(wait, fresh)
        if conn is None:
            err = UnavailableError("the session is closed" if self._closing else
                                   "the session's socket is reconnecting")
            raise err._named(op, name)
        call = _Call(op, name, holder)
        try:
            self._send(conn, dict(body, type=op), call)
        except _websocket.ConnectionClosedError as e:
            with self._mu:
                conn.pending = {k: v for k, v in conn.pending.items() if v is not call}
            raise UnavailableError(f"the session's socket closed: {e}", cause=e)._named(op, name) from e
        if cancel is not None:
            cancel.on_cancel(lambda: self._abandon(call, UnavailableError("cancelled")))
        if not call.done.wait(t):
            self._abandon(call, UnavailableError(f"no answer within {t:g} s"))
        with self._mu:
            err, msg = call.err, call.answer
        if err is not None:
            raise err._named(op, name)
        assert msg is not None
        if msg.get("type") == "error":
            e = _problem(msg.get("problem"))
            if isinstance(e, LeaseLostError):
                self._forget(name, int(body.get("fencingToken") or 0))
            raise e._named(op, name)
        lease = msg.get("lease")
        if msg.get("type") != "result" or not isinstance(lease, dict):
            raise InternalError(f"session: answer {msg.get('type')!r} without a lease")._named(op, name)
        self._track(op, holder, body, lease)
        with self._mu:
            return lease, call.vouched

    def _abandon(self, call: _Call, err: LeaseError) -> None:
        """The caller stops waiting for ``call``; a late answer to an
        abandoned acquire is released."""
        with self._mu:
            if call.done.is_set():
                return
            call.abandoned, call.err = True, err
            call.done.set()

    def _track(self, op: str, holder: str, body: Dict[str, Any], lease: Dict[str, Any]) -> None:
        """Keep the table of held leases up to date after a renew, release or
        transfer (an acquire's holding is tracked when its answer arrives:
        :meth:`_take`)."""
        name, token = str(lease.get("name") or body.get("name", "")), int(lease.get("fencingToken") or 0)
        with self._mu:
            if op == "acquire":
                return
            if op == "renew":
                if lease.get("held") and str(lease.get("holder", "")) == holder:
                    self._held[name] = (holder, token)
            else:  # release, transfer
                h = self._held.get(name)
                if h is not None and h[1] == int(body.get("fencingToken") or 0):
                    del self._held[name]

    def _forget(self, name: str, token: int) -> None:
        with self._mu:
            h = self._held.get(name)
            if h is not None and (token == 0 or h[1] == token):
                del self._held[name]

    def _current(self, timeout: float, fresh: bool = False) -> Optional[_Conn]:
        """The socket to send on, waiting up to ``timeout`` while one is
        being reconnected (with ``fresh``, also while the current one is
        older than the latest resume begun); None when closed or still
        reconnecting."""
        end = time.monotonic() + timeout
        with self._mu:
            while not self._closing and (self._conn is None or (fresh and self._conn.gen != self._gen)):
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            if self._closing or self._conn is None or (fresh and self._conn.gen != self._gen):
                return None
            return self._conn

    def _send(self, conn: _Conn, msg: Dict[str, Any], call: Optional[_Call] = None, heartbeat: bool = False) -> int:
        """Give ``msg`` the next id and send it (ids go out in increasing
        order); register ``call`` for its answer. A heartbeat is not sent
        (0) on a socket a resume on a newer one was sent after."""
        with self._send_mu:
            with self._mu:
                if heartbeat and conn.superseded is not None:
                    return 0
                self._seq += 1
                i = self._seq
                msg["id"] = i
                if call is not None:
                    conn.pending[i] = call
                if heartbeat:
                    self._hb[i] = self._clock()
            conn.ws.send(json.dumps(msg, separators=(",", ":")))
            return i

    # --- heartbeats -----------------------------------------------------

    def _heartbeat(self) -> bool:
        """Send one heartbeat on the current socket; False when there is
        none."""
        with self._mu:
            conn = self._conn
            if conn is None or self._closing:
                return False
            # heartbeats older than a window cannot move the deadline any more
            old = self._clock() - 2 * self.window
            for k in [k for k, v in self._hb.items() if v < old]:
                del self._hb[k]
        try:
            return self._send(conn, {"type": "heartbeat"}, heartbeat=True) != 0
        except _websocket.ConnectionClosedError:
            return False  # its reader reconnects

    def _beat(self) -> None:
        """The heartbeat thread; it also replaces a socket gone silent."""
        while True:
            with self._mu:
                if self._closing:
                    return
                interval = self.heartbeat_interval
                conn = self._conn
                silent = max(SILENT_WINDOWS * self.window, SILENT_MIN)
            # (a socket a resume was sent after gets no heartbeats, so it falls
            # silent: that resume's answer or failure decides its fate)
            if conn is not None and conn.superseded is None and time.monotonic() - conn.last_rx > silent:
                self._log.warning("leasesvc session: nothing arrived for %gs; replacing the socket", silent)
                threading.Thread(target=conn.ws.close, args=(_websocket.CLOSE_GOING_AWAY, "silent", 0.5),
                                 daemon=True).start()
                conn.last_rx = time.monotonic()  # (once)
            self._heartbeat()
            with self._mu:
                self._cond.wait_for(lambda: self._closing, timeout=interval)

    def _on_ack(self, conn: _Conn, re_: Any) -> None:
        """An ack on ``conn``: the deadline moves to the heartbeat's send
        time + window × (1 − drift margin), unless the heartbeat went out
        after a resume was sent on a newer socket (the old instance acks
        until it learns it lost the session; the new one may already count
        the window from its last message)."""
        with self._mu:
            sent = self._hb.pop(re_, None) if isinstance(re_, int) else None
            if sent is None:
                return
            if conn.superseded is not None and sent >= conn.superseded:
                return
            for k in [k for k in self._hb if k < re_]:
                del self._hb[k]  # sent before, never acked: the service found them unsafe
            d = sent + self.window * (1 - self.drift_margin)
            self._acks += 1
            if self._deadline is not None and d <= self._deadline:
                return
            self._deadline = d
            self._cond.notify_all()
            watchers = [w for _, _, w in self._watchers.values()]
        for w in watchers:
            self._call_watcher(w, "deadline", {"deadline": d})

    def _wait_deadline(self, after: float, timeout: float) -> Optional[float]:
        """Wait up to ``timeout`` seconds for a deadline later than
        ``after``; the deadline then (maybe still not later)."""
        end = time.monotonic() + timeout
        with self._mu:
            while not self._closing and (self._deadline is None or self._deadline <= after):
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._deadline

    # --- pushes ---------------------------------------------------------

    def _watch(self, name: str, token: int, fn: Watcher) -> int:
        """Route the pushes about ``name`` (held with ``token``) and every
        deadline change to ``fn``; returns a handle for :meth:`_unwatch`."""
        with self._mu:
            self._seq_w += 1
            h = self._seq_w
            self._watchers[h] = (name, token, fn)
            return h

    def _unwatch(self, handle: int) -> None:
        with self._mu:
            self._watchers.pop(handle, None)

    def _holds(self, name: str, token: int) -> bool:
        with self._mu:
            h = self._held.get(name)
            return h is not None and h[1] == token

    def _push(self, kind: str, msg: Dict[str, Any]) -> None:
        """A ``lost``, ``revoked`` or ``yield`` push: to the watchers of that
        lease."""
        name = str(msg.get("name", ""))
        token = msg.get("fencingToken")
        token = int(token) if isinstance(token, int) else 0
        with self._mu:
            if kind in ("lost", "revoked"):
                h = self._held.get(name)
                if h is not None and (token == 0 or h[1] == token):
                    del self._held[name]
            targets = [w for n, t, w in self._watchers.values() if n == name and (token == 0 or t == token)]
        if kind == "lost":
            self._log.warning("leasesvc session: lease %s (fencing token %d) lost: %s", name, token, msg.get("reason", ""))
        elif kind == "revoked":
            self._log.warning("leasesvc session: lease %s (fencing token %d) revoked by %s: %s", name, token,
                              msg.get("operator", ""), msg.get("reason", ""))
        for w in targets:
            self._call_watcher(w, kind, msg)

    def _call_watcher(self, w: Watcher, kind: str, msg: Dict[str, Any]) -> None:
        try:
            w(kind, msg)
        except Exception:
            self._log.exception("leasesvc session: a %s handler raised", kind)

    def _lose_all(self, reason: str) -> None:
        """Every lease the session held is lost (the session ended)."""
        with self._mu:
            held, self._held = self._held, {}
        for name, (_, token) in held.items():
            self._push("lost", {"type": "lost", "name": name, "fencingToken": token, "reason": reason})

    # --- the sockets ----------------------------------------------------

    def _dial(self) -> _websocket.WebSocket:
        """Open a socket (the upgrade, authenticated like every request)."""
        try:
            return _websocket.connect(self._url, subprotocols=[SUBPROTOCOL], headers=self._c._headers(False),
                                      timeout=self._c.request_timeout)
        except _websocket.HandshakeError as e:
            if e.status in UNSUPPORTED_STATUSES:
                raise SessionsUnsupportedError(f"the service answered the session upgrade with {e.status}",
                                               status=e.status)._named("session", "") from e
            if e.status == 0:
                raise UnavailableError(str(e), cause=e)._named("session", "") from e
            from .client import problem_error

            raise problem_error(e.status, e.header("Retry-After"), e.body)._named("session", "") from e
        except ValueError as e:
            raise InvalidArgumentError(str(e))._named("session", "") from e

    def _hello(self, ws: _websocket.WebSocket, msg: Dict[str, Any], want: str) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        """Send ``open`` or ``resume`` on a new socket and read its answer
        (and whatever came before it); close the socket on a refusal."""
        with self._send_mu:
            with self._mu:
                self._seq += 1
                i = self._seq
                old = self._conn
                if msg["type"] == "resume" and old is not None and old.superseded is None:
                    old.superseded = self._clock()  # from now on it gets no heartbeat
            msg["id"] = i
            try:
                ws.send(json.dumps(msg, separators=(",", ":")))
            except _websocket.ConnectionClosedError as e:
                raise UnavailableError(f"session {msg['type']}: {e}", cause=e)._named("session", "") from e
        end = time.monotonic() + self._c.request_timeout
        early: List[Dict[str, Any]] = []
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise UnavailableError(f"no answer to {msg['type']} within {self._c.request_timeout:g} s")
                try:
                    ans = json.loads(ws.recv(left))
                except _websocket.ReceiveTimeoutError:
                    continue
                except ValueError as e:
                    raise InternalError(f"session {msg['type']}: the answer is not JSON: {e}") from e
                if not isinstance(ans, dict):
                    continue
                if ans.get("re") == i:
                    if ans.get("type") == "error":
                        raise _problem(ans.get("problem"))
                    if ans.get("type") != want:
                        raise InternalError(f"session {msg['type']}: answered {ans.get('type')!r}")
                    return ans, early
                early.append(ans)
        except _websocket.ConnectionClosedError as e:
            ws.close()
            raise UnavailableError(f"session {msg['type']}: {e}", cause=e)._named("session", "") from e
        except LeaseError as e:
            ws.close()
            raise e._named("session", "")

    def _adopt(self, ans: Dict[str, Any]) -> None:
        """Take the window, heartbeat interval and TTL the service granted."""
        with self._mu:
            if isinstance(ans.get("sessionId"), str) and ans["sessionId"]:
                self._sid = ans["sessionId"]
            self._epoch = int(ans.get("epoch") or self._epoch)
            if int(ans.get("windowMs") or 0) > 0:
                self.window = int(ans["windowMs"]) / 1000
            hb = int(ans.get("heartbeatMs") or 0)
            self.heartbeat_interval = hb / 1000 if hb > 0 else self.window / 4
            self.lease_ttl = int(ans.get("leaseTtlMs") or 0) / 1000

    def _open(self) -> None:
        """Open the session (the first socket), start its threads, and wait
        up to a window for the first heartbeat's acknowledgement."""
        ws = self._dial()
        try:
            ans, early = self._hello(ws, {"type": "open", "windowMs": _ms(self.window)}, "opened")
        except RateLimitedError as e:
            raise SessionLimitError(e.detail, status=e.status, code=e.code, retry_after=e.retry_after,
                                    op=e.op, name=e.name) from e
        self._adopt(ans)
        self._install(ws, early)
        self._log.info("leasesvc session: opened (window %gs)", self.window)
        if self._heartbeats:
            threading.Thread(target=self._beat, name="leasesvc-session-heartbeat", daemon=True).start()
            self._wait_deadline(float("-inf"), self.window)

    def _resume_on(self, ws: _websocket.WebSocket) -> Tuple[List[Dict[str, Any]], int]:
        """Resume the session on the new socket ``ws``: the leases it did
        not keep are lost. Returns what arrived before the answer and the
        count of resumes begun at this one's snapshot (the stamp of
        ``ws``)."""
        with self._mu:
            sent = dict(self._held)
            sid = self._sid
            self._gen += 1  # acquires answered on older sockets from now on are not in this snapshot
            gen = self._gen
        leases = [{"name": n, "holder": h, "fencingToken": t} for n, (h, t) in sorted(sent.items())]
        ans, early = self._hello(ws, {"type": "resume", "sessionId": sid, "windowMs": _ms(self.window),
                                      "leases": leases}, "resumed")
        self._adopt(ans)
        kept: Dict[str, int] = {}
        for x in ans.get("leases") or []:
            if isinstance(x, dict) and x.get("held"):
                kept[str(x.get("name", ""))] = int(x.get("fencingToken") or 0)
        reasons = {str(x.get("name", "")): x for x in ans.get("lost") or [] if isinstance(x, dict)}
        for name, (holder, token) in sent.items():
            if kept.get(name) == token:
                continue
            why = reasons.get(name) or {"name": name, "fencingToken": token, "reason": "lost"}
            self._push("lost", {"type": "lost", "name": name, "fencingToken": token,
                                "reason": str(why.get("reason", "lost"))})
        return early, gen

    def _install(self, ws: _websocket.WebSocket, early: List[Dict[str, Any]],
                 gen: Optional[int] = None) -> Optional[_Conn]:
        """Make ``ws`` the socket requests and heartbeats go to (ending a
        reconnect), stamped ``gen`` (its resume's; by default the count of
        resumes begun now), start its reader, and send a heartbeat at once;
        None (and ``ws`` closed) when the session closed meanwhile, or when
        a newer resume began (a move's resume raced a reconnect: the newer
        one's socket becomes current)."""
        with self._mu:
            conn = _Conn(ws, self._gen if gen is None else gen)
            if self._closing or conn.gen != self._gen:
                closing = True
            else:
                closing = False
                self._conn = conn
                self._reconnecting = False  # a drop of this socket reconnects again
                self._cond.notify_all()
        if closing:
            ws.close()
            return None
        for msg in early:
            self._dispatch(conn, msg)
        threading.Thread(target=self._read, args=(conn,), name="leasesvc-session-reader", daemon=True).start()
        if self._heartbeats:
            self._heartbeat()
        return conn

    def _read(self, conn: _Conn) -> None:
        """The reader of one socket; on its end, the requests waiting on it
        fail and, unless it was replaced or closed, the session reconnects."""
        why: BaseException
        while True:
            try:
                text = conn.ws.recv()
            except _websocket.ConnectionClosedError as e:
                why = e
                break
            except Exception as e:  # never let the reader die silently
                why = e
                conn.ws.close()
                break
            conn.last_rx = time.monotonic()
            try:
                msg = json.loads(text)
            except ValueError:
                self._log.warning("leasesvc session: a message that is not JSON: %.200s", text)
                continue
            if isinstance(msg, dict):
                self._dispatch(conn, msg)
        with self._mu:
            calls, conn.pending = list(conn.pending.values()), {}
            for call in calls:
                if not call.done.is_set():
                    call.err = UnavailableError(f"the session's socket closed before the answer: {why}")
                    call.done.set()
            current = self._conn is conn
            if current:
                self._conn = None
            closing = self._closing
            start = current and not closing and not conn.moved and not self._reconnecting
            if start:
                self._reconnecting = True
        if start:
            self._log.warning("leasesvc session: the socket dropped (%s); resuming", why)
            threading.Thread(target=self._reconnect, name="leasesvc-session-reconnect", daemon=True).start()

    def _dispatch(self, conn: _Conn, msg: Dict[str, Any]) -> None:
        typ = msg.get("type")
        re_ = msg.get("re")
        if typ == "ack":
            self._on_ack(conn, re_)
        elif typ in ("result", "error", "closed", "opened", "resumed") and isinstance(re_, int):
            with self._mu:
                call = conn.pending.pop(re_, None)
                if call is None:
                    return
                late = call.abandoned
                if not late:
                    if call.op == "acquire" and typ == "result":
                        call.vouched = self._take(conn, call, msg.get("lease"))
                    call.answer = msg
                    call.done.set()
            if late and call.op == "acquire" and typ == "result":
                self._release_late(call, msg.get("lease"))
        elif typ == "error":
            p = msg.get("problem") if isinstance(msg.get("problem"), dict) else {}
            self._log.warning("leasesvc session: the service refused the socket: %s %s", p.get("code", ""),
                              p.get("detail", ""))
        elif typ in ("lost", "revoked", "yield"):
            if not conn.moved:  # (the new socket's instance tells what still matters)
                self._push(str(typ), msg)
        elif typ == "move":
            threading.Thread(target=self._move, args=(conn, str(msg.get("reason", ""))),
                             name="leasesvc-session-move", daemon=True).start()
        else:
            self._log.debug("leasesvc session: ignored a message of type %r", typ)

    def _take(self, conn: _Conn, call: _Call, lease: Any) -> bool:
        """(Under the lock.) An acquire answered on ``conn`` with ``lease``:
        put the holding in the table, so that every resume whose snapshot
        comes later lists it, and tell whether it is vouched for: no resume
        began since ``conn`` became current, so ``conn`` is the socket of the
        latest resume (or of the open) and its acks cover the holding."""
        if not isinstance(lease, dict) or not lease.get("held") or str(lease.get("holder", "")) != call.holder:
            return True
        self._held[str(lease.get("name") or call.name)] = (call.holder, int(lease.get("fencingToken") or 0))
        return conn.gen == self._gen

    def _release_late(self, call: _Call, lease: Any) -> None:
        """An acquire the caller gave up on succeeded after all: release it."""
        if not isinstance(lease, dict) or not lease.get("held") or str(lease.get("holder", "")) != call.holder:
            return
        token = int(lease.get("fencingToken") or 0)

        def release() -> None:
            try:
                self._release(call.name, call.holder, token)
            except LeaseError as e:
                self._log.warning("leasesvc session: could not release %s, acquired after its caller gave up: %s",
                                  call.name, e)

        threading.Thread(target=release, daemon=True).start()

    def _backoff(self) -> Backoff:
        initial = min(0.05, self.heartbeat_interval / 2)
        return Backoff(initial, max(initial, min(self.window, 5.0)), 2.0)

    def _reconnect(self, delay: float = 0.0) -> None:
        """Resume on a new socket (after ``delay`` seconds) until it works or
        the session closes; a session the service ended is opened anew (its
        leases are lost)."""
        n = 0
        backoff = self._backoff()
        installed = False
        try:
            if delay > 0:
                with self._mu:
                    self._cond.wait_for(lambda: self._closing, timeout=delay)
            while not self._closing:
                with self._mu:
                    if self._conn is not None:
                        return  # a move installed a new socket meanwhile
                ws: Optional[_websocket.WebSocket] = None
                try:
                    ws = self._dial()
                    gen: Optional[int] = None
                    if self._sid:
                        early, gen = self._resume_on(ws)
                        self.resumes += 1
                        self._log.info("leasesvc session: resumed on a new socket")
                    else:
                        ans, early = self._hello(ws, {"type": "open", "windowMs": _ms(self.window)}, "opened")
                        self._adopt(ans)
                        self.restarts += 1
                        self._log.warning("leasesvc session: opened anew (window %gs)", self.window)
                    installed = True
                    if self._install(ws, early, gen) is None and not self._closing:
                        installed = False  # a move's resume began after this one's: it or a new resume takes over
                        continue
                    return
                except SessionsUnsupportedError as e:  # the service no longer offers sessions
                    self._log.warning("leasesvc session: %s; closing the session, its leases are lost", e)
                    threading.Thread(target=self.close, name="leasesvc-session-close", daemon=True).start()
                    return
                except NotFoundError as e:  # session_not_found: the service ended it
                    self._log.warning("leasesvc session: the service ended the session (%s); its leases are lost", e)
                    with self._mu:
                        self._sid = ""
                    self._lose_all("expired")
                    continue
                except LeaseError as e:
                    self._log.warning("leasesvc session: reconnect failed: %s", e)
                with self._mu:
                    self._cond.wait_for(lambda: self._closing, timeout=backoff.delay(min(n, 16)))
                n += 1
        finally:
            if not installed:
                with self._mu:
                    self._reconnecting = False

    def _move(self, old: _Conn, reason: str) -> None:
        """The service asks the session to move: resume on a new socket,
        then close the old one (make before break)."""
        with self._mu:
            if self._conn is not old or self._moving or self._closing:
                return
            self._moving = True
        self._log.info("leasesvc session: moving to a new socket (%s)", reason or "asked")
        try:
            try:
                ws = self._dial()
            except LeaseError as e:
                self._log.warning("leasesvc session: move failed (%s); resuming once the old socket closes", e)
                return
            try:
                early, gen = self._resume_on(ws)
            except LeaseError as e:
                # The resume went out: the new instance may own the session
                # now and count the window from its last message, while the
                # old one still acks. Nothing more goes on the old socket.
                self._log.warning("leasesvc session: the resume of a move failed after it was sent (%s); "
                                  "abandoning the old socket and resuming again", e)
                self._abandon_conn(old)
                return
            with self._mu:
                if self._closing:
                    ws.close()
                    return
                old.moved = True
            if self._install(ws, early, gen) is not None:
                self.resumes += 1
            old.ws.close()
        finally:
            with self._mu:
                self._moving = False

    def _abandon_conn(self, old: _Conn) -> None:
        """A resume sent while ``old`` was current failed, its outcome
        unknown: close ``old`` (no heartbeat or request goes on it any more,
        its end is no drop and its pushes no longer count) and resume again
        on a new socket after the reconnect backoff."""
        with self._mu:
            start = self._conn is old and not self._closing and not self._reconnecting
            if self._conn is old:
                self._conn = None
            old.moved = True
            if start:
                self._reconnecting = True
        threading.Thread(target=old.ws.close, name="leasesvc-session-abandon", daemon=True).start()
        if start:
            threading.Thread(target=self._reconnect, args=(self._backoff().delay(0),),
                             name="leasesvc-session-reconnect", daemon=True).start()

    # --- closing --------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Close the session: send ``close`` (the service releases every
        lease of the session at once), wait up to ``timeout`` seconds
        (default: the client's request timeout) for the answer, close the
        socket and stop the threads. Closing twice is harmless."""
        with self._mu:
            if self._closing:
                return
            self._closing = True
            conn = self._conn
            self._cond.notify_all()
        if conn is not None:
            call = _Call("close", "", "")
            try:
                self._send(conn, {"type": "close"}, call)
                call.done.wait(self._c.request_timeout if timeout is None else timeout)
            except _websocket.ConnectionClosedError:
                pass
            conn.ws.close()
        self._lose_all("closed")
        self._done.set()
        self._log.info("leasesvc session: closed")


def _problem(p: Any) -> LeaseError:
    """The typed error of an ``error`` message's problem."""
    from .client import problem_error

    if not isinstance(p, dict):
        return InternalError("session: an error without a problem")
    try:
        status = int(p.get("status") or 0)
    except (TypeError, ValueError):
        status = 0
    return problem_error(status or 500, None, json.dumps(p).encode())
