"""The pipeline flows one way: these import rules keep the rooms separate (architecture.md)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "agent" / "headroom"


def parse(path: Path) -> ast.Module:
    """``path`` parsed, once per worker while the file is unchanged: most tests here walk every module of the
    agent, and parsing them all again for each test was most of the file's time. (Callers only read the trees.)"""
    st = path.stat()
    return _parsed(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text())


def imports(path: Path) -> set[str]:
    tree = parse(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def modules():
    return sorted(p for p in PKG.rglob("*.py"))


def test_only_the_nvml_binding_layer_and_its_stand_in_import_pynvml():
    """sources/nvml/binding.py imports pynvml; the package's other modules reach it through binding.py."""
    importers = {p.relative_to(PKG).as_posix() for p in modules()
                 if any(m == "pynvml" or m.startswith("pynvml.") for m in imports(p))}
    assert importers <= {"sources/nvml/binding.py", "simulation/nvml_driver/core.py"}, importers


# sources/nvml/: one purpose a module, and what each may import of the others (the layers point one way:
# binding <- decode and threads <- processes <- collector; binding names decode's _Layout only for type checking)
NVML_MODULES = {
    "__init__.py": {"binding", "collector", "decode"},
    "binding.py": set(),
    "decode.py": {"binding"},
    "threads.py": {"binding"},
    "processes.py": {"binding", "decode"},
    "collector.py": {"binding", "decode", "processes", "threads"},
}


def _runtime_import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``path`` (at the top or inside functions), leaving out those under
    ``if TYPE_CHECKING:``."""
    tree = parse(path)
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
               for n in ast.walk(node)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped]


def _runtime_imports(path: Path) -> set[str]:
    """The modules ``path`` imports, leaving out those under ``if TYPE_CHECKING:``."""
    out: set[str] = set()
    for node in _runtime_import_nodes(path):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module == "headroom.sources.nvml":  # from headroom.sources.nvml import threads
                out.update(f"headroom.sources.nvml.{a.name}" for a in node.names)
    return out


def test_the_nvml_package_is_one_purpose_a_module_each_under_800_lines():
    pkg = PKG / "sources" / "nvml"
    assert not (PKG / "sources" / "nvml.py").exists()
    assert {p.name for p in pkg.glob("*.py")} == set(NVML_MODULES)
    for name, allowed in NVML_MODULES.items():
        path = pkg / name
        assert len(path.read_text().splitlines()) <= 800, f"sources/nvml/{name} is over 800 lines"
        siblings = {m.removeprefix("headroom.sources.nvml.") for m in _runtime_imports(path)
                    if m.startswith("headroom.sources.nvml.")}
        siblings &= {n.removesuffix(".py") for n in NVML_MODULES}
        assert siblings <= allowed, f"sources/nvml/{name} imports {sorted(siblings - allowed)}"


# workload/profiles/, workload/sizing/ and workload/modelconfig/: one purpose a module, each under 800 lines, the
# layers pointing one way (the package docstrings say what each module holds); no module imports its own package's
# __init__ (which re-exports them all)
PROFILES_MODULES = {
    "__init__.py": {"matching", "reader", "schema", "types"},
    "types.py": set(),
    "reader.py": set(),
    "matching.py": {"reader", "types"},
    "schema.py": {"matching", "reader", "types"},
}
# types <- formulas <- runtime <- plan; report reads types only; runtime names plan's _Plan only for type checking
SIZING_MODULES = {
    "__init__.py": {"formulas", "plan", "report", "types"},
    "types.py": set(),
    "formulas.py": {"types"},
    "runtime.py": {"formulas", "types"},
    "plan.py": {"formulas", "runtime", "types"},
    "report.py": {"types"},
}
# fields <- safetensors <- architecture <- reading
MODELCONFIG_MODULES = {
    "__init__.py": {"architecture", "fields", "reading", "safetensors"},
    "fields.py": set(),
    "safetensors.py": {"fields"},
    "architecture.py": {"fields", "safetensors"},
    "reading.py": {"architecture", "fields"},
}


def _check_split_package(rel: str, allowed_imports: dict[str, set[str]]) -> None:
    pkg, dotted = PKG / rel, "headroom." + rel.replace("/", ".")
    assert not (PKG / f"{rel}.py").exists(), f"{rel}.py is back beside the package"
    assert {p.name for p in pkg.glob("*.py")} == set(allowed_imports)
    names = {n.removesuffix(".py") for n in allowed_imports} - {"__init__"}
    for name, allowed in allowed_imports.items():
        path = pkg / name
        assert len(path.read_text().splitlines()) <= 800, f"{rel}/{name} is over 800 lines"
        found = set()
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module == dotted:  # from headroom.workload.sizing import plan
                found.update(a.name for a in node.names if a.name in names)
                if name != "__init__.py":
                    raise AssertionError(f"{rel}/{name} imports its own package's __init__")
        found |= {m.removeprefix(dotted + ".") for m in _runtime_imports(path) if m.startswith(dotted + ".")}
        assert found <= allowed, f"{rel}/{name} imports {sorted(found - allowed)}"


def test_the_profiles_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("workload/profiles", PROFILES_MODULES)


def test_the_sizing_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("workload/sizing", SIZING_MODULES)


def test_the_modelconfig_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("workload/modelconfig", MODELCONFIG_MODULES)

# simulation/: what each of its modules (a package counts as one) may import of the others when it runs (imports
# inside functions count; those under ``if TYPE_CHECKING:`` do not). What a scenario drives (the synthetic host,
# the driver stand-in, the stand-in processes) sits below the scenario package and never imports it: it takes
# the signals and the spec types from the two modules at the bottom.
SIMULATION_IMPORTS = {
    "signals": set(),
    "spec": {"signals"},
    "host_spec": {"signals"},
    "host": {"host_spec"},
    "openai_api": set(),
    "runtime_metrics": {"openai_api"},
    "standin": {"runtime_metrics", "signals"},
    "nvml_driver": {"spec"},
    "scenario": {"signals", "spec", "host_spec", "host", "nvml_driver", "standin", "runtime_metrics", "openai_api"},
    "runner": {"scenario"},
    "fleet": set(),
    "__init__": {"scenario"},
}
SIM = PKG / "simulation"


def _simulation_imports(path: Path) -> set[str]:
    """The simulation modules (by SIMULATION_IMPORTS name) ``path`` imports when it runs, its own package left out."""
    out: set[str] = set()
    for node in _runtime_import_nodes(path):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            if name == "headroom.simulation" and isinstance(node, ast.ImportFrom):  # from headroom.simulation import X
                rooms = {a.name for a in node.names} & set(SIMULATION_IMPORTS)
                out |= rooms or {"__init__"}
            elif name.startswith("headroom.simulation."):
                out.add(name.removeprefix("headroom.simulation.").split(".")[0])
    own = path.relative_to(SIM).parts[0].removesuffix(".py")
    return out - {own}


def test_the_simulation_imports_one_way():
    """No circle: scenario drives host, driver and stand-ins, which import only signals and spec."""
    found = {p.relative_to(SIM).parts[0].removesuffix(".py") for p in SIM.glob("*") if p.suffix == ".py" or
             (p.is_dir() and (p / "__init__.py").exists())}
    assert found == set(SIMULATION_IMPORTS), found ^ set(SIMULATION_IMPORTS)
    for path in SIM.rglob("*.py"):
        room = path.relative_to(SIM).parts[0].removesuffix(".py")
        used = _simulation_imports(path)
        allowed = SIMULATION_IMPORTS[room]
        assert used <= allowed, f"{path.relative_to(PKG)} imports simulation.{sorted(used - allowed)}"
        assert len(path.read_text().splitlines()) <= 800, f"{path.relative_to(PKG)} is over 800 lines"
    done: set[str] = set()  # and the allowed imports themselves form no circle (each layer only looks down)
    while len(done) < len(SIMULATION_IMPORTS):
        ready = {m for m, deps in SIMULATION_IMPORTS.items() if m not in done and deps <= done}
        assert ready, f"a circle among {sorted(set(SIMULATION_IMPORTS) - done)}"
        done |= ready


# simulation/scenario/: the runtime (Scenario), the node readers and the parser that builds a Scenario with them
SCENARIO_MODULES = {"__init__.py": {"nodes", "parse", "runtime"}, "runtime.py": set(), "nodes.py": set(),
                    "parse.py": {"nodes", "runtime"}}
# simulation/nvml_driver/: nvml.h <- core (state, plumbing) <- device <- health <- driver (the table)
NVML_DRIVER_MODULES = {
    "__init__.py": {"driver", "nvml_h"},
    "nvml_h.py": set(),
    "core.py": {"nvml_h"},
    "device.py": {"core", "nvml_h"},
    "health.py": {"core", "device", "nvml_h"},
    "driver.py": {"health", "nvml_h"},
}


def _check_package(pkg: Path, modules: dict[str, set[str]]) -> None:
    dotted = "headroom." + ".".join(pkg.relative_to(PKG).parts) + "."
    assert not pkg.with_suffix(".py").exists(), f"{pkg.name}.py and {pkg.name}/ both exist"
    assert {p.name for p in pkg.glob("*.py")} == set(modules)
    for name, allowed in modules.items():
        path = pkg / name
        assert len(path.read_text().splitlines()) <= 800, f"{path.relative_to(PKG)} is over 800 lines"
        siblings = {m.removeprefix(dotted) for m in _runtime_imports(path) if m.startswith(dotted)}
        siblings &= {n.removesuffix(".py") for n in modules}
        assert siblings <= allowed, f"{path.relative_to(PKG)} imports {sorted(siblings - allowed)}"


def test_the_scenario_package_is_one_purpose_a_module_each_under_800_lines():
    _check_package(SIM / "scenario", SCENARIO_MODULES)


def test_the_nvml_driver_package_is_one_purpose_a_module_each_under_800_lines():
    _check_package(SIM / "nvml_driver", NVML_DRIVER_MODULES)


def test_analysis_imports_neither_nvml_nor_prometheus_nor_http():
    banned = ("pynvml", "prometheus_client", "http", "headroom.exposition", "headroom.sources")
    for p in (PKG / "analysis").rglob("*.py"):
        for m in imports(p):
            assert not m.startswith(banned), f"{p.name} imports {m}"


def test_samples_are_the_contract_and_import_no_side():
    for m in imports(PKG / "samples.py"):
        assert not m.startswith("headroom"), m


def test_sources_know_nothing_of_prometheus():
    """Sources never render: no exposition module, no prometheus-client registry. Reading another
    program's exposition (the serving collector parses runtimes' /metrics) uses the client's text parser
    only, in that one module."""
    for p in (PKG / "sources").rglob("*.py"):
        for m in imports(p):
            if p.parent.name == "serving" and m == "prometheus_client.parser":
                continue
            assert not m.startswith(("prometheus_client", "headroom.exposition")), f"{p.name} imports {m}"


def test_real_sources_never_import_the_simulation():
    """The simulation is one package (scenarios, synthetic host, driver stand-in, stand-in processes);
    only the daemon's --simulate path and tests reach into it."""
    for p in (PKG / "sources").rglob("*.py"):
        for m in imports(p):
            assert not m.startswith("headroom.simulation"), f"sources/{p.name} imports {m}"


