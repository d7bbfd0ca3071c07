"""The SDKs' lifecycle rules L1–L4 (issue 46, sdk/conformance/PROTOCOL.md)
and the Holding ABC, against the in-process fakes:

* L1: a keeper chooses its mode once, at its first hold (or open), and
  remembers it, a session-limit refusal included; ``keeper.mode`` and
  ``keeper.plain_reason`` say which and why;
* L2: a session the service ended never reopens itself; its holdings are
  lost; the keeper that opened it opens a new one at its next hold, and an
  Elector over it campaigns again; a session given to a keeper is not
  reopened;
* L3: a cancel_before that does not fit the span is refused, never capped;
* L4: the keeper renews every plain holding until it ends or the keeper
  closes; close releases what it holds and stops every renewal;
* the Holding is an ABC with a plain and a session implementation, and no
  code above the keeper asks which it has.
"""

from __future__ import annotations

import ast
import inspect
import os
import threading
import unittest
import warnings
from typing import Any, List

import leasesvc
from leasesvc.holding import Holding, PlainHolding, SessionHolding

from ._session_server import FakeSessionService, open_refused
from ._support import FakeService, Request, lease_json
from .test_keeper import TTL, Changes, FakeClock

PKG = os.path.join(os.path.dirname(leasesvc.__file__))


def plain_fake(tc: unittest.TestCase, sessions: Any = None) -> FakeService:
    """A fake answering every lease call with token 1 (a release: not
    held); ``sessions``, if given, answers the session upgrade."""

    def handler(req: Request) -> Any:
        if sessions is not None and req.path.endswith("/v1/sessions:connect"):
            return sessions
        if req.path.endswith(":release"):
            return (200, {}, lease_json(name=req.path.split("/")[-1].split(":")[0], token=1, held=False))
        return (200, {}, lease_json(name=req.path.split("/")[-1].split(":")[0], token=1))

    f = FakeService(handler, sessions=sessions is not None)
    tc.addCleanup(f.close)
    return f


def end_sessions(f: FakeSessionService, conn: int = -1) -> None:
    """As the service does when a session expires: free its leases and end
    its socket; resumes are refused ``session_not_found`` until
    ``f.refuse_resume`` is cleared."""
    with f.lock:
        for lease in f.leases.values():
            lease["held"] = False
        f.refuse_resume = "session_not_found"
    f.conn(conn).drop()


class ModeOnceTest(unittest.TestCase):
    """L1."""

    def test_a_session_limit_refusal_is_remembered_for_the_keepers_life(self) -> None:
        f = plain_fake(self, sessions=open_refused(429, "resource_exhausted"))
        c = leasesvc.Client(f.url)
        self.addCleanup(c.close)
        k = leasesvc.Keeper(c, window=1.0, ttl=TTL)
        self.addCleanup(k.close)
        self.assertEqual((k.mode, k.plain_reason, k.span), ("", "", None), "nothing chosen before the first hold")
        h = k.hold("a", "me")
        self.assertEqual((k.mode, k.plain_reason, h.mode, k.span), ("plain", "session_limit", "plain", TTL))
        h2 = k.hold("a-2", "me")
        self.assertEqual((k.mode, h2.mode), ("plain", "plain"))
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 1, "the second hold did not ask for a session again")
        k2 = leasesvc.Keeper(c, window=1.0, ttl=TTL)  # a new keeper asks again
        self.addCleanup(k2.close)
        k2.hold("b", "me")
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 2)

    def test_open_chooses_without_a_hold(self) -> None:
        f = plain_fake(self)  # the upgrade is answered 404
        c = leasesvc.Client(f.url)
        self.addCleanup(c.close)
        k = leasesvc.Keeper(c, ttl=TTL)
        self.addCleanup(k.close)
        self.assertEqual(k.open(), "plain")
        self.assertEqual((k.mode, k.plain_reason), ("plain", "sessions_unsupported"))
        self.assertEqual(f.calls(":acquire"), [])
        self.assertEqual(k.open(), "plain")
        self.assertEqual(len(f.calls("/v1/sessions:connect")), 1)

    def test_asked_and_window_reasons(self) -> None:
        f = plain_fake(self, sessions=open_refused(500, "internal"))  # never asked for here
        c = leasesvc.Client(f.url)
        self.addCleanup(c.close)
        asked = leasesvc.Keeper(c, plain_renewals=True, ttl=TTL)
        self.addCleanup(asked.close)
        self.assertEqual(asked.span, TTL, "known before the first hold: it cannot be otherwise")
        asked.hold("a", "me")
        self.assertEqual((asked.mode, asked.plain_reason), ("plain", "asked"))
        # cancel_before 0.5 s does not fit a window of 1 s (limit 0.4 s): plain renewals, no session asked for
        window = leasesvc.Keeper(c, window=1.0, ttl=TTL, cancel_before=0.5)
        self.addCleanup(window.close)
        window.hold("b", "me")
        self.assertEqual((window.mode, window.plain_reason), ("plain", "window"))
        self.assertEqual(f.calls("/v1/sessions:connect"), [])

    def test_the_old_mode_keyword_warns(self) -> None:
        c = leasesvc.Client("http://127.0.0.1:1")
        with self.assertWarns(DeprecationWarning):
            k = leasesvc.Keeper(c, mode="plain")
        self.assertEqual(k.span, k.ttl)

    def test_a_session_keeper_says_session(self) -> None:
        f = FakeSessionService()
        self.addCleanup(f.close)
        c = leasesvc.Client(f.url, request_timeout=5)
        self.addCleanup(c.close)
        k = leasesvc.Keeper(c, window=1.0)
        self.addCleanup(k.close)
        k.hold("a", "me")
        k.hold("b", "me")
        self.assertEqual((k.mode, k.plain_reason, k.span), ("session", "", 1.0))
        self.assertEqual(f.count("open"), 1)


