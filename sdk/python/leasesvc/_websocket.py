"""A small RFC 6455 WebSocket client over ``socket`` and ``ssl`` (standard
library only): the transport of sessions (docs/contract.md §14).

It does what a session needs and no more: the opening handshake (with a
subprotocol, extra headers such as ``Authorization``, and a deadline), text
messages in both directions, control frames (a ping is answered with a pong
at once, a close is answered and reported), and the closing handshake. No
extensions, no binary messages (refused with close 1003), no proxies.

One thread may receive while another sends; :meth:`WebSocket.close` may be
called from any thread. All socket I/O runs on a non-blocking socket under
one short-held lock, so a TLS connection is never read and written by two
threads at once, and a receive with a timeout never holds up a send.

Errors: :class:`HandshakeError` when the connection could not be opened
(``status`` is the HTTP status of a refusal, 0 when no answer arrived),
:class:`ConnectionClosedError` once the connection is closed (its ``code``
and ``reason`` say how), :class:`ProtocolError` (a ConnectionClosedError)
when the server broke the protocol or the message size limit and the
client closed the connection for it, and :class:`ReceiveTimeoutError` when
:meth:`WebSocket.recv` saw no whole message before its timeout (the
connection stays usable).

The frame codec, defaults and errors are in :mod:`leasesvc._ws_frames`,
the reading of the handshake's answer in :mod:`leasesvc._ws_handshake`;
this module re-exports what they define.
"""

from __future__ import annotations

import base64
import codecs
import os
import socket
import ssl
import struct
import threading
import time
import urllib.parse
from typing import Dict, Mapping, Optional, Sequence, Tuple

from ._ws_frames import (_MAX_REASON, _OPCODES, _OWN_HEADERS, _READ_CHUNK, _TOKEN,  # noqa: F401 (re-exported)
                         CLOSE_ABNORMAL, CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR, CLOSE_INVALID_DATA,
                         CLOSE_MESSAGE_TOO_BIG, CLOSE_NO_STATUS, CLOSE_NORMAL, CLOSE_POLICY_VIOLATION,
                         CLOSE_PROTOCOL_ERROR, CLOSE_UNSUPPORTED_DATA, DEFAULT_CLOSE_TIMEOUT,
                         DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_WRITE_TIMEOUT, OP_BINARY,
                         OP_CLOSE, OP_CONTINUATION, OP_PING, OP_PONG, OP_TEXT, ConnectionClosedError,
                         HandshakeError, ProtocolError, ReceiveTimeoutError, WebSocketError, _close_payload,
                         _Dropped, _Fail, _remaining, _wait, accept_key, encode_frame, mask, valid_close_code)
from ._ws_handshake import _check_upgrade, _left, _read_body, _read_head

__all__ = [
    "WebSocket",
    "connect",
    "WebSocketError",
    "HandshakeError",
    "ConnectionClosedError",
    "ProtocolError",
    "ReceiveTimeoutError",
]


