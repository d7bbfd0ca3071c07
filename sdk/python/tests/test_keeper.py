"""The Keeper (issue 38): holds leases by plain renewals (on a fake clock:
no sleeps) or through a session, owns the deadline, tells moved and lost,
and ends a holding on release or transfer."""

from __future__ import annotations

import logging
import queue
import threading
import unittest
import warnings
from typing import Any, Dict, List, Optional, Tuple

import leasesvc
from leasesvc.keeper import Clock

from ._session_server import FakeSessionService, open_refused
from ._support import FakeService, Request, lease_json, problem

TTL = 3.0
D = leasesvc.DEFAULT_DRIFT_MARGIN


class FakeClock(Clock):
    """A monotonic clock that moves only on :meth:`advance`; waits on it
    wake when it moves (or when the waited condition is notified)."""

    def __init__(self, t: float = 100.0) -> None:
        super().__init__()
        self.t = t
        self.mu = threading.Lock()
        self.conds: List[threading.Condition] = []

    def now(self) -> float:
        with self.mu:
            return self.t

    def wait(self, cond: threading.Condition, timeout: Optional[float]) -> None:
        with self.mu:
            if cond not in self.conds:
                self.conds.append(cond)
        cond.wait()

    def advance(self, d: float) -> None:
        with self.mu:
            self.t += d
            conds = list(self.conds)
        for c in conds:
            with c:
                c.notify_all()


class Changes:
    """What a holding's listener heard, in order."""

    def __init__(self) -> None:
        self.q: "queue.Queue[Tuple[str, Dict[str, Any]]]" = queue.Queue()

    def __call__(self, kind: str, info: Dict[str, Any]) -> None:
        self.q.put((kind, info))

    def next(self, tc: unittest.TestCase, kind: str) -> Dict[str, Any]:
        while True:
            try:
                k, info = self.q.get(timeout=10)
            except queue.Empty:
                raise AssertionError(f"no {kind} change") from None
            if k == kind:
                return info
            tc.assertNotIn(k, ("lost",), f"{k} before {kind}: {info}")


