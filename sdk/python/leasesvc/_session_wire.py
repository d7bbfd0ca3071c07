"""The socket side of :class:`leasesvc.Session` (docs/contract.md §14):
dialling, the bookkeeping of one socket and of one request, reading the
answer to ``open`` or ``resume``, and what a ``resumed`` answer says was
lost. Nothing here holds the session's lock; :mod:`leasesvc.session`
decides."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from . import _websocket
from ._http import problem_error
from .errors import (InternalError, InvalidArgumentError, LeaseError, RateLimitedError,  # noqa: F401 (re-exported)
                     SessionLimitError, SessionsUnsupportedError, UnavailableError)

#: The WebSocket subprotocol of sessions: v2, whose resumes carry the
#: epoch the agent proposes (docs/contract.md §14, Old clients).
SUBPROTOCOL = "leasesvc.session.v2"
#: The statuses of an upgrade that mean "no sessions here".
UNSUPPORTED_STATUSES = (404, 405, 501)
#: The largest epoch or fencing token the service accepts or sends
#: (JavaScript's Number.MAX_SAFE_INTEGER, docs/contract.md §14): a larger
#: one from the service is a protocol error.
MAX_SAFE_INTEGER = 2**53 - 1

#: A push handler: ``f(kind, message)``, kind one of "deadline" (message
#: ``{"deadline": float}``), "lost", "revoked", "yield" (the push as sent).
Watcher = Callable[[str, Dict[str, Any]], None]


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds."""
    return int(round(seconds * 1000))


def problem(p: Any) -> LeaseError:
    """The typed error of an ``error`` message's problem."""
    if not isinstance(p, dict):
        return InternalError("session: an error without a problem")
    try:
        status = int(p.get("status") or 0)
    except (TypeError, ValueError):
        status = 0
    return problem_error(status or 500, None, json.dumps(p).encode())


def unsafe_number(what: str, v: Any) -> Optional[InternalError]:
    """The protocol error of an epoch or fencing token ``v`` (named
    ``what``) above :data:`MAX_SAFE_INTEGER`, which the service never sends;
    None for any other value."""
    if isinstance(v, int) and not isinstance(v, bool) and v > MAX_SAFE_INTEGER:
        return InternalError(f"session: {what} {v} is above 2^53 - 1, which the service never sends "
                             "(docs/contract.md §14, bounds)")
    return None


class Call:
    """One request awaiting its answer (its state guarded by the session's
    lock)."""

    __slots__ = ("op", "name", "holder", "token", "done", "answer", "err", "abandoned", "vouched", "dropped",
                 "sent", "losses", "lost")

    def __init__(self, op: str, name: str, holder: str, token: int = 0) -> None:
        self.op, self.name, self.holder, self.token = op, name, holder, token
        self.done = threading.Event()
        self.answer: Optional[Dict[str, Any]] = None
        self.err: Optional[LeaseError] = None
        self.abandoned = False  # the caller stopped waiting
        # an acquire's holding was answered on the current socket (that of
        # the latest open or resume sent), so that socket's acks vouch for it
        self.vouched = True
        self.dropped = False  # the socket ended before the answer
        #: the session clock's time the request was sent (stamped just before)
        self.sent = 0.0
        #: (an acquire) the fencing tokens of the lease that a ``lost`` or
        #: ``revoked`` push on its socket named while it was in flight (0:
        #: a push without a token), remembered until its answer (A5)
        self.losses: Set[int] = set()
        #: (an acquire) its ``result`` names a holding one of ``losses``
        #: reported lost before it: the holding is not led (A5)
        self.lost = False

    def lost_before(self, lease: Any) -> bool:
        """(An acquire.) Whether the holding of the ``result`` lease
        ``lease`` was reported lost on the socket while the acquire was in
        flight (A5)."""
        if not self.losses or not isinstance(lease, dict) or not lease.get("held"):
            return False
        token = lease.get("fencingToken")
        return 0 in self.losses or (isinstance(token, int) and token in self.losses)


class Conn:
    """One socket of the session and the requests sent on it."""

    def __init__(self, ws: _websocket.WebSocket, gen: int) -> None:
        self.ws = ws
        #: the stamp of this socket's open or resume: the session's count of
        #: opens and resumes sent when it went out. The socket is current
        #: while no later one was sent (docs/contract.md §14, A2).
        self.gen = gen
        self.pending: Dict[int, Call] = {}
        self.moved = False  # replaced by a newer socket: its end is no drop
        self.last_rx = time.monotonic()  # when a message last arrived on it
        #: the session clock's time a resume was first sent on a newer
        #: socket: no heartbeat goes out on this one after it, and nothing
        #: that arrives on it counts, its acks included (docs/contract.md §14, A2)
        self.superseded: Optional[float] = None


