"""The rules of time of the SDK, each in one function, and the keeper's
:class:`Clock` (issue 46; the safe deadline of docs/contract.md §2 and
§14, and rule L3 of the SDKs' lifecycle in sdk/conformance/PROTOCOL.md).

* :func:`safe_span`: how long after the send of a confirmation (an
  acquire or renew that succeeded, an acknowledged heartbeat) a holding
  may be acted on: span × (1 − drift margin), the span being the TTL of
  plain renewals or a session's window (or its lease TTL, for a lease no
  ack has vouched for yet);
* :func:`deadline`: the safe deadline, the send time + :func:`safe_span`;
* :func:`stop_at`: the stop time of a term, deadline − cancel_before;
* :func:`fit_cancel_before`: whether a cancel_before fits a span, raising
  :class:`~leasesvc.InvalidOptionError` when it does not (never capped);
* :func:`default_cancel_before` and :func:`cancel_before_for`: the
  cancel_before used for a span when none is given, and the one to use.

Every deadline of the package (a plain holding's, a session's, a lease's
in a session before an ack vouched for it) is :func:`deadline`; every stop
time (the Elector's terms) is :func:`stop_at`. The same rules, with the
same names, are the Go SDK's ``SafeSpan``, ``StopAt``, ``FitCancelBefore``
and ``DefaultCancelBeforeFor``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from .errors import InvalidOptionError

__all__ = ["Clock", "safe_span", "deadline", "stop_at", "fit_cancel_before", "default_cancel_before",
           "cancel_before_for", "DEFAULT_CANCEL_BEFORE"]

#: The cap of the default cancel_before, seconds: min(250 ms, span/10).
DEFAULT_CANCEL_BEFORE = 0.25


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


def safe_span(span: float, drift_margin: float) -> float:
    """How long after the send of a confirmation a holding may be acted on:
    ``span`` × (1 − ``drift_margin``), seconds."""
    return span * (1 - drift_margin)


def deadline(sent: float, span: float, drift_margin: float) -> float:
    """THE safe deadline: the monotonic send time ``sent`` of the
    confirmation (an acquire or renew that succeeded, an acknowledged
    heartbeat) + :func:`safe_span` of ``span`` (a TTL or a window)."""
    return sent + safe_span(span, drift_margin)


def stop_at(deadline_: float, cancel_before: float) -> float:
    """THE stop time of a term: its holding's deadline less
    ``cancel_before``."""
    return deadline_ - cancel_before


def fit_cancel_before(span: float, drift_margin: float, cancel_before: float, what: str = "span") -> None:
    """Check that ``cancel_before`` fits ``span`` (rule L3): it fits when
    cancel_before < :func:`safe_span` (span, drift_margin) − span/2, so that
    a holding whose deadline moves every span/4 (a heartbeat) or span/3 (a
    renew) can be led between two confirmations. ``what`` names the span
    in the message ("session window", "TTL").

    Raises:
        InvalidOptionError: it is negative or does not fit; the message
            names cancel_before, the limit and the span. It is never capped.
    """
    if cancel_before < 0:
        raise InvalidOptionError(f"cancel_before {cancel_before:g} s must not be negative")
    limit = safe_span(span, drift_margin) - span / 2
    if cancel_before >= limit:
        raise InvalidOptionError(f"cancel_before {cancel_before:g} s must be below {limit:g} s "
                                 f"(safe_span − span/2, drift margin {drift_margin:g}) for a {what} of {span:g} s")


def default_cancel_before(span: float) -> float:
    """The cancel_before used when none is given, for ``span`` (a session
    window or a TTL): min(250 ms, span/10), seconds."""
    return min(DEFAULT_CANCEL_BEFORE, span / 10)


def cancel_before_for(span: float, drift_margin: float, given: Optional[float], what: str = "span") -> float:
    """The cancel_before for ``span``: ``given``, or the default when None,
    checked (:func:`fit_cancel_before`).

    Raises:
        InvalidOptionError: it does not fit.
    """
    cb = default_cancel_before(span) if given is None else given
    fit_cancel_before(span, drift_margin, cb, what)
    return cb
