"""Client and Elector against the real leasesvc binary (built from this
repository with go build, or $LEASESVC_BIN)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
import unittest
from typing import List

import leasesvc

from ._support import RealService, unique


def setUpModule() -> None:
    global SVC
    SVC = RealService()


def tearDownModule() -> None:
    SVC.close()


SVC: RealService


class FlowsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = leasesvc.Client(SVC.url)

    def test_lease_flow(self) -> None:
        c, name = self.c, unique("flow")
        a = c.acquire(name, "a", 5.0, metadata={"addr": "10.0.0.1"})
        self.assertEqual((a.holder, a.fencing_token, a.held, a.transitions, a.metadata), ("a", 1, True, 1, {"addr": "10.0.0.1"}))
        with self.assertRaises(leasesvc.LeaseHeldError) as cm:
            c.acquire(name, "b", 5.0)
        self.assertEqual((cm.exception.lease.holder, cm.exception.lease.fencing_token), ("a", 1))
        self.assertGreaterEqual(cm.exception.retry_after, 1)
        self.assertEqual(c.renew(name, "a", 1, ttl=6.0).ttl_ms, 6000)
        with self.assertRaises(leasesvc.LeaseLostError):
            c.renew(name, "a", 2)
        r = c.release(name, "a", 1)
        self.assertFalse(r.held)
        self.assertEqual(c.release(name, "a", 1).expire_time, r.expire_time)  # idempotent
        self.assertEqual(c.acquire(name, "b", 5.0).fencing_token, 2)
        g = c.get(name)
        self.assertEqual((g.holder, g.fencing_token, g.held), ("b", 2, True))
        revoked = c.revoke(name, "test", 2)
        self.assertFalse(revoked.held)
        self.assertEqual(revoked.revoke_reason, "test")
        with self.assertRaises(leasesvc.LeaseLostError):
            c.renew(name, "b", 2)

    def test_errors(self) -> None:
        with self.assertRaises(leasesvc.NotFoundError):
            self.c.get(unique("missing"))
        with self.assertRaises(leasesvc.InvalidArgumentError) as cm:
            self.c.acquire(unique("bad"), "a", 0.01)
        self.assertIn("ttlMs", [f.field for f in cm.exception.fields])
        with self.assertRaises(leasesvc.InvalidArgumentError):
            self.c.get("-bad-name")
        with self.assertRaises(leasesvc.InvalidArgumentError):
            self.c.list(page_token="garbage!")

    def test_list_pages(self) -> None:
        prefix = unique("list") + "."
        names = [f"{prefix}{i:02d}" for i in range(5)]
        for n in names:
            self.c.acquire(n, "a", 5.0)
        page = self.c.list(prefix, page_size=2)
        self.assertEqual([x.name for x in page.leases], names[:2])
        self.assertTrue(page.next_page_token)
        self.assertEqual([x.name for x in self.c.all(prefix)], names)
        self.assertEqual(self.c.list(prefix + "none").leases, [])

    def test_wait_on_the_service(self) -> None:
        name = unique("wait")
        held = self.c.acquire(name, "a", 30.0)
        threading.Timer(0.4, lambda: self.c.release(name, "a", held.fencing_token)).start()
        t = time.monotonic()
        got = self.c.acquire(name, "b", 5.0, wait=10.0)
        self.assertEqual(got.fencing_token, 2)
        self.assertGreater(time.monotonic() - t, 0.3)

    def test_watch(self) -> None:
        name = unique("watch")
        events: List[leasesvc.Event] = []
        w = self.c.watch(name)
        self.addCleanup(w.close)
        first = next(w)
        self.assertEqual((first.type, first.lease), ("lease", None))

        def act() -> None:
            a = self.c.acquire(name, "a", 5.0)
            self.c.release(name, "a", a.fencing_token)

        threading.Timer(0.1, act).start()
        for ev in w:
            events.append(ev)
            if len(events) == 2:
                break
        self.assertEqual([(e.type, e.lease.fencing_token if e.lease else 0) for e in events], [("acquired", 1), ("released", 1)])
        self.assertEqual(events[0].id, f"{name}/1/acquired")
        self.assertEqual(w.last_event_id, f"{name}/1/released")

    def test_delete(self) -> None:
        """delete removes a free lease and returns it as it was; a held one is
        LeaseHeld, a missing one NotFound; a watch sees the deleted event and
        the next acquire gets the next token (docs/contract.md §15)."""
        c, name = self.c, unique("delete")
        with self.assertRaises(leasesvc.NotFound):
            c.delete(name)
        a = c.acquire(name, "a", 30.0)
        with self.assertRaises(leasesvc.LeaseHeld) as cm:
            c.delete(name)
        self.assertEqual(cm.exception.lease.holder, "a")
        w = c.watch(name)
        self.addCleanup(w.close)
        self.assertEqual(next(w).type, leasesvc.EVENT_STATE)
        c.release(name, "a", a.fencing_token)
        d = c.delete(name)
        self.assertEqual((d.name, d.holder, d.fencing_token, d.held), (name, "a", 1, False))
        self.assertEqual([next(w).type, next(w).type], [leasesvc.EVENT_RELEASED, leasesvc.EVENT_DELETED])
        with self.assertRaises(leasesvc.NotFound):
            c.get(name)
        with self.assertRaises(leasesvc.NotFound):
            c.delete(name)
        self.assertEqual(c.acquire(name, "b", 5.0).fencing_token, 2)


class ElectorServiceTest(unittest.TestCase):
    def test_two_electors_hand_over_on_stop(self) -> None:
        c, name = leasesvc.Client(SVC.url), unique("two")
        a = leasesvc.Elector.for_client(c, name, holder="a", ttl=2.0)
        a.start()
        self.addCleanup(a.stop, 10)
        deadline = time.monotonic() + 5
        while not a.is_leader() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(a.is_leader())
        b = leasesvc.Elector.for_client(c, name, holder="b", ttl=2.0)
        b.start()
        self.addCleanup(b.stop, 10)
        for _ in range(100):  # 1 s: one renewal of a
            self.assertNotEqual(a.is_leader(), b.is_leader())
            time.sleep(0.01)
        stopped = time.monotonic()
        a.stop(10)
        self.assertTrue(b.leading.wait(5))
        took = time.monotonic() - stopped
        self.assertEqual(b.token(), 2)
        self.assertLess(took, 1.5, "b should be woken by the release, not by the expiry")


class AuthTest(unittest.TestCase):
    def test_credentials_and_policy(self) -> None:
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "tokens.yaml"), "w") as f:
            f.write("tokens:\n  - {principal: reader, token: reader-token-0123456789}\n"
                    "  - {principal: writer, token: writer-token-0123456789}\n")
        with open(os.path.join(d, "policy.yaml"), "w") as f:
            f.write("grants:\n  - {principals: [reader], verbs: [read], prefixes: [\"*\"]}\n"
                    "  - {principals: [writer], verbs: [acquire], prefixes: [\"*\"]}\n")
        svc = RealService({"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": os.path.join(d, "tokens.yaml"),
                           "LEASESVC_POLICY": os.path.join(d, "policy.yaml")})
        self.addCleanup(svc.close)
        name = unique("auth")
        with self.assertRaises(leasesvc.UnauthenticatedError):
            leasesvc.Client(svc.url).get(name)
        with self.assertRaises(leasesvc.UnauthenticatedError):
            leasesvc.Client(svc.url, token="wrong-token-0123456789").get(name)
        with self.assertRaises(leasesvc.PermissionDeniedError):
            leasesvc.Client(svc.url, token="reader-token-0123456789").acquire(name, "r", 5.0)
        lease = leasesvc.Client(svc.url, token=lambda: "writer-token-0123456789").acquire(name, "w", 5.0)
        self.assertEqual(lease.principal, "writer")
        with self.assertRaises(leasesvc.PermissionDeniedError):
            leasesvc.Client(svc.url, token="writer-token-0123456789").revoke(name, "no admin")


if __name__ == "__main__":
    unittest.main()
