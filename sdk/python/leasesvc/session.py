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

Every owner in order (§14, A1–A3). Each resume proposes an epoch one
higher than every epoch the session has seen (in ``opened``, ``resumed``
and a ``409 session_conflict``) or proposed, recorded before it is sent;
the snapshot of the leases, the proposal and the send happen in one
critical section, so resumes carry increasing epochs in the order they
went out. The socket of the latest open or resume sent is current: the
moment a resume goes out, the older socket is retired. Nothing more is
sent on it, its acks count for nothing (whatever heartbeat they answer:
its instance may have lost the leases and pushed ``lost`` for them), and
its pushes and its own ``resumed`` are ignored (a resume answered after a
later one went out is dropped, closed without ``close``). An acquire
answered on a retired socket was not claimed by the resume that retired
it: the holding stays in the table (a later resume lists it) and is
acquired again through the current socket before the caller gets it. A
release or transfer answered ``503`` or cut off by its socket's end goes
again through the resumed session, unless the resume reported the holding
lost. A resume that fails after it was sent leaves its outcome unknown:
the older socket is abandoned and the session resumes again (a
``session_conflict`` resumes again above the epoch it names).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import _websocket
from ._session_wire import (UNSUPPORTED_STATUSES, SUBPROTOCOL, Call, Conn, Hello, Resend,  # noqa: F401 (re-exported)
                            dial, losses, ms, problem, read_answer)
from .backoff import Backoff
from .errors import (InternalError, LeaseError, LeaseLostError, NotFoundError, RateLimitedError,
                     SessionsUnsupportedError, UnavailableError)
from .lease import Lease

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, _Cancel

