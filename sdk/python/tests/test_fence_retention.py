"""leasesvc.fence, issue 44 finding 4: a RemoteKeys forgets a key the
service's JWKS no longer lists (its retention ended: docs/fencing.md), and
a proof is accepted only in its one canonical encoding (a base64url part
whose last character has unused low bits set is malformed)."""

from __future__ import annotations

import unittest
from typing import Any, List

from leasesvc import fence

from ._ed25519_sign import make_proof, public_key
from ._support import FakeService, Request
from .test_fence import KID, PUB, SEED, Clock, jwk, proof

NEW_SEED = bytes(range(2, 34))
NEW_PUB = public_key(NEW_SEED)
NEW_KID = fence.key_id(NEW_PUB)
DAY = 86400.0  # past any recheck of a listed key


class RetentionTest(unittest.TestCase):
    def jwks(self) -> FakeService:
        """A JWKS route answering ``self.answer`` (set it to change what the
        service lists)."""
        self.answer: Any = (200, {}, {"keys": [jwk(PUB)]})

        def handler(req: Request) -> Any:
            return self.answer

        svc = FakeService(handler)
        self.addCleanup(svc.close)
        return svc

    def fetches(self, svc: FakeService) -> List[str]:
        return [c.path for c in svc.calls("/jwks.json")]

    def test_a_key_the_jwks_no_longer_lists_is_forgotten(self) -> None:
        svc, clock = self.jwks(), Clock()
        v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json", clock=clock))
        self.assertEqual(v.verify(proof()).fencing_token, 1)
        for _ in range(3):
            v.verify(proof())  # from memory
        self.assertEqual(len(self.fetches(svc)), 1)
        # The key's instance ended long ago: its retention is over, and the
        # service lists only the instances' keys of today.
        self.answer = (200, {}, {"keys": [jwk(NEW_PUB)]})
        clock.t += DAY
        with self.assertRaises(fence.UnknownKeyError) as cm:
            v.verify(proof())
        self.assertEqual(cm.exception.reason, "unknown_key")
        self.assertEqual(self.fetches(svc)[-1], "/.well-known/jwks.json?kid=" + KID, "asked the service about it")
        clock.t += DAY
        with self.assertRaises(fence.UnknownKeyError):
            v.verify(proof())  # forgotten: not brought back from memory
        self.assertEqual(v.verify(make_proof(NEW_SEED, NEW_KID, "orders", 2)).fencing_token, 2)

    def test_a_listed_key_is_answered_from_memory_for_max_age(self) -> None:
        svc, clock = self.jwks(), Clock()
        v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json", clock=clock, max_age=60))
        v.verify(proof())
        clock.t += 59.9
        v.verify(proof())
        self.assertEqual(len(self.fetches(svc)), 1, "fetched again before max_age passed")
        clock.t += 0.1
        v.verify(proof())  # still listed: kept, and listed anew from now
        self.assertEqual(self.fetches(svc)[-1], "/.well-known/jwks.json?kid=" + KID)
        self.assertEqual(len(self.fetches(svc)), 2)
        clock.t += 59.9
        v.verify(proof())
        self.assertEqual(len(self.fetches(svc)), 2)

    def test_a_failed_fetch_is_no_verdict(self) -> None:
        svc, clock = self.jwks(), Clock()
        v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json", clock=clock, max_age=60))
        v.verify(proof())
        self.answer = (503, {}, {"code": "unavailable"})
        clock.t += 61
        self.assertEqual(v.verify(proof()).fencing_token, 1, "a key listed before was refused while the JWKS is down")
        self.assertEqual(len(self.fetches(svc)), 2)
        clock.t += 5  # within the rate limit, the JWKS still unread: answered as known
        v.verify(proof())
        self.assertEqual(len(self.fetches(svc)), 2)
        self.answer = (200, {}, {"keys": []})
        clock.t += 10
        with self.assertRaises(fence.UnknownKeyError) as cm:
            v.verify(proof())
        self.assertIn("no longer", str(cm.exception))

    def test_a_key_left_out_is_kept_until_max_age_after_it_was_last_listed(self) -> None:
        # A fetch for another kid that leaves a known key out does not
        # forget it at once (the instance answering may not have read the
        # newest key records): only once the JWKS has not listed it for
        # max_age.
        svc, clock = self.jwks(), Clock()
        v = fence.Verifier(fence.RemoteKeys(svc.url + "/.well-known/jwks.json", clock=clock, max_age=60))
        v.verify(proof())  # listed at 1000
        self.answer = (200, {}, {"keys": [jwk(NEW_PUB)]})
        clock.t += 10
        v.verify(make_proof(NEW_SEED, NEW_KID, "orders", 2))  # fetched ?kid=NEW_KID: PUB left out
        self.assertEqual(v.verify(proof()).fencing_token, 1, "forgotten on an answer about another key")
        self.assertEqual(len(self.fetches(svc)), 2, "fetched for a key listed less than max_age ago")
        clock.t += 50  # 60 s since the JWKS last listed it
        with self.assertRaises(fence.UnknownKeyError):
            v.verify(proof())
        self.assertEqual(self.fetches(svc)[-1], "/.well-known/jwks.json?kid=" + KID)
        self.assertEqual(v.verify(make_proof(NEW_SEED, NEW_KID, "orders", 3)).fencing_token, 3)


class CanonicalEncodingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.v = fence.Verifier(fence.StaticKeys({KID: PUB}))

    def test_unused_bits_in_a_last_character_are_malformed(self) -> None:
        good = proof()
        self.assertEqual(self.v.verify(good).fencing_token, 1)
        parts = good.split(".")
        self.assertEqual(len(parts[2]) % 4, 2, "a 64-byte signature leaves 4 unused bits")
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        tried = 0
        for i, part in enumerate(parts):
            if len(part) % 4 == 0:
                continue  # no unused bits
            last = alphabet.index(part[-1])
            other = alphabet[last ^ 1]  # the lowest bit is unused in either case (2 or 4 unused bits)
            bad = list(parts)
            bad[i] = part[:-1] + other
            with self.subTest(part=("header", "payload", "signature")[i]):
                with self.assertRaises(fence.MalformedProofError) as cm:
                    self.v.verify(".".join(bad))
                self.assertEqual(cm.exception.reason, "malformed")
            tried += 1
        self.assertGreaterEqual(tried, 1)

    def test_the_same_signature_bytes_under_another_encoding_are_malformed(self) -> None:
        # The signature's bytes are unchanged (a lax decoder verifies it):
        # only its encoding differs.
        import base64
        good = proof()
        signed, _, sig = good.rpartition(".")
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        for flip in (1, 2, 4, 8):
            other = sig[:-1] + alphabet[alphabet.index(sig[-1]) ^ flip]
            self.assertEqual(base64.urlsafe_b64decode(other + "=="), base64.urlsafe_b64decode(sig + "=="))
            with self.subTest(flip=flip), self.assertRaises(fence.MalformedProofError):
                self.v.verify(signed + "." + other)

    def test_a_jwk_x_not_canonically_encoded_is_refused(self) -> None:
        x = jwk(PUB)["x"]
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        bad = x[:-1] + alphabet[alphabet.index(x[-1]) ^ 1]  # 32 bytes: 43 characters, 2 unused bits
        with self.assertRaises(ValueError):
            fence.parse_jwks({"keys": [jwk(PUB, x=bad)]})


if __name__ == "__main__":
    unittest.main()
