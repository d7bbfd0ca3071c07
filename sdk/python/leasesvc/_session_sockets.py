"""The socket side of a :class:`~leasesvc.Session` (docs/contract.md §14):
heartbeats and their acks (which move the session's deadline), the
opening handshake, open and resume (``_greet``: the epochs of rules
A1–A3, explained in :mod:`leasesvc.session`), the reader of each socket
and what it dispatches, reconnects and moves. A mixin of ``Session``,
which owns the state it reads and writes."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import _session_fork, _websocket
from ._http import Transport
from ._session_wire import Call, Conn, Hello, Watcher, dial, losses, ms, problem, read_answer, unsafe_number
from .backoff import Backoff
from .errors import (InternalError, LeaseError, NotFoundError, RateLimitedError, SessionLimitError,
                     SessionsUnsupportedError, UnavailableError)
from .timing import deadline


#: A socket on which nothing at all arrived for this many windows (at least
#: SILENT_MIN seconds) while heartbeats went out is taken for dead (a
#: half-open connection) and replaced: the session resumes on a new one.
SILENT_WINDOWS = 4
SILENT_MIN = 5.0


class Sockets(object):
    """Heartbeats, handshakes, readers, reconnects and moves of a
    :class:`~leasesvc.Session` (a mixin: ``Session`` holds the state)."""

    if TYPE_CHECKING:  # pragma: no cover
        # What the host (Session) defines and the sockets use, typed as there.
        _c: Transport
        window: float
        drift_margin: float
        heartbeat_interval: float
        lease_ttl: float
        _log: logging.Logger
        _clock: Callable[[], float]
        _heartbeats: bool
        _url: str
        _mu: threading.Lock
        _cond: threading.Condition
        _send_mu: threading.Lock
        _seq: int
        _sid: str
        _epoch: int
        _top: int
        _conn: Optional[Conn]
        _gen: int
        _hb: Dict[int, float]
        _deadline: Optional[float]
        _acks: int
        _unacked: Dict[Tuple[str, int], float]
        _held: Dict[str, Tuple[str, int]]
        _leaving: Dict[str, Tuple[int, float]]
        _watchers: Dict[int, Tuple[str, int, Watcher]]
        _closing: bool
        _ended: str
        _done: threading.Event
        _reconnecting: bool
        _moving: bool
        _forked: bool
        _pid: int
        resumes: int

        def _send(self, conn: Conn, msg: Dict[str, Any], call: Optional[Call] = None,
                  heartbeat: bool = False) -> int: ...
        def _push(self, kind: str, msg: Dict[str, Any], conn: Optional[Conn] = None) -> None: ...
        def _call_watcher(self, w: Watcher, kind: str, msg: Dict[str, Any]) -> None: ...
        def _forget(self, name: str, token: int) -> None: ...
        def _lose_all(self, reason: str) -> None: ...
        def _release(self, name: str, holder: str, fencing_token: int, *,
                     checkpoint: Optional[Dict[str, Any]] = None,
                     timeout: Optional[float] = None) -> Dict[str, Any]: ...
        def close(self, timeout: Optional[float] = None) -> None: ...

    # --- heartbeats -----------------------------------------------------

    def _heartbeat(self) -> bool:
        """Send one heartbeat on the current socket; False when there is
        none (A2: never on a retired one), and always in a forked process."""
        if self._forked:
            return False
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
            if self._forked:
                return
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
        already count the window from its last message.

        A counted ack also counts, from now on, for every holding answered
        before it arrived (A4): their deadlines become the session's, and
        their watchers hear "deadline" even when the session's did not move."""
        with self._mu:
            sent = self._hb.pop(re_, None) if isinstance(re_, int) else None
            if sent is None:
                return
            if conn.superseded is not None or conn.moved or conn.gen != self._gen:
                return  # retired: only the current socket's acks lead
            for k in [k for k in self._hb if k < re_]:
                del self._hb[k]  # sent before, never acked: the service found them unsafe
            d = deadline(sent, self.window, self.drift_margin)
            self._acks += 1
            # it arrived after the answer of every holding in _unacked: each is
            # led by the session's deadline from now on (A4)
            counted = bool(self._unacked)
            self._unacked.clear()
            moved = self._deadline is None or d > self._deadline
            if not moved and not counted:
                return
            if moved:
                self._deadline = d
            d = self._deadline
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

    # --- the sockets ----------------------------------------------------

    def _dial(self) -> _websocket.WebSocket:
        """Open a socket (the upgrade, authenticated like every request);
        never from a forked process (SessionForkedError)."""
        if self._forked:
            raise _session_fork.refusal(self, "session")
        return dial(self._url, self._c._headers(False), self._c.request_timeout)

    def _hello(self, ws: _websocket.WebSocket, build: Callable[[], Optional[Dict[str, Any]]]) -> Optional[Hello]:
        """Send on the new socket ``ws`` the ``open`` or ``resume`` that
        ``build()`` makes under the lock (None: none now, and ``ws`` is
        closed), and read its answer. From the send on, ``ws`` is the latest
        socket and the one it replaces is retired (A2): stamping, building
        (a resume's snapshot and epoch, A1) and sending happen in one
        critical section, in the order of the stamps. A refusal (``ws``
        closed) is the hello's ``err``; a ``409 session_conflict`` names an
        epoch the session has seen. An epoch above 2^53 − 1, in the answer
        or in the problem, is a protocol error (``InternalError``). Nothing
        is sent from a forked process (SessionForkedError)."""
        if self._forked:
            ws.close()
            raise _session_fork.refusal(self, "session")
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
                bad = unsafe_number("epoch", seen)
                if bad is not None:
                    raise bad
                if isinstance(seen, int):
                    with self._mu:
                        self._top = max(self._top, seen)
                raise problem(p)
            if h.ans.get("type") != want:
                raise InternalError(f"session {msg['type']}: answered {h.ans.get('type')!r}")
            bad = unsafe_number("epoch", h.ans.get("epoch"))
            if bad is not None:
                raise bad
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
                lease = msg.get("lease") if typ == "result" else None
                bad = unsafe_number("fencingToken", lease.get("fencingToken")) if isinstance(lease, dict) else None
                if bad is not None:  # a protocol error: the request fails, nothing is taken
                    self._log.warning("leasesvc session: %s", bad)
                    call.err = bad
                elif call.op == "acquire" and typ == "result":
                    if call.lost_before(lease):  # A5: its lost or revoked came first
                        call.lost = True
                    elif not late:
                        call.vouched = self._take(conn, call, lease)
                if not late:
                    call.answer = msg
                    call.done.set()
            if bad is not None or call.lost:
                return
            if late and typ == "result" and call.op == "acquire":
                self._release_late(call, msg.get("lease"))
            elif late and typ == "result" and call.op in ("release", "transfer"):
                self._forget(call.name, call.token)  # done after all
        elif typ == "error":
            p = msg.get("problem")
            if not isinstance(p, dict):
                p = {}
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
        still current (no resume went out since), so its acks cover it. Until
        an ack arrives after this answer, the holding is led at most until
        its acquire's send time + TTL × (1 − drift margin) (A4:
        :meth:`~leasesvc.Session.deadline_for`)."""
        if not isinstance(lease, dict) or not lease.get("held") or str(lease.get("holder", "")) != call.holder:
            return True
        name, token = str(lease.get("name") or call.name), int(lease.get("fencingToken") or 0)
        self._held[name] = (call.holder, token)
        if self._leaving.get(name, (token, 0.0))[0] != token:
            del self._leaving[name]  # an older holding's end: this one is led as any other
        self._unacked[(name, token)] = deadline(call.sent, self.lease_ttl, self.drift_margin)
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
        a session the service ended (``session_not_found``) ends for good
        (:meth:`_end_for_good`: its leases are lost, it never reopens itself, rule
        L2); a ``session_conflict`` is resumed again above the epoch it
        names."""
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
                status, err = self._greet(self._dial(), None, reconnector=True)
                if status == "current":
                    self._log.info("leasesvc session: resumed on a new socket (epoch %d)", self._epoch)
                    return
                if err is not None:
                    raise err
                continue  # not sent, or overtaken: see above
            except SessionsUnsupportedError as e:  # the service no longer offers sessions: ended too
                self._log.warning("leasesvc session: %s; the session ends, its leases are lost", e)
                self._end_for_good("ended")
                return
            except NotFoundError as e:  # session_not_found: the service ended it, for good (rule L2)
                self._log.warning("leasesvc session: the service ended the session (%s); its leases are lost and "
                                  "it is not reopened", e)
                self._end_for_good("expired")
                return
            except LeaseError as e:
                self._log.warning("leasesvc session: reconnect failed: %s", e)
            with self._mu:
                self._cond.wait_for(lambda: self._closing, timeout=backoff.delay(min(n, 16)))
            n += 1

    def _end_for_good(self, reason: str) -> None:
        """The service ended the session (it expired, its record ran out,
        a resume found it gone): it ends for good, as a close does but
        without sending anything (rule L2). Every lease it held is lost at
        once (their watchers hear ``lost`` with ``reason``), waiting
        requests fail, no socket is dialled again. The owner that opened it
        (a Keeper, the Client's shared session) opens a new one if it
        needs one."""
        with self._mu:
            self._reconnecting = False
            if self._closing or self._ended:
                return
            self._ended = reason
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.moved = True
            conn.ws.close()
        self._lose_all(reason)  # (first: its holdings end before an owner sees it closed and opens another)
        with self._mu:
            self._closing = True
            self._cond.notify_all()
        self._done.set()

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
