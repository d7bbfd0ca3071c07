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

One-shot (rule L2 of the SDKs' lifecycle, sdk/conformance/PROTOCOL.md):
a session the service ended (a resume answered ``session_not_found``: it
expired, no heartbeat having reached the service for its window, or its
record ran out) ends for good, as if closed: every lease it held is lost
at once (a :class:`~leasesvc.Holding` over it ends with
:class:`~leasesvc.LeaseLostError`), and it never reopens itself
(:attr:`Session.ended` says why). The :class:`~leasesvc.Keeper` that
opened it, or the Client for its shared session, opens a new one when
it next needs one.

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

Operations in flight (§14, A4 and A5). An ack counts for a lease only if
it arrived on the current socket after that lease's answer (its acquire's
``result``, or the ``resumed`` that listed it): until one has, the lease is
led at most until min(the session's deadline as it stands, the acquire's
send time + leaseTtlMs × (1 − drift margin)) (:meth:`Session.deadline_for`,
the deadline a :class:`~leasesvc.Holding` follows). A ``lost`` or
``revoked`` push for a (name, token) that arrives on the current socket
while an acquire of that name is in flight there is remembered with the
acquire; a ``result`` with that (name, token) is not led: the acquire
raises :class:`~leasesvc.LeaseLostError`, whether or not the session held
it already. From the moment a ``release`` or ``transfer`` of a holding is
sent, the holding is not led (A6): its deadline is no later than that send
time, whatever the answer and the acks after; only a refusal of the request
itself (400, 403, 429: nothing was written) gives the lead back. An epoch or
fencing token above 2^53 − 1 from the service is a protocol error
(``InternalError``).

