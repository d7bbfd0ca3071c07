"""What the :class:`~leasesvc.Elector` and
:class:`~leasesvc.aio.AsyncElector` share: their defaults, the checks of
names and checkpoints, the causes a term ends with, and
:class:`Callbacks`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
from typing import Any, Callable, Dict, Optional

from .lease import Lease
from .term import Term
from .timing import default_cancel_before  # noqa: F401 (re-exported)

#: The lease duration an Elector asks for by default, seconds.
DEFAULT_TTL = 30.0
#: The fraction of the TTL given up to clock-rate differences.
DEFAULT_DRIFT_MARGIN = 0.1
#: The fraction of the renew interval by which renewals come early at random.
DEFAULT_RENEW_JITTER = 0.1
#: How long one acquire waits on the service (waitMs), seconds.
DEFAULT_WAIT = 30.0
_MAX_WAIT = 60.0
#: The highest priority the service accepts (docs/contract.md §8).
MAX_PRIORITY = 1000
#: The largest checkpoint, as compact JSON, the service stores, bytes.
MAX_CHECKPOINT_BYTES = 16 << 10

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def valid_name(name: str) -> bool:
    """Whether ``name`` is a valid lease name (docs/contract.md §1): 1–128
    characters of ``[A-Za-z0-9._-]``, starting with a letter or digit."""
    return bool(_NAME.match(name)) and not name.endswith("\n")


def default_holder() -> str:
    """``{hostname}-{pid}``, the default identity."""
    return f"{socket.gethostname() or 'host'}-{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class Callbacks:
    """An :class:`~leasesvc.Elector`'s callbacks, as client-go's
    ``LeaderCallbacks`` and the Go SDK's ``LeaderCallbacks``.

    Attributes:
        on_started_leading: ``f(term)``, called in a thread of its own when
            a term begins. Stop all leader work when ``term.ended`` is set,
            and return; returning while still leading resigns (the lease is
            released and ``run`` returns). ``None``: nothing runs; the term
            lasts until it is lost or the Elector stops.
        on_stopped_leading: ``f()``, called after every term, once
            ``on_started_leading`` returned (after the release, on stop).
        on_new_leader: ``f(holder)``, called from the run thread whenever
            the holder seen leading changes, this Elector's own included.
            It must not block.
        on_renewed: ``f(lease, sent)``, called from the run thread after
            each renewal that moved a term's deadline, ``sent`` being the
            keeper's monotonic time the renew was sent. It must not block.
            Through a session a term renews only to write a checkpoint: the
            session's heartbeats keep it.
        on_yield_requested: ``f(term, yield_to)``, called in a thread of
            its own, at most once per term, when a preempting candidate
            ``yield_to`` asks this leader to step down. The term still
            lasts: it may save progress with
            :meth:`~leasesvc.Elector.set_checkpoint` or
            :meth:`~leasesvc.Elector.checkpoint`. When it returns, the
            Elector steps down: it ends the term (cause
            :class:`YieldedError`), waits for ``on_started_leading`` to
            return, releases the lease with the latest checkpoint, calls
            ``on_stopped_leading`` and campaigns again. ``None``: it steps
            down the same way at once.
    """

    on_started_leading: Optional[Callable[[Term], None]] = None
    on_stopped_leading: Optional[Callable[[], None]] = None
    on_new_leader: Optional[Callable[[str], None]] = None
    on_renewed: Optional[Callable[[Lease, float], None]] = None
    on_yield_requested: Optional[Callable[[Term, str], None]] = None


#: The names of :class:`Callbacks`' fields (the keywords of
#: :meth:`Elector.for_client <leasesvc.Elector.for_client>` that fill them).
CALLBACK_NAMES = tuple(f.name for f in dataclasses.fields(Callbacks))


class StoppedError(Exception):
    """The cause of a term ended by :meth:`Elector.stop`."""


class ResignedError(Exception):
    """The cause of a term whose ``on_started_leading`` returned while still
    leading."""


class YieldedError(Exception):
    """The cause of a term the Elector stepped down from for a preempting
    candidate (``on_yield_requested``, docs/contract.md §8). ``to`` names
    the candidate."""

    def __init__(self, to: str) -> None:
        self.to = to
        super().__init__(f"stepped down for the preempting candidate {to!r}")


class TransferredError(Exception):
    """The cause of a term that :meth:`Elector.transfer` handed over to a
    named successor. ``to`` names it."""

    def __init__(self, to: str) -> None:
        self.to = to
        super().__init__(f"leadership transferred to {to!r}")


class NotLeadingError(Exception):
    """Raised by :meth:`Elector.set_checkpoint`, :meth:`Elector.checkpoint`
    and :meth:`Elector.transfer` when there is no term they could act on."""


# The names of the 0.1 releases: aliases of the same classes (see
# leasesvc.errors).
Stopped = StoppedError
Resigned = ResignedError
Yielded = YieldedError
Transferred = TransferredError
NotLeading = NotLeadingError


def _encode_checkpoint(value: Dict[str, Any]) -> Dict[str, Any]:
    """Check that value is a JSON object of at most MAX_CHECKPOINT_BYTES."""
    if not isinstance(value, dict):
        raise ValueError(f"leasesvc: a checkpoint must be a JSON object (a dict), not {type(value).__name__}")
    n = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if n > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"leasesvc: the checkpoint is {n} bytes, more than {MAX_CHECKPOINT_BYTES}")
    return value
