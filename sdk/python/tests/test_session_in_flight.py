"""Operations in flight (docs/contract.md §14, issue 44 findings 1 and 2),
against the in-process fake of the sessions route on a made-up clock:

* A4: an ack counts for a lease only if it arrived on the current socket
  after that lease's answer; until then the holding is led at most until
  min(the session's deadline, the acquire's send time + leaseTtlMs ×
  (1 − drift margin));
* A5: a ``lost``/``revoked`` for a (name, token) that arrives while an
  acquire of that name is in flight is remembered (held already or not),
  and the ``result`` with that (name, token) is not led;
* A6: from the moment a ``release`` or ``transfer`` is sent the holding is
  not led, whatever the answer; only a refusal of the request itself
  (400, 403, 429) gives the lead back;
* bounds: an epoch or fencing token above 2^53 − 1 from the service is a
  protocol error."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Callable, Dict

import leasesvc
from leasesvc.session import Session

from ._session_server import FakeSessionService
from .test_session import FakeClock, SessionTestCase

TTL = 30.0  # the fake's leaseTtlMs
MARGIN = 0.1  # the manual session's drift margin
MAX_SAFE = 2**53 - 1


class InFlightTestCase(SessionTestCase):
    def beat(self, f: FakeSessionService, s: Session) -> Dict[str, Any]:
        """Send one heartbeat and wait until the fake handled it (and so
        sent its ack, if it acks)."""
        n = f.count("heartbeat")
        self.assertTrue(s._heartbeat())
        f.wait(lambda: f.count("heartbeat") > n)
        return f.conn().received[-1]

    def in_background(self, fn: Callable[[], Any]) -> Dict[str, Any]:
        """Run ``fn`` on a thread; the returned dict gets "value" or "err",
        and "done" (an Event) is set when it returned."""
        out: Dict[str, Any] = {"done": threading.Event()}

        def run() -> None:
            try:
                out["value"] = fn()
            except Exception as e:  # (reported to the test)
                out["err"] = e
            out["done"].set()

        threading.Thread(target=run, daemon=True).start()
        return out

    def finished(self, out: Dict[str, Any]) -> Dict[str, Any]:
        self.assertTrue(out["done"].wait(10), "the call did not return")
        return out


class AcksAfterTheAnswerTest(InFlightTestCase):
    """A4 (issue 44 finding 1): heartbeats acked while an acquire is in
    flight were decided without its lease, so they do not vouch for it."""

    def test_an_acquire_answered_after_acked_heartbeats_is_led_only_by_its_own_send_time(self) -> None:
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        k = leasesvc.Keeper(s._c, session=s, clock=clock)
        f.hold_acquires.set()  # the instance's backend answers late
        out = self.in_background(lambda: k.hold("x", "me"))
        f.next("acquire")  # sent at 100.0
        clock.t = 129.5
        self.beat(f, s)  # acked: the instance's table does not have x yet
        self.assertAlmostEqual(s._wait_deadline(0, 5) or 0, 129.5 + 0.9)
        clock.t = 129.6
        f.hold_acquires.clear()  # the result comes now, 29.6 s after the acquire was sent
        h = self.finished(out)["value"]
        cap = 100.0 + TTL * (1 - MARGIN)  # 127.0: already past
        self.assertAlmostEqual(h.deadline, cap, msg="the holding is led by acks that came before its answer")
        self.assertAlmostEqual(s.deadline_for("x", 1) or 0, cap)
        self.assertAlmostEqual(s.deadline() or 0, 130.4, msg="the session's own deadline is A3's")
        # The first ack after the answer counts for x: A3 from then on.
        clock.t = 130.0
        self.beat(f, s)
        f.wait(lambda: (h.deadline or 0) > cap + 1)
        self.assertAlmostEqual(h.deadline, 130.9)
        self.assertAlmostEqual(s.deadline_for("x", 1) or 0, 130.9)
        k.close()

    def test_an_ack_that_arrives_after_the_answer_counts_whatever_heartbeat_it_answers(self) -> None:
        # A4 counts arrival on the socket, not the heartbeat's send time.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        f.hold_acquires.set()
        out = self.in_background(lambda: s.acquire("x", "me"))
        f.next("acquire")  # sent at 100.0
        f.acking = False
        clock.t = 129.5
        hb = self.beat(f, s)  # sent before the answer, acked after it
        clock.t = 129.6
        f.hold_acquires.clear()
        self.assertEqual(self.finished(out)["value"].fencing_token, 1)
        self.assertIsNone(s.deadline_for("x", 1), "no ack yet at all")
        f.push({"type": "ack", "re": hb["id"]})
        f.wait(lambda: hb["id"] not in s._hb)
        self.assertAlmostEqual(s.deadline_for("x", 1) or 0, 130.4)

    def test_a_lease_listed_by_a_resume_is_counted_by_the_new_sockets_acks(self) -> None:
        # For a lease a resumed lists, every ack on the new socket comes
        # after its answer: A4 adds nothing to A2 there.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        f.hold_acquires.set()
        out = self.in_background(lambda: s.acquire("x", "me"))
        f.next("acquire")
        clock.t = 129.5
        self.beat(f, s)
        clock.t = 129.6
        f.hold_acquires.clear()
        self.finished(out)
        self.assertAlmostEqual(s.deadline_for("x", 1) or 0, 127.0)
        f.conn(0).drop()
        _, r = f.next("resume")
        self.assertEqual(r["leases"], [{"name": "x", "holder": "me", "fencingToken": 1}])
        f.wait(lambda: s.epoch == 2)
        clock.t = 130.0
        self.beat(f, s)
        f.wait(lambda: (s.deadline_for("x", 1) or 0) > 130)
        self.assertAlmostEqual(s.deadline_for("x", 1) or 0, 130.9)

    def test_a_prompt_answer_is_led_by_the_session_deadline(self) -> None:
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        self.beat(f, s)
        k = leasesvc.Keeper(s._c, session=s, clock=clock)
        h = k.hold("x", "me")
        self.assertAlmostEqual(h.deadline, 100.9, msg="min(the session's 100.9, 100 + 27)")
        clock.t = 100.2
        self.beat(f, s)
        f.wait(lambda: (h.deadline or 0) > 101)
        self.assertAlmostEqual(h.deadline, 101.1)
        k.close()


class LostBeforeItsAnswerTest(InFlightTestCase):
    """A5 (issue 44 finding 2): the socket carries ``lost L/1``, then
    ``result L/1``, then acks."""

    def acquire_with_a_push_first(self, push: Dict[str, Any]) -> Dict[str, Any]:
        f, clock = self.fake(), FakeClock(100.0)
        self.f, self.clock = f, clock
        s = self.s = self.manual(f, clock)
        self.beat(f, s)
        k = self.k = leasesvc.Keeper(s._c, session=s, clock=clock)
        self.addCleanup(k.close)
        f.hold_acquires.set()
        out = self.in_background(lambda: k.hold("x", "me"))
        f.next("acquire")
        f.push(push)  # queued before the result
        f.hold_acquires.clear()
        out = self.finished(out)
        clock.t = 100.5
        self.beat(f, s)  # and acks after both
        return out

    def test_a_lost_before_the_result_is_not_led(self) -> None:
        out = self.acquire_with_a_push_first({"type": "lost", "name": "x", "fencingToken": 1, "reason": "taken"})
        self.assertNotIn("value", out, "the holding was led after its lost")
        self.assertIsInstance(out["err"], leasesvc.LeaseLostError)
        self.assertIn("before its acquire's answer", str(out["err"]))
        self.assertEqual(self.s.held(), {}, "a later resume would claim it")
        self.assertEqual(self.f.count("release"), 0, "nothing to release: the lease left the instance's table")

    def test_a_revoked_before_the_result_is_not_led(self) -> None:
        out = self.acquire_with_a_push_first({"type": "revoked", "name": "x", "fencingToken": 1, "reason": "r",
                                              "operator": "ops"})
        self.assertIsInstance(out.get("err"), leasesvc.LeaseLostError)
        self.assertEqual(self.s.held(), {})

    def test_a_lost_of_another_token_or_lease_changes_nothing(self) -> None:
        for push in ({"type": "lost", "name": "x", "fencingToken": 7, "reason": "taken"},
                     {"type": "lost", "name": "y", "fencingToken": 1, "reason": "taken"}):
            with self.subTest(push=push):
                out = self.acquire_with_a_push_first(push)
                self.assertNotIn("err", out)
                h = out["value"]
                self.assertEqual((h.token, h.lost, self.s.held()), (1, False, {"x": ("me", 1)}))
                self.f.wait(lambda: (h.deadline or 0) > 101)
                self.k.close()

    def test_the_memory_ends_with_the_acquire(self) -> None:
        # A lost that came while no acquire of the name was in flight says
        # nothing about a later acquire's answer.
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        self.beat(f, s)
        got, ev = self.watch(s, "x", 1)
        f.push({"type": "lost", "name": "x", "fencingToken": 1, "reason": "taken"})
        self.assertTrue(ev.wait(5))
        self.assertEqual(s.acquire("x", "me").fencing_token, 1)
        self.assertEqual(s.held(), {"x": ("me", 1)})

    def test_a_lost_while_a_repeated_acquire_is_in_flight_is_not_brought_back(self) -> None:
        # The session holds x/1 already; an acquire of x again is in flight
        # when lost x/1 comes, then its result x/1: not led again (A5).
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        self.beat(f, s)
        self.assertEqual(s.acquire("x", "me").fencing_token, 1)
        f.hold_acquires.set()
        out = self.in_background(lambda: s.acquire("x", "me"))
        f.next("acquire")
        f.push({"type": "lost", "name": "x", "fencingToken": 1, "reason": "taken"})
        f.wait(lambda: s._held == {})  # (lock-free read: the push was handled)
        f.hold_acquires.clear()
        out = self.finished(out)
        self.assertNotIn("value", out, "the repeated acquire's result brought the lost holding back")
        self.assertIsInstance(out["err"], leasesvc.LeaseLostError)
        clock.t = 100.5
        self.beat(f, s)
        self.assertEqual(s.held(), {}, "a later resume would claim it")


class LettingGoTest(InFlightTestCase):
    """A6: a release or transfer ends the lead when it is sent."""

    def hold(self) -> "tuple[FakeSessionService, FakeClock, Session, Any]":
        f, clock = self.fake(), FakeClock(100.0)
        s = self.manual(f, clock)
        self.beat(f, s)
        k = leasesvc.Keeper(s._c, session=s, clock=clock)
        self.addCleanup(k.close)
        h = k.hold("x", "me")
        clock.t = 100.2
        self.beat(f, s)
        f.wait(lambda: (h.deadline or 0) > 101)
        self.assertAlmostEqual(h.deadline, 101.1)
        return f, clock, s, h

    def test_a_release_in_flight_is_not_led_whatever_the_acks(self) -> None:
        f, clock, s, h = self.hold()
        f.hold_releases.set()  # the release is under way, unanswered
        clock.t = 100.4
        out = self.in_background(lambda: h.release())
        f.next("release")
        self.assertLessEqual(s.deadline_for("x", 1) or 0, 100.4, "led after its release was sent")
        self.assertLessEqual(h.deadline or 0, 100.4)
        clock.t = 100.5
        self.beat(f, s)  # an ack after the release went out vouches for nothing it ends
        self.assertAlmostEqual(s._wait_deadline(101.2, 5) or 0, 101.4)
        self.assertLessEqual(s.deadline_for("x", 1) or 0, 100.4)
        self.assertLessEqual(h.deadline or 0, 100.4)
        f.hold_releases.clear()
        self.assertNotIn("err", self.finished(out))

    def test_a_refusal_of_the_release_itself_gives_the_lead_back(self) -> None:
        for status, code, err in ((400, "invalid_argument", leasesvc.InvalidArgumentError),
                                  (403, "permission_denied", leasesvc.PermissionDeniedError),
                                  (429, "resource_exhausted", leasesvc.RateLimitedError)):
            with self.subTest(status=status):
                f, clock, s, h = self.hold()
                f.release_problem = {"status": status, "code": code, "detail": code}
                with self.assertRaises(err):
                    h.release()
                self.assertAlmostEqual(s.deadline_for("x", 1) or 0, 101.1, msg="nothing was written")
                clock.t = 100.5
                self.beat(f, s)
                f.wait(lambda: (h.deadline or 0) > 101.2)
                self.assertAlmostEqual(h.deadline, 101.4)


class BoundsTest(InFlightTestCase):
    """Bounds (d): the service sends no epoch or token above 2^53 − 1."""

    def test_a_fencing_token_above_2_53_is_a_protocol_error(self) -> None:
        f = self.fake()
        s = self.session(f)
        with f.lock:
            f.leases["x"] = {"name": "x", "holder": "me", "fencingToken": MAX_SAFE + 1, "ttlMs": 30000,
                             "held": True, "transitions": 1, "metadata": {}, "session": True,
                             "sessionWindowMs": 1000, "_sid": f.conn(0).sid}
        with self.assertRaises(leasesvc.InternalError) as cm:
            s.acquire("x", "me")
        self.assertIn("2^53", str(cm.exception))
        self.assertEqual(s.held(), {}, "the holding was taken")
        with f.lock:
            f.leases["x"]["fencingToken"] = MAX_SAFE  # the largest the service sends
        self.assertEqual(s.acquire("x", "me").fencing_token, MAX_SAFE)

    def test_an_epoch_above_2_53_is_never_adopted_or_proposed(self) -> None:
        f = self.fake()
        s = self.session(f, window=0.2)
        sid = f.conn(0).sid
        with f.lock:
            f.sessions[sid]["epoch"] = MAX_SAFE + 1  # a resume is refused 409 naming it
        f.conn(0).drop()
        f.wait(lambda: f.count("resume") >= 3 or s.epoch > MAX_SAFE)  # (refused, resumed again) or adopted
        epochs = [m["epoch"] for c in f.conns for m in list(c.received) if m["type"] == "resume"]
        self.assertTrue(all(e <= MAX_SAFE for e in epochs), epochs)
        self.assertLessEqual(s.epoch, MAX_SAFE)
        self.assertEqual(f.epoch(sid), MAX_SAFE + 1, "a resume took the session")


if __name__ == "__main__":
    unittest.main()
