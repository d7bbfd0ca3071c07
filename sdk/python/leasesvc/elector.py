"""``Elector``: campaigns for one lease and keeps it while this process
leads, as the Go SDK's ``client.Elector`` does (docs/contract.md §2, §7),
over a :class:`~leasesvc.Keeper`, which decides how the lease is held
(through a session by default, docs/contract.md §14, or by plain
renewals). Its terms run in :mod:`leasesvc._lead`; its defaults, causes
and :class:`Callbacks` are in :mod:`leasesvc.leadership`."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import warnings
from typing import Any, Dict, Optional, Tuple

from ._http import _Cancel
from ._lead import Leading
from .client import Client
from .errors import (AccessDeniedError, InvalidArgumentError, InvalidOptionError, LeaseError, LeaseHeldError,
                     LeaseLostError, LeaseReservedError, SessionForkedError, SessionHeldError)
from .holding import Holding
from .keeper import Keeper
from .lease import Lease
from .leadership import (CALLBACK_NAMES, DEFAULT_DRIFT_MARGIN, DEFAULT_RENEW_JITTER,  # noqa: F401 (re-exported)
                         DEFAULT_TTL, DEFAULT_WAIT, MAX_CHECKPOINT_BYTES, MAX_PRIORITY, Callbacks, NotLeading,
                         NotLeadingError, Resigned, ResignedError, Stopped, StoppedError, Transferred,
                         TransferredError, Yielded, YieldedError, _encode_checkpoint, _MAX_WAIT,
                         default_cancel_before, default_holder, valid_name)
from .term import Term, TermState
from .timing import cancel_before_for

#: The options of :meth:`Elector.for_client` that build its Keeper (the
#: Keeper's alone: the Elector does not take them).
KEEPER_OPTIONS = ("ttl", "renew_interval", "renew_jitter", "drift_margin", "retry_backoff", "release_timeout",
                  "clock", "session", "plain_renewals", "window")
#: The Elector's own options (the keyword arguments of :class:`Elector`).
ELECTOR_OPTIONS = ("holder", "cancel_before", "wait", "metadata", "priority", "preempt", "callbacks", "logger")


class _ElectorType(type):
    """The metaclass of :class:`Elector`, for one release: a call of the
    0.2 form, ``Elector(client, name, ttl=..., on_started_leading=...,
    ...)``, a :class:`~leasesvc.Client` first, goes to
    :meth:`Elector.for_client` with a :class:`DeprecationWarning`, so that
    old call sites keep working while the Elector's own signature takes a
    Keeper and at most ten parameters."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build an Elector; a Client first: the deprecated form, through :meth:`Elector.for_client`."""
        if (args and isinstance(args[0], Client)) or "client" in kwargs:
            warnings.warn("leasesvc.Elector(client, name, ...) is deprecated: use Elector(keeper, name, ...) over a "
                          "leasesvc.Keeper (which takes ttl, session, plain_renewals, clock, ...), or "
                          "Elector.for_client(client, name, ...)", DeprecationWarning, stacklevel=2)
            return cls.for_client(*args, **kwargs)  # type: ignore[attr-defined]
        wrong = sorted(set(kwargs) & (set(KEEPER_OPTIONS) | set(CALLBACK_NAMES) | {"keeper"}))
        if wrong:
            raise TypeError(f"leasesvc.Elector: {', '.join(wrong)} is not an Elector option: the Keeper's options "
                            "(ttl, session, plain_renewals, clock, ...) go to Keeper(...), the callbacks in "
                            "callbacks=Callbacks(...)")
        return super().__call__(*args, **kwargs)


