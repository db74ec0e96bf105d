"""What a verdict tells a reader beyond its name (issue 29, items 1-3): a candidate waiting out its hold is
shown as pending (its score, its age, when it is confirmed if it holds) rather than as "none"; every resource
comes with what to do about it, drawn from the verdict's own signals and linked to its runbook section, on the
page, in /api/v1/status, in the bottleneck_changed event and in the alerts; and "more sequences" / "more
context" come from the serving runtime's own KV cache where it reports one, with the memory model's estimate
beside it and the difference explained."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from headroom.analysis import remedies
from headroom.analysis.bottleneck import RESOURCES, Hysteresis
from headroom.analysis.headroom import CAPACITY_TOLERANCE, workload_headroom
from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals

# private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
from headroom.exposition.landing import _gpu_card, _workload_card
from headroom.exposition.render import Writer
from headroom.exposition.render.findings import _render_findings  # private: no public name
from headroom.exposition.status_api import status
from test_rules import RULES, alerts, runbook_anchors

from conftest import ROOT
from situations import SERVER, Gpu, Host, analyse, build_window
from situations import serving_source as serving
from situations.serving import RESERVED, VLLM

CAPPED = Gpu(util=0.97, power=699, reasons=("sw_power_cap",))


def _status(window, findings):
    snap = SimpleNamespace(sample=window[-1], findings=findings, interval=1.0, scenario=None)
    return status(SimpleNamespace(snapshot=snap, healthy=lambda: (True, "ok")))


# ------------------------------------------------------------------------------------------ 1. pending
def test_hysteresis_says_what_is_pending_how_long_it_held_and_how_long_it_must_still_hold():
    h = Hysteresis(hold=20)
    h.update("gpu_power", 100.0)
    assert h.pending(100.0) == ("gpu_power", 0.0, 20.0)
    h.update("gpu_power", 108.0)
    assert h.pending(108.0) == ("gpu_power", 8.0, 12.0)
    h.update("gpu_power", 120.0)  # confirmed: nothing pending any more
    assert h.primary == "gpu_power" and h.pending(120.0) is None
    h.update("none", 125.0)  # a return to nothing is pending too
    assert h.pending(130.0) == ("none", 5.0, 15.0)
    h.update("gpu_power", 131.0)  # back to the primary: the candidate is dropped
    assert h.pending(131.0) is None


def test_a_candidate_within_its_hold_is_pending_in_the_status_and_on_the_page_not_none():
    """The first seconds of `make demo`: the GPU is power capped (score 1.0) but the 20 s hold has not passed.
    The status and the page say "pending: gpu_power (score 1.00), confirmed in N s if it holds", never the
    green "Nothing limits this workload now"."""
    window = build_window(Host(), [CAPPED], seconds=12)
    findings = analyse(SERVER, window, hold=20)
    (wf,) = findings.workload_findings
    v = wf.verdict
    assert (v.primary, v.candidate, v.pending) == ("none", "gpu_power", "gpu_power")
    assert v.pending_seconds + v.confirm_in_seconds == pytest.approx(20.0)
    assert 8.0 <= v.pending_seconds <= 11.0
    doc = _status(window, findings)
    (w,) = doc["workloads"]
    assert w["primary_bottleneck"] == "none"
    pending = w["pending"]
    assert pending["resource"] == "gpu_power" and pending["score"] == 1.0
    assert pending["held_seconds"] == v.pending_seconds and pending["confirm_in_seconds"] == v.confirm_in_seconds
    assert "power cap active" in pending["evidence"]
    assert pending["remedy"]["runbook_url"].endswith("#bottleneck-gpu_power")
    assert pending["remedy"]["runbook_path"] == "/runbook#bottleneck-gpu_power"  # the agent's own copy
    (g,) = doc["gpus"]
    assert g["pending"]["resource"] == "gpu_power" and g["primary_bottleneck"] == "none"
    card = _workload_card(w)
    wait = f"{v.confirm_in_seconds:.0f}"
    assert f"pending: gpu_power (score 1.00), confirmed in {wait} s if it holds" in card
    assert "Nothing limits this workload now" not in card
    assert 'data-pending="gpu_power"' in card and 'class="pill none"' not in card
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS
    from headroom.exposition import charts

    assert "pending: gpu_power (score 1.00)" in _gpu_card(g, charts.gpu_series(window, window[-1].monotonic),
                                                          (window[-1].monotonic, 60.0), DEFAULT_THRESHOLDS)


def test_once_the_hold_passes_the_verdict_is_confirmed_and_nothing_is_pending():
    window = build_window(Host(), [CAPPED], seconds=30)
    findings = analyse(SERVER, window, hold=20)
    (wf,) = findings.workload_findings
    assert wf.verdict.primary == "gpu_power" and not wf.verdict.is_pending
    (w,) = _status(window, findings)["workloads"]
    assert w["pending"] is None and w["remedy"]["text"]


def test_the_exposition_carries_the_pending_candidate_and_its_age():
    window = build_window(Host(), [CAPPED], seconds=12)
    findings = analyse(SERVER, window, hold=20)
    w = Writer()
    _render_findings(w, findings)
    text = w.render().decode()
    age = findings.workload_findings[0].verdict.pending_seconds
    assert f'headroom_workload_bottleneck_pending_seconds{{workload="chat",resource="gpu_power"}} {age:g}\n' in text
    assert 'headroom_gpu_bottleneck_pending_seconds{gpu="0",' in text
    confirmed = Writer()
    _render_findings(confirmed, analyse(SERVER, build_window(Host(), [CAPPED], seconds=30), hold=20))
    assert "bottleneck_pending_seconds{" not in confirmed.render().decode(), "nothing pending: absent"


# ------------------------------------------------------------------------------------------ 2. remedies
def test_every_resource_has_a_remedy_and_a_runbook_section():
    anchors = runbook_anchors()
    for r in RESOURCES:
        found = remedies.remedy(r, remedies.Facts())
        assert found is not None and found.text, r
        assert found.runbook_url == f"{remedies.RUNBOOK_URL}#bottleneck-{r}"
        assert f"bottleneck-{r}" in anchors, f"docs/runbook.md has no section '### Bottleneck: {r}'"
    assert remedies.remedy("none", remedies.Facts()) is None


def _gpu(**kw) -> GpuSignals:
    return GpuSignals(index=kw.pop("index", 0), uuid="GPU-0", name="H100", up=True, **kw)


def test_the_power_remedy_quotes_the_limit_and_its_maximum_from_nvml():
    lowered = _gpu(power_cap_share=1.0, power_watts=399, power_limit_watts=400, power_limit_max_watts=700,
                   reason_shares={"sw_power_cap": 1.0})
    text = remedies.remedy("gpu_power", remedies.Facts(gpus=(lowered,))).text
    assert "capped at 400 W, below its 700 W maximum" in text and "`sudo nvidia-smi -i 0 -pl 700`" in text
    at_max = _gpu(power_cap_share=1.0, power_watts=699, power_limit_watts=700, power_limit_max_watts=700,
                  reason_shares={"sw_power_cap": 1.0})
    text = remedies.remedy("gpu_power", remedies.Facts(gpus=(at_max,))).text
    assert "already the board's maximum" in text and "-pl 700" not in text
    brake = _gpu(power_cap_share=1.0, power_watts=300, power_limit_watts=400, power_limit_max_watts=700,
                 reason_shares={"hw_power_brake_slowdown": 1.0})
    text = remedies.remedy("gpu_power", remedies.Facts(gpus=(brake,))).text
    assert "power supplies" in text and "-pl" not in text, "a power brake is the supply's, not the limit's"


def test_the_cpu_remedy_names_the_dataloader_settings_and_the_cgroup_quota():
    host = HostSignals(logical_cpus=32, cpu_busy=0.2)
    workers = WorkloadSignals(name="t", cores_used=3.9, cores_allowed=4.0, dataloader_workers=4, cpu_quota_cores=4.0,
                              cgroup_path="/system.slice/train.service")
    text = remedies.remedy("cpu", remedies.Facts(host=host, workload=workers)).text
    assert "`num_workers` towards 8" in text and "`pin_memory=True`" in text and "`persistent_workers=True`" in text
    assert "/system.slice/train.service" in text and "allows 4 cores (`cpu.max`)" in text
    unlimited = WorkloadSignals(name="t", cores_used=1.0, cores_allowed=32.0, busiest_process_cores=1.0,
                                busiest_process_pid=77)
    text = remedies.remedy("cpu", remedies.Facts(host=host, workload=unlimited)).text
    assert "pid 77" in text and "num_workers` > 0" in text and "cpu.max" not in text


@pytest.mark.parametrize(("size", "suggested"), [(64 * 2**20, 1), (8 * 2**30, 16)], ids=["docker default", "8 GiB"])
def test_the_shared_memory_remedy_sizes_shm_size_and_the_memory_emptydir(size, suggested):
    host = HostSignals(shm_mountpoint="/dev/shm", shm_size_bytes=size, shm_available_bytes=size // 50, shm_fill=0.98)
    text = remedies.remedy("shared_memory", remedies.Facts(host=host)).text
    assert f"`docker run --shm-size={suggested}g`" in text
    assert "`medium: Memory`" in text and f"`sizeLimit: {suggested}Gi`" in text


def test_the_kv_cache_remedy_says_what_the_device_allows():
    wf = analyse(VLLM, build_window(Host(), [RESERVED], seconds=30,
                                    extra=serving(usage=0.97, waiting=6, preemptions_per_second=0.05)))
    (chat,) = wf.workload_findings
    assert chat.verdict.primary == "kv_cache"
    text = chat.verdict.remedies["kv_cache"].text
    assert "raise `--gpu-memory-utilization` from 0.90" in text and "`--kv-cache-dtype fp8`" in text
    assert "8.00 GiB free on the fullest GPU" in text  # NVML: 80 GiB card, 72 GiB used
    assert "gpu_memory_utilization 0.95:" in text and "add a replica" in text
    cpu = SimpleNamespace(kind=SimpleNamespace(value="cpu-inference"), runtime=SimpleNamespace(name="vllm"))
    text = remedies.remedy("kv_cache", remedies.Facts(host=HostSignals(memory_available_bytes=64 * 2**30),
                                                      profile=cpu)).text
    assert "`--kv-cache-memory-bytes`" in text and "64.00 GiB of RAM available" in text


def test_a_confirmed_change_carries_its_remedy_into_the_log_event_and_the_status():
    window = build_window(Host(), [CAPPED], seconds=30)
    from headroom.analysis.pipeline import Analysis
    from headroom.config import check_config_text

    analysis = Analysis(check_config_text(SERVER + "\nanalysis:\n  hold: 5s\n", "c.yaml"))
    changes = []
    for i in range(1, len(window) + 1):
        _, f = analysis(window[:i])
        changes += f.changes
    assert [(c.entity, c.after) for c in changes] == [("gpu", "gpu_power"), ("workload", "gpu_power")]
    for c in changes:
        assert "at its 700 W limit" in c.remedy, c.remedy
        assert c.runbook_url.endswith("#bottleneck-gpu_power") and c.runbook_path == "/runbook#bottleneck-gpu_power"
    (w,) = _status(window, f)["workloads"]
    assert w["remedy"]["text"] == changes[-1].remedy  # the same words in the log event and the status
    assert w["remedy"]["runbook_url"] == remedies.runbook_url("gpu_power")  # GitHub, for readers off the host
    # the page links the agent's own /runbook, relative (works air-gapped and behind a proxy's path prefix)
    assert '<a class="runbook" href="runbook#bottleneck-gpu_power">' in _workload_card(w)


def test_the_sampler_logs_the_remedy_with_bottleneck_changed(tmp_path):
    """The real agent's log: bottleneck_changed names what to do and where the runbook says more."""
    (tmp_path / "s.yaml").write_text("gpus:\n  - name: NVIDIA H100 80GB HBM3\n    memory_total: 80GiB\n"
                                     "    power_limit: 700\n    utilization: 0.97\n    power: 699\n"
                                     "    clock_events: {sw_power_cap: true}\n")
    (tmp_path / "c.yaml").write_text("agent:\n  sample_interval: 250ms\nanalysis:\n  short_window: 2s\n  hold: 500ms\n")
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--config.file", str(tmp_path / "c.yaml"),
                        "--simulate", str(tmp_path / "s.yaml"), "--samples", "16", "--log.format", "json", "--log.level", "info"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    events = [json.loads(x) for x in r.stderr.splitlines() if '"bottleneck_changed"' in x]
    assert events, r.stderr
    assert all(e["runbook_url"].endswith("#bottleneck-gpu_power") and "700 W" in e["remedy"] for e in events)
    assert all(e["runbook_path"] == "/runbook#bottleneck-gpu_power" for e in events)


