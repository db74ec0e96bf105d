"""A busy GPU is not necessarily computing (issue 26, class 1). NVML's utilization counts a kernel that waits on a
transfer or a collective as busy; GPM's activity ratios (SMs, tensor cores, DRAM) say whether the GPU computes.
A busy GPU that does not compute, beside a link carrying steady traffic, is bound by that link (pcie, nvlink, the
network against its own level); bursts, a computing GPU or an idle one name no link. Without GPM the rules keep
the saturation tests, the PCIe discount for a busy GPU needs the power draw of a GPU that computes, and the
evidence says the verdict rests on utilization alone."""

from __future__ import annotations

import pytest

from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, score_gpu
from headroom.analysis.signals import HostSignals, gpu_signals, host_signals
from headroom.analysis.window import steady_share

from situations import DISTRIBUTED, Gpu, Host, analyse, build_window, chat

GB = 1e9
T = DEFAULT_THRESHOLDS


def gpu_verdict(g: Gpu, seconds: int = 20):
    window = build_window(Host(), [g], seconds=seconds)
    return score_gpu(gpu_signals(window, 30.0)[0], HostSignals(), T)


def trainer(host: Host, gpus: list[Gpu]):
    window = build_window(host, gpus)
    findings = analyse(DISTRIBUTED, window, gpus_of={"trainer": tuple(range(len(gpus)))})
    (wf,) = findings.workload_findings
    return wf.verdict


# ------------------------------------------------------------------------------------------------- signals
@pytest.mark.parametrize(("rates", "expected"), [
    ([5.0] * 10, 1.0),  # steady
    ([10.0, 10.0, 10.0, 0, 0, 0, 0, 0, 0, 0], 0.3),  # a 30 % duty cycle
    ([4.0, 6.0, 5.0, 5.5], 1.0),  # jitter around its own level is steady
    ([0.0, 0.0, 0.0], None),  # no traffic at all
    ([3.0], None),  # one interval says nothing
])
def test_steady_share_is_judged_against_the_links_own_level(rates, expected):
    assert steady_share(rates) == (pytest.approx(expected) if expected is not None else None)


def test_the_host_network_steadiness_comes_from_its_counters_whatever_its_speed():
    steady = host_signals(build_window(Host(nic=(2 * GB, None)), [Gpu()]), 30.0)
    assert steady.net_ratio is None  # no speed: no line rate to compare with
    assert steady.net_busiest_device == "eth0" and steady.net_busiest_bytes_per_second == pytest.approx(2 * GB, rel=0.01)
    assert steady.net_steady == 1.0
    bursts = host_signals(build_window(Host(nic=(2 * GB, None), nic_duty=0.3), [Gpu()]), 30.0)
    assert bursts.net_steady == pytest.approx(0.3, abs=0.06)


def test_gpm_tensor_and_dram_activity_and_pcie_steadiness_reach_the_signals():
    (g,) = gpu_signals(build_window(Host(), [Gpu(sm_active=0.2, tensor_active=0.1, dram_active=0.7, pcie=8 * GB,
                                                 pcie_duty=0.5)]), 30.0)
    assert (g.tensor_active, g.dram_active) == (pytest.approx(0.1), pytest.approx(0.7))
    assert g.pcie_steady == pytest.approx(0.5, abs=0.05)
    assert g.pcie_mean_bytes_per_second == pytest.approx(4 * GB, rel=0.05)


# ---------------------------------------------------------------------------------------------------- pcie
def test_a_busy_gpu_with_idle_sms_beside_steady_pcie_traffic_is_pcie_bound():
    v = gpu_verdict(Gpu(util=0.97, power=250.0, sm_active=0.12, pcie=10 * GB))  # a third of the link
    assert v.candidate == "pcie" and v.scores["pcie"] >= 0.5
    assert "busy, not computing" in v.evidence["pcie"] and "PCIe carries 10.0 GB/s" in v.evidence["pcie"]
    assert v.scores["gpu_compute"] == 0.0


def test_pcie_bursts_beside_a_waiting_gpu_are_not_steady_traffic():
    v = gpu_verdict(Gpu(util=0.97, power=250.0, sm_active=0.12, pcie=10 * GB, pcie_duty=0.3))
    assert v.scores["pcie"] < 0.5 and v.candidate != "pcie"


def test_busy_sms_beside_heavy_pcie_are_compute_not_the_link():
    v = gpu_verdict(Gpu(util=0.98, power=620.0, sm_active=0.9, pcie=24 * GB))
    assert v.candidate == "gpu_compute" and v.scores["pcie"] == 0.0
    assert "it computes" in v.evidence["pcie"]


def test_memory_bound_kernels_count_as_computing():
    """Few SMs active but DRAM at its bandwidth: the GPU computes (memory-bound), the link is not its limit."""
    v = gpu_verdict(Gpu(util=0.97, power=450.0, sm_active=0.3, dram_active=0.9, pcie=10 * GB))
    assert v.candidate == "gpu_compute" and v.scores["pcie"] < 0.5
    assert "DRAM 90 %" in v.evidence["gpu_compute"]