class Elector(Leading, metaclass=_ElectorType):
    """Campaigns for one lease and keeps it while this process leads.

    It is built on a :class:`~leasesvc.Keeper`, which decides how the lease
    is held (its mode, TTL, renewals, session, drift margin, backoff and
    clock): ``Elector(keeper, name, ...)``, or, for the common case,
    ``Elector.for_client(client, name, ...)`` with a default Keeper (the
    Client's shared session).

    :meth:`run` (or :meth:`start`, in a thread) acquires the lease through
    the keeper, waiting on the service (``waitMs``) while another holds it.
    Once leader it sets :attr:`leading`, calls
    ``callbacks.on_started_leading(term)`` in a thread of its own, lets the
    keeper keep the holding (plain renewals every ``renew_interval``, or
    the session's heartbeats), and ends the term (clears :attr:`leading`,
    sets ``term.ended``) at once when the keeper reports the holding lost,
    and at its stop time (:func:`leasesvc.timing.stop_at`: the holding's
    deadline less ``cancel_before``) when nothing confirms it any more,
    however the service fails. After a lost term it campaigns again (when
    the service ended the keeper's session, through the new session the
    keeper opens, rule L2). On :meth:`stop` it ends the term, waits for
    ``on_started_leading`` to return, releases the lease so that a
    follower takes over at once, calls ``on_stopped_leading`` and returns.

    Guarantee: the term ends no later than the holding's deadline (plain:
    the local monotonic time when the last successful acquire or renew was
    sent + TTL × (1 − drift_margin); through a session: the send time of the
    last acknowledged heartbeat + window × (1 − drift_margin)) less
    ``cancel_before``. The service decided the holding's expiry after that
    send, so nobody else can start before it, provided the local clock and
    the backend's run at rates within the drift margin and this process is
    not paused. A paused process can still act late: hence the fencing
    token on every downstream write. Callbacks run only as long as they
    honour ``term.ended``: the Elector cannot stop code that ignores it.

    Args:
        keeper: the :class:`~leasesvc.Keeper` that holds the lease; several
            Electors may share one. The Elector does not close it.
        name: the lease.
        holder: this participant's identity; default ``{hostname}-{pid}``.
        cancel_before: how long before the holding's deadline the term ends
            when nothing confirms it any more, seconds. It must fit the
            keeper's span (rule L3, :func:`leasesvc.timing.fit_cancel_before`:
            below span × (1 − drift margin) − span/2, the span being the
            session window or the TTL), else
            :class:`~leasesvc.InvalidOptionError`: here when the span is
            known already, else from :meth:`run` once the keeper chose its
            mode. Never capped. Default min(250 ms, span/10).
        wait: how long one acquire waits on the service for the holding of
            another to end, 0 … 60 s; negative disables waiting (followers
            poll every renew interval).
        metadata: a JSON object attached to the lease on every acquire.
        priority: 0 … 1000, ranks this Elector among the candidates waiting
            for the lease (docs/contract.md §8): when a holding ends, the
            lease is reserved for a few seconds for the best waiting
            candidate. With priority > 0 or ``preempt`` every acquire
            carries it (the holding records it) and the waiting acquires
            register this Elector as a candidate; with neither (the
            default) the Elector waits unranked.
        preempt: the waiting acquires ask a holder whose holding has a
            strictly lower priority to step down. Needs ``wait`` ≥ 0.
            Nothing is taken by force.
        callbacks: the :class:`Callbacks` (``on_started_leading``, ...).
        logger: receives a line for every gain and loss of leadership and
            every failed call; default the keeper's.

    Raises:
        ValueError: an option out of its bounds.
        InvalidOptionError: ``cancel_before`` does not fit the keeper's
            span, known already.
    """

    def __init__(self, keeper: Keeper, name: str, *, holder: Optional[str] = None,
                 cancel_before: Optional[float] = None, wait: float = DEFAULT_WAIT,
                 metadata: Optional[Dict[str, Any]] = None, priority: int = 0, preempt: bool = False,
                 callbacks: Optional[Callbacks] = None, logger: Optional[logging.Logger] = None) -> None:
        if not isinstance(keeper, Keeper):
            raise TypeError(f"leasesvc.Elector: keeper must be a leasesvc.Keeper, not {type(keeper).__name__}")
        if not valid_name(name):
            raise ValueError(f"leasesvc.Elector: lease name {name!r} must be 1–128 characters of "
                             "[A-Za-z0-9._-] starting with a letter or digit")
        holder = default_holder() if holder is None else holder
        if not (1 <= len(holder) <= 256 and holder.isprintable()):
            raise ValueError(f"leasesvc.Elector: holder {holder!r} must be 1–256 printable characters")
        if cancel_before is not None and cancel_before < 0:
            raise InvalidOptionError(f"leasesvc.Elector: cancel_before {cancel_before} must not be negative")
        if wait > _MAX_WAIT:
            raise ValueError(f"leasesvc.Elector: wait {wait} must be at most {_MAX_WAIT}")
        if not 0 <= priority <= MAX_PRIORITY:
            raise ValueError(f"leasesvc.Elector: priority {priority} must be within 0 … {MAX_PRIORITY}")
        if preempt and wait < 0:
            raise ValueError("leasesvc.Elector: preempt needs waiting acquires: wait must not be negative")
        cbs = Callbacks() if callbacks is None else callbacks
        if not isinstance(cbs, Callbacks):
            raise TypeError(f"leasesvc.Elector: callbacks must be a leasesvc.Callbacks, not {type(cbs).__name__}")
        #: The :class:`~leasesvc.Keeper` that holds the lease.
        self.keeper = keeper
        self.name = name
        self.holder = holder
        self.wait_on_service = wait
        self.metadata = metadata
        self.priority = priority
        self.preempt = preempt
        #: The callbacks.
        self.callbacks = cbs
        self._given_cb = cancel_before
        self._on_started = cbs.on_started_leading
        self._on_stopped = cbs.on_stopped_leading
        self._on_new_leader = cbs.on_new_leader
        self._on_renewed = cbs.on_renewed
        self._on_yield = cbs.on_yield_requested
        self._log = logger or keeper.log
        self._clock = keeper.clock.now
        if keeper.span is not None:
            self._cancel_before_for_keeper()  # rule L3: refused now when the span is known now

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

    @classmethod
    def for_client(cls, client: Client, name: str, **options: Any) -> "Elector":
        """An Elector on ``name`` over a Keeper of its own on ``client``:
        the common case in one line, ``Elector.for_client(client, "x",
        on_started_leading=lead)``.

        ``options`` are the Elector's (``holder``, ``cancel_before``,
        ``wait``, ``metadata``, ``priority``, ``preempt``, ``callbacks``,
        ``logger``), the callbacks one by one (``on_started_leading``,
        ``on_stopped_leading``, ``on_new_leader``, ``on_renewed``,
        ``on_yield_requested``), and the Keeper's (``ttl``,
        ``renew_interval``, ``renew_jitter``, ``drift_margin``,
        ``retry_backoff``, ``release_timeout``, ``clock``, ``session``,
        ``plain_renewals``, ``window``), which build the Keeper (its
        ``cancel_before`` and ``logger`` are the Elector's; without a
        logger it says on stderr how the lease is held). ``keeper=`` (of
        0.2) passes a Keeper instead.

        Raises:
            TypeError: an option that is none of these, or a callback given
                twice.
            ValueError: as :class:`Keeper` and :class:`Elector`.
        """
        opts = dict(options)
        keeper: Optional[Keeper] = opts.pop("keeper", None)
        kopts = {k: opts.pop(k) for k in KEEPER_OPTIONS if k in opts}
        cbs = opts.pop("callbacks", None) or Callbacks()
        ons = {k: opts.pop(k) for k in CALLBACK_NAMES if k in opts}
        for k, v in ons.items():
            if v is not None and getattr(cbs, k) is not None:
                raise TypeError(f"leasesvc.Elector.for_client: {k} is given twice (and in callbacks)")
        cbs = dataclasses.replace(cbs, **{k: v for k, v in ons.items() if v is not None})
        unknown = sorted(set(opts) - set(ELECTOR_OPTIONS))
        if unknown:
            raise TypeError(f"leasesvc.Elector.for_client: unknown options {', '.join(unknown)}")
        holder = opts.pop("holder", None)
        holder = default_holder() if holder is None else holder
        logger: Optional[logging.Logger] = opts.get("logger")
        if keeper is None:
            keeper = Keeper(client, cancel_before=opts.get("cancel_before"), logger=logger,
                            label=f"leasesvc elector {name} ({holder})",
                            announce=None if logger is not None else f'elector "{name}"', **kopts)
        elif kopts:
            raise ValueError(f"leasesvc.Elector: keeper excludes {', '.join(sorted(kopts))}")
        elif keeper.client is not client:
            raise ValueError("leasesvc.Elector: the keeper is over another client")
        return cls(keeper, name, holder=holder, callbacks=cbs, **opts)

    @property
    def cancel_before(self) -> Optional[float]:
        """How long before the holding's deadline a term ends, seconds: as
        given, or the default for the keeper's span; None while neither
        given nor known (before the keeper chose its mode)."""
        if self.keeper.span is None:
            return self._given_cb
        return self._cancel_before_for_keeper()

    def _cancel_before_for_keeper(self) -> float:
        """The cancel_before of the terms for the keeper's span (rule L3):
        as given, or the default, and checked.

        Raises:
            InvalidOptionError: it does not fit (it names cancel_before,
                the limit and the session window or TTL).
        """
        span = self.keeper.span
        assert span is not None, "the keeper's mode is chosen before a term"
        try:
            return cancel_before_for(span, self.keeper.drift_margin, self._given_cb, self.keeper.span_kind)
        except InvalidOptionError as e:
            raise InvalidOptionError(f"leasesvc.Elector {self.name}: {e.detail}") from None

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
            st.want_write(self._clock() + self.keeper.renew_interval)
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
        lease = t.holding.transfer(to, reserve, cp, timeout=self.keeper.release_timeout)
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
            InvalidOptionError: ``cancel_before`` does not fit the span of
                the mode the keeper chose (rule L3), before any acquire.
            InvalidArgumentError, AccessDeniedError: the service refuses the Elector's
                requests for good (a TTL out of its bounds, credentials
                refused, ...).
            SessionForkedError: its session was opened by the process
                this one was forked from.
            RuntimeError: already running, or the client, the keeper or
                the session given to the keeper is closed.
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
        return d - random.random() * self.keeper.renew_jitter * d

    def _retry_delay(self, err: BaseException, failures: int) -> float:
        """The keeper's backoff, or a 429's Retry-After when longer: the
        caller's own rate limit refuses anything sooner. (A 503's
        Retry-After is not waited for: a leader's safe deadline does not
        wait.)"""
        return self.keeper.retry_delay(err, failures)

    def _attempt_timeout(self) -> float:
        return self.keeper.attempt_timeout()

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
                self.keeper.open()  # (rule L1: the mode, chosen once; then L3 against its span)
                self._cancel_before_for_keeper()
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
                if not self._sleep(self._jittered(self.keeper.renew_interval)):
                    return None
            elif isinstance(err, SessionHeldError):
                failures = 0  # another session holds it for this holder: wait as for a holding by another
                self._log.warning("leasesvc elector %s (%s): the lease is held through another session with this "
                                  "holder: %s", self.name, self.holder, err)
                if not self._sleep(self._jittered(self.keeper.renew_interval)):
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
            h.release(timeout=self.keeper.release_timeout)
        except LeaseError as e:
            self._log.warning("leasesvc elector %s (%s): release failed: %s", self.name, self.holder, e)
