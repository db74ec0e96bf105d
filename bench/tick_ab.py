"""The reference tick of a git ref against this tree's, on the same machine in the same run:
``python -m bench.tick_ab [--ref REF] [--rounds 3] [--warmup 120] [--ticks 30]``.

``python -m bench.ticks`` (the reference tick: 8 GPUs, 1000 host processes, 3 workloads) runs in a child process
for this tree and for ``REF`` (its ``agent/`` and ``bench/`` from ``git archive``, first on ``PYTHONPATH``),
alternately, ``--rounds`` times each. Prints each round's medians (tick CPU, analysis, render) and the ratios of
the medians over the rounds, this tree / REF. Machines here differ from day to day (docs/benchmarks.md): a figure
from another day is no baseline, a ratio from the same run is.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FIGURES = {
    "tick": re.compile(r"CPU per tick: ([0-9.]+) ms median"),
    "analysis": re.compile(r"analysis ([0-9.]+) ms"),
    "render": re.compile(r"render ([0-9.]+) ms"),
}


def _run(cwd: Path, pythonpath: str | None, warmup: int, ticks: int) -> dict[str, float]:
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-m", "bench.ticks", "--warmup", str(warmup), "--ticks", str(ticks)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"bench.ticks failed in {cwd}: {out.stderr.strip().splitlines()[-1:]}")
    found = {}
    for name, pattern in _FIGURES.items():
        m = pattern.search(out.stdout)
        if m is None:
            raise SystemExit(f"bench.ticks printed no {name} figure in {cwd}")
        found[name] = float(m.group(1))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", default="main")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=120)
    p.add_argument("--ticks", type=int, default=30)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="headroom-tick-ab-") as tmp:
        ref = Path(tmp)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "agent", "bench"], check=True,
                                 capture_output=True).stdout
        archive_path = ref / "ref.tar"
        archive_path.write_bytes(archive)
        with tarfile.open(archive_path) as tar:
            tar.extractall(ref, filter="data")
        rows: dict[str, list[dict[str, float]]] = {"this": [], "ref": []}
        for i in range(args.rounds):
            for side in ("this", "ref") if i % 2 == 0 else ("ref", "this"):
                if side == "this":
                    got = _run(ROOT, None, args.warmup, args.ticks)
                else:
                    got = _run(ref, f"{ref / 'agent'}:{ref}", args.warmup, args.ticks)
                rows[side].append(got)
                print(f"round {i + 1} {side:4}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in got.items()), flush=True)
    print(f"medians over {args.rounds} rounds, this tree / {args.ref}:")
    for name in _FIGURES:
        a = statistics.median(r[name] for r in rows["this"])
        b = statistics.median(r[name] for r in rows["ref"])
        print(f"  {name}: {a:.2f} / {b:.2f} ms = {a / b:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
