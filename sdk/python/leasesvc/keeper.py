"""``Keeper``: keeps leases for one agent, by plain renewals or through a
:class:`~leasesvc.Session` (issue 38; as etcd's ``concurrency.Session``
keeps a lease apart from its ``Election``).

It is the one place of the SDK that knows how leases are kept: it chooses
its mode and makes, for each hold, a :class:`~leasesvc.holding.PlainHolding`
or a :class:`~leasesvc.holding.SessionHolding`; what is above it (the
Elector, tools) uses the :class:`~leasesvc.Holding` API alone. The rules
(sdk/conformance/PROTOCOL.md, the SDKs' lifecycle):

* L1: the mode is chosen once, at the first :meth:`Keeper.hold` (or
  :meth:`Keeper.open`), and kept for the keeper's life: "session" unless
  plain renewals were asked for, the service offers no sessions, it
  refused the session at its session limit, or ``cancel_before`` does not
  fit the window; then "plain", with :attr:`Keeper.plain_reason` "asked",
  "sessions_unsupported", "session_limit" or "window". A new Keeper asks
  again.
* L2: a session the service ended never reopens itself; its holdings are
  lost. The keeper that opened it (its own, or the Client's shared one)
  opens a new one of the same window at its next hold and stays in
  session mode. A session given to the keeper is not reopened: holds on
  the keeper then raise ``RuntimeError``.
* L3: ``cancel_before``, given, must fit the span
  (:func:`leasesvc.timing.fit_cancel_before`): a window it does not fit
  makes the keeper plain (reason "window"), a TTL (or a given session's
  window) it does not fit is an :class:`~leasesvc.InvalidOptionError`.
* L4: every holding it hands out is kept until it is released,
  transferred, lost, its deadline passes, or the keeper closes;
  :meth:`Keeper.close` releases what it still holds and stops renewals.

Deadlines are :func:`leasesvc.timing.deadline` (see :mod:`leasesvc.holding`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, TextIO, Union

from ._http import _Cancel
from .backoff import Backoff
from .client import Client
from .errors import InvalidOptionError, LeaseError, LeaseLostError, SessionLimitError, SessionsUnsupportedError
from .holding import PLAIN, SESSION, Clock, Holding, Keeping, Listener, PlainHolding, SessionHolding  # noqa: F401
from .lease import Lease
from .session import DEFAULT_WINDOW, MAX_WINDOW, MIN_WINDOW, Session
from .timing import fit_cancel_before

__all__ = ["Keeper", "Holding", "Clock", "PLAIN", "SESSION", "ASKED", "SESSIONS_UNSUPPORTED", "SESSION_LIMIT",
           "WINDOW", "say_mode"]

#: The reasons for plain renewals (:attr:`Keeper.plain_reason`), the same
#: in every SDK: plain renewals were asked for,
ASKED = "asked"
#: the service offers no sessions,
SESSIONS_UNSUPPORTED = "sessions_unsupported"
#: the service refused the session at its session limit (429 on the upgrade),
SESSION_LIMIT = "session_limit"
#: ``cancel_before`` does not fit the session's window.
WINDOW = "window"

_said_mu = threading.Lock()
_said = ""  # the mode this process last said on stderr (say_mode)


def say_mode(who: str, what: str, out: Optional[TextIO] = None) -> None:
    """Write ``leasesvc: {who} holds {what}`` as one line on stderr (or
    ``out``), unless the last line this process wrote so said the same
    mode: once per process for each change of mode, not per term or per
    Elector. An Elector given no logger says so through its Keeper."""
    global _said
    with _said_mu:
        if _said == what:
            return
        _said = what
    print(f"leasesvc: {who} holds {what}", file=out if out is not None else sys.stderr, flush=True)


class Keeper:
    """Keeps leases for one agent, by plain renewals or through a session.
    A context manager: the block's end closes it (:meth:`close`).

    Args:
        client: the :class:`~leasesvc.Client` to call.
        session: a :class:`~leasesvc.Session` to hold through (the keeper
            neither closes nor reopens it). Default: a session of
            ``window`` the keeper opens itself, or without a window the
            Client's shared session, opened on the first hold.
        plain_renewals: hold with plain renewals (reason "asked"), never
            through a session.
        window: the heartbeat window (seconds) of a session of the keeper's
            own, opened on the first hold (and again after the service
            ended it) and closed by :meth:`close`; None: the Client's shared
            session (window 1 s).
        ttl: the plain renewals' TTL, seconds.
        renew_interval: seconds between plain renewals, at most TTL/2;
            default TTL/3.
        renew_jitter: fraction of ``renew_interval``, 0 … 0.5, by which
            renewals come early at random.
        drift_margin: fraction of the TTL (or window) given up to clock-rate
            differences, 0.01 … 0.5.
        retry_backoff: spaces the retries of a failed renewal; default
            initial min(100 ms, TTL/30), max min(5 s, TTL/6).
        release_timeout: bounds releases and transfers, seconds.
        cancel_before: if given, how long before a deadline the keeper's
            holders stop their work (an Elector's ``cancel_before``): a
            session window it does not fit makes the keeper hold by plain
            renewals (reason "window"); a TTL, or a given session's window,
            it does not fit is an :class:`~leasesvc.InvalidOptionError`.
        clock: a :class:`~leasesvc.timing.Clock` or a monotonic ``now``
            function (a session's clock must be the same).
        logger: default ``logging.getLogger("leasesvc")``.
        label: prefixes the log lines (default ``"leasesvc keeper"``).
        announce: who a line on stderr names when it says how the leases
            are held (an Elector's ``elector "name"``), for an owner given
            no logger: ``leasesvc: elector "name" holds through a session
            (window 1s)``, once per process for each change of mode (see
            :func:`say_mode`). None (the default): the log only.
        mode: deprecated: "session" (the default), "plain"
            (``plain_renewals=True``) or a Session (``session=``).

    Raises:
        ValueError: an option out of its bounds, or options that exclude
            each other; :class:`~leasesvc.InvalidOptionError` for a
            ``cancel_before`` that does not fit a span already known.
    """

    def __init__(self, client: Client, *, session: Optional[Session] = None, plain_renewals: bool = False,
                 window: Optional[float] = None, ttl: float = 30.0, renew_interval: Optional[float] = None,
                 renew_jitter: float = 0.1, drift_margin: float = 0.1, retry_backoff: Optional[Backoff] = None,
                 release_timeout: float = 5.0, cancel_before: Optional[float] = None,
                 clock: Union[Clock, Callable[[], float], None] = None, logger: Optional[logging.Logger] = None,
                 label: str = "leasesvc keeper", announce: Optional[str] = None,
                 mode: Union[str, Session, None] = None) -> None:
        if client is None:
            raise ValueError("leasesvc.Keeper: client is None")
        if mode is not None:
            warnings.warn("leasesvc.Keeper(mode=...) is deprecated: use session=a_session or plain_renewals=True",
                          DeprecationWarning, stacklevel=2)
            if isinstance(mode, Session):
                session = session or mode
            elif mode == PLAIN:
                plain_renewals = True
            elif mode != SESSION:
                raise ValueError(f"leasesvc.Keeper: mode {mode!r} must be 'session', 'plain' or a Session")
        if session is not None and plain_renewals:
            raise ValueError("leasesvc.Keeper: session and plain_renewals exclude each other")
        if window is not None and (session is not None or plain_renewals):
            raise ValueError("leasesvc.Keeper: window excludes session and plain_renewals")
        if window is not None and not MIN_WINDOW <= window <= MAX_WINDOW:
            raise ValueError(f"leasesvc.Keeper: window {window} must be within {MIN_WINDOW} … {MAX_WINDOW} s")
        if ttl < 0.001:
            raise ValueError(f"leasesvc.Keeper: ttl {ttl} must be at least a millisecond")
        if not 0.01 <= drift_margin <= 0.5:
            raise ValueError(f"leasesvc.Keeper: drift_margin {drift_margin} must be within 0.01 … 0.5")
        if not 0 <= renew_jitter <= 0.5:
            raise ValueError(f"leasesvc.Keeper: renew_jitter {renew_jitter} must be within 0 … 0.5")
        ri = ttl / 3 if renew_interval is None else renew_interval
        if not 0 < ri <= ttl / 2:
            raise ValueError(f"leasesvc.Keeper: renew_interval {ri} must be positive and at most ttl/2 = {ttl / 2}")
        if release_timeout < 0:
            raise ValueError(f"leasesvc.Keeper: release_timeout {release_timeout} must not be negative")
        if cancel_before is not None and cancel_before < 0:
            raise ValueError(f"leasesvc.Keeper: cancel_before {cancel_before} must not be negative")
        if retry_backoff is None:
            initial = max(0.001, min(0.1, ttl / 30))
            retry_backoff = Backoff(initial, max(initial, min(5.0, ttl / 6)), 2.0)
        self.client = client
        self.window = window
        self.ttl = ttl
        self.renew_interval = ri
        self.renew_jitter = renew_jitter
        self.drift_margin = drift_margin
        self.retry_backoff = retry_backoff
        self.release_timeout = release_timeout
        self.cancel_before = cancel_before
        self.clock = clock if isinstance(clock, Clock) else Clock(clock or time.monotonic)
        self.log = logger or logging.getLogger("leasesvc")
        self.label = label
        self.announce = announce
        self._given = session  # a session the caller gave: never closed nor reopened here
        self._plain_asked = plain_renewals
        if cancel_before is not None:
            if plain_renewals:
                self._fit(ttl, "TTL")
            elif session is not None:
                self._fit(session.window, "session window")
        self._keeping = Keeping(client=client, clock=self.clock, log=self.log, ttl=ttl, drift_margin=drift_margin,
                                renew_interval=ri, renew_jitter=renew_jitter, retry_backoff=retry_backoff,
                                release_timeout=release_timeout, forget=self._forget)
        self._settle_mu = threading.Lock()  # held while the mode is chosen (which may open a session)
        self._mode = ""
        self._reason = ""
        self._span: Optional[float] = None
        self._hold: Optional[Callable[..., Holding]] = None  # the chosen mode's way to hold
        self._mu = threading.Lock()
        self._open_mu = threading.Lock()  # held while the keeper opens a session of its own
        self._holdings: List[Holding] = []
        self._opened: Optional[Session] = None  # a session this keeper opened itself
        self._closed = False

    # --- the mode (rule L1) ---------------------------------------------

    @property
    def mode(self) -> str:
        """"session" or "plain": the mode chosen at the first hold (or
        :meth:`open`) and kept for the keeper's life; "" before."""
        return self._mode

    @property
    def plain_reason(self) -> str:
        """Why the keeper holds with plain renewals: "asked",
        "sessions_unsupported", "session_limit" or "window"; "" in session
        mode and before the mode is chosen."""
        return self._reason

    @property
    def span(self) -> Optional[float]:
        """How long a holding lasts unconfirmed, seconds: the session's
        window, or the TTL of plain renewals (the span of rule L3). Known
        before the mode is chosen when it cannot be otherwise (plain
        renewals asked for, a session given); else None until then."""
        if self._span is not None:
            return self._span
        if self._plain_asked:
            return self.ttl
        if self._given is not None:
            return self._given.window
        return None

    @property
    def span_kind(self) -> str:
        """What :attr:`span` is: "session window" or "TTL" ("" while it is
        not known)."""
        if self._mode == PLAIN or (not self._mode and self._plain_asked):
            return "TTL"
        if self._mode == SESSION or self._given is not None:
            return "session window"
        return ""

    def _fit(self, span: float, what: str) -> None:
        """Check ``cancel_before`` (given) against ``span`` (raises
        InvalidOptionError)."""
        if self.cancel_before is not None:
            try:
                fit_cancel_before(span, self.drift_margin, self.cancel_before, what)
            except InvalidOptionError as e:
                raise InvalidOptionError(f"leasesvc.Keeper: {e.detail}") from None

    def open(self) -> str:
        """Choose the mode now, if it is not chosen yet (rule L1; the first
        :meth:`hold` does it too), and return it. Asking for a session
        opens it (the keeper's own, or the Client's shared one).

        Raises:
            InvalidOptionError: ``cancel_before`` fits neither the window
                nor the TTL (nothing is chosen).
            LeaseError: the session could not be opened, for another reason
                than the service offering none or its session limit (nothing
                is chosen: the next open or hold asks again).
            RuntimeError: the keeper is closed.
        """
        with self._settle_mu:
            if self._mode:
                return self._mode
            self._check_open()
            if self._plain_asked:
                self._settle_plain(ASKED, "plain_renewals=True")
            elif self._given is not None:
                self._settle_session(self._given)
            else:
                self._choose()
            return self._mode

    def _choose(self) -> None:
        """(Under _settle_mu.) A session of the keeper's window, or the
        Client's shared one, unless the window does not fit cancel_before,
        the service offers no sessions or refuses one at its limit."""
        window = DEFAULT_WINDOW if self.window is None else self.window
        try:
            self._fit(window, "session window")
        except InvalidOptionError as e:
            self._settle_plain(WINDOW, f"cancel_before does not fit the session window: {e.detail}")
            return
        try:
            s = self._session_now()
        except SessionsUnsupportedError as e:
            self._settle_plain(SESSIONS_UNSUPPORTED, f"the service offers no sessions: {e.status}")
            return
        except SessionLimitError:
            self._settle_plain(SESSION_LIMIT, "the service's session limit is reached")
            return
        try:
            self._fit(s.window, "session window")  # (the window the service granted)
        except InvalidOptionError as e:
            with self._mu:
                own, self._opened = self._opened is s, None if self._opened is s else self._opened
            if own:
                s.close()
            self._settle_plain(WINDOW, f"cancel_before does not fit the session window: {e.detail}")
            return
        self._settle_session(s)

    def _settle_plain(self, reason: str, why: str) -> None:
        """(Under _settle_mu.) Plain renewals for the keeper's life, for
        ``reason`` (said as ``why``), unless cancel_before does not fit the
        TTL either (InvalidOptionError, nothing chosen)."""
        self._fit(self.ttl, "TTL")
        self._mode, self._reason, self._span, self._hold = PLAIN, reason, self.ttl, self._hold_plain
        self.log.info("%s: plain renewals (%s)", self.label, why)
        self._announce(f"with plain renewals ({why})")

    def _settle_session(self, s: Session) -> None:
        """(Under _settle_mu.) Through sessions for the keeper's life."""
        self._mode, self._reason, self._span, self._hold = SESSION, "", s.window, self._hold_session
        self.log.info("%s: holding through a session (window %gs)", self.label, s.window)
        self._announce(f"through a session (window {s.window:g}s)")

    def _announce(self, what: str) -> None:
        """Say ``what`` on stderr for an owner given no logger (:func:`say_mode`)."""
        if self.announce is not None and not (self.log.isEnabledFor(logging.INFO) and self.log.hasHandlers()):
            say_mode(self.announce, what)

    # --- sessions (rule L2) ---------------------------------------------

    def _session_now(self) -> Session:
        """The session a hold in session mode goes through: the one given
        (never reopened), the keeper's own (opened again once over), or the
        Client's shared one (likewise).

        Raises:
            RuntimeError: the session given to the keeper is closed.
            LeaseError: a new session could not be opened.
        """
        if self._given is not None:
            if self._given.closed:
                raise RuntimeError("leasesvc.Keeper: its session is closed (a session given to a keeper is not "
                                   "reopened)")
            return self._given
        if self.window is None:
            return self.client._shared_session()
        with self._open_mu:
            with self._mu:
                s, closed = self._opened, self._closed
            if closed:
                raise RuntimeError("leasesvc.Keeper: closed")
            if s is not None and not s.closed:
                return s
            if s is not None:
                self.log.info("%s: the last session is over (%s); opening a new one (window %gs)", self.label,
                              s.ended or "closed", self.window)
            s = self.client.open_session(self.window, self.drift_margin, logger=self.log, clock=self.clock.now)
            with self._mu:
                closed = self._closed
                if not closed:
                    self._opened = s
            if closed:
                s.close()
                raise RuntimeError("leasesvc.Keeper: closed")
            return s

    # --- holding (rule L4) ----------------------------------------------

    def hold(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]] = None, wait: float = 0.0,
             priority: Optional[int] = None, preempt: bool = False, cancel: Optional[_Cancel] = None) -> Holding:
        """Acquire ``name`` as ``holder`` (waiting on the service up to
        ``wait`` seconds) and keep it until it is released, transferred or
        lost, or the keeper closes. The first hold chooses the mode
        (:meth:`open`).

        Raises:
            LeaseHeldError, LeaseReservedError, SessionHeldError, ...: the
                SDK's typed errors, as the acquire answered.
            LeaseLostError: through a session, the holding was reported
                lost before the acquire's answer (A5).
            SessionForkedError: the session is a forked process's copy.
            InvalidOptionError: as :meth:`open`.
            RuntimeError: the keeper is closed, or the session given to it.
        """
        self._check_open()
        self.open()
        assert self._hold is not None
        h = self._hold(name, holder, metadata=metadata, wait=wait, priority=priority, preempt=preempt, cancel=cancel)
        with self._mu:
            closed = self._closed
            if not closed and not h.ended.is_set():
                self._holdings.append(h)
        if closed:  # close() came while the acquire was under way
            try:
                h.release()
            except LeaseError:
                h.forget()
            raise RuntimeError("leasesvc.Keeper: closed")
        return h

    def _hold_session(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]], wait: float,
                      priority: Optional[int], preempt: bool, cancel: Optional[_Cancel]) -> Holding:
        """Acquire through the session (a new one if the last is over)."""
        sess = self._session_now()
        d = sess._acquire(name, holder, metadata=metadata, wait=wait, priority=priority, preempt=preempt,
                          cancel=cancel)
        h = SessionHolding(self._keeping, Lease.from_json(d), sess)
        h._start()
        return h

    def _hold_plain(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]], wait: float,
                    priority: Optional[int], preempt: bool, cancel: Optional[_Cancel]) -> Holding:
        """Acquire by REST with the keeper's TTL, and renew from then on."""
        sent = self.clock.now()
        try:
            d = self.client._acquire(name, holder, self.ttl, metadata=metadata, wait=wait, priority=priority,
                                     preempt=preempt, attempts=1, cancel=cancel)
        except LeaseError:
            if cancel is not None and cancel.cancelled:
                self._abandon(name, holder)
            raise
        lease = Lease.from_json(d)
        if self.clock.now() - sent > self.renew_interval / 2:
            # The acquire waited on the service: the holding began well
            # after it was sent. A renew sent now gives a deadline that is
            # not mostly spent already.
            now = self.clock.now()
            try:
                r = Lease.from_json(self.client._renew(name, holder, lease.fencing_token, attempts=1,
                                                       timeout=self._keeping.attempt_timeout()))
                if r.checkpoint is None:
                    r.checkpoint, r.checkpoint_token = lease.checkpoint, lease.checkpoint_token
                lease, sent = r, now
            except LeaseLostError:
                raise
            except LeaseError:
                pass  # keep the acquire's deadline, however short
        h = PlainHolding(self._keeping, lease, sent)
        h._start()
        return h

    def _abandon(self, name: str, holder: str) -> None:
        """Release a holding that an acquire cancelled in flight may have
        obtained without the keeper hearing of it."""
        try:
            lease = self.client.get(name)
            if lease.held and lease.holder == holder:
                self.client._release(name, holder, lease.fencing_token, attempts=2, timeout=self.release_timeout)
        except LeaseError:
            pass

    def _forget(self, h: Holding) -> None:
        """(The holdings' callback.) ``h`` ended: no longer kept, nor released by :meth:`close`."""
        with self._mu:
            if h in self._holdings:
                self._holdings.remove(h)

    def attempt_timeout(self) -> float:
        """How long one renew attempt of a holding may take, seconds:
        min(the client's request timeout, ``renew_interval``)."""
        return self._keeping.attempt_timeout()

    def retry_delay(self, err: BaseException, failures: int) -> float:
        """The delay before retrying after ``failures`` failures in a row,
        the last ``err``: the keeper's backoff, or a 429's Retry-After when
        longer."""
        return self._keeping.retry_delay(err, failures)

    def holdings(self) -> List[Holding]:
        """The holdings the keeper keeps now."""
        with self._mu:
            return list(self._holdings)

    # --- closing --------------------------------------------------------

    def _check_open(self) -> None:
        """Raise RuntimeError once the keeper is closed."""
        with self._mu:
            if self._closed:
                raise RuntimeError("leasesvc.Keeper: closed")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Release what the keeper still holds (each release bounded by
        ``release_timeout``), stop every renewal, and close a session it
        opened itself. Holds raise ``RuntimeError`` from then on. Closing
        twice is harmless."""
        with self._mu:
            self._closed = True
            hs, self._holdings = list(self._holdings), []
            opened, self._opened = self._opened, None
        for h in hs:
            try:
                h.release()
            except LeaseError as e:
                self.log.warning("%s: release of %s failed: %s", self.label, h.name, e)
                h.forget()
        if opened is not None:
            opened.close()

    def __enter__(self) -> "Keeper":
        """``with Keeper(...) as k:``; the block's end closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the keeper (:meth:`close`)."""
        self.close()
