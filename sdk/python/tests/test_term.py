"""The Term's phase machine, driven by hand on a made-up clock: each phase
(docs/contract.md §2, §8) and what the loop is told to do. The term's
deadline follows what its keeper tells (:meth:`TermState.follow`); its own
renews write checkpoints."""

import unittest

from leasesvc import AccessDeniedError, LeaseLostError, SafeDeadlineError, UnavailableError
from leasesvc.lease import Lease
from leasesvc.term import GONE, RENEWING, STOPPED, Term, TermState

SPAN = 27.0  # TTL 30 s less the 10 % drift margin
INTERVAL = 10.0


def new_term(sent: float = 100.0) -> TermState:
    """A term of a holding with fencing token 7 acquired at ``sent``, with
    a checkpoint to write at ``sent`` + INTERVAL."""
    t = TermState()
    t.arm(sent + SPAN)
    t.pending = {"n": 1}
    t.want_write(sent + INTERVAL)
    return t


def answer(t: TermState, r, err, at: float, now: float):
    """The term's verdict on a renew sent at ``at``, answered at ``now``."""
    lease = Lease.from_json(r) if r is not None else None
    return t.on_result(lease, err, at, lambda: INTERVAL, lambda e, n: 0.5 * (n + 1), now)


class TermPhases(unittest.TestCase):
    """The phases of one term."""

    def test_renewals_move_the_deadline(self) -> None:
        """The keeper's renewals move the safe deadline (to a renew's send
        time + span), never back; the term's own renew writes."""
        t = new_term()
        self.assertEqual(t.phase, RENEWING)
        self.assertFalse(t.due(105.0))
        self.assertAlmostEqual(t.wait(105.0), 5.0)  # the first renew, before the deadline
        self.assertFalse(t.take_renew(105.0))
        self.assertTrue(t.take_renew(110.0))
        self.assertFalse(t.due(111.0), "a renew is in flight: only the deadline is due")
        self.assertAlmostEqual(t.wait(111.0), 16.0)
        kind, lease = answer(t, {"fencingToken": 7, "held": True}, None, 110.0, 110.2)
        self.assertEqual((kind, lease.fencing_token), ("renewed", 7))
        self.assertEqual(t.phase, RENEWING)
        t.follow(110.0 + SPAN)  # the keeper: the renew sent at 110 succeeded
        t.follow(105.0 + SPAN)  # an older one never moves it back
        self.assertIsNone(t.check_deadline(127.5), "past the acquire's deadline, not the renew's")
        self.assertTrue(t.due(137.0))
        self.assertIsInstance(t.check_deadline(137.0), SafeDeadlineError)
        self.assertEqual(t.phase, STOPPED)

    def test_failures_retry_until_the_safe_deadline(self) -> None:
        """Failed renewals retry after the backoff; the safe deadline stops the term."""
        t = new_term()
        self.assertTrue(t.take_renew(110.0))
        kind, err = answer(t, None, UnavailableError("503"), 110.0, 111.0)
        self.assertEqual(kind, "failed")
        self.assertFalse(t.take_renew(111.4))
        self.assertTrue(t.take_renew(111.5), "retried after the backoff")
        answer(t, None, UnavailableError("503"), 111.5, 112.0)
        self.assertFalse(t.take_renew(112.9))
        self.assertTrue(t.take_renew(113.0), "the second retry waits longer")
        deadline = t.check_deadline(127.0)
        self.assertIsInstance(deadline, SafeDeadlineError)
        self.assertEqual(t.phase, STOPPED)
        self.assertEqual(answer(t, {"held": True}, None, 113.0, 127.1), ("", None), "a late answer changes nothing")
        self.assertEqual(t.phase, STOPPED)
        self.assertIsNone(t.wait(128.0))

    def test_lease_lost_is_gone(self) -> None:
        """lease_lost: the holding is gone, nothing more is due."""
        t = new_term()
        t.take_renew(110.0)
        kind, err = answer(t, None, LeaseLostError("lost"), 110.0, 110.1)
        self.assertEqual(kind, "ended")
        self.assertEqual(t.phase, GONE)
        self.assertIs(t.closed, err)
        self.assertIsNone(t.check_deadline(200.0))
        self.assertFalse(t.take_renew(200.0))

    def test_refused_for_good_stops(self) -> None:
        """A refusal for good stops the term but leaves the release possible."""
        t = new_term()
        t.take_renew(110.0)
        kind, err = answer(t, None, AccessDeniedError("no"), 110.0, 110.1)
        self.assertEqual(kind, "ended")
        self.assertEqual(t.phase, STOPPED, "the holding may still be ours: a release may end it")

    def test_transferred_is_gone(self) -> None:
        """A transfer leaves nothing to release, also after the deadline."""
        for stopped_first in (False, True):
            t = new_term()
            if stopped_first:
                t.check_deadline(127.0)
            t.on_transferred()
            self.assertEqual(t.phase, GONE)


    def test_a_write_by_the_keeper_clears_the_pending_checkpoint(self) -> None:
        t = new_term()
        other = {"n": 2}
        t.written(other)
        self.assertIsNotNone(t.pending, "another checkpoint than the pending one")
        t.written(t.pending)  # type: ignore[arg-type]
        self.assertIsNone(t.pending)
        self.assertFalse(t.take_renew(1000.0), "nothing left to write")

    def test_keeper_refusal_stops(self) -> None:
        t = new_term()
        t.stop(AccessDeniedError("no"))
        self.assertEqual(t.phase, STOPPED)
        self.assertIsNone(t.check_deadline(1000.0))


