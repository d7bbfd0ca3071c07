"""The WebSocket client (leasesvc._websocket): edge cases against an
in-process server that writes every byte as a test says, and the framing
against an independent implementation, the `ws` npm package's server
(wsserver/ws_echo_server.mjs)."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import unittest
from typing import Any, List, Optional

from leasesvc import _websocket as ws
from leasesvc._websocket import ConnectionClosedError, HandshakeError, ProtocolError, ReceiveTimeoutError

from ._ws_support import (
    PROTOCOL,
    Cert,
    FakeServer,
    NodeWSServer,
    ServerConn,
    close_payload,
    server_frame,
    upgrade_answer,
)

TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0

_cert: Optional[Cert] = None


def cert() -> Cert:
    """One throwaway certificate for the module's TLS tests."""
    global _cert
    if _cert is None:
        _cert = Cert()
    return _cert


def tearDownModule() -> None:
    if _cert is not None:
        _cert.close()


class FakeServerTest(unittest.TestCase):
    def serve(self, handler: Any = None, **kw: Any) -> FakeServer:
        srv = FakeServer(handler, **kw)
        self.addCleanup(srv.close)
        return srv

    def connect(self, srv: FakeServer, **kw: Any) -> ws.WebSocket:
        kw.setdefault("subprotocols", [PROTOCOL])
        kw.setdefault("timeout", 5.0)
        c = ws.connect(srv.url, **kw)
        self.addCleanup(c.close, timeout=0.5)
        return c


