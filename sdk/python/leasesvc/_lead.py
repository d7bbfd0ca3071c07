"""The lead side of an :class:`~leasesvc.Elector`: one term on a
:class:`~leasesvc.Holding`, from the confirmed deadline to the release. The
term lasts until its stop time (:func:`leasesvc.timing.stop_at`: the
holding's deadline less ``cancel_before``), writes the checkpoints set on
it, hears what the keeper tells (renewed, failed, refused, lost, a yield
request) and ends on stop(), a step-down or the callback's return. A mixin
of ``Elector``, which owns the state. It uses the Holding API alone: how
the holding is kept (a session or plain renewals) is its Keeper's."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .errors import LeaseError, UnavailableError
from .holding import Holding
from .lease import Lease
from .leadership import ResignedError, StoppedError, YieldedError
from .term import GONE, RELEASED, RENEWING, Term, TermState
from .timing import stop_at as stop_time

if TYPE_CHECKING:  # pragma: no cover
    from .keeper import Keeper


class Leading(object):
    """Runs the terms of an :class:`~leasesvc.Elector` (a mixin: the
    Elector holds the state)."""

    if TYPE_CHECKING:  # pragma: no cover
        # What the host (Elector) defines and the terms use, typed as there.
        name: str
        holder: str
        keeper: Keeper
        leading: threading.Event
        _cond: threading.Condition
        _stopping: bool
        _clock: Callable[[], float]
        _log: logging.Logger
        _cb_name: str
        _on_started: Optional[Callable[[Term], None]]
        _on_stopped: Optional[Callable[[], None]]
        _on_renewed: Optional[Callable[[Lease, float], None]]
        _on_yield: Optional[Callable[[Term, str], None]]
        _term: Optional[Term]
        _st: Optional[TermState]

        def _sleep(self, d: float) -> bool: ...
        def _jittered(self, d: float) -> float: ...
        def _retry_delay(self, err: BaseException, failures: int) -> float: ...
        def _attempt_timeout(self) -> float: ...
        def _give_up(self, h: Holding) -> None: ...
        def _cancel_before_for_keeper(self) -> float: ...

    def _stop_at(self, h: Holding, cb: float) -> Optional[float]:
        """When a term on ``h`` must stop now: its stop time (its deadline
        less ``cb``), waiting up to a keeping period for a confirmation when
        it has passed; None when there is none (or the holding ended)."""
        d = h.deadline
        if d is None or self._clock() >= stop_time(d, cb):
            d = h.wait_deadline(self._clock() + cb, h.period)
        if d is None or self._clock() >= stop_time(d, cb) or h.ended.is_set():
            self._log.warning("leasesvc elector %s (%s): the holding's deadline is not confirmed; not leading "
                              "on fencing token %d", self.name, self.holder, h.token)
            return None
        return stop_time(d, cb)

    def _lead(self, h: Holding) -> bool:
        """Run one term on the holding ``h``. True when run() should return
        (stop or resignation), False to campaign again."""
        try:
            cb = self._cancel_before_for_keeper()
            stop_at = self._stop_at(h, cb)
            if stop_at is None:
                if self._sleep(self._retry_delay(UnavailableError("no deadline confirmed"), 0)):
                    return False  # campaign again: the repeated acquire finds the holding
                self._give_up(h)
                return True
            return self._lead_on(h, stop_at, cb)
        finally:
            h.forget()  # (a no-op once released, transferred or lost)

    def _lead_on(self, h: Holding, stop_at: float, cb: float) -> bool:
        """:meth:`_lead`, once the holding's deadline is confirmed; ``cb``
        is the term's cancel_before."""
        st = TermState()
        term = Term(h.lease, h, st)
        cond = self._cond
        results: List[Tuple[Optional[Lease], Optional[LeaseError], float]] = []
        pushed: List[Tuple[str, Dict[str, Any]]] = []
        cb_done = threading.Event()

        def end(cause: BaseException) -> None:
            with cond:
                if term.cause is None:
                    term.cause, term.ended_at = cause, self._clock()
                self.leading.clear()
                term.ended.set()

        def on_change(kind: str, info: Dict[str, Any]) -> None:
            with cond:
                if kind == "moved" and info["deadline"] is not None:
                    st.follow(stop_time(info["deadline"], cb))
                if kind == "moved" and info["checkpoint"] is not None:
                    st.written(info["checkpoint"])
                if kind != "moved" or (info["lease"] is not None and not info["call"]):
                    pushed.append((kind, info))
                cond.notify_all()

        # (the keeper's changes reach the term from before its callback starts)
        with cond:
            st.arm(stop_at)
        watch = h.on_change(on_change)
        d = h.deadline
        with cond:
            if d is not None:
                st.follow(stop_time(d, cb))
            if h.ended.is_set() and h.lost:  # lost before the watch began
                pushed.append(("lost", {"error": h.cause}))
            self._term, self._st = term, st
            self.leading.set()
        self._log.info("leasesvc elector %s (%s): leading, fencing token %d", self.name, self.holder, term.token)

        def callback() -> None:
            try:
                if self._on_started is not None:
                    self._on_started(term)
                else:
                    term.ended.wait()
            except Exception:
                self._log.exception("leasesvc elector %s: on_started_leading raised", self.name)
            finally:
                with cond:
                    cb_done.set()
                    cond.notify_all()

        threading.Thread(target=callback, name=self._cb_name, daemon=True).start()

        def renew(at: float) -> None:
            with cond:
                cp, gen = st.pending, st.gen
            try:
                lease = h.renew(cp, timeout=self._attempt_timeout())
                with cond:
                    if cp is not None and st.gen == gen:
                        st.pending = None  # stored
                res: Tuple[Optional[Lease], Optional[LeaseError], float] = (lease, None, at)
            except LeaseError as e:
                res = (None, e, at)
            except Exception as e:  # never leave the loop waiting for an answer
                res = (None, UnavailableError(f"renew: {e}", cause=e), at)
            with cond:
                results.append(res)
                cond.notify_all()

        try:
            return self._lead_loop(term, st, end, results, cb_done, renew, pushed)
        finally:
            h.off(watch)
            end(StoppedError("the Elector's run ended"))  # a no-op unless something raised
            with cond:
                if st.closed is None:
                    st.closed = term.cause
                if self._term is term:
                    self._term, self._st = None, None

    def _lead_loop(self, term: Term, st: TermState, end: Callable[[BaseException], None],
                   results: List[Tuple[Optional[Lease], Optional[LeaseError], float]],
                   cb_done: threading.Event, renew: Callable[[float], None],
                   pushed: List[Tuple[str, Dict[str, Any]]]) -> bool:
        """The event loop of one term: its deadline, the checkpoints it
        writes, what its keeper tells (renewed, failed, refused, lost,
        yield); the campaign's side: stop(), a step-down and the callback's
        return."""
        clock, cond = self._clock, self._cond
        # Why this leader stops leading while its term could go on: "" (it
        # leads until the term ends), "graceful" (stop()), "yielded" (for a
        # preempting candidate) or "resigned" (the callback returned).
        why = ""
        yield_seen = False  # on_yield_requested returned and the loop acted on it
        while True:
            with cond:
                while True:
                    now = clock()
                    if (self._stopping and why != "graceful") or cb_done.is_set() or results or pushed:
                        break
                    if term.phase == RENEWING and st.transferred:
                        break
                    if st.yield_ready and not yield_seen:
                        break
                    if st.due(now):
                        break
                    cond.wait(st.wait(now))
                got, results[:] = list(results), []
                news, pushed[:] = list(pushed), []
                stopping = self._stopping
                transferred, yield_ready = st.transferred, st.yield_ready
            now = clock()
            if transferred:
                st.on_transferred()  # the service ended the holding: nothing to renew, nothing to release
            if yield_ready and not yield_seen:
                yield_seen = True
                if term.leading:  # (not when the term already ended otherwise)
                    why = "yielded"
                    self._log.info("leasesvc elector %s (%s): stepping down for %s, fencing token %d",
                                   self.name, self.holder, st.yield_to, term.token)
                    end(YieldedError(st.yield_to))
            with cond:
                deadline = st.check_deadline(now)
            if deadline is not None:
                self._log.warning("leasesvc elector %s (%s): safe deadline reached, fencing token %d: %s",
                                  self.name, self.holder, term.token, st.last_err or "no answer to the renew in time")
                end(deadline)
            for kind, info in news:
                self._on_keeper(term, st, kind, info, why, end)
            if stopping and why != "graceful":
                why = "graceful"
                end(StoppedError("Elector.stop"))
                self._log.info("leasesvc elector %s (%s): stopping", self.name, self.holder)
            for r, err, at in got:
                with cond:
                    kind, v = st.on_result(r, err, at, lambda: self._jittered(self.keeper.renew_interval),
                                           self._retry_delay, clock())
                if kind == "renewed":
                    if self._on_renewed is not None:
                        self._hook("on_renewed", self._on_renewed, v, at)
                    if v.yield_requested and term.leading and why != "graceful":
                        self._ask_yield(term, st, v.yield_to)
                elif kind == "ended":
                    self._log.warning("leasesvc elector %s (%s): leadership lost, fencing token %d: %s",
                                      self.name, self.holder, term.token, v)
                    end(v)
                elif kind == "failed":
                    self._log.warning("leasesvc elector %s (%s): renew failed: %s", self.name, self.holder, v)
            if cb_done.is_set():
                if why == "" and term.leading:
                    why = "resigned"
                end(ResignedError("on_started_leading returned") if why == "resigned" else StoppedError("term over"))
                with cond:
                    if st.transferred:
                        st.on_transferred()
                if why and term.phase != GONE:
                    self._release(term, st)
                self._log.info("leasesvc elector %s (%s): stopped leading, fencing token %d",
                               self.name, self.holder, term.token)
                if self._on_stopped is not None:
                    self._hook("on_stopped_leading", self._on_stopped)
                return why in ("graceful", "resigned")
            with cond:
                take = st.take_renew(clock())
            if take:
                threading.Thread(target=renew, args=(clock(),), daemon=True).start()

    def _on_keeper(self, term: Term, st: TermState, kind: str, info: Dict[str, Any], why: str,
                   end: Callable[[BaseException], None]) -> None:
        """What the term's keeper told: a renewal it made on its own (or a
        yield push), a failed or refused renewal, the holding lost."""
        if kind == "moved":
            lease: Lease = info["lease"]
            if info["sent"] is not None and self._on_renewed is not None:
                self._hook("on_renewed", self._on_renewed, lease, info["sent"])
            if lease.yield_requested and term.leading and why != "graceful":
                self._ask_yield(term, st, lease.yield_to)
        elif kind == "failed":
            with self._cond:
                st.last_err = info["error"]
            self._log.warning("leasesvc elector %s (%s): renew failed: %s", self.name, self.holder, info["error"])
        elif kind == "refused":
            with self._cond:
                st.stop(info["error"])
            self._log.warning("leasesvc elector %s (%s): leadership lost, fencing token %d: %s",
                              self.name, self.holder, term.token, info["error"])
            end(info["error"])
        else:
            lost = info["error"]
            with self._cond:
                was = st.on_gone(lost)
            if was or term.leading:
                self._log.warning("leasesvc elector %s (%s): leadership lost, fencing token %d: %s",
                                  self.name, self.holder, term.token, lost)
            end(lost)

    def _hook(self, what: str, f: Optional[Callable[..., None]], *args: Any) -> None:
        """Call a user hook; an exception in it is logged, not raised into
        the Elector's loop."""
        if f is None:
            return
        try:
            f(*args)
        except Exception:
            self._log.exception("leasesvc elector %s: %s raised", self.name, what)

    def _ask_yield(self, term: Term, st: TermState, to: str) -> None:
        """A renew answered that ``to`` asks this term to step down: call
        on_yield_requested (once per term) in a thread of its own; the lead
        loop steps down when it returned."""
        with self._cond:
            if st.yield_to:
                return
            st.yield_to = to or "?"
        self._log.info("leasesvc elector %s (%s): %s asks to step down, fencing token %d",
                       self.name, self.holder, to, term.token)

        def ask() -> None:
            try:
                if self._on_yield is not None:
                    self._on_yield(term, to)
            except Exception:
                self._log.exception("leasesvc elector %s: on_yield_requested raised", self.name)
            finally:
                with self._cond:
                    st.yield_ready = True
                    self._cond.notify_all()

        threading.Thread(target=ask, name=f"leasesvc-yield-{self.name}", daemon=True).start()

    def _release(self, term: Term, st: TermState) -> None:
        with self._cond:
            cp = st.pending
            st.pending = None
            if st.closed is None:
                st.closed = StoppedError("released")
            st.phase = RELEASED
        assert term.holding is not None
        try:
            term.holding.release(cp, timeout=self.keeper.release_timeout)
        except LeaseError as e:
            self._log.warning("leasesvc elector %s (%s): release failed; the lease runs out at its expiry: %s",
                              self.name, self.holder, e)
