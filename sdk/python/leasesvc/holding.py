"""``Holding``: one lease a :class:`~leasesvc.Keeper` holds. An abstract
base (:class:`Holding`) with two implementations: :class:`PlainHolding`,
kept by plain renewals (REST, every ``renew_interval``), and
:class:`SessionHolding`, kept by a :class:`~leasesvc.Session`'s
heartbeats. The Keeper is the only code that knows which it made; what
is above it (the Elector, tools) uses the base's API alone.

A holding owns its deadline, the instant after which the agent must not
act as holder (:func:`leasesvc.timing.deadline`):

* plain: the local monotonic send time of the last acquire or renew that
  succeeded + TTL × (1 − drift margin);
* through a session: the session's deadline for this holding
  (:meth:`~leasesvc.Session.deadline_for`: the session's deadline once an
  ack came after the holding's answer, and until then at most its
  acquire's send time + the session lease TTL × (1 − drift margin)).

Rule L4 (sdk/conformance/PROTOCOL.md): a holding is kept from the moment
it is handed out until it is released, transferred, lost, its deadline
passes (plain) or its keeper closes. Listeners (:meth:`Holding.on_change`)
hear ``moved`` (the deadline moved or lease fields changed, such as
``yield_requested``), ``failed`` (a renewal failed and is retried),
``refused`` (renewals are refused for good; a release may still end the
holding) and ``lost`` (the holding ended: revoked, taken, the session
ended, a renew answered ``lease_lost``, or the deadline passed with no
confirmation; the cause is a :class:`~leasesvc.LeaseLostError`).

This module imports no keeper: what a holding needs of its Keeper is a
:class:`Keeping` the Keeper builds (the package's imports form a tree).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import random
import threading
from typing import Any, Callable, Dict, Optional

from . import _session_fork
from .backoff import Backoff
from .client import Client
from .errors import AccessDeniedError, InvalidArgumentError, LeaseError, LeaseLostError, RateLimitedError
from .lease import Lease
from .session import Session
from .timing import Clock, deadline

__all__ = ["Holding", "PlainHolding", "SessionHolding", "Keeping", "Clock", "Listener", "PLAIN", "SESSION"]

#: The keeper's modes.
SESSION = "session"
PLAIN = "plain"

#: ``f(kind, info)``: kind "moved" (info: ``deadline``, ``lease`` (None for
#: a heartbeat's ack), ``sent``, ``call`` (True when the agent's own call
#: moved it), ``checkpoint``), "failed", "refused" or "lost" (info:
#: ``error``).
Listener = Callable[[str, Dict[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class Keeping:
    """What a holding needs of the :class:`~leasesvc.Keeper` that made it:
    its client, clock, log and options, and the callback that forgets a
    holding once it ended. The Keeper builds one for all its holdings."""

    client: Client
    clock: Clock
    log: logging.Logger
    #: The plain renewals' TTL, seconds.
    ttl: float
    #: The fraction of the TTL (or window) given up to clock-rate differences.
    drift_margin: float
    #: Seconds between plain renewals.
    renew_interval: float
    #: The fraction of ``renew_interval`` by which renewals come early at random.
    renew_jitter: float
    #: Spaces the retries of a failed renewal.
    retry_backoff: Backoff
    #: Bounds releases and transfers, seconds.
    release_timeout: float
    #: Called once a holding ended (released, transferred, lost, forgotten).
    forget: Callable[["Holding"], None]

    def jittered(self) -> float:
        """The next renewal interval: ``renew_interval`` less up to
        ``renew_jitter`` of it, at random."""
        d = self.renew_interval
        return d - random.random() * self.renew_jitter * d

    def attempt_timeout(self) -> float:
        """How long one renewal attempt may take, seconds."""
        return max(0.001, min(self.client.request_timeout, self.renew_interval))

    def retry_delay(self, err: BaseException, failures: int) -> float:
        """The backoff after ``failures`` failures, or a 429's Retry-After
        when longer."""
        d = self.retry_backoff.delay(failures)
        if isinstance(err, RateLimitedError) and err.retry_after > d:
            return err.retry_after
        return d


class Holding(abc.ABC):
    """One lease a :class:`~leasesvc.Keeper` holds, from its acquire until
    it is released, transferred or lost. Safe for use by many threads.

    Attributes:
        name: the lease.
        holder: the holder it is held as.
        token: its fencing token.
        cause: why the holding was lost (a
            :class:`~leasesvc.LeaseLostError`), None while held or after a
            release or transfer.
        ended: a :class:`threading.Event` set once the holding is over.
    """

    def __init__(self, keeping: Keeping, lease: Lease) -> None:
        self.name = lease.name
        self.holder = lease.holder
        self.token = lease.fencing_token
        self._kp = keeping
        self._clock = keeping.clock
        self._cond = threading.Condition()
        self._lease = lease
        self._listeners: Dict[int, Listener] = {}
        self._seq = 0
        self._over = False  # released, transferred or lost
        self.cause: Optional[BaseException] = None
        self.ended = threading.Event()
        self._staged: Optional[Dict[str, Any]] = None  # a checkpoint the next renewal carries
        self._deadline: Optional[float] = None

    # --- what each implementation says ----------------------------------

    @property
    @abc.abstractmethod
    def mode(self) -> str:
        """"session" or "plain": how the holding is kept."""

    @property
    @abc.abstractmethod
    def session(self) -> Optional[Session]:
        """The session the holding is kept through; None for plain
        renewals."""

    @property
    @abc.abstractmethod
    def span(self) -> float:
        """How long the holding lasts unconfirmed, seconds: the session's
        window, or the TTL of plain renewals (the span of rule L3)."""

    @property
    @abc.abstractmethod
    def period(self) -> float:
        """How long one keeping period lasts, seconds: the session's
        window, or the plain renewal interval."""

    @abc.abstractmethod
    def _start(self) -> None:
        """Begin keeping the holding (the Keeper calls it once, when it
        hands the holding out)."""

    @abc.abstractmethod
    def _deadline_after(self, sent: Optional[float]) -> Optional[float]:
        """(Under the lock.) The deadline once a confirmation sent at
        ``sent`` arrived (None: an ack or a push moved it)."""

    @abc.abstractmethod
    def _renew_call(self, checkpoint: Optional[Dict[str, Any]], metadata: Optional[Dict[str, Any]],
                    timeout: float) -> Dict[str, Any]:
        """Send one renew of the holding; the answer's lease JSON."""

    @abc.abstractmethod
    def _release_call(self, checkpoint: Optional[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
        """Send the release of the holding; the answer's lease JSON."""

    @abc.abstractmethod
    def _transfer_call(self, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """Send the transfer ``body`` of the holding; the answer's lease JSON."""

    @abc.abstractmethod
    def _stop_keeping(self) -> None:
        """The holding is over: stop what keeps it."""

    def _check_usable(self, op: str) -> None:
        """Raise when the holding cannot be used for ``op`` in this process
        (a session's forked copy); nothing by default."""

    # --- state ----------------------------------------------------------

    @property
    def lease(self) -> Lease:
        """The latest lease seen: the acquire's answer, then each renew's
        (with ``yield_requested`` set by a yield push)."""
        with self._cond:
            return self._lease

    @property
    def deadline(self) -> Optional[float]:
        """The monotonic instant after which the agent must not act as
        holder; None while a session has no acknowledged heartbeat.

        Raises:
            SessionForkedError: kept through a session, in a process forked
                from the one that opened it.
        """
        self._check_usable("deadline")
        with self._cond:
            return self._deadline

    @property
    def lost(self) -> bool:
        """Whether the holding was lost (not released or transferred)."""
        return self.cause is not None

    def wait_deadline(self, after: float, timeout: float) -> Optional[float]:
        """Wait up to ``timeout`` seconds (on the keeper's clock) for a
        deadline later than ``after``; the deadline then, None once the
        holding is over. (SessionForkedError: as :attr:`deadline`.)"""
        self._check_usable("deadline")
        end = self._clock.now() + timeout
        with self._cond:
            while not self._over and (self._deadline is None or self._deadline <= after):
                left = end - self._clock.now()
                if left <= 0:
                    break
                self._clock.wait(self._cond, left)
            return None if self._over else self._deadline

    # --- listeners ------------------------------------------------------

    def on_change(self, fn: Listener) -> int:
        """Call ``fn(kind, info)`` on every change; returns a handle for
        :meth:`off`. It must not block."""
        with self._cond:
            self._seq += 1
            self._listeners[self._seq] = fn
            return self._seq

    def off(self, handle: int) -> None:
        """Stop calling the listener of ``handle``."""
        with self._cond:
            self._listeners.pop(handle, None)

    def _tell(self, kind: str, info: Dict[str, Any]) -> None:
        """Tell every listener of a change of ``kind``."""
        with self._cond:
            fns = list(self._listeners.values())
        for fn in fns:
            try:
                fn(kind, info)
            except Exception:
                self._kp.log.exception("leasesvc keeper: a %s listener raised", kind)

    def stage(self, checkpoint: Optional[Dict[str, Any]]) -> None:
        """Have the next renewal the keeper makes on its own carry
        ``checkpoint`` (it replaces one staged before; None unstages). A
        holding kept through a session makes none: write it with
        :meth:`renew`. The ``moved`` change of the renewal that wrote it
        names it (``info["checkpoint"]``)."""
        with self._cond:
            self._staged = checkpoint

    def _moved(self, lease: Optional[Lease], sent: Optional[float], call: bool,
               wrote: Optional[Dict[str, Any]] = None) -> None:
        """A renew answered (``lease``, sent at ``sent``) or a heartbeat's
        ack or a push moved the deadline or the lease."""
        with self._cond:
            if self._over:
                return
            if wrote is not None and self._staged is wrote:
                self._staged = None
            if lease is not None:
                if lease.checkpoint is None:  # (it survives; keep what the acquire inherited)
                    lease.checkpoint, lease.checkpoint_token = self._lease.checkpoint, self._lease.checkpoint_token
                self._lease = lease
            self._deadline = self._deadline_after(sent)
            d = self._deadline
            self._cond.notify_all()
        self._tell("moved", {"deadline": d, "lease": lease, "sent": sent, "call": call, "checkpoint": wrote})

    def _lose(self, err: BaseException) -> None:
        """The holding ended without a release or transfer."""
        with self._cond:
            if self._over:
                return
            self._over, self.cause = True, err
            self._cond.notify_all()
        self._stop_keeping()
        self.ended.set()
        self._kp.forget(self)
        self._tell("lost", {"error": err})

    def _finish(self) -> None:
        """A release or transfer ended the holding (or it was forgotten)."""
        with self._cond:
            if self._over:
                return
            self._over = True
            self._cond.notify_all()
        self._stop_keeping()
        self.ended.set()
        self._kp.forget(self)

    def forget(self) -> None:
        """Stop keeping the holding without releasing it (no more renewals,
        no more changes told); a no-op once it ended."""
        self._finish()

    # --- operations -----------------------------------------------------

    def renew(self, checkpoint: Optional[Dict[str, Any]] = None, *, metadata: Optional[Dict[str, Any]] = None,
              timeout: Optional[float] = None) -> Lease:
        """Renew now, writing ``checkpoint`` and/or ``metadata`` if given,
        the way the holding is kept (through its session, or REST).

        Raises:
            LeaseLostError: the holding is over (it is then lost).
            LeaseError: the service refused or could not be reached.
        """
        t = self._kp.attempt_timeout() if timeout is None else timeout
        sent = self._clock.now()
        try:
            r = self._renew_call(checkpoint, metadata, t)
        except LeaseLostError as e:
            self._lose(e)
            raise
        lease = Lease.from_json(r)
        self._moved(lease, sent, True, checkpoint)
        return lease

    def release(self, checkpoint: Optional[Dict[str, Any]] = None, *, timeout: Optional[float] = None) -> Lease:
        """End the holding now, writing ``checkpoint`` if given. After
        success the holding is ended (not lost).

        Raises:
            LeaseError: the service refused or could not be reached.
        """
        r = self._release_call(checkpoint, self._kp.release_timeout if timeout is None else timeout)
        self._finish()
        return Lease.from_json(r)

    def transfer(self, to: str, reserve: Optional[float] = None, checkpoint: Optional[Dict[str, Any]] = None, *,
                 timeout: Optional[float] = None) -> Lease:
        """Hand the holding over to ``to`` (reserved ``reserve`` seconds;
        None: the service's default), writing ``checkpoint`` if given.
        After success the holding is ended (not lost).

        Raises:
            LeaseError: the service refused or could not be reached.
        """
        body: Dict[str, Any] = {"holder": self.holder, "fencingToken": self.token, "to": to}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        if reserve is not None:
            body["reserveMs"] = max(1, int(round(reserve * 1000)))
        r = self._transfer_call(body, self._kp.release_timeout if timeout is None else timeout)
        self._finish()
        return Lease.from_json(r)


class PlainHolding(Holding):
    """A holding kept by plain renewals: the keeper renews it every
    ``renew_interval`` (less jitter) on a thread of its own, retries a
    failed renewal after the backoff until the deadline, and loses it at
    the deadline when no renewal was confirmed."""

    def __init__(self, keeping: Keeping, lease: Lease, sent: float) -> None:
        """``sent``: the keeper's clock when the acquire (or the renew that
        followed a waiting acquire) was sent."""
        super().__init__(keeping, lease)
        self._deadline = deadline(sent, keeping.ttl, keeping.drift_margin)
        self._next = sent + keeping.jittered()
        self._failures = 0
        self._last_err: Optional[BaseException] = None
        self._stopped = False  # renewals refused for good

    @property
    def mode(self) -> str:
        """Always "plain"."""
        return PLAIN

    @property
    def session(self) -> Optional[Session]:
        """None: no session keeps it."""
        return None

    @property
    def span(self) -> float:
        """The TTL of the renewals."""
        return self._kp.ttl

    @property
    def period(self) -> float:
        """The renewal interval."""
        return self._kp.renew_interval

    def _start(self) -> None:
        """Start the renewal loop on a thread of its own."""
        threading.Thread(target=self._renewals, name=f"leasesvc-keeper-{self.name}", daemon=True).start()

    def _deadline_after(self, sent: Optional[float]) -> Optional[float]:
        """The plain deadline of the renew sent at ``sent`` (never earlier than before); it resets the failures."""
        if sent is None:
            return self._deadline
        self._failures, self._last_err = 0, None
        d = deadline(sent, self._kp.ttl, self._kp.drift_margin)
        return d if self._deadline is None or d > self._deadline else self._deadline

    def _renew_call(self, checkpoint: Optional[Dict[str, Any]], metadata: Optional[Dict[str, Any]],
                    timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._renew_call`.)"""
        return self._kp.client._renew(self.name, self.holder, self.token, metadata=metadata, checkpoint=checkpoint,
                                      attempts=1, timeout=timeout)

    def _release_call(self, checkpoint: Optional[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._release_call`.)"""
        c = self._kp.client
        return c._release(self.name, self.holder, self.token, checkpoint=checkpoint, timeout=timeout,
                          attempts=c.max_attempts)

    def _transfer_call(self, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._transfer_call`.)"""
        return self._kp.client._transfer(self.name, body, timeout=timeout)

    def _stop_keeping(self) -> None:
        """(The renewal loop sees the holding over and returns.)"""

    def _renewals(self) -> None:
        """The renewal loop: renew every interval (less jitter), retry
        failures after the backoff, lose the holding at the deadline."""
        kp = self._kp
        while True:
            with self._cond:
                while not self._over and not self._stopped:
                    now = self._clock.now()
                    assert self._deadline is not None
                    if now >= self._deadline or now >= self._next:
                        break
                    self._clock.wait(self._cond, min(self._deadline, self._next) - now)
                if self._over or self._stopped:
                    return
                late = self._clock.now() >= self._deadline  # type: ignore[operator]
                last, cp = self._last_err, self._staged
            if late:
                err = LeaseLostError("no renewal confirmed before the deadline"
                                     + (f": {last}" if last is not None else ""))
                if last is not None:
                    err.__cause__ = last
                kp.log.warning("leasesvc keeper %s (%s): %s", self.name, self.holder, err)
                self._lose(err)
                return
            sent = self._clock.now()
            try:
                r = self._renew_call(cp, None, kp.attempt_timeout())
            except LeaseLostError as e:
                self._lose(e)
                return
            except (InvalidArgumentError, AccessDeniedError) as e:
                with self._cond:
                    self._stopped = True
                self._tell("refused", {"error": e})
                return
            except Exception as e:  # retried until the deadline
                if not isinstance(e, LeaseError):
                    e = LeaseError(f"renew: {e}")
                with self._cond:
                    self._last_err = e
                    self._next = self._clock.now() + kp.retry_delay(e, self._failures)
                    self._failures += 1
                self._tell("failed", {"error": e})
                continue
            with self._cond:
                self._next = sent + kp.jittered()
            self._moved(Lease.from_json(r), sent, False, cp)


class SessionHolding(Holding):
    """A holding kept through a :class:`~leasesvc.Session`: its heartbeats
    keep it (no renewals of its own); what the session pushes about it
    (``lost``, ``revoked``, ``yield``, a moved deadline) reaches its
    listeners. When the session ends (closed, or ended by the service), the
    holding is lost at once."""

    def __init__(self, keeping: Keeping, lease: Lease, session: Session) -> None:
        super().__init__(keeping, lease)
        self._sess = session
        self._watch = 0
        self._deadline = session.deadline_for(self.name, self.token)

    @property
    def mode(self) -> str:
        """Always "session"."""
        return SESSION

    @property
    def session(self) -> Optional[Session]:
        """The session that keeps the holding."""
        return self._sess

    @property
    def span(self) -> float:
        """The session's window."""
        return self._sess.window

    @property
    def period(self) -> float:
        """The session's window."""
        return self._sess.window

    def _check_usable(self, op: str) -> None:
        """Raise SessionForkedError in a process forked from the one whose
        session keeps the holding: its deadline is the parent's."""
        if self._sess._forked:
            raise _session_fork.refusal(self._sess, op, self.name)

    def _start(self) -> None:
        """Hear the session's pushes about the holding (lost at once if it is gone already)."""
        self._watch = self._sess._watch(self.name, self.token, self._on_session)
        if not self._sess._holds(self.name, self.token):  # lost before the watch began
            self._lose(LeaseLostError("the session no longer holds the lease"))

    def _deadline_after(self, sent: Optional[float]) -> Optional[float]:
        """The session's deadline for the holding (:meth:`~leasesvc.Session.deadline_for`)."""
        return self._sess.deadline_for(self.name, self.token)

    def _renew_call(self, checkpoint: Optional[Dict[str, Any]], metadata: Optional[Dict[str, Any]],
                    timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._renew_call`.)"""
        return self._sess._renew(self.name, self.holder, self.token, metadata=metadata, checkpoint=checkpoint,
                                 timeout=timeout)

    def _release_call(self, checkpoint: Optional[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._release_call`.)"""
        return self._sess._release(self.name, self.holder, self.token, checkpoint=checkpoint, timeout=timeout)

    def _transfer_call(self, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """(:meth:`Holding._transfer_call`.)"""
        return self._sess._transfer(dict(body, name=self.name), timeout=timeout)

    def _stop_keeping(self) -> None:
        """Stop hearing the session's pushes."""
        if self._watch:
            self._sess._unwatch(self._watch)
            self._watch = 0

    def _on_session(self, kind: str, msg: Dict[str, Any]) -> None:
        """What the session pushes about this holding."""
        if kind == "deadline":
            self._moved(None, None, False)
        elif kind == "yield":
            with self._cond:
                old = self._lease
            self._moved(dataclasses.replace(old, yield_requested=True, yield_to=str(msg.get("to", ""))), None, False)
        else:
            self._lose(LeaseLostError(f"the session reports the lease {kind}: {msg.get('reason', '')}".rstrip(": ")))