def test_every_alert_says_what_to_do_and_links_its_runbook_section():
    for name, rule in alerts().items():
        ann = rule["annotations"]
        assert ann.get("remedy", "").strip(), f"{name} has no remedy annotation"
        assert ann["runbook_url"].endswith("#" + name.lower())


# alerts that fire for one resource: their remedy is that resource's remedies.SUMMARY
ALERT_RESOURCES = {"HeadroomWorkloadKvCacheBound": "kv_cache", "HeadroomGpuPowerThrottling": "gpu_power",
                   "HeadroomGpuThermalThrottling": "gpu_thermal", "HeadroomGpuMemoryFillingUp": "gpu_memory",
                   "HeadroomWorkloadVramHeadroomExhausting": "gpu_memory",
                   "HeadroomSharedMemoryAlmostFull": "shared_memory", "HeadroomHostMemoryPressure": "host_memory"}


def test_the_resource_alerts_give_the_remedy_of_the_resource_they_fire_for():
    """HeadroomWorkloadGpuStarved fires with a resource label: its remedy annotation gives, for each resource it
    matches, that resource's remedy (remedies.SUMMARY: one source for the agent and the alerts); the alerts of
    one resource give its remedy."""
    rules = yaml.safe_load((RULES / "headroom-alerts.yml").read_text())
    by = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    starved = by["HeadroomWorkloadGpuStarved"]
    matched = re.search(r'resource=~"([^"]+)"', starved["expr"]).group(1).split("|")
    for resource in matched:
        assert f'eq $labels.resource "{resource}" }}}}{remedies.SUMMARY[resource]}{{{{' in \
            starved["annotations"]["remedy"], resource
    for alert, resource in ALERT_RESOURCES.items():
        assert by[alert]["annotations"]["remedy"] == remedies.SUMMARY[resource], alert
    assert "--gpu-memory-utilization" in by["HeadroomWorkloadKvCacheBound"]["annotations"]["remedy"]
    assert "nvidia-smi -pl" in by["HeadroomGpuPowerThrottling"]["annotations"]["remedy"]