Forks: a Session used in a process forked from the one that opened it
raises :class:`~leasesvc.SessionForkedError` and sends nothing
(:mod:`leasesvc._session_fork`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional, Tuple

from . import _session_fork, _websocket
from ._http import Transport, _Cancel
from ._session_sockets import SILENT_MIN, SILENT_WINDOWS, Sockets  # noqa: F401 (re-exported)
from ._session_wire import (UNSUPPORTED_STATUSES, SUBPROTOCOL, Call, Conn, Resend,  # noqa: F401 (re-exported)
                            Watcher, ms, problem)
from .errors import (InternalError, InvalidArgumentError, LeaseError, LeaseLostError,  # noqa: F401 (re-exported)
                     PermissionDeniedError, RateLimitedError, SessionLimitError, UnavailableError)
from .lease import Lease

__all__ = ["Session", "SUBPROTOCOL", "DEFAULT_WINDOW", "MIN_WINDOW", "MAX_WINDOW"]

#: The route of sessions.
ROUTE = "/v1/sessions:connect"
#: The heartbeat window, seconds: the default and its bounds.
DEFAULT_WINDOW = 1.0
MIN_WINDOW = 0.2
MAX_WINDOW = 60.0


class Session(Sockets):
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

    def __init__(self, client: Transport, *, window: float = DEFAULT_WINDOW, drift_margin: float = 0.1,
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
        self._acks = 0  # acks counted (on the current socket)
        # (name, token) → its acquire's send time + TTL × (1 − margin), for each holding answered
        # on the current socket since the last ack counted there (A4): no ack vouches for it yet
        self._unacked: Dict[Tuple[str, int], float] = {}
        self._held: Dict[str, Tuple[str, int]] = {}  # name → (holder, token)
        # name → (token, the session clock's time its release or transfer was sent): the holding is
        # led no later than then (A6); kept until a refusal that wrote nothing or another token's answer
        self._leaving: Dict[str, Tuple[int, float]] = {}
        self._watchers: Dict[int, Tuple[str, int, Watcher]] = {}
        self._seq_w = 0
        self._closing = False
        self._done = threading.Event()  # close() finished
        self._reconnecting = False  # a reconnect thread runs
        self._moving = False
        #: How many times the session was resumed on a new socket (after a
        #: drop or a move).
        self.resumes = 0
        #: Why the service ended the session ("expired", "ended"), "" while it
        #: lives or after :meth:`close` (rule L2: it never reopens itself).
        self._ended = ""
        self._pid = os.getpid()
        self._forked = False  # this process is a fork of the one that opened the session
        _session_fork.track(self)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- state ----------------------------------------------------------

    def deadline(self) -> Optional[float]:
        """When leading on this session's leases must stop, on its monotonic
        clock (:func:`time.monotonic` by default): the send time of the last
        acknowledged heartbeat + window × (1 − drift margin). ``None``
        before the first acknowledgement. A lease no ack has counted for
        since its answer is led by :meth:`deadline_for` instead.

        Raises:
            SessionForkedError: in a process forked from the one that
                opened the session.
        """
        if self._forked:
            raise _session_fork.refusal(self, "deadline")
        with self._mu:
            return self._deadline

    def deadline_for(self, name: str, fencing_token: int) -> Optional[float]:
        """When leading on the session's holding of ``name`` with
        ``fencing_token`` must stop (docs/contract.md §14, A4): the
        session's :meth:`deadline` once an ack arrived on the current socket
        after the holding's answer (its acquire's ``result``, or the
        ``resumed`` that listed it); before that, at most its acquire's send
        time + the session lease TTL × (1 − drift margin), since the acks
        that came earlier were decided without the lease. ``None`` before
        the session's first acknowledgement. From the moment a release or
        transfer of the holding was sent, no later than that send time (A6).

        Raises:
            SessionForkedError: in a forked process (see :meth:`deadline`).
        """
        if self._forked:
            raise _session_fork.refusal(self, "deadline", name)
        with self._mu:
            return self._deadline_for(name, fencing_token)

    def _deadline_for(self, name: str, fencing_token: int) -> Optional[float]:
        """(Under the lock.) :meth:`deadline_for`."""
        d = self._deadline
        if d is None:
            return None
        cap = self._unacked.get((name, fencing_token))
        if cap is not None:
            d = min(d, cap)
        leaving = self._leaving.get(name)
        if leaving is not None and leaving[0] == fencing_token:
            d = min(d, leaving[1])
        return d

    @property
    def closed(self) -> bool:
        """Whether the session is over: :meth:`close` was called, or the
        service ended it (:attr:`ended`). A session never reopens itself
        (rule L2): its owner opens a new one."""
        return self._closing

    @property
    def ended(self) -> str:
        """Why the service ended the session: "expired" (a resume found it
        gone: no heartbeat reached the service for its window, or its record
        ran out), "ended" (the service no longer offers sessions); "" while
        it lives or after :meth:`close`. Every lease it held was lost when it
        ended (their holdings end with :class:`~leasesvc.LeaseLostError`)."""
        return self._ended

    @property
    def epoch(self) -> int:
        """The session's ownership epoch on the current socket: 1 when
        opened, then the epoch each resume proposed (one past every epoch
        seen or proposed before it)."""
        return self._epoch

    def held(self) -> Dict[str, Tuple[str, int]]:
        """The leases the session holds as far as it knows: name →
        (holder, fencing token).

        Raises:
            SessionForkedError: in a forked process (see :meth:`deadline`).
        """
        if self._forked:
            raise _session_fork.refusal(self, "held")
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
                 cancel: Optional[_Cancel] = None) -> Dict[str, Any]:
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
                 cancel: Optional[_Cancel] = None) -> Dict[str, Any]:
        """Send one request on the current socket and return the answer's
        lease JSON; keep the session's list of held leases up to date. An
        acquire answered on a retired socket is acquired again through the
        current one (:meth:`_vouch`); a release or transfer cut off by its
        session's end goes again through the resumed one (:meth:`_end`).

        Raises:
            SessionForkedError: in a forked process, before anything is sent.
        """
        if self._forked:
            raise _session_fork.refusal(self, op, str(body.get("name", "")))
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
        self._let_go(name, token, True)
        while True:
            left = max(0.0, end - time.monotonic())
            try:
                return self._exchange(op, body, left, left, None, resend=True)[0]
            except (InvalidArgumentError, PermissionDeniedError, RateLimitedError):
                self._let_go(name, token, False)  # refused itself: nothing was written (A6)
                raise
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

    def _let_go(self, name: str, token: int, on: bool) -> None:
        """Mark the holding of ``name`` with ``token`` as being released or
        transferred (``on``: led no later than now, A6), or not any more;
        the watchers of that lease hear "deadline"."""
        with self._mu:
            if on:
                if name in self._leaving and self._leaving[name][0] == token:
                    return  # (sent again: the first send ended the lead)
                self._leaving[name] = (token, self._clock())
            elif self._leaving.get(name, (0, 0.0))[0] == token:
                del self._leaving[name]
            else:
                return
            d = self._deadline_for(name, token)
            targets = [w for n, t, w in self._watchers.values() if n == name and t == token]
        for w in targets:
            self._call_watcher(w, "deadline", {"deadline": d})

    def _vouch(self, body: Dict[str, Any], lease: Dict[str, Any], end: float,
               cancel: Optional[_Cancel]) -> Dict[str, Any]:
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
            except LeaseLostError:  # reported lost before its answer (A5): nothing to release
                self._forget(name, token)
                raise
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

    def _exchange(self, op: str, body: Dict[str, Any], t: float, wait: float, cancel: Optional[_Cancel],
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
            err, msg, dropped, lost = call.err, call.answer, call.dropped, call.lost
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
        if lost:
            err = LeaseLostError(f"the session reported the holding (fencing token {lease.get('fencingToken')}) "
                                 "lost before its acquire's answer: not led (docs/contract.md §14, A5)")
            raise err._named(op, name)
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
        order); register ``call`` for its answer, stamped with its send
        time. A heartbeat is not sent (0) on a socket a resume on a newer one
        was sent after, nor anything from a forked process (0, or
        :class:`~leasesvc.SessionForkedError` for a request)."""
        if self._forked:
            if heartbeat:
                return 0
            raise _session_fork.refusal(self, str(msg.get("type", "")), str(msg.get("name", "")))
        with self._send_mu:
            with self._mu:
                if heartbeat and conn.superseded is not None:
                    return 0
                self._seq += 1
                i = self._seq
                msg["id"] = i
                if call is not None:
                    conn.pending[i] = call
                    call.sent = self._clock()
                if heartbeat:
                    self._hb[i] = self._clock()
            conn.ws.send(json.dumps(msg, separators=(",", ":")))
            return i

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
        is still held). A ``lost`` or ``revoked`` is also remembered by the
        acquires of that name in flight on ``conn``, so that a ``result``
        with its token that follows is not led (A5)."""
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
                for call in conn.pending.values() if conn is not None else ():
                    if call.op == "acquire" and call.name == name:
                        call.losses.add(token)
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

    # --- closing --------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Close the session: send ``close`` on the current socket (the
        service releases every lease of the session at once), wait up to
        ``timeout`` seconds (default: the client's request timeout) for the
        answer, close the socket and stop the threads. With a resume still
        unanswered no socket is current: the sockets close without ``close``
        and the service ends the session a window later. Closing twice is
        harmless. In a forked process it only marks this process's copy
        closed: nothing is sent, and the parent's socket is left alone."""
        if self._forked:
            self._closing = True
            self._done.set()
            return
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
