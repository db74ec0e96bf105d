"""The NVML collector over the real pynvml binding and the driver stand-in, exactly as the product runs it.

Every call site the collector uses gets every error class it handles; fallbacks, accumulators, the XID
and PCIe threads, backoff and recovery are checked against a controlled clock.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

import pynvml
import pytest
from structlog.testing import capture_logs

from headroom import samples
from headroom.exposition.catalog import BY_NAME
from headroom.samples import GpuSample, NvmlSample, to_jsonable
from headroom.simulation import ManualClock, Scenario, load_scenario, parse_scenario
from headroom.simulation.nvml_driver import NvmlDriver
from headroom.sources import CollectorError, SourceContext, load_all

# the tests below read (and one patches) private names of the modules that own them: the timings, capacities,
# decoders and layouts they check have no public name
from headroom.sources.nvml import NvmlCollector, binding, decode, processes, threads
from headroom.sources.nvml import collector as collector_module

GIB = 2**30
# filled in by background threads, so not compared tick by tick
THREAD_FIELDS = {"pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second", "xid_errors_total"}
IDENTITY = {"index", "uuid", "name", "pci_bus_id", "minor_number", "up", "error"}


@dataclass
class Rig:
    scenario: Scenario
    clock: ManualClock
    lib: NvmlDriver
    collector: NvmlCollector

    def tick(self, advance: float = 1.0) -> NvmlSample:
        self.clock.advance(advance)
        return self.collector.collect()

    def calls_on(self, gpu: int, *names: str) -> int:
        """NVML calls made for ``gpu`` (only ``names`` if given), leaving out the helper threads' calls."""
        skip = {"nvmlDeviceGetPcieThroughput", "nvmlDeviceRegisterEvents"}
        calls = dict(self.lib.calls)  # one copy under the GIL: the XID and PCIe threads count calls meanwhile
        return sum(n for (name, g), n in calls.items() if g == gpu and name not in skip and (not names or name in names))


@pytest.fixture
def make(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Rig]:
    # the XID thread waits on NVML in slices of _EVENT_WAIT_MS and close() joins it: shorter slices keep
    # each test's teardown at milliseconds instead of half a second
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(threads, "_EVENT_WAIT_MS", 20)
    rigs: list[Rig] = []

    def build(source: str = "golden", **settings: object) -> Rig:
        scenario = parse_scenario(source) if "\n" in source else load_scenario(source)
        clock = ManualClock()
        lib = scenario.nvml_library(clock=clock)
        ctx = SourceContext(scenario=scenario, monotonic=clock, settings={"pcie_poll_interval": 60.0, **settings})
        rig = Rig(scenario, clock, lib, NvmlCollector(ctx))
        rigs.append(rig)
        return rig

    yield build
    for rig in rigs:
        rig.lib.release()
        rig.collector.close()


def present(gpu: GpuSample) -> set[str]:
    """Names of the fields this GPU reported (not None, not empty), identity and thread fields aside."""
    out = set()
    for f in fields(GpuSample):
        value = getattr(gpu, f.name)
        if f.name in IDENTITY | THREAD_FIELDS or value is None or value in ((), {}):
            continue
        out.add(f.name)
    return out


def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


