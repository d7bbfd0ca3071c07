"""The Elector says once how it holds its lease: through its logger when
given one, else in one line on stderr, once per process for each change of
mode (not per term, not per Elector)."""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import unittest
from typing import Any, List

import leasesvc
from leasesvc import keeper

from ._session_server import FakeSessionService
from ._support import FakeService, Request, lease_json


class ElectorModeLineTest(unittest.TestCase):
    def setUp(self) -> None:
        keeper._said = ""  # nothing said yet in this "process"
        self.addCleanup(setattr, keeper, "_said", "")
        self.err = io.StringIO()
        redirect = contextlib.redirect_stderr(self.err)
        redirect.__enter__()
        self.addCleanup(redirect.__exit__, None, None, None)

    def lines(self) -> List[str]:
        return [line for line in self.err.getvalue().splitlines() if line.startswith("leasesvc: ")]

    def test_once_through_a_session_then_once_for_plain_renewals(self) -> None:
        f = FakeSessionService()
        self.addCleanup(f.close)
        client = leasesvc.Client(f.url, request_timeout=5)
        self.addCleanup(client.close)
        terms: List[leasesvc.Term] = []
        started = threading.Semaphore(0)

        def lead(term: leasesvc.Term) -> None:
            terms.append(term)
            started.release()
            term.wait()

        e = leasesvc.Elector.for_client(client, "a", holder="me", on_started_leading=lead)
        self.addCleanup(e.stop, 10)
        e.start()
        self.assertTrue(started.acquire(timeout=10), "no term began")
        f.push({"type": "lost", "name": "a", "fencingToken": 1, "reason": "taken"})
        self.assertTrue(started.acquire(timeout=10), "no second term began")  # it campaigned again
        e2 = leasesvc.Elector.for_client(client, "b", holder="me")
        self.addCleanup(e2.stop, 10)
        e2.start()
        f.wait(lambda: f.count("acquire") == 3)
        self.assertEqual(self.lines(), ['leasesvc: elector "a" holds through a session (window 1s)'],
                         "one line for two terms and two Electors in one mode")

        def handler(req: Request) -> Any:
            if req.path.endswith(":release"):
                return (200, {}, lease_json(token=req.body["fencingToken"], held=False))
            return (200, {}, lease_json(token=5))

        plain = FakeService(handler)  # answers the session upgrade 404
        self.addCleanup(plain.close)
        led = threading.Event()
        p = leasesvc.Elector.for_client(leasesvc.Client(plain.url), "c", holder="me", ttl=2.0,
                                        on_started_leading=lambda t: (led.set(), t.wait()))
        p.start()
        self.assertTrue(led.wait(10))
        p.stop(10)
        self.assertEqual(self.lines()[1:], ['leasesvc: elector "c" holds with plain renewals '
                                            '(the service offers no sessions: 404)'])

        chosen = leasesvc.Elector.for_client(leasesvc.Client(plain.url), "d", holder="me", ttl=2.0, plain_renewals=True)
        chosen.start()
        chosen.stop(10)
        self.assertEqual(self.lines()[2:], ['leasesvc: elector "d" holds with plain renewals (plain_renewals=True)'])

    def test_a_logger_given_says_it_there_and_nothing_on_stderr(self) -> None:
        f = FakeSessionService()
        self.addCleanup(f.close)
        client = leasesvc.Client(f.url, request_timeout=5)
        self.addCleanup(client.close)
        led = threading.Event()
        log = logging.getLogger("test.elector.mode")
        with self.assertLogs(log, logging.INFO) as logs:
            e = leasesvc.Elector.for_client(client, "a", holder="me", logger=log,
                                            on_started_leading=lambda t: (led.set(), t.wait()))
            e.start()
            self.assertTrue(led.wait(10))
            e.stop(10)
        self.assertTrue(any("holding through a session (window 1s)" in line for line in logs.output), logs.output)
        self.assertEqual(self.lines(), [])


if __name__ == "__main__":
    unittest.main()
