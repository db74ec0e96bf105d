"""The pipeline flows one way: these import rules keep the rooms separate (architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "agent" / "headroom"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
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
    assert importers <= {"sources/nvml/binding.py", "simulation/nvml_driver.py"}, importers


# sources/nvml/: one purpose a module, and what each may import of the others (the layers point one way:
# binding <- decode and threads <- collector; binding names decode's _Layout only for type checking)
NVML_MODULES = {
    "__init__.py": {"binding", "collector", "decode"},
    "binding.py": set(),
    "decode.py": {"binding"},
    "threads.py": {"binding"},
    "collector.py": {"binding", "decode", "threads"},
}


def _runtime_imports(path: Path) -> set[str]:
    """The modules ``path`` imports, leaving out those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
               for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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
        siblings &= set(n.removesuffix(".py") for n in NVML_MODULES)
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
        for node in ast.walk(ast.parse(path.read_text())):
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
            if p.name == "serving.py" and m == "prometheus_client.parser":
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
        "from headroom.sources import load_all, serving\n"
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


# analysis/bottleneck/: one purpose a module (the package docstring says what each holds), each under 800 lines; the
# vocabulary (thresholds, evidence) <- the verdict and the rules (gpu, starvation, neighbours) <- scoring, which runs
# them; __main__ prints the thresholds table of docs/analysis.md
BOTTLENECK_MODULES = {
    "__init__.py": {"evidence", "gpu", "neighbours", "scoring", "starvation", "thresholds", "verdict"},
    "__main__.py": {"thresholds"},
    "thresholds.py": set(),
    "evidence.py": set(),
    "verdict.py": {"evidence"},
    "gpu.py": {"evidence", "thresholds"},
    "starvation.py": {"evidence", "thresholds"},
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