def test_the_simulation_is_one_package():
    stray = {p.name for p in PKG.glob("*.py")} & {"simulation.py", "simulation_host.py", "standin.py"}
    assert not stray, stray
    assert not (PKG / "sources" / "fake_nvml.py").exists()


def test_the_sampler_does_not_know_the_exposition():
    """sampler.py ticks collectors and analysis; the daemon hands it the renderer, so sampler and
    exposition do not import each other (the Snapshot they share lives in samples.py)."""
    for m in imports(PKG / "sampler.py"):
        assert not m.startswith("headroom.exposition"), m


def test_workload_modelling_is_one_pure_package():
    """Profiles, the memory model, runtime accounting, the estimate CLI and attribution live in
    headroom/workload/ and read neither the host, NVML, the network nor the simulation."""
    stray = {p.name for p in PKG.glob("*.py")} & {"profiles.py", "sizing.py", "estimate.py", "serving_memory.py",
                                                  "modelconfig.py", "sizing_table.py"}
    assert not stray, stray
    assert not (PKG / "analysis" / "workloads.py").exists()
    banned = ("pynvml", "headroom.sources", "headroom.exposition", "headroom.simulation", "headroom.sampler",
              "http", "socket", "psutil")
    for p in (PKG / "workload").rglob("*.py"):
        for m in imports(p):
            assert not m.startswith(banned), f"workload/{p.name} imports {m}"


