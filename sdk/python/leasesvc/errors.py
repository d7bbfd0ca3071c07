"""Typed errors of the leasesvc client, mirroring the Go SDK's sentinels.

Every error the client raises for an answer of the service is a
:class:`LeaseError` subclass chosen by the problem's stable ``code``
(docs/contract.md §4), or by the HTTP status when the answer is not a
problem document. ``err.code`` is the API's code string, such as
``"lease_lost"``.

=======================  ===========================  =======================
class                    codes / statuses             Go sentinel
=======================  ===========================  =======================
LeaseHeldError           lease_held (409)             ErrHeld (*HeldError)
LeaseReservedError       lease_reserved (409)         ErrReserved
                                                      (*ReservedError)
LeaseLostError           lease_lost (409)             ErrLost
NotFoundError            not_found (404)              ErrNotFound
InvalidArgumentError     invalid_argument (400), 413, ErrInvalid
                         415, 405, other 4xx
AccessDeniedError        (base of the next two)       ErrDenied
UnauthenticatedError     unauthenticated (401)        ErrUnauthenticated
PermissionDeniedError    permission_denied (403)      ErrPermissionDenied
UnavailableError         unavailable (503),           ErrUnavailable
                         deadline_exceeded (504),
                         502, no answer
RateLimitedError         resource_exhausted (429)     ErrRateLimited
InternalError            internal (500), unreadable   ErrInternal
CredentialsError         the token callable failed    ErrCredentials
SessionsUnsupportedError 404/405/501 at the session   ErrSessionsUnsupported
                         upgrade
SessionHeldError         session_held (409)           lease.ErrSessionHeld
SessionForkedError       a Session used in a forked   (none: Go cannot fork)
                         child process
SessionLimitError        429 at the session limit     ErrSessionLimit
                         (open or upgrade)
InvalidOptionError       an option that does not fit  ErrInvalid
                         (a ValueError too)
=======================  ===========================  =======================

Every exception's name ends in ``Error`` (PEP 8; pep8-naming's N818).
The names of the 0.1 releases (``LeaseHeld``, ``LeaseLost``, ``NotFound``,
...) remain as aliases of the same classes, so ``except LeaseLost`` still
catches them; new code uses the new names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .lease import Lease


@dataclass(frozen=True)
class FieldError:
    """One bad field of an ``invalid_argument`` problem."""

    field: str
    detail: str


class LeaseError(Exception):
    """Base of every error of the leasesvc client.

    Attributes:
        status: the HTTP status; 0 when no answer arrived.
        code: the problem's stable code (``"lease_lost"``, ...); for a
            failure without an answer, the code of the class
            (``"unavailable"``).
        detail: the problem's human-readable detail.
        fields: the bad fields of an ``invalid_argument`` problem.
        retry_after: the ``Retry-After`` header in seconds, 0 when absent.
    """

    #: The API code this class stands for.
    default_code = "internal"

    def __init__(
        self,
        detail: str = "",
        *,
        status: int = 0,
        code: str = "",
        fields: Optional[List[FieldError]] = None,
        retry_after: float = 0.0,
        op: str = "",
        name: str = "",
    ) -> None:
        self.status = status
        self.code = code or self.default_code
        self.detail = detail
        self.fields = list(fields or [])
        self.retry_after = retry_after
        self.op = op
        self.name = name
        super().__init__(self._message())

    def _message(self) -> str:
        parts = []
        if self.op:
            parts.append(f"leasesvc {self.op} {self.name!r}:")
        parts.append(type(self).__name__)
        if self.status:
            parts.append(f"({self.status} {self.code})")
        msg = " ".join(parts)
        if self.detail:
            msg += ": " + self.detail
        for f in self.fields:
            msg += f"; {f.field}: {f.detail}"
        return msg

    def _named(self, op: str, name: str) -> "LeaseError":
        """Return self, naming the operation and the lease in the message."""
        self.op, self.name = op, name
        self.args = (self._message(),)
        return self


class LeaseHeldError(LeaseError):
    """An acquire found the lease held by another holder.

    ``lease`` is the current lease: who leads, with which token, until when.
    """

    default_code = "lease_held"

    def __init__(self, lease: "Lease", *, retry_after: float = 0.0, status: int = 409, detail: str = "") -> None:
        self.lease = lease
        super().__init__(
            detail or f"lease {lease.name!r} held by {lease.holder!r} (fencing token {lease.fencing_token})",
            status=status,
            code="lease_held",
            retry_after=retry_after,
        )


class LeaseReservedError(LeaseError):
    """An acquire found the lease free but reserved for another holder
    (409 ``lease_reserved``, docs/contract.md §8): the best waiting
    candidate after a holding ended, or the successor a transfer named.

    Attributes:
        lease: the lease as the service saw it when it refused.
        reserved_for: the holder the lease is reserved for.
        reserved_until: the server time at which the reservation lapses, at
            the latest.
        retry_after: the ``Retry-After`` header: seconds until the
            reservation lapses (≥ 1).

    A reservation lasts seconds: a waiting acquire keeps waiting through it.
    """

    default_code = "lease_reserved"

    def __init__(self, lease: "Lease", *, reserved_for: str = "", reserved_until: Optional[datetime] = None,
                 retry_after: float = 0.0, status: int = 409, detail: str = "") -> None:
        self.lease = lease
        self.reserved_for = reserved_for
        self.reserved_until = reserved_until
        super().__init__(
            detail or f"lease {lease.name!r} reserved for {reserved_for!r}"
            + (f" until {reserved_until.isoformat()}" if reserved_until is not None else ""),
            status=status,
            code="lease_reserved",
            retry_after=retry_after,
        )


class LeaseLostError(LeaseError):
    """A renew or release by someone who is not the current live holding:
    stop acting as leader now."""

    default_code = "lease_lost"


class NotFoundError(LeaseError):
    """The lease never existed (get), or the route is unknown."""

    default_code = "not_found"


class InvalidArgumentError(LeaseError):
    """The service refused the request's arguments; retrying the same
    request cannot succeed. ``fields`` lists each bad field."""

    default_code = "invalid_argument"


class AccessDeniedError(LeaseError):
    """The service refused the caller's credentials, or its policy does not
    allow the call (401, 403). Not retried."""

    default_code = "permission_denied"


class UnauthenticatedError(AccessDeniedError):
    """No credentials, or credentials the service refused (401)."""

    default_code = "unauthenticated"


class PermissionDeniedError(AccessDeniedError):
    """The policy does not grant the caller this verb on this lease (403)."""

    default_code = "permission_denied"


class UnavailableError(LeaseError):
    """The service could not be reached or could not answer (connection
    errors, timeouts, 502, 503, 504, 429), and the retries did not help."""

    default_code = "unavailable"

    def __init__(self, detail: str = "", *, cause: Optional[BaseException] = None, **kw: Any) -> None:
        self.cause = cause
        super().__init__(detail, **kw)


class RateLimitedError(UnavailableError):
    """The caller's rate limit refused the call (429 resource_exhausted), and
    the retries, each sent no earlier than the answer's Retry-After, did not
    get through."""

    default_code = "resource_exhausted"


class InternalError(LeaseError):
    """Any other failure of the service (500, an answer that cannot be
    read)."""

    default_code = "internal"


class CredentialsError(LeaseError):
    """The token callable failed or gave an empty token, so the request was
    not sent. Not retried by the Client; an Elector retries it at its own
    pace."""

    default_code = "unauthenticated"


class SafeDeadlineError(LeaseError):
    """The cause of a term that ended because no renew succeeded before the
    safe deadline (docs/contract.md §2). ``last`` is the last renew's
    error, if any."""

    default_code = "deadline_exceeded"

    def __init__(self, last: Optional[BaseException]) -> None:
        self.last = last
        super().__init__(f"safe deadline reached without a successful renew (last: {last or 'no answer in time'})")


class SessionsUnsupportedError(LeaseError):
    """The service does not offer sessions (docs/contract.md §14): it
    answered the session upgrade (``GET /v1/sessions:connect``) with 404,
    405 or 501. An :class:`~leasesvc.Elector` then keeps its lease with
    plain renewals."""

    default_code = "unimplemented"


class SessionHeldError(LeaseError):
    """The holding is held through a session (docs/contract.md §14): a
    REST renew, release or transfer of it, a REST acquire by its holder,
    or an acquire by its holder through another session is refused: only
    its session renews or ends it (an operator's revoke still ends it)."""

    default_code = "session_held"


class SessionLimitError(RateLimitedError):
    """The service refused to open a session at its session limit
    (``LEASESVC_MAX_SESSIONS`` or ``LEASESVC_MAX_SESSIONS_PER_CALLER``: 429
    ``resource_exhausted`` answered to ``open``, docs/contract.md §14). A
    :class:`~leasesvc.Keeper` then holds with plain renewals for the rest
    of its life (reason ``"session_limit"``); a new Keeper asks again. A 429
    refusing the upgrade at that cap (its problem's ``limit`` is
    ``"sessions"``) is one too; any other 429 before the upgrade is the
    caller's rate limit, a plain :class:`~leasesvc.RateLimitedError`."""


class InvalidOptionError(InvalidArgumentError, ValueError):
    """An option of a :class:`~leasesvc.Keeper` or an
    :class:`~leasesvc.Elector` that the SDK refuses before it sends
    anything, such as a ``cancel_before`` that does not fit the session
    window or the TTL (rule L3, :func:`leasesvc.timing.fit_cancel_before`).
    Its ``code`` is ``"invalid_argument"``, as the service's refusals of
    arguments; it is a :class:`ValueError` too, as every argument check of
    the SDK."""


class SessionForkedError(LeaseError):
    """A :class:`~leasesvc.Session`, or a Keeper's holding through it, was
    used in a process forked from the one that opened it (docs/contract.md
    §14, clones). The child's copy of the session shares the parent's socket
    and the parent's deadline: were it to heartbeat, resume or lead, two
    agents would hold live deadlines for the same leases, outside the rules
    that keep one holder. So nothing of it works in the child, and nothing
    is sent from there; the parent is unaffected. A child that needs leases
    makes a :class:`~leasesvc.Client` and a session of its own."""

    default_code = "failed_precondition"


_BY_CODE = {
    "lease_lost": LeaseLostError,
    "not_found": NotFoundError,
    "invalid_argument": InvalidArgumentError,
    "payload_too_large": InvalidArgumentError,
    "unsupported_media_type": InvalidArgumentError,
    "method_not_allowed": InvalidArgumentError,
    "unavailable": UnavailableError,
    "deadline_exceeded": UnavailableError,
    "resource_exhausted": RateLimitedError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "internal": InternalError,
    "session_not_found": NotFoundError,
    "session_held": SessionHeldError,
}


def error_class(status: int, code: str) -> type:
    """Map a problem code (or, without a known one, an HTTP status) to its
    error class: the one place where the wire's codes become errors."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code == "lease_held":
        return LeaseHeldError
    if code == "lease_reserved":
        return LeaseReservedError
    if status == 404:
        return NotFoundError
    if status == 401:
        return UnauthenticatedError
    if status == 403:
        return PermissionDeniedError
    if status == 429:
        return RateLimitedError
    if status in (502, 503, 504):
        return UnavailableError
    if 400 <= status < 500:
        return InvalidArgumentError
    return InternalError


# The names of the 0.1 releases: aliases of the same classes, kept so that
# code written against them still imports and catches.
LeaseHeld = LeaseHeldError
LeaseReserved = LeaseReservedError
LeaseLost = LeaseLostError
NotFound = NotFoundError
InvalidArgument = InvalidArgumentError
AccessDenied = AccessDeniedError
Unauthenticated = UnauthenticatedError
PermissionDenied = PermissionDeniedError
Unavailable = UnavailableError
RateLimited = RateLimitedError
SafeDeadline = SafeDeadlineError

