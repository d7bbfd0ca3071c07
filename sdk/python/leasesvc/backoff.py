"""Capped exponential backoff with jitter, as the Go SDK's ``client.Backoff``."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """The n-th retry (n = 0, 1, ...) waits a random time in [d/2, d] seconds,
    d = min(max, initial × multiplier^n), so retries of many clients spread
    out instead of arriving together."""

    #: Base delay before the first retry, seconds.
    initial: float = 0.1
    #: Cap of the delay, seconds.
    max: float = 2.0
    #: Growth per retry, ≥ 1.
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.initial <= 0:
            raise ValueError(f"Backoff.initial {self.initial} must be positive")
        if self.max < self.initial:
            raise ValueError(f"Backoff.max {self.max} must be at least initial {self.initial}")
        if self.multiplier < 1:
            raise ValueError(f"Backoff.multiplier {self.multiplier} must be at least 1")

    def delay(self, n: int) -> float:
        """The jittered delay in seconds before retry ``n`` (0 for the first)."""
        d = self.initial
        i = 0
        while i < n and d < self.max:
            d *= self.multiplier
            i += 1
        d = min(d, self.max)
        return d / 2 + random.random() * d / 2


#: The Client's default: 100 ms … 2 s.
DEFAULT_BACKOFF = Backoff()