# ------------------------------------------------------------------------------------------ 3. capacity
def test_more_sequences_and_context_come_from_the_runtime_with_the_estimate_beside_it():
    """vLLM reports 65 536 KV tokens, half used: more sequences at 8 192 tokens = 32 768 // 8 192 = 4, more context
    at the declared 8 sequences = 32 768 // 8 = 4 096, basis runtime; the memory model's own figures stay beside
    them, and its far larger capacity is explained (the utilisation it would take, the version it assumes)."""
    wf = analyse(VLLM, build_window(Host(), [RESERVED], seconds=30, extra=serving(usage=0.5, running=4)))
    h = wf.workload_findings[0].headroom
    assert (h.sequences, h.context_tokens, h.basis) == (4, 4096, "runtime")
    assert (h.kv_capacity_tokens, h.kv_free_tokens) == (65536.0, 32768.0)
    assert h.estimate_basis == "memory_model" and h.estimate_sequences is not None
    assert h.estimate_kv_capacity_tokens > 65536 * (1 + CAPACITY_TOLERANCE)
    assert "The runtime reports 65 536 KV tokens" in h.explanation
    assert re.search(r"gpu_memory_utilization 0\.\d\d, not the 0\.90 declared", h.explanation), h.explanation
    assert "version: the model assumes vLLM" in h.explanation
    doc = _status(build_window(Host(), [RESERVED], seconds=2), wf)
    (w,) = doc["workloads"]
    assert w["headroom"]["basis"] == "runtime" and w["headroom"]["explanation"] == h.explanation
    card = _workload_card(w)
    assert "4 (from the runtime&#x27;s KV cache)" in card and "32 768 of 65 536 tokens" in card
    assert "memory model&#x27;s estimate" in card and 'class="capacity-note' in card


