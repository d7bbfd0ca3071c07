"""The :class:`Term`: one holding of the lease, from its acquire until the
Elector stops leading on it. It keeps the holding's safe deadline and
renewal schedule as an explicit phase; the :class:`~leasesvc.Elector`'s
campaign decides when to lead and when to stop (as etcd's
``concurrency.Session`` keeps the lease alive beside its ``Election``).

Phases, as the Go and TypeScript SDKs name them:
:data:`RENEWING` (the holding is this Elector's, renewals move its safe
deadline), :data:`STOPPED` (the term stopped renewing while the service
may still count the holding as this Elector's: the safe deadline passed or
a renew was refused for good; a release may still end it early),
:data:`GONE` (the service ended the holding: lost, revoked or transferred;
nothing to release), :data:`RELEASED`.

A term held through a session (docs/contract.md §14) does not renew to
stay alive: its safe deadline follows the session's (the send time of the
last acknowledged heartbeat + window × (1 − drift margin), less
``cancel_before``), and it renews only to write a checkpoint."""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import AccessDeniedError, InvalidArgumentError, LeaseLostError, SafeDeadlineError
from .lease import Lease

#: The holding is this Elector's; the term renews it.
RENEWING = "renewing"
#: The term stopped renewing; a release may still end the holding.
STOPPED = "stopped"
#: The service ended the holding: nothing to release.
GONE = "gone"
#: The Elector released the holding.
RELEASED = "released"