# (calls failing together, gpu, fields that must go absent). Golden GPU 0: workstation card with fan,
# memory temperature and clock events; GPU 1: MIG-enabled A100.
def _binding_calls(*names: str) -> tuple[str, ...]:
    """The entry points among ``names`` that this binding version calls at all (older nvidia-ml-py has no
    nvmlDeviceGetTemperatureV and no nvmlDeviceGetComputeRunningProcesses_v2 function)."""
    optional = {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetComputeRunningProcesses_v2"}
    return tuple(n for n in names if n not in optional or hasattr(pynvml, n))


CALL_SITES = [
    (("nvmlDeviceGetUtilizationRates",), 0, {"utilization_ratio", "memory_utilization_ratio", "busy_seconds_total"}),
    (("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"), 0,
     {"memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes"}),
    (("nvmlDeviceGetPowerUsage",), 0, {"power_watts"}),
    (("nvmlDeviceGetEnforcedPowerLimit",), 0, {"power_limit_watts"}),
    (_binding_calls("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), 0, {"temperature_celsius"}),
    (("nvmlDeviceGetFieldValues",), 0,
     {"memory_temperature_celsius", "energy_joules_total", "ecc_uncorrected_volatile_total", "ecc_uncorrected_aggregate_total",
      "pcie_tx_bytes_total", "pcie_rx_bytes_total"}),
    (("nvmlDeviceGetFieldValues",), 1,
     {"energy_joules_total", "ecc_uncorrected_volatile_total", "ecc_uncorrected_aggregate_total", "remapped_rows_correctable",
      "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure", "pcie_tx_bytes_total", "pcie_rx_bytes_total",
      "nvlink_links", "nvlink_version"}),  # the NVLink link count and counters are field values too
    (("nvmlDeviceGetClockInfo",), 0, {"sm_clock_hertz", "memory_clock_hertz"}),
    (("nvmlDeviceGetMaxClockInfo",), 0, {"sm_clock_max_hertz", "memory_clock_max_hertz"}),
    (("nvmlDeviceGetPerformanceState",), 0, {"performance_state"}),
    (("nvmlDeviceGetFanSpeed",), 0, {"fan_speed_ratio"}),
    (("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), 0,
     {"clock_events_active", "clock_events_seconds_total"}),
    (("nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons"), 0, set()),
    (("nvmlDeviceGetCurrPcieLinkGeneration",), 0, {"pcie_link_generation"}),
    (("nvmlDeviceGetCurrPcieLinkWidth",), 0, {"pcie_link_width"}),
    (("nvmlDeviceGetMaxPcieLinkGeneration",), 0, {"pcie_link_max_generation"}),
    (("nvmlDeviceGetMaxPcieLinkWidth",), 0, {"pcie_link_max_width"}),
    (_binding_calls("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"), 0,
     {"processes", "processes_stale"}),
    (("nvmlDeviceGetTemperatureThreshold",), 0,
     {"temperature_max_operating_celsius", "temperature_slowdown_celsius", "temperature_shutdown_celsius",
      "memory_temperature_max_operating_celsius"}),
    (("nvmlDeviceGetMigMode",), 1, {"mig_enabled", "mig_instances"}),
    (("nvmlDeviceGetMaxMigDeviceCount",), 1, {"mig_instances"}),
    (("nvmlDeviceGetMigDeviceHandleByIndex",), 1, {"mig_instances"}),
    (("nvmlDeviceGetGpuInstanceId",), 1, {"mig_instances"}),
    # the instances stay without them: only their profile and placement are absent (checked on their own below)
    (("nvmlDeviceGetGpuInstanceById",), 1, set()),
    (("nvmlGpuInstanceGetInfo",), 1, set()),
]  # fmt: skip
SITE_IDS = [f"{calls[0]}-gpu{gpu}" for calls, gpu, _ in CALL_SITES]


# --------------------------------------------------------------------------------- happy path
def test_registered_as_nvml_and_on_by_default():
    registry = load_all()
    assert registry["nvml"] is NvmlCollector and NvmlCollector.default_enabled


def test_golden_host_reads_in_base_units(make):
    rig = make()
    sample = rig.collector.collect()
    assert sample.up and sample.simulated
    assert (sample.driver_version, sample.nvml_version, sample.cuda_driver_version) == ("550.54.15", "12.550.54.15", 12040)
    g0, g1 = sample.gpus
    assert (g0.index, g0.uuid, g0.name, g0.pci_bus_id) == (
        0, "GPU-00000000-0000-4000-8000-000000000000", "NVIDIA RTX 6000 Ada Generation", "00000000:01:00.0")
    assert (g0.minor_number, g1.minor_number) == (0, 1)  # nvmlDeviceGetMinorNumber: how DRA names GPUs
    assert (g0.memory_total_bytes, g0.memory_used_bytes, g0.memory_reserved_bytes) == (48 * GIB, 40 * GIB, 256 * 2**20)
    assert g0.memory_free_bytes == 48 * GIB - 40 * GIB - 256 * 2**20
    assert (g0.utilization_ratio, g0.memory_utilization_ratio) == (0.8, 0.5)
    assert (g0.power_watts, g0.power_limit_watts, g0.temperature_celsius, g0.memory_temperature_celsius) == (299, 300, 71, 78)
    assert (g0.sm_clock_hertz, g0.sm_clock_max_hertz, g0.memory_clock_max_hertz) == (2.1e9, 2.505e9, 10.001e9)
    assert (g0.performance_state, g0.fan_speed_ratio) == (2, 0.65)
    assert g0.clock_events_active["sw_power_cap"] is True and g0.clock_events_active["hw_slowdown"] is False
    assert set(g0.clock_events_active) == {
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting"}
    assert (g0.pcie_link_generation, g0.pcie_link_width, g0.pcie_link_max_generation, g0.pcie_link_max_width) == (4, 16, 4, 16)
    assert [(p.pid, p.used_memory_bytes) for p in g0.processes] == [(1001, 30 * GIB), (1002, None)]
    assert g0.mig_enabled is None and g0.mig_instances == ()
    assert g0.ecc_uncorrected_aggregate_total == 0 and g0.remapped_rows_correctable is None  # declared unsupported
    # GPU 1: MIG enabled, passive cooling, no memory sensor
    assert g1.utilization_ratio is None and g1.busy_seconds_total is None  # NVML has no utilization with MIG on
    assert g1.fan_speed_ratio is None and g1.memory_temperature_celsius is None
    assert (g1.ecc_uncorrected_aggregate_total, g1.remapped_rows_correctable, g1.remapped_rows_pending) == (2, 1, False)
    assert g1.mig_enabled is True
    assert [(m.gpu_instance_id, m.compute_instance_id, m.uuid, m.memory_used_bytes, m.memory_total_bytes) for m in g1.mig_instances] == [
        (1, 0, "MIG-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", 20 * GIB, 40 * GIB),
        (2, 0, "MIG-bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb", 10 * GIB, 40 * GIB),
    ]  # fmt: skip


def test_temperature_thresholds_are_read_once_and_kept(make):
    """The GPU's own limits (nvidia-smi's "GPU Max Operating Temp", "Slowdown", "Shutdown", "Memory Max
    Operating Temp"): the analysis judges heat against them; they do not change, so one call each."""
    rig = make()
    g0 = rig.collector.collect().gpus[0]
    assert (g0.temperature_max_operating_celsius, g0.temperature_slowdown_celsius, g0.temperature_shutdown_celsius,
            g0.memory_temperature_max_operating_celsius) == (87, 89, 92, 95)
    calls = rig.calls_on(0, "nvmlDeviceGetTemperatureThreshold")
    assert calls == 4
    assert rig.tick().gpus[0].temperature_slowdown_celsius == 89
    assert rig.calls_on(0, "nvmlDeviceGetTemperatureThreshold") == calls


def test_energy_is_reported_in_joules(make):
    rig = make()
    first = rig.collector.collect().gpus[0].energy_joules_total
    assert rig.tick(10).gpus[0].energy_joules_total - first == pytest.approx(2990.0)  # 299 W for 10 s


# --------------------------------------------------------------------- NOT_SUPPORTED and friends
@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND"])
@pytest.mark.parametrize(("calls", "gpu", "absent"), CALL_SITES, ids=SITE_IDS)
def test_an_unsupported_query_leaves_exactly_its_fields_absent(make, calls, gpu, absent, error):
    healthy = make()
    healthy.collector.collect()
    baseline = healthy.tick()
    rig = make()
    for call in calls:
        rig.lib.inject(call, gpu=gpu, error=error)
    rig.collector.collect()
    sample = rig.tick()
    assert absent <= present(baseline.gpus[gpu]), "the healthy host must report these fields"
    assert present(baseline.gpus[gpu]) - present(sample.gpus[gpu]) == absent
    assert present(sample.gpus[gpu]) <= present(baseline.gpus[gpu])
    assert sample.gpus[gpu].up and sample.gpus[1 - gpu].up
    assert present(sample.gpus[1 - gpu]) == present(baseline.gpus[1 - gpu])
    # remembered as unsupported: not asked again next tick
    before = rig.calls_on(gpu, *calls)
    rig.tick()
    assert rig.calls_on(gpu, *calls) == before


def test_an_unsupported_query_is_probed_again_after_ten_minutes(make):
    rig = make()
    rig.lib.inject("nvmlDeviceGetFanSpeed", gpu=0, error="NOT_SUPPORTED")
    rig.collector.collect()
    rig.lib.clear()
    assert rig.tick(300).gpus[0].fan_speed_ratio is None
    assert rig.lib.calls[("nvmlDeviceGetFanSpeed", 0)] == 1
    assert rig.tick(301).gpus[0].fan_speed_ratio == 0.65


def test_a_field_that_fails_alone_is_absent_alone(make):
    rig = make()
    rig.lib.inject("NVML_FI_DEV_MEMORY_TEMP", gpu=0, error="NOT_SUPPORTED")
    g0 = rig.collector.collect().gpus[0]
    assert g0.memory_temperature_celsius is None
    assert g0.energy_joules_total is not None and g0.ecc_uncorrected_volatile_total == 0


def test_an_unsupported_field_leaves_the_prepared_read_and_is_asked_again_after_the_reprobe(make):
    """The per-tick field read reuses one prepared array; a field answering NOT_SUPPORTED leaves it (the
    others stay) and comes back at the re-probe, as every other unsupported query does."""
    rig = make()
    rig.lib.inject("NVML_FI_DEV_MEMORY_TEMP", gpu=0, error="NOT_SUPPORTED")
    assert rig.tick().gpus[0].memory_temperature_celsius is None
    rig.lib.clear()
    for _ in range(3):
        g0 = rig.tick().gpus[0]
        assert g0.memory_temperature_celsius is None and g0.energy_joules_total is not None
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    assert rig.tick(binding._REPROBE_UNSUPPORTED).gpus[0].memory_temperature_celsius == 78


def test_field_values_read_the_same_through_the_binding_wrapper(make):
    """Without the binding's function lookup (a binding that renamed it), the per-tick field read goes
    through pynvml.nvmlDeviceGetFieldValues and reads the same values."""
    asked: list[int] = []

    class WithoutLookup:
        def __getattr__(self, name: str) -> object:
            if name == "_nvmlGetFunctionPointer":
                raise AttributeError(name)
            if name == "nvmlDeviceGetFieldValues":
                return lambda handle, ids: asked.append(len(ids)) or pynvml.nvmlDeviceGetFieldValues(handle, ids)
            return getattr(pynvml, name)

    fast = make().tick().gpus[0]
    rig = make()
    rig.collector.lib = WithoutLookup()
    slow = rig.tick().gpus[0]
    # private: the decoder's own tables: the table itself is what is checked
    assert max(asked) >= len(decode._FIELDS)  # the per-tick read went through the binding's wrapper
    keys = ("memory_temperature_celsius", "energy_joules_total", "ecc_uncorrected_volatile_total",
            "remapped_rows_correctable", "remapped_rows_pending", "pcie_tx_bytes_total", "pcie_rx_bytes_total")
    assert [getattr(slow, k) for k in keys] == [getattr(fast, k) for k in keys]
    assert slow.memory_temperature_celsius == 78


def test_the_field_decoder_reads_every_value_type_as_the_binding_declares_it():
    """The one-pass decoder takes offsets and formats from the binding's structs: each nvmlValueType_t
    (double, unsigned int, unsigned long, unsigned long long, signed long long, signed int, unsigned short)
    reads what the ctypes union member holds, and a failed entry reads no value."""
    values = {0: -2.5, 1: 4_000_000_000, 2: 2**40 + 1, 3: 2**63 + 5, 4: -(2**40), 5: -7, 6: 65_000}
    array = (pynvml.c_nvmlFieldValue_t * (len(values) + 1))()
    for entry, (vtype, v) in zip(array, values.items(), strict=False):
        entry.fieldId, entry.valueType, entry.nvmlReturn = 100 + vtype, vtype, 0
        if hasattr(entry.value, decode.VALUE_MEMBER[vtype]):
            setattr(entry.value, decode.VALUE_MEMBER[vtype], v)
        else:  # usVal, which bindings before 12.560 do not declare: the driver still writes it (nvml.h)
            ctypes.c_ushort.from_buffer(entry.value).value = v
    array[len(values)].nvmlReturn = 3  # NOT_SUPPORTED
    # private: the decoder's own tables: the table itself is what is checked
    assert decode._FIELD_DECODER.ready
    # private: the decoder's own tables: the table itself is what is checked
    decoded = decode._FIELD_DECODER.decode(array, len(array))
    assert decoded == [(0, v) for v in values.values()] + [(3, None)]
    # private: the decoder's own tables: the table itself is what is checked
    by_getter = decode._decode_fields(array)  # the binding's own union members, where it declares them
    declared = [i for i, vtype in enumerate(values) if hasattr(array[0].value, decode.VALUE_MEMBER[vtype])]
    assert [by_getter[i] for i in declared] == [decoded[i] for i in declared]


def test_the_field_decoder_reads_narrow_values_whatever_the_rest_of_the_union_holds():
    """The prepared array is reused every tick: a narrow member (unsigned int, unsigned short, signed int)
    written over bytes a wider value left there reads as the member alone."""
    array = (pynvml.c_nvmlFieldValue_t * 3)()
    for entry, (vtype, member, v) in zip(array, ((1, "uiVal", 7), (6, None, 9), (5, "siVal", -3)), strict=True):
        entry.value.ullVal = 0xFFFFFFFFFFFFFFFF  # last tick's wide value
        entry.valueType, entry.nvmlReturn = vtype, 0
        if member is not None:
            setattr(entry.value, member, v)
        else:
            ctypes.c_ushort.from_buffer(entry.value).value = v
    # private: the decoder's own tables: the table itself is what is checked
    assert decode._FIELD_DECODER.decode(array, 3) == [(0, 7), (0, 9), (0, -3)]


# each DeviceFields member and the binding's name of the field it must hold (nvml.h NVML_FI_DEV_*)
BINDING_FIELD = {
    "memory_temperature": "NVML_FI_DEV_MEMORY_TEMP", "energy_millijoules": "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "ecc_dbe_volatile": "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe_aggregate": "NVML_FI_DEV_ECC_DBE_AGG_TOTAL",
    "remapped_correctable": "NVML_FI_DEV_REMAPPED_COR", "remapped_uncorrectable": "NVML_FI_DEV_REMAPPED_UNC",
    "remapped_pending": "NVML_FI_DEV_REMAPPED_PENDING", "remapped_failure": "NVML_FI_DEV_REMAPPED_FAILURE",
    "pcie_tx_bytes": "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "pcie_rx_bytes": "NVML_FI_DEV_PCIE_COUNT_RX_BYTES",
}  # fmt: skip


def test_each_device_field_is_the_value_of_its_own_field_id_whatever_the_order_read():
    """The per-tick fields are named, each looked up by its field id (the binding's NVML_FI_DEV_* number, where
    this binding has the constant: the PCIe byte counters are absent before 12.560), not by its place in a list."""
    assert set(decode.DeviceFields._fields) == set(BINDING_FIELD)
    assert decode.device_fields({}) == decode.NO_FIELDS == decode.DeviceFields()
    for name, constant in BINDING_FIELD.items():
        fid = decode._FIELD_IDS[name]  # private: the table itself is what is checked
        assert fid == getattr(pynvml, constant, fid), (name, constant)
        # private: the decoder's own tables: the table itself is what is checked
        got = {(other, 0): -other for other in decode._FIELDS if other != fid}
        got[(fid, 0)] = "mine"
        got[(fid, 1)] = "another scope"  # an NVLink-style scoped read of the same id is not the device's value
        fields = decode.device_fields(dict(reversed(got.items())))
        assert getattr(fields, name) == "mine"
        # private: the decoder's own tables: the table itself is what is checked
        assert sorted(v for v in fields if v != "mine") == sorted(-f for f in decode._FIELDS if f != fid)


def test_a_transient_error_is_none_this_tick_and_retried_next(make):
    rig = make()
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error="TIMEOUT", calls=1)
    assert rig.collector.collect().gpus[0].power_watts is None
    assert rig.tick().gpus[0].power_watts == 299


# ----------------------------------------------------------------------------------- fallbacks
@pytest.mark.parametrize("error", ["FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"])
@pytest.mark.parametrize(
    ("missing", "used"),
    [
        ((), "nvmlDeviceGetComputeRunningProcesses_v3"),
        (("nvmlDeviceGetComputeRunningProcesses_v3",), "nvmlDeviceGetComputeRunningProcesses_v2"),
    ],
)
def test_processes_fall_back_from_v3_to_v2(make, missing, used, error):
    rig = make()
    for call in missing:
        rig.lib.inject(call, error=error)
    rig.collector.collect()
    first = rig.calls_on(0, *missing)
    calls = rig.lib.calls[(used, 0)]
    sample = rig.tick()
    if _binding_calls(used):
        assert [p.pid for p in sample.gpus[0].processes] == [1001, 1002]
        # one call a tick into the array kept for this GPU (the binding's wrapper asks the size first: two)
        assert rig.lib.calls[(used, 0)] - calls == 1
    else:  # a binding without the _v2 function: nothing to fall back to
        assert sample.gpus[0].processes == () and rig.lib.calls[(used, 0)] == 0
    assert not missing or rig.calls_on(0, *missing) == first  # the missing versions are not tried every tick


def test_a_driver_without_the_v2_and_v3_process_calls_has_no_process_list(make):
    """The binding's unversioned nvmlDeviceGetComputeRunningProcesses calls the _v3 entry point: there is
    no v1 fallback through nvidia-ml-py, so such a driver reports no processes rather than wrong ones."""
    rig = make()
    for call in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
        rig.lib.inject(call, error="FUNCTION_NOT_FOUND")
    sample = rig.tick()
    assert sample.gpus[0].processes == ()
    assert rig.lib.calls[("nvmlDeviceGetComputeRunningProcesses", 0)] == 0
    assert sample.gpus[0].memory_used_bytes is not None  # the rest of the GPU reads on


def test_memory_falls_back_from_v2_to_v1_without_reserved(make):
    rig = make()
    rig.lib.inject("nvmlDeviceGetMemoryInfo_v2", error="FUNCTION_NOT_FOUND")
    g0 = rig.collector.collect().gpus[0]
    assert g0.memory_reserved_bytes is None
    assert g0.memory_used_bytes == 40 * GIB + 256 * 2**20  # v1 "used" includes the reserved part
    assert g0.memory_total_bytes == 48 * GIB


def test_throttle_reasons_stand_in_for_clock_event_reasons(make):
    rig = make()
    rig.lib.inject("nvmlDeviceGetCurrentClocksEventReasons", error="FUNCTION_NOT_FOUND")
    rig.lib.inject("nvmlDeviceGetSupportedClocksEventReasons", error="FUNCTION_NOT_FOUND")
    g0 = rig.collector.collect().gpus[0]
    assert g0.clock_events_active["sw_power_cap"] is True
    assert rig.lib.calls[("nvmlDeviceGetCurrentClocksThrottleReasons", 0)] == 1


def test_reasons_the_gpu_does_not_support_are_left_out():
    text = "gpus:\n  - {name: x, memory_total: 1GiB, power_limit: 100, supported_clock_events: [gpu_idle, sw_power_cap]}\n"
    scenario = parse_scenario(text)
    clock = ManualClock()
    scenario.nvml_library(clock=clock)
    collector = NvmlCollector(SourceContext(scenario=scenario, monotonic=clock))
    try:
        assert set(collector.collect().gpus[0].clock_events_active) == {"gpu_idle", "sw_power_cap"}
    finally:
        collector.close()


# -------------------------------------------------------------------------------- accumulators
def test_busy_seconds_integrate_utilization_over_ticks(make):
    rig = make()  # golden GPU 0: utilization 0.8 until t=30 s, then 0.4
    assert rig.collector.collect().gpus[0].busy_seconds_total == 0.0  # the first tick adds nothing
    totals = [rig.tick(10).gpus[0].busy_seconds_total for _ in range(4)]  # t = 10, 20, 30, 40
    assert totals == pytest.approx([8.0, 16.0, 20.0, 24.0])


def test_clock_event_seconds_count_while_a_reason_is_active(make):
    rig = make(
        "gpus:\n  - name: x\n    memory_total: 1GiB\n    power_limit: 100\n"
        "    clock_events: {hw_thermal_slowdown: {steps: [[0s, false], [10s, true], [20s, false]]}}\n"
    )
    rig.collector.collect()
    seconds = [rig.tick(5).gpus[0].clock_events_seconds_total for _ in range(6)]  # t = 5 .. 30
    assert [s["hw_thermal_slowdown"] for s in seconds] == [0, 5, 10, 10, 10, 10]
    assert seconds[-1]["sw_power_cap"] == 0.0  # supported, never active: a real zero


def test_steady_values_are_the_previous_ticks_objects_and_the_sample_is_what_was_read(make, monkeypatch):
    """Limits, thresholds and idle clock-event totals are kept once in the window, not once per sample; sharing
    them changes no value: each GpuSample equals (and serialises as) the one built before sharing."""
    built = []

    def recording(new, old, names=None):
        if isinstance(new, GpuSample):
            built.append(dataclasses.replace(new))  # a fresh object with what the tick read
        return share(new, old, names)

    share = samples.share_unchanged
    monkeypatch.setattr(samples, "share_unchanged", recording)
    rig = make()
    rig.collector.collect()
    ticks = [rig.tick() for _ in range(4)]
    out = [g for t in ticks for g in t.gpus if g.up]
    assert len(built) >= len(out) > 0
    for g, b in zip(out, built[-len(out):], strict=True):
        assert g == b and json.dumps(to_jsonable(g)) == json.dumps(to_jsonable(b))
    g0, g1 = ticks[-2].gpus[0], ticks[-1].gpus[0]
    assert g1.power_limit_watts is g0.power_limit_watts
    assert g1.temperature_max_operating_celsius is g0.temperature_max_operating_celsius
    assert g1.memory_total_bytes is g0.memory_total_bytes
    # a GPU without an active clock-event reason: the same totals, not a copy per tick
    pairs = list(zip(ticks[-2].gpus, ticks[-1].gpus, strict=True))
    idle = [(x, y) for x, y in pairs if y.clock_events_seconds_total and not any(y.clock_events_active.values())]
    assert idle and all(y.clock_events_seconds_total is x.clock_events_seconds_total for x, y in idle)
    quiet = [(x, y) for x, y in pairs if y.up and not y.xid_errors_total]
    assert quiet and all(y.xid_errors_total is x.xid_errors_total for x, y in quiet)
    mig = [(a, b) for x, y in pairs for a, b in zip(x.mig_instances, y.mig_instances, strict=True)]
    assert mig and all(b.memory_total_bytes is a.memory_total_bytes for a, b in mig)  # a MIG instance's size


def test_accumulators_skip_the_time_a_gpu_was_down(make):
    rig = make()
    rig.collector.collect()
    assert rig.tick().gpus[0].busy_seconds_total == pytest.approx(0.8)
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error="GPU_IS_LOST")
    assert not rig.tick().gpus[0].up  # t=2, re-probe due at t=3
    rig.lib.clear()
    back = rig.tick(1.5).gpus[0]  # t=3.5
    assert back.up and back.busy_seconds_total == pytest.approx(0.8)
    assert rig.tick().gpus[0].busy_seconds_total == pytest.approx(1.6)


# ---------------------------------------------------------------------------------- lost GPUs
@pytest.mark.parametrize("error", ["GPU_IS_LOST", "GPU_NOT_FOUND", "RESET_REQUIRED", "UNKNOWN"])
@pytest.mark.parametrize(("calls", "gpu", "absent"), CALL_SITES, ids=SITE_IDS)
def test_a_device_error_takes_only_that_gpu_down_until_it_answers(make, calls, gpu, absent, error):
    rig = make()
    rig.lib.inject(calls[0], gpu=gpu, error=error)
    sample = rig.collector.collect()
    down, other = sample.gpus[gpu], sample.gpus[1 - gpu]
    assert not down.up and error in down.error and calls[0].removesuffix("_v2") in down.error
    assert down.uuid == rig.scenario.gpus[gpu].uuid and down.name == rig.scenario.gpus[gpu].name
    assert present(down) == set()  # only identity
    assert other.up
    before = rig.calls_on(gpu)
    assert not rig.tick(0.5).gpus[gpu].up
    assert rig.calls_on(gpu) == before  # backing off: nothing asked
    rig.lib.clear()
    back = rig.tick(0.6).gpus[gpu]  # past the first 1 s backoff
    assert back.up and back.error is None


def test_a_field_value_reporting_a_lost_gpu_takes_it_down(make):
    rig = make()
    rig.lib.inject("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu=1, error="GPU_IS_LOST")
    sample = rig.collector.collect()
    assert not sample.gpus[1].up and sample.gpus[0].up


def test_loss_and_recovery_are_logged_once(make):
    rig = make()
    with capture_logs() as logs:
        rig.collector.collect()
        rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error="GPU_IS_LOST")
        for _ in range(10):
            rig.tick()
        rig.lib.clear()
        for _ in range(70):
            rig.tick()
    events = [e["event"] for e in logs if e["event"] in ("gpu_lost", "gpu_recovered")]
    assert events == ["gpu_lost", "gpu_recovered"]


def test_a_lost_gpu_is_probed_with_exponential_backoff(make):
    rig = make()
    rig.collector.collect()
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error="GPU_IS_LOST")
    rig.tick(0.5)  # t=0.5: lost; probes due at 1.5, 3.5, 7.5, 15.5
    for _ in range(30):
        rig.tick(0.5)  # up to t=15.5
    assert rig.lib.calls[("nvmlDeviceGetHandleByUUID", 0)] == 4


def test_a_gpu_lost_before_its_identity_was_read_comes_back_by_index(make):
    rig = make()
    rig.lib.inject("nvmlDeviceGetHandleByIndex", gpu=0, error="GPU_IS_LOST")
    down = rig.collector.collect().gpus[0]
    assert not down.up and down.uuid == "" and down.index == 0
    rig.lib.clear()
    back = rig.tick(1.0).gpus[0]
    assert back.up and back.uuid == "GPU-00000000-0000-4000-8000-000000000000"


# ------------------------------------------------------------------------------ NVML down
@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("DRIVER_NOT_LOADED", "NVML unavailable: Driver Not Loaded (DRIVER_NOT_LOADED): is the NVIDIA driver installed and loaded? use --simulate demo"),
        ("LIBRARY_NOT_FOUND", "NVML unavailable: NVML Shared Library Not Found (LIBRARY_NOT_FOUND): libnvidia-ml.so.1 not found"),
        ("LIB_RM_VERSION_MISMATCH", "(LIB_RM_VERSION_MISMATCH): the driver was upgraded without reloading"),
        ("NO_PERMISSION", "Insufficient Permissions (NO_PERMISSION): no access to /dev/nvidiactl"),
    ],
)
def test_init_failure_is_a_collector_error_retried_with_backoff(make, error, message):
    rig = make()
    rig.lib.inject("nvmlInit", error=error)
    with pytest.raises(CollectorError) as info:
        rig.collector.collect()
    assert message in str(info.value)
    rig.clock.advance(0.5)
    with pytest.raises(CollectorError, match="NVML unavailable"):
        rig.collector.collect()
    assert rig.lib.calls[("nvmlInit", None)] == 1  # not hammered
    rig.lib.clear()
    sample = rig.tick(0.6)
    assert sample.up and len(sample.gpus) == 2 and all(g.up for g in sample.gpus)