def test_the_agent_loads_prometheus_client_only_to_read_a_serving_runtime():
    """Import weight is resident memory: `headroom run` imports every collector, the daemon, the exposition and the
    analysis, and prometheus-client's text parser (with its registry and exposition modules) only once a serving
    runtime's exposition is read; urllib.request only for `headroom fleet-report`."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from headroom import cli, daemon\n"
        "from headroom.analysis import pipeline\n"
        "from headroom.sources import load_all\n"
        "from headroom.sources.serving import exposition as serving  # _parse_series: private, in the module that owns it\n"
        "load_all()\n"
        "assert 'prometheus_client' not in sys.modules, sorted(m for m in sys.modules if 'prometheus' in m)\n"
        "cli.build_parser()\n"
        "assert 'urllib.request' not in sys.modules  # only `headroom fleet-report` queries over HTTP\n"
        "assert serving._parse_series('vllm:num_requests_running{model_name=\"m\"} 3') == "
        "('vllm:num_requests_running', {'model_name': 'm'})\n"
        "assert 'prometheus_client.parser' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# sources/identity/: one purpose a module (the package docstring says what each holds), each under 800 lines; the
# readers of one kind of input import none of the others, additions (the kubelet's and a job mapping's merge) reads
# groups and jobs, watch (the GPU processes' pidfds) the launchers' reader, the collector all of them; no module imports the package's __init__ (which re-exports them)
IDENTITY_MODULES = {
    "__init__.py": {"cgroup_files", "cgroup_paths", "collector", "containers", "jobs", "launchers", "models"},
    "cgroup_paths.py": set(),
    "containers.py": set(),
    "jobs.py": set(),
    "launchers.py": set(),
    "models.py": set(),
    "cgroup_files.py": set(),
    "groups.py": set(),
    "additions.py": {"groups", "jobs"},
    "watch.py": {"launchers"},
    "collector.py": {"additions", "cgroup_files", "cgroup_paths", "containers", "groups", "jobs", "launchers",
                     "models", "watch"},
}


def test_the_identity_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("sources/identity", IDENTITY_MODULES)

# sources/serving/: one purpose a module (the package docstring says what each holds), each under 800 lines, the layers
# pointing one way: errors <- http and status; normalize <- exposition (with errors, status) <- collector (with
# discovery, http); no module imports the package's __init__ (which re-exports them)
SERVING_MODULES = {
    "__init__.py": {"collector", "discovery", "errors", "exposition", "normalize", "status"},
    "errors.py": set(),
    "http.py": {"errors"},
    "normalize.py": set(),
    "status.py": {"errors"},
    "exposition.py": {"errors", "normalize", "status"},
    "discovery.py": set(),
    "collector.py": {"discovery", "errors", "exposition", "http"},
}


def test_the_serving_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("sources/serving", SERVING_MODULES)


# sources/procfs/: the parsers grouped by what they parse, the readers apart (host <- pid <- readers)
PROCFS_MODULES = {
    "__init__.py": {"host", "pid", "readers"},
    "host.py": set(),
    "pid.py": {"host"},
    "readers.py": {"host", "pid"},
}


def test_the_procfs_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("sources/procfs", PROCFS_MODULES)
    # the per-process parsers never touch the filesystem (host.py's only filesystem call: mount_usage's statvfs)
    assert not imports(PKG / "sources" / "procfs" / "pid.py") & {"os", "pathlib"}


# sources/processes/: the match rules, the pid helpers and the cgroup reader apart from the collector
PROCESSES_MODULES = {
    "__init__.py": {"cgroups", "collector", "matching", "pids"},
    "matching.py": set(),
    "pids.py": set(),
    "cgroups.py": set(),
    "collector.py": {"cgroups", "matching", "pids"},
}


def test_the_processes_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("sources/processes", PROCESSES_MODULES)

# analysis/bottleneck/: one purpose a module (the package docstring says what each holds), each under 800 lines; the
# vocabulary (thresholds, evidence) <- the verdict and the rules (gpu, starvation, neighbours) <- scoring, which runs
# them; __main__ prints the thresholds table of docs/analysis.md
BOTTLENECK_MODULES = {
    "__init__.py": {"evidence", "gpu", "neighbours", "scoring", "starvation", "verdict"},
    "__main__.py": set(),
    "evidence.py": set(),
    "verdict.py": {"evidence"},
    "gpu.py": {"evidence"},
    "starvation.py": {"evidence"},
    "neighbours.py": {"evidence"},
    "scoring.py": {"evidence", "gpu", "neighbours", "starvation", "verdict"},
}
# exposition/render/: text (the format) <- collectors and findings (the families of series, naming the Writer only
# for type checking) <- writer (the Writer, its caches, the Renderer and render_into, which calls the families)
RENDER_MODULES = {
    "__init__.py": {"text", "writer"},
    "text.py": set(),
    "collectors.py": {"text"},
    "findings.py": {"text"},
    "writer.py": {"collectors", "findings", "text"},
}


def test_the_bottleneck_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("analysis/bottleneck", BOTTLENECK_MODULES)


def test_the_render_package_is_one_purpose_a_module_each_under_800_lines():
    _check_split_package("exposition/render", RENDER_MODULES)


def test_the_situations_corpus_lives_beside_the_tests_and_the_agent_never_imports_it():
    """The labelled situations (tests/situations/) serve the tests and `make accuracy` only: not in the package (the
    wheel ships what agent/headroom holds), and no agent module imports them."""
    corpus = PKG.parent.parent / "tests" / "situations"
    assert (corpus / "__init__.py").exists() and len(list(corpus.glob("*.py"))) > 10
    assert not list(PKG.rglob("situations")), "the situation corpus is back inside agent/headroom"
    for path in PKG.rglob("*.py"):
        for node in ast.walk(parse(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "situations" or n.startswith("situations.") or ".situations" in n for n in names), \
                f"{path.relative_to(PKG)} imports the situation corpus"

# the contract typed and one-way (issue 31): what crosses the seams of a tick is a typed value, and the one input a
# collector has of the tick before is the PreviousTick (docs/architecture.md draws it)
def test_a_collector_reads_the_previous_tick_only_as_a_previous_tick():
    """Sources reach the last tick through ``SourceContext.previous_tick()`` (a samples.PreviousTick), never the
    callable itself nor a Sample's ``data(name)``: what they read of it is PreviousTick's fields."""
    for p in (PKG / "sources").rglob("*.py"):
        if p == PKG / "sources" / "__init__.py":
            continue
        text = p.read_text()
        assert "ctx.previous(" not in text and "ctx.previous," not in text, f"{p.relative_to(PKG)}: ctx.previous"
        assert 'previous.data("' not in text, f"{p.relative_to(PKG)} reads the previous Sample by name"


def test_the_previous_tick_is_documented_field_by_field():
    import dataclasses

    from headroom.samples import PreviousTick

    doc = (PKG.parent.parent / "docs" / "architecture.md").read_text()
    assert "PreviousTick" in doc
    section = doc[doc.index("PreviousTick"):]
    for f in dataclasses.fields(PreviousTick):
        assert f"`{f.name}`" in section, f"docs/architecture.md does not name PreviousTick.{f.name}"


def test_the_seams_of_a_tick_are_typed():
    """SourceContext, Snapshot and the sampler's inputs name their types (no Any), the sampler does not probe the
    findings with hasattr/getattr, and the analysis imports attribution outright (no ImportError fallback)."""
    import dataclasses

    from headroom.samples import Snapshot
    from headroom.sources import SourceContext

    typed = {"scenario", "workloads", "previous"}
    for f in dataclasses.fields(SourceContext):
        if f.name in typed:
            assert "Any" not in str(f.type), f"SourceContext.{f.name}: {f.type}"
    (findings,) = [f for f in dataclasses.fields(Snapshot) if f.name == "findings"]
    assert "Any" not in str(findings.type), findings.type
    sampler = (PKG / "sampler.py").read_text()
    assert "hasattr(" not in sampler and 'getattr(findings' not in sampler
    assert "except ImportError" not in (PKG / "analysis" / "pipeline.py").read_text()


def test_the_contract_modules_are_held_to_the_strict_type_checks():
    import tomllib

    config = tomllib.loads((PKG.parent.parent / "pyproject.toml").read_text())
    strict, ignored = config["tool"]["mypy"]["overrides"][0], config["tool"]["mypy"]["overrides"][-1]
    assert strict.get("disallow_untyped_defs") and ignored.get("ignore_errors")
    for module in ("headroom.samples", "headroom.sampler", "headroom.sources", "headroom.sources.neighbours",
                   "headroom.sources.processes", "headroom.sources.processes.*"):
        assert module in strict["module"] and module not in ignored["module"], module

# ------------------------------------------------------------------------------------ import circles
def _module_name(path: Path) -> str:
    parts = ("headroom", *path.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # (the tree does not change during a run; callers only read the graph)
def _import_graph() -> dict[str, set[str]]:
    """Module -> the agent modules it imports at run time (at the top or inside a function; ``if TYPE_CHECKING:``
    imports left out). ``from P import x`` is an edge to ``P.x`` when that is a module, else to ``P``."""
    names = {_module_name(p): p for p in modules()}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = parse(path)
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING") for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..y import z
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in names and t != name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.add(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


# Import circles that exist today outside the configuration's rooms, each to be ended by its room's owners: this
# list may only shrink (the test fails on a circle not listed here AND on a listed one that is gone or changed).
KNOWN_IMPORT_CIRCLES: dict[frozenset[str], str] = {}  # none left: the thresholds sit below analysis/bottleneck/ and
# analysis/serving.py (analysis/thresholds.py), the agent's health below exposition/server.py and status_api.py
# (exposition/health.py)


def test_no_import_circle_among_the_agent_modules():
    """A module that imports, directly or through others, a module that imports it back is a circle: which one
    finishes loading first depends on who is imported first. config.py -> exposition/server.py ->
    exposition/webconfig.py -> config.py was one (issue 31); schema.py now holds what they shared."""
    found = set(_cycles(_import_graph()))
    new = {c for c in found if c not in KNOWN_IMPORT_CIRCLES}
    gone = {c for c in KNOWN_IMPORT_CIRCLES if c not in found}
    assert not new, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in sorted(new, key=sorted))
    assert not gone, "no longer circles (take them off KNOWN_IMPORT_CIRCLES): " + "; ".join(
        " <-> ".join(sorted(c)) for c in sorted(gone, key=sorted))


def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    """The finder itself: a circle made by an import inside a function counts, one under TYPE_CHECKING does not."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    graph = _import_graph()
    assert "headroom.schema" in graph["headroom.config"]
    assert not graph["headroom.schema"] - {"headroom.safeio"}, graph["headroom.schema"]  # the bottom layer


