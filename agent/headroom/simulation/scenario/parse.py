"""Scenario files: finding, loading and strictly parsing them into a ``Scenario``.

A scenario (YAML, documented in docs/scenario-format.md) declares GPUs, how their readings move over
time, processes, MIG instances, XIDs, injected NVML faults, workloads and a synthetic host. Loading is
strict: an unknown key, a wrong type or a bad unit fails with
``ScenarioError("FILE:LINE:COLUMN: field.path: message")``. The readers of single nodes (mappings, numbers
in units, signals) are nodes.py's ``NodeReader``, which this module's parser extends section by section; the
``host:`` section is parsed by ``simulation.host_spec.parse_host`` with that parser.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

from headroom.safeio import clip, read_config_bytes
from headroom.schema import ConfigError, compose_text
from headroom.simulation.host_spec import parse_host
from headroom.simulation.scenario.nodes import NodeReader
from headroom.simulation.scenario.runtime import Scenario
from headroom.simulation.signals import Signal, constant
from headroom.simulation.spec import (
    CLOCK_EVENT_REASONS,
    GPU_SIGNALS,
    SERVING_DEFAULTS,
    SERVING_SIGNALS,
    UNSUPPORTABLE_QUERIES,
    AttachSpec,
    FaultSpec,
    GpuSpec,
    MigInstanceSpec,
    ProcessSpec,
    ScenarioError,
    ServingSpec,
    StandInGpu,
    StandInSpec,
    WorkloadSpec,
    XidSpec,
)

if TYPE_CHECKING:
    from headroom.jsontypes import YamlValue

_SCENARIO_DIR = "scenarios"
_T = TypeVar("_T")  # what the reader of an optional key returns (GpuSpec's opt)


# -------------------------------------------------------------------------------------------- loading
def list_scenarios() -> list[str]:
    """Names of the built-in scenarios, sorted."""
    folder = resources.files("headroom.simulation") / _SCENARIO_DIR
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name, or a scenario file (anything with a slash or a .yaml suffix).

    Raises ScenarioError for an unknown name, an unreadable file or invalid content.
    """
    text_name = str(name_or_path)
    if "/" in text_name or text_name.endswith((".yaml", ".yml")) or isinstance(name_or_path, Path):
        path = Path(name_or_path)
        try:  # as config.yaml is read: a regular file of at most 1 MiB (a FIFO would block), UTF-8 checked in parsing
            raw = read_config_bytes(path)
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read scenario file: {exc.strerror or exc}") from None
        return parse_scenario(raw, filename=str(path), name=path.stem)
    text_name = builtin_name(text_name) or text_name
    resource = resources.files("headroom.simulation") / _SCENARIO_DIR / f"{text_name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", text_name) or not resource.is_file():  # no name is longer
        known = list_scenarios()
        close = difflib.get_close_matches(_fold(text_name), [_fold(k) for k in known], n=3, cutoff=0.6)
        by_fold = {_fold(k): k for k in known}
        hint = f"did you mean {' or '.join(by_fold[c] for c in close)}? " if close else ""  # the closest first
        raise ScenarioError(f"unknown scenario {clip(text_name, 60)!r} ({hint}built-in: {', '.join(known) or 'none'}; "
                            "or give a path to a .yaml file)")
    return parse_scenario(resource.read_text(encoding="utf-8"), filename=str(resource), name=text_name)