class HandshakeTest(FakeServerTest):
    def test_request_and_subprotocol(self) -> None:
        def handler(conn: ServerConn) -> None:
            conn.recv_close()
            conn.send_frame(CLOSE, close_payload(1000))

        srv = self.serve(handler)
        c = self.connect(srv, subprotocols=["leasesvc.session.v2", PROTOCOL],
                         headers={"Authorization": "Bearer t0k", "X-Serverless-Authorization": "Bearer t0k"})
        hs = srv.handshakes.get(timeout=5)
        self.assertEqual(hs.request_line, "GET /v1/sessions:connect HTTP/1.1")
        self.assertEqual(hs.headers["host"], f"127.0.0.1:{srv.port}")
        self.assertEqual(hs.headers["upgrade"], "websocket")
        self.assertEqual(hs.headers["connection"], "Upgrade")
        self.assertEqual(hs.headers["sec-websocket-version"], "13")
        self.assertEqual(len(base64.b64decode(hs.key())), 16)
        self.assertEqual(hs.protocols(), ["leasesvc.session.v2", PROTOCOL])
        self.assertEqual(hs.headers["authorization"], "Bearer t0k")
        self.assertEqual(hs.headers["x-serverless-authorization"], "Bearer t0k")
        self.assertEqual(c.subprotocol, "leasesvc.session.v2")  # the server's choice: the first offered
        self.assertEqual(c.headers["upgrade"], "websocket")
        c.close()
        self.assertIsNone(srv.result())
        self.assertIsNotNone(c.closed)
        assert c.closed is not None
        self.assertEqual((c.closed.code, c.closed.by_peer, c.closed.clean), (1000, False, True))

    def test_keys_differ_and_query_is_sent(self) -> None:
        srv = self.serve(lambda conn: None)
        for _ in range(2):
            ws.connect(srv.url + "?resume=1", subprotocols=[PROTOCOL], timeout=5).close(timeout=0.2)
        a, b = srv.handshakes.get(timeout=5), srv.handshakes.get(timeout=5)
        self.assertNotEqual(a.key(), b.key())
        self.assertEqual(a.request_line, "GET /v1/sessions:connect?resume=1 HTTP/1.1")

    def test_refusal_keeps_status_headers_and_body(self) -> None:
        problem = {"type": "about:blank", "status": 429, "code": "resource_exhausted", "detail": "too many sessions"}
        body = json.dumps(problem).encode()
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 10]), body[i:i + 10]) for i in range(0, len(body), 10))
        cases = [
            ("content-length", b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n"
             b"Retry-After: 3\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)),
            ("chunked", b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n"
             b"Retry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"),
            ("until close", b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nConnection: close\r\n\r\n" + body),
        ]
        for name, answer in cases:
            with self.subTest(name):
                srv = self.serve(answer=lambda hs, a=answer: a)
                with self.assertRaises(HandshakeError) as cm:
                    ws.connect(srv.url, subprotocols=[PROTOCOL], timeout=5)
                e = cm.exception
                self.assertEqual((e.status, e.reason, e.retry_after), (429, "Too Many Requests", 3.0))
                self.assertEqual(e.body, body)
                self.assertEqual(e.problem(), problem)
                self.assertIn("429", str(e))

    def test_refusals_without_problem(self) -> None:
        srv = self.serve(answer=lambda hs: b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(srv.url, timeout=5)
        self.assertEqual((cm.exception.status, cm.exception.body, cm.exception.problem(), cm.exception.retry_after),
                         (401, b"", None, 0.0))
        srv = self.serve(answer=lambda hs: b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                                           b"Content-Length: 18\r\n\r\n404 page not found")
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(srv.url, timeout=5)
        self.assertEqual((cm.exception.status, cm.exception.body, cm.exception.header("content-type")),
                         (404, b"404 page not found", "text/plain"))

    def test_bad_upgrades_are_refused(self) -> None:
        cases = [
            ("wrong accept", lambda hs: upgrade_answer(hs, accept=base64.b64encode(b"x" * 20).decode()), "Accept"),
            ("no subprotocol", lambda hs: upgrade_answer(hs, protocol=None), "no subprotocol"),
            ("another subprotocol", lambda hs: upgrade_answer(hs, protocol="other.v1"), "other.v1"),
            ("no upgrade", lambda hs: upgrade_answer(hs, upgrade="h2c"), "Upgrade"),
            ("no connection upgrade", lambda hs: upgrade_answer(hs, connection="keep-alive"), "Connection"),
            ("an extension", lambda hs: upgrade_answer(hs, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n"),
             "extensions"),
            ("not HTTP", lambda hs: b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
        ]
        for name, answer, want in cases:
            with self.subTest(name):
                srv = self.serve(lambda conn: None, answer=answer)
                with self.assertRaises(HandshakeError) as cm:
                    ws.connect(srv.url, subprotocols=[PROTOCOL], timeout=5)
                self.assertIn(want, str(cm.exception))

    def test_a_subprotocol_not_asked_for_is_refused(self) -> None:
        srv = self.serve(lambda conn: None, answer=lambda hs: upgrade_answer(hs, protocol=PROTOCOL))
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(srv.url, timeout=5)
        self.assertEqual(cm.exception.status, 101)

    def test_no_answer_times_out(self) -> None:
        lst = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) and never answers
        self.addCleanup(lst.close)
        t = time.monotonic()
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(f"ws://127.0.0.1:{lst.getsockname()[1]}/", timeout=0.3)
        self.assertLess(time.monotonic() - t, 3.0)
        self.assertEqual(cm.exception.status, 0)
        self.assertIn("timed out", str(cm.exception))

    def test_connection_refused(self) -> None:
        s = socket.create_server(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(f"ws://127.0.0.1:{port}/", timeout=2)
        self.assertEqual(cm.exception.status, 0)
        self.assertIsInstance(cm.exception.__cause__, OSError)

    def test_closed_before_answering(self) -> None:
        srv = self.serve(answer=lambda hs: b"")
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(srv.url, timeout=2)
        self.assertEqual(cm.exception.status, 0)

    def test_bad_arguments(self) -> None:
        for url in ["ftp://x/", "ws:///nohost", "ws://x/#frag"]:
            with self.subTest(url=url), self.assertRaises(ValueError):
                ws.connect(url)
        with self.assertRaises(ValueError):
            ws.connect("ws://127.0.0.1:1/", headers={"Authorization": "Bearer x\r\nEvil: 1"})
        with self.assertRaises(ValueError):
            ws.connect("ws://127.0.0.1:1/", headers={"Sec-WebSocket-Protocol": "x"})
        with self.assertRaises(ValueError):
            ws.connect("ws://127.0.0.1:1/", subprotocols=["a b"])


class FramingTest(FakeServerTest):
    def test_frames_in_the_handshake_answer_and_byte_by_byte(self) -> None:
        first = server_frame(TEXT, b"right behind the 101")

        def handler(conn: ServerConn) -> None:
            for b in server_frame(TEXT, "byte by byte é".encode()):
                conn.send(bytes([b]))
            conn.recv_close()

        srv = self.serve(handler, answer=lambda hs: upgrade_answer(hs) + first)
        c = self.connect(srv)
        self.assertEqual(c.recv(timeout=5), "right behind the 101")
        self.assertEqual(c.recv(timeout=5), "byte by byte é")
        c.close(timeout=0.2)
        srv.result()

    def test_length_encodings_both_ways(self) -> None:
        sizes = [0, 1, 125, 126, 127, 65535, 65536, 65537, 1 << 20]

        def handler(conn: ServerConn) -> List[int]:
            lengths = []
            for _ in sizes:
                f = conn.recv_frame()
                lengths.append(len(f.payload))
                conn.send_frame(TEXT, f.payload)
            # the non-minimal encodings a server may use
            conn.send_frame(TEXT, b"a" * 5, wide=2)
            conn.send_frame(TEXT, b"b" * 5, wide=8)
            conn.recv_close()
            return lengths

        srv = self.serve(handler)
        c = self.connect(srv, max_message_size=2 << 20)
        for n in sizes:
            msg = ("é" * (n // 2)) + ("x" * (n % 2))  # multi-byte characters
            c.send(msg)
            self.assertEqual(c.recv(timeout=5), msg, f"{n} bytes")
        self.assertEqual(c.recv(timeout=5), "aaaaa")
        self.assertEqual(c.recv(timeout=5), "bbbbb")
        c.close(timeout=1)
        self.assertEqual(srv.result(), sizes)

    def test_client_frames_are_masked_with_fresh_keys(self) -> None:
        def handler(conn: ServerConn) -> List[Any]:
            frames = [conn.recv_frame() for _ in range(8)]
            conn.recv_close()
            return frames

        srv = self.serve(handler)
        c = self.connect(srv)
        for i in range(8):
            c.send(f"m{i}")
        c.close(timeout=0.2)
        frames = srv.result()
        self.assertEqual([f.payload for f in frames], [f"m{i}".encode() for i in range(8)])
        self.assertTrue(all(f.fin and f.opcode == TEXT for f in frames))
        self.assertGreater(len({f.mask_key for f in frames}), 1)

    def test_fragments_with_control_frames_between(self) -> None:
        word = "añb€c😀".encode()  # characters split across fragments below

        def handler(conn: ServerConn) -> List[bytes]:
            conn.send_frame(TEXT, word[:2], fin=False)
            conn.send_frame(PING, b"p1")
            conn.send_frame(CONT, word[2:5], fin=False)
            conn.send_frame(PONG, b"unasked")
            conn.send_frame(CONT, b"", fin=False)
            conn.send_frame(PING, b"")
            conn.send_frame(CONT, word[5:9], fin=False)
            conn.send_frame(CONT, word[9:], fin=True)
            pongs = [conn.recv_frame(), conn.recv_frame()]
            conn.recv_close()
            assert all(p.opcode == PONG for p in pongs), pongs
            return [p.payload for p in pongs]

        srv = self.serve(handler)
        c = self.connect(srv)
        self.assertEqual(c.recv(timeout=5), word.decode())
        c.close(timeout=0.2)
        self.assertEqual(srv.result(), [b"p1", b""])

    def test_many_tiny_fragments(self) -> None:
        word = ("ü€😀" * 500).encode()  # 4,500 bytes, characters split everywhere

        def handler(conn: ServerConn) -> None:
            frames = [server_frame(TEXT, word[:1], fin=False)]
            frames += [server_frame(CONT, word[i:i + 1], fin=False) for i in range(1, len(word))]
            frames += [server_frame(CONT, b"", fin=False)] * 100 + [server_frame(CONT, b"")]
            conn.send(b"".join(frames))
            conn.recv_close()

        srv = self.serve(handler)
        c = self.connect(srv, max_message_size=len(word))
        self.assertEqual(c.recv(timeout=5), word.decode())
        c.close(timeout=0.2)
        srv.result()

    def test_ping_is_answered_while_nobody_receives_a_message(self) -> None:
        def handler(conn: ServerConn) -> bytes:
            conn.send_frame(PING, b"are you there")
            f = conn.recv_frame()
            conn.send_frame(TEXT, b"after the pong")
            conn.recv_close()
            return f.payload if f.opcode == PONG else b"not a pong"

        srv = self.serve(handler)
        c = self.connect(srv)
        self.assertEqual(c.recv(timeout=5), "after the pong")
        c.close(timeout=0.2)
        self.assertEqual(srv.result(), b"are you there")

    def test_timeout_keeps_the_connection_and_partial_frames(self) -> None:
        frame = server_frame(TEXT, b"x" * 300)
        go = threading.Event()

        def handler(conn: ServerConn) -> None:
            conn.send(frame[:150])
            go.wait(5)
            conn.send(frame[150:])
            conn.send_frame(TEXT, b"second", fin=False)
            go.clear()
            conn.recv_close()

        srv = self.serve(handler)
        c = self.connect(srv)
        t = time.monotonic()
        with self.assertRaises(ReceiveTimeoutError):
            c.recv(timeout=0.1)
        self.assertGreaterEqual(time.monotonic() - t, 0.1)
        with self.assertRaises(TimeoutError):  # also a TimeoutError
            c.recv(timeout=0)
        go.set()
        self.assertEqual(c.recv(timeout=5), "x" * 300)
        with self.assertRaises(ReceiveTimeoutError):  # half a fragmented message
            c.recv(timeout=0.05)
        self.assertIsNone(c.closed)
        c.send("still open")
        c.close(timeout=0.2)
        srv.result()


class ProtocolErrorTest(FakeServerTest):
    def expect_failure(self, frames: List[bytes], code: int, want: str, **kw: Any) -> None:
        def handler(conn: ServerConn) -> Any:
            for f in frames:
                conn.send(f)
            got = conn.recv_close()
            return got, conn.at_eof()

        srv = self.serve(handler)
        c = self.connect(srv, **kw)
        with self.assertRaises(ProtocolError) as cm:
            while True:
                c.recv(timeout=5)
        e = cm.exception
        self.assertEqual((e.code, e.by_peer, e.clean), (code, False, False))
        self.assertIn(want, e.reason)
        (got_code, got_reason), eof = srv.result()
        self.assertEqual(got_code, code, "the close frame the client sent")
        self.assertIn(want, got_reason)
        self.assertTrue(eof, "the client closes the connection")
        self.assertIs(c.closed, e)
        with self.assertRaises(ProtocolError):
            c.recv(timeout=1)
        with self.assertRaises(ConnectionClosedError):
            c.send("after")

    def test_bad_frames(self) -> None:
        cases = [
            ("masked", [server_frame(TEXT, b"hi", mask_key=b"abcd")], "masked"),
            ("rsv1", [server_frame(TEXT, b"hi", rsv=4)], "reserved"),
            ("rsv3", [server_frame(PING, b"", rsv=1)], "reserved"),
            ("opcode 3", [server_frame(0x3, b"")], "opcode"),
            ("opcode 0xB", [server_frame(0xB, b"")], "opcode"),
            ("fragmented ping", [server_frame(PING, b"a", fin=False)], "fragmented control"),
            ("long ping", [server_frame(PING, b"p" * 126)], "125"),
            ("long close", [server_frame(CLOSE, close_payload(1000, "r" * 124))], "125"),
            ("continuation first", [server_frame(CONT, b"x")], "continuation"),
            ("text inside text", [server_frame(TEXT, b"a", fin=False), server_frame(TEXT, b"b")], "new message"),
            ("63-bit length", [server_frame(TEXT, b"", length=1 << 63, wide=8)], "significant bit"),
            ("1-byte close", [server_frame(CLOSE, b"\x03")], "1-byte"),
            ("close code 1005", [server_frame(CLOSE, close_payload(1005))], "1005"),
            ("close code 999", [server_frame(CLOSE, close_payload(999))], "999"),
            ("close code 2999", [server_frame(CLOSE, close_payload(2999))], "2999"),
        ]
        for name, frames, want in cases:
            with self.subTest(name):
                self.expect_failure(frames, 1002, want)

    def test_invalid_utf8(self) -> None:
        cases = [
            ("bad byte", [server_frame(TEXT, b"ok \xff")]),
            ("surrogate", [server_frame(TEXT, b"\xed\xa0\x80")]),
            ("overlong", [server_frame(TEXT, b"\xc0\xaf")]),
            ("cut at the end", [server_frame(TEXT, "é".encode()[:1], fin=False), server_frame(CONT, b"")]),
            ("bad in a middle fragment", [server_frame(TEXT, b"a", fin=False), server_frame(CONT, b"\x80", fin=False)]),
        ]
        for name, frames in cases:
            with self.subTest(name):
                self.expect_failure(frames, 1007, "UTF-8")
        with self.subTest("close reason"):
            self.expect_failure([server_frame(CLOSE, struct.pack("!H", 1000) + b"\xff")], 1007, "UTF-8")

    def test_binary_is_refused(self) -> None:
        self.expect_failure([server_frame(BINARY, b"\x00\x01")], 1003, "binary")

    def test_oversize(self) -> None:
        with self.subTest("one frame"):
            self.expect_failure([server_frame(TEXT, b"x" * 1001)], 1009, "1000 bytes", max_message_size=1000)
        with self.subTest("fragments"):
            self.expect_failure([server_frame(TEXT, b"x" * 600, fin=False), server_frame(CONT, b"x" * 401)],
                                1009, "1000 bytes", max_message_size=1000)
        with self.subTest("declared, never sent"):  # refused from the header alone
            self.expect_failure([server_frame(TEXT, b"", length=1 << 40, wide=8)], 1009, "1000 bytes",
                                max_message_size=1000)

    def test_exactly_the_maximum_is_accepted(self) -> None:
        def handler(conn: ServerConn) -> None:
            conn.send_frame(TEXT, b"x" * 600, fin=False)
            conn.send_frame(CONT, b"x" * 400)
            conn.send_frame(TEXT, b"y" * 1000)
            conn.recv_close()

        srv = self.serve(handler)
        c = self.connect(srv, max_message_size=1000)
        self.assertEqual(c.recv(timeout=5), "x" * 1000)
        self.assertEqual(c.recv(timeout=5), "y" * 1000)  # the size counts per message
        c.close(timeout=0.2)
        srv.result()


class CloseTest(FakeServerTest):
    def test_server_closes(self) -> None:
        def handler(conn: ServerConn) -> Any:
            conn.send_frame(TEXT, b"last words")
            conn.send_frame(CLOSE, close_payload(4001, "bye ☺"))
            return conn.recv_close(), conn.at_eof()

        srv = self.serve(handler)
        c = self.connect(srv)
        self.assertEqual(c.recv(timeout=5), "last words")
        with self.assertRaises(ConnectionClosedError) as cm:
            c.recv(timeout=5)
        e = cm.exception
        self.assertNotIsInstance(e, ProtocolError)
        self.assertEqual((e.code, e.reason, e.by_peer, e.clean), (4001, "bye ☺", True, True))
        self.assertEqual(srv.result(), ((4001, "bye ☺"), True), "the client echoes the code and closes")
        with self.assertRaises(ConnectionClosedError) as cm2:
            c.send("too late")
        self.assertIs(cm2.exception, e)
        c.close()  # a no-op now

    def test_server_closes_without_a_code(self) -> None:
        def handler(conn: ServerConn) -> Any:
            conn.send_frame(CLOSE)
            return conn.recv_frame().payload

        srv = self.serve(handler)
        c = self.connect(srv)
        with self.assertRaises(ConnectionClosedError) as cm:
            c.recv(timeout=5)
        self.assertEqual((cm.exception.code, cm.exception.reason), (1005, ""))
        self.assertEqual(srv.result(), b"", "the echo carries no code either")

    def test_connection_dropped(self) -> None:
        srv = self.serve(lambda conn: conn.sock.shutdown(socket.SHUT_RDWR))
        c = self.connect(srv)
        with self.assertRaises(ConnectionClosedError) as cm:
            c.recv(timeout=5)
        self.assertEqual((cm.exception.code, cm.exception.by_peer, cm.exception.clean), (1006, True, False))
        srv.result()

    def test_client_closes(self) -> None:
        def handler(conn: ServerConn) -> Any:
            conn.send_frame(TEXT, b"dropped: the client is closing")
            got = conn.recv_close()
            conn.send_frame(CLOSE, close_payload(*got))  # type: ignore[arg-type]
            return got, conn.at_eof()

        srv = self.serve(handler)
        c = self.connect(srv)
        c.close(4000, "moving")
        assert c.closed is not None
        self.assertEqual((c.closed.code, c.closed.reason, c.closed.by_peer, c.closed.clean), (4000, "moving", False, True))
        self.assertEqual(srv.result(), ((4000, "moving"), True))
        with self.assertRaises(ConnectionClosedError):
            c.recv(timeout=1)
        with self.assertRaises(ConnectionClosedError):
            c.send("x")

    def test_close_waits_a_bounded_time_for_a_silent_server(self) -> None:
        def handler(conn: ServerConn) -> Any:
            return conn.recv_close(), conn.at_eof()

        srv = self.serve(handler)
        c = self.connect(srv)
        t = time.monotonic()
        c.close(timeout=0.2)
        self.assertLess(time.monotonic() - t, 2.0)
        assert c.closed is not None
        self.assertEqual((c.closed.code, c.closed.clean), (1000, False))
        self.assertEqual(srv.result(), ((1000, ""), True))

    def test_close_while_another_thread_receives(self) -> None:
        for answer in (True, False):
            with self.subTest(server_answers=answer):
                def handler(conn: ServerConn, answer: bool = answer) -> Any:
                    got = conn.recv_close()
                    if answer:
                        conn.send_frame(CLOSE, close_payload(1001, "ok"))
                    return conn.at_eof()

                srv = self.serve(handler)
                c = self.connect(srv)
                errs: List[BaseException] = []
                started = threading.Event()

                def reader() -> None:
                    started.set()
                    try:
                        c.recv()  # no timeout: close() must end it
                    except BaseException as e:
                        errs.append(e)

                th = threading.Thread(target=reader)
                th.start()
                started.wait()
                while not c._read_lock.locked():  # the reader is inside recv
                    time.sleep(0.001)
                t = time.monotonic()
                c.close(1001, "going", timeout=0.3)
                th.join(5)
                self.assertFalse(th.is_alive())
                self.assertLess(time.monotonic() - t, 3.0)
                self.assertEqual(len(errs), 1)
                self.assertIsInstance(errs[0], ConnectionClosedError)
                e = errs[0]
                assert isinstance(e, ConnectionClosedError)
                self.assertEqual((e.code, e.reason, e.clean), (1001, "going", answer))
                self.assertTrue(srv.result())

    def test_bad_close_arguments(self) -> None:
        srv = self.serve(lambda conn: conn.recv_close())
        c = self.connect(srv)
        for code in (999, 1005, 1006, 1015, 2000, 5000):
            with self.subTest(code=code), self.assertRaises(ValueError):
                c.close(code)
        with self.assertRaises(ValueError):
            c.close(1000, "é" * 62)  # 124 bytes
        self.assertIsNone(c.closed)
        c.close(1000, "é" * 61, timeout=0.2)
        self.assertEqual(srv.result(), (1000, "é" * 61))


class ConcurrencyTest(FakeServerTest):
    def test_one_reader_one_writer(self) -> None:
        n = 500

        def handler(conn: ServerConn) -> int:
            echoed = 0
            while True:
                f = conn.recv_frame()
                if f.opcode == PONG:
                    continue
                if f.opcode == CLOSE:
                    conn.send_frame(CLOSE, f.payload)
                    return echoed
                conn.send_frame(PING, b"between")
                conn.send_frame(TEXT, f.payload)
                echoed += 1

        srv = self.serve(handler)
        c = self.connect(srv)
        got: List[str] = []

        def reader() -> None:
            for _ in range(n):
                got.append(c.recv(timeout=10))

        th = threading.Thread(target=reader)
        th.start()
        for i in range(n):
            c.send(f"message {i} " + "z" * (i * 37 % 3000))
        th.join(20)
        self.assertEqual(got, [f"message {i} " + "z" * (i * 37 % 3000) for i in range(n)])
        c.close()
        self.assertEqual(srv.result(), n)


class TLSTest(FakeServerTest):
    def test_wss_large_messages_both_ways(self) -> None:
        tls = cert()

        def handler(conn: ServerConn) -> None:
            while True:
                f = conn.recv_frame()
                if f.opcode == PONG:
                    continue
                if f.opcode == CLOSE:
                    conn.send_frame(CLOSE, f.payload)
                    return
                conn.send_frame(PING, b"tls")
                conn.send_frame(TEXT, f.payload[: len(f.payload) // 2], fin=False)
                conn.send_frame(CONT, f.payload[len(f.payload) // 2:])

        srv = self.serve(handler, tls=tls.server_context())
        c = self.connect(srv, ssl_context=tls.client_context())
        for n in (10, 70000, 1 << 20):
            msg = "t" * n
            c.send(msg)
            self.assertEqual(c.recv(timeout=10), msg)
        c.close()
        assert c.closed is not None
        self.assertTrue(c.closed.clean)
        srv.result()

    def test_wss_untrusted_certificate(self) -> None:
        tls = cert()
        srv = self.serve(lambda conn: None, tls=tls.server_context())
        with self.assertRaises(HandshakeError) as cm:
            ws.connect(srv.url, timeout=5)  # the default context does not trust it
        self.assertEqual(cm.exception.status, 0)
        self.assertIn("CERTIFICATE", str(cm.exception).upper())


class WsPackageTest(unittest.TestCase):
    """The framing against the `ws` npm package's server, an independent
    implementation of RFC 6455."""

    server: NodeWSServer
    seq = 0

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = NodeWSServer()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()

    def open(self, path: str = "/v1/sessions:connect", **kw: Any) -> Any:
        WsPackageTest.seq += 1
        conn_id = f"c{WsPackageTest.seq}"
        kw.setdefault("subprotocols", [PROTOCOL])
        kw.setdefault("timeout", 5.0)
        c = ws.connect(f"{self.server.base}{path}?id={conn_id}", **kw)
        self.addCleanup(c.close, timeout=0.5)
        return c, conn_id

    def test_subprotocol_and_headers(self) -> None:
        c, _ = self.open(subprotocols=["other.v9", PROTOCOL], headers={"Authorization": "Bearer abc"})
        self.assertEqual(c.subprotocol, PROTOCOL)
        c.send('{"cmd":"hello"}')
        hello = json.loads(c.recv(timeout=5))
        self.assertEqual(hello["protocol"], PROTOCOL)
        self.assertEqual(hello["authorization"], "Bearer abc")
        self.assertTrue(hello["url"].startswith("/v1/sessions:connect?id="))

    def test_no_common_subprotocol_is_refused(self) -> None:
        with self.assertRaises(HandshakeError) as cm:
            self.open(subprotocols=["other.v9"])
        self.assertEqual(cm.exception.status, 101)
        self.assertIn("no subprotocol", str(cm.exception))

    def test_refusal(self) -> None:
        with self.assertRaises(HandshakeError) as cm:
            self.open(path="/refuse")
        e = cm.exception
        self.assertEqual((e.status, e.retry_after, e.body), (429, 3.0, b"Too Many Requests"))

    def test_echo_length_encodings(self) -> None:
        c, _ = self.open()
        for n in (0, 1, 125, 126, 127, 65535, 65536, 65537, 1 << 20):
            with self.subTest(n=n):
                msg = "€" * (n // 3) + "x" * (n % 3)  # n bytes of UTF-8
                c.send(msg)
                self.assertEqual(c.recv(timeout=10), msg)
                c.send(json.dumps({"cmd": "size", "n": n}))
                self.assertEqual(c.recv(timeout=10), "x" * n)

    def test_many_round_trips(self) -> None:
        c, conn_id = self.open()
        for i in range(1000):
            c.send(f"rt {i}")
            self.assertEqual(c.recv(timeout=5), f"rt {i}")
        c.close()
        ev = self.server.close_event(conn_id)
        self.assertEqual((ev["code"], ev["reason"]), (1000, ""))

    def test_pipelined(self) -> None:
        c, _ = self.open()
        msgs = [f"p{i}:" + "q" * (i * 131 % 70000) for i in range(200)]
        th = threading.Thread(target=lambda: [c.send(m) for m in msgs])
        th.start()
        got = [c.recv(timeout=10) for _ in msgs]
        th.join(10)
        self.assertEqual(got, msgs)

    def test_fragments_with_pings_between(self) -> None:
        c, _ = self.open()
        parts = ["frag", "men", "€", "", "ted " * 20000]
        c.send(json.dumps({"cmd": "fragments", "parts": parts, "ping": "between"}))
        self.assertEqual(c.recv(timeout=5), "".join(parts))
        # our pongs reached ws: it reports each one
        for _ in range(len(parts) - 1):
            self.assertEqual(json.loads(c.recv(timeout=5)), {"pong": "between"})

    def test_ping(self) -> None:
        c, _ = self.open()
        c.send(json.dumps({"cmd": "ping", "payload": "p" * 125}))
        self.assertEqual(json.loads(c.recv(timeout=5)), {"pong": "p" * 125})

    def test_server_closes_with_a_code(self) -> None:
        for code, reason in ((1000, ""), (1001, "shutting down"), (4001, "moved ☺")):
            with self.subTest(code=code):
                c, conn_id = self.open()
                c.send(json.dumps({"cmd": "close", "code": code, "reason": reason}))
                with self.assertRaises(ConnectionClosedError) as cm:
                    c.recv(timeout=5)
                e = cm.exception
                self.assertEqual((e.code, e.reason, e.by_peer, e.clean), (code, reason, True, True))
                ev = self.server.close_event(conn_id)
                self.assertEqual((ev["code"], ev["reason"]), (code, reason), "ws got our echo")

    def test_client_closes_with_a_code(self) -> None:
        c, conn_id = self.open()
        c.send("before")
        self.assertEqual(c.recv(timeout=5), "before")
        c.close(4002, "resuming elsewhere", timeout=5)
        assert c.closed is not None
        self.assertEqual((c.closed.code, c.closed.reason, c.closed.clean), (4002, "resuming elsewhere", True))
        ev = self.server.close_event(conn_id)
        self.assertEqual((ev["code"], ev["reason"]), (4002, "resuming elsewhere"))

    def test_wss(self) -> None:
        tls = cert()
        srv = NodeWSServer(tls)
        self.addCleanup(srv.close)
        c = ws.connect(f"{srv.base}/v1/sessions:connect?id=tls", subprotocols=[PROTOCOL],
                       ssl_context=tls.client_context(), timeout=5)
        self.addCleanup(c.close, timeout=0.5)
        self.assertEqual(c.subprotocol, PROTOCOL)
        for n in (5, 126, 65536, 1 << 20):
            c.send("s" * n)
            self.assertEqual(c.recv(timeout=10), "s" * n)
        c.send(json.dumps({"cmd": "fragments", "parts": ["a" * 20000, "b" * 20000], "ping": "x"}))
        self.assertEqual(c.recv(timeout=5), "a" * 20000 + "b" * 20000)
        self.assertEqual(json.loads(c.recv(timeout=5)), {"pong": "x"})
        c.close(timeout=5)
        self.assertEqual(srv.close_event("tls")["code"], 1000)


if __name__ == "__main__":
    unittest.main()