def test_without_the_runtime_the_memory_model_leads_and_says_so():
    wf = analyse(VLLM, build_window(Host(), [RESERVED], seconds=30, extra=serving(up=False)))
    h = wf.workload_findings[0].headroom
    assert h.basis == "memory_model" and h.kv_capacity_tokens is None
    assert (h.sequences, h.context_tokens) == (h.estimate_sequences, h.estimate_context_tokens)


def _est(tokens, **kw):
    base = dict(kv_bytes_per_token=131072, context=8192, concurrency=3, kv_capacity_tokens=tokens,
                max_concurrency_at_max_context=tokens // 8192, max_context_at_concurrency=tokens // 3,
                gpu_memory_bytes=80 * 2**30, runtime_report={"budget_bytes": int(0.9 * 80 * 2**30),
                                                              "runtime": "vLLM 0.17-0.19 (V1)", "block_size": 16,
                                                              "activation_bytes": 2**30, "non_torch_bytes": 2**30})
    return SimpleNamespace(**{**base, **kw})


def _profile():
    return SimpleNamespace(kind=SimpleNamespace(value="inference"), context=SimpleNamespace(max=8192), concurrency=3,
                           runtime=SimpleNamespace(name="vllm", is_vllm=True, gpu_memory_utilization=0.9, version=None),
                           kv_cache_precision=None)


