"""``Keeper``: keeps leases for one agent, by plain renewals or through a
:class:`~leasesvc.Session` (issue 38; as etcd's ``concurrency.Session``
keeps a lease apart from its ``Election``).

It is the one place of the SDK that asks "through a session?": a
:class:`Holding` it returns renews, releases and transfers the same way in
either mode and owns the holding's deadline, the instant after which the
agent must not act as holder:

* plain renewals (REST): the local monotonic send time of the last
  acquire or renew that succeeded + TTL × (1 − drift margin)
  (:meth:`Holding._plain_deadline`, the one place of that formula);
* through a session: the session's deadline (the send time of the last
  acknowledged heartbeat + window × (1 − drift margin), written in
  :mod:`leasesvc.session`) once an ack arrived after the holding's answer;
  until then at most the acquire's send time + the session lease TTL ×
  (1 − drift margin) (docs/contract.md §14, A4:
  :meth:`~leasesvc.Session.deadline_for`). An acquire whose holding the
  session reported ``lost`` or ``revoked`` before its answer raises
  :class:`~leasesvc.LeaseLostError` (A5); a holding used in a process
  forked from the session's raises :class:`~leasesvc.SessionForkedError`.

The holdings, their changes and the keeper's clock are in
:mod:`leasesvc.holding`.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, TextIO, Union

from .backoff import Backoff
from .errors import LeaseError, LeaseLostError, SessionsUnsupportedError
from .holding import PLAIN, SESSION, Clock, Holding, Listener  # noqa: F401 (re-exported)
from .lease import Lease
from .session import Session, SessionLimitError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, _Cancel

__all__ = ["Keeper", "Holding", "Clock", "PLAIN", "SESSION", "keeper_for"]

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

    Args:
        client: the :class:`~leasesvc.Client` to call.
        mode: "session" (default: the Client's shared session, opened on the
            first hold; plain renewals when the service offers no sessions or
            its session limit is reached, said in the log), "plain" (forced),
            or a :class:`~leasesvc.Session` to hold through.
        window: with mode "session", open a session of the keeper's own with
            this heartbeat window (seconds) on the first hold, rather than
            share the Client's; :meth:`close` closes it.
        ttl: the plain renewals' TTL, seconds.
        renew_interval: seconds between plain renewals; default TTL/3.
        renew_jitter: fraction of ``renew_interval`` by which renewals come
            early at random.
        drift_margin: fraction of the TTL given up to clock-rate differences.
        retry_backoff: spaces the retries of a failed renewal.
        release_timeout: bounds releases and transfers, seconds.
        clock: a :class:`Clock` or a monotonic ``now`` function (a session's
            clock must be the same).
        logger: default ``logging.getLogger("leasesvc")``.
        label: prefixes the log lines (default ``"leasesvc keeper"``).
        announce: who a line on stderr names when it says how the leases
            are held (the Elector's ``elector "name"``), for an owner given
            no logger: ``leasesvc: elector "name" holds through a session
            (window 1s)``, once per process for each change of mode (see
            :func:`say_mode`). None (the default): the log only.
    """

    def __init__(self, client: "Client", *, mode: Union[str, Session] = SESSION, window: Optional[float] = None,
                 ttl: float = 30.0,
                 renew_interval: Optional[float] = None, renew_jitter: float = 0.1, drift_margin: float = 0.1,
                 retry_backoff: Optional[Backoff] = None, release_timeout: float = 5.0,
                 clock: Union[Clock, Callable[[], float], None] = None, logger: Optional[logging.Logger] = None,
                 label: str = "leasesvc keeper", announce: Optional[str] = None) -> None:
        if client is None:
            raise ValueError("leasesvc.Keeper: client is None")
        if not isinstance(mode, Session) and mode not in (SESSION, PLAIN):
            raise ValueError(f"leasesvc.Keeper: mode {mode!r} must be 'session', 'plain' or a Session")
        if ttl < 0.001:
            raise ValueError(f"leasesvc.Keeper: ttl {ttl} must be at least a millisecond")
        if not 0.01 <= drift_margin <= 0.5:
            raise ValueError(f"leasesvc.Keeper: drift_margin {drift_margin} must be within 0.01 … 0.5")
        self.client = client
        self._want: Union[str, Session] = mode
        self.window = window
        self.ttl = ttl
        self.renew_interval = ttl / 3 if renew_interval is None else renew_interval
        self.renew_jitter = renew_jitter
        self.drift_margin = drift_margin
        if retry_backoff is None:
            initial = max(0.001, min(0.1, ttl / 30))
            retry_backoff = Backoff(initial, max(initial, min(5.0, ttl / 6)), 2.0)
        self.retry_backoff = retry_backoff
        self.release_timeout = release_timeout
        self.clock = clock if isinstance(clock, Clock) else Clock(clock or time.monotonic)
        self.log = logger or logging.getLogger("leasesvc")
        self.label = label
        self.announce = announce
        self._mu = threading.Lock()
        self._mode = ""  # what the last hold used, once said in the log
        self._holdings: List[Holding] = []
        self._opened: Optional[Session] = None  # a session this keeper opened itself
        self._closed = False

    @property
    def mode(self) -> str:
        """"session" or "plain": what the last hold used ("" before one)."""
        return self._mode

    def _jittered(self) -> float:
        d = self.renew_interval
        return d - random.random() * self.renew_jitter * d

    def _attempt_timeout(self) -> float:
        return max(0.001, min(self.client.request_timeout, self.renew_interval))

    def _say(self, mode: str, line: str, what: str) -> None:
        if self._mode != mode:
            self._mode = mode
            self.log.info("%s: %s", self.label, line)
            if self.announce is not None and not (self.log.isEnabledFor(logging.INFO) and self.log.hasHandlers()):
                say_mode(self.announce, what)

    def session(self) -> Optional[Session]:
        """The session the next hold goes through, None for plain renewals;
        says in the log which, when it changes.

        Raises:
            LeaseError: the shared session could not be opened.
            RuntimeError: the session given to the keeper is closed.
        """
        want = self._want
        if want == PLAIN:
            self._say(PLAIN, "plain renewals (forced)", "with plain renewals (plain_renewals=True)")
            return None
        if isinstance(want, Session):
            if want.closed:
                raise RuntimeError("leasesvc.Keeper: its session is closed")
            s = want
        else:
            try:
                s = self.client._shared_session() if self.window is None else self._own_session(self.window)
            except SessionsUnsupportedError as e:
                why = f"the service offers no sessions: {e.status}"
                self._say(PLAIN, f"plain renewals ({why})", f"with plain renewals ({why})")
                return None
            except SessionLimitError:  # not remembered: the next hold asks again
                why = "the service's session limit is reached"
                self._say(PLAIN, f"plain renewals ({why})", f"with plain renewals ({why})")
                return None
        self._say(SESSION, f"holding through a session (window {s.window:g}s)", f"through a session (window {s.window:g}s)")
        return s

    def hold(self, name: str, holder: str, *, metadata: Optional[Dict[str, Any]] = None, wait: float = 0.0,
             priority: Optional[int] = None, preempt: bool = False, cancel: Optional["_Cancel"] = None) -> Holding:
        """Acquire ``name`` as ``holder`` (waiting on the service up to
        ``wait`` seconds) and keep it.

        Raises:
            LeaseHeldError, LeaseReservedError, SessionHeldError, ...: the
                SDK's typed errors, as the acquire answered.
            LeaseLostError: through a session, the holding was reported
                lost before the acquire's answer (A5).
            SessionForkedError: the session is a forked process's copy.
        """
        with self._mu:
            if self._closed:
                raise RuntimeError("leasesvc.Keeper: closed")
        sess = self.session()
        sent = self.clock.now()
        if sess is not None:
            d = sess._acquire(name, holder, metadata=metadata, wait=wait, priority=priority, preempt=preempt,
                              cancel=cancel)
            h = Holding(self, Lease.from_json(d), sent, sess)
        else:
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
                # after it was sent. A renew sent now gives a deadline that
                # is not mostly spent already.
                now = self.clock.now()
                try:
                    r = Lease.from_json(self.client._renew(name, holder, lease.fencing_token, attempts=1,
                                                           timeout=self._attempt_timeout()))
                    if r.checkpoint is None:
                        r.checkpoint, r.checkpoint_token = lease.checkpoint, lease.checkpoint_token
                    lease, sent = r, now
                except LeaseLostError:
                    raise
                except LeaseError:
                    pass  # keep the acquire's deadline, however short
            h = Holding(self, lease, sent, None)
        with self._mu:
            closed = self._closed
            if not closed:
                self._holdings.append(h)
        if closed:  # close() came while the acquire was under way
            try:
                h.release()
            except LeaseError:
                h.forget()
            raise RuntimeError("leasesvc.Keeper: closed")
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
        with self._mu:
            if h in self._holdings:
                self._holdings.remove(h)

    def _own_session(self, window: float) -> Session:
        """The session of this keeper's own (closed by :meth:`close`),
        opened on first use (again after it closed)."""
        with self._mu:
            s = self._opened
            if s is None or s.closed:
                s = self.client.open_session(window, self.drift_margin, logger=self.log, clock=self.clock.now)
                self._opened = s
            return s

    def close(self) -> None:
        """Release what the keeper still holds and close a session it
        opened itself."""
        with self._mu:
            self._closed = True
            hs, self._holdings = list(self._holdings), []
        for h in hs:
            try:
                h.release()
            except LeaseError as e:
                self.log.warning("%s: release of %s failed: %s", self.label, h.name, e)
                h._finish()
        if self._opened is not None:
            self._opened.close()

    def __enter__(self) -> "Keeper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def keeper_for(client: "Client", keeper: Optional[Keeper] = None, *, session: Optional[Session] = None,
               plain_renewals: bool = False, **opts: Any) -> Keeper:
    """The keeper an Elector's options ask for: ``keeper`` itself when
    given, else one holding through ``session`` (a Session), by plain
    renewals (``plain_renewals``) or through the Client's shared session;
    ``opts`` are the :class:`Keeper`'s. The one place outside the keeper
    where the options choose how leases are kept.

    Raises:
        ValueError: options that exclude each other.
    """
    if session is not None and plain_renewals:
        raise ValueError("leasesvc.Elector: session and plain_renewals exclude each other")
    if keeper is not None:
        if session is not None or plain_renewals:
            raise ValueError("leasesvc.Elector: keeper excludes session and plain_renewals")
        return keeper
    mode: Union[str, Session] = session if session is not None else PLAIN if plain_renewals else SESSION
    return Keeper(client, mode=mode, **opts)
