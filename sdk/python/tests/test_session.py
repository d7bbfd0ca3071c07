"""Session against an in-process fake of the sessions route
(docs/contract.md §14): the deadline from acknowledged heartbeats (on a
made-up clock), heartbeats every window/4, the operations over the socket,
refused upgrades, reconnect and resume, move (make before break), the
races of a resume with what the replaced socket still delivers, pushes and
close."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Dict, List, Tuple

import leasesvc
from leasesvc.session import Session

from ._session_server import FakeSessionService, refusal


class FakeClock:
    """A monotonic clock a test sets by hand."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class SessionTestCase(unittest.TestCase):
    def fake(self, **kw: Any) -> FakeSessionService:
        f = FakeSessionService(**kw)
        self.addCleanup(f.close)
        return f

    def session(self, f: FakeSessionService, request_timeout: float = 5, **kw: Any) -> Session:
        c = leasesvc.Client(f.url, request_timeout=request_timeout)
        self.addCleanup(c.close)
        s = c.open_session(**kw)
        self.addCleanup(s.close, 1)
        return s

    def manual(self, f: FakeSessionService, clock: FakeClock, window: float = 1.0,
               request_timeout: float = 5) -> Session:
        """A session that heartbeats only when the test says."""
        c = leasesvc.Client(f.url, request_timeout=request_timeout)
        self.addCleanup(c.close)
        s = Session(c, window=window, drift_margin=0.1, clock=clock, heartbeats=False)
        s._open()
        self.addCleanup(s.close, 1)
        return s

    def watch(self, s: Session, name: str, token: int) -> Tuple[List[Tuple[str, Dict[str, Any]]], threading.Event]:
        got: List[Tuple[str, Dict[str, Any]]] = []
        ev = threading.Event()

        def fn(kind: str, msg: Dict[str, Any]) -> None:
            if kind != "deadline":
                got.append((kind, msg))
                ev.set()

        s._watch(name, token, fn)
        return got, ev


class DeadlineTest(SessionTestCase):
    def beat(self, f: FakeSessionService, s: Session) -> Dict[str, Any]:
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        return f.conn().received[-1]

    def test_deadline_is_the_acked_send_time_plus_the_window_less_the_margin(self) -> None:
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        self.assertIsNone(s.deadline(), "no deadline before the first ack")
        self.beat(f, s)
        clock.t = 100.5  # the ack arrives later: the send time counts
        self.assertAlmostEqual(s._wait_deadline(0, 5), 100.9)

        f.acking = False  # the instance cannot vouch for the leases: no ack
        clock.t = 101.0
        self.beat(f, s)
        clock.t = 102.0
        unacked = self.beat(f, s)
        self.assertAlmostEqual(s.deadline() or 0, 100.9, msg="unacked heartbeats move nothing")

        f.acking = True
        clock.t = 103.0
        self.beat(f, s)
        self.assertAlmostEqual(s._wait_deadline(101, 5), 103.9)
        # a late ack of an older heartbeat never moves the deadline back
        f.push({"type": "ack", "re": unacked["id"]})
        clock.t = 104.0
        self.beat(f, s)
        self.assertAlmostEqual(s._wait_deadline(104, 5), 104.9)

    def test_the_window_the_service_grants_counts(self) -> None:
        f, clock = self.fake(window_ms=2000), FakeClock(10.0)
        s = self.manual(f, clock)
        self.assertEqual((s.window, s.heartbeat_interval, s.lease_ttl), (2.0, 0.5, 30.0))
        self.beat(f, s)
        self.assertAlmostEqual(s._wait_deadline(0, 5), 11.8)

    def test_open_asks_for_the_window_and_heartbeats_every_quarter(self) -> None:
        f = self.fake()
        s = self.session(f, window=0.4)
        _, m = f.next("open")
        self.assertEqual(m["windowMs"], 400)
        self.assertEqual(s.heartbeat_interval, 0.1)
        self.assertIsNotNone(s.deadline(), "open waits for the first ack")
        f.wait(lambda: f.count("heartbeat") >= 4)
        ids = [m["id"] for m in f.conn().received]
        self.assertEqual(ids, sorted(set(ids)), "ids are unique and increasing on the socket")
        hs = f.server.handshakes.get(timeout=5)
        self.assertEqual(hs.protocols(), ["leasesvc.session.v2"])
        self.assertTrue(hs.request_line.startswith("GET /v1/sessions:connect "))

    def test_bad_window(self) -> None:
        c = leasesvc.Client("http://127.0.0.1:1")
        for w in (0.1, 61.0):
            with self.assertRaises(ValueError):
                c.open_session(window=w)


