"""Fencing proofs made by the real leasesvc binary (docs/contract.md §17),
verified by leasesvc.fence: a REST acquire's and a session acquire's proof
verify through the service's JWKS (fetched, and saved as a static set); a
tampered payload, a wrong signature, an unknown kid, a proof for another
lease, a lower token after a higher one and a forged bare token are each
refused with their reason, also through a WSGI sink reading the
Leasesvc-Fence header."""

from __future__ import annotations

import json
import threading
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterable, List, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import leasesvc
from leasesvc import fence

from ._ed25519_sign import b64, compact, make_proof, public_key
from ._support import RealService, unique

SVC: RealService


def setUpModule() -> None:
    global SVC
    SVC = RealService()


def tearDownModule() -> None:
    SVC.close()


def jwks_url() -> str:
    return SVC.url + "/.well-known/jwks.json"


def split(proof: str) -> Tuple[Dict[str, Any], Dict[str, Any], str]:
    h, p, s = proof.split(".")
    return json.loads(fence._b64decode(h)), json.loads(fence._b64decode(p)), s


class ServiceProofTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = leasesvc.Client(SVC.url)
        self.addCleanup(self.c.close)
        self.keys = fence.RemoteKeys(jwks_url())
        self.v = fence.Verifier(self.keys)

    def test_rest_acquire_proof_verifies(self) -> None:
        name = unique("fence")
        lease = self.c.acquire(name, "a", 5.0)
        self.assertTrue(lease.proof)
        self.assertNotIn(lease.proof, repr(lease), "a proof is a secret: not in reprs, so not in logs")
        claims = self.v.verify(lease.proof)  # fetches the JWKS: the kid is new to it
        self.assertEqual((claims.lease, claims.fencing_token, claims.holder, claims.principal, claims.issuer),
                         (name, lease.fencing_token, "a", "", "leasesvc"))
        assert lease.acquire_time is not None
        self.assertEqual(claims.issued_at, int(lease.acquire_time.timestamp()))
        header, _, _ = split(lease.proof)
        self.assertEqual(header["alg"], "EdDSA")
        self.assertEqual(header["typ"], fence.TYPE)
        t = time.perf_counter()
        self.v.verify(lease.proof)
        again = time.perf_counter() - t
        self.assertLess(again, 0.050, f"a verification took {again * 1000:.1f} ms")
        # Nothing but the acquire answer carries it.
        self.assertEqual(self.c.get(name).proof, "")
        self.assertEqual(self.c.renew(name, "a", lease.fencing_token).proof, "")

    def test_session_acquire_proof_verifies(self) -> None:
        name = unique("fence-session")
        s = self.c.open_session(window=2.0)
        self.addCleanup(s.close)
        lease = s.acquire(name, "sess")
        self.assertEqual(self.v.verify(lease.proof).holder, "sess")

    def test_static_jwks_from_the_service(self) -> None:
        with urllib.request.urlopen(jwks_url(), timeout=5) as r:
            doc = json.loads(r.read())
        keys = fence.parse_jwks(doc)
        self.assertGreaterEqual(len(keys), 1)
        for k in doc["keys"]:
            self.assertEqual(fence.key_id(fence._b64decode(k["x"])), k["kid"])
        name = unique("fence-static")
        lease = self.c.acquire(name, "a", 5.0)
        self.assertEqual(fence.Verifier(keys).verify(lease.proof).fencing_token, lease.fencing_token)

    def test_refusals(self) -> None:
        name = unique("fence-refused")
        first = self.c.acquire(name, "a", 5.0)
        self.c.release(name, "a", first.fencing_token)
        second = self.c.acquire(name, "b", 5.0)
        self.assertEqual(second.fencing_token, first.fencing_token + 1)
        other = self.c.acquire(unique("fence-other"), "a", 5.0)
        guard = fence.Guard(self.v)
        self.assertEqual(guard.check(name, second.proof).fencing_token, second.fencing_token)

        header, payload, sig = split(second.proof)
        tampered = compact(header) + "." + compact({**payload, "fencingToken": 9999}) + "." + sig
        raw = bytearray(fence._b64decode(sig))
        raw[40] ^= 0x01
        wrong_sig = second.proof.rpartition(".")[0] + "." + b64(bytes(raw))
        seed = bytes(range(32))
        invented_kid = fence.key_id(public_key(seed))
        unknown_kid = make_proof(seed, invented_kid, name, 9999, holder="mallory")
        stolen_kid = make_proof(seed, header["kid"], name, 9999, holder="mallory")  # the service's kid, not its key
        cases: List[Tuple[str, str, str, int]] = [
            ("tampered payload", tampered, "bad_signature", 403),
            ("wrong signature", wrong_sig, "bad_signature", 403),
            ("unknown kid", unknown_kid, "unknown_key", 403),
            ("the service's kid, another key", stolen_kid, "bad_signature", 403),
            ("proof for another lease", other.proof, "other_lease", 403),
            ("lower token after a higher", first.proof, "stale", 409),
            ("forged bare token", "9999", "malformed", 403),
            ("forged bare token (an int)", 9999, "malformed", 403),  # type: ignore[list-item]
            ("alg none", compact({"alg": "none", "kid": header["kid"], "typ": fence.TYPE}) + "." +
             compact({**payload, "fencingToken": 9999}) + ".", "malformed", 403),
        ]
        for label, p, reason, status in cases:
            with self.subTest(label):
                with self.assertRaises(fence.FenceError) as cm:
                    guard.check(name, p)
                self.assertEqual((cm.exception.reason, cm.exception.status), (reason, status), str(cm.exception))
        self.assertEqual(guard.highest(name), second.fencing_token)
        self.assertEqual(guard.check(name, second.proof).holder, "b")  # the true leader goes on

    def test_unknown_kid_refetch_is_rate_limited(self) -> None:
        keys = fence.RemoteKeys(jwks_url())
        v = fence.Verifier(keys)
        seed = bytes(range(32))
        forged = make_proof(seed, fence.key_id(public_key(seed)), "x", 1)
        with self.assertRaises(fence.UnknownKeyError) as cm:
            v.verify(forged)
        self.assertIn("service's JWKS", str(cm.exception))  # fetched
        with self.assertRaises(fence.UnknownKeyError) as cm:
            v.verify(forged)
        self.assertIn("at most every 10 s", str(cm.exception))  # not fetched again
        lease = self.c.acquire(unique("fence-known"), "a", 5.0)
        self.assertEqual(v.verify(lease.proof).holder, "a")  # the service's key was fetched by the first


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class WSGISinkTest(unittest.TestCase):
    """A WSGI sink fenced by Guard.check_headers, written to over HTTP."""

    def test_sink(self) -> None:
        guard = fence.Guard(fence.Verifier(fence.RemoteKeys(jwks_url())))
        name = unique("fence-sink")
        writes: List[int] = []

        def app(environ: Dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            try:
                claims = guard.check_headers(environ, name)
            except fence.FenceError as e:
                start(f"{e.status} Refused", [("Content-Type", "text/plain")])
                return [e.reason.encode()]
            writes.append(claims.fencing_token)
            start("200 OK", [("Content-Type", "text/plain")])
            return [b"written"]

        srv = make_server("127.0.0.1", 0, app, server_class=WSGIServer, handler_class=_Quiet)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        url = f"http://127.0.0.1:{srv.server_port}/orders"

        def put(proof: str = "") -> Tuple[int, str]:
            req = urllib.request.Request(url, data=b"{}", method="PUT",
                                         headers={fence.HEADER: proof} if proof else {})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        c = leasesvc.Client(SVC.url)
        self.addCleanup(c.close)
        old = c.acquire(name, "old", 5.0)
        self.assertEqual(put(old.proof), (200, "written"))
        c.revoke(name, "deposed", old.fencing_token)
        new = c.acquire(name, "new", 5.0)
        self.assertEqual(put(new.proof), (200, "written"))
        self.assertEqual(put(old.proof), (409, "stale"))
        self.assertEqual(put(), (401, "missing"))
        self.assertEqual(put("9999"), (403, "malformed"))
        self.assertEqual(put(new.proof), (200, "written"))
        self.assertEqual(writes, [old.fencing_token, new.fencing_token, new.fencing_token])


if __name__ == "__main__":
    unittest.main()
