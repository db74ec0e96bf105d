"""What handing the collectors to their worker thread costs per tick: the sampler's dispatch alone.

    python -m bench.dispatch

Ten collectors whose ``collect()`` returns at once are run by the product's ``Sampler`` (one lane: one worker
thread woken once per tick, results handed back under its condition variable) and, in the same run, called
directly in a loop. Process CPU (every thread) per tick, median of 7 rounds of 2000 ticks each, side by side:
the difference is what the dispatch costs, apart from any collector's own work.
"""

from __future__ import annotations

import statistics
import time

from headroom.sampler import Sampler
from headroom.sources import Collector, SourceContext


class _Instant(Collector):
    def collect(self) -> None:
        return None


def measure(collectors: int = 10, ticks: int = 2000, rounds: int = 7) -> tuple[float, float]:
    """(dispatch through the sampler, direct calls): median process CPU seconds per tick."""
    instances = []
    for i in range(collectors):
        c = _Instant(SourceContext())
        c.name = f"instant{i}"
        instances.append(c)
    sampler = Sampler(instances, interval=1.0)
    via, direct = [], []
    try:
        for _ in range(rounds):
            t = time.process_time()
            for _ in range(ticks):
                sampler._collect(time.monotonic())
            via.append((time.process_time() - t) / ticks)
            t = time.process_time()
            for _ in range(ticks):
                for c in instances:
                    c.collect()
            direct.append((time.process_time() - t) / ticks)
    finally:
        sampler.stop()
    return statistics.median(via), statistics.median(direct)


def main() -> int:
    via, direct = measure()
    print(f"10 collectors: {via * 1e6:.1f} us process CPU per tick through the sampler's lane, "
          f"{direct * 1e6:.1f} us called directly (median of 7 rounds of 2000 ticks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
