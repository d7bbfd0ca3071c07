"""The frames of the WebSocket client (:mod:`leasesvc._websocket`): its
defaults, close codes and opcodes, its errors, and the RFC 6455 frame
codec (masking, encoding, close payloads) with the socket waits the
connection's I/O uses."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import selectors
import socket
import struct
import time
from typing import Any, Dict, Mapping, Optional

#: Defaults, in seconds and bytes.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_WRITE_TIMEOUT = 10.0
DEFAULT_CLOSE_TIMEOUT = 2.0
DEFAULT_MAX_MESSAGE_SIZE = 4 << 20

#: Close codes (RFC 6455 §7.4.1).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
_OPCODES = (OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG)

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEAD = 64 << 10  # the handshake answer's status line and headers
_MAX_REFUSAL_BODY = 64 << 10  # what is kept of a refusal's body
_MAX_REASON = 123  # bytes of a close frame's reason
_READ_CHUNK = 256 << 10
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token
_OWN_HEADERS = frozenset(
    ["host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
     "sec-websocket-protocol", "sec-websocket-extensions", "content-length", "transfer-encoding"])
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)


class WebSocketError(Exception):
    """Base of every error of this module."""


class HandshakeError(WebSocketError):
    """The connection could not be opened: the server could not be reached
    or did not answer in time (``status`` 0), refused the upgrade (its HTTP
    status, headers and body are kept, so a problem+json refusal can be
    read), or answered 101 in a way RFC 6455 does not allow (wrong
    ``Sec-WebSocket-Accept``, a subprotocol that was not asked for, ...).

    Attributes:
        status: the HTTP status of the answer; 0 when none arrived.
        reason: the answer's reason phrase.
        headers: the answer's headers, names in lower case (repeated
            headers joined with ``", "``).
        body: the answer's body (at most 64 KiB of it).
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "",
                 headers: Optional[Mapping[str, str]] = None, body: bytes = b"") -> None:
        self.status = status
        self.reason = reason
        self.headers: Dict[str, str] = dict(headers or {})
        self.body = body
        super().__init__(message)

    def header(self, name: str) -> Optional[str]:
        """The answer's header ``name`` (any case), or None."""
        return self.headers.get(name.lower())

    @property
    def retry_after(self) -> float:
        """The answer's ``Retry-After`` in seconds (the delay form); 0 when
        absent or not a positive number of seconds."""
        try:
            v = float((self.header("Retry-After") or "").strip())
        except ValueError:
            return 0.0
        return v if v > 0 and v == v and v != float("inf") else 0.0

    def problem(self) -> Optional[Dict[str, Any]]:
        """The body decoded as a JSON object (an RFC 9457 problem), or None
        when it is not one."""
        try:
            v = json.loads(self.body)
        except ValueError:
            return None
        return v if isinstance(v, dict) else None


class ConnectionClosedError(WebSocketError):
    """The connection is closed; every later send or receive raises this
    same error.

    Attributes:
        code: the close code that ended the connection: the server's when
            it closed first (1005 when its close frame carried none), the
            client's when it closed first (by :meth:`WebSocket.close`, or
            for a :class:`ProtocolError`), 1006 when the connection ended
            without a close frame.
        reason: the close frame's reason, or a description of the failure.
        by_peer: the server closed first (a close frame, or the connection
            dropped).
        clean: both close frames were exchanged.
    """

    def __init__(self, code: int, reason: str = "", *, by_peer: bool = False, clean: bool = False) -> None:
        self.code = code
        self.reason = reason
        self.by_peer = by_peer
        self.clean = clean
        who = "the server" if by_peer else "the client"
        msg = f"WebSocket closed by {who} with code {code}"
        if reason:
            msg += f": {reason}"
        super().__init__(msg)


class ProtocolError(ConnectionClosedError):
    """The server broke RFC 6455 or a limit (code 1002 protocol error,
    1003 a binary message, 1007 a text message that is not UTF-8, 1009 a
    message larger than the maximum): the client sent a close frame with
    that code and closed the connection."""


class ReceiveTimeoutError(WebSocketError, TimeoutError):
    """:meth:`WebSocket.recv` saw no whole message before its timeout. The
    connection is unharmed: a later receive continues where this one
    stopped."""


class _Fail(Exception):
    """Internal: the server broke the protocol; close with this code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Dropped(Exception):
    """Internal: the connection ended without a close frame."""


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``key``."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")


def mask(key: bytes, data: bytes) -> bytes:
    """``data`` XOR-ed with the 4-byte masking ``key`` repeated (RFC 6455
    §5.3); its own inverse."""
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One client frame: masked with a fresh random key (RFC 6455 §5.2)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + mask(key, payload)


def valid_close_code(code: int) -> bool:
    """Whether ``code`` may travel in a close frame (RFC 6455 §7.4)."""
    return code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014) or 3000 <= code <= 4999


def _close_payload(code: int, reason: str) -> bytes:
    """A close frame's payload, the reason cut to 123 bytes of whole
    characters."""
    r = reason.encode("utf-8")[:_MAX_REASON].decode("utf-8", "ignore").encode("utf-8")
    return struct.pack("!H", code) + r


def _wait(sock: socket.socket, write: bool, timeout: Optional[float]) -> bool:
    """Wait until ``sock`` is readable (or writable); False on timeout."""
    try:
        with _Selector() as sel:
            sel.register(sock, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
            return bool(sel.select(timeout))
    except (ValueError, OSError) as e:  # closed under us
        raise _Dropped(f"wait: {e}") from e


def _remaining(deadline: Optional[float]) -> Optional[float]:
    """Seconds until ``deadline`` (a monotonic time), None for none."""
    return None if deadline is None else deadline - time.monotonic()
