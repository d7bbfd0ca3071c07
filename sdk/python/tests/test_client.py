"""Client against an in-process fake service: error mapping, retries,
Retry-After, credentials, paging, watch streams."""

from __future__ import annotations

import json
import threading
import time
import unittest
import unittest.mock
from typing import Any, List

import leasesvc
import leasesvc.watch
from leasesvc.backoff import Backoff

from ._support import FakeService, Request, lease_json, problem

FAST = Backoff(0.01, 0.05, 2.0)


class FakeTestCase(unittest.TestCase):
    def serve(self, handler: Any) -> FakeService:
        f = FakeService(handler)
        self.addCleanup(f.close)
        return f


class ErrorMappingTest(FakeTestCase):
    def test_codes_map_to_typed_errors(self) -> None:
        cases = [
            (problem(409, "lease_lost"), leasesvc.LeaseLostError),
            (problem(404, "not_found"), leasesvc.NotFoundError),
            (problem(400, "invalid_argument", errors=[{"field": "ttlMs", "detail": "too short"}]), leasesvc.InvalidArgumentError),
            (problem(413, "payload_too_large"), leasesvc.InvalidArgumentError),
            (problem(401, "unauthenticated"), leasesvc.UnauthenticatedError),
            (problem(403, "permission_denied"), leasesvc.PermissionDeniedError),
            (problem(500, "internal"), leasesvc.InternalError),
            ((418, {}, b"teapot"), leasesvc.InvalidArgumentError),
            ((404, {}, b"no such route"), leasesvc.NotFoundError),
        ]
        for ans, cls in cases:
            with self.subTest(code=ans[2]):
                f = self.serve(lambda req, a=ans: a)
                c = leasesvc.Client(f.url, max_attempts=3, backoff=FAST)
                with self.assertRaises(cls) as cm:
                    c.get("a")
                self.assertEqual(len(f.requests), 1, "a refusal must not be retried")
                self.assertEqual(cm.exception.status, ans[0])
        self.assertTrue(issubclass(leasesvc.UnauthenticatedError, leasesvc.AccessDeniedError))
        self.assertTrue(issubclass(leasesvc.RateLimitedError, leasesvc.UnavailableError))

    def test_invalid_argument_lists_fields(self) -> None:
        f = self.serve(lambda req: problem(400, "invalid_argument", errors=[{"field": "ttlMs", "detail": "too short"}]))
        with self.assertRaises(leasesvc.InvalidArgumentError) as cm:
            leasesvc.Client(f.url).acquire("a", "me", 0.5)
        self.assertEqual(cm.exception.fields, [leasesvc.FieldError("ttlMs", "too short")])
        self.assertEqual(cm.exception.code, "invalid_argument")
        self.assertIn("ttlMs", str(cm.exception))
        self.assertEqual(f.requests[0].body, {"holder": "me", "ttlMs": 500})

    def test_lease_held_carries_the_lease(self) -> None:
        f = self.serve(lambda req: problem(409, "lease_held", retry_after=3, lease=lease_json(holder="other", token=7)))
        with self.assertRaises(leasesvc.LeaseHeldError) as cm:
            leasesvc.Client(f.url).acquire("a", "me", 1.0)
        e = cm.exception
        self.assertEqual((e.lease.holder, e.lease.fencing_token, e.code, e.retry_after), ("other", 7, "lease_held", 3.0))

    def test_lease_fields(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json(token=3, principal="p", metadata={"k": 1})))
        lease = leasesvc.Client(f.url).get("a")
        self.assertEqual((lease.fencing_token, lease.held, lease.ttl_ms, lease.principal, lease.metadata),
                         (3, True, 1000, "p", {"k": 1}))
        self.assertIsNotNone(lease.acquire_time)
        self.assertEqual(lease.acquire_time.microsecond, 123456)  # type: ignore[union-attr]


