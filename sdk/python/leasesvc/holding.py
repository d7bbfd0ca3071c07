"""``Holding``: one lease a :class:`~leasesvc.Keeper` holds, by plain
renewals or through a :class:`~leasesvc.Session`, and the keeper's
:class:`Clock`. The holding owns its deadline (see :mod:`leasesvc.keeper`:
the plain formula is :meth:`Holding._plain_deadline`; through a session it
is the session's for this holding, :meth:`~leasesvc.Session.deadline_for`:
the session's deadline once an ack came after the holding's answer, and
until then at most its acquire's send time + the session lease TTL ×
(1 − drift margin)).

Listeners (:meth:`Holding.on_change`) hear ``moved`` (the deadline moved
or lease fields changed, such as ``yield_requested``), ``failed`` (a
renewal failed and is retried), ``refused`` (renewals are refused for
good; a release may still end the holding) and ``lost`` (the holding
ended: revoked, taken, the session ended, a renew answered
``lease_lost``, or the deadline passed with no confirmation; the cause is
a :class:`~leasesvc.LeaseLostError`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from . import _session_fork
from .backoff import Backoff
from .errors import AccessDeniedError, InvalidArgumentError, LeaseError, LeaseLostError, RateLimitedError
from .lease import Lease
from .session import Session

if TYPE_CHECKING:  # pragma: no cover
    from .keeper import Keeper

__all__ = ["Holding", "Clock", "PLAIN", "SESSION"]

#: The keeper's modes.
SESSION = "session"
PLAIN = "plain"

#: ``f(kind, info)``: kind "moved" (info: ``deadline``, ``lease`` (None for
#: a heartbeat's ack), ``sent``, ``call`` (True when the agent's own call
#: moved it)), "failed", "refused" or "lost" (info: ``error``).
Listener = Callable[[str, Dict[str, Any]], None]


class Clock:
    """The keeper's clock: monotonic :meth:`now` (seconds) and
    :meth:`wait` on a condition until woken or ``timeout`` passes on this
    clock. Tests pass a fake one whose time moves only when told."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now

    def now(self) -> float:
        """The monotonic time, seconds."""
        return self._now()

    def wait(self, cond: threading.Condition, timeout: Optional[float]) -> None:
        """Wait on ``cond`` (held) up to ``timeout`` seconds (None: until
        notified)."""
        cond.wait(None if timeout is None else max(0.0, timeout))


def _retry_delay(backoff: Backoff, err: BaseException, failures: int) -> float:
    """The backoff, or a 429's Retry-After when longer."""
    d = backoff.delay(failures)
    if isinstance(err, RateLimitedError) and err.retry_after > d:
        return err.retry_after
    return d