class PlainKeeperTest(unittest.TestCase):
    def setUp(self) -> None:
        self.renew_answers: "queue.Queue[Any]" = queue.Queue()
        self.renewed = threading.Semaphore(0)
        self.f = FakeService(self.handle)
        self.addCleanup(self.f.close)
        self.clock = FakeClock()
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def handle(self, req: Request) -> Any:
        if req.path.endswith(":acquire"):
            return (200, {}, lease_json(token=1, checkpoint={"n": 0}, checkpointToken=1))
        if req.path.endswith(":renew"):
            try:
                a = self.renew_answers.get_nowait()
            except queue.Empty:
                a = (200, {}, lease_json(token=1))
            self.renewed.release()
            return a
        if req.path.endswith(":release") or req.path.endswith(":transfer"):
            return (200, {}, lease_json(token=1, held=False))
        return (200, {}, lease_json(token=1))

    def keeper(self, **kw: Any) -> leasesvc.Keeper:
        kw.setdefault("plain_renewals", True)
        k = leasesvc.Keeper(self.client, ttl=TTL, renew_jitter=0, clock=self.clock, **kw)
        self.addCleanup(k.close)
        return k

    def test_held_with_the_plain_deadline_and_moved_by_renewals(self) -> None:
        k = self.keeper()
        h = k.hold("a", "me")
        self.assertEqual((k.mode, h.mode, h.token), ("plain", "plain", 1))
        self.assertAlmostEqual(h.deadline, 100.0 + TTL * (1 - D))
        ch = Changes()
        h.on_change(ch)
        self.assertEqual(len(self.f.calls(":renew")), 0)
        self.clock.advance(TTL / 3 - 0.01)
        self.assertFalse(self.renewed.acquire(timeout=0.05), "renewed before TTL/3")
        self.clock.advance(0.01)  # the renewal is due: sent at 101.0
        info = ch.next(self, "moved")
        self.assertFalse(info["call"])
        self.assertAlmostEqual(info["deadline"], 101.0 + TTL * (1 - D))
        self.assertAlmostEqual(h.deadline, 101.0 + TTL * (1 - D))
        self.assertEqual(h.lease.checkpoint, {"n": 0}, "the inherited checkpoint survives a renew")

    def test_a_renew_answered_lease_lost_loses_the_holding(self) -> None:
        k = self.keeper()
        h = k.hold("a", "me")
        ch = Changes()
        h.on_change(ch)
        self.renew_answers.put(problem(409, "lease_lost"))
        self.clock.advance(TTL / 3)
        info = ch.next(self, "lost")
        self.assertIsInstance(info["error"], leasesvc.LeaseLostError)
        self.assertTrue(h.lost and h.ended.is_set())
        self.assertEqual(h.cause.code, "lease_lost")  # type: ignore[union-attr]

    def test_failed_renewals_lose_the_holding_at_the_deadline(self) -> None:
        k = self.keeper()
        h = k.hold("a", "me")
        ch = Changes()
        h.on_change(ch)
        for _ in range(50):
            self.renew_answers.put(problem(503, "unavailable"))
        self.clock.advance(TTL / 3)
        self.assertIsInstance(ch.next(self, "failed")["error"], leasesvc.LeaseError)
        self.assertFalse(h.lost)
        self.clock.advance(TTL * (1 - D) - TTL / 3)  # at the deadline, no renewal confirmed
        info = ch.next(self, "lost")
        self.assertEqual(info["error"].code, "lease_lost")
        self.assertIn("no renewal confirmed before the deadline", str(info["error"]))

    def test_renew_with_a_checkpoint_then_release_ends_the_holding(self) -> None:
        k = self.keeper()
        h = k.hold("a", "me")
        self.clock.advance(0.5)
        lease = h.renew({"n": 1})
        self.assertTrue(self.renewed.acquire(timeout=5))  # (the agent's renew)
        self.assertEqual(self.f.calls(":renew")[-1].body["checkpoint"], {"n": 1})
        self.assertEqual(lease.fencing_token, 1)
        self.assertAlmostEqual(h.deadline, 100.5 + TTL * (1 - D), msg="the agent's renew moves the deadline")
        h.release({"n": 2})
        self.assertEqual(self.f.calls(":release")[-1].body["checkpoint"], {"n": 2})
        self.assertTrue(h.ended.is_set())
        self.assertFalse(h.lost, "released, not lost")
        n = len(self.f.calls(":renew"))
        self.clock.advance(TTL)
        self.assertFalse(self.renewed.acquire(timeout=0.05), "a released holding is not renewed")
        self.assertEqual(len(self.f.calls(":renew")), n)
        k.close()
        self.assertEqual(len(self.f.calls(":release")), 1, "close releases only what is still held")

    def test_transfer_ends_the_holding(self) -> None:
        k = self.keeper()
        h = k.hold("a", "me")
        h.transfer("you", reserve=2.0, checkpoint={"n": 3})
        body = self.f.calls(":transfer")[-1].body
        self.assertEqual((body["to"], body["reserveMs"], body["checkpoint"]), ("you", 2000, {"n": 3}))
        self.assertTrue(h.ended.is_set() and not h.lost)
        k.close()
        self.assertEqual(self.f.calls(":release"), [])

    def test_close_releases_what_is_held(self) -> None:
        k = self.keeper()
        k.hold("a", "me")
        k.close()
        self.assertEqual(len(self.f.calls(":release")), 1)
        with self.assertRaises(RuntimeError):
            k.hold("a", "me")

    def test_session_mode_falls_back_to_plain_without_sessions_and_says_so(self) -> None:
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            k = self.keeper(plain_renewals=False)
            h = k.hold("a", "me")
        self.assertEqual((k.mode, k.plain_reason, h.mode), ("plain", "sessions_unsupported", "plain"))
        self.assertTrue(any("plain renewals (the service offers no sessions: 404)" in line for line in logs.output),
                        logs.output)

    def test_session_mode_falls_back_at_the_session_limit(self) -> None:
        def handler(req: Request) -> Any:
            if req.path.endswith("/v1/sessions:connect"):
                return open_refused(429, "resource_exhausted")
            return self.handle(req)

        f = FakeService(handler, sessions=True)
        self.addCleanup(f.close)
        c = leasesvc.Client(f.url)
        self.addCleanup(c.close)
        k = leasesvc.Keeper(c, ttl=TTL, clock=self.clock)
        self.addCleanup(k.close)
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            h = k.hold("a", "me")
        self.assertEqual((h.mode, k.mode, k.plain_reason), ("plain", "plain", "session_limit"))
        self.assertTrue(any("plain renewals (the service's session limit is reached)" in line
                            for line in logs.output), logs.output)

    def test_bad_options(self) -> None:
        for kw in ({"mode": "carrier-pigeon"}, {"ttl": 0.0}, {"drift_margin": 0.9}, {"renew_jitter": 0.7},
                   {"ttl": 1.0, "renew_interval": 0.6}, {"window": 0.1}, {"window": 1.0, "plain_renewals": True},
                   {"cancel_before": -1.0}):
            with self.assertRaises(ValueError, msg=kw), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                leasesvc.Keeper(self.client, **kw)


