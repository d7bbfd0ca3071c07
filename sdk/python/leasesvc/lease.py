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
    # The succession fields (docs/contract.md §8); each is zero when the
    # service answered none.
    #: The priority the current (or last) holding was acquired with, 0 … 1000.
    priority: int = 0
    #: The JSON object a holding last wrote with a renew, release or
    #: transfer; ``None`` when none was ever written. It survives its
    #: holding: an acquire answers the checkpoint the new holder inherits.
    checkpoint: Optional[Dict[str, Any]] = None
    #: The fencing token of the holding that wrote ``checkpoint``; 0 without.
    checkpoint_token: int = 0
    #: The holder the free lease is reserved for (the best waiting candidate
    #: after a holding ended, or a transfer's successor); "" when open to
    #: anyone or held.
    reserved_for: str = ""
    #: When the reservation lapses at the latest (server time).
    reserved_until: Optional[datetime] = None
    #: A waiting candidate with a strictly higher priority asks the live
    #: holding to step down (preempt): checkpoint and release. Nothing is
    #: taken by force.
    yield_requested: bool = False
    #: The candidate the holding is asked to step down for.
    yield_to: str = ""
    #: How many registered candidates wait for the lease.
    candidates: int = 0
    #: The priority of the best of them (the one a reservation would name);
    #: None when none waits.
    best_candidate_priority: Optional[int] = None
    #: The holding is held through a session (docs/contract.md §14): it
    #: ends within ``session_window_ms`` of its agent's last heartbeat.
    session: bool = False
    #: The window of that session, milliseconds; 0 when not session-held.
    session_window_ms: int = 0
    #: The fencing proof of the holding (docs/contract.md §17): a compact
    #: JWS the service signed, stating it issued ``fencing_token`` of this
    #: lease to ``holder``. Only the answers that start a holding for its
    #: holder carry it (acquire, a session's acquire and resume); "" in
    #: every other. Pass it, never the bare token, to whatever writes (the
    #: ``Leasesvc-Fence`` header); sinks check it with :mod:`leasesvc.fence`.
    #: Keep it secret: until a higher token reaches a sink, it writes there
    #: as the leader.
    proof: str = field(default="", repr=False)

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
            priority=int(d.get("priority", 0) or 0),
            checkpoint=dict(cp) if isinstance((cp := d.get("checkpoint")), dict) else None,
            checkpoint_token=int(d.get("checkpointToken", 0) or 0),
            reserved_for=str(d.get("reservedFor", "") or ""),
            reserved_until=parse_time(d.get("reservedUntil")),
            yield_requested=bool(d.get("yieldRequested", False)),
            yield_to=str(d.get("yieldTo", "") or ""),
            candidates=int(d.get("candidates", 0) or 0),
            best_candidate_priority=(None if (bcp := d.get("bestCandidatePriority")) is None else int(bcp)),
            session=bool(d.get("session", False)),
            session_window_ms=int(d.get("sessionWindowMs", 0) or 0),
            proof=str(d.get("proof", "") or ""),
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
#: The lease, not held, was deleted (docs/contract.md §15); it is not found
#: until an acquire creates it again with the next fencing token.
EVENT_DELETED = "deleted"
EVENT_STATE = "lease"


@dataclass
class Event:
    """One leadership event of a watch stream (or a Pub/Sub message's data).

    ``type`` is one of ``acquired``, ``released``, ``expired``, ``revoked``,
    ``deleted`` or ``lease`` (the state now: first on every stream, again after a
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
        if typ not in (EVENT_ACQUIRED, EVENT_RELEASED, EVENT_EXPIRED, EVENT_REVOKED, EVENT_DELETED):
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
        if self.type == EVENT_DELETED:
            return 2
        return 1


def newer(a: Event, b: Event) -> bool:
    """Report whether event ``b`` comes after event ``a`` of the same lease in
    the order consumers use (docs/contract.md §5): by fencing token, and
    within one token acquired before released, expired or revoked, and those
    before deleted. Keep the
    newest event per lease and drop any ``ev`` for which ``newer(kept, ev)``
    is false: duplicates and late arrivals."""
    ta = a.lease.fencing_token if a.lease else 0
    tb = b.lease.fencing_token if b.lease else 0
    if ta != tb:
        return tb > ta
    return a._rank() < b._rank()