def test_the_configuration_schema_is_one_bottom_module_the_validators_share():
    """schema.py holds what config.yaml's, the web config's, the profiles' and the scenarios' validators shared
    (reading YAML with positions and bounded aliases, FILE:LINE:COLUMN, the type words, "did you mean",
    parse_listen_address); it imports nothing of headroom but safeio, and config.py stays under 800 lines."""
    graph = _import_graph()
    assert graph["headroom.schema"] <= {"headroom.safeio"}, graph["headroom.schema"]
    for user in ("headroom.config", "headroom.exposition.webconfig", "headroom.workload.profiles.reader",
                 "headroom.simulation.scenario.parse"):
        assert "headroom.schema" in graph[user], user
    assert not {m for m in graph["headroom.config"] if m.startswith("headroom.exposition")}, graph["headroom.config"]
    assert "headroom.config" not in graph["headroom.exposition.webconfig"]
    for rel in ("config.py", "schema.py"):
        assert len((PKG / rel).read_text().splitlines()) <= 800, rel
    for path in (PKG / "config.py", PKG / "exposition" / "webconfig.py", PKG / "workload" / "profiles" / "reader.py"):
        assert "def _kind" not in path.read_text() and "difflib" not in path.read_text(), path  # schema.kind, closest


# ------------------------------------------------------------------------------------ Any, only where untyped
# Issue 31: ``Any`` only where a value is truly untyped, each such place commented. The classes of untyped values
# (JSON before its shape is checked, YAML before validation, a validated config section) are the aliases of
# jsontypes.py; every other ``Any`` in agent/headroom, simulation/ included (its ctypes driver names its C types in
# nvml_driver/nvml_h.py), has a comment on its line or the line above saying why.
PRAGMAS = ("noqa", "fmt:", "type:", "pragma")


