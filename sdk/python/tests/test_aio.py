"""AsyncElector against the in-process fake service: the term reaches the
event loop, ends at the safe deadline even while the loop is blocked, its
leader task is cancelled when it ends, and ``async with`` releases."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import Any, List, Optional

import leasesvc
from leasesvc.aio import AsyncElector, AsyncTerm

from ._support import FakeService, Request, lease_json, problem
from .test_elector import Script, hang


class AsyncElectorTest(unittest.IsolatedAsyncioTestCase):
    def fake(self, script: Script) -> FakeService:
        f = FakeService(script)
        self.addCleanup(f.close)
        return f

    def elector(self, f: FakeService, **kw: Any) -> AsyncElector:
        kw.setdefault("ttl", 2.0)
        return AsyncElector.for_client(leasesvc.Client(f.url, request_timeout=5), "a", holder="me", **kw)

    async def test_async_with_leads_and_releases(self) -> None:
        f = self.fake(Script())
        async with self.elector(f) as e:
            term = await asyncio.wait_for(e.leadership(), 5)
            self.assertIsInstance(term, AsyncTerm)
            self.assertEqual(term.token, 5)
            self.assertTrue(term.leading)
            self.assertTrue(e.is_leader())
            self.assertIs(e.term(), term)
            self.assertIs(await e.leadership(), term)  # at once while leading
            async with term:
                self.assertFalse(await term.wait(0.05))
        self.assertFalse(term.leading)
        self.assertIsInstance(await asyncio.wait_for(term, 5), leasesvc.StoppedError)
        self.assertEqual(len(f.calls(":release")), 1)
        self.assertEqual(f.calls(":release")[0].body, {"holder": "me", "fencingToken": 5})
        self.assertIsNone(e.elector.error)

    async def test_blocked_loop_cannot_outlive_the_safe_deadline(self) -> None:
        # Renewals hang: the term must end at the safe deadline, TTL 2 s ×
        # 0.9 − 0.2 s after the acquire's send, although the leader blocks
        # the event loop until then and beyond.
        f = self.fake(Script(renew=hang(5)))
        terms: List[AsyncTerm] = []
        seen_ended: List[bool] = []
        cancelled_after: List[float] = []
        cancelled = asyncio.Event()

        async def lead(term: AsyncTerm) -> None:
            if terms:
                await asyncio.sleep(30)  # a later term: nothing to check
                return
            terms.append(term)
            # Block the loop (as a time.sleep or a CPU-bound step would)
            # until the Elector's thread ends the term, then a little more.
            seen_ended.append(term.ended.wait(10))
            time.sleep(0.3)
            freed = time.monotonic()
            try:
                await asyncio.sleep(30)  # cancelled as soon as the loop runs
            except asyncio.CancelledError:
                cancelled_after.append(time.monotonic() - freed)
                cancelled.set()
                raise

        asyncio.get_running_loop().slow_callback_duration = 10  # the block is the point: no debug warning
        before = time.monotonic()
        async with self.elector(f, on_started_leading=lead):
            await asyncio.wait_for(cancelled.wait(), 10)
        acquired = f.calls(":acquire")[0].at
        self.assertEqual(seen_ended, [True], "term.ended was not set while the loop was blocked")
        term = terms[0]
        self.assertIsInstance(term.cause, leasesvc.SafeDeadlineError)
        ended_at = term.ended_at
        assert ended_at is not None
        self.assertLess(ended_at - before, 2.0 * 0.9, "ended after TTL × (1 − drift margin)")
        self.assertGreater(ended_at - acquired, 1.8 - 0.2 - 0.1, "ended long before the safe deadline")
        self.assertLess(cancelled_after[0], 1.0, "the leader task was not cancelled when the loop ran again")

    async def test_term_cause_and_await_after_the_deadline(self) -> None:
        f = self.fake(Script(renew=lambda req: problem(503, "unavailable")))
        async with self.elector(f) as e:
            term = await asyncio.wait_for(e.leadership(), 5)
            cause = await asyncio.wait_for(term, 5)
            self.assertIsInstance(cause, leasesvc.SafeDeadlineError)
            self.assertIs(term.cause, cause)
            self.assertIsNotNone(term.ended_at)
            with self.assertRaises(leasesvc.NotLeadingError):
                async with term:
                    self.fail("entered an ended term")

    async def test_block_is_cancelled_on_lease_lost_and_code_after_it_runs(self) -> None:
        renewals = [0]

        def renew(req: Request) -> Any:
            renewals[0] += 1
            return (200, {}, lease_json(token=5)) if renewals[0] == 1 else problem(409, "lease_lost")

        f = self.fake(Script(renew=renew))
        async with self.elector(f) as e:
            term = await asyncio.wait_for(e.leadership(), 5)
            cancelled = False
            async with term:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    cancelled = True
                    raise
            self.assertTrue(cancelled)
            self.assertIsInstance(term.cause, leasesvc.LeaseLostError)
            await asyncio.sleep(0)  # still running: the cancellation was swallowed by the block
            task = asyncio.current_task()
            assert task is not None
            if hasattr(task, "cancelling"):
                self.assertEqual(task.cancelling(), 0)

    async def test_returning_resigns(self) -> None:
        f = self.fake(Script())
        done = asyncio.Event()

        async def lead(term: AsyncTerm) -> None:
            done.set()

        e = self.elector(f, on_started_leading=lead)
        await e.start()
        await asyncio.wait_for(done.wait(), 5)
        thread = e.elector._thread
        assert thread is not None
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)
        self.assertFalse(thread.is_alive(), "run did not return after the resignation")
        self.assertEqual(len(f.calls(":release")), 1)
        await e.stop()

    async def test_stop_from_the_leader(self) -> None:
        f = self.fake(Script())
        result: List[Optional[BaseException]] = []

        holder: List[AsyncElector] = []

        async def lead2(term: AsyncTerm) -> None:
            await holder[0].stop()  # returns at once; the task is cancelled next
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                result.append(term.cause)
                raise

        e = self.elector(f, on_started_leading=lead2)
        holder.append(e)
        await e.start()
        thread = e.elector._thread
        assert thread is not None
        await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)
        self.assertFalse(thread.is_alive())
        self.assertEqual(len(result), 1)
        self.assertIsInstance(result[0], leasesvc.StoppedError)
        self.assertEqual(len(f.calls(":release")), 1)

    async def test_leader_exception_is_logged_and_resigns(self) -> None:
        f = self.fake(Script())

        async def lead(term: AsyncTerm) -> None:
            raise ValueError("boom")

        e = self.elector(f, on_started_leading=lead)
        with self.assertLogs("leasesvc", "ERROR") as logs:
            await e.start()
            thread = e.elector._thread
            assert thread is not None
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)
        self.assertTrue(any("boom" in line for line in logs.output), logs.output)
        self.assertEqual(len(f.calls(":release")), 1)


class ThreadSafetyTest(unittest.TestCase):
    def test_ended_is_the_threaded_terms_flag(self) -> None:
        f = FakeService(Script())
        self.addCleanup(f.close)
        got: List[AsyncTerm] = []

        async def main() -> None:
            async with AsyncElector.for_client(leasesvc.Client(f.url), "a", holder="me", ttl=2.0) as e:
                got.append(await asyncio.wait_for(e.leadership(), 5))

        asyncio.run(main())
        term = got[0]
        self.assertIsInstance(term.ended, type(threading.Event()))
        self.assertTrue(term.ended.is_set())


if __name__ == "__main__":
    unittest.main()