def test_init_backoff_doubles_up_to_a_minute(make):
    rig = make()
    rig.lib.inject("nvmlInit", error="DRIVER_NOT_LOADED")
    for second in range(201):
        rig.clock.set(second)
        with pytest.raises(CollectorError):
            rig.collector.collect()
    assert rig.lib.calls[("nvmlInit", None)] == 9  # t = 0, 1, 3, 7, 15, 31, 63, 123, 183


@pytest.mark.parametrize("error", ["UNINITIALIZED", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH"])
def test_library_failure_mid_run_shuts_down_and_initialises_again(make, error):
    rig = make()
    rig.collector.collect()
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=1, error=error)
    with capture_logs() as logs:
        with pytest.raises(CollectorError, match="NVML unavailable"):
            rig.tick()
        with pytest.raises(CollectorError):
            rig.tick(0.5)
        rig.lib.clear()
        sample = rig.tick(1.0)
    assert sample.up and all(g.up for g in sample.gpus)
    assert rig.lib.calls[("nvmlShutdown", None)] == 1
    assert rig.lib.calls[("nvmlInit", None)] == 2
    states = ("nvml_initialised", "nvml_down", "nvml_recovered")
    assert [e["event"] for e in logs if e["event"] in states] == ["nvml_down", "nvml_recovered"]


def test_without_a_scenario_the_real_pynvml_module_is_used():
    collector = NvmlCollector(SourceContext())
    try:
        assert collector.lib is pynvml
        try:
            sample = collector.collect()
        except CollectorError as exc:  # no NVIDIA driver on this machine
            assert str(exc).startswith("NVML unavailable: ")
            assert "Traceback" not in str(exc)
        else:  # a real GPU host
            assert sample.up and not sample.simulated
    finally:
        collector.close()


# ------------------------------------------------------------------------- XIDs, MIG, PCIe, cost
def test_xid_errors_are_counted_per_gpu_and_code(make):
    rig = make()
    xids = wait_for(lambda: rig.tick(0).gpus[0].xid_errors_total)
    assert xids == {13: 1}  # golden: XID 13 at t=0
    rig.lib.inject_xid(1, 31)
    rig.lib.inject_xid(0, 79)
    wait_for(lambda: rig.tick(0).gpus[1].xid_errors_total)
    sample = wait_for(lambda: (s := rig.tick(0)).gpus[0].xid_errors_total.get(79) and s)
    assert sample.gpus[0].xid_errors_total == {13: 1, 79: 1}
    assert sample.gpus[1].xid_errors_total == {31: 1}


def test_a_gpu_that_cannot_register_for_events_gets_no_xids(make):
    rig = make()
    rig.lib.inject("nvmlDeviceRegisterEvents", gpu=1, error="NOT_SUPPORTED")
    rig.collector.collect()
    rig.lib.inject_xid(1, 31)
    rig.clock.advance(1)
    rig.lib.inject_xid(0, 79)
    sample = wait_for(lambda: (s := rig.tick(0)).gpus[0].xid_errors_total.get(79) and s)
    assert sample.gpus[1].xid_errors_total == {}


def test_xids_are_not_counted_twice_across_a_reinit(make):
    rig = make()
    wait_for(lambda: rig.tick(0).gpus[0].xid_errors_total)
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error="UNINITIALIZED", calls=1)
    with pytest.raises(CollectorError):
        rig.tick()
    sample = rig.tick(1.0)
    time.sleep(0.3)
    assert rig.tick(0).gpus[0].xid_errors_total == {13: 1} and sample.up
    # the driver delivers each XID to every event set registered for the GPU (as libnvidia-ml does): an
    # event set or watcher left over from the first session would count the next XID twice
    rig.lib.inject_xid(0, 79)
    wait_for(lambda: rig.tick(0).gpus[0].xid_errors_total.get(79))
    time.sleep(0.2)
    assert rig.tick(0).gpus[0].xid_errors_total == {13: 1, 79: 1}
    # private: the simulated driver's event sets: that they are freed is what is tested
    assert len(rig.lib._event_sets) == 1  # the first session's set was freed