class Hello:
    """One ``open`` or ``resume`` sent on a new socket: its stamp (see
    :attr:`Conn.gen`), the message, and what came back (the answer and what
    arrived before it, or the error)."""

    def __init__(self, gen: int, msg: Dict[str, Any]) -> None:
        self.gen = gen
        self.msg = msg
        self.ans: Dict[str, Any] = {}
        self.early: List[Dict[str, Any]] = []
        self.err: Optional[LeaseError] = None


class Resend(Exception):
    """(Never leaves the session.) A release or transfer ended with its
    socket's session, answered ``503 unavailable`` or not answered before the
    socket closed: the holding stays in the table, and the request goes
    again once the session is resumed on a newer socket than ``gen``."""

    def __init__(self, gen: int, err: LeaseError) -> None:
        super().__init__(str(err))
        self.gen, self.err = gen, err


def dial(url: str, headers: Mapping[str, str], timeout: float) -> _websocket.WebSocket:
    """Open a session socket (the upgrade, authenticated like every
    request)."""
    try:
        return _websocket.connect(url, subprotocols=[SUBPROTOCOL], headers=headers, timeout=timeout)
    except _websocket.HandshakeError as e:
        if e.status in UNSUPPORTED_STATUSES:
            raise SessionsUnsupportedError(f"the service answered the session upgrade with {e.status}",
                                           status=e.status)._named("session", "") from e
        if e.status == 0:
            raise UnavailableError(str(e), cause=e)._named("session", "") from e
        err = problem_error(e.status, e.header("Retry-After"), e.body)._named("session", "")
        if e.status == 429 and _sessions_capped(e.body) and isinstance(err, RateLimitedError):
            # The service's cap of sessions, not the caller's rate limit.
            raise SessionLimitError(err.detail, status=err.status, code=err.code, retry_after=err.retry_after,
                                    op=err.op, name=err.name) from e
        raise err from e
    except ValueError as e:
        raise InvalidArgumentError(str(e))._named("session", "") from e


def _sessions_capped(body: Any) -> bool:
    """Whether a refusal's problem body names the cap of sessions (its
    ``limit`` member ``"sessions"``, docs/contract.md §14 Limits)."""
    try:
        p = json.loads(body)
    except (TypeError, ValueError):
        return False
    return isinstance(p, dict) and p.get("limit") == "sessions"


def read_answer(ws: _websocket.WebSocket, i: int, what: str,
                timeout: float) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """Read the answer to request ``i`` (an ``open`` or ``resume``, named
    ``what``) and whatever arrived before it, within ``timeout`` seconds.

    Raises:
        UnavailableError: the socket closed, or no answer in time.
        InternalError: an answer that is not JSON.
    """
    end = time.monotonic() + timeout
    early: List[Dict[str, Any]] = []
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise UnavailableError(f"no answer to {what} within {timeout:g} s")
            try:
                ans = json.loads(ws.recv(left))
            except _websocket.ReceiveTimeoutError:
                continue
            except ValueError as e:
                raise InternalError(f"session {what}: the answer is not JSON: {e}") from e
            if isinstance(ans, dict):
                if ans.get("re") == i:
                    return ans, early
                early.append(ans)
    except _websocket.ConnectionClosedError as e:
        raise UnavailableError(f"session {what}: {e}", cause=e) from e


def losses(sent: Mapping[str, Tuple[str, int]], ans: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The ``lost`` pushes a ``resumed`` answer stands for: each lease of
    the resume's list ``sent`` (name → (holder, token)) that it did not
    keep, with the reason it gives."""
    kept: Dict[str, int] = {}
    for x in ans.get("leases") or []:
        if isinstance(x, dict) and x.get("held"):
            kept[str(x.get("name", ""))] = int(x.get("fencingToken") or 0)
    reasons = {str(x.get("name", "")): x for x in ans.get("lost") or [] if isinstance(x, dict)}
    out = []
    for name, (_, token) in sorted(sent.items()):
        if kept.get(name) != token:
            why = reasons.get(name) or {}
            out.append({"type": "lost", "name": name, "fencingToken": token,
                        "reason": str(why.get("reason", "lost"))})
    return out

