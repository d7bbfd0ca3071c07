"""Fence writes to PostgreSQL with leasesvc's proofs (docs/contract.md §17,
docs/fencing.md), over any DB-API 2.0 connection (PEP 249), standard
library only: the Python twin of Go's ``fence/pgfence``, on the same table.

:func:`write` runs the caller's statements in one transaction only if the
proof verifies, is for the lease that fences the resource, and has a
fencing token at least the one stored for the resource; it stores the
token in the same transaction. The token lives in a table of its own
(:func:`schema`), one row per resource, in the same database as the data:
the first statement locks the resource's row until the transaction ends,
so two writers of one resource are ordered by the database, and a deposed
holder's late transaction finds the successor's higher token and is
refused before any of its statements run. Go's, Python's and
TypeScript's helpers share the table: a resource Go fenced is written by
Python and refused to a stale proof from either.

Example (psycopg2; the caller's statements use the driver's own
placeholders)::

    import psycopg2
    from leasesvc import fence, pgfence

    verifier = fence.Verifier(fence.RemoteKeys("https://leasesvc.example/.well-known/jwks.json"))
    conn = psycopg2.connect("dbname=shop")
    with conn.cursor() as cur:
        cur.execute(pgfence.schema())
    conn.commit()

    def ship(cur):
        cur.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", (order_id,))

    pgfence.write(conn, "team-a.scheduler", "orders_table", proof, ship, verifier=verifier)

**Placeholders.** The helper's own two statements are written in the
``paramstyle`` given (PEP 249): ``"format"`` (``%s``, the default: psycopg2,
psycopg 3, pg8000), ``"pyformat"`` (``%(name)s``), ``"qmark"`` (``?``),
``"numeric"`` (``:1``) or ``"named"`` (``:name``). The caller's statements in
``writes`` are the caller's, in the driver's style.

**Transactions.** :func:`write` owns the connection's transaction: it
refuses a connection with one already open (psycopg's
``conn.info.transaction_status`` not idle), commits on success and rolls
back on any error. A connection in autocommit mode works too (the helper
sends ``BEGIN`` and ``COMMIT`` itself).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Optional, Sequence, Tuple

from .fence import Claims, OtherLeaseError, StaleTokenError, Verifier

__all__ = ["DEFAULT_TABLE", "ATTEMPTS", "PARAMSTYLES", "SerializationError", "schema", "write", "fence_first"]

#: The table of the stored tokens unless told otherwise (Go's ``pgfence.DefaultTable``).
DEFAULT_TABLE = "leasesvc_fence"
#: How many times :func:`write` runs its transaction while it fails to
#: serialize (Go's ``pgfence.Attempts``).
ATTEMPTS = 5
#: The backoff before the second attempt, seconds; it doubles after each, with jitter.
RETRY_BASE = 0.002
#: The paramstyles (PEP 249) the helper writes its statements in.
PARAMSTYLES = ("format", "pyformat", "qmark", "numeric", "named")
#: The SQLSTATEs of a transaction that failed to serialize with a concurrent
#: one: serialization_failure and deadlock_detected.
RETRYABLE = ("40001", "40P01")

Writes = Callable[[Any], Any]


class SerializationError(Exception):
    """Every attempt of a :func:`write` failed to serialize with a
    concurrent transaction (SQLSTATE 40001 or 40P01); nothing of it was
    stored, and running it again may succeed. ``__cause__`` is the
    database's last error. Not a :class:`~leasesvc.fence.FenceError`: no
    verdict on the proof (Go's ``pgfence.ErrSerialization``)."""


def _identifier(table: str) -> str:
    """The table name as one quoted SQL identifier, as Go's
    ``pgx.Identifier{table}.Sanitize()``: NUL removed, ``"`` doubled."""
    return '"' + table.replace("\x00", "").replace('"', '""') + '"'


def schema(table: str = "") -> str:
    """The statement that creates the token table, ``""`` meaning
    :data:`DEFAULT_TABLE`: the very text of Go's ``pgfence.Schema``, so the
    three languages' helpers share the table. It is ``CREATE TABLE IF NOT
    EXISTS``: run it at every start."""
    return ("CREATE TABLE IF NOT EXISTS " + _identifier(table or DEFAULT_TABLE) + """ (
	resource      text PRIMARY KEY,
	lease         text NOT NULL,
	fencing_token bigint NOT NULL CHECK (fencing_token > 0),
	updated_at    timestamptz NOT NULL DEFAULT now()
)""")


def _statements(table: str, paramstyle: str) -> Tuple[str, str, Callable[[Sequence[Any]], Any]]:
    """The upsert and the read in paramstyle, and how to pass their
    parameters."""
    if paramstyle not in PARAMSTYLES:
        raise ValueError(f"pgfence: paramstyle {paramstyle!r}: want one of {', '.join(PARAMSTYLES)}")
    t = _identifier(table or DEFAULT_TABLE)
    names = ("resource", "lease", "token")
    if paramstyle in ("format", "pyformat"):
        t = t.replace("%", "%%")  # a literal % in these styles
    marks = {
        "format": ["%s"] * 3,
        "pyformat": [f"%({n})s" for n in names],
        "qmark": ["?"] * 3,
        "numeric": [f":{i}" for i in (1, 2, 3)],
        "named": [f":{n}" for n in names],
    }[paramstyle]
    # ON CONFLICT locks the resource's row even when WHERE refuses: a
    # concurrent writer waits for this transaction's end.
    upsert = (f"INSERT INTO {t} AS f (resource, lease, fencing_token) VALUES ({marks[0]}, {marks[1]}, {marks[2]})\n"
              "ON CONFLICT (resource) DO UPDATE SET fencing_token = EXCLUDED.fencing_token, updated_at = now()\n"
              "WHERE f.lease = EXCLUDED.lease AND f.fencing_token <= EXCLUDED.fencing_token\n"
              "RETURNING fencing_token")
    read = f"SELECT lease, fencing_token FROM {t} WHERE resource = {marks[0]}"
    if paramstyle in ("pyformat", "named"):
        return upsert, read, lambda values: dict(zip(names, values))
    return upsert, read, tuple


def sqlstate(err: BaseException) -> str:
    """The SQLSTATE of a driver's error, "" if it carries none: psycopg2's
    ``pgcode``, psycopg 3's ``sqlstate``, pg8000's ``args[0]["C"]``."""
    for attr in ("pgcode", "sqlstate"):
        code = getattr(err, attr, None)
        if isinstance(code, str) and code:
            return code
    args = getattr(err, "args", ())
    if args and isinstance(args[0], dict) and isinstance(args[0].get("C"), str):
        return args[0]["C"]
    return ""


def _in_transaction(conn: Any) -> bool:
    """Whether conn reports an open transaction (psycopg 2 and 3:
    ``conn.info.transaction_status`` other than idle, 0); False when it
    reports nothing."""
    status = getattr(getattr(conn, "info", None), "transaction_status", None)
    try:
        return status is not None and int(status) != 0
    except (TypeError, ValueError):
        return False


def write(conn: Any, lease: str, resource: str, proof: str, writes: Optional[Writes], *,
          verifier: Verifier, table: str = "", paramstyle: str = "format") -> Claims:
    """Verify ``proof`` with ``verifier`` and require it to be for
    ``lease``, the lease that fences ``resource``; then, in one transaction
    on ``conn``, store its token for ``resource`` if it is at least the
    stored one (of the same lease), call ``writes(cursor)`` with a cursor in
    that transaction, and commit. Returns the proof's claims.

    A refused proof stores nothing and never calls ``writes``: it raises the
    verifier's :class:`~leasesvc.fence.FenceError` (``malformed``,
    ``bad_signature``, ``unknown_key``, ``wrong_issuer``,
    ``keys_unavailable``), :class:`~leasesvc.fence.OtherLeaseError`
    (``other_lease``: the proof is for another lease than ``lease``, for a
    resource never written too, or the resource's row is another lease's)
    or :class:`~leasesvc.fence.StaleTokenError` (``stale``: a higher token
    wrote). An exception of ``writes`` rolls everything back, the token
    included, and propagates unchanged. ``writes=None`` only stores the
    token, as :func:`fence_first`.

    A transaction that fails to serialize with a concurrent one (SQLSTATE
    40001 under repeatable read or serializable isolation, or 40P01) is
    rolled back and run again, ``writes`` included, up to :data:`ATTEMPTS`
    times with a short jittered backoff; then :class:`SerializationError`.
    Keep ``writes`` free of effects outside the transaction.

    ``table`` is the token table (``""``: :data:`DEFAULT_TABLE`, create it
    with :func:`schema`); ``paramstyle`` the placeholders of the helper's
    own statements (module docstring). Raises ``ValueError`` for an empty
    ``lease``, an unknown ``paramstyle``, or a connection with a
    transaction already open."""
    if not lease:
        raise ValueError(f"pgfence: write of {resource!r}: lease is empty: name the lease that fences the resource")
    if verifier is None:
        raise ValueError("pgfence: write needs a verifier (fence.Verifier)")
    upsert, read, params = _statements(table, paramstyle)
    claims = verifier.verify(proof)
    if claims.lease != lease:
        raise OtherLeaseError(f"{resource!r} is fenced by lease {lease!r}, the proof is for {claims.lease!r}")
    if _in_transaction(conn):
        raise ValueError("pgfence: the connection has a transaction open: write runs its own and commits it; "
                         "commit or roll back first")
    backoff = RETRY_BASE
    for n in range(1, ATTEMPTS + 1):
        try:
            _attempt(conn, resource, claims, writes, upsert, read, params)
            return claims
        except Exception as e:
            if sqlstate(e) not in RETRYABLE:
                raise
            if n == ATTEMPTS:
                raise SerializationError(f"pgfence: {resource!r}, {n} attempts: the transaction could not be "
                                         f"serialized with a concurrent one ({e})") from e
        time.sleep(backoff / 2 + random.random() * backoff)
        backoff *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def fence_first(conn: Any, lease: str, resource: str, proof: str, *, verifier: Verifier, table: str = "",
                paramstyle: str = "format") -> Claims:
    """:func:`write` with no writes: advance ``resource`` to the proof's
    token and write nothing else. A successor calls it as soon as it leads,
    so that its predecessor's late writes are refused (``stale``) before
    its own first write."""
    return write(conn, lease, resource, proof, None, verifier=verifier, table=table, paramstyle=paramstyle)


def _attempt(conn: Any, resource: str, c: Claims, writes: Optional[Writes], upsert: str, read: str,
             params: Callable[[Sequence[Any]], Any]) -> None:
    """One transaction of :func:`write`, with c verified and for the lease
    that fences resource; rolled back on any exception."""
    explicit = bool(getattr(conn, "autocommit", False))  # autocommit: no implicit transaction
    cur = conn.cursor()
    try:
        if explicit:
            cur.execute("BEGIN")
        cur.execute(upsert, params((resource, c.lease, c.fencing_token)))
        if cur.fetchone() is None:
            cur.execute(read, params((resource,)))
            row = cur.fetchone()
            if row is None:
                raise RuntimeError(f"pgfence: the token row of {resource!r} vanished during the transaction")
            stored_lease, stored = row[0], int(row[1])
            if stored_lease != c.lease:
                raise OtherLeaseError(
                    f"{resource!r} has the token of lease {stored_lease!r}, the proof is for {c.lease!r} (a row this "
                    f"check did not write: remove it to let {c.lease!r} fence the resource)")
            raise StaleTokenError(f"token {c.fencing_token} of lease {c.lease!r}, but token {stored} wrote {resource!r}")
        if writes is not None:
            writes(cur)
        if explicit:
            cur.execute("COMMIT")
        else:
            conn.commit()
    except BaseException:
        _rollback(conn, cur, explicit)
        raise
    finally:
        try:
            cur.close()
        except Exception:  # a broken connection: the error raised says so
            pass


def _rollback(conn: Any, cur: Any, explicit: bool) -> None:
    """Roll back the attempt's transaction; an error doing so (a broken
    connection) leaves the one being raised in place."""
    try:
        if explicit:
            cur.execute("ROLLBACK")
        else:
            conn.rollback()
    except Exception:
        pass
