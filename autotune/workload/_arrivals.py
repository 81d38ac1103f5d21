"""Open-loop arrival times: the one implementation of Poisson and bursty (gamma) arrivals.

Used by the synthetic workloads (timestamps written into the file) and by the replayer's
``--rate`` modes (offsets planned at replay time), so that both draw the same process.
Gaps are gamma-distributed with shape ``burstiness`` and mean ``1 / rate``, as
``vllm bench serve --burstiness``: shape 1 is a Poisson process (exponential gaps), < 1 burstier,
> 1 more regular. The first arrival is at 0.
"""

from __future__ import annotations

import numpy as np

__all__ = ["arrival_offsets"]


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` arrival times in seconds, non-decreasing, the first at 0; the same for the same seed.

    ``rate`` (arrivals per second) and ``burstiness`` must be > 0: callers check them and name
    their own option in the error.
    """
    if n < 0 or rate <= 0 or burstiness <= 0:
        raise ValueError(
            f"arrival_offsets: need n >= 0, rate > 0, burstiness > 0; got {n}, {rate}, {burstiness}"
        )
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    offsets = np.cumsum(gaps)
    return offsets - offsets[0] if n else offsets