class Terms:
    """Records an Elector's terms."""

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


class SessionEndedTest(unittest.TestCase):
    """L2."""

    def setUp(self) -> None:
        self.f = FakeSessionService()
        self.addCleanup(self.f.close)
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def check_reopened(self, k: leasesvc.Keeper) -> None:
        h1, h2 = k.hold("h", "me"), k.hold("a", "me")
        s = h1.session
        assert s is not None
        end_sessions(self.f)
        for h in (h1, h2):
            self.assertTrue(h.ended.wait(10), "the holding did not end with its session")
            self.assertIsInstance(h.cause, leasesvc.LeaseLostError)
            self.assertEqual(h.cause.code, "lease_lost")  # type: ignore[union-attr]
        self.assertTrue(s.closed)
        self.assertEqual(s.ended, "expired")
        self.assertEqual(k.holdings(), [])
        self.f.refuse_resume = ""
        h3 = k.hold("a", "me")  # the keeper opens a new session
        self.assertEqual((k.mode, h3.mode, h3.token), ("session", "session", 2))
        self.assertIsNot(h3.session, s)
        self.assertEqual(self.f.count("open"), 2)
        self.assertEqual(self.f.count("resume"), 1, "the ended session did not resume or reopen itself")

    def test_the_keepers_own_session(self) -> None:
        k = leasesvc.Keeper(self.client, window=1.0)
        self.addCleanup(k.close)
        self.check_reopened(k)

    def test_the_clients_shared_session(self) -> None:
        k = leasesvc.Keeper(self.client)
        self.addCleanup(k.close)
        self.check_reopened(k)

    def test_a_session_given_is_not_reopened(self) -> None:
        s = self.client.open_session()
        k = leasesvc.Keeper(self.client, session=s)
        self.addCleanup(k.close)
        h = k.hold("a", "me")
        end_sessions(self.f)
        self.assertTrue(h.ended.wait(10))
        self.assertTrue(h.lost)
        self.f.refuse_resume = ""
        with self.assertRaises(RuntimeError) as cm:
            k.hold("a", "me")
        self.assertIn("closed", str(cm.exception))
        self.assertEqual(self.f.count("open"), 1)

    def test_an_elector_campaigns_again_through_the_new_session(self) -> None:
        k = leasesvc.Keeper(self.client, window=1.0)
        self.addCleanup(k.close)
        rec = Terms()
        e = leasesvc.Elector(k, "a", holder="me", callbacks=leasesvc.Callbacks(on_started_leading=rec.on_started))
        self.addCleanup(e.stop, 10)
        e.start()
        t1 = rec.next(self)
        s1 = t1.holding.session if t1.holding is not None else None
        end_sessions(self.f)
        self.assertTrue(t1.wait(10))
        self.assertIsInstance(t1.cause, (leasesvc.LeaseLostError, leasesvc.SafeDeadlineError))
        self.f.wait(lambda: s1 is not None and s1.closed)
        self.f.refuse_resume = ""
        t2 = rec.next(self)
        self.assertEqual(t2.token, 2)
        self.assertIsNot(t2.holding.session, s1)  # type: ignore[union-attr]
        self.assertEqual((k.mode, self.f.count("open")), ("session", 2))
        self.assertIsNone(e.error)