def test_mig_instances_carry_their_gpu_instance_profile_and_placement(make):
    """nvmlGpuInstanceGetInfo (through nvmlDeviceGetGpuInstanceById): how the NVIDIA DRA driver names a MIG device.
    Denied (NVML documents it as needing a privileged user), the instances are still there, without them."""
    rig = make()
    g1 = rig.collector.collect().gpus[1]
    assert [(m.gpu_instance_id, m.profile_id, m.placement_start) for m in g1.mig_instances] == [(1, 9, 0), (2, 9, 4)]
    denied = make()
    denied.lib.inject("nvmlGpuInstanceGetInfo", gpu=1, error="NO_PERMISSION")
    g1 = denied.collector.collect().gpus[1]
    assert g1.up and [(m.uuid, m.profile_id, m.placement_start) for m in g1.mig_instances] == [
        ("MIG-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", None, None), ("MIG-bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb", None, None)]


def test_the_mig_layout_is_cached_and_refreshed(make):
    rig = make()
    rig.collector.collect()
    layout_calls = rig.lib.calls[("nvmlDeviceGetMigDeviceHandleByIndex", 1)]
    assert layout_calls > 0
    for _ in range(10):
        assert len(rig.tick().gpus[1].mig_instances) == 2
    assert rig.lib.calls[("nvmlDeviceGetMigDeviceHandleByIndex", 1)] == layout_calls
    rig.tick(30)
    assert rig.lib.calls[("nvmlDeviceGetMigDeviceHandleByIndex", 1)] == 2 * layout_calls


