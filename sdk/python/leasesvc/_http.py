"""The Client's transport helpers (:mod:`leasesvc.client`): the
cancellation of a request in flight, the reading of problem answers into
typed errors, what decides a retry, and :class:`Transport`, what a watch
stream and a session need of their Client (so that neither imports
:mod:`leasesvc.client`, which imports them: the package's imports form a
tree, tests/test_imports.py)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Protocol

from .backoff import Backoff
from .errors import (FieldError, InternalError, InvalidArgumentError, LeaseError, LeaseHeldError, LeaseReservedError,
                     RateLimitedError, error_class)
from .lease import Lease, parse_time

#: What the client reads of one answer, and of one line of a watch stream:
#: twice the largest list page the service may send (its
#: LEASESVC_MAX_PAGE_BYTES is at most 32 MiB). A larger answer is an
#: InternalError that says so.
MAX_ANSWER_BYTES = 64 << 20


class Transport(Protocol):
    """What a :class:`~leasesvc.Watch` and a :class:`~leasesvc.Session`
    use of the :class:`~leasesvc.Client` that opened them (the Client is
    one)."""

    #: Bounds one attempt, seconds.
    request_timeout: float
    #: How many times a request is sent in all.
    max_attempts: int
    #: Spaces the retries.
    backoff: Backoff
    #: The path prefix of the service's base URL.
    _prefix: str

    @property
    def base_url(self) -> str:
        """The service's base URL."""
        ...

    def _headers(self, body: bool, accept: str = "application/json") -> Dict[str, str]:
        """The headers of a request (credentials included)."""
        ...

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """A new connection to the service."""
        ...


class _Cancel:
    """Lets another thread abort a request in flight by shutting its socket."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._hooks: List[Callable[[], None]] = []
        self.cancelled = False

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` on :meth:`cancel` (at once if it came already): how a
        request over a session, whose socket is shared, is aborted."""
        with self._mu:
            if not self.cancelled:
                self._hooks.append(hook)
                return
        hook()

    def attach(self, conn: Optional[http.client.HTTPConnection]) -> None:
        with self._mu:
            self._sock = conn.sock if conn is not None else None
            if self.cancelled:
                _shutdown(self._sock)

    def cancel(self) -> None:
        with self._mu:
            self.cancelled = True
            _shutdown(self._sock)
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()


def _shutdown(sock: Optional[socket.socket]) -> None:
    """Shut a socket down, so that a read blocked on it in another thread
    returns. (http.client forgets the socket of a response that closes the
    connection, hence the socket rather than the connection.)"""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _not_acted_on(e: LeaseError) -> bool:
    """Whether a transient failure shows the service did not act: a rate
    limit refusal, or a connection never made."""
    if isinstance(e, RateLimitedError):
        return True
    return e.status == 0 and not getattr(e, "sent", False)


def _lease_path(name: str, method: str) -> str:
    return "/v1/leases/" + urllib.parse.quote(name, safe="") + method


def _retry_after(v: Optional[str]) -> float:
    try:
        s = int((v or "").strip())
    except ValueError:
        return 0.0
    return float(s) if s > 0 else 0.0


def problem_error(status: int, retry_after_header: Optional[str], raw: bytes) -> LeaseError:
    """Turn an error answer (an RFC 9457 problem, or anything else) into its
    typed error."""
    p: Dict[str, Any] = {}
    try:
        v = json.loads(raw)
        if isinstance(v, dict):
            p = v
    except ValueError:
        pass  # not a problem: the status decides
    ra = _retry_after(retry_after_header)
    code = str(p.get("code") or "")
    detail = str(p.get("detail") or "")
    if code == "lease_held" and isinstance(p.get("lease"), dict):
        return LeaseHeldError(Lease.from_json(p["lease"]), retry_after=ra, status=status)
    if code == "lease_reserved" and isinstance(p.get("lease"), dict):
        lease = Lease.from_json(p["lease"])
        return LeaseReservedError(lease, reserved_for=str(p.get("reservedFor") or lease.reserved_for),
                             reserved_until=parse_time(p.get("reservedUntil")) or lease.reserved_until,
                             retry_after=ra, status=status)
    cls = error_class(status, code)
    if cls in (LeaseHeldError, LeaseReservedError):  # lease_held without its lease: cannot say who holds it
        cls = InvalidArgumentError if status < 500 else InternalError
    if not code and not detail:
        detail = raw[:200].decode("utf-8", "replace").strip()
    fields = [FieldError(str(f.get("field", "")), str(f.get("detail", "")))
              for f in p.get("errors") or [] if isinstance(f, dict)]
    return cls(detail, status=status, code=code, fields=fields, retry_after=ra)
