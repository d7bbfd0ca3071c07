"""Sessions against the real leasesvc binary (docs/contract.md §14): an
Elector holds through a session, the lease JSON says so, a killed agent's
lease frees within the window (not the TTL), a REST release is refused
session_held while a revoke ends the term through the session's push, and
close releases at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import unittest
from typing import List

import leasesvc

from ._support import REPO_ROOT, RealService, unique

SVC: RealService


def setUpModule() -> None:
    global SVC
    SVC = RealService()


def tearDownModule() -> None:
    SVC.close()


CHILD = """
import sys, time, leasesvc
c = leasesvc.Client(sys.argv[1])
s = c.open_session(window=0.4)
l = s.acquire(sys.argv[2], "crashing")
print(l.fencing_token, flush=True)
time.sleep(600)
"""


class SessionServiceTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = leasesvc.Client(SVC.url)
        self.addCleanup(self.c.close)

    def test_a_session_lease_shows_as_session_held(self) -> None:
        name = unique("sess")
        s = self.c.open_session(window=0.4)
        self.assertIsNotNone(s.deadline())
        self.assertEqual(s.heartbeat_interval, 0.1)
        lease = s.acquire(name, "a")
        self.assertEqual((lease.held, lease.session, lease.session_window_ms), (True, True, 400))
        g = self.c.get(name)
        self.assertEqual((g.holder, g.session, g.session_window_ms), ("a", True, 400))
        with self.assertRaises(leasesvc.SessionHeldError) as cm:
            self.c.renew(name, "a", lease.fencing_token)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "session_held"))
        with self.assertRaises(leasesvc.SessionHeldError):
            self.c.open_session(window=0.4).acquire(name, "a")  # the same holder through another session
        r = s.renew(name, "a", lease.fencing_token, checkpoint={"n": 1})
        self.assertEqual(r.checkpoint, {"n": 1})
        s.close()
        self.assertFalse(self.c.get(name).held, "close releases at once")

    def test_a_killed_agent_frees_its_lease_within_the_window(self) -> None:
        name = unique("crash")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "sdk", "python"))
        p = subprocess.Popen([sys.executable, "-c", CHILD, SVC.url, name], env=env, stdout=subprocess.PIPE)
        assert p.stdout is not None
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        token = int(p.stdout.readline())
        self.assertTrue(self.c.get(name).session)
        p.kill()
        t0 = time.monotonic()
        lease = self.c.acquire(name, "survivor", 30, wait=20)
        took = time.monotonic() - t0
        self.assertEqual(lease.fencing_token, token + 1)
        self.assertLess(took, 10, "freed by the session's death, long before the 30 s TTL")

    def test_a_dropped_socket_resumes_with_its_lease(self) -> None:
        name = unique("resume")
        s = self.c.open_session(window=0.4)
        self.addCleanup(s.close)
        lease = s.acquire(name, "a")
        first = s._conn
        assert first is not None
        first.ws._sock.shutdown(2)  # the connection breaks under the session
        deadline = time.monotonic() + 10
        while (s.resumes == 0 or s._conn is None or s._conn is first) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual((s.resumes, s.epoch), (1, 2))
        self.assertEqual(s.held(), {name: ("a", lease.fencing_token)})
        before = s.deadline() or 0
        self.assertGreater(s._wait_deadline(before, 5) or 0, before, "the new socket's heartbeats are acked")
        g = self.c.get(name)
        self.assertEqual((g.holder, g.fencing_token, g.session), ("a", lease.fencing_token, True))
        r = s.renew(name, "a", lease.fencing_token, checkpoint={"after": "resume"})
        self.assertEqual(r.checkpoint, {"after": "resume"})

    def test_a_rest_release_of_an_electors_session_held_holding_is_refused(self) -> None:
        name = unique("elect")
        terms: List[leasesvc.Term] = []
        started = threading.Event()

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            started.set()
            term.wait()

        e = leasesvc.Elector.for_client(self.c, name, holder="me", on_started_leading=lead)
        self.addCleanup(e.stop, 10)
        with self.assertLogs("leasesvc", "INFO") as logs:
            e.start()
            self.assertTrue(started.wait(10))
        self.assertTrue(any("holding through a session (window 1s)" in x for x in logs.output), logs.output)
        term = terms[0]
        self.assertTrue(self.c.get(name).session)
        with self.assertRaises(leasesvc.SessionHeldError):  # only its session ends it (docs/contract.md §3)
            self.c.release(name, "me", term.token)
        self.assertEqual((self.c.get(name).held, term.cause), (True, None))
        e.stop(10)  # the release over the socket ends it
        self.assertFalse(self.c.get(name).held)

    def test_a_revoke_ends_the_term(self) -> None:
        name = unique("revoke")
        started = threading.Event()
        terms: List[leasesvc.Term] = []

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            started.set()
            term.wait()

        e = leasesvc.Elector.for_client(self.c, name, holder="me", on_started_leading=lead)
        self.addCleanup(e.stop, 10)
        e.start()
        self.assertTrue(started.wait(10))
        self.c.revoke(name, "drain", terms[0].token)
        self.assertTrue(terms[0].wait(5))
        self.assertIsInstance(terms[0].cause, leasesvc.LeaseLostError)


    def test_a_preempting_candidate_gets_the_lease_through_the_yield_push(self) -> None:
        name = unique("yield")
        started = threading.Event()
        terms: List[leasesvc.Term] = []

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            started.set()
            term.wait()

        e = leasesvc.Elector.for_client(self.c, name, holder="low", priority=1, wait=-1, on_started_leading=lead,
                                        on_yield_requested=lambda term, to: e.set_checkpoint({"handed": to}))
        self.addCleanup(e.stop, 10)
        e.start()
        self.assertTrue(started.wait(10))
        got = self.c.acquire(name, "high", 30, wait=20, priority=9, preempt=True)
        self.assertEqual(got.holder, "high")
        self.assertEqual(got.checkpoint, {"handed": "high"})
        self.assertTrue(terms[0].wait(5))
        self.assertIsInstance(terms[0].cause, leasesvc.YieldedError)

    def test_transfer_over_the_session(self) -> None:
        name = unique("transfer")
        s = self.c.open_session(window=0.4)
        self.addCleanup(s.close)
        lease = s.acquire(name, "a")
        t = s.transfer(name, "a", lease.fencing_token, "b", checkpoint={"n": 2})
        self.assertFalse(t.held)
        self.assertEqual(t.reserved_for, "b")
        with self.assertRaises(leasesvc.LeaseReservedError):
            self.c.acquire(name, "c", 5)
        nxt = self.c.acquire(name, "b", 5)
        self.assertEqual((nxt.fencing_token, nxt.checkpoint), (lease.fencing_token + 1, {"n": 2}))
        self.assertEqual(s.held(), {})

if __name__ == "__main__":
    unittest.main()
