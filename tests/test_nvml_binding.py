"""The pynvml binding the agent finds: an old version, a broken one, or the legacy ``pynvml`` 11.x package
shadowing nvidia-ml-py. Each run is a real ``headroom snapshot`` in a child process with that binding first
on its path; the NVML collector says what is wrong and every other collector reads on, without a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from conftest import ROOT

BINDING = Path(pynvml.__file__).read_text()


def snapshot(path: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": f"{path}{os.pathsep}{ROOT / 'agent'}"}
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", "demo", "--format", "json",
                        "--sample.interval", "200ms"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)["sources"], r.stderr


def others_read(sources: dict) -> None:
    """Every other collector was built and ran; none failed because of the binding. (Whether each read its
    source in time on a loaded machine is not this test's business: a host collector can time out.)"""
    assert set(sources) == {"nvml", "cpu", "memory", "shm", "disk", "net", "infiniband", "processes", "serving", "identity", "agent", "probe"}
    for name, s in sources.items():
        assert name == "nvml" or s["ok"] or "nvml" not in (s["error"] or "").lower(), (name, s["error"])


def test_a_binding_without_newer_constants_still_runs_the_gpu_collector(tmp_path):
    """nvidia-ml-py before 12.560 has no NVML_ERROR_GPU_NOT_FOUND nor NVML_VALUE_TYPE_UNSIGNED_SHORT: reading
    them at import killed the whole agent (even with --no-collector.nvml). They are ABI numbers: use them."""
    text = re.sub(r"(?m)^(NVML_ERROR_GPU_NOT_FOUND|NVML_VALUE_TYPE_UNSIGNED_SHORT)\s*=.*$", "", BINDING)
    assert not re.search(r"(?m)^NVML_ERROR_GPU_NOT_FOUND\s*=", text)  # (already absent on the oldest binding)
    (tmp_path / "pynvml.py").write_text(text)
    sources, _ = snapshot(tmp_path)
    others_read(sources)
    assert sources["nvml"]["ok"], sources["nvml"]["error"]


def test_a_binding_that_fails_to_import_takes_down_only_the_gpu_collector(tmp_path):
    (tmp_path / "pynvml.py").write_text("raise OSError('half-installed wheel')\n")
    sources, _ = snapshot(tmp_path)
    others_read(sources)
    assert not sources["nvml"]["ok"]
    assert "cannot import pynvml (install nvidia-ml-py>=" in sources["nvml"]["error"]
    assert "half-installed wheel" in sources["nvml"]["error"]


def test_the_legacy_pynvml_package_shadowing_nvidia_ml_py_is_named_with_the_fix(tmp_path):
    """The legacy ``pynvml`` 11.x distribution installs a package of the same name with an old copy of the
    binding (its process struct does not match current drivers): refuse it and say how to fix it."""
    package = tmp_path / "pynvml"
    package.mkdir()
    (package / "nvml.py").write_text(BINDING)
    (package / "__init__.py").write_text("from .nvml import *\n")
    dist = tmp_path / "pynvml-11.5.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pynvml\nVersion: 11.5.0\n")
    sources, _ = snapshot(tmp_path)
    others_read(sources)
    assert not sources["nvml"]["ok"]
    error = sources["nvml"]["error"]
    assert "legacy 'pynvml' 11.5.0 package is installed and shadows nvidia-ml-py" in error
    assert "pip uninstall pynvml" in error


@pytest.mark.parametrize("version", ["12.0.0", "13.0.1"])
def test_the_pynvml_shim_that_depends_on_nvidia_ml_py_is_fine(tmp_path, version):
    dist = tmp_path / f"pynvml-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pynvml\nVersion: {version}\n")
    sources, _ = snapshot(tmp_path)
    assert sources["nvml"]["ok"], sources["nvml"]["error"]


def test_a_collector_module_that_fails_to_import_is_reported_not_fatal(monkeypatch):
    from headroom import sources

    sources.load_all()  # the real modules register into the real registry first, never into the copy below
    # private: the collector registry itself: an unknown module is what is tested
    monkeypatch.setattr(sources, "_MODULES", (*sources._MODULES, "no_such_collector"))
    monkeypatch.setattr(sources, "REGISTRY", dict(sources.REGISTRY))
    monkeypatch.setattr(sources, "IMPORT_ERRORS", {})
    registry = sources.load_all()
    assert "cpu" in registry and "ModuleNotFoundError" in sources.IMPORT_ERRORS["no_such_collector"]
    with pytest.raises(sources.CollectorError, match="collector failed to load: ModuleNotFoundError"):
        registry["no_such_collector"](sources.SourceContext()).collect()