def test_a_changed_power_limit_shows_within_the_refresh_period(make):
    """The enforced power limit is not read on every tick (it changes only when someone sets it), but a new
    limit (nvidia-smi -pl: nvmlDeviceSetPowerManagementLimit) shows within _LIMIT_REFRESH seconds."""
    rig = make()
    assert rig.tick().gpus[0].power_limit_watts == 300
    reads = rig.lib.calls[("nvmlDeviceGetEnforcedPowerLimit", 0)]
    pynvml.nvmlDeviceSetPowerManagementLimit(pynvml.nvmlDeviceGetHandleByIndex(0), 250_000)
    # private: the refresh period itself is what is tested (no setting for it)
    seen = [rig.tick().gpus[0].power_limit_watts for _ in range(int(collector_module._LIMIT_REFRESH))]
    assert seen[-1] == 250 and rig.tick().gpus[1].power_limit_watts == 400
    assert rig.lib.calls[("nvmlDeviceGetEnforcedPowerLimit", 0)] - reads <= 2  # once per refresh, not per tick
    # private: the refresh period itself is what is tested (no setting for it)
    assert f"every {collector_module._LIMIT_REFRESH:g} s" in BY_NAME["headroom_gpu_power_limit_watts"].help  # HELP says so


def test_a_power_limit_that_turns_unsupported_goes_absent_and_a_failed_re_read_keeps_it(make):
    rig = make()
    rig.tick()
    rig.lib.inject("nvmlDeviceGetEnforcedPowerLimit", gpu=0, error="TIMEOUT", calls=1)
    # private: the refresh period itself is what is tested (no setting for it)
    assert rig.tick(collector_module._LIMIT_REFRESH).gpus[0].power_limit_watts == 300  # the last value, read again next tick
    rig.lib.inject("nvmlDeviceGetEnforcedPowerLimit", gpu=0, error="NOT_SUPPORTED")
    # private: the refresh period itself is what is tested (no setting for it)
    assert rig.tick(collector_module._LIMIT_REFRESH).gpus[0].power_limit_watts is None


