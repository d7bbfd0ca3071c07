"""``AsyncElector``: the :class:`~leasesvc.Elector` for agents written with
asyncio.

The renewals and the safe deadline (docs/contract.md §2) do not run on the
event loop: an :class:`AsyncElector` drives a threaded
:class:`~leasesvc.Elector`, whose thread ends the term at the safe deadline
whatever the loop is doing. A coroutine that blocks the loop (a ``time.sleep``,
a CPU-bound step, a synchronous call) cannot keep its term alive: the term's
thread-safe flag :attr:`AsyncTerm.ended` is set at the deadline, and the
leader's task is cancelled as soon as the loop runs again. Code that may
block between awaits checks :attr:`AsyncTerm.leading` (or ``term.ended``)
before each write it fences with the token.

Example::

    import asyncio
    import leasesvc
    from leasesvc.aio import AsyncElector

    async def main() -> None:
        with leasesvc.Client("http://localhost:8080") as client, leasesvc.Keeper(client) as keeper:
            async with AsyncElector(keeper, "team-a.scheduler") as elector:
                while True:
                    term = await elector.leadership()   # until this agent leads
                    async with term:                    # cancelled when the term ends
                        while True:
                            await write_downstream(term.token)
                            await asyncio.sleep(1)

    asyncio.run(main())

Like the Elector, it is built on a :class:`~leasesvc.Keeper`, which holds
the lease (through the Client's shared session by default,
docs/contract.md §14), and the session's heartbeats run in threads too;
``AsyncElector.for_client(client, name, ...)`` builds a Keeper of its own.

The :class:`~leasesvc.Client` is synchronous: call it from a coroutine with
``await asyncio.to_thread(client.get, name)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import warnings
from typing import Any, Awaitable, Callable, Dict, Generator, List, Optional, Set, Tuple

from .client import Client
from .elector import Elector, NotLeadingError, Term
from .keeper import Keeper
from .lease import Lease
from .leadership import Callbacks

__all__ = ["AsyncElector", "AsyncTerm"]


class AsyncTerm:
    """One term of leadership, for asyncio code.

    It is awaitable: ``cause = await term`` waits until the term ends and
    returns why (:class:`~leasesvc.LeaseLostError`,
    :class:`~leasesvc.SafeDeadlineError`, :class:`~leasesvc.StoppedError`,
    ...). It is an async context manager: ``async with term:`` runs the
    block as the leader; when the term ends, the task running the block is
    cancelled (like :func:`asyncio.timeout`), and the block's exit swallows
    that cancellation, so the code after the block runs. Entering a term
    that has ended raises :class:`~leasesvc.NotLeadingError`.

    Attributes:
        token: the fencing token: pass it with every write downstream.
        lease: the lease as the acquire that began the term answered it.
        checkpoint: the checkpoint the term inherited, or ``None``.
        checkpoint_token: the fencing token of the holding that wrote it.
    """

    def __init__(self, term: Term, loop: asyncio.AbstractEventLoop, idle: Callable[[], None]) -> None:
        self._term = term
        self._loop = loop
        self._idle = idle  # called on the loop when nothing runs as leader any more
        self._over = loop.create_future()  # resolved on the loop once it saw the end
        self._tasks: Set["asyncio.Task[Any]"] = set()  # in an `async with term` block
        self._cancelled: Set["asyncio.Task[Any]"] = set()  # cancelled by the end
        self._leader: Optional["asyncio.Task[Any]"] = None  # the on_started_leading task
        self.token: int = term.token
        self.lease: Lease = term.lease
        self.checkpoint: Optional[Dict[str, Any]] = term.checkpoint
        self.checkpoint_token: int = term.checkpoint_token

    @property
    def ended(self) -> threading.Event:
        """The thread-safe flag set the moment leadership ends (by the
        Elector's thread, at the safe deadline at the latest), even while the
        event loop is blocked."""
        return self._term.ended

    @property
    def leading(self) -> bool:
        """Whether the term still lasts (read from :attr:`ended`, not from
        the loop)."""
        return not self._term.ended.is_set()

    @property
    def cause(self) -> Optional[BaseException]:
        """Why the term ended; ``None`` while leading."""
        return self._term.cause

    @property
    def ended_at(self) -> Optional[float]:
        """The Elector's monotonic clock when the term ended; ``None`` while
        leading."""
        return self._term.ended_at

    def __await__(self) -> Generator[Any, None, Optional[BaseException]]:
        return self._until_over().__await__()

    async def _until_over(self) -> Optional[BaseException]:
        await asyncio.shield(self._over)
        return self._term.cause

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the term ends or ``timeout`` seconds pass; True when it
        ended."""
        try:
            await asyncio.wait_for(asyncio.shield(self._over), timeout)
        except asyncio.TimeoutError:
            pass
        return self._term.ended.is_set()

    async def __aenter__(self) -> "AsyncTerm":
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("leasesvc.AsyncTerm: async with needs a task")
        if self._term.ended.is_set():
            raise NotLeadingError(f"leasesvc.AsyncTerm: the term of fencing token {self.token} has ended: {self.cause}")
        self._tasks.add(task)
        return self

    async def __aexit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Any) -> bool:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.discard(task)
        suppress = False
        if task in self._cancelled:
            self._cancelled.discard(task)
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+
            if uncancel is not None:
                uncancel()
            suppress = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
        self._idle()
        return suppress

    def _end(self) -> None:
        """On the loop, once the Elector's thread ended the term: resolve the
        awaiters and cancel the blocks still running as leader."""
        if not self._over.done():
            self._over.set_result(None)
        for task in list(self._tasks):
            if task not in self._cancelled and not task.done():
                self._cancelled.add(task)
                task.cancel()
        self._idle()


