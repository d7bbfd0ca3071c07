"""Succession (docs/contract.md §8): priorities, checkpoints, transfer,
lease_reserved and preemption, through the Client against a fake (the
request bodies, the error mapping) and the real leasesvc binary, and the
Elector's priority, checkpoints, step-down and transfer."""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, Dict, List, Optional

import leasesvc

from ._support import FakeService, RealService, Request, lease_json, problem, unique


def setUpModule() -> None:
    global SVC
    SVC = RealService()


def tearDownModule() -> None:
    SVC.close()


SVC: RealService


class WireTest(unittest.TestCase):
    """What the Client sends and how it reads the answers, against a fake."""

    def serve(self, handler: Any) -> FakeService:
        f = FakeService(handler)
        self.addCleanup(f.close)
        return f

    def test_bodies(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json()))
        c = leasesvc.Client(f.url)
        c.acquire("a", "me", 1.0, wait=2.0, priority=7, preempt=True)
        c.acquire("a", "me", 1.0, priority=0)
        c.acquire("a", "me", 1.0)
        c.renew("a", "me", 1, checkpoint={"n": 1})
        c.release("a", "me", 1, checkpoint={"n": 2})
        c.release("a", "me", 1)
        c.transfer("a", "me", 1, "you", checkpoint={"n": 3}, reserve=2.5)
        c.transfer("a", "me", 1, "you")
        c.transfer("a", "me", 1, "you", to_principal="you@example.com")
        bodies = [r.body for r in f.requests]
        self.assertEqual(bodies, [
            {"holder": "me", "ttlMs": 1000, "waitMs": 2000, "priority": 7, "preempt": True},
            {"holder": "me", "ttlMs": 1000, "priority": 0},
            {"holder": "me", "ttlMs": 1000},
            {"holder": "me", "fencingToken": 1, "checkpoint": {"n": 1}},
            {"holder": "me", "fencingToken": 1, "checkpoint": {"n": 2}},
            {"holder": "me", "fencingToken": 1},
            {"holder": "me", "fencingToken": 1, "to": "you", "checkpoint": {"n": 3}, "reserveMs": 2500},
            {"holder": "me", "fencingToken": 1, "to": "you"},
            {"holder": "me", "fencingToken": 1, "to": "you", "toPrincipal": "you@example.com"},
        ])
        self.assertTrue(f.requests[-1].path.endswith("/v1/leases/a:transfer"))
        # The service refuses a POST without it (docs/contract.md §4).
        for r in f.requests:
            self.assertEqual(r.headers.get("Content-Type"), "application/json", f"{r.method} {r.path}")

    def test_succession_fields(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json(
            priority=5, checkpoint={"k": [1]}, checkpointToken=4, reservedFor="b",
            reservedUntil="2026-01-01T00:00:05Z", yieldRequested=True, yieldTo="c", candidates=2,
            bestCandidatePriority=0)))
        lease = leasesvc.Client(f.url).get("a")
        self.assertEqual((lease.priority, lease.checkpoint, lease.checkpoint_token, lease.reserved_for,
                          lease.yield_requested, lease.yield_to, lease.candidates, lease.best_candidate_priority),
                         (5, {"k": [1]}, 4, "b", True, "c", 2, 0))
        self.assertEqual(lease.reserved_until.second, 5)  # type: ignore[union-attr]
        plain = leasesvc.Lease.from_json(lease_json())
        self.assertEqual((plain.priority, plain.checkpoint, plain.reserved_for, plain.reserved_until,
                          plain.yield_requested, plain.candidates, plain.best_candidate_priority),
                         (0, None, "", None, False, 0, None))

    def test_lease_reserved_carries_whom_and_until(self) -> None:
        f = self.serve(lambda req: problem(409, "lease_reserved", retry_after=4, reservedFor="heir",
                                           reservedUntil="2026-01-01T00:00:04Z",
                                           lease=lease_json(holder="old", token=3, held=False)))
        c = leasesvc.Client(f.url, max_attempts=3)
        with self.assertRaises(leasesvc.LeaseReservedError) as cm:
            c.acquire("a", "me", 1.0)
        e = cm.exception
        self.assertEqual((e.code, e.status, e.reserved_for, e.retry_after, e.lease.holder, e.lease.fencing_token),
                         ("lease_reserved", 409, "heir", 4.0, "old", 3))
        self.assertEqual(e.reserved_until.second, 4)  # type: ignore[union-attr]
        self.assertEqual(len(f.requests), 1, "a reservation is a refusal, not retried")
        self.assertFalse(isinstance(e, leasesvc.LeaseHeldError))