def without_pcie_counters(rig: Rig) -> None:
    for field in ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"):
        rig.lib.inject(field, error="NOT_SUPPORTED")


def test_pcie_throughput_is_polled_off_the_tick_where_the_gpu_has_no_byte_counters(make):
    rig = make(pcie_poll_interval=0.05)
    without_pcie_counters(rig)
    rig.lib.inject("nvmlDeviceGetPcieThroughput", hang=0.2)
    took = []
    for _ in range(5):
        started = time.perf_counter()
        rig.tick()
        took.append(time.perf_counter() - started)
    # a tick that called it would take the hang (0.2 s) or more, every time; the median is not swayed by one
    # tick that a loaded machine (4 test workers on 2 cores) delayed, as the slowest was (0.64 s once)
    assert statistics.median(took) < 0.2
    sample = wait_for(lambda: (s := rig.tick(0)).gpus[0].pcie_tx_bytes_per_second is not None and s)
    assert sample.gpus[0].pcie_tx_bytes_per_second == 1 * GIB  # golden 1GiB/s, read in KB/s
    assert rig.lib.callers["nvmlDeviceGetPcieThroughput"] == {"headroom-nvml-pcie"}


def test_pcie_throughput_is_absent_where_unsupported(make):
    rig = make(pcie_poll_interval=0.01)
    without_pcie_counters(rig)
    rig.lib.inject("nvmlDeviceGetPcieThroughput", gpu=1, error="NOT_SUPPORTED")
    wait_for(lambda: rig.tick(0).gpus[0].pcie_rx_bytes_per_second)
    time.sleep(0.1)
    g1 = rig.tick(0).gpus[1]
    assert g1.pcie_tx_bytes_per_second is None and g1.pcie_rx_bytes_per_second is None


BURST = """
gpus:
  - name: H100
    memory_total: 80GiB
    power_limit: 700
    pcie_tx: {steps: [[0s, 0], [1.5s, 4GiB], [1.6s, 0]]}
    pcie_rx: 1GiB
"""


def test_pcie_rates_come_from_the_byte_counters_and_see_a_burst_between_two_reads(make):
    """A 100 ms burst at 4 GiB/s between two ticks moves 0.4 GiB: the cumulative counters give exactly that
    average over the tick; a 20 ms sample every few seconds (the old reading) misses it or blows it up."""
    rig = make(BURST, pcie_poll_interval=0.05)
    first = rig.tick()  # t = 1: counters read, no rate yet
    assert first.gpus[0].pcie_tx_bytes_per_second is None and first.gpus[0].pcie_tx_bytes_total is not None
    second = rig.tick()  # t = 2
    g = second.gpus[0]
    assert g.pcie_tx_bytes_per_second == pytest.approx(0.4 * GIB, rel=0.01)
    assert g.pcie_rx_bytes_per_second == pytest.approx(1 * GIB, rel=0.001)
    assert g.pcie_tx_bytes_total - first.gpus[0].pcie_tx_bytes_total == pytest.approx(0.4 * GIB, rel=0.01)
    time.sleep(0.1)  # a poll that started before the first tick found the counters finishes
    polls = rig.lib.calls[("nvmlDeviceGetPcieThroughput", 0)]
    time.sleep(0.3)
    rig.tick(0)
    assert rig.lib.calls[("nvmlDeviceGetPcieThroughput", 0)] == polls  # a GPU with counters is not polled


def test_memory_temperature_zero_is_a_missing_sensor_not_zero_degrees(make):
    rig = make(BURST.replace("pcie_rx: 1GiB", "pcie_rx: 1GiB\n    memory_temperature: 0"))
    assert rig.tick().gpus[0].memory_temperature_celsius is None
    assert make().tick().gpus[0].memory_temperature_celsius == 78  # golden: a real reading stays