LeaderCoroutine = Callable[[AsyncTerm], Awaitable[None]]


class AsyncElector:
    """Campaigns for one lease and keeps it while this process leads, for
    asyncio code: an :class:`~leasesvc.Elector` running in threads, with its
    terms handed to the event loop.

    ``async with AsyncElector(keeper, name) as elector:`` starts it and, at
    the end of the block, stops it gracefully: the term ends, the leader's
    task is cancelled and awaited, the lease is released.

    Leader code runs either in ``on_started_leading``, a coroutine function
    called with each :class:`AsyncTerm` as a task of its own and cancelled
    when the term ends (returning while still leading resigns, as with the
    threaded Elector), or in a task that awaits :meth:`leadership` and runs
    ``async with term:``. Either way the lease is released only once that
    code has stopped, and the Elector campaigns again only then.

    Guarantee: as :class:`~leasesvc.Elector`'s: the term ends no later than
    (local monotonic time when the last successful acquire or renew was
    sent) + TTL × (1 − drift_margin) − cancel_before, on the Elector's
    thread, even while the event loop is blocked; the cancellation of the
    leader's task follows as soon as the loop runs. The fencing token
    protects the writes a blocked loop sends late.

    Args:
        keeper: the :class:`~leasesvc.Keeper` that holds the lease (a
            :class:`~leasesvc.Client`, deprecated: as :meth:`for_client`).
        name: the lease.
        on_started_leading: ``async f(term)``, run as a task when a term
            begins; cancelled when it ends. ``None``: use :meth:`leadership`.
        **options: every other option of :class:`~leasesvc.Elector`
            (``holder``, ``cancel_before``, ``priority``, ``callbacks``,
            ...). The synchronous hooks of ``callbacks``
            (``on_stopped_leading``, ``on_new_leader``, ``on_renewed``,
            ``on_yield_requested``) run in the Elector's threads: hand work
            to the loop with
            :meth:`asyncio.AbstractEventLoop.call_soon_threadsafe`.
    """

    def __init__(self, keeper: Keeper, name: str, *,
                 on_started_leading: Optional[LeaderCoroutine] = None, **options: Any) -> None:
        self._setup(on_started_leading)
        if isinstance(keeper, Client):
            warnings.warn("leasesvc.AsyncElector(client, name, ...) is deprecated: use AsyncElector(keeper, name, "
                          "...) over a leasesvc.Keeper, or AsyncElector.for_client(client, name, ...)",
                          DeprecationWarning, stacklevel=2)
            self._e = Elector.for_client(keeper, name, callbacks=self._callbacks(options), **options)
        else:
            self._e = Elector(keeper, name, callbacks=self._callbacks(options), **options)

    @classmethod
    def for_client(cls, client: Client, name: str, *, on_started_leading: Optional[LeaderCoroutine] = None,
                   **options: Any) -> "AsyncElector":
        """An AsyncElector over a Keeper of its own on ``client``, as
        :meth:`Elector.for_client <leasesvc.Elector.for_client>` (whose
        options it takes: the Elector's, the synchronous callbacks one by
        one, and the Keeper's)."""
        self = cls.__new__(cls)
        self._setup(on_started_leading)
        self._e = Elector.for_client(client, name, callbacks=self._callbacks(options), **options)
        return self

    def _setup(self, on_started_leading: Optional[LeaderCoroutine]) -> None:
        """The state of a new AsyncElector (its Elector comes next)."""
        self._on_started = on_started_leading
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._current: Optional[AsyncTerm] = None
        self._waiters: List["asyncio.Future[AsyncTerm]"] = []
        self._leaders: Set["asyncio.Task[Any]"] = set()  # on_started_leading tasks

    def _callbacks(self, options: Dict[str, Any]) -> Callbacks:
        """The threaded Elector's callbacks: ``options``' ``callbacks``
        (taken out of it) with the bridge as ``on_started_leading``."""
        cbs = options.pop("callbacks", None) or Callbacks()
        if cbs.on_started_leading is not None:
            raise TypeError("leasesvc.AsyncElector: on_started_leading is the coroutine function given to the "
                            "AsyncElector, not a Callbacks field")
        return dataclasses.replace(cbs, on_started_leading=self._bridge)

    @property
    def elector(self) -> Elector:
        """The threaded :class:`~leasesvc.Elector` underneath (for
        :meth:`~leasesvc.Elector.set_checkpoint`, :attr:`~leasesvc.Elector.error`,
        ...)."""
        return self._e

    @property
    def name(self) -> str:
        """The lease."""
        return self._e.name

    @property
    def holder(self) -> str:
        """This participant's identity."""
        return self._e.holder

    def is_leader(self) -> bool:
        """Whether this Elector leads now (a thread-safe flag)."""
        return self._e.is_leader()

    def token(self) -> Optional[int]:
        """The fencing token of the current term while leading, else None."""
        return self._e.token()

    def leader(self) -> Tuple[str, int]:
        """The holder and fencing token last seen leading."""
        return self._e.leader()

    def term(self) -> Optional[AsyncTerm]:
        """The current term while leading, else None."""
        t = self._current
        return t if t is not None and t.leading else None

    async def leadership(self) -> AsyncTerm:
        """Wait until this Elector leads and return the term."""
        t = self.term()
        if t is not None:
            return t
        fut: "asyncio.Future[AsyncTerm]" = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    # --- life cycle ---------------------------------------------------------

    async def start(self) -> None:
        """Start campaigning in the Elector's thread; it returns at once."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("leasesvc.AsyncElector: started on another event loop")
        self._loop = loop
        self._e.start()

    async def stop(self, timeout: Optional[float] = None) -> None:
        """Stop gracefully: end the term, cancel and await the leader's code,
        release the lease, and wait up to ``timeout`` seconds (None: for
        ever) for the Elector's thread. Called from the leader's own code, it
        asks for the stop and returns at once: that code is then cancelled."""
        me = asyncio.current_task()
        t = self._current
        if me is not None and (me in self._leaders or (t is not None and me in t._tasks)):
            self._e.stop(0)
            return
        await asyncio.get_running_loop().run_in_executor(None, self._e.stop, timeout)

    async def __aenter__(self) -> "AsyncElector":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def checkpoint(self, value: Dict[str, Any]) -> Lease:
        """:meth:`Elector.checkpoint <leasesvc.Elector.checkpoint>` without
        blocking the loop: written at once with a renew."""
        return await asyncio.get_running_loop().run_in_executor(None, self._e.checkpoint, value)

    def set_checkpoint(self, value: Dict[str, Any]) -> None:
        """:meth:`Elector.set_checkpoint <leasesvc.Elector.set_checkpoint>`:
        sent with the next renew or the release; costs no request."""
        self._e.set_checkpoint(value)

    async def transfer(self, to: str, checkpoint: Optional[Dict[str, Any]] = None, *,
                       reserve: Optional[float] = None) -> Lease:
        """:meth:`Elector.transfer <leasesvc.Elector.transfer>` without
        blocking the loop."""
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self._e.transfer(to, checkpoint, reserve=reserve))

    # --- the bridge (the Elector's callback thread) ---------------------------

    def _bridge(self, term: Term) -> None:
        """The threaded Elector's on_started_leading: hand the term to the
        loop, end it there when the Elector's thread ends it, and return once
        nothing runs as leader any more (the Elector then releases, or
        resigns when the leader coroutine returned while leading)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        idle = threading.Event()
        box: List[AsyncTerm] = []

        def begin() -> None:
            at = AsyncTerm(term, loop, lambda: self._check_idle(at, idle))
            box.append(at)
            self._current = at
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(at)
            self._waiters.clear()
            if self._on_started is not None:
                task = loop.create_task(self._lead(at))
                self._leaders.add(task)
                at._leader = task
                task.add_done_callback(lambda _t: at._idle())
            if term.ended.is_set():
                at._end()

        def end() -> None:
            if box:
                box[0]._end()

        if not _post(loop, begin):
            return

        def watch() -> None:
            term.ended.wait()
            if not _post(loop, end):
                idle.set()

        threading.Thread(target=watch, name=f"leasesvc-aio-{self._e.name}", daemon=True).start()
        while not idle.wait(1.0):
            if loop.is_closed():  # the loop is gone: nothing can run as leader
                return

    async def _lead(self, at: AsyncTerm) -> None:
        """Run on_started_leading as the leader: cancelled when the term
        ends."""
        assert self._on_started is not None
        try:
            async with at:
                await self._on_started(at)
        except NotLeadingError:
            pass  # the term ended before the task began
        except Exception:
            self._e._log.exception("leasesvc elector %s: on_started_leading raised", self._e.name)
        finally:
            task = asyncio.current_task()
            self._leaders.discard(task)  # type: ignore[arg-type]

    def _check_idle(self, at: AsyncTerm, idle: threading.Event) -> None:
        """On the loop: tell the Elector's callback thread once nothing runs
        as leader: no block is inside ``async with at``, the leader task (if
        any) is done, and, without a leader task, the term has ended."""
        if at._tasks:
            return
        if at._leader is not None:
            if at._leader.done():
                idle.set()
        elif at._over.done():
            idle.set()


def _post(loop: asyncio.AbstractEventLoop, f: Callable[[], None]) -> bool:
    """Call f on the loop; False when the loop is closed."""
    try:
        loop.call_soon_threadsafe(f)
        return True
    except RuntimeError:
        return False
