"""The rendered-text caches of exposition/render.py: a series' last line is reused while its value and labels
do not change (a Renderer's series, and groups for Writer.add_many). They must never serve stale text and never
grow past their bounds, whatever the labels churn."""

from __future__ import annotations

import math
import random
from types import MappingProxyType, SimpleNamespace

import pytest

from headroom.exposition import render
from headroom.exposition.render import UnknownMetric, Writer
from headroom.exposition.render import findings as render_findings  # private names: no public one says them
from headroom.exposition.render import text as render_text  # private names: no public one says them
from headroom.exposition.render import writer as render_writer  # private names: no public one says them

# values that compare equal but render differently (10**15 and 1e15), equal values of different types (1, 1.0,
# True), NaN (never equal to itself), both zeros, absent
VALUES = (1, 1.0, True, False, 0, 0.0, -0.0, 10**15, 1e15, 2.5, math.nan, math.inf, None, 7, 7.25)
EXTRAS = ("", ',namespace="a",pod="p1"', ',namespace="a",pod="p1,p2"')
ROW = ("headroom_gpu_power_watts", "headroom_gpu_temperature_celsius", "headroom_gpu_remapped_rows",
       "headroom_gpu_remapped_rows")
ROW_TAILS = (None, None, "correctable", "uncorrectable")


def _tick(rng: random.Random, extras: dict[str, str], workloads: list[str], cache: render.Renderer | None = None
          ) -> bytes:
    w = Writer(cache)
    w.gpu_extra.update(extras)
    for gpu in ("0", "1"):
        ids = (gpu, f"GPU-{gpu}")
        w.add("headroom_gpu_utilization_ratio", rng.choice(VALUES), *ids)
        w.add_many(ROW, [rng.choice(VALUES) for _ in ROW], ids, ROW_TAILS)
        reasons = rng.sample(("idle", "sw_power_cap", "hw_slowdown"), rng.randint(0, 3))
        w.add_many(("headroom_gpu_clock_event_active",) * len(reasons), [rng.choice(VALUES) for _ in reasons],
                   ids, tuple(reasons))
    for name in workloads:
        w.add("headroom_workload_processes", rng.choice(VALUES), name)
        w.add_many(("headroom_workload_threads", "headroom_workload_cpu_seconds_total"),
                   (rng.choice(VALUES), rng.choice(VALUES)), (name,), (None, "user"))
    w.add("headroom_samples_total", rng.choice(VALUES))
    return w.render()


def _fresh(monkeypatch: pytest.MonkeyPatch, rng: random.Random, extras: dict[str, str], workloads: list[str]
           ) -> bytes:
    """What a tick renders with every cache empty (the reference the cached rendering must equal)."""
    with monkeypatch.context() as m:
        # private: the renderer's label-text cache: its bound is what is tested
        m.setattr(render_text, "_LABEL_TEXT", {})
        return _tick(rng, extras, workloads, render.Renderer())


def test_cached_lines_equal_a_fresh_rendering_tick_after_tick(monkeypatch):
    """Values change, change type while staying equal, turn NaN or absent; identity labels come and go: each
    tick's text equals the text rendered with empty caches."""
    render.clear_caches()
    rng = random.Random(15)
    workloads = ["w0", "w1"]
    for tick in range(400):
        extras = {"GPU-0": rng.choice(EXTRAS), "GPU-1": rng.choice(EXTRAS)}
        if tick % 7 == 0:
            workloads = [*workloads[1:], f"w{tick}"]  # churn
        state = rng.getstate()
        cached = _tick(rng, extras, workloads)
        rng.setstate(state)
        assert cached == _fresh(monkeypatch, rng, extras, workloads), tick


@pytest.mark.parametrize(("first", "then", "text"), [(1e15, 10**15, "1000000000000000"), (10**15, 1e15, "1000000000000000.0"),
                                                     (math.nan, math.nan, "NaN"), (2.5, 2.5, "2.5")])
def test_a_value_equal_to_the_last_renders_as_itself(first, then, text):
    render.clear_caches()
    for add in (lambda w, v: w.add("headroom_gpu_power_watts", v, "0", "GPU-0"),
                lambda w, v: w.add_many(ROW[:1], (v,), ("0", "GPU-0"))):
        for value in (first, then):
            w = Writer()
            add(w, value)
            last = w.render().decode().splitlines()[-1]
        assert last == f'headroom_gpu_power_watts{{gpu="0",uuid="GPU-0"}} {text}'


