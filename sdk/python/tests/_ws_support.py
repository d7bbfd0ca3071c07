"""Test support for the WebSocket client: an in-process raw-socket server
whose every byte a test scripts (for the edge cases an ordinary server never
produces), the independent `ws` npm package's server (wsserver/), and a
throwaway TLS certificate."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import unittest
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
WS_SERVER_DIR = os.path.join(HERE, "wsserver")
PROTOCOL = "leasesvc.session.v1"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def need_tool(name: str, why: str) -> str:
    """The path of a tool; missing, the test fails under CI=true and is
    skipped elsewhere."""
    p = shutil.which(name)
    if p:
        return p
    missing(f"{name} not found: {why}")
    return ""


def missing(msg: str) -> None:
    """Fail under CI=true, skip elsewhere."""
    if os.environ.get("CI") == "true":
        raise AssertionError(msg)
    raise unittest.SkipTest(msg)


def server_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0,
                 mask_key: Optional[bytes] = None, length: Optional[int] = None, wide: int = 0) -> bytes:
    """One frame as a server would write it; ``rsv`` sets reserved bits
    (0..7), ``mask_key`` masks it (which a server must not), ``length``
    lies about its length, ``wide`` forces the 16-bit (2) or 64-bit (8)
    length encoding."""
    n = len(payload) if length is None else length
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    m = 0x80 if mask_key is not None else 0
    if (n < 126 and not wide):
        head = struct.pack("!BB", b0, m | n)
    elif (n < 1 << 16 and wide != 8) or wide == 2:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    if mask_key is not None:
        k = (mask_key * (len(payload) // 4 + 1))[:len(payload)]
        payload = bytes(a ^ b for a, b in zip(payload, k))
        head += mask_key
    return head + payload


def close_payload(code: int, reason: str = "") -> bytes:
    """A close frame's payload."""
    return struct.pack("!H", code) + reason.encode("utf-8")


class Frame(NamedTuple):
    """A frame the server received (unmasked)."""

    fin: bool
    opcode: int
    payload: bytes
    mask_key: Optional[bytes]


class Handshake(NamedTuple):
    """The client's opening handshake as the server received it."""

    request_line: str
    headers: Dict[str, str]  # names in lower case

    def key(self) -> str:
        return self.headers.get("sec-websocket-key", "")

    def protocols(self) -> List[str]:
        return [p.strip() for p in self.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]


def upgrade_answer(hs: Handshake, *, protocol: Optional[str] = "", accept: Optional[str] = None,
                   extra: str = "", upgrade: str = "websocket", connection: str = "Upgrade") -> bytes:
    """A 101 answer; ``protocol`` "" chooses the first offered, None none;
    ``accept`` overrides the computed Sec-WebSocket-Accept."""
    if accept is None:
        accept = base64.b64encode(hashlib.sha1(hs.key().encode() + _GUID).digest()).decode()
    if protocol == "":
        offered = hs.protocols()
        protocol = offered[0] if offered else None
    lines = ["HTTP/1.1 101 Switching Protocols", f"Upgrade: {upgrade}", f"Connection: {connection}",
             f"Sec-WebSocket-Accept: {accept}"]
    if protocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


class ServerConn:
    """One accepted connection of a :class:`FakeServer`."""

    def __init__(self, sock: socket.socket, handshake: Handshake, buffered: bytes) -> None:
        self.sock = sock
        self.handshake = handshake
        self.buf = bytearray(buffered)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, opcode: int, payload: bytes = b"", **kw: Any) -> None:
        self.sock.sendall(server_frame(opcode, payload, **kw))

    def _fill(self, n: int, timeout: float) -> None:
        self.sock.settimeout(timeout)
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("the client closed the connection")
            self.buf += chunk

    def recv_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame from the client; it must be masked."""
        self._fill(2, timeout)
        b0, b1 = self.buf[0], self.buf[1]
        n, head = b1 & 0x7F, 2
        if n == 126:
            self._fill(4, timeout)
            n, head = struct.unpack_from("!H", self.buf, 2)[0], 4
        elif n == 127:
            self._fill(10, timeout)
            n, head = struct.unpack_from("!Q", self.buf, 2)[0], 10
        if not b1 & 0x80:
            raise AssertionError("an unmasked frame from the client")
        if b0 & 0x70:
            raise AssertionError("reserved bits set by the client")
        self._fill(head + 4 + n, timeout)
        key = bytes(self.buf[head:head + 4])
        data = bytes(self.buf[head + 4:head + 4 + n])
        del self.buf[:head + 4 + n]
        k = (key * (n // 4 + 1))[:n]
        payload = (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little") if n else b""
        return Frame(bool(b0 & 0x80), b0 & 0x0F, payload, key)

    def recv_close(self, timeout: float = 5.0) -> Tuple[Optional[int], str]:
        """Skip to the client's close frame; its code (None without one)
        and reason."""
        while True:
            f = self.recv_frame(timeout)
            if f.opcode == 0x8:
                if not f.payload:
                    return None, ""
                return struct.unpack_from("!H", f.payload)[0], f.payload[2:].decode()

    def at_eof(self, timeout: float = 5.0) -> bool:
        """Whether the client closes the connection (after whatever it still
        sends) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return True
        except socket.timeout:
            return False
        except OSError:
            return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


Handler = Callable[[ServerConn], Any]