class RetryTest(FakeTestCase):
    def test_transient_failures_are_retried(self) -> None:
        answers = [problem(503, "unavailable", retry_after=1), (502, {}, b"bad gateway"), (200, {}, lease_json())]
        f = self.serve(lambda req: answers.pop(0))
        t = time.monotonic()
        lease = leasesvc.Client(f.url, backoff=FAST).renew("a", "me", 1)
        self.assertEqual(lease.fencing_token, 1)
        self.assertEqual(len(f.requests), 3)
        # A 503's Retry-After lengthens the delay only up to backoff.max.
        self.assertLess(time.monotonic() - t, 0.9)

    def test_attempts_run_out(self) -> None:
        f = self.serve(lambda req: problem(503, "unavailable"))
        with self.assertRaises(leasesvc.UnavailableError):
            leasesvc.Client(f.url, max_attempts=3, backoff=FAST).get("a")
        self.assertEqual(len(f.requests), 3)

    def test_429_waits_retry_after_in_full(self) -> None:
        answers = [problem(429, "resource_exhausted", retry_after=1), (200, {}, lease_json())]
        f = self.serve(lambda req: answers.pop(0))
        leasesvc.Client(f.url, backoff=FAST).get("a")
        reqs = f.requests
        self.assertEqual(len(reqs), 2)
        self.assertGreaterEqual(reqs[1].at - reqs[0].at, 0.95, "the retry came before the 429's Retry-After")

    def test_rate_limited_after_attempts(self) -> None:
        f = self.serve(lambda req: problem(429, "resource_exhausted"))
        with self.assertRaises(leasesvc.RateLimitedError) as cm:
            leasesvc.Client(f.url, max_attempts=2, backoff=FAST).get("a")
        self.assertEqual(cm.exception.code, "resource_exhausted")

    def test_unreachable(self) -> None:
        f = FakeService(lambda req: (200, {}, {}))
        url = f.url
        f.close()
        with self.assertRaises(leasesvc.UnavailableError) as cm:
            leasesvc.Client(url, max_attempts=2, backoff=FAST).get("a")
        self.assertEqual(cm.exception.status, 0)

    def test_timeout_is_unavailable(self) -> None:
        def slow(req: Request) -> Any:
            time.sleep(0.5)
            return (200, {}, lease_json())

        f = self.serve(slow)
        with self.assertRaises(leasesvc.UnavailableError):
            leasesvc.Client(f.url, request_timeout=0.1, max_attempts=1).get("a")

    def test_revoke_retries_only_what_was_not_acted_on(self) -> None:
        f = self.serve(lambda req: problem(503, "unavailable"))
        with self.assertRaises(leasesvc.UnavailableError):
            leasesvc.Client(f.url, backoff=FAST).revoke("a", "why")
        self.assertEqual(len(f.requests), 1, "a 503 revoke may have acted: not retried")
        answers = [problem(429, "resource_exhausted"), (200, {}, lease_json(held=False))]
        g = self.serve(lambda req: answers.pop(0))
        leasesvc.Client(g.url, backoff=FAST).revoke("a", "why", 4)
        self.assertEqual(len(g.requests), 2)
        self.assertEqual(g.requests[1].body, {"reason": "why", "fencingToken": 4})


class CredentialsTest(FakeTestCase):
    def test_static_token_in_both_headers(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json()))
        leasesvc.Client(f.url, token="tok-1").get("a")
        h = f.requests[0].headers
        self.assertEqual(h.get("Authorization"), "Bearer tok-1")
        self.assertEqual(h.get("X-Serverless-Authorization"), "Bearer tok-1")

    def test_callable_is_asked_every_attempt(self) -> None:
        answers = [problem(503, "unavailable"), (200, {}, lease_json())]
        f = self.serve(lambda req: answers.pop(0))
        n = [0]

        def token() -> str:
            n[0] += 1
            return f"tok-{n[0]}"

        leasesvc.Client(f.url, token=token, backoff=FAST).get("a")
        self.assertEqual([r.headers.get("Authorization") for r in f.requests], ["Bearer tok-1", "Bearer tok-2"])

    def test_failing_callable_sends_nothing(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json()))

        def broken() -> str:
            raise OSError("metadata server down")

        for tok in (broken, lambda: ""):
            with self.assertRaises(leasesvc.CredentialsError):
                leasesvc.Client(f.url, token=tok).get("a")
        self.assertEqual(f.requests, [])

    def test_no_token_no_header(self) -> None:
        f = self.serve(lambda req: (200, {}, lease_json()))
        leasesvc.Client(f.url).get("a")
        self.assertNotIn("Authorization", f.requests[0].headers)