class ElectorFakeTest(unittest.TestCase):
    """The Elector's succession steps against a scripted fake."""

    def test_steps_down_at_once_without_a_callback_and_releases_with_the_checkpoint(self) -> None:
        renews: List[Request] = []

        def handler(req: Request) -> Any:
            if req.path.endswith(":acquire"):
                return (200, {}, lease_json(token=5, checkpoint={"was": 4}, checkpointToken=4))
            if req.path.endswith(":renew"):
                renews.append(req)
                return (200, {}, lease_json(token=5, yieldRequested=True, yieldTo="boss"))
            if req.path.endswith(":release"):
                return (200, {}, lease_json(token=5, held=False))
            return (200, {}, lease_json(token=5))

        f = FakeService(handler)
        self.addCleanup(f.close)
        terms: List[leasesvc.Term] = []
        returned = threading.Event()
        e: Optional[leasesvc.Elector] = None

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            assert e is not None
            e.set_checkpoint({"at": 1})
            term.wait()
            e.set_checkpoint({"at": 2})  # after the step-down, before returning: the release carries it
            returned.set()

        e = leasesvc.Elector.for_client(leasesvc.Client(f.url), "a", holder="me", ttl=1.5, wait=-1, priority=2,
                                        on_started_leading=lead)
        e.start()
        self.addCleanup(e.stop, 10)
        self.assertTrue(returned.wait(5), "the term did not end on yieldRequested")
        self.assertIsInstance(terms[0].cause, leasesvc.YieldedError)
        self.assertEqual(terms[0].cause.to, "boss")  # type: ignore[union-attr]
        self.assertEqual((terms[0].checkpoint, terms[0].checkpoint_token), ({"was": 4}, 4))
        deadline = time.monotonic() + 5
        while not f.calls(":release") and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(f.calls(":release")[0].body, {"holder": "me", "fencingToken": 5, "checkpoint": {"at": 2}})
        self.assertEqual(renews[0].body, {"holder": "me", "fencingToken": 5, "checkpoint": {"at": 1}})
        self.assertEqual(f.calls(":acquire")[0].body, {"holder": "me", "ttlMs": 1500, "priority": 2})


class ServiceTest(unittest.TestCase):
    """The Client's succession calls against the real service."""

    def setUp(self) -> None:
        self.c = leasesvc.Client(SVC.url)

    def test_priority_is_recorded(self) -> None:
        lease = self.c.acquire(unique("prio"), "a", 5.0, priority=42)
        self.assertEqual(lease.priority, 42)

    def test_transfer_reserves_for_the_successor_with_the_checkpoint(self) -> None:
        c, name = self.c, unique("transfer")
        a = c.acquire(name, "a", 5.0)
        c.renew(name, "a", a.fencing_token, checkpoint={"step": 1})
        t = c.transfer(name, "a", a.fencing_token, "b", checkpoint={"step": 2}, reserve=5.0)
        self.assertFalse(t.held)
        self.assertEqual((t.reserved_for, t.checkpoint, t.checkpoint_token), ("b", {"step": 2}, 1))
        with self.assertRaises(leasesvc.LeaseReservedError) as cm:
            c.acquire(name, "c", 5.0)
        self.assertEqual(cm.exception.reserved_for, "b")
        self.assertIsNotNone(cm.exception.reserved_until)
        self.assertGreaterEqual(cm.exception.retry_after, 1.0)
        b = c.acquire(name, "b", 5.0)
        self.assertEqual((b.holder, b.fencing_token, b.checkpoint, b.checkpoint_token), ("b", 2, {"step": 2}, 1))
        with self.assertRaises(leasesvc.LeaseLostError):
            c.transfer(name, "a", a.fencing_token, "c")

    def test_preempting_candidate_asks_the_holder_to_yield(self) -> None:
        c, name = self.c, unique("preempt")
        a = c.acquire(name, "a", 5.0, priority=1)
        got: List[leasesvc.Lease] = []
        waiter = threading.Thread(target=lambda: got.append(c.acquire(name, "b", 5.0, wait=10.0, priority=9,
                                                                      preempt=True)))
        waiter.start()
        deadline = time.monotonic() + 5
        while True:
            r = c.renew(name, "a", a.fencing_token)
            if r.yield_requested or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((r.yield_requested, r.yield_to, r.candidates), (True, "b", 1))
        c.release(name, "a", a.fencing_token, checkpoint={"done": 7})
        waiter.join(10)
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0].holder, got[0].fencing_token, got[0].priority, got[0].checkpoint),
                         ("b", 2, 9, {"done": 7}))


