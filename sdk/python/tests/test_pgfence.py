"""leasesvc.pgfence against a real PostgreSQL (psycopg2), on the table Go's
fence/pgfence creates: the deposed holder's late write, a forged proof, an
unknown key and another lease's proof are refused with Go's reasons and
run none of the caller's statements; a failing transaction rolls the token
back; the successor fences first; a serialization failure is retried, and
given up after ATTEMPTS; rows Go wrote are continued and refused alike.

The Go test ``go test ./fence/pgfence -run TestPython`` runs this module
with a throwaway cluster in ``LEASESVC_PG_URL`` (Debian's
``python3-psycopg2`` for /usr/bin/python3); without that variable (a plain
``python3 -m unittest discover``) it is skipped. With the variable set, a
missing psycopg2 fails."""

from __future__ import annotations

import json
import os
import time
import unittest
from typing import Any, Callable, List, Optional

from leasesvc import fence, pgfence

from ._ed25519_sign import make_proof, public_key

URL = os.environ.get("LEASESVC_PG_URL", "")
SEED = bytes(range(32))
KID = fence.key_id(public_key(SEED))
STRANGER = bytes(range(7, 39))  # a key the verifier does not trust
LEASE = "team-a.scheduler"
RUN = f"{os.getpid()}_{time.time_ns() % 10**9}"  # resources of this run only: the database may be reused

psycopg2: Any = None


def setUpModule() -> None:
    global psycopg2
    if not URL:
        raise unittest.SkipTest("LEASESVC_PG_URL is not set: go test ./fence/pgfence -run TestPython runs these "
                                "tests with a throwaway PostgreSQL")
    try:
        import psycopg2 as mod  # type: ignore[import-not-found]
    except ImportError as e:  # with a database given, not a reason to skip
        raise RuntimeError(f"psycopg2 is missing ({e}): apt-get install -y python3-psycopg2 (for /usr/bin/python3)")
    psycopg2 = mod
    conn = connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(pgfence.schema())
        cur.execute("CREATE TABLE IF NOT EXISTS py_items (id text PRIMARY KEY)")
    conn.close()


def connect(isolation: str = "", autocommit: bool = False) -> Any:
    conn = psycopg2.connect(URL)
    if isolation:
        conn.set_session(isolation_level=isolation)
    conn.autocommit = autocommit
    return conn


def proof(lease: str, token: int, seed: bytes = SEED, kid: str = KID) -> str:
    return make_proof(seed, kid, lease, token, holder="w")


def insert(item: str) -> Callable[[Any], None]:
    def run(cur: Any) -> None:
        cur.execute("INSERT INTO py_items VALUES (%s)", (item,))
    return run