class ListTest(FakeTestCase):
    def test_all_follows_pages(self) -> None:
        def handler(req: Request) -> Any:
            if "pageToken=p2" in req.path:
                return (200, {}, {"leases": [lease_json(name="t.c")], "nextPageToken": ""})
            return (200, {}, {"leases": [lease_json(name="t.a"), lease_json(name="t.b")], "nextPageToken": "p2"})

        f = self.serve(handler)
        c = leasesvc.Client(f.url)
        self.assertEqual([x.name for x in c.all("t.")], ["t.a", "t.b", "t.c"])
        self.assertIn("prefix=t.", f.requests[0].path)
        self.assertIn("pageSize=1000", f.requests[0].path)
        page = c.list("t.", page_size=2)
        self.assertEqual((len(page.leases), page.next_page_token), (2, "p2"))

    def test_large_page(self) -> None:
        # 64 leases of 32 KiB (16 KiB of metadata and of checkpoint, the most
        # of each): 2 MiB, more than the 1 MiB the client once read.
        blob = {"b": "x" * ((16 << 10) - 8)}
        big = [lease_json(name=f"t.{i:02d}", metadata=blob, checkpoint=blob) for i in range(64)]
        f = self.serve(lambda req: (200, {}, {"leases": big, "nextPageToken": ""}))
        page = leasesvc.Client(f.url).list("t.", page_size=1000)
        self.assertEqual(len(page.leases), 64)
        self.assertEqual(page.leases[63].metadata, blob)

    def test_answer_too_large_says_so(self) -> None:
        f = self.serve(lambda req: (200, {}, {"leases": [lease_json(name="t.a")], "nextPageToken": ""}))
        with unittest.mock.patch.object(leasesvc.client, "MAX_ANSWER_BYTES", 100):
            with self.assertRaises(leasesvc.InternalError) as cm:
                leasesvc.Client(f.url).list("t.")
        self.assertIn("answer larger than 100 bytes", str(cm.exception))