def test_without_gpm_saturated_pcie_on_a_busy_gpu_at_low_power_is_pcie():
    """The PCIe discount for a busy GPU needs evidence of compute: without GPM, its power draw."""
    low = gpu_verdict(Gpu(util=0.97, power=120.0, pcie=28 * GB))  # 17 % of its power limit
    assert low.candidate == "pcie" and low.scores["pcie"] == 1.0
    assert "utilization alone" in low.evidence["pcie"] and "pcie explains gpu_compute" in low.evidence["pcie"]
    high = gpu_verdict(Gpu(util=0.97, power=650.0, pcie=28 * GB))  # drawing what a computing GPU draws
    assert high.scores["pcie"] == 0.0 and high.candidate == "gpu_compute"


def test_without_gpm_steady_pcie_below_saturation_keeps_todays_verdict_and_says_it_is_weaker():
    v = gpu_verdict(Gpu(util=0.97, power=120.0, pcie=10 * GB))
    assert v.scores["pcie"] == 0.0 and v.candidate == "gpu_compute"
    assert "utilization alone" in v.evidence["gpu_compute"]


# ------------------------------------------------------------------------------------------------- nvlink
def test_a_busy_gpu_with_idle_sms_beside_steady_nvlink_traffic_is_nvlink_bound():
    v = gpu_verdict(Gpu(util=0.97, power=250.0, sm_active=0.12, nvlink=150 * GB))  # a third of 450 GB/s
    assert v.candidate == "nvlink" and v.scores["nvlink"] >= 0.5
    assert "busy, not computing" in v.evidence["nvlink"]


def test_nvlink_bursts_or_busy_sms_name_no_link():
    assert gpu_verdict(Gpu(util=0.97, power=250.0, sm_active=0.12, nvlink=150 * GB, nvlink_duty=0.3)
                       ).scores["nvlink"] < 0.5
    assert gpu_verdict(Gpu(util=0.98, power=620.0, sm_active=0.9, nvlink=150 * GB)).candidate == "gpu_compute"


# ------------------------------------------------------------------------------------------------ network
WAITING = dict(util=0.97, power=250.0, sm_active=0.1)


def test_ranks_busy_but_not_computing_beside_steady_tcp_traffic_wait_on_the_network():
    """A TCP transport reaches a fraction of the link: 40 % of line rate, and a NIC without a known speed."""
    for nic in ((5 * GB, 12.5 * GB), (2 * GB, None)):
        v = trainer(Host(nic=nic), [Gpu(**WAITING), Gpu(**WAITING)])
        assert v.primary == "network", (nic, v.scores, v.evidence["network"])
        assert "saturation is not the test" in v.evidence["network"]
        assert "busy, not computing" in v.evidence["network"]


def test_network_bursts_a_compute_bound_trainer_and_a_hung_collective_name_no_network():
    bursts = trainer(Host(nic=(5 * GB, 12.5 * GB), nic_duty=0.3), [Gpu(**WAITING)])
    assert bursts.scores["network"] < 0.5 and "bursts, not steady traffic" in bursts.evidence["network"]
    computing = trainer(Host(nic=(3 * GB, 12.5 * GB)), [Gpu(util=0.98, power=640.0, sm_active=0.9)] * 2)
    assert computing.primary == "gpu_compute" and computing.scores["network"] == 0.0
    hung = trainer(Host(nic=(0.0, 12.5 * GB)), [Gpu(util=1.0, power=70.0, sm_active=0.01)] * 2)
    assert hung.primary == "none" and hung.scores["network"] == 0.0


def test_an_idle_gpu_beside_steady_network_traffic_is_idle():
    v = trainer(Host(nic=(1 * GB, 12.5 * GB)), [Gpu(util=0.02, power=90.0, sm_active=0.01)])
    assert v.primary == "none" and v.scores["network"] == 0.0


def test_without_gpm_busy_ranks_beside_unsaturated_traffic_keep_todays_verdict_and_say_so():
    v = trainer(Host(nic=(5 * GB, 12.5 * GB)), [Gpu(util=0.97, power=250.0)] * 2)
    assert v.scores["network"] == 0.0
    assert "utilization alone" in v.evidence["network"]


def test_the_remedies_fit_a_link_bound_gpu():
    """The network remedy names an interface without a known speed by its rate; the pcie one says what offload costs."""
    net = trainer(Host(nic=(2 * GB, None)), [Gpu(**WAITING)])
    assert net.primary == "network" and "eth0 at 16.0 Gbit/s (its speed unknown)" in net.remedies["network"].text
    window = build_window(Host(), [Gpu(util=0.97, power=250.0, sm_active=0.12, pcie=10 * GB)])
    (wf,) = analyse("\nworkloads:\n" + chat(), window).workload_findings
    assert wf.verdict.primary == "pcie" and "--cpu-offload-gb" in wf.verdict.remedies["pcie"].text


def test_a_socket_transport_s_pcie_traffic_is_the_network_s_doing():
    """NCCL over sockets bounces every byte through host memory: PCIe carries what the NIC does. Both links
    steady beside GPUs that do not compute tie, and the network (the cause) takes the verdict."""
    v = trainer(Host(nic=(11 * GB, 12.5 * GB)), [Gpu(pcie=11 * GB, **WAITING)] * 2)
    assert v.scores["pcie"] >= 0.5 and v.scores["network"] >= 0.5
    assert v.primary == "network" and "network explains" in v.evidence["network"]