class WebSocket:
    """An open client WebSocket; make one with :func:`connect`.

    Attributes:
        url: the URL it was opened with.
        subprotocol: the subprotocol the server chose (one of those asked
            for), or None when none was asked for.
        headers: the server's 101 answer's headers, names in lower case.
        max_message_size: the largest message :meth:`recv` accepts, bytes.
        write_timeout: how long one frame may take to send, seconds.
    """

    def __init__(self, sock: socket.socket, *, url: str, subprotocol: Optional[str], headers: Dict[str, str],
                 buffered: bytes = b"", max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 write_timeout: float = DEFAULT_WRITE_TIMEOUT) -> None:
        """Wrap a socket whose opening handshake is done (see :func:`connect`);
        ``buffered`` is what was read past the handshake's answer."""
        sock.settimeout(0.0)
        self._sock = sock
        self.url = url
        self.subprotocol = subprotocol
        self.headers = headers
        self.max_message_size = max_message_size
        self.write_timeout = write_timeout
        self._io = threading.Lock()  # around each single non-blocking socket call
        self._read_lock = threading.Lock()  # one receiver at a time
        self._write_lock = threading.Lock()  # one frame at a time; guards _close_sent
        self._state = threading.Lock()  # guards _closed
        self._closed: Optional[ConnectionClosedError] = None
        self._close_sent: Optional[Tuple[int, str]] = None  # the close frame this side sent
        self._buf = bytearray(buffered)
        # the message being received
        self._msg_op: Optional[int] = None
        self._msg_size = 0
        self._msg_buf = bytearray()  # a fragmented message's bytes so far
        self._decoder: Optional[codecs.IncrementalDecoder] = None

    def __enter__(self) -> "WebSocket":
        """The connection itself; leaving the block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection (code 1000)."""
        self.close()

    @property
    def closed(self) -> Optional[ConnectionClosedError]:
        """How the connection ended, or None while it is open."""
        return self._closed

    # --- sending ------------------------------------------------------

    def send(self, text: str) -> None:
        """Send one text message (a single frame).

        Raises:
            UnicodeEncodeError: ``text`` holds a lone surrogate (nothing is
                sent).
            ConnectionClosedError: the connection is closed or closing, or
                the frame could not be written within ``write_timeout``
                (the connection is then closed: half a frame cannot be
                taken back).
        """
        data = text.encode("utf-8")
        self._send_frame(OP_TEXT, data)

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        """Send a data frame unless the connection is closed or closing."""
        frame = encode_frame(opcode, payload)
        with self._write_lock:
            if self._closed is not None:
                raise self._closed.with_traceback(None)
            if self._close_sent is not None:
                raise ConnectionClosedError(self._close_sent[0], "the client has sent its close frame")
            self._write(frame)

    def _write(self, frame: bytes) -> None:
        """Write a whole frame (the write lock held); a failure ends the
        connection."""
        deadline = time.monotonic() + self.write_timeout
        view = memoryview(frame)
        try:
            while view:
                want_read = False
                with self._io:
                    try:
                        n = self._sock.send(view)
                    except (BlockingIOError, ssl.SSLWantWriteError):
                        n = 0
                    except ssl.SSLWantReadError:
                        n, want_read = 0, True
                if n:
                    view = view[n:]
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Dropped(f"sending a frame took more than {self.write_timeout:g} s")
                _wait(self._sock, not want_read, left)
        except OSError as e:
            raise self._finish(ConnectionClosedError(CLOSE_ABNORMAL, f"send: {e}", by_peer=True)) from e
        except _Dropped as e:
            raise self._finish(ConnectionClosedError(CLOSE_ABNORMAL, str(e), by_peer=True)) from e

    # --- receiving ----------------------------------------------------

    def recv(self, timeout: Optional[float] = None) -> str:
        """Receive the next text message, answering pings meanwhile.

        Args:
            timeout: seconds to wait for a whole message; None waits for as
                long as it takes.

        Raises:
            ReceiveTimeoutError: no whole message arrived in time (the
                connection stays usable).
            ConnectionClosedError: the connection is closed (the server's
                close frame, a dropped connection, :meth:`close`).
            ProtocolError: the server broke the protocol or the size limit;
                the connection is now closed.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._read_lock:
            return self._receive(deadline)

    def _receive(self, deadline: Optional[float]) -> str:
        """One message (the read lock held), turning failures into the
        connection's end."""
        if self._closed is not None:
            raise self._closed.with_traceback(None)
        try:
            return self._message(deadline)
        except ReceiveTimeoutError:  # a TimeoutError, hence an OSError: not a failure
            raise
        except _Fail as f:
            raise self._fail(f.code, f.reason) from None
        except _Dropped as e:
            raise self._finish(ConnectionClosedError(CLOSE_ABNORMAL, str(e), by_peer=True)) from None
        except OSError as e:
            raise self._finish(ConnectionClosedError(CLOSE_ABNORMAL, f"receive: {e}", by_peer=True)) from e

    def _message(self, deadline: Optional[float]) -> str:
        """Read frames until a text message is whole, handling control
        frames on the way."""
        while True:
            fin, opcode, payload = self._frame(deadline)
            if opcode == OP_PING:
                self._pong(payload)
            elif opcode == OP_PONG:
                pass
            elif opcode == OP_CLOSE:
                raise self._closing(payload)
            elif opcode == OP_CONTINUATION:
                if self._msg_op is None:
                    raise _Fail(CLOSE_PROTOCOL_ERROR, "continuation frame without a message to continue")
                text = self._text(payload, fin)
                if text is not None:
                    return text
            else:
                if self._msg_op is not None:
                    raise _Fail(CLOSE_PROTOCOL_ERROR, "a new message began before the last one's final fragment")
                if opcode == OP_BINARY:
                    raise _Fail(CLOSE_UNSUPPORTED_DATA, "binary messages are not accepted")
                self._msg_op = opcode
                self._decoder = None if fin else codecs.getincrementaldecoder("utf-8")("strict")
                text = self._text(payload, fin)
                if text is not None:
                    return text

    def _text(self, payload: bytes, fin: bool) -> Optional[str]:
        """Add a fragment of a text message; the message once whole.

        A fragmented message is checked as UTF-8 fragment by fragment (so
        bad bytes fail at once) and kept as bytes (so a message of many
        tiny fragments takes no more memory than its size)."""
        try:
            if self._decoder is None:  # a message in one frame
                text = payload.decode("utf-8")
            else:
                self._decoder.decode(payload, final=fin)
                self._msg_buf += payload
                if not fin:
                    return None
                text = self._msg_buf.decode("utf-8")
        except UnicodeDecodeError:
            raise _Fail(CLOSE_INVALID_DATA, "text message is not valid UTF-8") from None
        self._msg_op, self._msg_size, self._msg_buf, self._decoder = None, 0, bytearray(), None
        return text

    def _frame(self, deadline: Optional[float]) -> Tuple[bool, int, bytes]:
        """The next frame, checked; its bytes stay buffered until whole, so
        a timeout loses nothing."""
        buf = self._buf
        self._fill(2, deadline)
        b0, b1 = buf[0], buf[1]
        fin, opcode, n = bool(b0 & 0x80), b0 & 0x0F, b1 & 0x7F
        if b0 & 0x70:
            raise _Fail(CLOSE_PROTOCOL_ERROR, "reserved bits set without an extension")
        if opcode not in _OPCODES:
            raise _Fail(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if b1 & 0x80:
            raise _Fail(CLOSE_PROTOCOL_ERROR, "masked frame from the server")
        control = opcode >= 0x8
        if control and not fin:
            raise _Fail(CLOSE_PROTOCOL_ERROR, "fragmented control frame")
        if control and n > 125:
            raise _Fail(CLOSE_PROTOCOL_ERROR, "control frame longer than 125 bytes")
        head = 2
        if n == 126:
            self._fill(4, deadline)
            n, head = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            self._fill(10, deadline)
            n, head = struct.unpack_from("!Q", buf, 2)[0], 10
            if n >> 63:
                raise _Fail(CLOSE_PROTOCOL_ERROR, "frame length with its most significant bit set")
        if not control:
            if self._msg_size + n > self.max_message_size:
                raise _Fail(CLOSE_MESSAGE_TOO_BIG, f"message larger than {self.max_message_size} bytes")
        self._fill(head + n, deadline)
        payload = bytes(buf[head:head + n])
        del buf[:head + n]
        if not control:
            self._msg_size += n
        return fin, opcode, payload

    def _fill(self, n: int, deadline: Optional[float]) -> None:
        """Read until the buffer holds ``n`` bytes."""
        while len(self._buf) < n:
            want_read = True
            with self._io:
                try:
                    data: Optional[bytes] = self._sock.recv(_READ_CHUNK)
                except (BlockingIOError, ssl.SSLWantReadError):
                    data = None
                except ssl.SSLWantWriteError:
                    data, want_read = None, False
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    data = b""
            if data:
                self._buf += data
                continue
            if data is not None:
                raise _Dropped("the server closed the connection without a close frame")
            left = _remaining(deadline)
            if left is not None and left <= 0:
                raise ReceiveTimeoutError("no whole WebSocket message before the timeout")
            _wait(self._sock, not want_read, left)

    def _pong(self, payload: bytes) -> None:
        """Answer a ping, unless this side has begun closing."""
        with self._write_lock:
            if self._close_sent is None and self._closed is None:
                self._write(encode_frame(OP_PONG, payload))

    def _closing(self, payload: bytes) -> ConnectionClosedError:
        """Handle the server's close frame: answer it (echoing its code)
        unless this side closed first, end the connection, and return how
        it ended."""
        if len(payload) == 1:
            raise _Fail(CLOSE_PROTOCOL_ERROR, "close frame with a 1-byte payload")
        code, reason = CLOSE_NO_STATUS, ""
        if payload:
            code = struct.unpack_from("!H", payload)[0]
            if not valid_close_code(code):
                raise _Fail(CLOSE_PROTOCOL_ERROR, f"close frame with code {code}")
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                raise _Fail(CLOSE_INVALID_DATA, "close reason is not valid UTF-8") from None
        with self._write_lock:
            ours = self._close_sent
            if ours is None and self._closed is None:
                self._close_sent = (code, reason)
                try:
                    self._write(encode_frame(OP_CLOSE, b"" if code == CLOSE_NO_STATUS else payload[:2 + _MAX_REASON]))
                except ConnectionClosedError:
                    pass  # the server will not read it anyway
        if ours is not None:
            return self._finish(ConnectionClosedError(ours[0], ours[1], by_peer=False, clean=True))
        return self._finish(ConnectionClosedError(code, reason, by_peer=True, clean=True))

    # --- closing ------------------------------------------------------

    def close(self, code: int = CLOSE_NORMAL, reason: str = "", timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Close the connection: send a close frame, wait (at most
        ``timeout`` seconds) for the server's, then close the socket.
        Messages that arrive meanwhile are dropped, unless another thread is
        receiving (it gets them, then the ConnectionClosedError). Safe to
        call from any thread, and more than once.

        Raises:
            ValueError: ``code`` may not be sent, or ``reason`` is longer
                than 123 bytes.
        """
        if not valid_close_code(code):
            raise ValueError(f"close code {code} may not be sent")
        if len(reason.encode("utf-8")) > _MAX_REASON:
            raise ValueError("close reason longer than 123 bytes")
        deadline = time.monotonic() + timeout
        with self._write_lock:
            if self._closed is not None:
                return
            if self._close_sent is None:
                self._close_sent = (code, reason)
                try:
                    self._write(encode_frame(OP_CLOSE, _close_payload(code, reason)))
                except ConnectionClosedError:
                    return
        # Another thread receiving sees the server's close frame and ends the
        # connection; else (or once it stops receiving) read it here.
        if self._read_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                while self._closed is None:
                    try:
                        self._receive(deadline)
                    except (ReceiveTimeoutError, ConnectionClosedError):
                        break
            finally:
                self._read_lock.release()
        sent = self._close_sent or (code, reason)
        self._finish(ConnectionClosedError(sent[0], sent[1], by_peer=False, clean=False))

    def _fail(self, code: int, reason: str) -> ConnectionClosedError:
        """Fail the connection (RFC 6455 §7.1.7): send a close frame with
        ``code`` unless one was sent, and close the socket."""
        with self._write_lock:
            if self._close_sent is None and self._closed is None:
                self._close_sent = (code, reason)
                try:
                    self._write(encode_frame(OP_CLOSE, _close_payload(code, reason)))
                except ConnectionClosedError:
                    pass
        return self._finish(ProtocolError(code, reason, by_peer=False, clean=False))

    def _finish(self, err: ConnectionClosedError) -> ConnectionClosedError:
        """Record how the connection ended (the first caller wins), close the
        socket (the shutdown wakes a thread waiting on it), and return the
        record."""
        with self._state:
            if self._closed is None:
                self._closed = err
                with self._io:
                    try:
                        self._sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    self._sock.close()
            return self._closed.with_traceback(None)  # raised again and again: keep no old frames


# --- the opening handshake ------------------------------------------------


def connect(url: str, *, subprotocols: Sequence[str] = (), headers: Optional[Mapping[str, str]] = None,
            timeout: float = DEFAULT_CONNECT_TIMEOUT, ssl_context: Optional[ssl.SSLContext] = None,
            max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
            write_timeout: float = DEFAULT_WRITE_TIMEOUT) -> WebSocket:
    """Open a WebSocket to ``url`` (``ws://``, ``wss://``; ``http://`` and
    ``https://`` are taken for them).

    Args:
        subprotocols: the subprotocols to offer, in order of preference;
            when any is offered, the server must choose one of them.
        headers: extra request headers (``Authorization``, ...); the
            handshake's own (``Host``, ``Upgrade``, ``Sec-WebSocket-*``, ...)
            may not be given.
        timeout: seconds for the whole opening handshake: connecting, TLS,
            the request and the answer.
        ssl_context: for ``wss://``; by default
            :func:`ssl.create_default_context`.
        max_message_size: the largest message to accept, in bytes; a larger
            one closes the connection with code 1009.
        write_timeout: seconds one frame may take to send.

    Raises:
        ValueError: a URL, subprotocol or header that cannot be sent.
        HandshakeError: the connection could not be opened (see there).
    """
    u = urllib.parse.urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"WebSocket URL {url!r}: the scheme must be ws or wss")
    secure = scheme in ("wss", "https")
    host = u.hostname
    if not host:
        raise ValueError(f"WebSocket URL {url!r} has no host")
    if u.fragment:
        raise ValueError(f"WebSocket URL {url!r} has a fragment")
    default_port = 443 if secure else 80
    port = u.port or default_port
    target = (u.path or "/") + ("?" + u.query if u.query else "")
    host_header = f"[{host}]" if ":" in host else host
    if port != default_port:
        host_header += f":{port}"
    for p in subprotocols:
        if not _TOKEN.match(p):
            raise ValueError(f"subprotocol {p!r} is not an HTTP token")
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if subprotocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
    for name, value in (headers or {}).items():
        if not _TOKEN.match(name):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if name.lower() in _OWN_HEADERS:
            raise ValueError(f"header {name!r} belongs to the handshake")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"header {name!r} has a line break or NUL in its value")
        lines.append(f"{name}: {value}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    deadline = time.monotonic() + timeout
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise HandshakeError(f"WebSocket connect to {where}: {e}") from e
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if secure:
            ctx = ssl_context or ssl.create_default_context()
            sock.settimeout(_left(deadline))
            sock = ctx.wrap_socket(sock, server_hostname=host)
        sock.settimeout(_left(deadline))
        sock.sendall(request)
        status, phrase, answer, rest = _read_head(sock, deadline)
        if status != 101:
            body = b"" if status < 200 or status in (204, 304) else _read_body(sock, answer, rest, deadline)
            raise HandshakeError(f"WebSocket handshake with {where} refused: {status} {phrase}".rstrip(),
                                 status=status, reason=phrase, headers=answer, body=body)
        chosen = _check_upgrade(answer, key, subprotocols, status, phrase)
    except HandshakeError:
        sock.close()
        raise
    except (OSError, ValueError) as e:  # socket.timeout and ssl.SSLError are OSErrors
        sock.close()
        raise HandshakeError(f"WebSocket handshake with {where}: {type(e).__name__}: {e}") from e
    return WebSocket(sock, url=url, subprotocol=chosen, headers=answer, buffered=rest,
                     max_message_size=max_message_size, write_timeout=write_timeout)
