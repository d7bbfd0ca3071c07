"""Test support: a fake of the service's sessions route (docs/contract.md
§14) over the byte-level WebSocket server of _ws_support. It keeps leases
in memory, answers open, resume, heartbeat, acquire, renew, release,
transfer and close as the service does (v2: a resume proposes its epoch and
takes the session only above the stored one, else 409 session_conflict; a
socket whose session moved to a later epoch answers lease operations 503
and acks nothing), and lets a test withhold acks, hold acquires, releases
and resumes (each held resume answerable on its own), hold back what a
socket sends, push lost/revoked/yield/move, drop a socket, and refuse the
upgrade or a resume."""

from __future__ import annotations

import json
import queue
import secrets
import socket
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._ws_support import FakeServer, Handshake, ServerConn, close_payload, server_frame, upgrade_answer

WINDOW_MS = 1000
V2 = "leasesvc.session.v2"


def refusal(status: int, code: str) -> Callable[[Handshake], bytes]:
    """An upgrade answer refusing with a problem+json ``status``."""
    body = json.dumps({"type": "about:blank", "title": code, "status": status, "code": code,
                       "detail": code}).encode()

    def answer(hs: Handshake) -> bytes:
        return (f"HTTP/1.1 {status} Refused\r\nContent-Type: application/problem+json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

    return answer


def open_refused(status: int, code: str) -> Callable[[Any], None]:
    """A :class:`~._support.FakeService` answer (``sessions=True``) to the
    session upgrade that accepts the socket, answers its ``open`` with the
    problem and closes it with 1008, as the service refuses an open at its
    session limits."""

    def answer(h: Any) -> None:
        hs = Handshake(h.requestline, {k.lower(): v for k, v in h.headers.items()})
        h.close_connection = True
        h.wfile.write(upgrade_answer(hs))
        sc = ServerConn(h.connection, hs, b"")
        try:
            m = json.loads(sc.recv_frame().payload)
            problem = {"type": "about:blank", "title": code, "status": status, "code": code, "detail": code}
            sc.send(server_frame(0x1, json.dumps({"type": "error", "re": m.get("id"), "problem": problem}).encode()))
            sc.send(server_frame(0x8, close_payload(1008, code)))
        except (OSError, EOFError, ValueError):
            pass

    return answer


def _unavailable(i: Any) -> Dict[str, Any]:
    """The answer to a lease operation that reached a session that ended on
    its socket (moved to a later epoch): 503, retry through the resumed
    session."""
    return {"type": "error", "re": i, "problem": {"type": "about:blank", "title": "unavailable", "status": 503,
                                                  "code": "unavailable", "detail": "the session moved"}}


class Conn:
    """One socket of the fake: what it received, and how to write to it."""

    def __init__(self, sc: ServerConn, index: int, hold_output: bool = False) -> None:
        self.sc = sc
        self.index = index
        offered = sc.handshake.protocols()
        self.protocol = offered[0] if offered else ""  # (upgrade_answer chooses the first offered)
        self.sid = ""
        self.epoch = 0  # the session's epoch this socket's open or resume took
        self.mu = threading.Lock()
        self.received: List[Dict[str, Any]] = []
        self.ended = threading.Event()  # the handler saw the socket end
        self.close_frame: Optional[int] = None  # the client's close code, if it sent one
        self.go = threading.Event()  # answer this socket's held resume now
        self.held_out: Optional[List[bytes]] = [] if hold_output else None  # frames held back

    def send(self, msg: Dict[str, Any]) -> None:
        self.send_raw(server_frame(0x1, json.dumps(msg).encode()))

    def send_raw(self, data: bytes) -> None:
        with self.mu:
            if self.held_out is not None:
                self.held_out.append(data)
                return
            try:
                self.sc.send(data)
            except OSError:
                pass

    def flush(self) -> None:
        """Send what was held back, and from now on send at once."""
        with self.mu:
            held, self.held_out = self.held_out or [], None
            for data in held:
                try:
                    self.sc.send(data)
                except OSError:
                    pass

    def drop(self) -> None:
        """End the TCP connection without a close frame."""
        try:
            self.sc.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def types(self) -> List[str]:
        return [str(m.get("type")) for m in list(self.received)]


class FakeSessionService:
    """The sessions route of a fake service, at ``url`` (http://…)."""

    def __init__(self, *, answer: Optional[Callable[[Handshake], bytes]] = None, window_ms: Optional[int] = None) -> None:
        self.lock = threading.Condition()
        self.acking = True  # answer heartbeats with acks
        self.refuse_resume = ""  # a problem code to refuse resumes with
        self.lost_on_resume: List[str] = []  # lease names a resume reports lost
        self.grant_window_ms = window_ms  # the window the fake grants (None: the one asked for)
        self.acquire_problem: Optional[Dict[str, Any]] = None  # answer acquires with this problem
        self.release_problem: Optional[Dict[str, Any]] = None  # answer releases and transfers with this problem
        self.hold_acquires = threading.Event()  # while set, acquires are answered only once it clears
        self.hold_resumes = threading.Event()  # while set, resumes are answered once it clears or answer_resume()
        self.hold_releases = threading.Event()  # while set, releases are answered only once it clears
        self.hold_output = False  # sockets accepted while set hold back what the fake sends (Conn.flush)
        self.conns: List[Conn] = []
        self.sessions: Dict[str, Dict[str, Any]] = {}
        self.leases: Dict[str, Dict[str, Any]] = {}
        self.events: "queue.Queue[Tuple[int, Dict[str, Any]]]" = queue.Queue()
        self.log: List[Tuple[int, str]] = []  # (conn index, type) in the order handled, "END" at a socket's end
        self.server = FakeServer(self._serve, answer=answer or (lambda hs: upgrade_answer(hs)))
        self.url = f"http://127.0.0.1:{self.server.port}"

    def close(self) -> None:
        for c in list(self.conns):
            c.drop()
        self.server.close()

    # --- for tests -----------------------------------------------------

    def conn(self, i: int = -1) -> Conn:
        with self.lock:
            return self.conns[i]

    def wait(self, pred: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``pred()`` (checked under the lock) holds."""
        end = time.monotonic() + timeout
        with self.lock:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("the fake session service waited in vain")
                self.lock.wait(min(left, 0.05))

    def count(self, typ: str, conn: Optional[int] = None) -> int:
        return sum(1 for i, t in self.log if t == typ and (conn is None or i == conn))

    def next(self, typ: str, timeout: float = 10.0) -> Tuple[int, Dict[str, Any]]:
        """The next message of type ``typ`` handled (any socket)."""
        end = time.monotonic() + timeout
        while True:
            i, m = self.events.get(timeout=max(0.0, end - time.monotonic()))
            if m.get("type") == typ:
                return i, m

    def push(self, msg: Dict[str, Any], conn: int = -1) -> None:
        self.conn(conn).send(msg)

    def answer_resume(self, conn: int) -> None:
        """Handle the resume held on socket ``conn`` now (the other held
        ones stay held)."""
        self.conn(conn).go.set()

    def epoch(self, sid: str) -> int:
        """The stored epoch of session ``sid``."""
        with self.lock:
            return int(self.sessions[sid]["epoch"])

    def lease(self, name: str) -> Dict[str, Any]:
        with self.lock:
            return dict(self.leases[name])

    # --- the protocol --------------------------------------------------

    def _serve(self, sc: ServerConn) -> None:
        with self.lock:
            c = Conn(sc, len(self.conns), self.hold_output)
            self.conns.append(c)
            self.lock.notify_all()
        try:
            while True:
                try:
                    f = sc.recv_frame(timeout=30)
                except (OSError, EOFError):
                    return
                if f.opcode == 0x8:
                    c.close_frame = struct.unpack_from("!H", f.payload)[0] if len(f.payload) >= 2 else 1005
                    with c.mu:
                        try:
                            sc.send(server_frame(0x8, f.payload[:2]))
                        except OSError:
                            pass
                    return
                if f.opcode == 0x9:
                    with c.mu:
                        sc.send(server_frame(0xA, f.payload))
                    continue
                if f.opcode != 0x1:
                    continue
                msg = json.loads(f.payload)
                with self.lock:
                    c.received.append(msg)
                    self.log.append((c.index, str(msg.get("type"))))
                    self.lock.notify_all()
                self.events.put((c.index, msg))
                if self._handle(c, msg):
                    return
        finally:
            with self.lock:
                self.log.append((c.index, "END"))
                c.ended.set()
                self.lock.notify_all()

    def _lease_json(self, name: str) -> Dict[str, Any]:
        d = dict(self.leases[name])
        d.pop("_sid", None)
        return d

    def _moved(self, c: Conn) -> bool:
        """(Under the lock.) Whether the session of ``c`` moved to a later
        epoch (or ended): the instance of ``c`` no longer owns it."""
        s = self.sessions.get(c.sid)
        return s is None or int(s["epoch"]) > c.epoch

    def _handle(self, c: Conn, m: Dict[str, Any]) -> bool:
        """Answer one message; True when the socket is done."""
        typ, i = m.get("type"), m.get("id")
        with self.lock:
            if typ in ("acquire", "renew", "release", "transfer", "heartbeat") and self._moved(c):
                # the session ended on this socket: no ack, and lease operations are retryable
                ans = None if typ == "heartbeat" else _unavailable(i)
            elif typ == "open":
                sid = secrets.token_urlsafe(32)
                w = self.grant_window_ms or int(m.get("windowMs") or WINDOW_MS)
                self.sessions[sid] = {"epoch": 1, "windowMs": w}
                c.sid, c.epoch = sid, 1
                ans = {"type": "opened", "re": i, "sessionId": sid, "epoch": 1, "windowMs": w,
                       "heartbeatMs": w // 4, "leaseTtlMs": 30000}
            elif typ == "resume" and self.hold_resumes.is_set():
                threading.Thread(target=self._later_resume, args=(c, m), daemon=True).start()
                ans = None
            elif typ == "resume":
                ans = self._resume(c, m)
                if ans is None:
                    return True
            elif typ == "heartbeat":
                ans = {"type": "ack", "re": i} if self.acking else None
            elif typ == "acquire" and self.hold_acquires.is_set():
                threading.Thread(target=self._later, args=(c, m, self.hold_acquires), daemon=True).start()
                ans = None
            elif typ == "acquire":
                ans = self._acquire(c, m)
            elif typ == "release" and self.hold_releases.is_set():
                threading.Thread(target=self._later, args=(c, m, self.hold_releases), daemon=True).start()
                ans = None
            elif typ in ("renew", "release", "transfer"):
                ans = self._holding(c, m)
            elif typ == "close":
                for name, d in self.leases.items():
                    if d.get("_sid") == c.sid and d["held"]:
                        d["held"] = False
                self.sessions.pop(c.sid, None)
                c.send({"type": "closed", "re": i})
                c.send_raw(server_frame(0x8, close_payload(1000)))
                return True
            else:
                ans = {"type": "error", "problem": {"status": 400, "code": "invalid_argument", "detail": "unknown type"}}
        if ans is not None:
            c.send(ans)
        return False

    def _resume(self, c: Conn, m: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """(Under the lock.) The answer to a resume; None when it was
        refused (the refusal sent and the socket closed)."""
        i = m.get("id")
        sid = str(m.get("sessionId", ""))
        epoch = m.get("epoch")

        def refuse(status: int, code: str, **extra: Any) -> None:
            p = dict({"type": "about:blank", "title": code, "status": status, "code": code, "detail": code}, **extra)
            c.send({"type": "error", "re": i, "problem": p})
            c.send_raw(server_frame(0x8, close_payload(1008, code)))

        if c.protocol != V2 or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
            refuse(400, "invalid_argument", errors=[{"field": "epoch", "detail": "required: resumes are ordered by "
                                                     "the agent; speak leasesvc.session.v2"}])
            return None
        if self.refuse_resume or sid not in self.sessions:
            refuse(404, self.refuse_resume or "session_not_found")
            return None
        s = self.sessions[sid]
        if s["epoch"] >= epoch:  # S1: only a higher epoch takes the session over
            refuse(409, "session_conflict", epoch=s["epoch"])
            return None
        s["epoch"] = epoch
        c.sid, c.epoch = sid, epoch
        kept, lost = [], []
        for x in m.get("leases") or []:
            name = x.get("name")
            cur = self.leases.get(name)
            if (cur is not None and cur["held"] and cur["holder"] == x.get("holder")
                    and cur["fencingToken"] == x.get("fencingToken") and name not in self.lost_on_resume):
                cur["_sid"] = sid
                kept.append(self._lease_json(name))
            else:
                lost.append({"name": name, "fencingToken": x.get("fencingToken"), "reason": "taken"})
        w = s["windowMs"]
        return {"type": "resumed", "re": i, "sessionId": sid, "epoch": s["epoch"], "windowMs": w,
                "heartbeatMs": w // 4, "leaseTtlMs": 30000, "leases": kept, "lost": lost}

    def _later_resume(self, c: Conn, m: Dict[str, Any]) -> None:
        """Answer a held resume once resumes are no longer held or the test
        says so (:meth:`answer_resume`); never if its socket ended first."""
        while self.hold_resumes.is_set() and not c.go.is_set() and not c.ended.is_set():
            time.sleep(0.01)
        if c.ended.is_set():
            return
        with self.lock:
            ans = self._resume(c, m)
        if ans is not None:
            c.send(ans)

    def _later(self, c: Conn, m: Dict[str, Any], hold: threading.Event) -> None:
        """Answer a held acquire or release once ``hold`` clears (as the
        socket's instance then would); never if its socket ended first."""
        while hold.is_set() and not c.ended.is_set():
            time.sleep(0.01)
        if c.ended.is_set():
            return
        with self.lock:
            if self._moved(c):
                ans = _unavailable(m["id"])
            else:
                ans = self._acquire(c, m) if m["type"] == "acquire" else self._holding(c, m)
        c.send(ans)

    def _acquire(self, c: Conn, m: Dict[str, Any]) -> Dict[str, Any]:
        name, holder, i = m["name"], m["holder"], m["id"]
        if self.acquire_problem is not None:
            return {"type": "error", "re": i, "problem": self.acquire_problem}
        cur = self.leases.get(name)
        if cur is not None and cur["held"] and cur["holder"] != holder:
            return {"type": "error", "re": i, "problem": {"status": 409, "code": "lease_held", "detail": "held",
                                                          "lease": self._lease_json(name)}}
        if cur is not None and cur["held"]:
            cur["_sid"] = c.sid  # the same holder through the session: the holding moves to this socket's epoch
        else:
            token = (cur["fencingToken"] if cur else 0) + 1
            w = self.sessions.get(c.sid, {}).get("windowMs", WINDOW_MS)
            self.leases[name] = {"name": name, "holder": holder, "fencingToken": token, "ttlMs": 30000,
                                 "held": True, "transitions": token, "metadata": m.get("metadata") or {},
                                 "session": True, "sessionWindowMs": w, "_sid": c.sid}
            if cur is not None and cur.get("checkpoint") is not None:
                self.leases[name]["checkpoint"] = cur["checkpoint"]
        return {"type": "result", "re": i, "lease": self._lease_json(name)}

    def _holding(self, c: Conn, m: Dict[str, Any]) -> Dict[str, Any]:
        name, i = m["name"], m["id"]
        if self.release_problem is not None and m["type"] in ("release", "transfer"):
            return {"type": "error", "re": i, "problem": self.release_problem}
        cur = self.leases.get(name)
        if cur is None or not cur["held"] or cur["holder"] != m.get("holder") or cur["fencingToken"] != m.get("fencingToken"):
            return {"type": "error", "re": i, "problem": {"status": 409, "code": "lease_lost", "detail": "lost"}}
        if m.get("checkpoint") is not None:
            cur["checkpoint"] = m["checkpoint"]
        if m["type"] == "renew":
            if m.get("metadata") is not None:
                cur["metadata"] = m["metadata"]
        else:
            cur["held"] = False
            cur.pop("session", None)
            if m["type"] == "transfer":
                cur["reservedFor"] = m["to"]
        return {"type": "result", "re": i, "lease": self._lease_json(name)}