__all__ = ["Session", "SUBPROTOCOL", "DEFAULT_WINDOW", "MIN_WINDOW", "MAX_WINDOW"]

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
        self._send_mu = threading.Lock()  # ids (and open/resume stamps) go out in increasing order
        self._seq = 0
        self._sid = ""  # the session id: a bearer secret, never logged
        self._epoch = 0  # the epoch of the current socket's open or resume
        self._top = 0  # the highest epoch of this session seen or proposed (A1)
        self._conn: Optional[Conn] = None  # the installed socket (retired while a later resume is out)
        self._gen = 0  # opens and resumes sent: the stamp of the latest (Conn.gen)
        self._hb: Dict[int, float] = {}  # heartbeat id → its send time
        self._deadline: Optional[float] = None
        self._acks = 0
        self._held: Dict[str, Tuple[str, int]] = {}  # name → (holder, token)
        self._watchers: Dict[int, Tuple[str, int, Watcher]] = {}
        self._seq_w = 0
        self._closing = False
        self._done = threading.Event()  # close() finished
        self._reconnecting = False  # a reconnect thread runs
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
        """The session's ownership epoch on the current socket: 1 when
        opened, then the epoch each resume proposed (one past every epoch
        seen or proposed before it)."""
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
        Cut off by its socket's session (answered 503, or the socket dropped
        first), it goes again through the resumed session (§14, step 6).

        Raises:
            LeaseLostError: anything else, or the resume reported it lost.
            UnavailableError: not done within the client's request timeout.
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
            body["reserveMs"] = max(1, ms(reserve))
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
            body["waitMs"] = ms(wait)
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
        acquire answered on a retired socket is acquired again through the
        current one (:meth:`_vouch`); a release or transfer cut off by its
        session's end goes again through the resumed one (:meth:`_end`)."""
        t = (timeout or self._c.request_timeout) + extra
        end = time.monotonic() + t
        if op in ("release", "transfer"):
            return self._end(op, body, end)
        lease, vouched = self._exchange(op, body, t, min(t, self._c.request_timeout), cancel)
        if vouched:
            return lease
        return self._vouch(body, lease, end, cancel)

    def _end(self, op: str, body: Dict[str, Any], end: float) -> Dict[str, Any]:
        """A release or transfer (docs/contract.md §14, step 6). Answered
        ``503 unavailable`` (the session ended on its socket while it was
        under way) or not answered before its socket closed, it leaves the
        holding in the table, so the next resume claims it; once the session
        is resumed on a newer socket it goes again through that one, unless
        the resume reported the holding lost. ``end``
        (:func:`time.monotonic`) bounds it all.

        Raises:
            LeaseLostError: as the Client's, or the resume reported the
                holding lost before the request went through.
            UnavailableError: no resumed session before ``end``.
        """
        name, token = str(body.get("name", "")), int(body.get("fencingToken") or 0)
        while True:
            left = max(0.0, end - time.monotonic())
            try:
                return self._exchange(op, body, left, left, None, resend=True)[0]
            except Resend as r:
                self._log.warning("leasesvc session: the %s of %s (fencing token %d) ended with its socket's "
                                  "session (%s); sending it again once the session is resumed", op, name, token,
                                  r.err.detail)
                if self._current(end - time.monotonic(), after=r.gen) is None:
                    raise UnavailableError(f"{r.err.detail}; the session was not resumed in time, the holding stays "
                                           "in the session")._named(op, name) from r.err
                if not self._holds(name, token):
                    raise LeaseLostError("the session's resume reported the holding lost before the "
                                         f"{op} went through")._named(op, name) from r.err

    def _vouch(self, body: Dict[str, Any], lease: Dict[str, Any], end: float,
               cancel: Optional["_Cancel"]) -> Dict[str, Any]:
        """The acquire of ``body`` was answered with ``lease`` on a retired
        socket, so the resume that retired it did not claim the holding and
        the acks of the current socket do not vouch for it. The holding stays
        in the table (a later resume lists it); acquire it again, without
        waiting, through the current socket (the service answers the same
        holder through the same session with the same token, moved to the
        new epoch: docs/contract.md §14, Resume) until an answer is vouched
        for or ``end`` (:func:`time.monotonic`) passes; then, or on an error,
        release the holding best-effort and raise."""
        name, holder = str(body.get("name", "")), str(body.get("holder", ""))
        again = {k: v for k, v in body.items() if k != "waitMs"}
        while True:
            token = int(lease.get("fencingToken") or 0)
            self._log.info("leasesvc session: lease %s (fencing token %d) was answered on a retired socket; "
                           "acquiring it again through the current one", name, token)
            try:
                left = end - time.monotonic()
                if cancel is not None and cancel.cancelled:
                    raise UnavailableError("cancelled")._named("acquire", name)
                if left <= 0:
                    raise UnavailableError("no answer through the session's current socket in time")._named(
                        "acquire", name)
                lease, vouched = self._exchange("acquire", again, left, left, cancel)
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
            self._log.warning("leasesvc session: could not release %s (fencing token %d), acquired on a retired "
                              "socket: %s", name, token, e)
            self._forget(name, token)

    def _exchange(self, op: str, body: Dict[str, Any], t: float, wait: float, cancel: Optional["_Cancel"],
                  resend: bool = False) -> Tuple[Dict[str, Any], bool]:
        """Send one request on the current socket (waiting up to ``wait``
        seconds for one), wait up to ``t`` seconds for its answer, and return
        the answer's lease JSON and whether an acquire's holding was vouched
        for (always True for the other operations). With ``resend``, an
        answer ``503 unavailable`` or the socket's end before the answer
        raises :class:`Resend`."""
        name, holder = str(body.get("name", "")), str(body.get("holder", ""))
        conn = self._current(wait)
        if conn is None:
            err = UnavailableError("the session is closed" if self._closing else
                                   "the session's socket is reconnecting")
            raise err._named(op, name)
        call = Call(op, name, holder, int(body.get("fencingToken") or 0))
        try:
            self._send(conn, dict(body, type=op), call)
        except _websocket.ConnectionClosedError as e:
            with self._mu:
                conn.pending = {k: v for k, v in conn.pending.items() if v is not call}
            err = UnavailableError(f"the session's socket closed: {e}", cause=e)._named(op, name)
            if resend:
                raise Resend(conn.gen, err) from e
            raise err from e
        if cancel is not None:
            cancel.on_cancel(lambda: self._abandon(call, UnavailableError("cancelled")))
        if not call.done.wait(t):
            self._abandon(call, UnavailableError(f"no answer within {t:g} s"))
        with self._mu:
            err, msg, dropped = call.err, call.answer, call.dropped
        if err is not None:
            if resend and dropped:
                raise Resend(conn.gen, err._named(op, name))
            raise err._named(op, name)
        assert msg is not None
        if msg.get("type") == "error":
            e = problem(msg.get("problem"))
            if isinstance(e, LeaseLostError):
                self._forget(name, int(body.get("fencingToken") or 0))
            if resend and e.status == 503 and e.code == "unavailable":
                raise Resend(conn.gen, e._named(op, name))
            raise e._named(op, name)
        lease = msg.get("lease")
        if msg.get("type") != "result" or not isinstance(lease, dict):
            raise InternalError(f"session: answer {msg.get('type')!r} without a lease")._named(op, name)
        self._track(op, holder, body, lease)
        with self._mu:
            return lease, call.vouched

    def _abandon(self, call: Call, err: LeaseError) -> None:
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

    def _current(self, timeout: float, after: int = 0) -> Optional[Conn]:
        """The current socket (that of the latest open or resume sent, once
        answered) to send on, waiting up to ``timeout`` while there is none
        (with ``after``, none stamped later than it); None when closed or
        still none."""
        end = time.monotonic() + timeout
        with self._mu:
            while True:
                c = self._conn
                if self._closing:
                    return None
                if c is not None and c.gen == self._gen and c.gen > after:
                    return c
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def _send(self, conn: Conn, msg: Dict[str, Any], call: Optional[Call] = None, heartbeat: bool = False) -> int:
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
        none (A2: never on a retired one)."""
        with self._mu:
            conn = self._conn
            if conn is None or conn.gen != self._gen or self._closing:
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
        """The heartbeat thread; it also replaces a socket gone silent (A3)."""
        while True:
            with self._mu:
                if self._closing:
                    return
                interval = self.heartbeat_interval
                conn = self._conn
                # (a retired socket gets no heartbeats, so it falls silent:
                # the answer or failure of the resume that retired it decides)
                current = conn is not None and conn.gen == self._gen
                silent = max(SILENT_WINDOWS * self.window, SILENT_MIN)
            if conn is not None and current and time.monotonic() - conn.last_rx > silent:
                self._log.warning("leasesvc session: nothing arrived for %gs; replacing the socket", silent)
                threading.Thread(target=conn.ws.close, args=(_websocket.CLOSE_GOING_AWAY, "silent", 0.5),
                                 daemon=True).start()
                conn.last_rx = time.monotonic()  # (once)
            self._heartbeat()
            with self._mu:
                self._cond.wait_for(lambda: self._closing, timeout=interval)

    def _on_ack(self, conn: Conn, re_: Any) -> None:
        """An ack on ``conn``: the deadline moves to the heartbeat's send
        time + window × (1 − drift margin), unless ``conn`` is retired (a
        resume went out on a newer socket): a retired socket vouches for
        nothing, not even for heartbeats sent on it before that resume (A2).
        Its instance acks until it learns it lost the session, and may have
        lost the leases to other holders meanwhile and pushed ``lost`` for
        them, pushes ignored on a retired socket; the new instance may
        already count the window from its last message."""
        with self._mu:
            sent = self._hb.pop(re_, None) if isinstance(re_, int) else None
            if sent is None:
                return
            if conn.superseded is not None or conn.moved or conn.gen != self._gen:
                return  # retired: only the current socket's acks lead
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

    def _push(self, kind: str, msg: Dict[str, Any], conn: Optional[Conn] = None) -> None:
        """A ``lost``, ``revoked`` or ``yield`` push (that arrived on
        ``conn``): to the watchers of that lease. One that arrived on a
        retired socket is ignored (A2: the resume that retired it says what
        is still held)."""
        name = str(msg.get("name", ""))
        token = msg.get("fencingToken")
        token = int(token) if isinstance(token, int) else 0
        with self._mu:
            if conn is not None and (conn.moved or conn.gen != self._gen):
                self._log.debug("leasesvc session: ignored a %s push about %s from a retired socket", kind, name)
                return
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
        return dial(self._url, self._c._headers(False), self._c.request_timeout)

    def _hello(self, ws: _websocket.WebSocket, build: Callable[[], Optional[Dict[str, Any]]]) -> Optional[Hello]:
        """Send on the new socket ``ws`` the ``open`` or ``resume`` that
        ``build()`` makes under the lock (None: none now, and ``ws`` is
        closed), and read its answer. From the send on, ``ws`` is the latest
        socket and the one it replaces is retired (A2): stamping, building
        (a resume's snapshot and epoch, A1) and sending happen in one
        critical section, in the order of the stamps. A refusal (``ws``
        closed) is the hello's ``err``; a ``409 session_conflict`` names an
        epoch the session has seen."""
        with self._send_mu:
            with self._mu:
                msg = build()
                if msg is None:
                    ws.close()
                    return None
                self._seq += 1
                msg["id"] = self._seq
                self._gen += 1
                h = Hello(self._gen, msg)
                old = self._conn
                if old is not None and old.superseded is None:
                    old.superseded = self._clock()  # retired: no heartbeat from now on, its acks count for nothing
            try:
                ws.send(json.dumps(msg, separators=(",", ":")))
            except _websocket.ConnectionClosedError as e:
                h.err = UnavailableError(f"session {msg['type']}: {e}", cause=e)._named("session", "")
                ws.close()
                return h
        want = "opened" if msg["type"] == "open" else "resumed"
        try:
            h.ans, h.early = read_answer(ws, msg["id"], str(msg["type"]), self._c.request_timeout)
            if h.ans.get("type") == "error":
                p = h.ans.get("problem")
                seen = p.get("epoch") if isinstance(p, dict) and p.get("code") == "session_conflict" else None
                if isinstance(seen, int):
                    with self._mu:
                        self._top = max(self._top, seen)
                raise problem(p)
            if h.ans.get("type") != want:
                raise InternalError(f"session {msg['type']}: answered {h.ans.get('type')!r}")
        except LeaseError as e:
            ws.close()
            h.err = e._named("session", "")
        return h

    def _adopt(self, ans: Dict[str, Any]) -> None:
        """(Under the lock.) Take the session id, epoch, window, heartbeat
        interval and TTL the service granted."""
        sid = ans.get("sessionId")
        if isinstance(sid, str) and sid and sid != self._sid:
            self._sid, self._top = sid, 0  # a new session: its epochs start anew
        epoch = int(ans.get("epoch") or 0)
        if epoch > 0:
            self._epoch, self._top = epoch, max(self._top, epoch)
        if int(ans.get("windowMs") or 0) > 0:
            self.window = int(ans["windowMs"]) / 1000
        hb = int(ans.get("heartbeatMs") or 0)
        self.heartbeat_interval = hb / 1000 if hb > 0 else self.window / 4
        self.lease_ttl = int(ans.get("leaseTtlMs") or 0) / 1000

    def _greet(self, ws: _websocket.WebSocket, replacing: Optional[Conn],
               reconnector: bool = False) -> Tuple[str, Optional[LeaseError]]:
        """Resume the session (open it, when it has no id) on the new socket
        ``ws`` in place of ``replacing`` (None: no socket is installed), and
        make ``ws`` current unless a later open or resume went out meanwhile:
        a late ``resumed`` is then ignored and ``ws`` closed (A2). Returns
        "current"; "unsent" (``replacing`` is no longer the installed socket,
        or the session closed); "stale" (with its error, if any: a later one
        went out, or the session closed); or "failed" and the error."""
        sent: Dict[str, Tuple[str, int]] = {}

        def build() -> Optional[Dict[str, Any]]:  # under the lock
            if self._closing or self._conn is not replacing or (replacing is not None and replacing.gen != self._gen):
                return None
            if not self._sid:
                return {"type": "open", "windowMs": ms(self.window)}
            sent.update(self._held)
            self._top += 1  # A1: above every epoch seen or proposed, recorded before it is sent
            leases = [{"name": n, "holder": h, "fencingToken": t} for n, (h, t) in sorted(sent.items())]
            return {"type": "resume", "sessionId": self._sid, "epoch": self._top, "windowMs": ms(self.window),
                    "leases": leases}

        h = self._hello(ws, build)
        if h is None:
            return "unsent", None
        resume = h.msg["type"] == "resume"
        lost: List[Dict[str, Any]] = []
        with self._mu:
            if self._closing or h.gen != self._gen:
                stale, conn, old = True, None, None
            elif h.err is not None:
                return "failed", h.err
            else:
                stale = False
                if resume:
                    self.resumes += 1
                    lost = losses(sent, h.ans)
                    for m in lost:
                        if self._held.get(m["name"], ("", 0))[1] == m["fencingToken"]:
                            del self._held[m["name"]]
                elif self._epoch:
                    self.restarts += 1  # opened anew
                self._adopt(h.ans)
                old, conn = self._conn, Conn(ws, h.gen)
                if old is not None:
                    old.moved = True  # its end is no drop
                self._conn = conn
                if reconnector:
                    self._reconnecting = False  # a drop of this socket reconnects again
                self._cond.notify_all()
        if stale or conn is None:
            ws.close()  # never current: dropped without close
            if h.err is None and not self._closing:
                self._log.info("leasesvc session: a %s was answered after a later resume went out; ignored",
                               h.msg["type"])
            return "stale", h.err
        for m in lost:
            self._push("lost", m)
        for m in h.early:
            self._dispatch(conn, m)
        threading.Thread(target=self._read, args=(conn,), name="leasesvc-session-reader", daemon=True).start()
        if self._heartbeats:
            self._heartbeat()
        if old is not None:
            old.ws.close()  # make before break
        return "current", None

    def _open(self) -> None:
        """Open the session (the first socket), start its threads, and wait
        up to a window for the first heartbeat's acknowledgement."""
        status, err = self._greet(self._dial(), None)
        if isinstance(err, RateLimitedError) and err.status == 429:
            raise SessionLimitError(err.detail, status=err.status, code=err.code, retry_after=err.retry_after,
                                    op=err.op, name=err.name) from err
        if err is not None:
            raise err
        if status != "current":
            raise UnavailableError("the session closed while it opened")._named("session", "")
        self._log.info("leasesvc session: opened (window %gs)", self.window)
        if self._heartbeats:
            threading.Thread(target=self._beat, name="leasesvc-session-heartbeat", daemon=True).start()
            self._wait_deadline(float("-inf"), self.window)

    def _read(self, conn: Conn) -> None:
        """The reader of one socket; on its end, the requests waiting on it
        fail and, unless it was replaced or closed, the session reconnects
        (also when a resume that retired it is still unanswered: a later
        resume goes out)."""
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
                    call.dropped = True
                    call.done.set()
            installed = self._conn is conn
            if installed:
                self._conn = None
            start = installed and not self._closing and not conn.moved and not self._reconnecting
            if start:
                self._reconnecting = True
        if start:
            self._log.warning("leasesvc session: the socket dropped (%s); resuming", why)
            threading.Thread(target=self._reconnect, name="leasesvc-session-reconnect", daemon=True).start()

    def _dispatch(self, conn: Conn, msg: Dict[str, Any]) -> None:
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
            if late and typ == "result" and call.op == "acquire":
                self._release_late(call, msg.get("lease"))
            elif late and typ == "result" and call.op in ("release", "transfer"):
                self._forget(call.name, call.token)  # done after all
        elif typ == "error":
            p = msg.get("problem") if isinstance(msg.get("problem"), dict) else {}
            self._log.warning("leasesvc session: the service refused the socket: %s %s", p.get("code", ""),
                              p.get("detail", ""))
        elif typ in ("lost", "revoked", "yield"):
            self._push(str(typ), msg, conn)
        elif typ == "move":
            threading.Thread(target=self._move, args=(conn, str(msg.get("reason", ""))),
                             name="leasesvc-session-move", daemon=True).start()
        else:
            self._log.debug("leasesvc session: ignored a message of type %r", typ)

    def _take(self, conn: Conn, call: Call, lease: Any) -> bool:
        """(Under the lock.) An acquire answered on ``conn`` with ``lease``:
        put the holding in the table, so that every resume whose snapshot
        comes later lists it, and tell whether it is vouched for: ``conn`` is
        still current (no resume went out since), so its acks cover it."""
        if not isinstance(lease, dict) or not lease.get("held") or str(lease.get("holder", "")) != call.holder:
            return True
        self._held[str(lease.get("name") or call.name)] = (call.holder, int(lease.get("fencingToken") or 0))
        return conn.gen == self._gen

    def _release_late(self, call: Call, lease: Any) -> None:
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
        """(The one reconnect thread.) Resume on a new socket (after
        ``delay`` seconds) until a socket is current or the session closes;
        a session the service ended is opened anew (its leases are lost), a
        ``session_conflict`` is resumed again above the epoch it names."""
        n = 0
        backoff = self._backoff()
        if delay > 0:
            with self._mu:
                self._cond.wait_for(lambda: self._closing, timeout=delay)
        while True:
            with self._mu:
                if self._closing or self._conn is not None:  # closed, or a move installed a socket
                    self._reconnecting = False
                    return
            try:
                resume = bool(self._sid)
                status, err = self._greet(self._dial(), None, reconnector=True)
                if status == "current":
                    if resume:
                        self._log.info("leasesvc session: resumed on a new socket (epoch %d)", self._epoch)
                    else:
                        self._log.warning("leasesvc session: opened anew (window %gs)", self.window)
                    return
                if err is not None:
                    raise err
                continue  # not sent, or overtaken: see above
            except SessionsUnsupportedError as e:  # the service no longer offers sessions
                self._log.warning("leasesvc session: %s; closing the session, its leases are lost", e)
                with self._mu:
                    self._reconnecting = False
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

    def _move(self, old: Conn, reason: str) -> None:
        """The service asks the session to move: resume on a new socket,
        then close the old one (make before break)."""
        with self._mu:
            if self._conn is not old or old.gen != self._gen or self._moving or self._closing:
                return  # (a retired socket's move is ignored)
            self._moving = True
        self._log.info("leasesvc session: moving to a new socket (%s)", reason or "asked")
        try:
            try:
                ws = self._dial()
            except LeaseError as e:
                self._log.warning("leasesvc session: move failed (%s); resuming once the old socket closes", e)
                return
            status, err = self._greet(ws, old)
            if status == "failed":
                # The resume went out: the new instance may own the session
                # now and count the window from its last message, while the
                # old one still acks. Nothing more goes on the old socket.
                self._log.warning("leasesvc session: the resume of a move failed after it was sent (%s); "
                                  "abandoning the old socket and resuming again", err)
                self._abandon_conn(old)
        finally:
            with self._mu:
                self._moving = False

    def _abandon_conn(self, old: Conn) -> None:
        """A resume sent while ``old`` was installed failed, its outcome
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
        """Close the session: send ``close`` on the current socket (the
        service releases every lease of the session at once), wait up to
        ``timeout`` seconds (default: the client's request timeout) for the
        answer, close the socket and stop the threads. With a resume still
        unanswered no socket is current: the sockets close without ``close``
        and the service ends the session a window later. Closing twice is
        harmless."""
        with self._mu:
            if self._closing:
                return
            self._closing = True
            conn = self._conn
            current = conn is not None and conn.gen == self._gen
            self._cond.notify_all()
        if conn is not None:
            call = Call("close", "", "")
            try:
                if current:
                    self._send(conn, {"type": "close"}, call)
                    call.done.wait(self._c.request_timeout if timeout is None else timeout)
            except _websocket.ConnectionClosedError:
                pass
            conn.ws.close()
        self._lose_all("closed")
        self._done.set()
        self._log.info("leasesvc session: closed")
