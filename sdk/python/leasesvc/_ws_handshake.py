"""The opening handshake's answer, for :func:`leasesvc._websocket.connect`:
reading the status line and headers of the server's answer (and a
refusal's body) within a deadline, and checking the upgrade it grants."""

from __future__ import annotations

import socket
import time
from typing import Dict, Optional, Sequence, Tuple

from ._ws_frames import _MAX_HEAD, _MAX_REFUSAL_BODY, HandshakeError, accept_key


def _left(deadline: float) -> float:
    """Seconds until ``deadline``, at least a little; socket.timeout once
    it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("timed out")
    return left


def _read_head(sock: socket.socket, deadline: float) -> Tuple[int, str, Dict[str, str], bytes]:
    """Read the answer's status line and headers; also return the bytes read
    past them."""
    buf = b""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > _MAX_HEAD:
            raise HandshakeError(f"the handshake's answer has more than {_MAX_HEAD} bytes of headers")
        sock.settimeout(_left(deadline))
        chunk = sock.recv(16 << 10)
        if not chunk:
            raise HandshakeError("the server closed the connection before answering the handshake")
        buf += chunk
    head, rest = buf[:end].decode("latin-1"), buf[end + 4:]
    lines = head.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HandshakeError(f"the handshake's answer is not HTTP/1.1: {lines[0][:100]!r}")
    status, phrase = int(parts[1]), (parts[2] if len(parts) > 2 else "")
    answer: Dict[str, str] = {}
    last = ""
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and last:  # obsolete line folding
            answer[last] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HandshakeError(f"malformed header line in the handshake's answer: {line[:100]!r}")
        last = name.strip().lower()
        value = value.strip()
        answer[last] = answer[last] + ", " + value if last in answer else value
    return status, phrase, answer, rest


def _read_body(sock: socket.socket, headers: Dict[str, str], rest: bytes, deadline: float) -> bytes:
    """Read what can be read of a refusal's body (at most 64 KiB, until the
    deadline): chunked, by Content-Length, or until the connection closes.
    A body that cannot be read whole is returned as far as it was read."""
    buf = bytearray(rest)

    def more() -> bool:
        try:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(16 << 10)
        except OSError:
            return False
        buf.extend(chunk)
        return bool(chunk)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while len(out) < _MAX_REFUSAL_BODY:
            while b"\r\n" not in buf:
                if len(buf) > 1024 or not more():
                    return bytes(out)
            line, _, tail = bytes(buf).partition(b"\r\n")
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                return bytes(out)
            if size == 0:
                break
            buf[:] = tail
            want = min(size, _MAX_REFUSAL_BODY - len(out))
            while len(buf) < want:
                if not more():
                    out += buf
                    return bytes(out[:_MAX_REFUSAL_BODY])
            out += buf[:want]
            if want < size:
                break
            del buf[:size]
            while len(buf) < 2:
                if not more():
                    return bytes(out)
            del buf[:2]
        return bytes(out)
    try:
        length: Optional[int] = int(headers["content-length"])
    except (KeyError, ValueError):
        length = None
    want = _MAX_REFUSAL_BODY if length is None else min(max(length, 0), _MAX_REFUSAL_BODY)
    while len(buf) < want and more():
        pass
    return bytes(buf[:want])


def _check_upgrade(answer: Dict[str, str], key: str, subprotocols: Sequence[str], status: int,
                   phrase: str) -> Optional[str]:
    """Check a 101 answer (RFC 6455 §4.1); return the chosen subprotocol."""

    def refuse(why: str) -> HandshakeError:
        return HandshakeError(f"WebSocket handshake: {why}", status=status, reason=phrase, headers=answer)

    if answer.get("upgrade", "").strip().lower() != "websocket":
        raise refuse(f"Upgrade is {answer.get('upgrade')!r}, want 'websocket'")
    if "upgrade" not in [t.strip().lower() for t in answer.get("connection", "").split(",")]:
        raise refuse(f"Connection is {answer.get('connection')!r}, want 'Upgrade'")
    if answer.get("sec-websocket-accept", "").strip() != accept_key(key):
        raise refuse(f"Sec-WebSocket-Accept is {answer.get('sec-websocket-accept')!r}, want {accept_key(key)!r}")
    if answer.get("sec-websocket-extensions", "").strip():
        raise refuse(f"the server chose extensions {answer['sec-websocket-extensions']!r}, none was offered")
    chosen = answer.get("sec-websocket-protocol", "").strip() or None
    if subprotocols and chosen is None:
        raise refuse(f"the server chose no subprotocol; offered {', '.join(subprotocols)}")
    if chosen is not None and chosen not in subprotocols:
        raise refuse(f"the server chose subprotocol {chosen!r}, not one offered ({', '.join(subprotocols) or 'none'})")
    return chosen
