"""The exactly-once example (examples/exactly_once.py) on the real service:
5 agent processes, 1,000 tasks, a sink fenced with proofs, the leader killed
twice, two forged writes refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

from ._support import RealService


class ExactlyOnceTest(unittest.TestCase):
    def test_exactly_once(self) -> None:
        svc = RealService()
        self.addCleanup(svc.close)
        script = os.path.join(os.path.dirname(__file__), "..", "examples", "exactly_once.py")
        p = subprocess.run([sys.executable, script, "--url", svc.url], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=240, text=True)
        lines = p.stdout.strip().splitlines()
        self.assertTrue(lines, f"no result; stderr:\n{p.stderr}")
        r = json.loads(lines[-1])
        print(f"\nexactly once: {lines[-1]}", file=sys.stderr)
        self.assertEqual((r["done"], r["missing"]), (1000, 0), r)
        self.assertEqual(r["duplicates"], 0, r)
        self.assertEqual(r["staleAccepted"], 0, r)
        self.assertGreaterEqual(r["staleRefused"], 1, "the paused leader's late write was not refused")
        self.assertGreaterEqual(r["terms"], 3, r)
        self.assertEqual(len(r["kills"]), 3, r)
        # Two forged writes with a far higher token (a bare number, a JWS
        # under an unknown key) refused, and the true leader went on.
        self.assertEqual(sorted(r["forgedRefused"]), ["malformed", "unknown_key"], r)
        self.assertGreater(r["writesAfterForgery"], 0, r)
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    unittest.main()