class PgFenceTest(unittest.TestCase):
    def setUp(self) -> None:
        self.v = fence.Verifier(fence.StaticKeys({KID: public_key(SEED)}))
        self.conn = connect()
        self.addCleanup(self.conn.close)
        self.admin = connect(autocommit=True)  # another connection, for reading and meddling
        self.addCleanup(self.admin.close)
        self.resource = f"res_{RUN}_{self.id().rsplit('.', 1)[-1]}"

    def write(self, p: str, writes: Optional[Callable[[Any], None]], lease: str = LEASE, conn: Any = None,
              **kw: Any) -> fence.Claims:
        return pgfence.write(conn or self.conn, lease, self.resource, p, writes, verifier=self.v, **kw)

    def stored(self, resource: str = "") -> Any:
        with self.admin.cursor() as cur:
            cur.execute("SELECT lease, fencing_token FROM leasesvc_fence WHERE resource = %s", (resource or self.resource,))
            return cur.fetchone()

    def items(self) -> List[str]:
        with self.admin.cursor() as cur:
            cur.execute("SELECT id FROM py_items WHERE id LIKE %s ORDER BY id", (self.resource + "/%",))
            return [r[0] for r in cur.fetchall()]

    def refused(self, cls: type, reason: str, p: str, lease: str = LEASE) -> None:
        ran: List[bool] = []
        with self.assertRaises(cls) as cm:
            self.write(p, lambda cur: ran.append(True), lease=lease)
        self.assertEqual(cm.exception.reason, reason, str(cm.exception))
        self.assertFalse(ran, "a refused proof ran the caller's writes")

    def test_schema_is_go_s(self) -> None:
        want = json.loads(os.environ.get("LEASESVC_PGFENCE_GO_SCHEMAS", "{}"))
        if not want:
            self.skipTest("LEASESVC_PGFENCE_GO_SCHEMAS is not set (the Go test sets it)")
        for table, ddl in want.items():
            self.assertEqual(pgfence.schema(table), ddl, f"table {table!r}")

    def test_deposed_holder_refused(self) -> None:
        r = self.resource
        self.assertEqual(self.write(proof(LEASE, 1), insert(r + "/first")).fencing_token, 1)
        self.write(proof(LEASE, 2), insert(r + "/second"))
        self.write(proof(LEASE, 2), insert(r + "/again"))  # an equal token: one holder writes many times
        self.refused(fence.StaleTokenError, "stale", proof(LEASE, 1))
        self.refused(fence.SignatureError, "bad_signature", proof(LEASE, 99, seed=STRANGER))  # forged under our kid
        self.refused(fence.UnknownKeyError, "unknown_key", proof(LEASE, 99, seed=STRANGER,
                                                                  kid=fence.key_id(public_key(STRANGER))))
        self.refused(fence.MalformedProofError, "malformed", "99")  # a bare token
        self.refused(fence.OtherLeaseError, "other_lease", proof("team-b.mailer", 99))
        boom = RuntimeError("boom")

        def failing(cur: Any) -> None:
            insert(r + "/partial")(cur)
            raise boom

        with self.assertRaises(RuntimeError) as cm:
            self.write(proof(LEASE, 3), failing)
        self.assertIs(cm.exception, boom)
        self.assertEqual(self.items(), [r + "/again", r + "/first", r + "/second"])
        self.assertEqual(self.stored(), (LEASE, 2), "a failing transaction kept its token")

    def test_expected_lease(self) -> None:
        # A proof of another lease does not bind a resource never written.
        self.refused(fence.OtherLeaseError, "other_lease", proof("team-b.mailer", 99))
        self.assertIsNone(self.stored())
        with self.assertRaises(ValueError):
            self.write(proof(LEASE, 1), None, lease="")
        self.write(proof(LEASE, 1), insert(self.resource + "/leader"))
        self.refused(fence.OtherLeaseError, "other_lease", proof("team-b.mailer", 99))
        # A row another lease's proof stored before the check keeps refusing.
        with self.admin.cursor() as cur:
            cur.execute("INSERT INTO leasesvc_fence (resource, lease, fencing_token) VALUES (%s, 'team-b.mailer', 5)",
                        (self.resource + "_old",))
        with self.assertRaises(fence.OtherLeaseError):
            pgfence.write(self.conn, LEASE, self.resource + "_old", proof(LEASE, 9), None, verifier=self.v)
        self.assertEqual(self.stored(self.resource + "_old"), ("team-b.mailer", 5))
        self.assertEqual(self.items(), [self.resource + "/leader"])

    def test_successor_fences_first(self) -> None:
        self.write(proof(LEASE, 1), insert(self.resource + "/first"))
        c = pgfence.fence_first(self.conn, LEASE, self.resource, proof(LEASE, 2), verifier=self.v)
        self.assertEqual((c.lease, c.fencing_token), (LEASE, 2))
        self.assertEqual(self.stored(), (LEASE, 2))
        self.refused(fence.StaleTokenError, "stale", proof(LEASE, 1))  # before the successor wrote anything
        self.assertEqual(self.items(), [self.resource + "/first"])

    def test_autocommit_connection_and_pyformat(self) -> None:
        conn = connect(autocommit=True)
        self.addCleanup(conn.close)
        self.write(proof(LEASE, 1), insert(self.resource + "/a"), conn=conn, paramstyle="pyformat")

        def failing(cur: Any) -> None:
            insert(self.resource + "/b")(cur)
            raise KeyError("boom")

        with self.assertRaises(KeyError):
            self.write(proof(LEASE, 2), failing, conn=conn)
        self.assertEqual((self.items(), self.stored()), ([self.resource + "/a"], (LEASE, 1)),
                         "the autocommit connection's write was not one transaction")
        self.write(proof(LEASE, 3), None, conn=conn)
        with self.assertRaises(fence.StaleTokenError):
            self.write(proof(LEASE, 2), insert(self.resource + "/late"), conn=conn)
        self.assertEqual((self.items(), self.stored()), ([self.resource + "/a"], (LEASE, 3)))
        self.assertFalse(conn.closed)

    def test_open_transaction_refused(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("INSERT INTO py_items VALUES (%s)", (self.resource + "/pending",))
        with self.assertRaises(ValueError):
            self.write(proof(LEASE, 1), insert(self.resource + "/x"))
        self.conn.rollback()
        self.assertEqual((self.items(), self.stored()), ([], None))

    def test_bad_settings(self) -> None:
        with self.assertRaises(ValueError):
            self.write(proof(LEASE, 1), None, paramstyle="dollar")
        self.assertIsNone(self.stored())

    def test_serialization_failure_retried(self) -> None:
        self.write(proof(LEASE, 1), None)
        conn = Meddled(connect("SERIALIZABLE"), self.admin, self.resource, meddle_attempts=1)
        self.addCleanup(conn.close)
        self.write(proof(LEASE, 2), insert(self.resource + "/second"), conn=conn)
        self.assertEqual(conn.attempts, 2, "the first attempt met no serialization failure: the test proves nothing")
        self.assertEqual((self.items(), self.stored()), ([self.resource + "/second"], (LEASE, 2)))

    def test_serialization_failures_exhausted(self) -> None:
        self.write(proof(LEASE, 1), None)
        conn = Meddled(connect("SERIALIZABLE"), self.admin, self.resource, meddle_attempts=pgfence.ATTEMPTS)
        self.addCleanup(conn.close)
        ran: List[bool] = []
        with self.assertRaises(pgfence.SerializationError) as cm:
            self.write(proof(LEASE, 2), lambda cur: ran.append(True), conn=conn)
        self.assertEqual(pgfence.sqlstate(cm.exception.__cause__), "40001")
        self.assertEqual((conn.attempts, ran, self.stored()), (pgfence.ATTEMPTS, [], (LEASE, 1)))

    def test_go_written_rows(self) -> None:
        """Go wrote the resource (token 5, its own key) before this test; its
        proofs come in LEASESVC_PGFENCE_GO."""
        raw = os.environ.get("LEASESVC_PGFENCE_GO", "")
        if not raw:
            self.skipTest("LEASESVC_PGFENCE_GO is not set (the Go test sets it)")
        go = json.loads(raw)
        v = fence.Verifier(fence.parse_jwks(go["jwks"]))
        resource, lease, proofs = go["resource"], go["lease"], go["proofs"]
        self.assertEqual(self.stored(resource), (lease, 5))
        with self.assertRaises(fence.StaleTokenError):
            pgfence.write(self.conn, lease, resource, proofs["4"], insert(resource + "/late"), verifier=v)
        pgfence.write(self.conn, lease, resource, proofs["5"], insert(resource + "/python-5"), verifier=v)
        pgfence.fence_first(self.conn, lease, resource, proofs["6"], verifier=v)
        self.assertEqual(self.stored(resource), (lease, 6))


class Meddled:
    """A connection whose first ``meddle_attempts`` transactions take their
    snapshot, then see another connection update the resource's token row:
    the upsert then fails to serialize (SQLSTATE 40001)."""

    def __init__(self, conn: Any, other: Any, resource: str, meddle_attempts: int) -> None:
        self._conn, self._other, self._resource, self._left = conn, other, resource, meddle_attempts
        self.attempts = 0

    def cursor(self) -> Any:
        self.attempts += 1
        cur = self._conn.cursor()
        if self._left > 0:
            self._left -= 1
            cur.execute("SELECT 1")  # the snapshot
            with self._other.cursor() as o:
                o.execute("UPDATE leasesvc_fence SET updated_at = now() WHERE resource = %s", (self._resource,))
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


if __name__ == "__main__":
    unittest.main()