class ElectorSuccessionTest(unittest.TestCase):
    """The Elector's priority, checkpoints, step-down and transfer against
    the real service."""

    def setUp(self) -> None:
        self.c = leasesvc.Client(SVC.url)

    def elector(self, name: str, holder: str, terms: List[leasesvc.Term], **kw: Any) -> leasesvc.Elector:
        started = threading.Event()

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            started.set()
            term.wait()

        kw.setdefault("ttl", 3.0)
        e = leasesvc.Elector.for_client(self.c, name, holder=holder, on_started_leading=lead, **kw)
        e.start()
        self.addCleanup(e.stop, 10)
        self.assertTrue(started.wait(10), "the Elector did not lead")
        return e

    def test_config_is_checked(self) -> None:
        for kw in ({"priority": -1}, {"priority": 1001}, {"preempt": True, "wait": -1}):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                leasesvc.Elector.for_client(self.c, "a", **kw)

    def test_not_leading(self) -> None:
        e = leasesvc.Elector.for_client(self.c, "a", holder="me")
        with self.assertRaises(leasesvc.NotLeadingError):
            e.set_checkpoint({"x": 1})
        with self.assertRaises(leasesvc.NotLeadingError):
            e.transfer("other")
        with self.assertRaises(ValueError):
            e.set_checkpoint([1])  # type: ignore[arg-type]

    def test_steps_down_for_a_preempting_candidate_with_the_checkpoint(self) -> None:
        name = unique("elector-yield")
        terms: List[leasesvc.Term] = []
        asked: List[str] = []

        def on_yield(term: leasesvc.Term, to: str) -> None:
            asked.append(to)
            e.set_checkpoint({"progress": term.token * 10})

        e = self.elector(name, "low", terms, priority=1, renew_interval=0.3, on_yield_requested=on_yield)
        self.assertEqual(terms[0].token, 1)
        e.set_checkpoint({"progress": 1})
        got = self.c.acquire(name, "high", 5.0, wait=10.0, priority=9, preempt=True)
        self.assertEqual((got.holder, got.fencing_token, got.checkpoint, got.checkpoint_token),
                         ("high", 2, {"progress": 10}, 1))
        self.assertEqual(asked, ["high"])
        self.assertTrue(terms[0].wait(5))
        self.assertIsInstance(terms[0].cause, leasesvc.YieldedError)
        self.assertEqual(self.c.get(name).priority, 9)

    def test_inherits_the_checkpoint_and_transfers(self) -> None:
        name = unique("elector-transfer")
        seed = self.c.acquire(name, "seed", 5.0)
        self.c.release(name, "seed", seed.fencing_token, checkpoint={"from": "seed"})
        terms: List[leasesvc.Term] = []
        e = self.elector(name, "one", terms, priority=3)
        self.assertEqual((terms[0].token, terms[0].checkpoint, terms[0].checkpoint_token), (2, {"from": "seed"}, 1))
        self.assertEqual(self.c.get(name).priority, 3)
        stored = e.checkpoint({"from": "one", "n": 1})
        self.assertEqual((stored.checkpoint, stored.checkpoint_token), ({"from": "one", "n": 1}, 2))
        t = e.transfer("two", {"from": "one", "n": 2})
        self.assertEqual((t.held, t.reserved_for), (False, "two"))
        self.assertTrue(terms[0].wait(1))
        self.assertIsInstance(terms[0].cause, leasesvc.TransferredError)
        self.assertFalse(e.is_leader())
        with self.assertRaises(leasesvc.NotLeadingError):
            e.set_checkpoint({"late": True})
        two = self.c.acquire(name, "two", 5.0)
        self.assertEqual((two.fencing_token, two.checkpoint, two.checkpoint_token), (3, {"from": "one", "n": 2}, 2))


if __name__ == "__main__":
    unittest.main()