class CancelBeforeTest(unittest.TestCase):
    """L3 through a session: known once the keeper chose its mode."""

    def setUp(self) -> None:
        self.f = FakeSessionService()
        self.addCleanup(self.f.close)
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def test_refused_by_run_once_the_mode_is_chosen_before_any_acquire(self) -> None:
        k = leasesvc.Keeper(self.client, window=1.0)
        self.addCleanup(k.close)
        e = leasesvc.Elector(k, "a", holder="me", cancel_before=0.6)  # span unknown: the constructor cannot tell
        with self.assertRaises(leasesvc.InvalidOptionError) as cm:
            e.run()
        for part in ("cancel_before 0.6", "below 0.4", "session window of 1"):
            self.assertIn(part, str(cm.exception))
        self.assertEqual(self.f.count("acquire"), 0)
        with self.assertRaises(leasesvc.InvalidOptionError):  # now the span is known: at once
            leasesvc.Elector(k, "a", cancel_before=0.6)

    def test_not_capped_at_a_tenth_of_the_window(self) -> None:
        k = leasesvc.Keeper(self.client, window=1.0)
        self.addCleanup(k.close)
        rec = Terms()
        e = leasesvc.Elector(k, "a", holder="me", cancel_before=0.3,
                             callbacks=leasesvc.Callbacks(on_started_leading=rec.on_started))
        self.addCleanup(e.stop, 10)
        e.start()
        term = rec.next(self)
        h = term.holding
        assert h is not None
        with e._cond:  # (the deadline moves only under the Elector's condition as seen by the term)
            d1, stop = h.deadline, term._state.stop_at
        d2 = h.deadline
        assert d1 is not None and d2 is not None
        self.assertEqual(e.cancel_before, 0.3)
        self.assertLessEqual(stop, d2 - 0.3 + 1e-9, "the stop time is the deadline less 0.3 s, not less 0.1 s")
        self.assertGreaterEqual(stop, d1 - 0.3 - 0.3, "the stop time follows the deadline")

    def test_a_given_session_it_does_not_fit_is_refused(self) -> None:
        s = self.client.open_session(window=1.0)
        with self.assertRaises(leasesvc.InvalidOptionError):
            leasesvc.Keeper(self.client, session=s, cancel_before=0.4)


class RenewalTest(unittest.TestCase):
    """L4, on a fake clock."""

    def setUp(self) -> None:
        self.f = plain_fake(self)
        self.clock = FakeClock()
        self.client = leasesvc.Client(self.f.url, request_timeout=5)
        self.addCleanup(self.client.close)

    def test_renewed_until_close_and_not_after(self) -> None:
        k = leasesvc.Keeper(self.client, plain_renewals=True, ttl=TTL, renew_jitter=0, clock=self.clock)
        h = k.hold("a", "me")
        ch = Changes()
        h.on_change(ch)
        for i in range(9):  # 3 × TTL, a renewal every TTL/3, none by the agent
            self.clock.advance(TTL / 3)
            info = ch.next(self, "moved")
            self.assertFalse(info["call"])
        self.assertFalse(h.ended.is_set())
        self.assertAlmostEqual(h.deadline, 100.0 + 3 * TTL + TTL * (1 - leasesvc.DEFAULT_DRIFT_MARGIN))
        self.assertEqual(k.holdings(), [h])
        renews = len(self.f.calls(":renew"))
        self.assertEqual(renews, 9)
        k.close()
        self.assertEqual(len(self.f.calls(":release")), 1, "close released the holding")
        self.assertTrue(h.ended.is_set() and not h.lost)
        for _ in range(6):
            self.clock.advance(TTL / 3)
        threading.Event().wait(0.1)  # (a renewal loop left running would have sent by now)
        self.assertEqual(len(self.f.calls(":renew")), renews, "renewed after close")
        with self.assertRaises(RuntimeError):
            k.hold("b", "me")


class HoldingAbcTest(unittest.TestCase):
    def test_an_abc_with_two_implementations(self) -> None:
        self.assertTrue(inspect.isabstract(Holding))
        with self.assertRaises(TypeError):
            Holding(None, None)  # type: ignore[abstract,arg-type]
        for cls in (PlainHolding, SessionHolding):
            self.assertTrue(issubclass(cls, Holding))
            self.assertFalse(inspect.isabstract(cls), cls)
        self.assertIs(leasesvc.Holding, Holding)

    def test_the_keeper_hands_out_the_implementation_of_its_mode(self) -> None:
        f = FakeSessionService()
        self.addCleanup(f.close)
        c = leasesvc.Client(f.url, request_timeout=5)
        self.addCleanup(c.close)
        with leasesvc.Keeper(c) as k:
            self.assertIsInstance(k.hold("a", "me"), SessionHolding)
        plain = leasesvc.Client(plain_fake(self).url)
        self.addCleanup(plain.close)
        with leasesvc.Keeper(plain, plain_renewals=True) as k:
            self.assertIsInstance(k.hold("b", "me"), PlainHolding)

    def test_nothing_above_the_keeper_asks_how_a_lease_is_held(self) -> None:
        """No branch on "session or plain" outside the keeper and the two
        holdings: the Elector's modules name no mode, session or holding
        implementation."""
        banned_attrs = {"mode", "session", "_sess", "plain_renewals", "plain_reason", "_given", "_opened"}
        banned_names = {"PlainHolding", "SessionHolding", "PLAIN", "SESSION", "Session"}
        for mod in ("elector.py", "_lead.py", "term.py", "aio.py", "leadership.py"):
            with open(os.path.join(PKG, mod), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                with self.subTest(module=mod, line=getattr(node, "lineno", 0)):
                    if isinstance(node, ast.Attribute):
                        self.assertNotIn(node.attr, banned_attrs)
                    elif isinstance(node, ast.Name):
                        self.assertNotIn(node.id, banned_names)
                    elif isinstance(node, ast.ImportFrom):
                        self.assertNotIn(node.module, ("session", "_session_wire", "_session_sockets"))


if __name__ == "__main__":
    warnings.simplefilter("default")
    unittest.main()