class Term:
    """One term of leadership, given to ``on_started_leading``.

    Attributes:
        token: the fencing token of the term: pass it with every write
            downstream, which must refuse tokens lower than the highest it
            has seen.
        lease: the lease as the acquire that began the term answered it.
        proof: the term's fencing proof (docs/contract.md §17), ``lease.proof``:
            send it, rather than the bare token, with every write to a sink
            that verifies proofs (:mod:`leasesvc.fence`); "" from a service
            without proofs.
        ended: a :class:`threading.Event` set the moment leadership ends.
        cause: why it ended (:class:`~leasesvc.LeaseLostError`,
            :class:`~leasesvc.SafeDeadlineError`, :class:`StoppedError`, ...), ``None``
            while leading.
        ended_at: the Elector's monotonic clock when the term ended, ``None``
            while leading.
        checkpoint: the checkpoint the term inherited (docs/contract.md §8):
            the JSON object its predecessor (or an earlier term) last wrote,
            as the acquire answered it; ``None`` when there is none. Resume
            the work from it.
        checkpoint_token: the fencing token of the holding that wrote
            ``checkpoint``; 0 without one.
    """

    def __init__(self, lease: Lease) -> None:
        self.token = lease.fencing_token
        self.lease = lease
        self.proof = lease.proof
        self.ended = threading.Event()
        self.cause: Optional[BaseException] = None
        self.ended_at: Optional[float] = None
        self.checkpoint: Optional[Dict[str, Any]] = lease.checkpoint
        self.checkpoint_token = lease.checkpoint_token if lease.checkpoint is not None else 0
        # Guarded by the Elector's condition.
        self._pending: Optional[Dict[str, Any]] = None  # the latest checkpoint not yet known stored
        self._gen = 0  # counts checkpoints set, so a renew clears only what it sent
        self._closed: Optional[BaseException] = None  # why the holding takes no more checkpoints
        self._transferred = False
        self._yield_to = ""  # set once a renew asked this term to step down
        self._yield_ready = False  # on_yield_requested returned
        # The renewal state machine, owned by the Elector's lead loop.
        self._phase = RENEWING
        self._span = 0.0  # how long past a successful send leading may last
        self._stop_at = 0.0  # the safe deadline less cancel_before, on the Elector's clock
        self._next_renew = 0.0
        self._in_flight = False
        self._failures = 0
        self._last_err: Optional[BaseException] = None
        self._session = False  # held through a session: the deadline follows its heartbeats
        self._via: Optional[Any] = None  # that Session (the Elector's)

    @property
    def leading(self) -> bool:
        """Whether the term still lasts."""
        return not self.ended.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the term ends or ``timeout`` seconds pass; True when it
        ended."""
        return self.ended.wait(timeout)

    # --- the renewal state machine (the Elector's lead loop only) -------

    def _arm(self, sent: float, span: float, first_renew: float) -> None:
        """Start renewing a holding confirmed by a request sent at ``sent``:
        leading may last ``span`` seconds past a successful send, and the
        first renew is due at ``first_renew``."""
        self._phase, self._span = RENEWING, span
        self._stop_at, self._next_renew = sent + span, first_renew

    def _arm_session(self, stop_at: float) -> None:
        """Start a term held through a session: leading lasts until
        ``stop_at`` (the session's deadline less cancel_before) and moves
        with it (:meth:`_follow`); no renew is due until a checkpoint is."""
        self._phase, self._session = RENEWING, True
        self._stop_at, self._next_renew = stop_at, math.inf

    def _follow(self, stop_at: float) -> None:
        """The session's deadline moved: a later one extends the term while
        it renews (a term that stopped stays stopped)."""
        if self._session and self._phase == RENEWING and stop_at > self._stop_at:
            self._stop_at = stop_at

    def _want_write(self, at: float) -> None:
        """A checkpoint waits to be written: a session term renews at ``at``
        unless a renew is due sooner."""
        if self._session and at < self._next_renew:
            self._next_renew = at

    def _on_gone(self, err: BaseException) -> bool:
        """The session told that the holding ended (lost, revoked): nothing
        to renew or release. True when the term still renewed."""
        if self._closed is None:
            self._closed = err
        was = self._phase == RENEWING
        if self._phase in (RENEWING, STOPPED):
            self._phase = GONE
        return was

    @property
    def phase(self) -> str:
        """Where the term's holding stands: :data:`RENEWING`,
        :data:`STOPPED`, :data:`GONE` or :data:`RELEASED`."""
        return self._phase

    def _due(self, now: float) -> bool:
        """Whether the loop must act now: the safe deadline passed, or a
        renew is due and none is in flight."""
        return self._phase == RENEWING and (now >= self._stop_at or (not self._in_flight and now >= self._next_renew))

    def _wait(self, now: float) -> Optional[float]:
        """How long the loop may sleep before :meth:`_due` can change by
        itself; None: until woken."""
        if self._phase != RENEWING:
            return None
        waits = [self._stop_at - now]
        if not self._in_flight:
            waits.append(self._next_renew - now)
        return min(waits)

    def _take_renew(self, now: float) -> bool:
        """True, and a renew counts as in flight, when one is due now."""
        if self._phase != RENEWING or self._in_flight or now < self._next_renew:
            return False
        self._in_flight = True
        return True

    def _on_transferred(self) -> None:
        """The service handed the holding over: nothing to renew or release."""
        if self._phase in (RENEWING, STOPPED):
            self._phase = GONE

    def _check_deadline(self, now: float) -> Optional[SafeDeadlineError]:
        """At or past the safe deadline while renewing: the term stops and
        the error to end leadership with is returned."""
        if self._phase != RENEWING or now < self._stop_at:
            return None
        self._phase = STOPPED
        return SafeDeadlineError(self._last_err)

    def _on_result(self, r: Optional[Dict[str, Any]], err: Optional[BaseException], at: float,
                   next_interval: Callable[[], float], retry_delay: Callable[[BaseException, int], float],
                   now: float) -> Tuple[str, Any]:
        """Take the answer to the renew sent at ``at``. Returns
        ``("renewed", lease)``, ``("ended", err)`` (lost or refused for
        good: the term stopped), ``("failed", err)`` (retried after
        ``retry_delay``) or ``("", None)`` when the term no longer renews."""
        self._in_flight = False
        if self._phase != RENEWING:
            return "", None
        if err is None and r is not None:
            self._failures = 0
            if self._session:  # the heartbeats keep it; renew again only for a checkpoint
                self._next_renew = at + next_interval() if self._pending is not None else math.inf
            else:
                self._stop_at = at + self._span
                self._next_renew = at + next_interval()
            return "renewed", Lease.from_json(r)
        assert err is not None
        if isinstance(err, (LeaseLostError, InvalidArgumentError, AccessDeniedError)):
            self._phase = GONE if isinstance(err, LeaseLostError) else STOPPED
            if self._closed is None:
                self._closed = err
            return "ended", err
        self._last_err = err
        self._next_renew = now + retry_delay(err, self._failures)
        self._failures += 1
        return "failed", err
