"""The Elector (and AsyncElector) holding through a session
(docs/contract.md §14), against the fake sessions route: the Client's
shared session by default, the term ends at the session's deadline when
heartbeats go unacknowledged and at once on a lost or revoked push, yield
pushes step it down, stop releases over the socket, and a service without
sessions, or at its session limit, gets plain renewals."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import unittest
from typing import Any, List

import leasesvc
from leasesvc.aio import AsyncElector

from ._session_server import FakeSessionService, open_refused
from ._support import FakeService, Request, lease_json


class Terms:
    """Records the terms an Elector runs."""

    def __init__(self) -> None:
        self.terms: List[leasesvc.Term] = []
        self.started = threading.Semaphore(0)

    def on_started(self, term: leasesvc.Term) -> None:
        self.terms.append(term)
        self.started.release()
        term.wait()

    def next(self, tc: unittest.TestCase) -> leasesvc.Term:
        tc.assertTrue(self.started.acquire(timeout=10), "no term began")
        return self.terms[-1]


class ElectorSessionTest(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSessionService()
        self.addCleanup(self.f.close)
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def elector(self, name: str = "a", holder: str = "me", **kw: Any) -> leasesvc.Elector:
        rec = Terms()
        self.rec = rec
        e = leasesvc.Elector.for_client(self.client, name, holder=holder, on_started_leading=rec.on_started, **kw)
        self.addCleanup(e.stop, 10)
        return e

    def test_holds_through_the_shared_session_and_says_so(self) -> None:
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            e1 = self.elector("a")
            e1.start()
            t1 = self.rec.next(self)
            e2 = self.elector("b")
            e2.start()
            self.f.wait(lambda: self.f.count("acquire") == 2)
            self.assertEqual(t1.lease.session, True)
        self.assertTrue(any("holding through a session (window 1s)" in line for line in logs.output), logs.output)
        self.assertEqual(self.f.count("open"), 1, "one session per Client, shared")
        self.assertEqual(len(self.f.conns), 1)
        e1.stop(10)
        _, m = self.f.next("release")
        self.assertEqual((m["name"], m["fencingToken"]), ("a", 1))
        self.assertFalse(self.f.lease("a")["held"])

    def test_unacked_heartbeats_end_the_term_at_the_session_deadline(self) -> None:
        e = self.elector()
        e.start()
        term = self.rec.next(self)
        h = term.holding
        assert h is not None
        self.assertIsNotNone(h.session)
        self.f.acking = False
        self.assertTrue(term.wait(10))
        last = h.session.deadline()  # type: ignore[union-attr]
        self.assertIsInstance(term.cause, leasesvc.SafeDeadlineError)
        self.assertLessEqual(term.ended_at, last, "the term ends by the deadline of the last acked heartbeat")
        self.assertFalse(e.is_leader())
        self.f.acking = True  # acks again: it leads again on the same holding
        again = self.rec.next(self)
        self.assertEqual(again.token, 1)

    def test_a_lost_push_ends_the_term_at_once(self) -> None:
        e = self.elector()
        e.start()
        term = self.rec.next(self)
        with self.f.lock:
            self.f.leases["a"]["held"] = False  # taken over: the service tells the session
        self.f.push({"type": "lost", "name": "a", "fencingToken": 1, "reason": "taken"})
        self.assertTrue(term.wait(5))
        self.assertIsInstance(term.cause, leasesvc.LeaseLostError)
        self.assertLess(term.ended_at - time.monotonic(), 1.0)
        nxt = self.rec.next(self)  # it campaigns again
        self.assertEqual(nxt.token, 2)
        self.assertEqual(self.f.count("release"), 0, "a lost holding is not released")

    def test_a_revoked_push_ends_the_term(self) -> None:
        e = self.elector()
        e.start()
        term = self.rec.next(self)
        self.f.push({"type": "revoked", "name": "a", "fencingToken": 1, "reason": "drain", "operator": "ops"})
        self.assertTrue(term.wait(5))
        self.assertIsInstance(term.cause, leasesvc.LeaseLostError)

    def test_a_yield_push_steps_down_with_the_checkpoint(self) -> None:
        asked = []

        def on_yield(term: leasesvc.Term, to: str) -> None:
            asked.append(to)
            e.set_checkpoint({"done": 7})

        e = self.elector(on_yield_requested=on_yield)
        e.start()
        term = self.rec.next(self)
        self.f.push({"type": "yield", "name": "a", "fencingToken": 1, "to": "boss"})
        self.assertTrue(term.wait(5))
        self.assertIsInstance(term.cause, leasesvc.YieldedError)
        self.assertEqual(asked, ["boss"])
        _, m = self.f.next("release")
        self.assertEqual(m["checkpoint"], {"done": 7})

    def test_checkpoint_is_written_over_the_session(self) -> None:
        e = self.elector(ttl=3.0)  # renew_interval 1 s
        e.start()
        self.rec.next(self)
        lease = e.checkpoint({"offset": 3})
        self.assertEqual(lease.checkpoint, {"offset": 3})
        _, m = self.f.next("renew")
        self.assertEqual(m["checkpoint"], {"offset": 3})
        e.set_checkpoint({"offset": 4})  # written with a renew within renew_interval
        _, m = self.f.next("renew", timeout=15)
        self.assertEqual(m["checkpoint"], {"offset": 4})

    def test_stop_during_an_acquire_releases_what_it_took_late(self) -> None:
        self.f.hold_acquires.set()
        e = self.elector()
        e.start()
        self.f.next("acquire")
        t0 = time.monotonic()
        e.stop(10)
        self.assertLess(time.monotonic() - t0, 5, "stop does not wait for the acquire's answer")
        self.f.hold_acquires.clear()  # the service grants it after all
        _, m = self.f.next("release")
        self.assertEqual((m["name"], m["fencingToken"]), ("a", 1))
        self.assertEqual(self.rec.terms, [])

    def test_held_through_another_session_by_the_same_holder_waits(self) -> None:
        self.f.acquire_problem = {"status": 409, "code": "session_held", "title": "held through a session",
                                  "detail": "held through a session"}
        e = self.elector(ttl=3.0)  # renew_interval 1 s
        e.start()
        self.f.wait(lambda: self.f.count("acquire") >= 2)  # refused, then tried again
        self.assertIsNone(e.error)
        self.f.acquire_problem = None
        self.assertEqual(self.rec.next(self).token, 1)

    def test_a_dropped_socket_keeps_the_term(self) -> None:
        e = self.elector()
        e.start()
        term = self.rec.next(self)
        self.f.conn(0).drop()
        self.f.next("resume")
        self.f.wait(lambda: self.f.count("heartbeat", conn=1) >= 3)
        self.assertTrue(term.leading, term.cause)

    def test_a_given_session_and_plain_renewals(self) -> None:
        s = self.client.open_session(window=0.4)
        e = self.elector(session=s)
        th = e.start()
        term = self.rec.next(self)
        self.assertIs(term.holding.session, s)  # type: ignore[union-attr]
        with self.assertRaises(ValueError):
            leasesvc.Elector.for_client(self.client, "a", session=s, plain_renewals=True)
        s.close()  # the term is lost, and the Elector cannot go on with a closed session
        self.assertTrue(term.wait(5))
        self.assertIsInstance(term.cause, leasesvc.LeaseLostError)
        th.join(10)  # run() ends by itself
        self.assertIsInstance(e.error, RuntimeError)

    def test_async_elector_holds_through_the_session(self) -> None:
        async def main() -> int:
            async with AsyncElector.for_client(self.client, "a", holder="me") as e:
                term = await e.leadership()
                return term.token

        self.assertEqual(asyncio.run(main()), 1)
        self.assertEqual(self.f.count("acquire"), 1)
        self.f.wait(lambda: self.f.count("release") == 1)


class FallbackTest(unittest.TestCase):
    def fake(self) -> FakeService:
        def handler(req: Request) -> Any:
            if req.path.endswith(":release"):
                return (200, {}, lease_json(token=req.body["fencingToken"], held=False))
            return (200, {}, lease_json(token=5))

        f = FakeService(handler)  # answers the session upgrade 404
        self.addCleanup(f.close)
        return f

    def test_plain_renewals_against_a_service_without_sessions(self) -> None:
        f = self.fake()
        c = leasesvc.Client(f.url)
        started = threading.Event()
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            e = leasesvc.Elector.for_client(c, "a", holder="me", ttl=2.0,
                                            on_started_leading=lambda t: (started.set(), t.wait()))
            e.start()
            self.assertTrue(started.wait(10))
            e.stop(10)
        self.assertTrue(any("plain renewals" in line for line in logs.output), logs.output)
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 1)
        self.assertEqual(len(f.calls(":acquire")), 1)
        self.assertEqual(len(f.calls(":release")), 1)
        # a second Elector of the same client does not ask again
        e2 = leasesvc.Elector.for_client(c, "b", holder="me", ttl=2.0)
        e2.start()
        f_wait(lambda: len(f.calls(":acquire")) == 2)
        e2.stop(10)
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 1)

    def test_plain_renewals_at_the_session_limit_asked_again(self) -> None:
        """A 429 answered to open (the service's session limit) gets plain
        renewals too, and says why, instead of retrying the open for ever;
        unlike a 404 it is not remembered: the next Elector asks again."""
        def handler(req: Request) -> Any:
            if req.path.endswith("/v1/sessions:connect"):
                return open_refused(429, "resource_exhausted")
            if req.path.endswith(":release"):
                return (200, {}, lease_json(token=req.body["fencingToken"], held=False))
            return (200, {}, lease_json(token=5))

        f = FakeService(handler, sessions=True)
        self.addCleanup(f.close)
        c = leasesvc.Client(f.url)
        started = threading.Event()
        with self.assertLogs("leasesvc", logging.INFO) as logs:
            e = leasesvc.Elector.for_client(c, "a", holder="me", ttl=2.0,
                                            on_started_leading=lambda t: (started.set(), t.wait()))
            e.start()
            self.assertTrue(started.wait(10), "no term began")
            e.stop(10)
        self.assertTrue(any("plain renewals (the service's session limit is reached)" in line for line in logs.output),
                        logs.output)
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 1)
        self.assertEqual(len(f.calls(":acquire")), 1)
        e2 = leasesvc.Elector.for_client(c, "b", holder="me", ttl=2.0)
        e2.start()
        f_wait(lambda: len(f.calls(":acquire")) == 2)
        e2.stop(10)
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 2)

    def test_plain_renewals_opt_out_never_upgrades(self) -> None:
        f = self.fake()
        started = threading.Event()
        e = leasesvc.Elector.for_client(leasesvc.Client(f.url), "a", holder="me", ttl=2.0, plain_renewals=True,
                                        on_started_leading=lambda t: (started.set(), t.wait()))
        e.start()
        self.assertTrue(started.wait(10))
        e.stop(10)
        self.assertEqual(f.calls("/v1/sessions:connect"), [])


def f_wait(pred: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("waited in vain")
        time.sleep(0.01)


if __name__ == "__main__":
    unittest.main()
