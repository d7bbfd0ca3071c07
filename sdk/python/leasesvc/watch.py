"""``Watch``: a watch stream (SSE) of one lease, opened with
:meth:`leasesvc.Client.watch`, reconnected with backoff until closed."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import List, Optional

from ._http import MAX_ANSWER_BYTES, Transport, _lease_path, _shutdown, problem_error
from .errors import InternalError, LeaseError, UnavailableError
from .lease import EVENT_STATE, Event, Lease

#: How long a watch stream may stay silent (the service sends a heartbeat
#: every 15 s) before it is taken for dead and reconnected, seconds.
WATCH_IDLE = 45.0


class Watch:
    """An open watch stream of one lease: iterate over it for :class:`Event`
    objects; :meth:`close` (from any thread) ends it.

    The first event is ``lease`` (the state now; its ``lease`` is ``None``
    when the lease never existed), then one event per change of holding. A
    dropped connection, or one silent for ``WATCH_IDLE`` seconds (three
    missed heartbeats), is reconnected with capped jittered backoff for as
    long as the watch is not closed, sending ``Last-Event-ID``; the first
    event after a reconnect is again a ``lease`` state, so changes missed
    meanwhile are summed up rather than lost. Events can repeat across a
    reconnect: keep the newest per lease with :func:`leasesvc.newer`. A
    refusal that retrying cannot cure (not found route, bad name, denied)
    ends the iteration by raising it.
    """

    def __init__(self, client: Transport, name: str) -> None:
        """Use :meth:`leasesvc.Client.watch`; ``client`` is the Client."""
        self._c = client
        self._name = name
        self._mu = threading.Lock()
        self._closed = threading.Event()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._sock: Optional[socket.socket] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._reading = False
        #: The id of the last event received, sent as Last-Event-ID.
        self.last_event_id = ""
        #: How many times the stream was reconnected.
        self.reconnects = 0

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> Event:
        failures = 0
        while not self._closed.is_set():
            with self._mu:
                resp = self._resp
            if resp is None:
                try:
                    self._open()
                    failures = 0
                    self.reconnects += 1
                except UnavailableError:
                    if self._closed.wait(self._c.backoff.delay(min(failures, 16))):
                        break
                    failures += 1
                continue
            try:
                with self._mu:
                    self._reading = True
                try:
                    ev = self._read(resp)
                except InternalError:
                    self._closed.set()  # the service would send it again: final
                    self._drop()
                    raise
                finally:
                    with self._mu:
                        self._reading = False
                if self._closed.is_set():
                    self._drop()
            except (OSError, ValueError, AttributeError, http.client.HTTPException, _Dropped):
                # ValueError, AttributeError: closed by close() in another thread
                self._drop()
                continue
            if ev is not None:
                return ev
        raise StopIteration

    def _connect(self, first: bool) -> None:
        """Open the stream, retrying transient failures like any call."""
        n = 0
        while True:
            try:
                self._open()
                return
            except UnavailableError as e:
                if n + 1 >= self._c.max_attempts or self._closed.is_set():
                    raise e._named("watch", self._name)
            except LeaseError as e:
                raise e._named("watch", self._name)
            time.sleep(self._c.backoff.delay(n))
            n += 1

    def _open(self) -> None:
        c = self._c
        headers = c._headers(False, accept="text/event-stream")
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        conn = c._connection(c.request_timeout)
        try:
            conn.request("GET", c._prefix + _lease_path(self._name, ":watch"), headers=headers)
            sock = conn.sock
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise UnavailableError(f"{type(e).__name__}: {e}", cause=e) from e
        if resp.status != 200:
            data = resp.read(4096)
            conn.close()
            err = problem_error(resp.status, resp.getheader("Retry-After"), data)
            if not isinstance(err, UnavailableError):
                with self._mu:
                    self._closed.set()
            raise err
        if sock is not None:
            sock.settimeout(WATCH_IDLE)
        with self._mu:
            if self._closed.is_set():
                _shutdown(sock)
                conn.close()
                return
            self._conn, self._sock, self._resp = conn, sock, resp

    def _drop(self) -> None:
        with self._mu:
            conn, sock, resp = self._conn, self._sock, self._resp
            self._conn, self._sock, self._resp = None, None, None
        _shutdown(sock)
        if resp is not None:
            resp.close()
        if conn is not None:
            conn.close()

    def _read(self, resp: http.client.HTTPResponse) -> Optional[Event]:
        """Read one event; one larger than MAX_ANSWER_BYTES (all its lines) fails once that much is read."""
        typ, eid, size = "", "", 0
        data: List[str] = []
        while True:
            line = resp.readline(MAX_ANSWER_BYTES - size + 1)
            if not line:
                raise _Dropped()
            size += len(line)
            if size > MAX_ANSWER_BYTES:
                raise InternalError(f"watch: event larger than {MAX_ANSWER_BYTES} bytes (MAX_ANSWER_BYTES)")
            s = line.decode("utf-8", "replace").rstrip("\r\n")
            if s == "":
                if not typ:
                    size, data = 0, []
                    continue
                if typ == "overflow":
                    raise _Dropped()  # the service closed a stream that fell behind: resume
                if eid:
                    self.last_event_id = eid
                return _decode_sse(typ, "".join(data), eid)
            if s.startswith(":"):
                continue  # heartbeat
            if s.startswith("event:"):
                typ = s[len("event:"):].strip()
            elif s.startswith("data:"):
                d = s[len("data:"):]
                data.append(d[1:] if d.startswith(" ") else d)
            elif s.startswith("id:"):
                eid = s[len("id:"):].strip()

    def close(self) -> None:
        """End the stream; an iteration in another thread stops."""
        self._closed.set()
        with self._mu:
            sock, reading = self._sock, self._reading
        _shutdown(sock)  # the reader, if any, sees the end and cleans up
        if not reading:
            self._drop()


class _Dropped(Exception):
    """The stream's connection ended."""


def _decode_sse(typ: str, data: str, eid: str) -> Event:
    try:
        v = json.loads(data)
    except ValueError as e:
        raise InternalError(f"watch: event {typ!r}: {e}") from e
    if typ == EVENT_STATE:
        lease = Lease.from_json(v) if isinstance(v, dict) else None
        return Event(type=EVENT_STATE, lease=lease, time=lease.server_time if lease else None, id=eid)
    if not isinstance(v, dict):
        raise InternalError(f"watch: event {typ!r}: not a JSON object")
    try:
        return Event.from_json(v, id=eid)
    except ValueError as e:
        raise InternalError(str(e)) from e
