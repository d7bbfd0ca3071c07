"""Sessions across ``os.fork`` (docs/contract.md §14, clones): a forked
child's copy of a :class:`~leasesvc.Session` shares the parent's socket and
carries the parent's deadline. Were the child to heartbeat, resume or lead
on it, two agents would hold live deadlines for the same leases, which the
rules A1–A3 do not cover. So the child refuses to use it
(:class:`~leasesvc.SessionForkedError`) and sends nothing; the parent goes
on as before.

:func:`track` registers a session; after a fork, in the child only, every
registered session is marked forked and given fresh locks (a thread of
the parent may have held its locks at the fork, and no thread of the
parent runs in the child to release them)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol

from .errors import SessionForkedError


class Forkable(Protocol):
    """What this module reads and writes of a session (a
    :class:`~leasesvc.Session` is one)."""

    _pid: int
    _forked: bool
    _mu: threading.Lock
    _cond: threading.Condition
    _send_mu: threading.Lock


_sessions: "weakref.WeakSet[Forkable]" = weakref.WeakSet()


def track(s: Forkable) -> None:
    """Mark ``s`` forked in every child forked from now on."""
    _sessions.add(s)


def _after_fork_in_child() -> None:
    """(In a forked child.) Mark every tracked session forked, with fresh
    locks."""
    for s in list(_sessions):
        s._forked = True
        s._mu = threading.Lock()
        s._cond = threading.Condition(s._mu)
        s._send_mu = threading.Lock()


def refusal(s: Forkable, op: str, name: str = "") -> SessionForkedError:
    """The error of using the forked session ``s`` for ``op`` (of lease
    ``name``)."""
    err = SessionForkedError(f"the session was opened in process {s._pid} and this process ({os.getpid()}) is a "
                             "fork of it: a session is not used across a fork, and nothing is sent from here "
                             "(docs/contract.md §14, clones); open a Client and a session in this process")
    return err._named(op, name)


if hasattr(os, "register_at_fork"):  # (POSIX; Windows cannot fork)
    os.register_at_fork(after_in_child=_after_fork_in_child)