def _runtime(capacity, usage):
    return SimpleNamespace(up=True, capacity_tokens=capacity, usage=usage)


def test_a_difference_within_ten_percent_is_not_explained_and_one_beyond_names_the_utilisation():
    close = workload_headroom(_profile(), WorkloadSignals(name="chat"), [], HostSignals(), _est(26000), 87.0,
                              _runtime(27200.0, 0.5))
    assert close.basis == "runtime" and close.explanation == ""
    far = workload_headroom(_profile(), WorkloadSignals(name="chat"), [], HostSignals(), _est(13072), 87.0,
                            _runtime(27200.0, 0.5))
    # 14 128 tokens x 128 KiB = 1.72 GiB more per GPU, 2.2 % of 80 GiB: 0.90 + 0.02 = 0.92
    assert "gpu_memory_utilization 0.92, not the 0.90 declared" in far.explanation
    assert "1.72 GiB more KV memory per GPU" in far.explanation


def test_a_negative_memory_model_figure_is_explained_as_a_shortfall():
    h = workload_headroom(_profile(), WorkloadSignals(name="chat"), [], HostSignals(), _est(13072), 87.0,
                          _runtime(27200.0, 0.59))
    assert h.estimate_sequences == 13072 // 8192 - 3 == -2
    assert h.sequences == int(27200 * 0.41 // 8192) == 1 and h.basis == "runtime"
    assert "The memory model's -2 more sequences is a shortfall" in h.explanation
    assert "holds 1 of the 3 sequences of 8 192 tokens declared" in h.explanation


def test_the_headroom_metrics_say_their_basis():
    wf = analyse(VLLM, build_window(Host(), [RESERVED], seconds=30, extra=serving(usage=0.5, running=4)))
    w = Writer()
    _render_findings(w, wf)
    text = w.render().decode()
    assert 'headroom_workload_headroom_sequences{workload="chat",basis="runtime"} 4\n' in text
    assert 'headroom_workload_headroom_context_tokens{workload="chat",basis="runtime"} 4096\n' in text


def test_snapshot_of_the_demo_says_what_is_pending_and_the_capacity_from_the_runtime():
    """`headroom snapshot` takes 2 samples: it can never pass the 20 s hold, so it says the verdict is pending
    and what it would be (stderr, and the JSON's "pending"); the demo's capacity comes from its runtime."""
    r = subprocess.run([sys.executable, "-m", "headroom", "snapshot", "--simulate", "demo", "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert any(n.startswith("workload chat: pending gpu_power (score 1.00)") and re.search(r"--samples \d+", n)
               for n in doc["pending"]), doc["pending"]
    assert "headroom: snapshot: workload chat: pending gpu_power" in r.stderr
    chat = next(w for w in doc["findings"]["workload_findings"] if w["name"] == "chat")
    room = chat["headroom"]
    assert room["basis"] == "runtime" and room["sequences"] >= 0 and room["context_tokens"] > 0
    # the demo's declared load fits (test_scenario_fit) and its runtime's KV cache is what the memory model computes:
    # the two figures agree, so there is no difference to explain and no minus sign
    assert room["estimate_sequences"] >= 0 and room["estimate_context_tokens"] >= 0
    assert room["estimate_kv_capacity_tokens"] == pytest.approx(room["kv_capacity_tokens"], rel=0.10)
    assert room["explanation"] == ""


def test_a_remedy_that_cannot_be_worked_out_costs_its_words_not_the_verdict(monkeypatch):
    def broken(facts):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setitem(remedies.REMEDIES, "gpu_power", broken)
    findings = analyse(SERVER, build_window(Host(), [CAPPED], seconds=30), hold=5)
    (wf,) = findings.workload_findings
    assert wf.verdict.primary == "gpu_power" and not findings.errors
    fix = wf.verdict.remedies["gpu_power"]
    assert fix.text == "see the runbook (the remedy could not be worked out: ZeroDivisionError)"
    assert fix.runbook_url.endswith("#bottleneck-gpu_power")


@pytest.mark.parametrize(("resource", "facts", "quoted"), [
    ("gpu_thermal", remedies.Facts(gpus=(_gpu(thermal_share=1.0, temperature_celsius=88, temperature_peak_celsius=89,
                                              thermal_limit_celsius=87),
                                         _gpu(index=1, temperature_celsius=60))),
     ("GPU 0 peaked at 89 °C against its 87 °C limit", "GPU 1 runs 28 °C cooler", "fan")),
    ("pcie", remedies.Facts(gpus=(_gpu(pcie_ratio=0.9, pcie_bytes_per_second=14e9, pcie_capability_bytes_per_second=15.75e9,
                                       pcie_link=(3, 16, 5, 16)),)),
     ("14.0 of 15.8 GB/s", "link gen 3 x16 of gen 5 x16 possible", "`DataLoader(pin_memory=True)`")),
    ("disk_io", remedies.Facts(host=HostSignals(disk_device="nvme0n1", disk_busy=0.98, disk_queue=12.0),
                               workload=WorkloadSignals(name="t", io_bytes_per_second=850e6)),
     ("nvme0n1 busy 98 %, queue depth 12.0", "850 MB/s", "local NVMe")),
    ("network", remedies.Facts(host=HostSignals(net_device="eth0", net_ratio=0.97, net_bytes_per_second=12.1e9)),
     ("eth0 at 96.8 Gbit/s, 97 % of its link", "NCCL_IB_HCA")),
    ("nvlink", remedies.Facts(gpus=(_gpu(nvlink_ratio=0.9, nvlink_bytes_per_second=405e9,
                                         nvlink_capability_bytes_per_second=450e9),)),
     ("NVLink 405 of 450 GB/s", "`nvidia-smi nvlink -s -i 0`")),
    ("host_memory", remedies.Facts(host=HostSignals(memory_total_bytes=256 * 2**30, memory_available_bytes=3 * 2**30,
                                                    psi={"memory.full": 0.25})),
     ("3.00 GiB of 256.00 GiB RAM available", "25 % of the time", "`ps aux --sort=-rss | head`")),
    ("gpu_memory", remedies.Facts(gpus=(_gpu(memory_used_bytes=79 * 2**30, memory_total_bytes=80 * 2**30,
                                             memory_used_ratio=79 / 80, memory_growth_bytes_per_second=2**20),),
                                  profile=SimpleNamespace(kind=SimpleNamespace(value="training"))),
     ("GPU 0 VRAM 79.00 GiB of 80.00 GiB used", "keeps growing", "activation checkpointing")),
    ("gpu_compute", remedies.Facts(gpus=(_gpu(busy=0.97, sm_active=0.3),)),
     ("busy 97 % but SMs active only 30 %", "CUDA graphs")),
], ids=lambda x: x if isinstance(x, str) else "")
def test_each_remedy_quotes_its_own_evidence(resource, facts, quoted):
    text = remedies.remedy(resource, facts).text
    for part in quoted:
        assert part in text, (part, text)