class FakeServer:
    """A WebSocket server written byte by byte: for each connection it reads
    the handshake, writes ``answer(handshake)`` (by default a correct 101),
    and, when the answer was a 101, runs ``handler(conn)`` on the connection's
    thread. :meth:`result` returns what the handler returned, or raises what
    it raised, in the test's thread."""

    def __init__(self, handler: Optional[Handler] = None, *, answer: Optional[Callable[[Handshake], bytes]] = None,
                 tls: Optional[ssl.SSLContext] = None) -> None:
        self.handler = handler
        self.answer = answer or (lambda hs: upgrade_answer(hs))
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        scheme = "wss" if tls else "ws"
        self.url = f"{scheme}://127.0.0.1:{self.port}/v1/sessions:connect"
        self.handshakes: "queue.Queue[Handshake]" = queue.Queue()
        self._results: "queue.Queue[Tuple[bool, Any]]" = queue.Queue()
        self._conns: List[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self._conns.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            if self.tls is not None:
                sock.settimeout(5)
                sock = self.tls.wrap_socket(sock, server_side=True)
                self._conns.append(sock)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(5)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            hs = Handshake(lines[0], headers)
            self.handshakes.put(hs)
            ans = self.answer(hs)
            if ans:
                sock.sendall(ans)
            if not ans.startswith(b"HTTP/1.1 101") or self.handler is None:
                return
            conn = ServerConn(sock, hs, rest)
            self._results.put((True, self.handler(conn)))
        except BaseException as e:  # reported by result()
            self._results.put((False, e))
        finally:  # the server is done with the connection
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def result(self, timeout: float = 10.0) -> Any:
        """What the next connection's handler returned (or raised)."""
        ok, v = self._results.get(timeout=timeout)
        if not ok:
            raise v
        return v

    def close(self) -> None:
        self.listener.close()
        for s in self._conns:
            try:
                s.close()
            except OSError:
                pass


class Cert:
    """A throwaway self-signed certificate for 127.0.0.1 (made with the
    openssl tool)."""

    def __init__(self) -> None:
        openssl = need_tool("openssl", "apt-get install -y openssl (to make a test certificate)")
        self.dir = tempfile.mkdtemp(prefix="leasesvc-ws-tls-")
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cert)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _installed_ws() -> Optional[str]:
    """The version of ws in wsserver/node_modules, None when absent."""
    try:
        with open(os.path.join(WS_SERVER_DIR, "node_modules", "ws", "package.json")) as f:
            return str(json.load(f)["version"])
    except (OSError, ValueError, KeyError):
        return None


def _locked_ws() -> str:
    """The version of ws that wsserver/package-lock.json pins."""
    with open(os.path.join(WS_SERVER_DIR, "package-lock.json")) as f:
        return str(json.load(f)["packages"]["node_modules/ws"]["version"])


def ensure_ws_package() -> str:
    """The node binary, with wsserver/'s `ws` installed (npm ci when
    node_modules lacks the version package-lock.json pins). Missing node or npm, or a failing npm ci, fail
    the test under CI=true and skip it elsewhere."""
    node = need_tool("node", "install Node.js ≥ 18 with npm (apt-get install -y nodejs npm) to test against the ws package")
    if _installed_ws() != _locked_ws():
        npm = need_tool("npm", "install npm (apt-get install -y npm) to test against the ws package")
        try:
            out = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=WS_SERVER_DIR,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        except subprocess.TimeoutExpired:
            missing(f"npm ci in {WS_SERVER_DIR} took more than 240 s")
        if out.returncode != 0:
            missing(f"npm ci in {WS_SERVER_DIR} failed (the test needs npm and the npm registry):\n"
                    + out.stdout.decode(errors="replace")[-2000:])
    return node


class NodeWSServer:
    """wsserver/ws_echo_server.mjs (the `ws` package) in a child process."""

    def __init__(self, cert: Optional[Cert] = None) -> None:
        node = ensure_ws_package()
        env = dict(os.environ)
        if cert is not None:
            env.update({"TLS_CERT": cert.cert, "TLS_KEY": cert.key})
        self.proc = subprocess.Popen([node, "ws_echo_server.mjs"], cwd=WS_SERVER_DIR, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self._pending: List[Dict[str, Any]] = []
        self._stderr: List[bytes] = []
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()
        try:
            first = self.lines.get(timeout=30)
        except queue.Empty:
            self.close()
            raise AssertionError("ws_echo_server.mjs did not start: " + b"".join(self._stderr).decode(errors="replace"))
        if "port" not in first:
            self.close()
            raise AssertionError(f"ws_echo_server.mjs printed {first}; stderr: {b''.join(self._stderr).decode(errors='replace')}")
        self.port = int(first["port"])
        scheme = "wss" if cert is not None else "ws"
        self.base = f"{scheme}://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put({"event": "exit"})

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def close_event(self, conn_id: str, timeout: float = 5.0) -> Dict[str, Any]:
        """The server's report of connection ``conn_id``'s close."""
        while True:
            for ev in self._pending:
                if ev.get("id") == conn_id:
                    self._pending.remove(ev)
                    return ev
            ev = self.lines.get(timeout=timeout)
            if ev.get("event") == "exit":
                raise AssertionError("ws_echo_server.mjs exited: " + b"".join(self._stderr).decode(errors="replace"))
            self._pending.append(ev)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self._threads:
            t.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
