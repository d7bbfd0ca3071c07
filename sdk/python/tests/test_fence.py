"""leasesvc.fence with keys of the tests' own (tests/_ed25519_sign.py): the
proof's form, the verifier's refusals and their reasons, the Guard, the
JWKS cache's rate limit and the header helper. The real service's proofs:
test_service_fence.py."""

from __future__ import annotations

import email.message
import json
import unittest
from typing import Any, Dict, List

from leasesvc import fence

from ._ed25519_sign import b64, compact, make_proof, public_key, sign
from ._support import FakeService, Request

SEED = bytes(range(32))
PUB = public_key(SEED)
KID = fence.key_id(PUB)
OTHER_SEED = bytes(range(1, 33))
OTHER_PUB = public_key(OTHER_SEED)


def jwk(pub: bytes, **kw: Any) -> Dict[str, Any]:
    d = {"kty": "OKP", "crv": "Ed25519", "x": b64(pub), "kid": fence.key_id(pub), "alg": "EdDSA", "use": "sig"}
    d.update(kw)
    return d


def proof(lease: str = "orders", token: int = 1, **kw: Any) -> str:
    return make_proof(SEED, KID, lease, token, **kw)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class VerifierTest(unittest.TestCase):
    def setUp(self) -> None:
        self.v = fence.Verifier(fence.StaticKeys({KID: PUB}))

    def refused(self, p: Any, cls: type, reason: str, v: Any = None) -> fence.FenceError:
        with self.assertRaises(cls) as cm:
            (v or self.v).verify(p)
        self.assertEqual(cm.exception.reason, reason)
        self.assertTrue(str(cm.exception).startswith(f"fence: {reason}: "), str(cm.exception))
        return cm.exception

    def test_verifies(self) -> None:
        c = self.v.verify(proof("orders", 7, holder="a", principal="p@x", iat=1795866905))
        self.assertEqual(c, fence.Claims("orders", 7, "a", "p@x", 1795866905, "leasesvc"))
        self.assertEqual(fence.verify(proof(), fence.StaticKeys({KID: PUB})).fencing_token, 1)

    def test_kid_is_the_rfc7638_thumbprint(self) -> None:
        # RFC 8037 appendix A.3's key and thumbprint.
        x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
        pub = fence._b64decode(x)
        self.assertEqual(fence.key_id(pub), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")

    def test_tampered_payload(self) -> None:
        h, _, s = proof("orders", 1).split(".")
        forged = h + "." + compact({"lease": "orders", "fencingToken": 9999, "holder": "h", "iat": 1700000000,
                                    "iss": "leasesvc"}) + "." + s
        e = self.refused(forged, fence.SignatureError, "bad_signature")
        self.assertEqual(e.status, 403)
        self.assertIn("token 9999", str(e))

    def test_wrong_signature(self) -> None:
        p = proof()
        signed, _, _ = p.rpartition(".")
        self.refused(signed + "." + b64(sign(OTHER_SEED, signed.encode())), fence.SignatureError, "bad_signature")
        raw = bytearray(fence._b64decode(p.rpartition(".")[2]))
        raw[5] ^= 1
        self.refused(signed + "." + b64(bytes(raw)), fence.SignatureError, "bad_signature")
        # S + L: the same signature, not reduced (malleability).
        good = fence._b64decode(p.rpartition(".")[2])
        s = int.from_bytes(good[32:], "little") + 2**252 + 27742317777372353535851937790883648493
        if s < 2**256:
            e = self.refused(signed + "." + b64(good[:32] + s.to_bytes(32, "little")), fence.SignatureError, "bad_signature")
            self.assertIn("s_not_canonical", str(e))

    def test_unknown_kid(self) -> None:
        e = self.refused(make_proof(OTHER_SEED, fence.key_id(OTHER_PUB), "orders", 1), fence.UnknownKeyError, "unknown_key")
        self.assertEqual(e.status, 403)

    def test_forged_with_the_services_kid(self) -> None:
        self.refused(make_proof(OTHER_SEED, KID, "orders", 9999), fence.SignatureError, "bad_signature")

    def test_wrong_issuer(self) -> None:
        self.refused(proof(iss="other"), fence.IssuerError, "wrong_issuer")
        self.assertEqual(fence.Verifier(fence.StaticKeys({KID: PUB}), issuer="").verify(proof(iss="other")).issuer, "other")
        self.assertEqual(fence.Verifier(fence.StaticKeys({KID: PUB}), issuer="acme").verify(proof(iss="acme")).issuer, "acme")

    def test_malformed(self) -> None:
        good = proof()
        h, p, s = good.split(".")
        hdr = {"alg": "EdDSA", "kid": KID, "typ": "leasesvc-fence+jwt"}
        pay = {"lease": "orders", "fencingToken": 1, "holder": "h", "iat": 1, "iss": "leasesvc"}
        cases: Dict[str, Any] = {
            "bare number": "9999",
            "bare int": 9999,
            "None": None,
            "empty": "",
            "two parts": h + "." + p,
            "four parts": good + ".x",
            "padding": good + "=",
            "standard base64": h + "." + p + "." + s.replace("-", "+").replace("_", "/") + "+/",
            "short signature": h + "." + p + "." + s[:-4],
            "long": "a" * 5000,
            "alg none": make_proof(SEED, KID, "", 0, header={"alg": "none", "kid": KID, "typ": "leasesvc-fence+jwt"}, payload=pay),
            "alg HS256": make_proof(SEED, KID, "", 0, header={**hdr, "alg": "HS256"}, payload=pay),
            "no kid": make_proof(SEED, KID, "", 0, header={"alg": "EdDSA", "typ": "leasesvc-fence+jwt"}, payload=pay),
            "kid not a string": make_proof(SEED, KID, "", 0, header={**hdr, "kid": 1}, payload=pay),
            "other typ": make_proof(SEED, KID, "", 0, header={**hdr, "typ": "JWT"}, payload=pay),
            "header member jwk": make_proof(SEED, KID, "", 0, header={**hdr, "jwk": {}}, payload=pay),
            "header array": make_proof(SEED, KID, "", 0, header=[hdr], payload=pay),
            "token 0": make_proof(SEED, KID, "", 0, payload={**pay, "fencingToken": 0}),
            "token string": make_proof(SEED, KID, "", 0, payload={**pay, "fencingToken": "9999"}),
            "token float": make_proof(SEED, KID, "", 0, payload={**pay, "fencingToken": 1.5}),
            "token bool": make_proof(SEED, KID, "", 0, payload={**pay, "fencingToken": True}),
            "token > int64": make_proof(SEED, KID, "", 0, payload={**pay, "fencingToken": 2**63}),
            "no lease": make_proof(SEED, KID, "", 0, payload={**pay, "lease": ""}),
            "no holder": make_proof(SEED, KID, "", 0, payload={k: v for k, v in pay.items() if k != "holder"}),
            "iat string": make_proof(SEED, KID, "", 0, payload={**pay, "iat": "now"}),
            "payload not JSON": h + "." + b64(b"{") + "." + s,
        }
        for name, bad in cases.items():
            with self.subTest(name):
                e = self.refused(bad, fence.MalformedProofError, "malformed")
                self.assertEqual(e.status, 403)
        e = self.refused(cases["alg none"], fence.MalformedProofError, "malformed")
        self.assertIn("'none'", str(e))

    def test_later_payload_members_pass(self) -> None:
        pay = {"lease": "orders", "fencingToken": 3, "holder": "h", "iat": 1, "iss": "leasesvc", "later": [1]}
        self.assertEqual(self.v.verify(make_proof(SEED, KID, "", 0, payload=pay)).fencing_token, 3)

    def test_speed(self) -> None:
        import time
        p = proof()
        self.v.verify(p)
        t = time.perf_counter()
        for _ in range(10):
            self.v.verify(p)
        self.assertLess((time.perf_counter() - t) / 10, 0.050)


class GuardTest(unittest.TestCase):
    def setUp(self) -> None:
        self.g = fence.Guard(fence.Verifier(fence.StaticKeys({KID: PUB})))

    def test_highest_token_wins(self) -> None:
        g = self.g
        self.assertEqual(g.check("orders", proof("orders", 2)).fencing_token, 2)
        self.assertEqual(g.check("orders", proof("orders", 2)).fencing_token, 2)  # the same holder again
        with self.assertRaises(fence.StaleTokenError) as cm:
            g.check("orders", proof("orders", 1))
        self.assertEqual((cm.exception.reason, cm.exception.status), ("stale", 409))
        self.assertIn("token 1", str(cm.exception))
        self.assertEqual(g.check("orders", proof("orders", 3)).fencing_token, 3)
        self.assertEqual(g.highest("orders"), 3)
        self.assertEqual(g.highest("other"), 0)
        self.assertEqual(g.check("other", proof("other", 1)).lease, "other")  # per lease

    def test_other_lease(self) -> None:
        with self.assertRaises(fence.OtherLeaseError) as cm:
            self.g.check("orders", proof("billing", 5))
        self.assertEqual((cm.exception.reason, cm.exception.status), ("other_lease", 403))
        self.assertEqual(self.g.highest("orders"), 0)

    def test_refused_proof_does_not_raise_the_highest(self) -> None:
        with self.assertRaises(fence.SignatureError):
            self.g.check("orders", make_proof(OTHER_SEED, KID, "orders", 9999))
        with self.assertRaises(fence.MalformedProofError):
            self.g.check("orders", "9999")
        self.assertEqual(self.g.highest("orders"), 0)
        self.g.check("orders", proof("orders", 1))

    def test_headers(self) -> None:
        p = proof("orders", 4)
        msg = email.message.Message()
        msg["Leasesvc-Fence"] = p
        shapes: Dict[str, Any] = {
            "dict": {"Leasesvc-Fence": p},
            "lower-case dict": {"content-type": "text/plain", "leasesvc-fence": p},
            "odd case": {"LEASESVC-FENCE": p},
            "WSGI environ": {"REQUEST_METHOD": "PUT", "HTTP_LEASESVC_FENCE": p},
            "ASGI pairs": [(b"host", b"x"), (b"leasesvc-fence", p.encode())],
            "text pairs": [("Leasesvc-Fence", p)],
            "email.message": msg,
        }
        for name, headers in shapes.items():
            with self.subTest(name):
                self.assertEqual(fence.proof_from_headers(headers), p)
                self.assertEqual(self.g.check_headers(headers, "orders").fencing_token, 4)
        for headers in ({}, [], {"Content-Type": "x"}, {"Leasesvc-Fence": ""}):
            with self.assertRaises(fence.MissingProofError) as cm:
                self.g.check_headers(headers, "orders")
            self.assertEqual((cm.exception.reason, cm.exception.status), ("missing", 401))
            self.assertIn("Leasesvc-Fence", str(cm.exception))


class JWKSTest(unittest.TestCase):
    def test_parse(self) -> None:
        doc = {"keys": [jwk(PUB), {"kty": "RSA", "n": "x", "e": "AQAB", "kid": "r"}, jwk(OTHER_PUB, crv="X25519")]}
        keys = fence.parse_jwks(json.dumps(doc))
        self.assertEqual(keys.keys, {KID: PUB})
        self.assertEqual(fence.parse_jwks(json.dumps(doc).encode()).keys, {KID: PUB})
        self.assertEqual(fence.parse_jwks(doc).keys, {KID: PUB})
        for bad in ({"keys": [jwk(PUB, kid="other")]}, {"keys": [jwk(PUB, x=b64(PUB[:31]))]},
                    {"keys": [jwk(PUB, alg="ES256")]}, {"keys": "x"}, [], "{"):
            with self.subTest(bad), self.assertRaises(ValueError):
                fence.parse_jwks(bad if isinstance(bad, str) else json.dumps(bad))

    def serve(self, answers: List[Any]) -> FakeService:
        def handler(req: Request) -> Any:
            return answers.pop(0) if len(answers) > 1 else answers[0]
        svc = FakeService(handler)
        self.addCleanup(svc.close)
        return svc

    def test_refetch_on_unknown_kid_rate_limited(self) -> None:
        svc = self.serve([(200, {}, {"keys": []}), (200, {}, {"keys": [jwk(PUB)]})])
        clock = Clock()
        keys = fence.RemoteKeys(svc.url + "/.well-known/jwks.json", clock=clock)
        v = fence.Verifier(keys)
        with self.assertRaises(fence.UnknownKeyError):
            v.verify(proof())  # the first fetch lists no key yet
        self.assertEqual(len(svc.calls("/jwks.json")), 1)
        self.assertEqual(svc.calls("/jwks.json")[0].path, "/.well-known/jwks.json?kid=" + KID)
        self.assertEqual(svc.calls("/jwks.json")[0].headers.get("Accept"), "application/json")
        clock.t += 9.9
        with self.assertRaises(fence.UnknownKeyError) as cm:
            v.verify(proof())  # within 10 s: no fetch
        self.assertIn("refetched at most every 10 s", str(cm.exception))
        self.assertEqual(len(svc.calls("/jwks.json")), 1)
        clock.t += 0.1
        self.assertEqual(v.verify(proof()).fencing_token, 1)
        self.assertEqual(len(svc.calls("/jwks.json")), 2)
        for _ in range(3):  # a known kid: from memory
            v.verify(proof())
        with self.assertRaises(fence.UnknownKeyError):  # an invented kid right after: no fetch
            v.verify(make_proof(OTHER_SEED, fence.key_id(OTHER_PUB), "orders", 9999))
        self.assertEqual(len(svc.calls("/jwks.json")), 2)

    def test_unavailable(self) -> None:
        for answer in ((500, {}, {"code": "internal"}), (200, {}, b"not json"),
                       (200, {}, {"keys": [jwk(PUB, kid="wrong")]})):
            with self.subTest(answer[2]):
                svc = self.serve([answer])
                v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json"))
                with self.assertRaises(fence.KeysUnavailableError) as cm:
                    v.verify(proof())
                self.assertEqual((cm.exception.reason, cm.exception.status), ("keys_unavailable", 503))
        v = fence.Verifier(fence.RemoteKeys("http://127.0.0.1:1/.well-known/jwks.json", timeout=2))
        with self.assertRaises(fence.KeysUnavailableError):
            v.verify(proof())

    def test_query_kept(self) -> None:
        svc = self.serve([(200, {}, {"keys": [jwk(PUB)]})])
        v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json?x=1&kid=old"))
        v.verify(proof())
        self.assertEqual(svc.calls("/jwks.json")[0].path, "/.well-known/jwks.json?x=1&kid=" + KID)


class ReasonsTest(unittest.TestCase):
    def test_stable(self) -> None:
        got = {c.__name__: (c.reason, c.status) for c in (
            fence.MissingProofError, fence.MalformedProofError, fence.SignatureError, fence.UnknownKeyError,
            fence.IssuerError, fence.OtherLeaseError, fence.StaleTokenError, fence.KeysUnavailableError)}
        self.assertEqual(got, {
            "MissingProofError": ("missing", 401), "MalformedProofError": ("malformed", 403),
            "SignatureError": ("bad_signature", 403), "UnknownKeyError": ("unknown_key", 403),
            "IssuerError": ("wrong_issuer", 403), "OtherLeaseError": ("other_lease", 403),
            "StaleTokenError": ("stale", 409), "KeysUnavailableError": ("keys_unavailable", 503)})
        for c in (fence.MissingProofError, fence.StaleTokenError):
            self.assertTrue(issubclass(c, fence.FenceError))


if __name__ == "__main__":
    unittest.main()