def test_identity_labels_follow_the_writer_not_the_cache():
    render.clear_caches()
    for extra in ('', ',pod="a"', ',pod="b"', ''):
        w = Writer()
        if extra:
            w.gpu_extra["GPU-0"] = extra
        w.add_many(ROW[:2], (300.0, 60), ("0", "GPU-0"))
        w.add("headroom_gpu_utilization_ratio", 0.5, "0", "GPU-0")
        lines = w.render().decode().splitlines()
        assert f'headroom_gpu_power_watts{{gpu="0",uuid="GPU-0"{extra}}} 300' in lines
        assert f'headroom_gpu_temperature_celsius{{gpu="0",uuid="GPU-0"{extra}}} 60' in lines
        assert f'headroom_gpu_utilization_ratio{{gpu="0",uuid="GPU-0"{extra}}} 0.5' in lines


def test_caches_stay_within_their_bounds_while_labels_churn(monkeypatch):
    """Every tick a new workload (a pod ending, another starting): each cache keeps at most two generations of
    its bound instead of growing, and what they render stays right across the swaps."""
    render.clear_caches()
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(render_writer, "_SERIES_MAX", 40)
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(render_writer, "_GROUPS_MAX", 30)
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(render_text, "_LABEL_TEXT_MAX", 50)
    rng = random.Random(3)
    workloads = [f"w{i}" for i in range(5)]
    sizes = set()
    for tick in range(300):
        workloads = [*workloads[1:], f"pod-{tick}"]
        state = rng.getstate()
        cached = _tick(rng, {}, workloads)
        rng.setstate(state)
        assert cached == _fresh(monkeypatch, rng, {}, workloads), tick
        # private: the renderer's process-wide caches: their bounds are what is tested
        c = render_writer._PROCESS
        # private: the renderer's label-text cache: its bound is what is tested
        assert len(c.series) <= 40 and len(c.series_old) <= 40 and len(render_text._LABEL_TEXT) <= 50
        assert len(c.groups) <= 30 and len(c.groups_old) <= 30
        sizes.add(len(c.groups_old))
    assert max(sizes) == 30  # a full generation was set aside, so the bound was what held the cache
    built = []
    for fn in ("_new_series", "_new_group"):
        real = getattr(render_writer, fn)
        monkeypatch.setattr(render_writer, fn, lambda *args, real=real: built.append(args) or real(*args))
    # private: the renderer's process-wide caches: their bounds are what is tested
    c = render_writer._PROCESS
    for cache in ("series", "groups"):  # a swap just now: the last tick's entries all in the old generation
        setattr(c, cache + "_old", {**getattr(c, cache + "_old"), **getattr(c, cache)})
        setattr(c, cache, {})
    rng.setstate(state)
    assert _tick(rng, {}, workloads) == cached  # the last tick again: moved back, none built anew
    assert built == []


def test_add_many_checks_each_series_like_add_even_when_cached():
    render.clear_caches()
    for _ in range(2):  # the second time from the cache
        w = Writer()
        w.add_many(ROW[:1], (1,), ("0", "GPU-0"))
        with pytest.raises(UnknownMetric):
            w.add_many(("headroom_made_up_metric",), (1,))
        with pytest.raises(ValueError, match="takes labels"):
            w.add_many(ROW[:1], (1,), ("0",))
        with pytest.raises(ValueError, match="1 series but 2 values"):
            w.add_many(ROW[:1], (1, 2), ("0", "GPU-0"))
        with pytest.raises(ValueError, match="tail labels"):
            w.add_many(ROW[:2], (1, 2), ("0", "GPU-0"), ("x",))
        with pytest.raises(ValueError, match="GPUs GPU-0 and GPU-1"):
            w.add_many(("headroom_gpu_up",) * 2, (1, 1), (), (("0", "GPU-0"), ("1", "GPU-1")))
    w = Writer()
    w.add_many(("headroom_shm_used_bytes",), (5,), (["unhashable"],))  # rendered from its str(), never cached
    assert 'headroom_shm_used_bytes{mountpoint="[\'unhashable\']"} 5' in w.render().decode()