def _fold(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def builtin_name(name: str) -> str | None:
    """The built-in scenario ``name`` means, '-' and '_' alike and case ignored (bottleneck-gpu-power is
    bottleneck-gpu_power), or None."""
    folded = _fold(name)
    return next((k for k in list_scenarios() if _fold(k) == folded), None)


def parse_scenario(text: str | bytes, filename: str = "<scenario>", name: str = "scenario") -> Scenario:
    """Parse scenario YAML text into a Scenario. Raises ScenarioError with file, line, column and path."""
    try:  # syntax errors, recursive aliases and alias bombs worded and placed as config.yaml's are
        root = compose_text(text, filename)
    except ConfigError as exc:
        raise ScenarioError(str(exc.issues[0]).replace(": (document): ", ": ", 1)) from None
    return _Parser(filename).scenario(root, name)


_TOP_KEYS = {
    "description", "seed", "driver_version", "nvml_version", "cuda_driver_version", "gpus", "faults",
    "missing_functions", "workloads", "host", "profiles", "expected", "fits", "attach",
}  # fmt: skip
_GPU_KEYS = {
    "name", "uuid", "pci_bus_id", "memory_total", "memory_reserved", "power_limit", "power_limit_max", "sm_clock_max",
    "memory_clock_max", "pcie", "clock_events", "supported_clock_events", "processes", "mig", "xids",
    "ecc", "remapped_rows", "reset_at", "unsupported", "nvlink", *GPU_SIGNALS,
}  # fmt: skip
_STANDIN_KEYS = ("cmdline", "cpu", "rss", "gpus", "children", "read", "write", "network", "threads", "cgroup",
                 "cpu_quota")


class _Parser(NodeReader):
    """Walks a composed YAML node tree into a Scenario, section by section (the node readers: NodeReader)."""

    # -- document
    def scenario(self, root: yaml.Node | None, name: str) -> Scenario:
        if root is None:
            raise ScenarioError(f"{self.filename}: scenario: the file is empty")
        top = self.mapping(root, "", _TOP_KEYS, ("gpus",))
        self.seed = self.integer(top["seed"], "seed") if "seed" in top else 0
        gpus = tuple(self.gpu(n, i) for i, n in enumerate(self.sequence(top["gpus"], "gpus")))
        uuids = [g.uuid for g in gpus] + [m.uuid for g in gpus for m in g.mig_instances]
        if len(set(uuids)) != len(uuids):
            raise self.error(top["gpus"], "gpus", "uuids must be unique")
        missing = frozenset()
        if "missing_functions" in top:
            items = self.sequence(top["missing_functions"], "missing_functions")
            missing = frozenset(self.string(n, f"missing_functions[{i}]") for i, n in enumerate(items))
        faults = ()
        if "faults" in top:
            faults = tuple(self.fault(n, f"faults[{i}]", len(gpus)) for i, n in enumerate(self.sequence(top["faults"], "faults")))
        return Scenario(
            name=name,
            source=self.filename,
            description=self.string(top["description"], "description") if "description" in top else "",
            seed=self.seed,
            driver_version=self.string(top["driver_version"], "driver_version") if "driver_version" in top else "550.54.15",
            nvml_version=self.string(top["nvml_version"], "nvml_version") if "nvml_version" in top else "12.550.54.15",
            cuda_driver_version=self.integer(top["cuda_driver_version"], "cuda_driver_version") if "cuda_driver_version" in top else 12040,
            gpus=gpus,
            faults=faults,
            missing_functions=missing,
            workloads=self.workloads(top["workloads"], len(gpus)) if "workloads" in top else (),
            host=parse_host(self, top["host"]) if "host" in top else None,
            profiles=self.plain(top["profiles"], "profiles") if "profiles" in top else None,
            profiles_node=top.get("profiles"),
            expected=self.expected(top["expected"], self.plain(top["profiles"], "profiles") if "profiles" in top else None)
            if "expected" in top else {},
            fits=self.fits(top["fits"], self.plain(top["profiles"], "profiles") if "profiles" in top else None)
            if "fits" in top else {},
            attach=self.attach(top["attach"], len(gpus)) if "attach" in top else (),
        )

    def attach(self, node: yaml.Node, gpu_count: int) -> tuple[AttachSpec, ...]:
        """``attach:``: a list of {pid_file or cmdline, gpu, memory, utilization}."""
        out = []
        for i, item in enumerate(self.sequence(node, "attach")):
            path = f"attach[{i}]"
            keys = self.mapping(item, path, {"pid_file", "cmdline", "gpu", "memory", "utilization"}, ("gpu", "memory"))
            if ("pid_file" in keys) == ("cmdline" in keys):
                raise self.error(item, path, "give exactly one of pid_file (a glob) or cmdline (an RE2 pattern)")
            gpu = self.integer(keys["gpu"], f"{path}.gpu", minimum=0)
            if gpu >= gpu_count:
                raise self.error(keys["gpu"], f"{path}.gpu", f"no such GPU (the scenario has {gpu_count})")
            cmdline = self.string(keys["cmdline"], f"{path}.cmdline") if "cmdline" in keys else ""
            if cmdline:
                from headroom.workload.profiles import compile_cmdline_pattern

                try:
                    compile_cmdline_pattern(cmdline)
                except ValueError as exc:  # the pattern compiler says why
                    raise self.error(keys["cmdline"], f"{path}.cmdline", f"invalid pattern: {clip(str(exc), 120)}") from None
            use = StandInGpu(gpu, self.signal(keys["memory"], f"{path}.memory", "size"),
                             self.signal(keys["utilization"], f"{path}.utilization", "ratio")
                             if "utilization" in keys else None)
            out.append(AttachSpec(use, self.string(keys["pid_file"], f"{path}.pid_file") if "pid_file" in keys else "",
                                  cmdline))
        return tuple(out)

    def expected(self, node: yaml.Node, profiles: YamlValue) -> dict[str, str]:
        """``expected:``: profile name -> the primary bottleneck the scenario demonstrates (a resource or none)."""
        from headroom.analysis.bottleneck import NONE, RESOURCES

        names = {p.get("name") for p in profiles if isinstance(p, dict)} if isinstance(profiles, list) else set()
        out = {}
        for key_node, value_node in node.value if isinstance(node, yaml.MappingNode) else ():
            name = self.string(key_node, "expected")
            if name not in names:
                raise self.error(key_node, f"expected.{name}", "not a profile of this scenario (profiles:)")
            value = self.string(value_node, f"expected.{name}")
            if value not in (*RESOURCES, NONE):
                raise self.error(value_node, f"expected.{name}", f"expected one of: {', '.join((*RESOURCES, NONE))}")
            out[name] = value
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, "expected", "expected a mapping of profile name -> resource")
        return out

    def fits(self, node: yaml.Node, profiles: YamlValue) -> dict[str, bool]:
        """``fits:``: profile name -> whether the memory model finds its declared load fitting its simulated GPUs
        (true for every profile not named; false where the scenario demonstrates a workload that does not fit)."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, "fits", "expected a mapping of profile name -> true or false")
        names = {p.get("name") for p in profiles if isinstance(p, dict)} if isinstance(profiles, list) else set()
        out = {}
        for key_node, value_node in node.value:
            name = self.string(key_node, "fits")
            if name not in names:
                raise self.error(key_node, f"fits.{name}", "not a profile of this scenario (profiles:)")
            out[name] = self.boolean(value_node, f"fits.{name}")
        return out

    def workloads(self, node: yaml.Node, gpu_count: int) -> tuple[WorkloadSpec, ...]:
        out: list[WorkloadSpec] = []
        for i, item in enumerate(self.sequence(node, "workloads")):
            path = f"workloads[{i}]"
            keys = self.mapping(item, path, {"name", "serving", "env", *_STANDIN_KEYS}, ("name", "cmdline"))
            name = self.string(keys["name"], f"{path}.name")
            if name in {w.name for w in out}:
                raise self.error(keys["name"], f"{path}.name", f"duplicate workload name {name!r}")
            serving = self.serving(keys["serving"], f"{path}.serving") if "serving" in keys else None
            main = self.standin(item, {k: v for k, v in keys.items() if k not in ("serving", "env")}, path, gpu_count,
                                None)
            env = self.environment(keys["env"], f"{path}.env") if "env" in keys else ()
            out.append(WorkloadSpec(name=name, process=main, serving=serving, env=env))
        return tuple(out)

    def environment(self, node: yaml.Node, path: str) -> tuple[tuple[str, str], ...]:
        """``env:``: NAME -> string; ``{scenario_dir}`` is the scenario file's directory (built-in scenarios
        carry their own files there, e.g. a Hugging Face cache for an automatically sized workload)."""
        keys = self.mapping(node, path, {k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
                            if isinstance(node, yaml.MappingNode) else set())
        out = []
        for key, value in keys.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise self.error(value, f"{path}.{key}", "not an environment variable name")
            text = self.string(value, f"{path}.{key}")
            out.append((key, text.replace("{scenario_dir}", str(Path(self.filename).parent))))
        return tuple(out)

    def serving(self, node: yaml.Node, path: str) -> ServingSpec:
        from headroom.simulation.openai_api import API_DEFAULTS
        from headroom.simulation.runtime_metrics import DEFAULT_VERSION, VERSIONS

        keys = self.mapping(node, path, {"runtime", "version", "port", "kv_blocks", "block_size", "model", "api",
                                         *SERVING_SIGNALS}, ("runtime",))
        api: list[tuple[str, float]] = []
        if "api" in keys:
            for name, value in self.mapping(keys["api"], f"{path}.api", set(API_DEFAULTS)).items():
                api.append((name, self.duration(value, f"{path}.api.{name}")))
        runtime = self.string(keys["runtime"], f"{path}.runtime")
        if runtime not in VERSIONS:
            raise self.error(keys["runtime"], f"{path}.runtime", f"expected one of {', '.join(VERSIONS)}")
        version = self.string(keys["version"], f"{path}.version") if "version" in keys else DEFAULT_VERSION[runtime]
        if version not in VERSIONS[runtime]:
            raise self.error(keys["version"], f"{path}.version",
                             f"{runtime} versions: {', '.join(VERSIONS[runtime])}")
        port = self.integer(keys["port"], f"{path}.port") if "port" in keys else 0
        if port > 65535:
            raise self.error(keys["port"], f"{path}.port", "must be <= 65535")
        signals = {name: (replace(self.signal(keys[name], f"{path}.{name}", kind), lower=0.0) if name in keys
                          else constant(SERVING_DEFAULTS[name]))
                   for name, kind in SERVING_SIGNALS.items()}  # counts and seconds never go below 0
        return ServingSpec(
            runtime=runtime, version=version, port=port, signals=signals,
            kv_blocks=self.integer(keys["kv_blocks"], f"{path}.kv_blocks", 1) if "kv_blocks" in keys else 2048,
            block_size=self.integer(keys["block_size"], f"{path}.block_size", 1) if "block_size" in keys else 16,
            model=self.string(keys["model"], f"{path}.model") if "model" in keys else "meta-llama/Llama-3.1-8B-Instruct",
            api=tuple(api),
        )

    def standin(self, node: yaml.Node, keys: dict[str, yaml.Node], path: str, gpu_count: int,
                parent_argv: tuple[str, ...] | None) -> StandInSpec:
        from headroom.simulation.standin import MIN_CMDLINE_BYTES, encoded

        if "cmdline" in keys:
            text = self.string(keys["cmdline"], f"{path}.cmdline")
            try:
                argv = tuple(shlex.split(text))
            except ValueError as exc:
                raise self.error(keys["cmdline"], f"{path}.cmdline", f"cannot split like a shell: {exc}") from None
            if len(encoded(list(argv))) < MIN_CMDLINE_BYTES:
                raise self.error(keys["cmdline"], f"{path}.cmdline",
                                 f"a stand-in command line needs at least {MIN_CMDLINE_BYTES - 1} characters")
        else:
            assert parent_argv is not None
            argv = parent_argv
        gpus = []
        if "gpus" in keys:
            gpath = f"{path}.gpus"
            g = keys["gpus"]
            if not isinstance(g, yaml.MappingNode):
                raise self.error(g, gpath, "expected a mapping of GPU index -> memory (or {memory, utilization})")
            for key_node, value_node in g.value:
                index = self.integer(key_node, gpath, minimum=0)
                sub = f"{gpath}.{index}"
                if index >= gpu_count:
                    raise self.error(key_node, sub, f"no such GPU (the scenario has {gpu_count})")
                if isinstance(value_node, yaml.MappingNode):
                    u = self.mapping(value_node, sub, {"memory", "utilization"}, ("memory",))
                    gpus.append(StandInGpu(index, self.signal(u["memory"], f"{sub}.memory", "size"),
                                           self.signal(u["utilization"], f"{sub}.utilization", "ratio")
                                           if "utilization" in u else None))
                else:
                    gpus.append(StandInGpu(index, self.signal(value_node, sub, "size")))
        children: list[StandInSpec] = []
        if "children" in keys:
            c = keys["children"]
            cpath = f"{path}.children"
            if parent_argv is not None:
                raise self.error(c, cpath, "children of children are not supported")
            if isinstance(c, yaml.ScalarNode):
                children = [StandInSpec(argv=argv)] * self.integer(c, cpath)
            else:
                for j, child in enumerate(self.sequence(c, cpath)):
                    ck = self.mapping(child, f"{cpath}[{j}]", set(_STANDIN_KEYS) - {"children"})
                    children.append(self.standin(child, ck, f"{cpath}[{j}]", gpu_count, argv))
        threads: tuple[Signal, ...] | None = None
        thread_count = 1
        if "threads" in keys:
            tnode = keys["threads"]
            tpath = f"{path}.threads"
            if isinstance(tnode, yaml.SequenceNode):
                threads = tuple(self.signal(n, f"{tpath}[{j}]", "cores") for j, n in enumerate(tnode.value))
                if not threads:
                    raise self.error(tnode, tpath, "needs at least one thread")
                if "cpu" in keys:
                    raise self.error(keys["cpu"], f"{path}.cpu", "give cpu or per-thread cores in threads, not both")
                thread_count = len(threads)
            else:
                thread_count = self.integer(tnode, tpath, minimum=1)
        network = None
        if "network" in keys:
            n = self.mapping(keys["network"], f"{path}.network", {"rx", "tx"})
            network = tuple(self.signal(n[k], f"{path}.network.{k}", "size") if k in n else constant(0.0)
                            for k in ("rx", "tx"))
        cgroup = None
        cpu_quota = None
        for key in ("cgroup", "cpu_quota"):
            if key in keys and parent_argv is not None:
                raise self.error(keys[key], f"{path}.{key}", "only the workload's main process has a cgroup of its own")
        if "cgroup" in keys:
            cgroup = self.string(keys["cgroup"], f"{path}.cgroup")
            if not cgroup.startswith("/") or ".." in cgroup.split("/") or any(c.isspace() for c in cgroup):
                raise self.error(keys["cgroup"], f"{path}.cgroup", f"expected an absolute cgroup path, got {cgroup!r}")
        if "cpu_quota" in keys:
            cpu_quota = self.unit(keys["cpu_quota"], f"{path}.cpu_quota", "cores")
            if cpu_quota <= 0:
                raise self.error(keys["cpu_quota"], f"{path}.cpu_quota", "must be > 0 cores")

        def sig(key: str, kind: str) -> Signal:
            return self.signal(keys[key], f"{path}.{key}", kind) if key in keys else constant(0.0)

        if "threads" not in keys:  # enough threads for the cores it uses at the start (one thread uses one core)
            thread_count = max(1, math.ceil(sig("cpu", "cores").at(0.0) - 1e-9))

        return StandInSpec(
            argv=argv,
            cpu=sig("cpu", "cores"),
            rss=sig("rss", "size"),
            gpus=tuple(gpus),
            children=tuple(children),
            read=sig("read", "size"),
            write=sig("write", "size"),
            network=network,  # type: ignore[arg-type]
            threads=threads,
            thread_count=thread_count,
            cgroup=cgroup,
            cpu_quota=cpu_quota,
        )

    def gpu(self, node: yaml.Node, index: int) -> GpuSpec:
        path = f"gpus[{index}]"
        g = self.mapping(node, path, _GPU_KEYS, ("name", "memory_total", "power_limit"))

        def opt(key: str, read: Callable[[yaml.Node, str], _T], default: _T) -> _T:
            return read(g[key], f"{path}.{key}") if key in g else default

        memory_total = int(self.unit(g["memory_total"], f"{path}.memory_total", "size"))
        signals = {k: self.signal(g[k], f"{path}.{k}", kind) for k, kind in GPU_SIGNALS.items() if k in g}
        unsupported = set()
        if "unsupported" in g:
            for i, item in enumerate(self.sequence(g["unsupported"], f"{path}.unsupported")):
                q = self.string(item, f"{path}.unsupported[{i}]")
                if q not in UNSUPPORTABLE_QUERIES:
                    raise self.error(item, f"{path}.unsupported[{i}]", f"unknown query {q!r} (expected one of: {', '.join(sorted(UNSUPPORTABLE_QUERIES))})")
                unsupported.add(q)
        # a GPU without a fan or memory sensor answers NOT_SUPPORTED, as passive datacenter boards do
        for optional in ("fan_speed", "memory_temperature"):
            if optional not in signals:
                unsupported.add(optional)

        pcie = {"generation": 5, "width": 16, "max_generation": 5, "max_width": 16}
        if "pcie" in g:
            p = self.mapping(g["pcie"], f"{path}.pcie", set(pcie))
            for key, n in p.items():
                pcie[key] = self.integer(n, f"{path}.pcie.{key}", minimum=1)

        nvlink = {"links": 0, "version": 4, "down": ()}
        if "nvlink" in g:
            nl = self.mapping(g["nvlink"], f"{path}.nvlink", {"links", "version", "down"}, ("links",))
            nvlink["links"] = self.integer(nl["links"], f"{path}.nvlink.links", minimum=1)
            if "version" in nl:
                nvlink["version"] = self.integer(nl["version"], f"{path}.nvlink.version", minimum=1)
            down = []
            for j, n in enumerate(self.sequence(nl["down"], f"{path}.nvlink.down") if "down" in nl else []):
                link = self.integer(n, f"{path}.nvlink.down[{j}]")
                if link >= nvlink["links"]:
                    raise self.error(n, f"{path}.nvlink.down[{j}]", f"no such link (the GPU has {nvlink['links']})")
                down.append(link)
            nvlink["down"] = tuple(down)

        clock_events: dict[str, Signal] = {}
        if "clock_events" in g:
            ce = self.mapping(g["clock_events"], f"{path}.clock_events", set(CLOCK_EVENT_REASONS))
            clock_events = {k: self.signal(n, f"{path}.clock_events.{k}", "bool") for k, n in ce.items()}
        supported = CLOCK_EVENT_REASONS
        if "supported_clock_events" in g:
            spath = f"{path}.supported_clock_events"
            names = [self.string(n, f"{spath}[{i}]") for i, n in enumerate(self.sequence(g["supported_clock_events"], spath))]
            for i, n in enumerate(names):
                if n not in CLOCK_EVENT_REASONS:
                    raise self.error(g["supported_clock_events"].value[i], f"{spath}[{i}]", f"unknown reason {n!r} (expected one of: {', '.join(CLOCK_EVENT_REASONS)})")
            supported = tuple(r for r in CLOCK_EVENT_REASONS if r in names)

        processes = []
        if "processes" in g:
            for i, item in enumerate(self.sequence(g["processes"], f"{path}.processes")):
                ppath = f"{path}.processes[{i}]"
                p = self.mapping(item, ppath, {"pid", "used_memory", "sm_utilization"}, ("pid",))
                used = None
                if "used_memory" in p and not (isinstance(p["used_memory"], yaml.ScalarNode) and self.plain(p["used_memory"]) is None):
                    used = self.signal(p["used_memory"], f"{ppath}.used_memory", "size")
                sm = self.signal(p["sm_utilization"], f"{ppath}.sm_utilization", "ratio") if "sm_utilization" in p else None
                processes.append(ProcessSpec(pid=self.integer(p["pid"], f"{ppath}.pid", minimum=1), used_memory=used,
                                             sm_utilization=sm))

        mig_enabled: bool | None = None
        mig_instances: list[MigInstanceSpec] = []
        if "mig" in g:
            m = self.mapping(g["mig"], f"{path}.mig", {"enabled", "instances"}, ("enabled",))
            mig_enabled = self.boolean(m["enabled"], f"{path}.mig.enabled")
            for i, item in enumerate(self.sequence(m["instances"], f"{path}.mig.instances") if "instances" in m else []):
                ipath = f"{path}.mig.instances[{i}]"
                mi = self.mapping(item, ipath, {"gpu_instance_id", "compute_instance_id", "uuid", "memory_total", "memory_used", "processes", "profile_id", "placement_start"}, ("gpu_instance_id", "memory_total"))
                mig_pids = []
                for j, pid_node in enumerate(self.sequence(mi["processes"], f"{ipath}.processes") if "processes" in mi else []):
                    pid = self.integer(pid_node, f"{ipath}.processes[{j}]", minimum=1)
                    if pid not in {p.pid for p in processes}:
                        raise self.error(pid_node, f"{ipath}.processes[{j}]", f"pid {pid} is not one of this GPU's processes")
                    mig_pids.append(pid)
                mig_instances.append(MigInstanceSpec(
                    gpu_instance_id=self.integer(mi["gpu_instance_id"], f"{ipath}.gpu_instance_id"),
                    compute_instance_id=self.integer(mi["compute_instance_id"], f"{ipath}.compute_instance_id") if "compute_instance_id" in mi else 0,
                    uuid=self.string(mi["uuid"], f"{ipath}.uuid") if "uuid" in mi else _fake_uuid("MIG", self.seed, index, i),
                    memory_total=int(self.unit(mi["memory_total"], f"{ipath}.memory_total", "size")),
                    memory_used=self.signal(mi["memory_used"], f"{ipath}.memory_used", "size") if "memory_used" in mi else constant(0),
                    processes=tuple(mig_pids),
                    profile_id=self.integer(mi["profile_id"], f"{ipath}.profile_id") if "profile_id" in mi else None,
                    placement_start=self.integer(mi["placement_start"], f"{ipath}.placement_start") if "placement_start" in mi else None,
                ))  # fmt: skip
            if mig_instances and not mig_enabled:
                raise self.error(m["instances"], f"{path}.mig.instances", "instances need enabled: true")

        xids = []
        for i, item in enumerate(self.sequence(g["xids"], f"{path}.xids") if "xids" in g else []):
            x = self.mapping(item, f"{path}.xids[{i}]", {"at", "code"}, ("at", "code"))
            xids.append(XidSpec(at=self.duration(x["at"], f"{path}.xids[{i}].at"), code=self.integer(x["code"], f"{path}.xids[{i}].code", minimum=1)))

        ecc = {"uncorrected_volatile": 0, "uncorrected_aggregate": 0}
        if "ecc" in g:
            for key, n in self.mapping(g["ecc"], f"{path}.ecc", set(ecc)).items():
                ecc[key] = self.integer(n, f"{path}.ecc.{key}")
        rows: dict[str, int | bool] = {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        if "remapped_rows" in g:
            for key, n in self.mapping(g["remapped_rows"], f"{path}.remapped_rows", set(rows)).items():
                rpath = f"{path}.remapped_rows.{key}"
                rows[key] = self.boolean(n, rpath) if key in ("pending", "failure") else self.integer(n, rpath)

        reset_at = self.duration(g["reset_at"], f"{path}.reset_at") if "reset_at" in g else None

        power_limit = self.unit(g["power_limit"], f"{path}.power_limit", "number")
        if power_limit <= 0:
            raise self.error(g["power_limit"], f"{path}.power_limit", "must be > 0 (watts)")
        power_limit_max = None
        if "power_limit_max" in g:
            power_limit_max = self.unit(g["power_limit_max"], f"{path}.power_limit_max", "number")
            if power_limit_max < power_limit:
                raise self.error(g["power_limit_max"], f"{path}.power_limit_max",
                                 f"must be at least power_limit ({power_limit:g} W)")
        return GpuSpec(
            index=index,
            name=self.string(g["name"], f"{path}.name"),
            uuid=opt("uuid", self.string, _fake_uuid("GPU", self.seed, index)),
            pci_bus_id=opt("pci_bus_id", self.string, f"00000000:{index + 1:02X}:00.0"),
            memory_total=memory_total,
            memory_reserved=int(opt("memory_reserved", lambda n, p: self.unit(n, p, "size"), 0)),
            power_limit=power_limit,
            power_limit_max=power_limit_max,
            sm_clock_max=opt("sm_clock_max", lambda n, p: self.unit(n, p, "frequency"), 1980e6),
            memory_clock_max=opt("memory_clock_max", lambda n, p: self.unit(n, p, "frequency"), 2619e6),
            pcie_generation=pcie["generation"],
            pcie_width=pcie["width"],
            pcie_max_generation=pcie["max_generation"],
            pcie_max_width=pcie["max_width"],
            signals=signals,
            clock_events=clock_events,
            supported_clock_events=supported,
            processes=tuple(processes),
            mig_enabled=mig_enabled,
            mig_instances=tuple(mig_instances),
            xids=tuple(xids),
            ecc_uncorrected_volatile=ecc["uncorrected_volatile"],
            ecc_uncorrected_aggregate=ecc["uncorrected_aggregate"],
            remapped_rows=(rows["correctable"], rows["uncorrectable"], rows["pending"], rows["failure"]),
            reset_at=reset_at,
            unsupported=frozenset(unsupported),
            nvlink_links=nvlink["links"],
            nvlink_version=nvlink["version"],
            nvlink_down=nvlink["down"],
        )

    def fault(self, node: yaml.Node, path: str, gpu_count: int) -> FaultSpec:
        f = self.mapping(node, path, {"call", "gpu", "error", "hang", "from", "until", "calls"}, ("call",))
        call = self.string(f["call"], f"{path}.call")
        if not call.startswith(("nvml", "NVML_FI_")):
            raise self.error(f["call"], f"{path}.call", f"expected a pynvml function name (nvml...) or an NVML_FI_* field, got {call!r}")
        gpu = None
        if "gpu" in f:
            gpu = self.integer(f["gpu"], f"{path}.gpu")
            if gpu >= gpu_count:
                raise self.error(f["gpu"], f"{path}.gpu", f"no such GPU (the scenario has {gpu_count})")
        error = None
        if "error" in f:
            from headroom.simulation.nvml_driver import error_code

            error = self.string(f["error"], f"{path}.error")
            try:
                error_code(error)
            except ValueError as exc:
                raise self.error(f["error"], f"{path}.error", str(exc)) from None
            error = error.removeprefix("NVML_ERROR_")
        hang = self.duration(f["hang"], f"{path}.hang") if "hang" in f else None
        if error is None and hang is None:
            raise self.error(node, path, "a fault needs error, hang or both")
        return FaultSpec(
            call=call,
            gpu=gpu,
            error=error,
            hang=hang,
            start=self.duration(f["from"], f"{path}.from") if "from" in f else None,
            until=self.duration(f["until"], f"{path}.until") if "until" in f else None,
            calls=self.integer(f["calls"], f"{path}.calls", minimum=1) if "calls" in f else None,
        )


def _fake_uuid(prefix: str, seed: int, *parts: int) -> str:
    """A stable made-up UUID like GPU-1b2c...: same seed and position, same UUID."""
    h = hashlib.blake2b(f"{prefix}:{seed}:{parts}".encode(), digest_size=16).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
