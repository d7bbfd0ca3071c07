"""``Client``: every operation of the leasesvc HTTP API (docs/contract.md §4),
with retries of what is safe to retry, and watch streams (SSE,
:mod:`leasesvc.watch`); its transport helpers are in :mod:`leasesvc._http`."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from ._http import (MAX_ANSWER_BYTES, _Cancel, _lease_path, _ms, _not_acted_on,  # noqa: F401 (re-exported)
                    problem_error)
from .backoff import DEFAULT_BACKOFF, Backoff
from .errors import (CredentialsError, InternalError, LeaseError, RateLimitedError, SessionsUnsupportedError,
                     UnavailableError)
from .lease import Lease, Page
from .session import Session
from .watch import WATCH_IDLE, Watch  # noqa: F401 (re-exported)

#: A bearer token, or a callable returning one (called for every attempt of
#: every request, so it can refresh; cache inside it if fetching is slow).
Credentials = Union[str, Callable[[], str], None]


class Client:
    """Calls the leasesvc HTTP API. Safe for use by many threads.

    A context manager: ``with Client(url) as client:`` closes it at the end
    of the block (:meth:`close`).

    Transient failures (connection errors, timeouts, 429, 502, 503, 504) are
    retried up to ``max_attempts`` sends in all, spaced by ``backoff``; a
    503's ``Retry-After`` lengthens a delay up to ``backoff.max``, a 429's
    (the caller's own rate limit) is waited in full. Retrying is safe for
    every operation but :meth:`revoke`: an acquire repeated by the same
    holder returns the same holding, a repeated release succeeds, and a
    renew whose answer was lost is renewed again. Every other refusal
    (401 and 403 included) is raised at once.

    Args:
        base_url: the service, such as ``"http://localhost:8080"``.
        token: credentials: a bearer token, or a callable returning one. It
            is sent as ``Authorization: Bearer …`` and, for Cloud Run, as
            ``X-Serverless-Authorization``. ``None``: no credentials.
        request_timeout: bounds one attempt (each socket operation of it),
            not counting the time an acquire may wait; seconds.
        max_attempts: how many times a request is sent in all, ≥ 1.
        backoff: spaces the retries.
        user_agent: sent with every request.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: Credentials = None,
        request_timeout: float = 10.0,
        max_attempts: int = 4,
        backoff: Backoff = DEFAULT_BACKOFF,
        user_agent: str = "leasesvc-python-client",
    ) -> None:
        u = urllib.parse.urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"leasesvc.Client: base URL {base_url!r} must be http(s)://host[:port]")
        if request_timeout <= 0:
            raise ValueError(f"leasesvc.Client: request_timeout {request_timeout} must be positive")
        if max_attempts < 1:
            raise ValueError(f"leasesvc.Client: max_attempts {max_attempts} must be at least 1")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path
        self._base = base_url.rstrip("/")
        self._token = token
        self.request_timeout = request_timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.user_agent = user_agent
        self._closed = False
        self._watches: "weakref.WeakSet[Watch]" = weakref.WeakSet()  # open watch streams
        self._watches_mu = threading.Lock()
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()  # open sessions
        self._shared_mu = threading.Lock()  # held while the shared session opens
        self._shared: Optional[Session] = None
        self._no_sessions: Optional[SessionsUnsupportedError] = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client: end the watch streams and close the sessions
        it opened that are still open (a session's close releases its
        leases), and refuse further requests (``RuntimeError``). Requests in
        flight finish. An :class:`~leasesvc.Elector` using the client loses
        its renewals, so stop it first. Closing twice is harmless."""
        with self._watches_mu:
            self._closed = True
            watches = list(self._watches)
            sessions = list(self._sessions)
        for w in watches:
            w.close()
        for s in sessions:
            s.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("leasesvc.Client: the client is closed")

    @property
    def base_url(self) -> str:
        """The service's base URL."""
        return self._base

    # --- operations ---------------------------------------------------

    def acquire(
        self,
        name: str,
        holder: str,
        ttl: float,
        *,
        metadata: Optional[Dict[str, Any]] = None,
        wait: float = 0.0,
        priority: Optional[int] = None,
        preempt: bool = False,
    ) -> Lease:
        """Take the lease if it is free or expired (a new fencing token), or
        extend the caller's own live holding (same token). The answer of a
        new holding carries the checkpoint it inherits
        (``lease.checkpoint``, docs/contract.md §8).

        Args:
            ttl: the lease duration, seconds (whole milliseconds are sent).
            metadata: a JSON object (≤ 16 KiB) attached to the lease; ``None``
                keeps what a repeated acquire finds stored.
            wait: if positive, the service waits up to this long (≤ 60 s) for
                a holding by another to end before answering ``lease_held``.
            priority: 0 … 1000, recorded on the holding this acquire begins.
                A waiting acquire that carries it (even 0) is a candidate:
                when a holding ends, the lease is reserved for a few seconds
                for the best waiting candidate (highest priority, then the
                one waiting longest). ``None`` sends none: the acquire
                behaves as before succession existed.
            preempt: on a waiting acquire with a priority, asks a holder
                whose holding has a strictly lower priority to step down
                (its renewals answer ``yield_requested``). Nothing is taken
                by force. It needs ``wait`` > 0 (the service refuses it
                otherwise) and sends priority 0 when ``priority`` is None.

        Raises:
            LeaseHeldError: held by another; ``err.lease`` is the current lease.
            LeaseReservedError: free but reserved for another holder
                (``err.reserved_for``, ``err.reserved_until``).
        """
        return Lease.from_json(self._acquire(name, holder, ttl, metadata=metadata, wait=wait,
                                             priority=priority, preempt=preempt))

    def _acquire(self, name: str, holder: str, ttl: float, *, metadata: Optional[Dict[str, Any]] = None,
                 wait: float = 0.0, priority: Optional[int] = None, preempt: bool = False,
                 attempts: int = 0, cancel: Optional[_Cancel] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"holder": holder, "ttlMs": _ms(ttl)}
        if metadata is not None:
            body["metadata"] = metadata
        if wait > 0:
            body["waitMs"] = _ms(wait)
        if priority is not None or preempt:
            body["priority"] = priority or 0
        if preempt:
            body["preempt"] = True
        return self._call("acquire", name, "POST", _lease_path(name, ":acquire"), body,
                          attempts=attempts, extra=max(wait, 0.0), cancel=cancel)

    def renew(
        self,
        name: str,
        holder: str,
        fencing_token: int,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[Dict[str, Any]] = None,
        checkpoint: Optional[Dict[str, Any]] = None,
    ) -> Lease:
        """Extend the holding named by holder and token: expireTime =
        serverTime + ttl. ``ttl`` (seconds), if given, replaces the holding's
        duration; ``metadata``, if given, replaces the stored metadata;
        ``checkpoint``, if given, a JSON object (≤ 16 KiB), replaces the
        lease's checkpoint, which the next holder inherits
        (docs/contract.md §8). ``lease.yield_requested`` in the answer asks
        the holder to step down for ``lease.yield_to``.

        Raises:
            LeaseLostError: anything but the current live holding: stop acting as
                leader now.
        """
        return Lease.from_json(self._renew(name, holder, fencing_token, ttl=ttl, metadata=metadata,
                                           checkpoint=checkpoint))

    def _renew(self, name: str, holder: str, fencing_token: int, *, ttl: Optional[float] = None,
               metadata: Optional[Dict[str, Any]] = None, checkpoint: Optional[Dict[str, Any]] = None,
               attempts: int = 0, timeout: Optional[float] = None,
               cancel: Optional[_Cancel] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"holder": holder, "fencingToken": fencing_token}
        if ttl is not None and ttl > 0:
            body["ttlMs"] = _ms(ttl)
        if metadata is not None:
            body["metadata"] = metadata
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        return self._call("renew", name, "POST", _lease_path(name, ":renew"), body,
                          attempts=attempts, timeout=timeout, cancel=cancel)

    def release(self, name: str, holder: str, fencing_token: int, *,
                checkpoint: Optional[Dict[str, Any]] = None) -> Lease:
        """End the holding named by holder and token now; the next acquire
        gets token + 1. Repeating it succeeds while nobody has acquired
        since. ``checkpoint``, if given, a JSON object (≤ 16 KiB), is
        written as the lease's checkpoint: the next holder inherits it
        (docs/contract.md §8).

        Raises:
            LeaseLostError: anything else.
        """
        return Lease.from_json(self._release(name, holder, fencing_token, checkpoint=checkpoint))

    def _release(self, name: str, holder: str, fencing_token: int, *,
                 checkpoint: Optional[Dict[str, Any]] = None, attempts: int = 0,
                 timeout: Optional[float] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"holder": holder, "fencingToken": fencing_token}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        return self._call("release", name, "POST", _lease_path(name, ":release"), body,
                          attempts=attempts, timeout=timeout)

    def transfer(self, name: str, holder: str, fencing_token: int, to: str, *,
                 checkpoint: Optional[Dict[str, Any]] = None, reserve: Optional[float] = None,
                 to_principal: Optional[str] = None) -> Lease:
        """Hand the holding named by holder and token over to the holder
        ``to`` (docs/contract.md §8): the holding ends now, as with
        :meth:`release`, ``checkpoint`` (if given) is written, and the lease
        is reserved for ``to`` for ``reserve`` seconds (1 ms … 60 s; None:
        the service's default, 5 s). ``to``'s acquire then gets token + 1
        and the checkpoint; anyone else's is refused with
        :class:`~leasesvc.LeaseReservedError` meanwhile. With authentication on,
        the reservation is for ``to`` acquiring as ``to_principal`` (the
        successor's principal; None: the caller's own): ``to``'s acquire by
        another principal is refused too. Repeating it succeeds while nobody
        has acquired since.

        Raises:
            LeaseLostError: not the current live holding (or its own ended one).
            InvalidArgumentError: ``to`` is the holder itself, or a bad argument.
        """
        body: Dict[str, Any] = {"holder": holder, "fencingToken": fencing_token, "to": to}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        if reserve is not None:
            body["reserveMs"] = max(1, _ms(reserve))
        if to_principal is not None:
            body["toPrincipal"] = to_principal
        return Lease.from_json(self._transfer(name, body))

    def _transfer(self, name: str, body: Dict[str, Any], *, attempts: int = 0,
                  timeout: Optional[float] = None) -> Dict[str, Any]:
        return self._call("transfer", name, "POST", _lease_path(name, ":transfer"), body,
                          attempts=attempts, timeout=timeout)

    def get(self, name: str) -> Lease:
        """Return the lease, held or not.

        Raises:
            NotFoundError: the lease never existed.
        """
        return Lease.from_json(self._call("get", name, "GET", _lease_path(name, ""), None))

    def list(self, prefix: str = "", page_size: int = 0, page_token: str = "") -> Page:
        """Return one page of leases in name order. ``page_size`` 0 means the
        service's default (100); above 1,000 means 1,000."""
        q: List[Tuple[str, str]] = []
        if prefix:
            q.append(("prefix", prefix))
        if page_size:
            q.append(("pageSize", str(page_size)))
        if page_token:
            q.append(("pageToken", page_token))
        path = "/v1/leases"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        d = self._call("list", prefix, "GET", path, None)
        return Page([Lease.from_json(x) for x in d.get("leases") or []], str(d.get("nextPageToken") or ""))

    def all(self, prefix: str = "") -> Iterator[Lease]:
        """Iterate over every lease whose name starts with ``prefix``, page
        after page."""
        token = ""
        while True:
            page = self.list(prefix, 1000, token)
            yield from page.leases
            if not page.next_page_token:
                return
            token = page.next_page_token

    def revoke(self, name: str, reason: str, fencing_token: int = 0) -> Lease:
        """End the live holding of the lease now, as an operator (the admin
        verb): the holder's next renew is ``lease_lost`` and the next acquire
        gets token + 1. ``fencing_token``, if positive, revokes only that
        holding (``LeaseLostError`` when it is not the live one). A lease that is
        not held is answered unchanged.

        A revoke is not idempotent (sent again after its answer was lost it
        could end a newer holding), so only failures that show the service
        did not act are retried: 429, and connections never made.
        """
        body: Dict[str, Any] = {"reason": reason}
        if fencing_token > 0:
            body["fencingToken"] = fencing_token
        return Lease.from_json(self._call("revoke", name, "POST", _lease_path(name, ":revoke"), body,
                                          not_idempotent=True))

    def delete(self, name: str) -> Lease:
        """Delete the lease, which nobody may hold or have reserved
        (``DELETE /v1/leases/{name}``, docs/contract.md §15), and return it as
        it was. It is then not found to get, list and watch, but its fencing
        token is kept: the next acquire gets the deleted token + 1. Needs the
        ``delete`` verb (or ``admin``) with authentication on.

        A delete is not idempotent (sent again it answers ``NotFound``), so
        only failures that show the service did not act are retried: 429, and
        connections never made.

        Raises:
            LeaseHeld: the lease is held (``.lease`` is the holding).
            LeaseReserved: the free lease is reserved for a successor.
            NotFound: the lease never existed, or is already deleted.
        """
        return Lease.from_json(self._call("delete", name, "DELETE", _lease_path(name, ""), None,
                                          not_idempotent=True))

    def watch(self, name: str) -> "Watch":
        """Open a watch stream of the lease (``GET …:watch``): the lease now,
        then each change of holding. It fails like :meth:`get` when the
        service cannot be reached (after retries) or refuses; once open, a
        dropped stream is reconnected until :meth:`Watch.close`."""
        w = Watch(self, name)
        with self._watches_mu:
            self._check_open()
            self._watches.add(w)
        w._connect(first=True)
        return w

    # --- sessions (docs/contract.md §14) --------------------------------

    def open_session(self, window: float = 1.0, drift_margin: float = 0.1, *,
                     logger: Optional[logging.Logger] = None,
                     clock: Callable[[], float] = time.monotonic) -> Session:
        """Open a session (docs/contract.md §14): one WebSocket to
        ``GET /v1/sessions:connect`` that heartbeats every ``window``/4 on a
        thread of its own. Leases acquired through it are held by the
        service at a long TTL and released within ``window`` of the last
        heartbeat it received; the session's :meth:`~leasesvc.Session.deadline`
        is the monotonic send time of the last acknowledged heartbeat +
        ``window`` × (1 − ``drift_margin``). A dropped socket is reconnected
        and the session resumed; a session the service ended is over for
        good (rule L2: :attr:`~leasesvc.Session.ended`), and a new one is
        opened by whoever needs one. :meth:`close` of the client closes it.

        Args:
            window: the heartbeat window, seconds (0.2 … 60).
            drift_margin: the fraction of the window given up to clock-rate
                differences, 0.01 … 0.5.
            logger: default ``logging.getLogger("leasesvc")``.
            clock: the monotonic clock, seconds.

        Raises:
            SessionsUnsupportedError: the service answered the upgrade with
                404, 405 or 501 (it offers no sessions).
            LeaseError: the service refused (401, 403, 429, ...) or could not
                be reached.
        """
        with self._watches_mu:
            self._check_open()
        s = Session(self, window=window, drift_margin=drift_margin, logger=logger, clock=clock)
        s._open()
        with self._watches_mu:
            self._sessions.add(s)
            closed = self._closed
        if closed:
            s.close()
            self._check_open()
        return s

    def _shared_session(self) -> Session:
        """The session this client's Keepers share by default, opened on
        first use, and again once it is over (closed, or ended by the
        service: rule L2, the Client being the owner that opened it).

        Raises:
            SessionsUnsupportedError: the service offers no sessions (known
                from then on, without asking again).
            SessionLimitError: the service refused the open at its session
                limit (not remembered here: the next call asks again; a
                Keeper remembers it for its life).
        """
        with self._shared_mu:
            s = self._shared
            if s is not None and not s.closed:
                return s
            if self._no_sessions is not None:
                raise self._no_sessions
            try:
                s = self.open_session()
            except SessionsUnsupportedError as e:
                self._no_sessions = e
                raise
            self._shared = s
            return s

    # --- transport ----------------------------------------------------

    def _headers(self, body: bool, accept: str = "application/json") -> Dict[str, str]:
        h = {"Accept": accept, "User-Agent": self.user_agent}
        if body:
            h["Content-Type"] = "application/json"
        if self._token is not None:
            try:
                tok = self._token() if callable(self._token) else self._token
            except Exception as e:  # the user's callable: any failure
                raise CredentialsError(f"the token callable failed: {e}") from e
            if not tok:
                raise CredentialsError("the token is empty")
            h["Authorization"] = "Bearer " + tok
            h["X-Serverless-Authorization"] = "Bearer " + tok
        return h

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _call(self, op: str, name: str, method: str, path: str, body: Optional[Dict[str, Any]], *,
              attempts: int = 0, timeout: Optional[float] = None, extra: float = 0.0,
              not_idempotent: bool = False, cancel: Optional[_Cancel] = None) -> Dict[str, Any]:
        """Send a request, retrying transient failures, and return the
        decoded 200 answer; errors name the operation and the lease."""
        self._check_open()
        raw = json.dumps(body).encode() if body is not None else None
        attempts = attempts or self.max_attempts
        t = (timeout or self.request_timeout) + extra
        n = 0
        while True:
            try:
                return self._once(method, path, raw, t, cancel)
            except LeaseError as e:
                err = e
            if cancel is not None and cancel.cancelled:
                raise err._named(op, name)
            if not isinstance(err, UnavailableError) or (not_idempotent and not _not_acted_on(err)):
                raise err._named(op, name)
            if n + 1 >= attempts:
                raise err._named(op, name)
            d = self.backoff.delay(n)
            if isinstance(err, RateLimitedError) and err.retry_after > d:
                d = err.retry_after  # the caller's rate limit: sooner is refused again
            elif err.retry_after > d:
                d = min(err.retry_after, self.backoff.max)
            time.sleep(d)
            n += 1

    def _once(self, method: str, path: str, body: Optional[bytes], timeout: float,
              cancel: Optional[_Cancel]) -> Dict[str, Any]:
        headers = self._headers(body is not None)
        conn = self._connection(timeout)
        if cancel is not None:
            cancel.attach(conn)
        try:
            try:
                conn.connect()
            except (OSError, http.client.HTTPException) as e:
                raise UnavailableError(f"connect: {e}", cause=e, code="unavailable") from e
            if cancel is not None:
                cancel.attach(conn)  # now with its socket
            try:
                conn.request(method, self._prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read(MAX_ANSWER_BYTES + 1)
            except (OSError, http.client.HTTPException) as e:
                err = UnavailableError(f"{type(e).__name__}: {e}", cause=e)
                err.sent = True  # type: ignore[attr-defined]
                raise err from e
            if resp.status == 200:
                if len(data) > MAX_ANSWER_BYTES:
                    raise InternalError(f"answer larger than {MAX_ANSWER_BYTES} bytes (MAX_ANSWER_BYTES): ask for smaller pages",
                                        status=200)
                try:
                    out = json.loads(data)
                except ValueError as e:
                    raise InternalError(f"decode answer: {e}", status=200) from e
                if not isinstance(out, dict):
                    raise InternalError("decode answer: not a JSON object", status=200)
                return out
            raise problem_error(resp.status, resp.getheader("Retry-After"), data)
        finally:
            if cancel is not None:
                cancel.attach(None)
            conn.close()