def test_each_workload_value_lands_in_its_own_series():
    """_render_workloads and _render_findings pass a workload's values as groups: each distinct value must come
    out in its own series (a value passed in the wrong place would show here)."""
    render.clear_caches()
    cgroup = SimpleNamespace(cpu_user_seconds_total=11.5, cpu_system_seconds_total=12.5, memory_bytes=13,
                             pressure_some_avg10={"memory": 0.14, "cpu": 0.15})
    measured = SimpleNamespace(processes=1, threads=2, cpu_user_seconds_total=3.5, cpu_system_seconds_total=4.5,
                               resident_memory_bytes=5, read_bytes_total=6, written_bytes_total=7, cgroup=cgroup,
                               sched_wait_seconds_total=28.5, sched_run_seconds_total=29.5, cpus_allowed=30)
    st = SimpleNamespace(name="w", kind="training", model="m", precision="bf16", runtime="torch", source="declared",
                         job="j", team="t", measured=measured, dataloader_workers=8,
                         gpus=(SimpleNamespace(index=0, memory_used_bytes=9, utilization_ratio=0.10),),
                         expected_components=MappingProxyType({"weights": 16, "kv_cache": 17}),
                         expected_peak_bytes=18, gpu_memory_capacity_bytes=19)
    from headroom.analysis.headroom import WorkloadHeadroom

    headroom = WorkloadHeadroom(gpu_memory_bytes=20, sequences=21, context_tokens=22, cpu_cores=23.5,
                                host_memory_bytes=24, shared_memory_bytes=25, power_watts=26.5, thermal_celsius=27.5,
                                basis="memory_model")
    w = Writer()
    # private: one family of series; render_exposition needs a whole snapshot
    render_findings._render_workloads(w, [st])
    from headroom.analysis.bottleneck import Verdict

    wf = SimpleNamespace(name="w", verdict=Verdict(scores={}, evidence={}, candidate="none"), headroom=headroom)
    # private: one family of series; render_exposition needs a whole snapshot
    render_findings._render_findings(w, SimpleNamespace(gpu_findings=(), workload_findings=(wf,), host=None))
    series = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in w.render().decode().splitlines()
              if not line.startswith("#") and "bottleneck" not in line}
    w_ = 'workload="w"'
    assert series == {
        f'headroom_workload_info{{{w_},kind="training",model="m",precision="bf16",runtime="torch",source="declared"}}': "1",
        f'headroom_workload_fleet_info{{{w_},team="t",training_job="j"}}': "1",
        f"headroom_workload_processes{{{w_}}}": "1", f"headroom_workload_threads{{{w_}}}": "2",
        f'headroom_workload_cpu_seconds_total{{{w_},mode="user"}}': "3.5",
        f'headroom_workload_cpu_seconds_total{{{w_},mode="system"}}': "4.5",
        f"headroom_workload_resident_memory_bytes{{{w_}}}": "5", f"headroom_workload_read_bytes_total{{{w_}}}": "6",
        f"headroom_workload_written_bytes_total{{{w_}}}": "7",
        f"headroom_workload_cpu_wait_seconds_total{{{w_}}}": "28.5",
        f"headroom_workload_cpu_run_seconds_total{{{w_}}}": "29.5", f"headroom_workload_cpus_allowed{{{w_}}}": "30",
        f'headroom_workload_cgroup_cpu_seconds_total{{{w_},mode="user"}}': "11.5",
        f'headroom_workload_cgroup_cpu_seconds_total{{{w_},mode="system"}}': "12.5",
        f"headroom_workload_cgroup_memory_bytes{{{w_}}}": "13",
        f'headroom_workload_cgroup_pressure_ratio{{{w_},resource="cpu"}}': "0.15",
        f'headroom_workload_cgroup_pressure_ratio{{{w_},resource="memory"}}': "0.14",
        f"headroom_workload_dataloader_workers{{{w_}}}": "8",
        f'headroom_workload_gpu_memory_used_bytes{{{w_},gpu="0"}}': "9",
        f'headroom_workload_gpu_utilization_ratio{{{w_},gpu="0"}}': "0.1",
        f'headroom_workload_memory_expected_bytes{{{w_},component="weights"}}': "16",
        f'headroom_workload_memory_expected_bytes{{{w_},component="kv_cache"}}': "17",
        f"headroom_workload_gpu_memory_expected_peak_bytes{{{w_}}}": "18",
        f"headroom_workload_gpu_memory_capacity_bytes{{{w_}}}": "19",
        f"headroom_workload_headroom_gpu_memory_bytes{{{w_}}}": "20", f'headroom_workload_headroom_sequences{{{w_},basis="memory_model"}}': "21",
        f'headroom_workload_headroom_context_tokens{{{w_},basis="memory_model"}}': "22", f"headroom_workload_headroom_cpu_cores{{{w_}}}": "23.5",
        f"headroom_workload_headroom_host_memory_bytes{{{w_}}}": "24",
        f"headroom_workload_headroom_shared_memory_bytes{{{w_}}}": "25",
        f"headroom_workload_headroom_power_watts{{{w_}}}": "26.5",
        f"headroom_workload_headroom_thermal_celsius{{{w_}}}": "27.5",
    }


