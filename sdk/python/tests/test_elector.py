"""Elector against an in-process fake service: the term ends at once on
lease_lost and before the safe deadline when the service cannot answer;
renewals every TTL/3; release on stop; waiting and 429 handling."""

from __future__ import annotations

import inspect
import threading
import time
import unittest
import warnings
from typing import Any, Callable, List, Optional

import leasesvc

from ._support import FakeService, Request, lease_json, problem


class Script:
    """The fake's answers: acquire and renew are functions of the request."""

    def __init__(self, acquire: Optional[Callable[[Request], Any]] = None,
                 renew: Optional[Callable[[Request], Any]] = None) -> None:
        self.acquire = acquire or (lambda req: (200, {}, lease_json(token=5)))
        self.renew = renew or (lambda req: (200, {}, lease_json(token=5)))

    def __call__(self, req: Request) -> Any:
        if req.path.endswith(":acquire"):
            return self.acquire(req)
        if req.path.endswith(":renew"):
            return self.renew(req)
        if req.path.endswith(":release"):
            return (200, {}, lease_json(token=req.body["fencingToken"], held=False))
        return (200, {}, lease_json(token=5))


class Recorder:
    """Records the terms an Elector runs."""

    def __init__(self) -> None:
        self.terms: List[leasesvc.Term] = []
        self.ended_at: List[float] = []
        self.stopped = 0
        self.started = threading.Event()
        self.lock = threading.Lock()

    def on_started(self, term: leasesvc.Term) -> None:
        with self.lock:
            self.terms.append(term)
        self.started.set()
        term.wait()
        with self.lock:
            self.ended_at.append(time.monotonic())

    def on_stopped(self) -> None:
        with self.lock:
            self.stopped += 1


def hang(seconds: float) -> Callable[[Request], Any]:
    def answer(req: Request) -> Any:
        time.sleep(seconds)
        return (200, {}, lease_json(token=5))

    return answer


