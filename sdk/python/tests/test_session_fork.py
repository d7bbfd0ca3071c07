"""A Session across ``os.fork`` (docs/contract.md §14, clones): the child's
copy of the session, and every holding over it, refuses to be used
(``SessionForkedError``) and sends nothing; the parent goes on. The child
reports what it saw in its exit status."""

from __future__ import annotations

import json
import os
import unittest
from typing import Any, Callable, Dict

import leasesvc

from .test_session import FakeClock, SessionTestCase

# What the child tries; each must raise SessionForkedError there.
CHECKS = ("session.acquire", "session.renew", "session.deadline", "session.deadline_for", "holding.deadline",
          "holding.renew", "holding.release", "keeper.hold")


def forked_error() -> type:
    """SessionForkedError, or a stand-in that nothing raises (before it
    existed)."""
    return getattr(leasesvc, "SessionForkedError", type("NoSuchError", (Exception,), {}))


@unittest.skipUnless(hasattr(os, "fork"), "needs os.fork")
class ForkTest(SessionTestCase):
    maxDiff = None

    def test_a_forked_child_refuses_the_session_and_sends_nothing(self) -> None:
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock, request_timeout=1)
        k = leasesvc.Keeper(s._c, session=s, clock=clock)
        self.addCleanup(k.close)
        h = k.hold("x", "me")
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        self.assertIsNotNone(s._wait_deadline(0, 5))
        before = len(f.conn(0).received)
        conns = len(f.conns)

        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test runner
            code = 70
            try:
                os.close(r)
                code = self.child(w, s, h, k)
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as pipe:
            report = json.loads(pipe.read() or "{}")
        _, wait_status = os.waitpid(pid, 0)
        self.assertEqual(wait_status, 0, "the child did not exit cleanly")
        self.assertEqual(len(f.conns), conns, "the child opened a socket")
        self.assertEqual(len(f.conn(0).received), before,
                         f"the child sent on the parent's socket: {f.conn(0).types()[before:]}")
        want = {c: "SessionForkedError" for c in CHECKS}
        want.update({"heartbeat sent": "False", "close": "None"})
        self.assertEqual(report, want, "what the child saw")
        # The parent is unaffected.
        self.assertEqual(s.renew("x", "me", 1).fencing_token, 1)
        clock.t = 101.0
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        f.wait(lambda: (h.deadline or 0) > 101)
        self.assertAlmostEqual(h.deadline, 101.9)
        self.assertFalse(s.closed)

    def child(self, w: int, s: Any, h: Any, k: Any) -> int:
        """(In the child.) Try every use of the session, the holding and the
        keeper; write to ``w`` what each did (the error's class name, or
        the result); return the exit status."""
        cls = forked_error()
        uses: Dict[str, Callable[[], object]] = {
            "session.acquire": lambda: s.acquire("y", "me"), "session.renew": lambda: s.renew("x", "me", 1),
            "session.deadline": s.deadline, "session.deadline_for": lambda: s.deadline_for("x", 1),
            "holding.deadline": lambda: h.deadline, "holding.renew": h.renew, "holding.release": h.release,
            "keeper.hold": lambda: k.hold("z", "me"), "heartbeat sent": s._heartbeat, "close": s.close}
        report: Dict[str, str] = {}
        for what, use in uses.items():
            try:
                report[what] = str(use())
            except cls:
                report[what] = "SessionForkedError"
            except BaseException as e:
                report[what] = f"{type(e).__name__}: {e}"
        with os.fdopen(w, "w") as pipe:
            pipe.write(json.dumps(report))
        return 0

    def test_the_error_says_why(self) -> None:
        cls = forked_error()
        self.assertTrue(issubclass(cls, leasesvc.LeaseError), "SessionForkedError is a LeaseError")
        f = self.fake()
        s = self.manual(f, FakeClock())
        s._forked = True  # as the fork hook marks the child's copy
        with self.assertRaises(cls) as cm:
            s.acquire("x", "me")
        self.assertIn("fork", str(cm.exception))
        self.assertIn(str(os.getpid()), str(cm.exception))
        s._forked = False


if __name__ == "__main__":
    unittest.main()
