"""The identity collector of a git ref against this tree's, on the same churning pods, in the same run:
``python -m bench.identity_ab [--ref main] [--pods 50] [--ticks 40] [--warmup 10]``.

The product's sampler ticks the reference host with N pods churning (bench/pods.py: real processes in real cgroup
v2 cgroups, containerd's bundles, a real gRPC kubelet; needs root). After each tick the two collectors, each with
its own state and both reading the sampler's newest sample as the previous tick, are called in this thread in
alternating order and timed with ``time.thread_time``; both see every churn. Prints each one's median and the
ratio this/ref. Called outside the sampler's worker threads, so the figures are not the in-tick ones
``python -m bench.ticks --pods 50`` reports; the ratio is the point.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import Spread

SOURCE = "agent/headroom/sources/identity"  # a package since issue 31's split; identity.py in refs before it


def _takes_previous_tick(cls: type) -> bool:
    """Whether a ref's collector reads ``SourceContext.previous`` as a samples.PreviousTick (issue 31) rather than
    as the newest Sample."""
    import inspect

    return "previous_tick()" in inspect.getsource(inspect.getmodule(cls))  # type: ignore[arg-type]


def load_ref(ref: str, into: Path) -> type:
    """The IdentityCollector class of ``ref``'s identity collector, as a module (or package) of its own, not
    registered: ``ref``'s sources/identity/ package (its modules' imports of one another renamed), or its
    sources/identity.py in a ref from before the split."""
    root = Path(__file__).resolve().parent.parent

    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)

    listing = git("ls-tree", "--name-only", f"{ref}:{SOURCE}")
    if listing.returncode == 0:
        package = into / "identity_ref"
        package.mkdir()
        for name in listing.stdout.split():
            if name.endswith(".py"):
                text = git("show", f"{ref}:{SOURCE}/{name}").stdout
                text = text.replace("headroom.sources.identity.", "identity_ref.").replace("\n@register\n", "\n")
                (package / name).write_text(text)
        spec = importlib.util.spec_from_file_location("identity_ref", package / "__init__.py",
                                                      submodule_search_locations=[str(package)])
    else:
        shown = git("show", f"{ref}:{SOURCE}.py")
        if shown.returncode != 0:
            raise SystemExit(f"{ref} has neither {SOURCE}/ nor {SOURCE}.py: {shown.stderr.strip()}")
        path = into / "identity_ref.py"
        path.write_text(shown.stdout.replace("\n@register\n", "\n"))
        spec = importlib.util.spec_from_file_location("identity_ref", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["identity_ref"] = module
    spec.loader.exec_module(module)
    return module.IdentityCollector


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref", default="main")
    p.add_argument("--pods", type=int, default=50)
    p.add_argument("--ticks", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()

    from bench import host, run, ticks
    from bench.pods import PodChurn
    from headroom import logs
    from headroom.config import check_config_text
    from headroom.daemon import LatestSample
    from headroom.simulation import load_scenario
    from headroom.sources.identity import IdentityCollector

    logs.configure("warn", "console")
    gpus, processes, workloads = run.REFERENCE
    workdir = Path(tempfile.mkdtemp(prefix="headroom-identity-ab-"))
    farm = host.ProcessFarm()
    collectors: dict[str, object] = {}
    try:
        classes = {args.ref: load_ref(args.ref, workdir), "this tree": IdentityCollector}
        farm.ensure_workloads(max(run.WORKLOAD_SCALES))
        inputs = run.Inputs(farm, workdir)
        path = inputs.config(workloads)
        config = check_config_text(path.read_text(), str(path))
        churn = PodChurn(args.pods, load_scenario(inputs.scenario(gpus)).gpus, workdir / "pods")
        farm.resize_host(processes)
        sampler = ticks._Ticking(config, inputs.scenario(gpus), churn)
        # the previous tick as each tree hands it to its collectors: this one's PreviousTick (daemon.LatestSample); a
        # ref from before it (issue 31), the newest Sample itself
        latest = LatestSample(sampler.sampler)
        newest = lambda: sampler.sampler.snapshot.sample if sampler.sampler.snapshot else None  # noqa: E731
        for name, cls in classes.items():
            previous = latest if cls is IdentityCollector or _takes_previous_tick(cls) else newest
            c = collectors[name] = cls(dataclasses.replace(sampler.identity.ctx, previous=previous))
            c.poller.close()  # type: ignore[attr-defined]
            c.poller = sampler.identity.poller  # type: ignore[attr-defined]  # one kubelet, asked between ticks
        cpu: dict[str, list[float]] = {name: [] for name in classes}
        try:
            for i in range(args.warmup + args.ticks):
                sampler.tick(i, args.warmup, 0.05)
                for name in list(classes)[:: 1 if i % 2 else -1]:
                    t = time.thread_time()
                    collectors[name].collect()  # type: ignore[attr-defined]
                    if i >= args.warmup:
                        cpu[name].append(time.thread_time() - t)
        finally:
            sampler.close()
            churn.close()
    finally:
        farm.close()
        shutil.rmtree(workdir, ignore_errors=True)
    ref, this = (Spread.of(v).scaled(1e3) for v in cpu.values())
    print(f"identity collect() with {args.pods} pods churning, {args.ticks} ticks after {args.warmup}, thread CPU "
          f"median ms: {args.ref} {ref.median:.3f} (min {ref.low:.3f}), this tree {this.median:.3f} "
          f"(min {this.low:.3f}); this/{args.ref} {this.median / ref.median:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