class Holding:
    """One lease a :class:`Keeper` holds, from its acquire until it is
    released, transferred or lost. Safe for use by many threads."""

    def __init__(self, keeper: "Keeper", lease: Lease, sent: float, session: Optional[Session]) -> None:
        self.name = lease.name
        self.holder = lease.holder
        self.token = lease.fencing_token
        self._k = keeper
        self._clock = keeper.clock
        self._sess = session
        self._cond = threading.Condition()
        self._lease = lease
        self._listeners: Dict[int, Listener] = {}
        self._seq = 0
        self._over = False  # released, transferred or lost
        #: Why the holding was lost (a LeaseLostError), None while held or
        #: after a release or transfer.
        self.cause: Optional[BaseException] = None
        self.ended = threading.Event()
        self._watch = 0
        self._staged: Optional[Dict[str, Any]] = None  # a checkpoint the next renewal carries
        if session is None:
            self._deadline: Optional[float] = self._plain_deadline(sent)
            self._next = sent + keeper._jittered()
            self._failures = 0
            self._last_err: Optional[BaseException] = None
            self._stopped = False  # renewals refused for good
            threading.Thread(target=self._renewals, name=f"leasesvc-keeper-{self.name}", daemon=True).start()
        else:
            self._deadline = session.deadline_for(self.name, self.token)
            self._watch = session._watch(self.name, self.token, self._on_session)
            if not session._holds(self.name, self.token):  # lost before the watch began
                self._lose(LeaseLostError("the session no longer holds the lease"))

    # --- state ----------------------------------------------------------

    @property
    def mode(self) -> str:
        """"session" or "plain": how the holding is kept."""
        return PLAIN if self._sess is None else SESSION

    @property
    def session(self) -> Optional[Session]:
        """The session the holding is kept through; None for plain renewals."""
        return self._sess

    @property
    def lease(self) -> Lease:
        """The latest lease seen: the acquire's answer, then each renew's
        (with ``yield_requested`` set by a yield push)."""
        with self._cond:
            return self._lease

    def _refuse_forked(self, op: str) -> None:
        """Raise SessionForkedError in a process forked from the one whose
        session keeps the holding: its deadline is the parent's."""
        if self._sess is not None and self._sess._forked:
            raise _session_fork.refusal(self._sess, op, self.name)

    @property
    def deadline(self) -> Optional[float]:
        """The monotonic instant after which the agent must not act as
        holder; None while a session has no acknowledged heartbeat.

        Raises:
            SessionForkedError: kept through a session, in a process forked
                from the one that opened it.
        """
        self._refuse_forked("deadline")
        with self._cond:
            return self._deadline

    @property
    def cancel_before_cap(self) -> float:
        """The most a leader should stop before the deadline and still lead:
        a tenth of a session's window (no bound for plain renewals)."""
        return math.inf if self._sess is None else self._sess.window / 10

    @property
    def period(self) -> float:
        """How long one keeping period lasts, seconds: the session's window,
        or the plain renewal interval."""
        return self._k.renew_interval if self._sess is None else self._sess.window

    @property
    def lost(self) -> bool:
        """Whether the holding was lost (not released or transferred)."""
        return self.cause is not None

    def _plain_deadline(self, sent: float) -> float:
        """THE plain deadline: the send time of the last acquire or renew
        that succeeded + TTL × (1 − drift margin)."""
        return sent + self._k.ttl * (1 - self._k.drift_margin)

    def wait_deadline(self, after: float, timeout: float) -> Optional[float]:
        """Wait up to ``timeout`` seconds (on the keeper's clock) for a
        deadline later than ``after``; the deadline then, None once the
        holding is over. (SessionForkedError: as :attr:`deadline`.)"""
        self._refuse_forked("deadline")
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
        with self._cond:
            fns = list(self._listeners.values())
        for fn in fns:
            try:
                fn(kind, info)
            except Exception:
                self._k.log.exception("leasesvc keeper: a %s listener raised", kind)

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
        ack moved the deadline."""
        with self._cond:
            if self._over:
                return
            if wrote is not None and self._staged is wrote:
                self._staged = None
            if lease is not None:
                if lease.checkpoint is None:  # (it survives; keep what the acquire inherited)
                    lease.checkpoint, lease.checkpoint_token = self._lease.checkpoint, self._lease.checkpoint_token
                self._lease = lease
            if self._sess is None and sent is not None:
                d = self._plain_deadline(sent)
                if self._deadline is None or d > self._deadline:
                    self._deadline = d
                self._failures, self._last_err = 0, None
            elif self._sess is not None:
                self._deadline = self._sess.deadline_for(self.name, self.token)
            deadline = self._deadline
            self._cond.notify_all()
        self._tell("moved", {"deadline": deadline, "lease": lease, "sent": sent, "call": call, "checkpoint": wrote})

    def _lose(self, err: BaseException) -> None:
        """The holding ended without a release or transfer."""
        with self._cond:
            if self._over:
                return
            self._over, self.cause = True, err
            self._cond.notify_all()
        self._end_watch()
        self.ended.set()
        self._k._forget(self)
        self._tell("lost", {"error": err})

    def _finish(self) -> None:
        """A release or transfer ended the holding."""
        with self._cond:
            if self._over:
                return
            self._over = True
            self._cond.notify_all()
        self._end_watch()
        self.ended.set()
        self._k._forget(self)

    def forget(self) -> None:
        """Stop keeping the holding without releasing it (no more renewals,
        no more changes told); a no-op once it ended."""
        self._finish()

    def _end_watch(self) -> None:
        if self._sess is not None and self._watch:
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

    # --- plain renewals -------------------------------------------------

    def _renewals(self) -> None:
        """The plain renewal loop: renew every interval (less jitter), retry
        failures after the backoff, lose the holding at the deadline."""
        k = self._k
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
                now = self._clock.now()
                late = now >= self._deadline  # type: ignore[operator]
                last, cp = self._last_err, self._staged
            if late:
                err = LeaseLostError("no renewal confirmed before the deadline"
                                     + (f": {last}" if last is not None else ""))
                if last is not None:
                    err.__cause__ = last
                k.log.warning("leasesvc keeper %s (%s): %s", self.name, self.holder, err)
                self._lose(err)
                return
            sent = self._clock.now()
            try:
                r = k.client._renew(self.name, self.holder, self.token, checkpoint=cp, attempts=1,
                                    timeout=k._attempt_timeout())
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
                    self._next = self._clock.now() + _retry_delay(k.retry_backoff, e, self._failures)
                    self._failures += 1
                self._tell("failed", {"error": e})
                continue
            with self._cond:
                self._next = sent + k._jittered()
            self._moved(Lease.from_json(r), sent, False, cp)

    # --- operations -----------------------------------------------------

    def renew(self, checkpoint: Optional[Dict[str, Any]] = None, *, metadata: Optional[Dict[str, Any]] = None,
              timeout: Optional[float] = None) -> Lease:
        """Renew now, writing ``checkpoint`` and/or ``metadata`` if given,
        through the session or REST (whichever keeps the holding).

        Raises:
            LeaseLostError: the holding is over (it is then lost).
            LeaseError: the service refused or could not be reached.
        """
        t = self._k._attempt_timeout() if timeout is None else timeout
        sent = self._clock.now()
        try:
            if self._sess is not None:
                r = self._sess._renew(self.name, self.holder, self.token, metadata=metadata, checkpoint=checkpoint,
                                      timeout=t)
            else:
                r = self._k.client._renew(self.name, self.holder, self.token, metadata=metadata,
                                          checkpoint=checkpoint, attempts=1, timeout=t)
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
        t = self._k.release_timeout if timeout is None else timeout
        if self._sess is not None:
            r = self._sess._release(self.name, self.holder, self.token, checkpoint=checkpoint, timeout=t)
        else:
            r = self._k.client._release(self.name, self.holder, self.token, checkpoint=checkpoint, timeout=t,
                                        attempts=self._k.client.max_attempts)
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
        t = self._k.release_timeout if timeout is None else timeout
        if self._sess is not None:
            r = self._sess._transfer(dict(body, name=self.name), timeout=t)
        else:
            r = self._k.client._transfer(self.name, body, timeout=t)
        self._finish()
        return Lease.from_json(r)