class ElectorTest(unittest.TestCase):
    def start(self, script: Script, rec: Optional[Recorder] = None, **kw: Any) -> leasesvc.Elector:
        f = FakeService(script)
        self.addCleanup(f.close)
        self.fake = f
        rec = rec or Recorder()
        self.rec = rec
        kw.setdefault("ttl", 2.0)
        e = leasesvc.Elector.for_client(leasesvc.Client(f.url, request_timeout=5), "a", holder="me",
                                        on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped, **kw)
        self.addCleanup(e.stop, 10)
        return e

    def test_lease_lost_ends_the_term_at_once(self) -> None:
        renewals = [0]

        def renew(req: Request) -> Any:
            renewals[0] += 1
            if renewals[0] == 1:
                return (200, {}, lease_json(token=5))
            return problem(409, "lease_lost")

        e = self.start(Script(renew=renew))
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        self.assertTrue(e.is_leader())
        self.assertEqual(e.token(), 5)
        term = self.rec.terms[0]
        self.assertTrue(term.wait(5), "the term did not end after lease_lost")
        lost_at = self.fake.calls(":renew")[1].at
        self.assertLess(time.monotonic() - lost_at, 0.5)
        self.assertIsInstance(term.cause, leasesvc.LeaseLostError)
        self.assertFalse(e.leading.is_set())
        self.assertIsNone(e.token())
        # It campaigns again, and sends no release for the lost holding.
        deadline = time.monotonic() + 5
        while len(self.fake.calls(":acquire")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreaterEqual(len(self.fake.calls(":acquire")), 2)
        self.assertEqual(self.fake.calls(":release"), [])

    def check_deadline(self, renew: Callable[[Request], Any]) -> None:
        before = time.monotonic()  # no later than the acquire's send
        e = self.start(Script(renew=renew), ttl=2.0)
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        term = self.rec.terms[0]
        self.assertTrue(term.wait(3), "the term outlived the safe deadline")
        ended = term.ended_at
        assert ended is not None
        acquired = self.fake.calls(":acquire")[0].at
        self.assertIsInstance(term.cause, leasesvc.SafeDeadlineError)
        self.assertLess(ended - before, 2.0 * (1 - 0.1), "ended after TTL × (1 − drift margin)")
        # ... and not long before it: the lead lasted until the deadline less cancel_before.
        self.assertGreater(ended - acquired, 1.8 - 0.2 - 0.1)

    def test_hanging_service_ends_the_term_before_the_safe_deadline(self) -> None:
        self.check_deadline(hang(3))

    def test_failing_service_ends_the_term_before_the_safe_deadline(self) -> None:
        self.check_deadline(lambda req: problem(503, "unavailable"))

    def test_renews_every_third_of_the_ttl(self) -> None:
        e = self.start(Script(), ttl=1.5)
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        time.sleep(2.3)
        acq = self.fake.calls(":acquire")[0].at
        times = [acq] + [r.at for r in self.fake.calls(":renew")]
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertGreaterEqual(len(gaps), 3, gaps)
        for g in gaps:
            self.assertGreaterEqual(g, 0.5 * 0.9 - 0.02, gaps)  # jitter: up to 10% early
            self.assertLess(g, 0.5 + 0.25, gaps)
        self.assertTrue(e.is_leader())

    def test_stop_releases_and_reports(self) -> None:
        renewed: List[float] = []
        e = self.start(Script(), on_renewed=lambda lease, sent: renewed.append(sent))
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        time.sleep(0.9)
        e.stop(10)
        self.assertIsInstance(self.rec.terms[0].cause, leasesvc.StoppedError)
        rel = self.fake.calls(":release")
        self.assertEqual(len(rel), 1)
        self.assertEqual(rel[0].body, {"holder": "me", "fencingToken": 5})
        self.assertEqual(self.rec.stopped, 1)
        self.assertGreaterEqual(len(renewed), 1)
        self.assertIsNone(e.error)

    def test_with_starts_and_stops(self) -> None:
        e = self.start(Script())
        with e as got:
            self.assertIs(got, e)
            self.assertTrue(self.rec.started.wait(5))
            self.assertTrue(e.is_leader())
        self.assertFalse(e.is_leader())
        self.assertIsInstance(self.rec.terms[0].cause, leasesvc.StoppedError)
        self.assertEqual(len(self.fake.calls(":release")), 1)
        self.assertEqual(self.rec.stopped, 1)
        thread = e._thread
        assert thread is not None
        self.assertFalse(thread.is_alive())

    def test_with_stops_on_an_exception(self) -> None:
        e = self.start(Script())
        with self.assertRaises(KeyError):
            with e:
                self.assertTrue(self.rec.started.wait(5))
                raise KeyError("x")
        self.assertIsInstance(self.rec.terms[0].cause, leasesvc.StoppedError)
        self.assertEqual(len(self.fake.calls(":release")), 1)

    def test_returning_resigns(self) -> None:
        f = FakeService(Script())
        self.addCleanup(f.close)
        e = leasesvc.Elector.for_client(leasesvc.Client(f.url), "a", holder="me", ttl=1.0,
                                        on_started_leading=lambda term: None)
        t = threading.Thread(target=e.run)
        t.start()
        t.join(5)
        self.assertFalse(t.is_alive(), "run did not return after a resignation")
        self.assertEqual(len(f.calls(":release")), 1)

    def test_held_then_waits_on_the_service(self) -> None:
        n = [0]

        def acquire(req: Request) -> Any:
            n[0] += 1
            if n[0] == 1:
                return problem(409, "lease_held", lease=lease_json(holder="other", token=4))
            return (200, {}, lease_json(token=5))

        leaders: List[str] = []
        e = self.start(Script(acquire=acquire), on_new_leader=leaders.append)
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        acq = self.fake.calls(":acquire")
        self.assertNotIn("waitMs", acq[0].body)
        self.assertEqual(acq[1].body.get("waitMs"), 30000)
        self.assertEqual(leaders, ["other", "me"])
        self.assertEqual(e.leader(), ("me", 5))

    def test_429_on_acquire_waits_retry_after(self) -> None:
        n = [0]

        def acquire(req: Request) -> Any:
            n[0] += 1
            if n[0] == 1:
                return problem(429, "resource_exhausted", retry_after=1)
            return (200, {}, lease_json(token=5))

        e = self.start(Script(acquire=acquire))
        e.start()
        self.assertTrue(self.rec.started.wait(5))
        acq = self.fake.calls(":acquire")
        self.assertGreaterEqual(acq[1].at - acq[0].at, 0.95)

    def test_refusal_for_good_ends_run(self) -> None:
        e = self.start(Script(acquire=lambda req: problem(403, "permission_denied")))
        with self.assertRaises(leasesvc.PermissionDeniedError):
            e.run()
        t = e.start()
        t.join(5)
        self.assertIsInstance(e.error, leasesvc.PermissionDeniedError)

    def test_stop_while_waiting_on_the_service(self) -> None:
        def acquire(req: Request) -> Any:
            if req.body.get("waitMs"):
                time.sleep(3)
            return problem(409, "lease_held", lease=lease_json(holder="other", token=4))

        e = self.start(Script(acquire=acquire))
        t = e.start()
        time.sleep(0.3)
        begun = time.monotonic()
        e.stop(5)
        self.assertFalse(t.is_alive())
        self.assertLess(time.monotonic() - begun, 1.5, "stop waited for the acquire's wait to run out")

    def test_stop_from_the_callback(self) -> None:
        f = FakeService(Script())
        self.addCleanup(f.close)
        holder: List[leasesvc.Elector] = []

        def lead(term: leasesvc.Term) -> None:
            holder[0].stop()  # must not wait for run, which waits for this callback
            term.wait()

        e = leasesvc.Elector.for_client(leasesvc.Client(f.url), "a", holder="me", ttl=1.0, on_started_leading=lead)
        holder.append(e)
        t = e.start()
        t.join(5)
        self.assertFalse(t.is_alive(), "stop from the callback deadlocked")
        self.assertEqual(len(f.calls(":release")), 1)

    def test_config_is_checked(self) -> None:
        c = leasesvc.Client("http://127.0.0.1:1")
        for kw in ({"name": "-bad"}, {"holder": ""}, {"drift_margin": 0.9}, {"renew_jitter": 0.7},
                   {"ttl": 1.0, "renew_interval": 0.9}, {"wait": 61.0}, {"cancel_before": -1.0}):
            args = {"name": "a", **kw}
            name = args.pop("name")
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                leasesvc.Elector.for_client(c, name, **args)  # type: ignore[arg-type]
        e = leasesvc.Elector.for_client(c, "a", ttl=3.0)
        self.assertAlmostEqual(e.keeper.renew_interval, 1.0)
        self.assertIsNone(e.cancel_before, "not given, and the keeper's span is not known before its first hold")
        e = leasesvc.Elector.for_client(c, "a", plain_renewals=True)
        self.assertAlmostEqual(e.cancel_before, 0.25, msg="min(250 ms, TTL/10) for the default TTL of 30 s")
        self.assertEqual(leasesvc.default_cancel_before(1.0), 0.1)


class ElectorApiTest(unittest.TestCase):
    """Issue 46: the Elector is built on a Keeper and takes at most ten
    parameters; the 0.2 form still works, with a DeprecationWarning."""

    def setUp(self) -> None:
        self.c = leasesvc.Client("http://127.0.0.1:1")

    def test_at_most_ten_parameters_none_the_keepers(self) -> None:
        params = [p for p in inspect.signature(leasesvc.Elector.__init__).parameters if p != "self"]
        self.assertLessEqual(len(params), 10, params)
        self.assertEqual(params[0], "keeper")
        for p in ("ttl", "renew_interval", "renew_jitter", "drift_margin", "retry_backoff", "release_timeout",
                  "clock", "session", "plain_renewals", "mode"):
            self.assertNotIn(p, params)

    def test_built_on_a_keeper(self) -> None:
        k = leasesvc.Keeper(self.c, plain_renewals=True, ttl=3.0)
        cbs = leasesvc.Callbacks(on_started_leading=lambda t: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            e = leasesvc.Elector(k, "a", holder="me", callbacks=cbs)
        self.assertIs(e.keeper, k)
        self.assertIs(e.callbacks, cbs)
        with self.assertRaises(TypeError) as cm:
            leasesvc.Elector(k, "a", ttl=3.0)  # type: ignore[call-arg]
        self.assertIn("Keeper", str(cm.exception))
        with self.assertRaises(TypeError):
            leasesvc.Elector(k, "a", on_started_leading=lambda t: None)  # type: ignore[call-arg]
        with self.assertRaises(TypeError):
            leasesvc.Elector("not a keeper", "a")  # type: ignore[arg-type]

    def test_the_old_form_warns_and_builds_the_keeper(self) -> None:
        lead = lambda t: None  # noqa: E731
        with self.assertWarns(DeprecationWarning):
            e = leasesvc.Elector(self.c, "a", holder="me", ttl=3.0, renew_interval=0.5,  # type: ignore[arg-type]
                                 plain_renewals=True, on_started_leading=lead)
        self.assertEqual((e.keeper.ttl, e.keeper.renew_interval, e.callbacks.on_started_leading), (3.0, 0.5, lead))
        self.assertIs(e.keeper.client, self.c)
        k = leasesvc.Keeper(self.c)
        with self.assertWarns(DeprecationWarning):
            e = leasesvc.Elector(self.c, "a", keeper=k)  # type: ignore[arg-type,call-arg]
        self.assertIs(e.keeper, k)
        with self.assertWarns(DeprecationWarning), self.assertRaises(ValueError):
            leasesvc.Elector(self.c, "a", keeper=k, ttl=3.0)  # type: ignore[arg-type,call-arg]
        with self.assertRaises(TypeError):
            leasesvc.Elector.for_client(self.c, "a", ttl_ms=3)
        with self.assertRaises(TypeError):
            leasesvc.Elector.for_client(self.c, "a", on_started_leading=lead,
                                        callbacks=leasesvc.Callbacks(on_started_leading=lead))

    def test_a_cancel_before_that_does_not_fit_is_refused_never_capped(self) -> None:
        """Rule L3: refused when it is not below span × (1 − D) − span/2,
        naming the limit and the TTL; the constructor refuses it when the
        keeper's span is known (plain renewals asked for)."""
        k = leasesvc.Keeper(self.c, plain_renewals=True, ttl=3.0)
        with self.assertRaises(leasesvc.InvalidOptionError) as cm:
            leasesvc.Elector(k, "a", cancel_before=1.25)  # the limit: 2.7 − 1.5 = 1.2 s
        err = cm.exception
        self.assertIsInstance(err, ValueError)
        self.assertIsInstance(err, leasesvc.InvalidArgumentError)
        self.assertEqual(err.code, "invalid_argument")
        for part in ("cancel_before 1.25", "below 1.2", "TTL of 3"):
            self.assertIn(part, str(err))
        e = leasesvc.Elector(k, "a", cancel_before=1.19)
        self.assertEqual(e.cancel_before, 1.19, "a cancel_before that fits is used as given")
        with self.assertRaises(leasesvc.InvalidOptionError):
            leasesvc.Keeper(self.c, plain_renewals=True, ttl=3.0, cancel_before=2.0)


if __name__ == "__main__":
    unittest.main()