def sse(frames: List[str], hold: float = 0.0) -> Any:
    """A stream answer: the frames, then (after hold seconds) the end."""

    def write(h: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        for fr in frames:
            h.wfile.write(fr.encode())
            h.wfile.flush()
        time.sleep(hold)
        h.close_connection = True

    return write


def acquired_event(token: int) -> str:
    ev = {"type": "acquired", "lease": lease_json(token=token), "eventTime": "2026-01-01T00:00:00Z"}
    return f"id: a/{token}/acquired\nevent: acquired\ndata: {json.dumps(ev)}\n\n"


class WatchTest(FakeTestCase):
    def test_events_then_reconnect_with_last_event_id(self) -> None:
        n = [0]

        def handler(req: Request) -> Any:
            n[0] += 1
            if n[0] == 1:
                return sse([f"event: lease\ndata: {json.dumps(lease_json(token=1))}\n\n", ": heartbeat\n\n",
                            acquired_event(2)])
            if n[0] == 2:
                return problem(503, "unavailable")
            return sse([f"event: lease\ndata: {json.dumps(lease_json(token=3))}\n\n"], hold=5)

        f = self.serve(handler)
        w = leasesvc.Client(f.url, backoff=FAST).watch("a")
        self.addCleanup(w.close)
        got = []
        for ev in w:
            got.append((ev.type, ev.lease.fencing_token if ev.lease else 0))
            if len(got) == 3:
                break
        self.assertEqual(got, [("lease", 1), ("acquired", 2), ("lease", 3)])
        reqs = f.calls(":watch")
        self.assertEqual(reqs[0].headers.get("Accept"), "text/event-stream")
        self.assertNotIn("Last-Event-ID", reqs[0].headers)
        self.assertEqual(reqs[-1].headers.get("Last-Event-ID"), "a/2/acquired")
        self.assertGreaterEqual(w.reconnects, 1)

    def test_overflow_reconnects(self) -> None:
        n = [0]

        def handler(req: Request) -> Any:
            n[0] += 1
            if n[0] == 1:
                return sse([acquired_event(1), 'event: overflow\ndata: {"reason":"the client fell behind"}\n\n'], hold=5)
            return sse([acquired_event(2)], hold=5)

        f = self.serve(handler)
        w = leasesvc.Client(f.url, backoff=FAST).watch("a")
        self.addCleanup(w.close)
        self.assertEqual([next(w).lease.fencing_token, next(w).lease.fencing_token], [1, 2])
        self.assertEqual(f.calls(":watch")[-1].headers.get("Last-Event-ID"), "a/1/acquired")

    def test_close_ends_iteration_from_another_thread(self) -> None:
        f = self.serve(lambda req: sse(["event: lease\ndata: null\n\n"], hold=10))
        w = leasesvc.Client(f.url).watch("a")
        first = next(w)
        self.assertEqual(first.type, "lease")
        self.assertIsNone(first.lease)
        threading.Timer(0.2, w.close).start()
        t = time.monotonic()
        self.assertEqual(list(w), [])
        self.assertLess(time.monotonic() - t, 5)

    def test_event_too_large_says_so(self) -> None:
        # Issue 37: an event larger than MAX_ANSWER_BYTES, on one data line
        # or on many shorter ones, ends the watch with an error naming the
        # bound; a valid event, so a reader without the bound returns it.
        ev = json.dumps({"type": "acquired", "lease": lease_json(token=1, metadata={"b": "x" * 3000}),
                         "eventTime": "2026-01-01T00:00:00Z"})
        cut = "\ndata: ".join(ev[i:i + 200] for i in range(0, len(ev), 200))
        for label, frame in (("one line", f"event: acquired\ndata: {ev}\n\n"),
                             ("many lines", f"event: acquired\ndata: {cut}\n\n")):
            with self.subTest(label):
                f = self.serve(lambda req, frame=frame: sse([": hi\n\n", frame], hold=5))
                with unittest.mock.patch.object(leasesvc.watch, "MAX_ANSWER_BYTES", 1000):
                    w = leasesvc.Client(f.url, backoff=FAST).watch("a")
                    self.addCleanup(w.close)
                    with self.assertRaises(leasesvc.InternalError) as cm:
                        next(w)
                self.assertIn("event larger than 1000 bytes (MAX_ANSWER_BYTES)", str(cm.exception))
                self.assertEqual(list(w), [], "the watch went on after the failure")

    def test_refusal_is_raised(self) -> None:
        f = self.serve(lambda req: problem(400, "invalid_argument"))
        with self.assertRaises(leasesvc.InvalidArgumentError):
            leasesvc.Client(f.url).watch("a")

    def test_newer(self) -> None:
        a1 = leasesvc.Event("acquired", leasesvc.Lease(name="a", fencing_token=1))
        r1 = leasesvc.Event("released", leasesvc.Lease(name="a", fencing_token=1))
        a2 = leasesvc.Event("acquired", leasesvc.Lease(name="a", fencing_token=2))
        self.assertTrue(leasesvc.newer(a1, r1))
        self.assertFalse(leasesvc.newer(r1, a1))
        self.assertTrue(leasesvc.newer(r1, a2))
        self.assertFalse(leasesvc.newer(a2, a2))
        d1 = leasesvc.Event(leasesvc.EVENT_DELETED, leasesvc.Lease(name="a", fencing_token=1))
        self.assertTrue(leasesvc.newer(r1, d1))  # a deletion follows the end of its holding
        self.assertFalse(leasesvc.newer(d1, r1))
        self.assertTrue(leasesvc.newer(d1, a2))


class ContextManagerTest(FakeTestCase):
    def test_with_closes_the_client_and_its_watches(self) -> None:
        f = self.serve(lambda req: sse(["event: lease\ndata: null\n\n"], hold=10)
                       if req.path.endswith(":watch") else (200, {}, lease_json()))
        with leasesvc.Client(f.url) as c:
            self.assertFalse(c.closed)
            self.assertEqual(c.get("a").fencing_token, 1)
            w = c.watch("a")
            self.assertEqual(next(w).type, "lease")
        self.assertTrue(c.closed)
        t = time.monotonic()
        self.assertEqual(list(w), [], "the watch outlived its client")
        self.assertLess(time.monotonic() - t, 5)
        with self.assertRaises(RuntimeError):
            c.get("a")
        with self.assertRaises(RuntimeError):
            c.watch("a")
        c.close()  # twice: harmless


class NamesTest(unittest.TestCase):
    OLD = {
        "LeaseHeld": "LeaseHeldError", "LeaseReserved": "LeaseReservedError", "LeaseLost": "LeaseLostError",
        "NotFound": "NotFoundError", "InvalidArgument": "InvalidArgumentError", "AccessDenied": "AccessDeniedError",
        "Unauthenticated": "UnauthenticatedError", "PermissionDenied": "PermissionDeniedError",
        "Unavailable": "UnavailableError", "RateLimited": "RateLimitedError", "SafeDeadline": "SafeDeadlineError",
        "Stopped": "StoppedError", "Resigned": "ResignedError", "Yielded": "YieldedError",
        "Transferred": "TransferredError", "NotLeading": "NotLeadingError",
    }

    def test_every_exception_name_ends_in_error(self) -> None:
        for name in leasesvc.__all__:
            obj = getattr(leasesvc, name)
            if isinstance(obj, type) and issubclass(obj, BaseException) and name not in self.OLD:
                self.assertTrue(name.endswith("Error"), name)
                self.assertEqual(obj.__name__, name)

    def test_old_names_are_aliases(self) -> None:
        for old, new in self.OLD.items():
            with self.subTest(old=old):
                self.assertIs(getattr(leasesvc, old), getattr(leasesvc, new))
                self.assertIn(old, leasesvc.__all__)
                self.assertIn(new, leasesvc.__all__)
        # Code written against the old names still catches what is raised.
        f = FakeService(lambda req: problem(409, "lease_lost"))
        self.addCleanup(f.close)
        with self.assertRaises(leasesvc.LeaseLost) as cm:
            leasesvc.Client(f.url).renew("a", "me", 1)
        self.assertIsInstance(cm.exception, leasesvc.LeaseLostError)
        self.assertIn("LeaseLostError", str(cm.exception))


class ConfigTest(unittest.TestCase):
    def test_bad_config(self) -> None:
        for kw in ({"base_url": "ftp://x"}, {"base_url": "http://"}, {"base_url": "http://x", "max_attempts": 0},
                   {"base_url": "http://x", "request_timeout": 0}):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                leasesvc.Client(**kw)  # type: ignore[arg-type]

    def test_backoff(self) -> None:
        b = Backoff(0.1, 1.0, 2.0)
        for n, hi in ((0, 0.1), (1, 0.2), (3, 0.8), (4, 1.0), (50, 1.0)):
            for _ in range(20):
                d = b.delay(n)
                self.assertTrue(hi / 2 <= d <= hi, (n, d))
        with self.assertRaises(ValueError):
            Backoff(0.1, 0.05)


if __name__ == "__main__":
    unittest.main()