class OperationsTest(SessionTestCase):
    def test_acquire_renew_release_transfer(self) -> None:
        f = self.fake()
        s = self.session(f)
        a = s.acquire("x", "me", metadata={"k": 1}, wait=2.0, priority=3)
        self.assertEqual((a.holder, a.fencing_token, a.held, a.session, a.session_window_ms), ("me", 1, True, True, 1000))
        _, m = f.next("acquire")
        self.assertEqual((m["name"], m["holder"], m["metadata"], m["waitMs"], m["priority"]), ("x", "me", {"k": 1}, 2000, 3))
        self.assertNotIn("ttlMs", m, "session leases have no TTL of their own")
        self.assertEqual(s.held(), {"x": ("me", 1)})
        r = s.renew("x", "me", 1, checkpoint={"offset": 4})
        self.assertEqual(r.checkpoint, {"offset": 4})
        with self.assertRaises(leasesvc.LeaseLostError):
            s.renew("x", "me", 7)
        with self.assertRaises(leasesvc.LeaseHeldError) as cm:
            s.acquire("x", "other")
        self.assertEqual(cm.exception.lease.holder, "me")
        rel = s.release("x", "me", 1, checkpoint={"offset": 5})
        self.assertFalse(rel.held)
        self.assertEqual(s.held(), {})
        b = s.acquire("x", "me")
        self.assertEqual(b.fencing_token, 2)
        t = s.transfer("x", "me", 2, "next", reserve=3.0)
        self.assertEqual(t.reserved_for, "next")
        _, m = f.next("transfer")
        self.assertEqual((m["to"], m["reserveMs"], m["fencingToken"]), ("next", 3000, 2))

    def test_an_acquire_answered_after_its_caller_gave_up_is_released(self) -> None:
        from leasesvc.client import _Cancel

        f = self.fake()
        s = self.session(f)
        f.hold_acquires.set()
        cancel = _Cancel()
        errs: List[BaseException] = []

        def acquire() -> None:
            try:
                s._acquire("x", "me", wait=30, cancel=cancel)
            except leasesvc.LeaseError as e:
                errs.append(e)

        t = threading.Thread(target=acquire)
        t.start()
        f.next("acquire")
        cancel.cancel()
        t.join(5)
        self.assertIsInstance(errs[0], leasesvc.UnavailableError)
        f.hold_acquires.clear()  # the service took it after all
        _, m = f.next("release")
        self.assertEqual((m["name"], m["holder"], m["fencingToken"]), ("x", "me", 1))
        f.wait(lambda: not f.leases["x"]["held"])

    def test_close_sends_close_and_the_service_releases(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        s.close()
        f.next("close")
        self.assertFalse(f.lease("x")["held"])
        self.assertTrue(s.closed)
        with self.assertRaises(leasesvc.UnavailableError):
            s.acquire("y", "me")


class UpgradeRefusedTest(SessionTestCase):
    def test_no_sessions_on_404_405_501(self) -> None:
        for status in (404, 405, 501):
            with self.subTest(status=status):
                f = self.fake(answer=refusal(status, "not_found"))
                c = leasesvc.Client(f.url)
                with self.assertRaises(leasesvc.SessionsUnsupportedError) as cm:
                    c.open_session()
                self.assertEqual(cm.exception.status, status)

    def test_other_refusals_are_typed(self) -> None:
        for status, code, cls in ((401, "unauthenticated", leasesvc.UnauthenticatedError),
                                  (429, "resource_exhausted", leasesvc.RateLimitedError),
                                  (503, "unavailable", leasesvc.UnavailableError)):
            with self.subTest(status=status):
                f = self.fake(answer=refusal(status, code))
                with self.assertRaises(cls):
                    leasesvc.Client(f.url).open_session()

    def test_bearer_token_in_the_upgrade(self) -> None:
        f = self.fake()
        c = leasesvc.Client(f.url, token="s3cret")
        self.addCleanup(c.close)
        c.open_session().close()
        hs = f.server.handshakes.get(timeout=5)
        self.assertEqual(hs.headers.get("authorization"), "Bearer s3cret")


class ReconnectTest(SessionTestCase):
    def test_a_dropped_socket_is_resumed_with_the_leases(self) -> None:
        f = self.fake()
        s = self.session(f, window=0.4)
        s.acquire("x", "me")
        first = s.deadline() or 0
        f.conn(0).drop()
        i, m = f.next("resume")
        self.assertEqual(i, 1)
        self.assertEqual(m["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}])
        self.assertEqual((m["sessionId"], m["epoch"]), (f.conn(0).sid, 2))
        self.assertEqual(m["windowMs"], 400)
        f.wait(lambda: f.count("heartbeat", conn=1) >= 2)
        self.assertGreater(s._wait_deadline(first, 5) or 0, first, "acks on the new socket move the deadline")
        self.assertEqual((s.resumes, s.epoch, s.held()), (1, 2, {"x": ("me", 1)}))
        self.assertEqual(s.renew("x", "me", 1).fencing_token, 1, "requests go to the new socket")

    def test_reconnects_until_the_service_answers_again(self) -> None:
        f = self.fake()
        s = self.session(f, window=0.4)
        s.acquire("x", "me")
        ok = f.server.answer
        f.server.answer = refusal(503, "unavailable")
        f.conn(0).drop()
        for _ in range(3):  # the open's, then two refused upgrades: retried
            f.server.handshakes.get(timeout=10)
        f.server.answer = ok
        _, m = f.next("resume")
        self.assertEqual(m["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}])
        f.wait(lambda: s.resumes == 1 and s.held() == {"x": ("me", 1)})

    def test_a_silent_socket_is_replaced(self) -> None:
        from unittest import mock

        f = self.fake()
        with mock.patch("leasesvc._session_sockets.SILENT_MIN", 0.5):
            s = self.session(f, window=0.2)
            s.acquire("x", "me")
            f.acking = False  # nothing arrives any more: a half-open connection looks the same
            i, m = f.next("resume")
        self.assertEqual((i, m["epoch"]), (1, 2))
        self.assertEqual(m["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}])
        f.wait(lambda: f.conn(0).ended.is_set())
        f.wait(lambda: s.epoch == 2 and f.count("heartbeat", conn=1) >= 1)

    def test_a_service_that_no_longer_offers_sessions_closes_the_session(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        got, ev = self.watch(s, "x", 1)
        f.server.answer = refusal(404, "not_found")
        f.conn(0).drop()
        self.assertTrue(ev.wait(10))
        self.assertEqual(got[0][0], "lost")
        f.wait(lambda: s.closed)

    def test_a_lease_the_resume_reports_lost_is_pushed(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        s.acquire("y", "me")
        got, ev = self.watch(s, "x", 1)
        f.lost_on_resume = ["x"]
        f.conn(0).drop()
        self.assertTrue(ev.wait(10))
        self.assertEqual(got[0][0], "lost")
        self.assertEqual((got[0][1]["name"], got[0][1]["reason"]), ("x", "taken"))
        f.wait(lambda: len(f.conns) == 2 and f.count("heartbeat", conn=1) >= 1)
        self.assertEqual(s.held(), {"y": ("me", 1)})

    def test_a_session_the_service_ended_is_over_for_good(self) -> None:
        """Rule L2: a resume answered session_not_found ends the session:
        its leases are lost, it is closed, and it never opens itself again
        (its owner opens a new one)."""
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        got, ev = self.watch(s, "x", 1)
        f.refuse_resume = "session_not_found"
        f.conn(0).drop()
        self.assertTrue(ev.wait(10))
        self.assertEqual(got[0][0], "lost")
        self.assertEqual(got[0][1]["reason"], "expired")
        f.wait(lambda: s.closed)
        self.assertEqual(s.ended, "expired")
        self.assertEqual(s.held(), {})
        f.refuse_resume = ""
        with self.assertRaises(leasesvc.UnavailableError):
            s.acquire("z", "me")
        self.assertEqual(f.count("open"), 1, "the session did not open itself anew")
        self.assertEqual(len(f.conns), 2, "no socket after the refused resume")

    def test_move_resumes_on_a_new_socket_before_closing_the_old(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.wait(lambda: f.conn(0).ended.is_set())
        order = [(i, t) for i, t in f.log if t in ("resume", "END")]
        self.assertEqual(order[:2], [(1, "resume"), (0, "END")], "make before break")
        self.assertNotIn("close", f.conn(0).types(), "a move closes the old socket without close")
        self.assertEqual(f.conn(0).close_frame, 1000)
        f.wait(lambda: f.count("heartbeat", conn=1) >= 1)
        self.assertEqual((s.resumes, s.held()), (1, {"x": ("me", 1)}))
        self.assertEqual(len(f.conns), 2, "the old socket's end after a move is no drop")


class ResumeRaceTest(SessionTestCase):
    """A resume replaces a socket whose instance does not know yet that it
    lost the session: it still answers and acks (docs/contract.md §14)."""

    def beat(self, f: FakeSessionService, s: Session) -> Dict[str, Any]:
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        return f.conn().received[-1]

    def after(self, f: FakeSessionService, conn: int, msg_id: int) -> List[str]:
        """The types of what ``conn`` received with an id above ``msg_id``
        (ids go out in increasing order over every socket)."""
        return [str(m.get("type")) for m in list(f.conn(conn).received) if int(m.get("id") or 0) > msg_id]

    def test_an_acquire_answered_on_the_old_socket_after_a_resume_began_is_acquired_again(self) -> None:
        # R2: the resume's snapshot came before the answer, so the new
        # instance never claimed the holding: not led until the new socket
        # answers for it.
        f = self.fake()
        s = self.session(f)
        f.hold_acquires.set()
        f.hold_resumes.set()
        got: Dict[str, Any] = {}
        done = threading.Event()

        def acquire() -> None:
            try:
                got["lease"] = s.acquire("x", "me", metadata={"k": 1}, wait=2.0)
            except leasesvc.LeaseError as e:
                got["err"] = e
            done.set()

        threading.Thread(target=acquire, daemon=True).start()
        i, first = f.next("acquire")
        self.assertEqual((i, first["waitMs"]), (0, 2000))
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        i, r = f.next("resume")
        self.assertEqual((i, r["leases"]), (1, []), "the resume's snapshot came before the acquire's answer")
        f.hold_acquires.clear()  # the old instance answers now, after the resume began
        f.wait(lambda: s.held() == {"x": ("me", 1)})  # kept in the table, so that a later resume lists it
        f.hold_acquires.set()
        f.hold_resumes.clear()
        i, again = f.next("acquire")
        self.assertEqual(i, 1, "acquired again through the socket of the resume")
        self.assertEqual((again["name"], again["holder"], again["metadata"]), ("x", "me", {"k": 1}))
        self.assertNotIn("waitMs", again, "the second acquire does not wait")
        self.assertFalse(done.is_set(), "the caller got the lease before the new socket answered for it")
        f.hold_acquires.clear()
        self.assertTrue(done.wait(10))
        self.assertNotIn("err", got)
        self.assertEqual((got["lease"].fencing_token, s.held()), (1, {"x": ("me", 1)}))

    def test_an_unvouched_acquire_that_runs_out_of_time_is_released(self) -> None:
        # R2: the caller's timeout bounds the acquiring again; then the
        # holding is released and the error reported.
        f = self.fake()
        s = self.session(f)
        s._c.request_timeout = 1.0  # the caller's timeout: 1.5 s with the wait
        f.hold_acquires.set()
        f.hold_resumes.set()
        errs: List[BaseException] = []
        done = threading.Event()

        def acquire() -> None:
            try:
                s._acquire("x", "me", wait=0.5)
            except leasesvc.LeaseError as e:
                errs.append(e)
            done.set()

        threading.Thread(target=acquire, daemon=True).start()
        f.next("acquire")
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.next("resume")
        f.hold_acquires.clear()  # answered after the resume began
        f.wait(lambda: s.held() == {"x": ("me", 1)})
        f.hold_acquires.set()  # the new socket never answers the second acquire
        f.hold_resumes.clear()
        i, _ = f.next("acquire")
        self.assertEqual(i, 1)
        self.assertTrue(done.wait(10))
        self.assertIsInstance(errs[0], leasesvc.UnavailableError)
        i, m = f.next("release")
        self.assertEqual((i, m["name"], m["holder"], m["fencingToken"]), (1, "x", "me", 1))
        self.assertFalse(f.lease("x")["held"])
        self.assertEqual(s.held(), {})

    def test_no_heartbeat_on_the_old_socket_once_a_resume_was_sent(self) -> None:
        # R3: the new instance may own the session from the resume on and
        # count its window from its last message; the old one still acks.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        s.acquire("x", "me")
        self.beat(f, s)
        self.assertAlmostEqual(s._wait_deadline(0, 5) or 0, 100.9)
        f.acking = False
        clock.t = 100.5
        before = self.beat(f, s)  # sent before the resume, acked after it: counts for nothing (A2)
        f.hold_resumes.set()
        clock.t = 101.0
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        _, r = f.next("resume")  # sent at 101.0, not answered yet
        f.acking = True
        clock.t = 101.5
        self.assertFalse(s._heartbeat(), "a heartbeat went to the old socket after the resume was sent")
        f.push({"type": "ack", "re": before["id"]}, conn=0)
        f.wait(lambda: before["id"] not in s._hb)  # the ack was read
        self.assertAlmostEqual(s.deadline() or 0, 100.9, msg="the retired socket's ack counted")
        self.assertEqual(self.after(f, 0, r["id"]), [])
        f.hold_resumes.clear()
        f.wait(lambda: f.conn(0).ended.is_set())
        clock.t = 102.0
        self.beat(f, s)
        self.assertEqual(f.count("heartbeat", conn=1), 1, "heartbeats go to the new socket")
        self.assertAlmostEqual(s._wait_deadline(100.9, 5) or 0, 102.9)

    def test_a_lost_push_then_the_ack_of_an_earlier_heartbeat_on_a_retired_socket_move_nothing(self) -> None:
        # A2, as the simulation found it: socket 0's instance cannot reach
        # the backend, the session's leases run out and another holder takes
        # x; the instance pushes lost for x, then acks a heartbeat sent
        # before the resume that retired socket 0. The push is ignored (the
        # socket is retired), so the ack must count for nothing too: else
        # the session leads x while the other holder holds it.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        s.acquire("x", "me")
        self.beat(f, s)
        self.assertAlmostEqual(s._wait_deadline(0, 5) or 0, 100.9)
        seen: List[Tuple[str, Dict[str, Any]]] = []
        s._watch("x", 1, lambda kind, msg: seen.append((kind, msg)))
        f.acking = False  # the instance cannot vouch for the leases
        clock.t = 100.5
        before = self.beat(f, s)  # sent on socket 0 before the resume
        f.hold_resumes.set()
        clock.t = 101.0
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.next("resume")  # sent on socket 1 at 101.0: socket 0 is retired
        clock.t = 101.5
        f.push({"type": "lost", "name": "x", "fencingToken": 1, "reason": "expired"}, conn=0)
        f.push({"type": "ack", "re": before["id"]}, conn=0)
        f.wait(lambda: before["id"] not in s._hb)  # the ack was read, after the push
        self.assertAlmostEqual(s.deadline() or 0, 100.9, msg="the retired socket's ack moved the deadline")
        self.assertEqual(s.held(), {"x": ("me", 1)}, "the retired socket's push counted")
        self.assertEqual(seen, [], "the retired socket's push or ack reached a watcher")
        # The resume says what is held: another holder has x now.
        with f.lock:
            f.lost_on_resume.append("x")
        f.hold_resumes.clear()
        f.wait(lambda: f.conn(0).ended.is_set() and s.epoch == 2)
        self.assertEqual(s.held(), {})
        self.assertEqual([k for k, _ in seen], ["lost"])
        f.acking = True
        clock.t = 102.0
        self.beat(f, s)  # on socket 1, current: its ack leads
        self.assertEqual(f.count("heartbeat", conn=1), 1)
        self.assertAlmostEqual(s._wait_deadline(100.9, 5) or 0, 102.9)

    def test_an_ack_on_the_old_socket_of_a_heartbeat_sent_after_the_resume_counts_for_nothing(self) -> None:
        # R3: an ack of a heartbeat sent on a socket after a resume went out
        # on a newer one moves nothing (the heartbeat is forced out on the
        # old socket here, as a racing heartbeat could go).
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        s.acquire("x", "me")
        self.beat(f, s)
        old = s._conn
        assert old is not None
        f.hold_resumes.set()
        clock.t = 101.0
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.next("resume")
        superseded = old.superseded
        self.assertEqual(superseded, 101.0, "the resume's send time")
        clock.t = 101.5
        old.superseded = None
        hb = s._send(old, {"type": "heartbeat"}, heartbeat=True)
        old.superseded = superseded
        f.wait(lambda: f.count("heartbeat", conn=0) == 2)  # acked by the old instance
        f.wait(lambda: hb not in s._hb)  # the ack was read
        self.assertAlmostEqual(s.deadline() or 0, 100.9, msg="the ack of a heartbeat sent after the resume counted")

    def test_a_resume_that_fails_after_it_was_sent_abandons_the_old_socket(self) -> None:
        # R4: the resume's outcome is unknown (the new instance may own the
        # session): the old socket is closed and the session resumes again.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock, request_timeout=0.5)
        s.acquire("x", "me")
        self.beat(f, s)
        f.hold_resumes.set()
        clock.t = 101.0
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        _, r = f.next("resume")  # never answered: the resume times out
        f.wait(lambda: f.conn(0).ended.is_set())
        f.wait(lambda: f.conn(1).ended.is_set())
        f.hold_resumes.clear()
        i, again = f.next("resume")
        self.assertEqual((i, again["leases"]), (2, [{"name": "x", "holder": "me", "fencingToken": 1}]))
        self.assertEqual(s.renew("x", "me", 1).fencing_token, 1)
        self.assertEqual(f.count("renew", conn=2), 1, "requests go to the socket of the new resume")
        self.assertEqual(self.after(f, 0, r["id"]), [], "nothing went to the old socket after the resume")
        self.assertLessEqual(s.deadline() or 0, 101.0 + 0.9)
        self.assertEqual(len(f.conns), 3)


class OrderedResumeTest(SessionTestCase):
    """Every owner in order (docs/contract.md §14, A1 and A2): resumes
    propose increasing epochs in the order sent, the socket of the latest
    resume sent is the only current one, and what a retired socket still
    delivers is ignored."""

    def two_resumes(self, f: FakeSessionService, s: Session) -> str:
        """A move's resume held, then the old socket drops: a second resume
        goes out (sockets 1 and 2). Returns the session id."""
        s.acquire("x", "me")
        sid = f.conn(0).sid
        f.hold_resumes.set()
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        i1, r1 = f.next("resume")
        f.conn(0).drop()  # while the move's resume is out
        i2, r2 = f.next("resume")
        self.assertEqual([(i1, r1["epoch"]), (i2, r2["epoch"])], [(1, 2), (2, 3)], "epochs increase as sent")
        return sid

    def assert_leads_on(self, f: FakeSessionService, s: Session, sid: str, conn: int, epoch: int) -> None:
        """Socket ``conn`` alone is current: heartbeats and requests go to
        it and its acks move the deadline."""
        f.wait(lambda: f.count("heartbeat", conn=conn) >= 1)
        d = s.deadline() or 0
        self.assertGreater(s._wait_deadline(d, 5) or 0, d, "the current socket's acks lead")
        self.assertEqual((f.epoch(sid), s.epoch, s.resumes, s.held()), (epoch, epoch, 1, {"x": ("me", 1)}))
        self.assertEqual(s.renew("x", "me", 1).fencing_token, 1)
        self.assertEqual(f.count("renew", conn=conn), 1, "requests go to the socket of the latest resume")

    def test_two_resumes_in_flight_only_the_later_ones_socket_is_kept(self) -> None:
        # Issue 36 finding 1: whichever answer arrives first, the socket of
        # the latest resume sent is kept; the earlier one's is dropped.
        for first in (1, 2):
            with self.subTest(answered_first=first):
                f = self.fake()
                s = self.session(f)
                sid = self.two_resumes(f, s)
                f.answer_resume(first)
                if first == 1:  # its instance takes the session (2 > 1) and answers resumed: ignored
                    f.wait(lambda: f.conn(1).ended.is_set())
                    self.assertEqual((s.epoch, s.resumes), (1, 0), "the earlier resume's answer was adopted")
                    f.answer_resume(2)
                else:  # the later one first; the earlier one then finds epoch 3: 409, ignored
                    f.wait(lambda: f.count("heartbeat", conn=2) >= 1)
                    f.answer_resume(1)
                    f.wait(lambda: f.conn(1).ended.is_set())
                self.assertEqual(f.conn(1).types(), ["resume"], "nothing else (no heartbeat, no close) went to it")
                self.assert_leads_on(f, s, sid, 2, 3)
                self.assertEqual(len(f.conns), 3)

    def test_a_late_resumed_after_the_later_resume_succeeded_is_ignored(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        sid = f.conn(0).sid
        f.hold_output = True  # the move's socket holds back its answer
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.next("resume")
        f.wait(lambda: f.epoch(sid) == 2)  # its instance took the session; the answer waits
        f.hold_output = False
        f.conn(0).drop()
        _, r = f.next("resume")
        self.assertEqual(r["epoch"], 3)
        f.wait(lambda: s.epoch == 3 and f.count("heartbeat", conn=2) >= 1)
        f.conn(1).flush()  # the earlier resume's resumed (epoch 2) arrives now
        f.wait(lambda: f.conn(1).ended.is_set())
        self.assertEqual(f.conn(1).types(), ["resume"], "the late resumed's socket got nothing more, no close")
        self.assert_leads_on(f, s, sid, 2, 3)

    def test_pushes_from_a_retired_socket_are_ignored(self) -> None:
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        s.acquire("x", "me")
        s.acquire("y", "me")
        gx, _ = self.watch(s, "x", 1)
        gy, _ = self.watch(s, "y", 1)
        f.acking = False
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        hb = f.conn(0).received[-1]["id"]  # sent at 100.0, before the resume
        clock.t = 101.0
        f.hold_resumes.set()
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        f.next("resume")  # sent at 101.0: socket 0 is retired from here on
        for push in ({"type": "lost", "name": "x", "fencingToken": 1, "reason": "taken"},
                     {"type": "revoked", "name": "y", "fencingToken": 1, "reason": "r", "operator": "ops"},
                     {"type": "yield", "name": "x", "fencingToken": 1, "to": "b"},
                     {"type": "move", "reason": "max_age"},
                     {"type": "ack", "re": hb}):  # the ack, read after the pushes, marks them read
            f.push(push, conn=0)
        f.wait(lambda: hb not in s._hb)
        self.assertEqual((gx, gy), ([], []), "a retired socket's push reached a watcher")
        self.assertIsNone(s.deadline(), "the retired socket's ack of a heartbeat sent before the resume counted")
        self.assertEqual(s.held(), {"x": ("me", 1), "y": ("me", 1)})
        f.hold_resumes.clear()
        f.wait(lambda: f.conn(0).ended.is_set() and s.epoch == 2)
        self.assertEqual((len(f.conns), s.held()), (2, {"x": ("me", 1), "y": ("me", 1)}))

    def test_every_resume_proposes_an_epoch_above_every_one_seen_or_proposed(self) -> None:
        f = self.fake()
        s = self.session(f)
        sid = f.conn(0).sid
        f.conn(0).drop()
        self.assertEqual(f.next("resume")[0], 1)
        f.wait(lambda: s.epoch == 2)
        f.hold_resumes.set()
        f.conn(1).drop()
        self.assertEqual(f.next("resume")[0], 2)
        f.conn(2).drop()  # that resume is never answered: its epoch was proposed all the same
        self.assertEqual(f.next("resume")[0], 3)
        f.hold_resumes.clear()
        f.wait(lambda: s.epoch == 4)
        with f.lock:
            f.sessions[sid]["epoch"] = 9  # the service has seen epoch 9 (say, a resume the agent forgot)
        f.conn(3).drop()
        f.wait(lambda: s.epoch == 10)  # 5 was refused 409 session_conflict (epoch 9): resumed again above it
        epochs = [m["epoch"] for _, m in sorted((c.index, m) for c in f.conns for m in c.received
                                                if m["type"] == "resume")]
        self.assertEqual(epochs, [2, 3, 4, 5, 10])
        self.assertEqual((f.epoch(sid), s.resumes), (10, 3))


class EndingAcrossResumesTest(SessionTestCase):
    """A release cut off by its socket's session (docs/contract.md §14,
    step 6) stays in the table and goes again through the resumed session."""

    def release_async(self, s: Session) -> Tuple[Dict[str, Any], threading.Event]:
        got: Dict[str, Any] = {}
        done = threading.Event()

        def release() -> None:
            try:
                got["lease"] = s.release("x", "me", 1)
            except leasesvc.LeaseError as e:
                got["err"] = e
            done.set()

        threading.Thread(target=release, daemon=True).start()
        return got, done

    def test_a_release_answered_503_is_sent_again_through_the_resumed_session(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        sid = f.conn(0).sid
        old = s._conn
        assert old is not None
        f.hold_releases.set()
        got, done = self.release_async(s)
        self.assertEqual(f.next("release")[0], 0)
        f.hold_output = True  # the move's resume is handled, its answer held back
        f.push({"type": "move", "reason": "shutdown"}, conn=0)
        _, r = f.next("resume")
        self.assertEqual(r["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}], "still in the table")
        f.wait(lambda: f.epoch(sid) == 2)
        f.hold_releases.clear()  # socket 0's instance no longer owns the session: 503
        f.wait(lambda: not old.pending)  # that answer was read
        self.assertFalse(done.is_set() or f.conn(0).ended.is_set())
        f.conn(1).flush()
        i, m = f.next("release")
        self.assertEqual((i, m["name"], m["holder"], m["fencingToken"]), (1, "x", "me", 1))
        self.assertTrue(done.wait(10))
        self.assertNotIn("err", got)
        self.assertFalse(got["lease"].held)
        self.assertEqual((s.held(), f.lease("x")["held"]), ({}, False))

    def test_a_release_cut_off_by_a_drop_is_sent_again_after_the_resume(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        f.hold_releases.set()
        got, done = self.release_async(s)
        self.assertEqual(f.next("release")[0], 0)
        f.conn(0).drop()
        _, r = f.next("resume")
        self.assertEqual(r["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}])
        self.assertEqual(f.next("release")[0], 1)
        f.hold_releases.clear()
        self.assertTrue(done.wait(10))
        self.assertFalse(got["lease"].held)
        self.assertEqual((s.held(), f.lease("x")["held"]), ({}, False))

    def test_a_release_whose_holding_the_resume_reports_lost_is_not_sent_again(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        f.hold_releases.set()
        got, done = self.release_async(s)
        f.next("release")
        f.lost_on_resume = ["x"]
        f.conn(0).drop()
        self.assertTrue(done.wait(10))
        self.assertIsInstance(got.get("err"), leasesvc.LeaseLostError)
        self.assertEqual((f.count("release"), s.held()), (1, {}))


class PushTest(SessionTestCase):
    def test_pushes_go_to_the_watcher_of_that_lease(self) -> None:
        f = self.fake()
        s = self.session(f)
        s.acquire("x", "me")
        s.acquire("y", "me")
        gx, ex = self.watch(s, "x", 1)
        gy, ey = self.watch(s, "y", 1)
        f.push({"type": "yield", "name": "x", "fencingToken": 1, "to": "boss"})
        f.push({"type": "revoked", "name": "y", "fencingToken": 1, "reason": "maintenance", "operator": "ops"})
        self.assertTrue(ex.wait(5) and ey.wait(5))
        self.assertEqual([(k, m.get("to")) for k, m in gx], [("yield", "boss")])
        self.assertEqual([(k, m.get("operator")) for k, m in gy], [("revoked", "ops")])
        self.assertEqual(s.held(), {"x": ("me", 1)}, "a revoked lease is no longer held")
        f.push({"type": "lost", "name": "x", "fencingToken": 9, "reason": "taken"})  # another holding's
        f.push({"type": "lost", "name": "x", "fencingToken": 1, "reason": "released"})
        f.wait(lambda: len(gx) == 2)
        self.assertEqual(gx[1][1]["reason"], "released")
        self.assertEqual(s.held(), {})


if __name__ == "__main__":
    unittest.main()
