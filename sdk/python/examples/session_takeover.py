"""How long a crashed agent's lease stays taken: an agent process holds a lease
(through a session of each window, then with a plain TTL), is killed with
SIGKILL, and a waiting acquire measures the takeover (docs/contract.md §14).

    python3 examples/session_takeover.py --url http://127.0.0.1:8080

prints one line per window: the seconds from the kill to the takeover.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import leasesvc  # noqa: E402

AGENT = """
import sys, time, leasesvc
c = leasesvc.Client(sys.argv[1])
window, ttl = float(sys.argv[3]), float(sys.argv[4])
if window > 0:
    lease = c.open_session(window=window).acquire(sys.argv[2], "crashing")
else:
    lease = c.acquire(sys.argv[2], "crashing", ttl)
print(lease.fencing_token, flush=True)
time.sleep(3600)
"""


def takeover(url: str, name: str, window: float, ttl: float) -> float:
    """Seconds from the agent's SIGKILL to another holder's acquire."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    p = subprocess.Popen([sys.executable, "-c", AGENT, url, name, str(window), str(ttl)], env=env,
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None
        p.stdout.readline()
        p.kill()
        t0 = time.monotonic()
        leasesvc.Client(url).acquire(name, "survivor", 30, wait=min(60.0, ttl + 15))
        return time.monotonic() - t0
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ttl", type=float, default=30.0, help="the plain holding's TTL, seconds")
    args = ap.parse_args()
    for window in (0.2, 0.4, 1.0, 0.0):
        took: List[float] = []
        for i in range(args.runs if window else 1):
            took.append(takeover(args.url, f"takeover.{os.getpid()}.{window}.{i}", window, args.ttl))
        what = f"session window {window:g} s" if window else f"plain TTL {args.ttl:g} s"
        print(f"{what}: takeover after the kill {', '.join(f'{t:.2f} s' for t in took)}")


if __name__ == "__main__":
    main()