class SessionKeeperTest(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSessionService()
        self.addCleanup(self.f.close)
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def test_held_through_the_session_with_its_deadline(self) -> None:
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            k = leasesvc.Keeper(self.client)
            self.addCleanup(k.close)
            h = k.hold("a", "me")
        self.assertEqual((k.mode, h.mode, h.token), ("session", "session", 1))
        self.assertTrue(any("holding through a session (window 1s)" in line for line in logs.output), logs.output)
        sess = self.client._shared_session()
        d = h.wait_deadline(float("-inf"), 5)
        self.assertIsNotNone(d)
        self.assertLessEqual(d, sess.deadline())  # type: ignore[operator]
        ch = Changes()
        h.on_change(ch)
        info = ch.next(self, "moved")  # the next acknowledged heartbeat
        self.assertIsNone(info["lease"])
        self.assertGreater(info["deadline"], d)
        self.assertLessEqual(info["deadline"], sess.deadline())  # type: ignore[operator]
        self.assertEqual((h.span, k.span, k.plain_reason), (1.0, 1.0, ""))

    def test_a_revoked_push_loses_the_holding(self) -> None:
        k = leasesvc.Keeper(self.client)
        self.addCleanup(k.close)
        h = k.hold("a", "me")
        ch = Changes()
        h.on_change(ch)
        self.f.push({"type": "revoked", "name": "a", "fencingToken": 1, "reason": "drain", "operator": "ops"})
        info = ch.next(self, "lost")
        self.assertEqual(info["error"].code, "lease_lost")
        self.assertTrue(h.lost)
        k.close()
        self.assertEqual(self.f.count("release"), 0, "a lost holding is not released")

    def test_yield_push_moves_the_lease(self) -> None:
        k = leasesvc.Keeper(self.client)
        self.addCleanup(k.close)
        h = k.hold("a", "me")
        ch = Changes()
        h.on_change(ch)
        self.f.push({"type": "yield", "name": "a", "fencingToken": 1, "to": "boss"})
        while True:
            info = ch.next(self, "moved")
            if info["lease"] is not None:
                break
        self.assertTrue(info["lease"].yield_requested)
        self.assertEqual(h.lease.yield_to, "boss")

    def test_renew_and_release_over_the_session_and_close(self) -> None:
        k = leasesvc.Keeper(self.client, window=1.0)
        h = k.hold("a", "me")
        h.renew({"n": 1})
        _, m = self.f.next("renew")
        self.assertEqual(m["checkpoint"], {"n": 1})
        h.release({"n": 2})
        _, m = self.f.next("release")
        self.assertEqual(m["checkpoint"], {"n": 2})
        self.assertTrue(h.ended.is_set() and not h.lost)
        h2 = k.hold("a", "me")
        self.assertEqual(h2.token, 2)
        k.close()
        _, m = self.f.next("release")
        self.assertEqual(m["fencingToken"], 2, "close releases what is still held")
        self.f.wait(lambda: any(t == "END" for _, t in self.f.log), 10)  # its own session closed

    def test_transfer_over_the_session(self) -> None:
        k = leasesvc.Keeper(self.client)
        self.addCleanup(k.close)
        h = k.hold("a", "me")
        h.transfer("you")
        _, m = self.f.next("transfer")
        self.assertEqual(m["to"], "you")
        self.assertTrue(h.ended.is_set() and not h.lost)

    def test_a_given_session_and_the_plain_mode(self) -> None:
        s = self.client.open_session()
        k = leasesvc.Keeper(self.client, session=s)
        h = k.hold("a", "me")
        self.assertEqual((h.mode, k.mode), ("session", "session"))
        k.close()
        self.assertFalse(s.closed, "a session given to the keeper is not its to close")
        s.close()
        with self.assertRaises(RuntimeError):
            leasesvc.Keeper(self.client, session=s).hold("b", "me")


if __name__ == "__main__":
    unittest.main()
