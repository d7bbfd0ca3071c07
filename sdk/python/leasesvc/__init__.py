"""leasesvc: the Python SDK of the leasesvc lease service (standard library only).

:class:`Client` calls every operation of the HTTP API with typed errors and
safe retries. A :class:`Keeper` holds leases for one agent: through a
:class:`Session` (``Client.open_session``: one heartbeating WebSocket,
docs/contract.md §14; by default the Client's shared one), so a crashed
agent's lease frees within the session's window, or, against a service
without sessions (or when asked), with plain renewals every TTL/3. It
chooses its mode once, at its first hold (``keeper.mode``,
``keeper.plain_reason``). An :class:`Elector`, built on a Keeper,
campaigns for a lease and ends leadership at once when the lease is lost
and at the holding's stop time (its deadline less ``cancel_before``,
:mod:`leasesvc.timing`) even when the service cannot be reached. All are
context managers. For asyncio, see :mod:`leasesvc.aio` (``AsyncElector``).
See docs/agents.md and docs/contract.md §2, §7, §12, and the SDKs'
lifecycle rules L1–L4 in sdk/conformance/PROTOCOL.md.

Example::

    import leasesvc

    def lead(term: leasesvc.Term) -> None:
        while not term.wait(1.0):          # until leadership ends
            write_downstream(term.token)   # fence every write with the token

    with leasesvc.Client("http://localhost:8080") as client, leasesvc.Keeper(client) as keeper:
        cbs = leasesvc.Callbacks(on_started_leading=lead)
        with leasesvc.Elector(keeper, "team-a.scheduler", callbacks=cbs):
            ...                            # leads whenever it can
        # the block's end stopped it: the term ended, the lease is released

(``leasesvc.Elector.for_client(client, "team-a.scheduler",
on_started_leading=lead)`` is the same with a Keeper of its own.)
"""

import logging as _logging

from .backoff import DEFAULT_BACKOFF, Backoff
from .client import WATCH_IDLE, Client, Credentials, Watch
from .elector import (
    Callbacks,
    DEFAULT_DRIFT_MARGIN,
    DEFAULT_RENEW_JITTER,
    DEFAULT_TTL,
    DEFAULT_WAIT,
    MAX_CHECKPOINT_BYTES,
    MAX_PRIORITY,
    Elector,
    NotLeading,
    NotLeadingError,
    Resigned,
    ResignedError,
    Stopped,
    StoppedError,
    Term,
    Transferred,
    TransferredError,
    Yielded,
    YieldedError,
    default_cancel_before,
    default_holder,
    valid_name,
)
from .errors import (
    AccessDenied,
    AccessDeniedError,
    CredentialsError,
    FieldError,
    InternalError,
    InvalidArgument,
    InvalidArgumentError,
    InvalidOptionError,
    LeaseError,
    LeaseHeld,
    LeaseHeldError,
    LeaseLost,
    LeaseLostError,
    LeaseReserved,
    LeaseReservedError,
    NotFound,
    NotFoundError,
    PermissionDenied,
    PermissionDeniedError,
    RateLimited,
    RateLimitedError,
    SafeDeadline,
    SafeDeadlineError,
    SessionForkedError,
    SessionHeldError,
    SessionLimitError,
    SessionsUnsupportedError,
    Unauthenticated,
    UnauthenticatedError,
    Unavailable,
    UnavailableError,
)
from .holding import Holding
from .keeper import Keeper
from .lease import (
    EVENT_ACQUIRED,
    EVENT_DELETED,
    EVENT_EXPIRED,
    EVENT_RELEASED,
    EVENT_REVOKED,
    EVENT_STATE,
    Event,
    Lease,
    Page,
    newer,
)
from .session import Session
from .timing import Clock, cancel_before_for, deadline, fit_cancel_before, safe_span, stop_at

__version__ = "0.2.0"

# A library logs only where the application configures logging.
_logging.getLogger("leasesvc").addHandler(_logging.NullHandler())

__all__ = [
    "AccessDeniedError", "Backoff", "Client", "Credentials", "CredentialsError", "DEFAULT_BACKOFF",
    "DEFAULT_DRIFT_MARGIN", "DEFAULT_RENEW_JITTER", "DEFAULT_TTL", "DEFAULT_WAIT", "EVENT_ACQUIRED",
    "EVENT_DELETED", "EVENT_EXPIRED", "EVENT_RELEASED", "EVENT_REVOKED", "EVENT_STATE", "Elector", "Event", "FieldError",
    "Callbacks", "Clock", "Holding", "InvalidOptionError", "Keeper", "SessionLimitError", "cancel_before_for",
    "deadline", "fit_cancel_before", "safe_span", "stop_at",
    "InternalError", "InvalidArgumentError", "MAX_CHECKPOINT_BYTES", "MAX_PRIORITY", "NotLeadingError", "Lease",
    "LeaseError", "LeaseHeldError", "LeaseLostError", "LeaseReservedError", "NotFoundError", "Page",
    "PermissionDeniedError", "RateLimitedError", "ResignedError", "SafeDeadlineError", "Session", "SessionForkedError", "SessionHeldError", "SessionsUnsupportedError", "StoppedError", "Term",
    "TransferredError", "UnauthenticatedError", "UnavailableError", "WATCH_IDLE", "Watch", "YieldedError",
    "default_cancel_before", "default_holder", "newer", "valid_name",
    # The names of the 0.1 releases, aliases of the classes above.
    "AccessDenied", "InvalidArgument", "LeaseHeld", "LeaseLost", "LeaseReserved", "NotFound", "NotLeading",
    "PermissionDenied", "RateLimited", "Resigned", "SafeDeadline", "Stopped", "Transferred", "Unauthenticated",
    "Unavailable", "Yielded",
]
