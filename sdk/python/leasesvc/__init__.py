"""leasesvc: the Python SDK of the leasesvc lease service (standard library only).

:class:`Client` calls every operation of the HTTP API with typed errors and
safe retries; :class:`Elector` campaigns for a lease, renews it every TTL/3
with jitter, and ends leadership at once on ``lease_lost`` and at the safe
deadline (local monotonic send time + TTL × (1 − drift margin)) even when the
service cannot be reached. By default it holds its lease through a
:class:`Session` (``Client.open_session``: one heartbeating WebSocket per
Client, docs/contract.md §14), so a crashed agent's lease frees within the
session's window; against a service without sessions it renews plainly. Both are context managers. For asyncio, see
:mod:`leasesvc.aio` (``AsyncElector``). See docs/agents.md and
docs/contract.md §2, §7, §12.

Example::

    import leasesvc

    def lead(term: leasesvc.Term) -> None:
        while not term.wait(1.0):          # until leadership ends
            write_downstream(term.token)   # fence every write with the token

    with leasesvc.Client("http://localhost:8080") as client:
        with leasesvc.Elector(client, "team-a.scheduler", on_started_leading=lead):
            ...                            # leads whenever it can
        # the block's end stopped it: the term ended, the lease is released
"""

import logging as _logging

from .backoff import DEFAULT_BACKOFF, Backoff
from .client import WATCH_IDLE, Client, Credentials, Watch
from .elector import (
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
    SessionsUnsupportedError,
    Unauthenticated,
    UnauthenticatedError,
    Unavailable,
    UnavailableError,
)
from .keeper import Holding, Keeper
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

__version__ = "0.2.0"

# A library logs only where the application configures logging.
_logging.getLogger("leasesvc").addHandler(_logging.NullHandler())

__all__ = [
    "AccessDeniedError", "Backoff", "Client", "Credentials", "CredentialsError", "DEFAULT_BACKOFF",
    "DEFAULT_DRIFT_MARGIN", "DEFAULT_RENEW_JITTER", "DEFAULT_TTL", "DEFAULT_WAIT", "EVENT_ACQUIRED",
    "EVENT_DELETED", "EVENT_EXPIRED", "EVENT_RELEASED", "EVENT_REVOKED", "EVENT_STATE", "Elector", "Event", "FieldError",
    "Holding", "Keeper",
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
