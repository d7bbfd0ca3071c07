"""The :class:`Term`: one holding of the lease, from its acquire until the
Elector stops leading on it. The :class:`~leasesvc.Holding` that a
:class:`~leasesvc.Keeper` returned keeps the lease (by plain renewals or
through a session) and owns its deadline; the term follows that deadline,
less ``cancel_before``, as an explicit phase, and writes the checkpoints
set on it; the :class:`~leasesvc.Elector`'s campaign decides when to lead
and when to stop (as etcd's ``concurrency.Session`` keeps the lease alive
beside its ``Election``). The term knows nothing of the Elector.

Phases, as the Go and TypeScript SDKs name them:
:data:`RENEWING` (the holding is this Elector's, its keeper moves the
deadline), :data:`STOPPED` (the term stopped while the service may still
count the holding as this Elector's: the deadline passed or a renew was
refused for good; a release may still end it early), :data:`GONE` (the
service ended the holding: lost, revoked or transferred; nothing to
release), :data:`RELEASED`."""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import AccessDeniedError, InvalidArgumentError, LeaseLostError, SafeDeadlineError
from .holding import Holding
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

    def __init__(self, lease: Lease, holding: Optional[Holding] = None,
                 state: Optional["TermState"] = None) -> None:
        self.token = lease.fencing_token
        self.lease = lease
        self.proof = lease.proof
        self.ended = threading.Event()
        self.cause: Optional[BaseException] = None
        self.ended_at: Optional[float] = None
        self.checkpoint: Optional[Dict[str, Any]] = lease.checkpoint
        self.checkpoint_token = lease.checkpoint_token if lease.checkpoint is not None else 0
        #: The :class:`~leasesvc.Holding` that keeps the term's lease
        #: (``holding.deadline``: when leading on it must stop at the latest).
        self.holding = holding
        self._state = state if state is not None else TermState()

    @property
    def leading(self) -> bool:
        """Whether the term still lasts."""
        return not self.ended.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the term ends or ``timeout`` seconds pass; True when it
        ended."""
        return self.ended.wait(timeout)

    @property
    def phase(self) -> str:
        """Where the term's holding stands: :data:`RENEWING`,
        :data:`STOPPED`, :data:`GONE` or :data:`RELEASED`."""
        return self._state.phase


class TermState:
    """The phase machine of one term, which the Elector's lead loop alone
    drives (under its condition): the phase, the deadline less
    cancel_before that the holding's keeper moves, the checkpoint renews
    and the succession flags. Not part of the public API."""

    def __init__(self) -> None:
        self.pending: Optional[Dict[str, Any]] = None  # the latest checkpoint not yet known stored
        self.gen = 0  # counts checkpoints set, so a renew clears only what it sent
        self.closed: Optional[BaseException] = None  # why the holding takes no more checkpoints
        self.transferred = False
        self.yield_to = ""  # set once a renew asked this term to step down
        self.yield_ready = False  # on_yield_requested returned
        # The phase machine, owned by the Elector's lead loop.
        self.phase = RENEWING
        self.stop_at = 0.0  # the holding's deadline less cancel_before, on the Elector's clock
        self.next_renew = math.inf  # when a renew that writes the pending checkpoint is due
        self.in_flight = False
        self.failures = 0
        self.last_err: Optional[BaseException] = None

    def arm(self, stop_at: float) -> None:
        """Start the term: leading lasts until ``stop_at`` (the holding's
        deadline less cancel_before) and moves with it (:meth:`follow`); no
        renew is due until a checkpoint is."""
        self.phase = RENEWING
        self.stop_at, self.next_renew = stop_at, math.inf

    def follow(self, stop_at: float) -> None:
        """The holding's stop time (:func:`leasesvc.timing.stop_at` of its
        deadline) moved: a later one extends the term while it lasts (a
        term that stopped stays stopped)."""
        if self.phase == RENEWING and stop_at > self.stop_at:
            self.stop_at = stop_at

    def want_write(self, at: float) -> None:
        """A checkpoint waits to be written: the term renews at ``at``
        unless a renew is due sooner."""
        if at < self.next_renew:
            self.next_renew = at

    def written(self, checkpoint: Dict[str, Any]) -> None:
        """The keeper's renewal stored ``checkpoint``: no renew is due for it
        when it is still the pending one."""
        if checkpoint is self.pending:
            self.pending = None
            self.next_renew = math.inf

    def on_gone(self, err: BaseException) -> bool:
        """The keeper told that the holding ended (lost, revoked): nothing
        to renew or release. True when the term still lasted."""
        if self.closed is None:
            self.closed = err
        was = self.phase == RENEWING
        if self.phase in (RENEWING, STOPPED):
            self.phase = GONE
        return was

    def due(self, now: float) -> bool:
        """Whether the loop must act now: the safe deadline passed, or a
        checkpoint's renew is due and none is in flight."""
        return self.phase == RENEWING and (now >= self.stop_at or (not self.in_flight and now >= self.next_renew))

    def wait(self, now: float) -> Optional[float]:
        """How long the loop may sleep before :meth:`due` can change by
        itself; None: until woken."""
        if self.phase != RENEWING:
            return None
        waits = [self.stop_at - now]
        if not self.in_flight:
            waits.append(self.next_renew - now)
        return min(waits)

    def take_renew(self, now: float) -> bool:
        """True, and a renew counts as in flight, when one is due now."""
        if self.phase != RENEWING or self.in_flight or now < self.next_renew:
            return False
        self.in_flight = True
        return True

    def on_transferred(self) -> None:
        """The service handed the holding over: nothing to renew or release."""
        if self.phase in (RENEWING, STOPPED):
            self.phase = GONE

    def stop(self, err: BaseException) -> None:
        """The keeper's renewals were refused for good: the term stops (a
        release may still end the holding)."""
        if self.phase == RENEWING:
            self.phase = STOPPED
        if self.closed is None:
            self.closed = err

    def check_deadline(self, now: float) -> Optional[SafeDeadlineError]:
        """At or past the safe deadline while renewing: the term stops and
        the error to end leadership with is returned."""
        if self.phase != RENEWING or now < self.stop_at:
            return None
        self.phase = STOPPED
        return SafeDeadlineError(self.last_err)

    def on_result(self, r: Optional[Lease], err: Optional[BaseException], at: float,
                   next_interval: Callable[[], float], retry_delay: Callable[[BaseException, int], float],
                   now: float) -> Tuple[str, Any]:
        """Take the answer to the checkpoint's renew sent at ``at``. Returns
        ``("renewed", lease)``, ``("ended", err)`` (lost or refused for
        good: the term stopped), ``("failed", err)`` (retried after
        ``retry_delay``) or ``("", None)`` when the term no longer renews."""
        self.in_flight = False
        if self.phase != RENEWING:
            return "", None
        if err is None and r is not None:
            self.failures = 0  # (the keeper moved the deadline; renew again only for a checkpoint)
            self.next_renew = at + next_interval() if self.pending is not None else math.inf
            return "renewed", r
        assert err is not None
        if isinstance(err, (LeaseLostError, InvalidArgumentError, AccessDeniedError)):
            self.phase = GONE if isinstance(err, LeaseLostError) else STOPPED
            if self.closed is None:
                self.closed = err
            return "ended", err
        self.last_err = err
        self.next_renew = now + retry_delay(err, self.failures)
        self.failures += 1
        return "failed", err