def test_each_renderer_keeps_its_own_caches():
    """Two samplers in one process (a benchmark's pair: one with pods, one without) each render with their own
    Renderer: neither evicts nor relabels the other's series."""
    render.clear_caches()
    a, b = render.Renderer(), render.Renderer()
    for tick in range(3):
        for cache, extra in ((a, ',pod="p"'), (b, "")):
            w = Writer(cache)
            w.gpu_extra["GPU-0"] = extra
            w.add_many(ROW[:1], (300.0 + tick,), ("0", "GPU-0"))
            w.add("headroom_gpu_utilization_ratio", 0.5, "0", "GPU-0")
            lines = w.render().decode().splitlines()
            assert f'headroom_gpu_utilization_ratio{{gpu="0",uuid="GPU-0"{extra}}} 0.5' in lines
            assert f'headroom_gpu_power_watts{{gpu="0",uuid="GPU-0"{extra}}} {300 + tick}' in lines
    assert len(a.series) == len(b.series) == 1 and len(a.groups) == len(b.groups) == 1
    assert a.series[("headroom_gpu_utilization_ratio", ("0", "GPU-0"))][3] == ',pod="p"'  # rendered once, kept
    assert b.series[("headroom_gpu_utilization_ratio", ("0", "GPU-0"))][3] == ""
    # private: the renderer's process-wide caches: their bounds are what is tested
    assert not render_writer._PROCESS.series and not render_writer._PROCESS.groups


def _status(name: str, processes: int, cpu: float, gpu_util: float) -> object:
    from headroom.workload.attribution import WorkloadGpu, WorkloadStatus

    cgroup = SimpleNamespace(cpu_user_seconds_total=cpu, cpu_system_seconds_total=cpu / 2, memory_bytes=2**30,
                             pressure_some_avg10=None)
    gpu = WorkloadGpu(index=0, uuid="GPU-0", memory_used_bytes=2**33, utilization_ratio=gpu_util,
                      memory_total_bytes=2**37, declared=False, attributed=True)
    return WorkloadStatus(name=name, kind="pod", model="", precision="", runtime="", processes=processes,
                          measured=None, gpus=(gpu,), source="auto", cgroup=cgroup)


def _workloads_text(cache: render.Renderer, statuses: list) -> bytes:
    w = Writer(cache)
    # private: one family of series; render_exposition needs a whole snapshot
    render_findings._render_workloads(w, statuses)
    return w.render()


def test_an_unchanged_status_writes_last_ticks_lines_and_a_new_one_its_own(monkeypatch):
    """The analysis hands back the same status object while a workload's inputs do not change: its lines are
    last tick's. A new object, even under the same name, is rendered anew, and each tick equals a rendering
    with empty caches; only the last tick's workloads are kept."""
    import dataclasses

    render.clear_caches()
    cache = render.Renderer()
    a, b = _status("ns/a", 1, 1.5, 0.25), _status("ns/b", 2, 2.5, 0.5)
    ticks = [[a, b], [a, dataclasses.replace(b, processes=3)], [a, _status("ns/b", 3, 7.25, 0.75)],
             [_status("ns/a", 1, 1.5, 0.25), _status("ns/c", 1, 0.5, 0.125)], [b]]
    for statuses in ticks:
        assert _workloads_text(cache, statuses) == _workloads_text(render.Renderer(), statuses)
        assert set(cache.workloads) == {st.name for st in statuses}
    text = _workloads_text(cache, [dataclasses.replace(b, processes=9)]).decode()
    assert 'headroom_workload_processes{workload="ns/b"} 9' in text  # same name, new object: not replayed

    def no_rendering(*args, **kwargs):
        raise AssertionError("an unchanged status was rendered again")

    same = [b]
    _workloads_text(cache, same)
    monkeypatch.setattr(Writer, "add_many", no_rendering)
    replayed = _workloads_text(cache, same).decode()
    assert 'headroom_workload_processes{workload="ns/b"} 2' in replayed
    assert 'headroom_workload_gpu_utilization_ratio{workload="ns/b",gpu="0"} 0.5' in replayed