@pytest.mark.parametrize("error", ["INSUFFICIENT_SIZE", "NO_DATA", "TIMEOUT"])
def test_a_failed_process_query_keeps_the_last_list_marked_stale(make, error):
    """INSUFFICIENT_SIZE on the binding's second call (processes doubled between its two calls) or any
    transient error must not read as "no processes": the last list stays, marked stale, until a read works."""
    rig = make()
    fresh = rig.tick().gpus[0]
    assert [p.pid for p in fresh.processes] == [1001, 1002] and fresh.processes_stale is False
    # INSUFFICIENT_SIZE twice: the size query as usual, then the list query again (the list outgrew it)
    rig.lib.inject("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0, error=error, calls=2 if error == "INSUFFICIENT_SIZE" else 1)
    stale = rig.tick().gpus[0]
    assert stale.up and stale.processes == fresh.processes and stale.processes_stale is True
    again = rig.tick().gpus[0]
    assert again.processes == fresh.processes and again.processes_stale is False


def _attach(rig: Rig, rows: list[tuple[int, int, float | None]], gpu: int = 0) -> None:
    """Processes (pid, used GiB, SM utilization or None) listed on ``gpu`` beside the scenario's own."""
    from headroom.simulation.scenario import StandInGpu, constant

    rig.scenario.attach_processes(tuple(
        (pid, StandInGpu(gpu, constant(used * GIB), None if sm is None else constant(sm)), None) for pid, used, sm in rows))


def test_a_process_list_longer_than_the_kept_array_grows_it_once_and_reads_every_entry(make):
    """The list is read into an array kept per GPU, one call a tick; a list that outgrew it gets the size the
    driver asks for and a second call that tick (the binding's two-call protocol), then one call again."""
    rig = make()
    rig.tick()
    # private: the list's first capacity itself is what is tested (the regrowth past it)
    many = [(5000 + i, 1 + i % 3, 0.5 if i % 2 else None) for i in range(binding._LIST_CAPACITY + 8)]
    _attach(rig, many)
    calls = rig.lib.calls[("nvmlDeviceGetComputeRunningProcesses_v3", 0)]
    g0 = rig.tick().gpus[0]
    assert [(p.pid, p.used_memory_bytes) for p in g0.processes] == [(1001, 30 * GIB), (1002, None)] + [
        (pid, used * GIB) for pid, used, _ in many]
    assert {p.pid: p.sm_utilization_ratio for p in g0.processes if p.pid >= 5000} == {
        pid: (0.5 if sm else 0.0) for pid, _, sm in many}  # listed without a sample: ran no kernel, 0
    assert rig.lib.calls[("nvmlDeviceGetComputeRunningProcesses_v3", 0)] - calls == 2
    assert rig.tick().gpus[0].processes[2:] == g0.processes[2:]
    assert rig.lib.calls[("nvmlDeviceGetComputeRunningProcesses_v3", 0)] - calls == 3


def test_an_unchanged_process_keeps_its_object_when_the_list_changes(make):
    """A pod replaced on a shared GPU changes its list: the new tuple holds last tick's object for every
    process that did not change (the window keeps it once), a new one for the newcomer and the changed."""
    rig = make()
    _attach(rig, [(7001, 4, 0.12), (7002, 4, 0.12), (7003, 2, None)])
    rig.tick()
    before = {p.pid: p for p in rig.tick().gpus[0].processes}
    _attach(rig, [(7002, 4, 0.12), (7003, 3, None), (7004, 4, 0.12)])
    after = {p.pid: p for p in rig.tick().gpus[0].processes}
    assert sorted(after) == [1001, 1002, 7002, 7003, 7004]
    assert all(after[pid] is before[pid] for pid in (1001, 1002, 7002))
    assert after[7003] is not before[7003] and after[7003].used_memory_bytes == 3 * GIB
    assert (after[7004].used_memory_bytes, after[7004].sm_utilization_ratio) == (4 * GIB, 0.12)
    again = rig.tick().gpus[0].processes
    # private: the collector's per-GPU cache: the list reused from it is what is tested
    assert again is rig.collector._gpus[0].cache["processes_last"] and [p.pid for p in again] == [1001, 1002, 7002, 7003, 7004]


def test_process_lists_and_samples_read_the_same_through_the_binding_wrappers(make):
    """Without the binding's function lookup (a binding that renamed it), the process lists and the
    utilization samples go through the binding's wrappers (two calls each) and read the same."""
    asked: set[str] = set()

    class WithoutLookup:
        def __getattr__(self, name: str) -> object:
            if name == "_nvmlGetFunctionPointer":
                raise AttributeError(name)
            value = getattr(pynvml, name)
            if name.startswith(("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization")):
                return lambda *args: asked.add(name) or value(*args)
            return value

    def read(rig: Rig) -> list[object]:  # one rig after the other: the binding has one library at a time
        _attach(rig, [(7001, 4, 0.12), (7002, 2, None)])
        ticks = [rig.tick() for _ in range(2)]
        return [[(g.processes, [m.processes for m in g.mig_instances]) for g in t.gpus] for t in ticks]

    fast = read(make())
    assert [len(m) for m in fast[1][1][1]] == [1, 1]  # GPU 1's MIG instances list their own processes
    rig = make()
    rig.collector.lib = WithoutLookup()
    assert read(rig) == fast
    assert asked == {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization"}
    g0 = rig.tick().gpus[0]
    assert {(p.pid, p.sm_utilization_ratio) for p in g0.processes} >= {(7001, 0.12), (7002, 0.0)}


def test_several_samples_of_one_process_are_averaged_and_the_newest_timestamp_is_asked_from_next():
    """A driver may hold several samples of a process since the last read: its ratio is their mean (capped at
    1), and the next read asks only for samples newer than the newest one seen (each read once)."""
    asked: list[int] = []
    batches = [[(9, 1_000, 30), (10, 1_100, 120), (9, 1_200, 50)], []]

    def entry(handle: object, array: object, count: object, last_seen: ctypes.c_ulonglong) -> int:
        asked.append(last_seen.value)
        rows = batches.pop(0)
        if not rows:
            return pynvml.NVML_ERROR_NOT_FOUND
        for slot, (pid, stamp, sm) in zip(array, rows, strict=False):
            slot.pid, slot.timeStamp, slot.smUtil = pid, stamp, sm
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents.value = len(rows)
        return 0

    class Library:
        nvmlDeviceGetProcessUtilization = staticmethod(lambda *args: pytest.fail("the wrapper is not used"))

        @staticmethod
        def _nvmlGetFunctionPointer(name: str) -> object:
            assert name == "nvmlDeviceGetProcessUtilization"
            return entry

    collector = NvmlCollector(SourceContext())
    collector.lib = Library()
    # private: a GPU handle built by hand: the process-list calls are what is tested, without a device
    gpu = binding._Gpu(collector.lib, 0, handle=object())
    assert processes.process_utilization(collector.lib, gpu) == {9: 0.4, 10: 1.0}
    assert processes.process_utilization(collector.lib, gpu) == {}  # NOT_FOUND: nothing ran since, every process idle
    assert asked == [0, 1_200]


def test_a_list_that_fills_the_kept_array_to_its_last_entry_is_read_again_into_a_larger_one():
    """A driver may fill what fits and answer SUCCESS: a full array may hold a list cut short, so it is read
    once more into one twice as large, and every process is there."""
    # private: the list's first capacity itself is what is tested (the regrowth past it)
    pids = list(range(100, 100 + binding._LIST_CAPACITY + 3))
    capacities: list[int] = []

    def entry(handle: object, count: object, array: object) -> int:
        counter = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        capacities.append(counter.value)
        written = pids[:counter.value]
        for slot, pid in zip(array, written, strict=False):
            slot.pid, slot.usedGpuMemory = pid, GIB
        counter.value = len(written)
        return 0

    class Library:
        nvmlDeviceGetComputeRunningProcesses_v3 = staticmethod(lambda *args: pytest.fail("the wrapper is not used"))

        @staticmethod
        def _nvmlGetFunctionPointer(name: str) -> object:
            return entry

    collector = NvmlCollector(SourceContext())
    collector.lib = Library()
    # private: a GPU handle built by hand: the process-list calls are what is tested, without a device
    gpu = binding._Gpu(collector.lib, 0, handle=object())
    # private: one NVML call of the process reads: its regrowing buffer is what is tested
    rows, failed = processes._process_list(collector.lib, gpu, gpu.handle)
    assert not failed and [pid for pid, _ in rows] == pids
    # private: the list's first capacity itself is what is tested (the regrowth past it)
    assert capacities == [binding._LIST_CAPACITY, binding._LIST_CAPACITY * 2 + 5]
    # private: one NVML call of the process reads: its regrowing buffer is what is tested
    processes._process_list(collector.lib, gpu, gpu.handle)
    # private: the list's first capacity itself is what is tested (the regrowth past it)
    assert capacities[2:] == [binding._LIST_CAPACITY * 2 + 5]  # large enough now: one call


@pytest.mark.parametrize(("error", "outcome"), [
    ("NOT_SUPPORTED", "absent, not asked again"), ("NO_PERMISSION", "absent, not asked again"),
    ("FUNCTION_NOT_FOUND", "absent, not asked again"), ("TIMEOUT", "absent this tick"),
    ("GPU_IS_LOST", "gpu down"), ("UNKNOWN", "gpu down"), ("UNINITIALIZED", "nvml down"),
])
def test_per_process_utilization_errors_are_handled_as_every_other_query(make, error, outcome):
    """nvmlDeviceGetProcessUtilization read into the kept array answers every error class as before: absent
    (remembered or for this tick), the GPU down, or NVML down; the process list itself stays."""
    rig = make()
    _attach(rig, [(7001, 4, 0.25)])
    assert {p.pid: p.sm_utilization_ratio for p in rig.tick().gpus[0].processes} == {1001: 0.0, 1002: 0.0, 7001: 0.25}
    rig.lib.inject("nvmlDeviceGetProcessUtilization", gpu=0, error=error, calls=1)
    if outcome == "nvml down":
        with pytest.raises(CollectorError, match=error):
            rig.tick()
        return
    g0 = rig.tick().gpus[0]
    if outcome == "gpu down":
        assert not g0.up and error in g0.error and "nvmlDeviceGetProcessUtilization" in g0.error
        return
    assert g0.up and [(p.pid, p.sm_utilization_ratio) for p in g0.processes] == [(1001, None), (1002, None), (7001, None)]
    calls = rig.lib.calls[("nvmlDeviceGetProcessUtilization", 0)]
    again = rig.tick().gpus[0]
    if outcome == "absent this tick":
        assert {p.pid: p.sm_utilization_ratio for p in again.processes} == {1001: 0.0, 1002: 0.0, 7001: 0.25}
    else:
        assert [p.sm_utilization_ratio for p in again.processes] == [None, None, None]
        assert rig.lib.calls[("nvmlDeviceGetProcessUtilization", 0)] == calls


def test_the_process_layouts_read_what_the_binding_declares():
    """The one-pass reads take offsets and C types from the binding's own structs; NVML_VALUE_NOT_AVAILABLE
    is no figure (None), as the binding's wrapper makes it."""
    # private: the decoder's own tables: the table itself is what is checked
    assert decode._PROCESS_LAYOUT.ready and decode._SAMPLE_LAYOUT.ready
    procs = (pynvml.c_nvmlProcessInfo_v2_t * 2)()
    procs[0].pid, procs[0].usedGpuMemory, procs[0].gpuInstanceId = 4_000_000_001, 2**40 + 3, 7
    # private: the decoder's own tables: the table itself is what is checked
    procs[1].pid, procs[1].usedGpuMemory = 12, decode._NOT_AVAILABLE
    raw = ctypes.string_at(procs, ctypes.sizeof(procs))
    # private: the decoder's own tables: the table itself is what is checked
    assert decode._process_rows(decode._PROCESS_LAYOUT.rows(raw)) == ((4_000_000_001, 2**40 + 3), (12, None))
    found = (pynvml.c_nvmlProcessUtilizationSample_t * 2)()
    found[0].pid, found[0].timeStamp, found[0].smUtil, found[0].memUtil = 9, 2**50 + 1, 37, 99
    found[1].pid, found[1].timeStamp, found[1].smUtil = 10, 5, 100
    raw = ctypes.string_at(found, ctypes.sizeof(found))
    # private: the decoder's own tables: the table itself is what is checked
    assert decode._SAMPLE_LAYOUT.rows(raw) == [(9, 2**50 + 1, 37), (10, 5, 100)]


def test_mig_instances_list_their_own_processes_when_the_whole_gpu_list_is_denied(make):
    """With MIG enabled, the device-level process list needs privileges the service user may lack
    (NO_PERMISSION): each MIG device handle lists its own processes, so workloads are attributed per
    instance and the GPU's process figures are their union."""
    rig = make()
    for call in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
        rig.lib.inject(call, gpu=1, error="NO_PERMISSION", mig=False)
    g1 = rig.tick().gpus[1]
    per_instance = {m.gpu_instance_id: [(p.pid, p.used_memory_bytes) for p in m.processes] for m in g1.mig_instances}
    assert per_instance == {1: [(2001, 20 * GIB)], 2: [(2002, 10 * GIB)]}
    assert sorted(p.pid for p in g1.processes) == [2001, 2002]
    assert rig.tick().gpus[1].mig_instances[0].processes == g1.mig_instances[0].processes


def test_an_unknown_error_at_event_registration_rebuilds_the_event_set(make):
    """nvml.h: NVML_ERROR_UNKNOWN from nvmlDeviceRegisterEvents leaves the set in an undefined state: it is
    freed and a new one built, and every GPU (the failing one included, on the retry) gets its XIDs."""
    rig = make()
    rig.lib.inject("nvmlDeviceRegisterEvents", gpu=1, error="UNKNOWN", calls=1)  # before the session starts
    wait_for(lambda: rig.tick(0).gpus[0].xid_errors_total)
    # private: the simulated driver's event sets: that they are freed is what is tested
    assert len(rig.lib._event_sets) == 1 and rig.lib.calls[("nvmlEventSetFree", None)] == 1
    rig.lib.inject_xid(1, 31)
    sample = wait_for(lambda: (s := rig.tick(0)).gpus[1].xid_errors_total and s)
    assert sample.gpus[1].xid_errors_total == {31: 1} and sample.gpus[0].xid_errors_total == {13: 1}


def test_a_steady_tick_costs_at_most_fourteen_nvml_entry_point_calls_per_gpu(make):
    """Counted at the driver's entry points: one call per query, the list queries (processes, per-process
    utilization) included, into arrays kept per GPU (the binding's wrappers ask the size first: two calls
    each). 14 calls into libnvidia-ml per GPU, two per MIG instance (its memory, its own process list)."""
    rig = make()
    rig.collector.collect()
    rig.tick()
    before = [rig.calls_on(0), rig.calls_on(1)]
    rig.tick()
    per_gpu = [rig.calls_on(0) - before[0], rig.calls_on(1) - before[1]]
    # GPU 1: no utilization nor fan (unsupported), two MIG instances
    assert per_gpu[0] <= 14 and per_gpu[1] <= 12 + 2 * 2, per_gpu


def test_close_returns_and_stops_its_threads_while_a_call_is_stuck_in_nvml(make):
    """NVML has no way to cancel a call, and nvmlShutdown does not end one blocked in another thread (the
    stand-in behaves so; docs/reliability.md states it as an assumption about the real library). So close()
    must not wait for the stuck call: it returns within its bound, its own helper threads stop, and the
    stuck caller stays stuck until the driver answers; it then gets an error, not a crash."""
    rig = make(pcie_poll_interval=0.01)
    rig.collector.collect()
    rig.lib.inject("nvmlDeviceGetPowerUsage", gpu=0, hang=30)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_collect_or_error(rig.collector)))
    worker.start()
    wait_for(lambda: rig.lib.calls[("nvmlDeviceGetPowerUsage", 0)] >= 2)
    time.sleep(0.05)
    started = time.monotonic()
    rig.collector.close()
    assert time.monotonic() - started < 3
    assert not any(t.name.startswith("headroom-nvml") and t.is_alive() for t in threading.enumerate())
    worker.join(0.3)
    assert worker.is_alive() and not outcome  # shutdown did not free it: only the driver answering does
    rig.lib.release()
    worker.join(3)
    assert not worker.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], (CollectorError, NvmlSample)), outcome


def _collect_or_error(collector: NvmlCollector) -> object:
    try:
        return collector.collect()
    except CollectorError as exc:
        return exc


def test_a_quiet_gpu_keeps_the_shared_empty_xid_map_when_the_watcher_registers_it(make):
    """The XID watcher registers each GPU it watches with an empty map, in its own thread, at any moment between
    ticks: a quiet GPU's XIDs stay the one shared empty map across that moment (the sharing test above once
    failed when it fell between two of its ticks)."""
    rig = make()
    rig.collector.collect()
    before = rig.tick().gpus
    # private: the XID watcher's state, set as the watcher does when it starts
    with rig.collector._xid_lock:
        for g in before:
            # private: the XID watcher's state, set as the watcher does when it starts
            rig.collector._xid_counts.setdefault(g.uuid, {})  # what _XidWatcher does when it starts watching
    after = rig.tick().gpus
    quiet = [(a, b) for a, b in zip(before, after, strict=True) if a.up and not a.xid_errors_total]
    assert quiet and all(a.xid_errors_total is b.xid_errors_total is samples.EMPTY for a, b in quiet)