def _comment(line: str) -> str:
    """The comment of one source line without its pragmas ('' when it has none)."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):  # a line of a multi-line string or bracket: scan its text
        tokens = []
        if "#" in line:
            return line[line.index("#") + 1:].strip()
    text = " ".join(t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT)
    for pragma in PRAGMAS:  # `# noqa: A002 (stdlib signature, its Any)` keeps what follows the pragma's code
        if text.startswith(pragma):
            text = text.split("(", 1)[1] if "(" in text else ""
    return text.strip()


def uncommented_any(path: Path) -> list[int]:
    """The lines of ``path`` that name ``typing.Any`` (outside its import) with no comment on that line, nor a
    comment line just above (another statement's trailing comment does not count)."""
    lines = path.read_text().splitlines()
    found: set[int] = set()
    for node in ast.walk(parse(path)):
        if (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any"):
            found.add(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.lineno == node.end_lineno \
                and "Any" in node.value:
            try:  # a quoted annotation ("dict[str, Any]")
                inner = ast.parse(node.value, mode="eval")
            except SyntaxError:
                continue
            if any(isinstance(n, ast.Name) and n.id == "Any" for n in ast.walk(inner)):
                found.add(node.lineno)
    return sorted(n for n in found
                  if not _comment(lines[n - 1]) and not (n > 1 and lines[n - 2].lstrip().startswith("#")
                                                          and _comment(lines[n - 2])))


def test_any_is_named_or_commented_where_a_value_is_untyped():
    bare = {rel: lines for p in modules() if (rel := p.relative_to(PKG).as_posix()) != "jsontypes.py"
            and (lines := uncommented_any(p))}
    assert not bare, "Any with no comment saying why (or a jsontypes alias): " + "; ".join(
        f"{rel}:{','.join(map(str, lines))}" for rel, lines in sorted(bare.items()))


def test_the_any_scan_finds_an_uncommented_any(tmp_path):
    """The scan itself: a bare Any fails, one commented on its line or the line above passes, a pragma is no
    comment, and neither the import nor a docstring's word counts."""
    module = tmp_path / "m.py"
    module.write_text('"""Any docstring."""\nfrom typing import Any\n\n\n'
                      "def f(x: Any) -> int:\n    return 1\n\n\n"
                      "def g(x: Any) -> int:  # Any: a pynvml handle, untyped\n    return 1\n\n\n"
                      "# the runtime's JSON, checked below\ny: 'dict[str, Any]' = {}\n"
                      "z: Any = None  # noqa: F841\n"
                      "w = 1  # a comment of another statement\nv: Any = None\n")
    assert uncommented_any(module) == [5, 15, 17]


def test_the_untyped_aliases_sit_at_the_bottom():
    """jsontypes.py imports nothing of headroom, so every room may name its aliases."""
    assert not {m for m in imports(PKG / "jsontypes.py") if m.startswith("headroom")}
