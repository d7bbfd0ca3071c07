"""The lease, a page of leases and leadership events as the API answers them
(docs/contract.md §1, §4, §5).

Every time in them is the backend's. Compare them with each other, never
with a local clock: the SDK never uses them to decide when to stop leading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """Parse an RFC 3339 time of the API (nanosecond fractions are cut to
    microseconds); ``None`` for an empty or missing value."""
    if not s:
        return None
    s = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], s, count=1)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    t = datetime.fromisoformat(s)
    if t.year <= 1:  # Go's zero time
        return None
    return t.astimezone(timezone.utc)


@dataclass
class Lease:
    """A lease as the service answered it (docs/contract.md §1)."""

    name: str = ""
    #: The current holder or, when ``held`` is false, the last one.
    holder: str = ""
    #: Grows by exactly 1 with every new holding, never reused: pass it
    #: with every write downstream.
    fencing_token: int = 0
    ttl_ms: int = 0
    acquire_time: Optional[datetime] = None
    renew_time: Optional[datetime] = None
    expire_time: Optional[datetime] = None
    #: ``serverTime < expireTime`` when the answer was computed.
    held: bool = False
    #: ``expireTime − serverTime`` on the server's clock: not a local deadline.
    remaining_ms: int = 0
    server_time: Optional[datetime] = None
    transitions: int = 0
    metadata: Dict[str, Any] = field(default_factory=dict)
    #: The authenticated principal that acquired the holding ("" without auth).
    principal: str = ""
    #: The operator who revoked the holding, if it was revoked.
    revoked_by: str = ""
    revoke_reason: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Lease":
        """Build a Lease from the API's JSON object."""
        return cls(
            name=str(d.get("name", "")),
            holder=str(d.get("holder", "")),
            fencing_token=int(d.get("fencingToken", 0)),
            ttl_ms=int(d.get("ttlMs", 0)),
            acquire_time=parse_time(d.get("acquireTime")),
            renew_time=parse_time(d.get("renewTime")),
            expire_time=parse_time(d.get("expireTime")),
            held=bool(d.get("held", False)),
            remaining_ms=int(d.get("remainingMs", 0)),
            server_time=parse_time(d.get("serverTime")),
            transitions=int(d.get("transitions", 0)),
            metadata=dict(d.get("metadata") or {}),
            principal=str(d.get("principal", "")),
            revoked_by=str(d.get("revokedBy", "")),
            revoke_reason=str(d.get("revokeReason", "")),
        )


@dataclass
class Page:
    """One page of a list: leases in name order and the next page's token
    (empty on the last page)."""

    leases: List[Lease]
    next_page_token: str = ""


#: The event types of docs/contract.md §5, and ``lease``: the state a watch
#: stream starts with (and repeats after a reconnect).
EVENT_ACQUIRED = "acquired"
EVENT_RELEASED = "released"
EVENT_EXPIRED = "expired"
EVENT_REVOKED = "revoked"
EVENT_STATE = "lease"


@dataclass
class Event:
    """One leadership event of a watch stream (or a Pub/Sub message's data).

    ``type`` is one of ``acquired``, ``released``, ``expired``, ``revoked``
    or ``lease`` (the state now: first on every stream, again after a
    reconnect; its ``lease`` is ``None`` when the lease never existed).
    """

    type: str
    lease: Optional[Lease]
    previous_holder: str = ""
    previous_expired: bool = False
    reason: str = ""
    operator: str = ""
    #: Backend time of the change.
    time: Optional[datetime] = None
    #: The SSE id (``{name}/{fencingToken}/{type}``, the CloudEvents ce-id);
    #: empty for ``lease`` state events.
    id: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any], id: str = "") -> "Event":
        """Build an Event from the API's event JSON."""
        typ = str(d.get("type", ""))
        if typ not in (EVENT_ACQUIRED, EVENT_RELEASED, EVENT_EXPIRED, EVENT_REVOKED):
            raise ValueError(f"leasesvc event: unknown type {typ!r}")
        lease = Lease.from_json(d.get("lease") or {})
        if not lease.name or lease.fencing_token < 1:
            raise ValueError(f"leasesvc event {typ}: no lease name or token")
        return cls(
            type=typ,
            lease=lease,
            previous_holder=str(d.get("previousHolder", "")),
            previous_expired=bool(d.get("previousExpired", False)),
            reason=str(d.get("reason", "")),
            operator=str(d.get("operator", "")),
            time=parse_time(d.get("eventTime")),
            id=id,
        )

    def _rank(self) -> int:
        if self.type == EVENT_ACQUIRED or (self.type == EVENT_STATE and self.lease is not None and self.lease.held):
            return 0
        return 1


def newer(a: Event, b: Event) -> bool:
    """Report whether event ``b`` comes after event ``a`` of the same lease in
    the order consumers use (docs/contract.md §5): by fencing token, and
    within one token acquired before released, expired or revoked. Keep the
    newest event per lease and drop any ``ev`` for which ``newer(kept, ev)``
    is false: duplicates and late arrivals."""
    ta = a.lease.fencing_token if a.lease else 0
    tb = b.lease.fencing_token if b.lease else 0
    if ta != tb:
        return tb > ta
    return a._rank() < b._rank()
