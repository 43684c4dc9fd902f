"""Endpoint latency profiles for the bench receiver (bench/receiver.py picks one per URL path).

- **instant**: answer at once (the receiver's ceiling, and what the other benches use).
- **realistic**: log-normal latency with a given median and 99th percentile (default 150 ms and
  2 s), plus a share of requests (default 1 %) that hang for `hang_seconds`, longer than the job's
  `timeout_seconds`, so Chime gives up on them at its timeout. The draw is keyed: the latency of a
  request is a function of (seed, the key in its URL), so two runs of a bench, against any tree of
  Chime and in any arrival order, give each job the same latency.
- **hold**: every request is held a fixed number of seconds (a slow tenant's endpoint).

URL paths: `/realistic/<key>`, `/hold/<seconds>/<anything>`; every other path is instant.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class Realistic:
    seed: int = 1
    median: float = 0.150
    p99: float = 2.0
    hang_share: float = 0.01
    hang_seconds: float = 12.0  # longer than the bench jobs' 10 s timeout: Chime times out first

    @property
    def sigma(self) -> float:
        """Log-normal spread that puts the 99th percentile at `p99` (ln p99 = ln median + z99 sigma)."""
        return (math.log(self.p99) - math.log(self.median)) / Z99

    def latency(self, key: str) -> float:
        """Seconds to wait before answering the request with this key (deterministic)."""
        rng = random.Random(f"{self.seed}:{key}")  # str seeds go through SHA-512: the same in every process
        if rng.random() < self.hang_share:
            return self.hang_seconds
        return min(rng.lognormvariate(math.log(self.median), self.sigma), self.hang_seconds)

    def describe(self) -> str:
        return (
            f"log-normal median {self.median * 1000:g} ms, p99 {self.p99:g} s (sigma {self.sigma:.3f}), "
            f"{self.hang_share:.0%} hanging {self.hang_seconds:g} s, seed {self.seed}"
        )


def hold_seconds(path: str) -> float | None:
    """`/hold/25/...` -> 25.0; None for any other path."""
    parts = path.strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "hold":
        try:
            return float(parts[1])
        except ValueError:
            return None
    return None


def delay_for(path: str, profile: Realistic) -> float:
    """How long the receiver waits before answering a request for `path`."""
    parts = path.strip("/").split("/")
    if parts and parts[0] == "realistic":
        return profile.latency(parts[-1] if len(parts) > 1 else "")
    return hold_seconds(path) or 0.0
