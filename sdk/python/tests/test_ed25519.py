"""leasesvc._ed25519 against RFC 8032 §7.1's tests and the project's shared
edge-case vectors (fence/testdata/ed25519_vectors.json)."""

from __future__ import annotations

import json
import os
import time
import unittest
from typing import Any, Dict

from leasesvc import _ed25519 as ed

from ._support import REPO_ROOT

VECTORS = os.path.join(REPO_ROOT, "fence", "testdata", "ed25519_vectors.json")


def load() -> Dict[str, Any]:
    with open(VECTORS) as f:
        return json.load(f)


class RFC8032Test(unittest.TestCase):
    def test_section_7_1(self) -> None:
        doc = load()
        self.assertEqual([v["name"] for v in doc["rfc8032"]],
                         ["TEST 1", "TEST 2", "TEST 3", "TEST 1024", "TEST SHA(abc)"])
        for v in doc["rfc8032"]:
            with self.subTest(v["name"]):
                pk, msg, sig = bytes.fromhex(v["public_key"]), bytes.fromhex(v["message"]), bytes.fromhex(v["signature"])
                ed.check(pk, msg, sig)
                self.assertTrue(ed.verify(pk, msg, sig))
                self.assertFalse(ed.verify(pk, msg + b"\0", sig))
                for i in (0, 31, 32, 63):  # a bit of R or S
                    bad = bytearray(sig)
                    bad[i] ^= 0x04
                    self.assertFalse(ed.verify(pk, msg, bytes(bad)), i)

    def test_message_lengths(self) -> None:
        lengths = {v["name"]: len(bytes.fromhex(v["message"])) for v in load()["rfc8032"]}
        self.assertEqual(lengths, {"TEST 1": 0, "TEST 2": 1, "TEST 3": 2, "TEST 1024": 1023, "TEST SHA(abc)": 64})

    def test_base_point(self) -> None:
        """B encodes as RFC 8032 §5.1 says, and [L]B is the identity."""
        self.assertEqual(ed._encode(ed._B).hex(), "58" + "66" * 31)
        self.assertEqual(ed._encode(ed._mul(ed.L, ed._B)), ed._encode(ed._IDENTITY))
        self.assertEqual(ed._encode(ed._mul_base(ed.L - 1)), ed._encode(ed._neg(ed._B)))
        self.assertEqual(ed._encode(ed._mul_base(12345)), ed._encode(ed._mul(12345, ed._B)))


class EdgeCaseTest(unittest.TestCase):
    def test_shared_vectors(self) -> None:
        vectors = load()["vectors"]
        reasons = {v["reason"] for v in vectors}
        self.assertEqual(reasons, {"", "length", "s_not_canonical", "non_canonical", "not_on_curve", "small_order", "mismatch"})
        self.assertEqual(sum(v["name"].startswith("key_small_") for v in vectors), 8)
        self.assertEqual(sum(v["name"].startswith("r_small_") for v in vectors), 8)
        for v in vectors:
            with self.subTest(v["name"]):
                pk, msg, sig = bytes.fromhex(v["public_key"]), bytes.fromhex(v["message"]), bytes.fromhex(v["signature"])
                self.assertEqual(ed.verify(pk, msg, sig), v["valid"])
                if v["valid"]:
                    continue
                with self.assertRaises(ed.InvalidSignature) as cm:
                    ed.check(pk, msg, sig)
                self.assertEqual(cm.exception.reason, v["reason"], str(cm.exception))

    def test_generator_reproduces_the_file(self) -> None:
        from . import gen_ed25519_vectors as gen
        with open(VECTORS) as f:
            self.assertEqual(json.dumps(gen.build(), indent=1) + "\n", f.read())

    def test_not_bytes(self) -> None:
        with self.assertRaises(ed.InvalidSignature) as cm:
            ed.check("x" * 32, b"", b"\0" * 64)  # type: ignore[arg-type]
        self.assertEqual(cm.exception.reason, "length")


class SpeedTest(unittest.TestCase):
    def test_under_50ms(self) -> None:
        v = load()["rfc8032"][0]
        pk, msg, sig = bytes.fromhex(v["public_key"]), bytes.fromhex(v["message"]), bytes.fromhex(v["signature"])
        ed.verify(pk, msg, sig)  # builds the base table
        n = 20
        t = time.perf_counter()
        for _ in range(n):
            self.assertTrue(ed.verify(pk, msg, sig))
        per = (time.perf_counter() - t) / n
        self.assertLess(per, 0.050, f"{per * 1000:.1f} ms per verification")


if __name__ == "__main__":
    unittest.main()