class SessionTermPhases(unittest.TestCase):
    """A term held through a session (docs/contract.md §14): its deadline
    follows the session's acknowledged heartbeats, not renewals."""

    def session_term(self, stop_at: float = 100.65) -> TermState:
        t = TermState()
        t.arm(stop_at)
        return t

    def test_the_deadline_follows_the_session(self) -> None:
        t = self.session_term()
        self.assertFalse(t.take_renew(1000.0), "no renew is due: the heartbeats keep the holding")
        self.assertAlmostEqual(t.wait(100.0), 0.65)
        t.follow(100.9)
        t.follow(100.7)  # an older deadline never moves it back
        self.assertIsNone(t.check_deadline(100.89))
        self.assertIsInstance(t.check_deadline(100.9), SafeDeadlineError)
        self.assertEqual(t.phase, STOPPED)
        t.follow(200.0)
        self.assertEqual(t.phase, STOPPED, "a later ack does not revive a stopped term")
        self.assertIsNone(t.check_deadline(150.0))

    def test_a_renew_only_writes_a_checkpoint(self) -> None:
        t = self.session_term()
        t.pending = {"n": 1}
        t.want_write(100.3)
        self.assertFalse(t.take_renew(100.2))
        self.assertTrue(t.take_renew(100.3))
        t.pending = None  # stored by the renew
        kind, _ = answer(t, {"fencingToken": 7, "held": True}, None, 100.3, 100.4)
        self.assertEqual(kind, "renewed")
        self.assertAlmostEqual(t.wait(100.4), 0.25, msg="a renew does not move a session term's deadline")
        self.assertFalse(t.take_renew(500.0), "nothing more to write")

    def test_a_push_makes_it_gone(self) -> None:
        t = self.session_term()
        self.assertTrue(t.on_gone(LeaseLostError("lost")))
        self.assertEqual(t.phase, GONE)
        self.assertIsNone(t.check_deadline(1000.0))
        self.assertFalse(t.on_gone(LeaseLostError("again")))


class TermTest(unittest.TestCase):
    def test_the_term_shows_its_state_phase_and_holding(self) -> None:
        st = TermState()
        t = Term(Lease.from_json({"name": "svc.term", "holder": "a", "fencingToken": 7, "held": True}), None, st)
        self.assertEqual((t.token, t.phase, t.holding), (7, RENEWING, None))
        st.on_gone(LeaseLostError("lost"))
        self.assertEqual(t.phase, GONE)


if __name__ == "__main__":
    unittest.main()
