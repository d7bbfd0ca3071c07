"""The Python agent of the safety runs (emulator-tests, safety_sdk_test.go).

Run as ``python3 emulator-tests/safety_agent.py`` with ``PYTHONPATH=sdk/python``
and LEASESVC_URL, LEASE_NAME, LEASE_HOLDER, LEASE_TTL_MS, LEASE_PRIORITY (the
Elector's priority, docs/contract.md §8) in the environment,
as the conformance agents are (sdk/conformance/PROTOCOL.md). It runs the
SDK's Elector on LEASE_NAME with its defaults (through the Client's shared
session, docs/contract.md §14), and resigns each term after 0.2–1.5 s so
that the lease changes hands; then it campaigns again. It writes one JSON
line per step: ``{"step":"leading","token":N,"mono":"NS"}`` when a term
begins and ``{"step":"stopped","token":N,"mono":"NS"}`` when the agent stops
leading (NS: CLOCK_MONOTONIC nanoseconds, the clock time.monotonic reads on
Linux, as a string). A ``stop`` line or EOF on stdin ends it (the Elector releases).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

import leasesvc

_out = threading.Lock()


def emit(**kw: object) -> None:
    """Write one step line and flush it."""
    with _out:
        sys.stdout.write(json.dumps(kw, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def mono() -> str:
    """CLOCK_MONOTONIC in nanoseconds, as a JSON string (no float rounding)."""
    return str(time.clock_gettime_ns(time.CLOCK_MONOTONIC))


def main() -> None:
    client = leasesvc.Client(os.environ["LEASESVC_URL"])
    name, holder = os.environ["LEASE_NAME"], os.environ["LEASE_HOLDER"]
    ttl = int(os.environ.get("LEASE_TTL_MS", "3000")) / 1000
    priority = int(os.environ.get("LEASE_PRIORITY", "0"))
    stopping = threading.Event()

    def on_term(term: leasesvc.Term) -> None:
        emit(step="leading", token=term.token, mono=mono())
        term.wait(random.uniform(0.2, 1.5))  # resigns by returning, unless the term ended first
        emit(step="stopped", token=term.token, mono=mono())

    def campaign() -> None:
        while not stopping.is_set():
            e = leasesvc.Elector(client, name, holder=holder, ttl=ttl, priority=priority, on_started_leading=on_term)
            t = e.start()  # run returns when a term resigns
            while t.is_alive() and not stopping.wait(0.05):
                pass
            if stopping.is_set():
                e.stop(timeout=15)
                return
            if e.error is not None:
                print(f"elector: {e.error}", file=sys.stderr)
                stopping.wait(0.5)

    t = threading.Thread(target=campaign, daemon=True)
    t.start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stopping.set()
    t.join(30)


if __name__ == "__main__":
    main()
