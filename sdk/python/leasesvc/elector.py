"""``Elector``: campaigns for one lease and keeps it while this process
leads, as the Go SDK's ``client.Elector`` does (docs/contract.md §2, §7),
over a :class:`~leasesvc.Keeper` (through a session by default,
docs/contract.md §14). Its terms run in :mod:`leasesvc._lead`; its
defaults and causes are in :mod:`leasesvc.leadership`."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from ._lead import Leading
from .backoff import Backoff
from .client import Client, _Cancel
from .errors import (AccessDeniedError, InvalidArgumentError, LeaseError, LeaseHeldError, LeaseLostError,
                     LeaseReservedError, RateLimitedError, SessionForkedError, SessionHeldError)
from .keeper import Holding, Keeper, keeper_for
from .lease import Lease
from .leadership import (DEFAULT_DRIFT_MARGIN, DEFAULT_RENEW_JITTER, DEFAULT_TTL,  # noqa: F401 (re-exported)
                         DEFAULT_WAIT, MAX_CHECKPOINT_BYTES, MAX_PRIORITY, NotLeading, NotLeadingError, Resigned,
                         ResignedError, Stopped, StoppedError, Transferred, TransferredError, Yielded, YieldedError,
                         _encode_checkpoint, _MAX_WAIT, default_cancel_before, default_holder, valid_name)
from .term import Term, TermState

if TYPE_CHECKING:  # pragma: no cover
    from .session import Session


class Elector(Leading):
    """Campaigns for one lease and keeps it while this process leads.

    :meth:`run` (or :meth:`start`, in a thread) acquires the lease, waiting on
    the service (``waitMs``) while another holds it. Once leader it sets
    :attr:`leading`, calls ``on_started_leading(term)`` in a thread of its
    own, renews every ``renew_interval`` (TTL/3, less up to ``renew_jitter``
    of it at random), and ends the term (clears :attr:`leading`, sets
    ``term.ended``) at once when a renew answers ``lease_lost``, and at the
    safe deadline when renewals fail for any reason (timeouts, 5xx, an
    unreachable service). After a lost term it campaigns again. On
    :meth:`stop` it ends the term, waits for ``on_started_leading`` to return
    while it keeps renewing, releases the lease so that a follower takes over
    at once, calls ``on_stopped_leading`` and returns.

    Sessions (docs/contract.md §14): by default the Elector holds its
    lease through the Client's shared session (opened on first use, one per
    Client; ``session=`` passes another, ``plain_renewals=True`` opts out).
    The acquire, the release and checkpoint writes then travel over the
    session's socket, the service holds the lease as long as the session's
    heartbeats arrive, a crashed agent's lease frees within the session's
    window, and the term ends at the session's deadline (the send time of
    the last acknowledged heartbeat + window × (1 − drift margin), less
    ``cancel_before``, at most a tenth of the window) whatever the socket
    says, and at once when the session reports the lease lost or revoked.
    Against a service without sessions (404, 405 or 501 at the upgrade) it
    falls back to plain renewals. It logs which it uses ("holding through a
    session (window 1s)" or "plain renewals").

    Guarantee (plain renewals): the term ends no later than (local monotonic time when the
    last successful acquire or renew was sent) + TTL × (1 − drift_margin) −
    cancel_before. The service decided that holding's expiry after that
    send, so nobody else can start before it, provided the local clock and
    the backend's run at rates within ``drift_margin`` and this process is
    not paused. A paused process can still act late: hence the fencing
    token on every downstream write. The Elector never compares a local
    clock with a server time. Callbacks run only as long as they honour
    ``term.ended``: the Elector cannot stop code that ignores it.

    Args:
        client: the :class:`~leasesvc.Client` to call.
        name: the lease.
        holder: this participant's identity; default ``{hostname}-{pid}``.
        ttl: the lease duration, seconds (whole milliseconds).
        renew_interval: seconds from a successful acquire or renew to the
            next renew; default TTL/3. It plus ``cancel_before`` must stay
            below TTL × (1 − drift_margin).
        renew_jitter: fraction of ``renew_interval``, 0 … 0.5, by which each
            renew comes early at random.
        drift_margin: fraction of the TTL given up to clock-rate
            differences, 0.01 … 0.5.
        cancel_before: how long before the safe deadline the term ends when
            renewals keep failing, seconds. Default min(250 ms, TTL/10): a
            Python thread can wake late on a loaded machine, and the term must
            end before the safe deadline, not just after it. (The Go SDK's
            ``CancelBefore`` is the same knob; its default there is 0.)
        wait: how long one acquire waits on the service for the holding of
            another to end, 0 … 60 s; negative disables waiting (followers
            poll every renew interval).
        retry_backoff: spaces the retries of a failed acquire or renew;
            default initial min(100 ms, TTL/30), max min(5 s, TTL/6).
        release_timeout: bounds the release sent on stop, seconds.
        metadata: a JSON object attached to the lease on every acquire.
        on_started_leading: ``f(term)``, called in a thread of its own when a
            term begins. Stop all leader work when ``term.ended`` is set, and
            return; returning while still leading resigns (the lease is
            released and ``run`` returns). ``None``: nothing runs; the term
            lasts until it is lost or the Elector stops.
        on_stopped_leading: ``f()``, called after every term, once
            ``on_started_leading`` returned (after the release, on stop).
        on_new_leader: ``f(holder)``, called from the run thread whenever
            the holder seen leading changes, this Elector's own included. It
            must not block.
        on_renewed: ``f(lease, sent)``, called from the run thread after each
            successful renew of a term, ``sent`` being the
            :func:`time.monotonic` time the renew was sent. It must not
            block. Through a session a term renews only to write a
            checkpoint: the session's heartbeats keep it.
        priority: 0 … 1000, ranks this Elector among the candidates waiting
            for the lease (docs/contract.md §8): when a holding ends, the
            lease is reserved for a few seconds for the best waiting
            candidate. With priority > 0 or ``preempt`` every acquire
            carries it (the holding records it) and the waiting acquires
            register this Elector as a candidate; with neither (the
            default) the Elector waits unranked, as before.
        preempt: the waiting acquires ask a holder whose holding has a
            strictly lower priority to step down. Needs ``wait`` ≥ 0.
            Nothing is taken by force.
        on_yield_requested: ``f(term, yield_to)``, called in a thread of its
            own, at most once per term, when a renewal answers that the
            preempting candidate ``yield_to`` asks this leader to step down.
            The term still lasts: it may save progress with
            :meth:`set_checkpoint` or :meth:`checkpoint`. When it returns,
            the Elector steps down: it ends the term (cause
            :class:`YieldedError`), waits for ``on_started_leading`` to return,
            releases the lease with the latest checkpoint, calls
            ``on_stopped_leading`` and campaigns again. ``None``: it steps
            down the same way at once.
        logger: receives a line for every gain and loss of leadership and
            every failed call; default ``logging.getLogger("leasesvc")``.
        clock: the monotonic clock, seconds; default :func:`time.monotonic`
            (a session's clock must be the same).
        session: the :class:`~leasesvc.Session` to hold the lease through;
            default the Client's shared session.
        plain_renewals: keep the lease with plain renewals every
            ``renew_interval``, never through a session.
        keeper: the :class:`~leasesvc.Keeper` to hold the lease with
            (excludes ``session`` and ``plain_renewals``); default one built
            from the options above. Its TTL, renewal interval, jitter, drift
            margin, backoff and clock then keep the lease.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        renew_interval: Optional[float] = None,
        renew_jitter: float = DEFAULT_RENEW_JITTER,
        drift_margin: float = DEFAULT_DRIFT_MARGIN,
        cancel_before: Optional[float] = None,
        wait: float = DEFAULT_WAIT,
        retry_backoff: Optional[Backoff] = None,
        release_timeout: float = 5.0,
        metadata: Optional[Dict[str, Any]] = None,
        on_started_leading: Optional[Callable[[Term], None]] = None,
        on_stopped_leading: Optional[Callable[[], None]] = None,
        on_new_leader: Optional[Callable[[str], None]] = None,
        on_renewed: Optional[Callable[[Lease, float], None]] = None,
        priority: int = 0,
        preempt: bool = False,
        on_yield_requested: Optional[Callable[[Term, str], None]] = None,
        logger: Optional[logging.Logger] = None,
        clock: Callable[[], float] = time.monotonic,
        session: Optional["Session"] = None,
        plain_renewals: bool = False,
        keeper: Optional[Keeper] = None,
    ) -> None:
        if client is None:
            raise ValueError("leasesvc.Elector: client is None")
        if not valid_name(name):
            raise ValueError(f"leasesvc.Elector: lease name {name!r} must be 1–128 characters of "
                             "[A-Za-z0-9._-] starting with a letter or digit")
        holder = default_holder() if holder is None else holder
        if not (1 <= len(holder) <= 256 and holder.isprintable()):
            raise ValueError(f"leasesvc.Elector: holder {holder!r} must be 1–256 printable characters")
        if ttl < 0.001:
            raise ValueError(f"leasesvc.Elector: ttl {ttl} must be at least a millisecond")
        if not 0.01 <= drift_margin <= 0.5:
            raise ValueError(f"leasesvc.Elector: drift_margin {drift_margin} must be within 0.01 … 0.5")
        if not 0 <= renew_jitter <= 0.5:
            raise ValueError(f"leasesvc.Elector: renew_jitter {renew_jitter} must be within 0 … 0.5")
        ri = ttl / 3 if renew_interval is None else renew_interval
        cb = default_cancel_before(ttl) if cancel_before is None else cancel_before
        if cb < 0:
            raise ValueError(f"leasesvc.Elector: cancel_before {cb} must not be negative")
        safe = ttl * (1 - drift_margin)
        if ri <= 0 or ri + cb >= safe:
            raise ValueError(f"leasesvc.Elector: renew_interval {ri} must be positive and, with cancel_before "
                             f"{cb}, below ttl × (1 − drift_margin) = {safe}")
        if wait > _MAX_WAIT:
            raise ValueError(f"leasesvc.Elector: wait {wait} must be at most {_MAX_WAIT}")
        if not 0 <= priority <= MAX_PRIORITY:
            raise ValueError(f"leasesvc.Elector: priority {priority} must be within 0 … {MAX_PRIORITY}")
        if preempt and wait < 0:
            raise ValueError("leasesvc.Elector: preempt needs waiting acquires: wait must not be negative")
        if retry_backoff is None:
            initial = max(0.001, min(0.1, ttl / 30))
            retry_backoff = Backoff(initial, max(initial, min(5.0, ttl / 6)), 2.0)
        self._c = client
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.renew_interval = ri
        self.renew_jitter = renew_jitter
        self.drift_margin = drift_margin
        self.cancel_before = cb
        self.wait_on_service = wait
        self.retry_backoff = retry_backoff
        self.release_timeout = release_timeout
        self.metadata = metadata
        self._safe = safe
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._on_renewed = on_renewed
        self.priority = priority
        self.preempt = preempt
        self._on_yield = on_yield_requested
        self._log = logger or logging.getLogger("leasesvc")
        self._clock = clock
        self.plain_renewals = plain_renewals
        #: The :class:`~leasesvc.Keeper` that holds the lease.
        self.keeper = keeper_for(client, keeper, session=session, plain_renewals=plain_renewals, ttl=ttl,
                                 renew_interval=ri, renew_jitter=renew_jitter, drift_margin=drift_margin,
                                 retry_backoff=retry_backoff, release_timeout=release_timeout, clock=clock,
                                 logger=self._log, label=f"leasesvc elector {name} ({holder})",
                                 announce=None if logger is not None else f'elector "{name}"')

        #: Set while this Elector leads; cleared at once when a term ends.
        self.leading = threading.Event()
        self._cond = threading.Condition()
        self._stopping = False
        self._running = False
        self._acquiring: Optional[_Cancel] = None
        self._term: Optional[Term] = None
        self._st: Optional[TermState] = None  # the current term's state
        self._leader: Tuple[str, int] = ("", 0)
        self._thread: Optional[threading.Thread] = None
        self._cb_name = f"leasesvc-leader-{name}-{id(self)}"
        #: The error that ended :meth:`start`'s thread, if any.
        self.error: Optional[BaseException] = None

    # --- state ----------------------------------------------------------

    def is_leader(self) -> bool:
        """Whether this Elector leads now."""
        return self.leading.is_set()

    def token(self) -> Optional[int]:
        """The fencing token of the current term while leading, else None."""
        with self._cond:
            t = self._term
        return t.token if t is not None and t.leading else None

    def term(self) -> Optional[Term]:
        """The current term while leading, else None."""
        with self._cond:
            t = self._term
        return t if t is not None and t.leading else None

    def leader(self) -> Tuple[str, int]:
        """The holder and fencing token last seen leading, this Elector's own
        included; ``("", 0)`` before any was seen."""
        with self._cond:
            return self._leader

    # --- succession (docs/contract.md §8) --------------------------------

    def _open_term(self) -> Tuple[Term, TermState]:
        """The term checkpoints and transfers act on, and its state (under
        _cond)."""
        t, st = self._term, self._st
        if t is None or st is None:
            raise NotLeadingError("leasesvc.Elector: not leading")
        if st.closed is not None:
            raise NotLeadingError(f"leasesvc.Elector: the holding is over: {st.closed}")
        return t, st

    def set_checkpoint(self, value: Dict[str, Any]) -> None:
        """Record ``value``, a JSON object of at most 16 KiB, as the
        checkpoint of the current term. It is written with the next renew,
        or with the release or transfer that ends the term if that comes
        first, and the next holder inherits it (:attr:`Term.checkpoint`). A
        later call replaces a checkpoint not yet written. It costs no
        request. It may be called until ``on_started_leading`` returns, also
        after a graceful stop or a step-down ended the term (the release
        then carries it).

        Raises:
            ValueError: not a JSON object, or too large.
            NotLeadingError: no term, or its holding is lost.
        """
        cp = _encode_checkpoint(value)
        with self._cond:
            t, st = self._open_term()
            st.pending, st.gen = cp, st.gen + 1
            st.want_write(self._clock() + self.renew_interval)
            self._cond.notify_all()
        if t.holding is not None:
            t.holding.stage(cp)  # (the keeper's next renewal of its own, if any, writes it)

    def checkpoint(self, value: Dict[str, Any]) -> Lease:
        """:meth:`set_checkpoint`, then write it at once with a renew of the
        holding and return the renew's answer once the service stored it: a
        successor inherits it even if this process dies now. When the renew
        fails, its error is raised and the checkpoint stays pending (the
        next renew, or the release, sends it).

        Raises:
            ValueError: not a JSON object, or too large.
            NotLeadingError: no term, or its holding is lost.
            LeaseLostError: the holding is over; the term ends at its next renew.
        """
        cp = _encode_checkpoint(value)
        with self._cond:
            t, st = self._open_term()
            st.pending, st.gen = cp, st.gen + 1
            gen = st.gen
        assert t.holding is not None
        lease = t.holding.renew(cp, timeout=self._attempt_timeout())
        with self._cond:
            if st.gen == gen:
                st.pending = None
        return lease

    def transfer(self, to: str, checkpoint: Optional[Dict[str, Any]] = None, *,
                 reserve: Optional[float] = None) -> Lease:
        """Hand the holding over to the holder ``to`` (docs/contract.md §8):
        the service ends the holding now, writes ``checkpoint`` (None: the
        pending one of :meth:`set_checkpoint`, if any) and reserves the lease
        for ``to`` for ``reserve`` seconds (None: the service's 5 s), so that
        ``to``'s acquire gets the next fencing token and the checkpoint.
        Stop acting as leader before calling it: ``to`` may begin as soon as
        the service answered. On success the term ends (cause
        :class:`TransferredError`), no release follows, and once
        ``on_started_leading`` returned the Elector campaigns again as a
        follower. It may be called from ``on_started_leading``. On failure
        the term goes on, unless the holding was lost.

        Raises:
            ValueError: ``to`` is empty or this Elector's own holder, or a
                bad checkpoint.
            NotLeadingError: no term, or its holding is lost.
            LeaseError: the service refused or could not be reached.
        """
        if not to or to == self.holder:
            raise ValueError(f"leasesvc.Elector.transfer: the successor {to!r} must be another holder than {self.holder!r}")
        cp = _encode_checkpoint(checkpoint) if checkpoint is not None else None
        with self._cond:
            t, st = self._open_term()
            if cp is None:
                cp = st.pending
        assert t.holding is not None
        lease = t.holding.transfer(to, reserve, cp, timeout=self.release_timeout)
        with self._cond:
            st.transferred = True
            st.pending = None
            if st.closed is None:
                st.closed = TransferredError(to)
            if t.cause is None:
                t.cause, t.ended_at = TransferredError(to), self._clock()
            self.leading.clear()
            t.ended.set()
            self._cond.notify_all()
        self._log.info("leasesvc elector %s (%s): transferred to %s, fencing token %d", self.name, self.holder, to, t.token)
        return lease

    # --- life cycle -------------------------------------------------------

    def __enter__(self) -> "Elector":
        """``with Elector(...) as e:`` starts it (:meth:`start`) and stops it
        gracefully (:meth:`stop`: the term ends, ``on_started_leading``
        returns, the lease is released) when the block ends, also on an
        exception."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> threading.Thread:
        """Run :meth:`run` in a new thread and return it. An error that ends
        it is kept in :attr:`error`."""

        def target() -> None:
            try:
                self.run()
            except BaseException as e:  # kept for the caller to see
                self.error = e
                self._log.error("leasesvc elector %s: %s", self.name, e)

        t = threading.Thread(target=target, name=f"leasesvc-elector-{self.name}", daemon=True)
        self._thread = t
        t.start()
        return t

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop gracefully: end the term, wait for ``on_started_leading`` to
        return, release the lease. If :meth:`start` started the Elector,
        wait up to ``timeout`` seconds (None: for ever) for its thread,
        unless called from ``on_started_leading`` itself (which must then
        return for the stop to finish)."""
        with self._cond:
            self._stopping = True
            acq = self._acquiring
            self._cond.notify_all()
        if acq is not None:
            acq.cancel()
        t = self._thread
        me = threading.current_thread()
        if t is not None and t is not me and me.name != self._cb_name:
            t.join(timeout)  # (not from the callback: run waits for it to return)

    def run(self) -> None:
        """Campaign and lead until :meth:`stop`, then return.

        Raises:
            InvalidArgumentError, AccessDeniedError: the service refuses the Elector's
                requests for good (a TTL out of its bounds, credentials
                refused, ...).
            SessionForkedError: its session was opened by the process
                this one was forked from.
            RuntimeError: already running, or the client (or the session
                given to it) is closed.
        """
        with self._cond:
            if self._running:
                raise RuntimeError("leasesvc.Elector.run: already running")
            self._running = True
            self._stopping = False
        try:
            while True:
                got = self._campaign()
                if got is None:
                    return
                if self._lead(got):
                    return
        finally:
            with self._cond:
                self._running = False

    # --- campaign -------------------------------------------------------

    def _sleep(self, d: float) -> bool:
        """Wait ``d`` seconds; False when stop() came first."""
        end = self._clock() + d
        with self._cond:
            while not self._stopping:
                left = end - self._clock()
                if left <= 0:
                    return True
                self._cond.wait(left)
        return False

    def _observe(self, lease: Lease) -> None:
        if not lease.held:
            return
        with self._cond:
            changed = lease.holder != self._leader[0]
            self._leader = (lease.holder, lease.fencing_token)
        if changed and self._on_new_leader is not None:
            self._hook("on_new_leader", self._on_new_leader, lease.holder)

    def _jittered(self, d: float) -> float:
        return d - random.random() * self.renew_jitter * d

    def _retry_delay(self, err: BaseException, failures: int) -> float:
        """The backoff, or a 429's Retry-After when longer: the caller's own
        rate limit refuses anything sooner. (A 503's Retry-After is not
        waited for: a leader's safe deadline does not wait.)"""
        d = self.retry_backoff.delay(failures)
        if isinstance(err, RateLimitedError) and err.retry_after > d:
            return err.retry_after
        return d

    def _attempt_timeout(self) -> float:
        return max(0.001, min(self._c.request_timeout, self.renew_interval))

    def _campaign(self) -> Optional[Holding]:
        """Acquire the lease through the keeper; return the holding, or None
        on stop()."""
        failures = 0
        wait = False  # the first acquire, and the first after a failure, does not wait
        while True:
            cancel = _Cancel()
            with self._cond:
                if self._stopping:
                    return None
                self._acquiring = cancel
            w = max(self.wait_on_service, 0.0) if wait else 0.0
            sent = self._clock()
            h: Optional[Holding] = None
            try:
                ranked = self.priority > 0 or self.preempt
                h = self.keeper.hold(self.name, self.holder, metadata=self.metadata, wait=w,
                                     priority=self.priority if ranked else None, preempt=self.preempt and w > 0,
                                     cancel=cancel)
                err: Optional[LeaseError] = None
            except LeaseError as e:
                err = e
            finally:
                with self._cond:
                    self._acquiring = None
                    stopping = self._stopping
            if stopping:
                if h is not None:
                    self._give_up(h)
                return None
            if h is not None:
                self._observe(h.lease)
                return h
            assert err is not None  # (hold returned a holding or raised)
            if isinstance(err, LeaseLostError):
                continue  # it ran out before the keeper confirmed it: campaign again
            if isinstance(err, (LeaseHeldError, LeaseReservedError)):
                failures = 0
                self._observe(err.lease)
                if self.wait_on_service > 0 and (not wait or self._clock() - sent >= self.wait_on_service / 10):
                    wait = True
                    continue  # wait on the service now, or again
                if not self._sleep(self._jittered(self.renew_interval)):
                    return None
            elif isinstance(err, SessionHeldError):
                failures = 0  # another session holds it for this holder: wait as for a holding by another
                self._log.warning("leasesvc elector %s (%s): the lease is held through another session with this "
                                  "holder: %s", self.name, self.holder, err)
                if not self._sleep(self._jittered(self.renew_interval)):
                    return None
            elif isinstance(err, (InvalidArgumentError, AccessDeniedError, SessionForkedError)):
                raise err
            else:
                wait = False
                self._log.warning("leasesvc elector %s (%s): acquire failed: %s", self.name, self.holder, err)
                if not self._sleep(self._retry_delay(err, failures)):
                    return None
                failures += 1

    def _give_up(self, h: Holding) -> None:
        """Release a holding acquired as stop() came."""
        if not h.lease.held or h.lease.holder != self.holder:
            return
        try:
            h.release(timeout=self.release_timeout)
        except LeaseError as e:
            self._log.warning("leasesvc elector %s (%s): release failed: %s", self.name, self.holder, e)
