"""leasesvc: the Python SDK of the leasesvc lease service (standard library only).

:class:`Client` calls every operation of the HTTP API with typed errors and
safe retries; :class:`Elector` campaigns for a lease, renews it every TTL/3
with jitter, and ends leadership at once on ``lease_lost`` and at the safe
deadline (local monotonic send time + TTL × (1 − drift margin)) even when the
service cannot be reached. See docs/agents.md and docs/contract.md §2, §7,
§12.

Example::

    import leasesvc

    client = leasesvc.Client("http://localhost:8080")

    def lead(term: leasesvc.Term) -> None:
        while not term.wait(1.0):          # until leadership ends
            write_downstream(term.token)   # fence every write with the token

    elector = leasesvc.Elector(client, "team-a.scheduler", on_started_leading=lead)
    elector.start()
    ...
    elector.stop()                         # ends the term, releases the lease
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
    Resigned,
    Stopped,
    Term,
    Transferred,
    Yielded,
    default_cancel_before,
    default_holder,
    valid_name,
)
from .errors import (
    AccessDenied,
    CredentialsError,
    FieldError,
    InternalError,
    InvalidArgument,
    LeaseError,
    LeaseHeld,
    LeaseLost,
    LeaseReserved,
    NotFound,
    PermissionDenied,
    RateLimited,
    SafeDeadline,
    Unauthenticated,
    Unavailable,
)
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

__version__ = "0.1.0"

# A library logs only where the application configures logging.
_logging.getLogger("leasesvc").addHandler(_logging.NullHandler())

__all__ = [
    "AccessDenied", "Backoff", "Client", "Credentials", "CredentialsError", "DEFAULT_BACKOFF",
    "DEFAULT_DRIFT_MARGIN", "DEFAULT_RENEW_JITTER", "DEFAULT_TTL", "DEFAULT_WAIT", "EVENT_ACQUIRED",
    "EVENT_DELETED", "EVENT_EXPIRED", "EVENT_RELEASED", "EVENT_REVOKED", "EVENT_STATE", "Elector", "Event", "FieldError",
    "InternalError", "InvalidArgument", "MAX_CHECKPOINT_BYTES", "MAX_PRIORITY", "NotLeading", "Lease", "LeaseError", "LeaseHeld", "LeaseLost", "LeaseReserved", "NotFound",
    "Page", "PermissionDenied", "RateLimited", "Resigned", "SafeDeadline", "Stopped", "Term", "Transferred",
    "Unauthenticated", "Unavailable", "WATCH_IDLE", "Watch", "Yielded", "default_cancel_before", "default_holder",
    "newer", "valid_name",
]
