"""Test support: an in-process fake of the service (http.server) and the
real leasesvc binary, built from this repository."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

Answer = Tuple[int, Dict[str, str], Any]  # status, headers, JSON body (or bytes)


def lease_json(name: str = "a", holder: str = "me", token: int = 1, held: bool = True, **kw: Any) -> Dict[str, Any]:
    """A lease as the API answers it."""
    d = {"name": name, "holder": holder, "fencingToken": token, "ttlMs": 1000,
         "acquireTime": "2026-01-01T00:00:00.123456789Z", "renewTime": "2026-01-01T00:00:00Z",
         "expireTime": "2026-01-01T00:00:01Z", "held": held, "remainingMs": 1000 if held else 0,
         "serverTime": "2026-01-01T00:00:00Z", "transitions": token, "metadata": {}}
    d.update(kw)
    return d


def problem(status: int, code: str, **kw: Any) -> Answer:
    """A problem+json answer."""
    body = {"type": "about:blank", "status": status, "code": code, "detail": kw.pop("detail", code)}
    headers = {"Content-Type": "application/problem+json"}
    if "retry_after" in kw:
        headers["Retry-After"] = str(kw.pop("retry_after"))
    body.update(kw)
    return status, headers, body


class Request:
    """One request the fake received."""

    def __init__(self, method: str, path: str, headers: Dict[str, str], body: Any, at: float) -> None:
        self.method, self.path, self.headers, self.body, self.at = method, path, headers, body, at


class FakeService:
    """An HTTP server whose answers a test scripts: ``handler(req)`` returns
    an Answer, or a callable taking the raw handler for streams."""

    def __init__(self, handler: Callable[[Request], Any], *, sessions: bool = False) -> None:
        """``sessions``: pass the session upgrade (``GET
        /v1/sessions:connect``) to ``handler`` too; by default it is answered
        404, as a service without sessions does, and Electors fall back to
        plain renewals."""
        self.handler = handler
        self.sessions = sessions
        self.requests: List[Request] = []
        self.lock = threading.Lock()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                req = Request(self.command, self.path, dict(self.headers.items()), body, time.monotonic())
                with fake.lock:
                    fake.requests.append(req)
                try:
                    if req.path.split("?")[0].endswith("/v1/sessions:connect") and not fake.sessions:
                        ans = problem(404, "not_found", detail="no sessions here")  # a service without sessions
                    else:
                        ans = fake.handler(req)
                except Exception as e:  # a bug in the test's handler
                    ans = (500, {}, {"code": "internal", "detail": repr(e)})
                if callable(ans):
                    ans(self)
                    return
                status, headers, payload = ans
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    if "Content-Type" not in headers:
                        self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            do_GET = _serve
            do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def calls(self, suffix: str) -> List[Request]:
        """The requests whose path ends with suffix."""
        with self.lock:
            return [r for r in self.requests if r.path.split("?")[0].endswith(suffix)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def need_go() -> None:
    """Skip (or fail under CI=true) when go is missing and no binary is given."""
    if os.environ.get("LEASESVC_BIN") or shutil.which("go"):
        return
    msg = "go is not installed (needed to build cmd/leasesvc): install Go 1.26, or set LEASESVC_BIN"
    if os.environ.get("CI") == "true":
        raise AssertionError(msg)
    raise unittest.SkipTest(msg)


_built: Optional[str] = None
_build_lock = threading.Lock()


def binary() -> str:
    """The leasesvc binary: $LEASESVC_BIN, or built once with go build."""
    global _built
    need_go()
    if os.environ.get("LEASESVC_BIN"):
        return os.environ["LEASESVC_BIN"]
    with _build_lock:
        if _built is None:
            out = os.path.join(tempfile.mkdtemp(prefix="leasesvc-py-"), "leasesvc")
            subprocess.run(["go", "build", "-o", out, "./cmd/leasesvc"], cwd=REPO_ROOT, check=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            _built = out
    return _built


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RealService:
    """One leasesvc process on a free port (memory backend)."""

    def __init__(self, env: Optional[Dict[str, str]] = None) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        e = dict(os.environ)
        e.update({"PORT": str(port), "LEASESVC_LOG_LEVEL": "warn"})
        e.update(env or {})
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([binary()], env=e, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"leasesvc did not start: {self.log.read().decode(errors='replace')}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


_seq = [0]


def unique(label: str) -> str:
    """A lease name no other test uses."""
    _seq[0] += 1
    return f"py{os.getpid()}-{int(time.time() * 1000) % 10**8}-{_seq[0]}.{label}"
