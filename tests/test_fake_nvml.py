"""The fake NVML library: pynvml's shapes and errors, scenario-driven values, injected faults, XIDs."""

from __future__ import annotations

import threading
import time

import pynvml
import pytest

from headroom.simulation import ManualClock, load_scenario, parse_scenario
from headroom.simulation.fake_nvml import FakeNvml, error_code


@pytest.fixture
def golden():
    scenario = load_scenario("golden")
    clock = ManualClock()
    lib = scenario.nvml_library(clock=clock)
    lib.nvmlInit()
    yield lib, clock
    lib.release()


def test_the_library_is_cached_per_scenario_and_its_clock_replaceable():
    scenario = load_scenario("golden")
    first = scenario.nvml_library()
    clock = ManualClock(42)
    assert scenario.nvml_library(clock=clock) is first
    assert first.clock() == 42


def test_calls_before_init_raise_uninitialized():
    lib = FakeNvml(load_scenario("golden"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlDeviceGetCount()


def test_init_and_shutdown_are_reference_counted():
    lib = FakeNvml(load_scenario("golden"))
    lib.nvmlInit()
    lib.nvmlInit()
    lib.nvmlShutdown()
    assert lib.nvmlDeviceGetCount() == 2
    lib.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        lib.nvmlDeviceGetCount()


def test_constants_and_error_classes_come_from_pynvml(golden):
    lib, _ = golden
    assert lib.NVML_ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST
    assert lib.nvmlMemory_v2 == pynvml.nvmlMemory_v2
    assert lib.NVMLError is pynvml.NVMLError
    with pytest.raises(AttributeError):
        lib.nvmlDeviceGetVbiosVersion  # noqa: B018 - a function the fake does not implement is absent


def test_values_have_pynvml_shapes(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    assert lib.nvmlDeviceGetName(h) == "NVIDIA RTX 6000 Ada Generation"
    assert lib.nvmlDeviceGetUUID(h) == "GPU-00000000-0000-4000-8000-000000000000"
    assert lib.nvmlDeviceGetPciInfo(h).busId == "00000000:01:00.0"  # pynvml structs decode char arrays
    util = lib.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(util, pynvml.c_nvmlUtilization_t) and (util.gpu, util.memory) == (80, 50)
    assert lib.nvmlDeviceGetPowerUsage(h) == 299_000  # milliwatts
    assert lib.nvmlDeviceGetEnforcedPowerLimit(h) == 300_000
    assert lib.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 71
    assert lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 2100  # MHz
    assert lib.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) == 10001
    assert lib.nvmlDeviceGetFanSpeed(h) == 65
    assert lib.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonSwPowerCap
    procs = lib.nvmlDeviceGetComputeRunningProcesses_v3(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(1001, 30 * 2**30), (1002, None)]


def test_memory_info_v1_counts_reserved_as_used_and_v2_reports_it_apart(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    v1 = lib.nvmlDeviceGetMemoryInfo(h)
    v2 = lib.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert isinstance(v1, pynvml.c_nvmlMemory_t) and isinstance(v2, pynvml.c_nvmlMemory_v2_t)
    assert v2.used == 40 * 2**30 and v2.reserved == 256 * 2**20
    assert v1.used == v2.used + v2.reserved
    assert v1.total == v2.total == v1.used + v1.free == v2.used + v2.reserved + v2.free


def test_field_values_are_real_structs_with_per_field_return_codes(golden):
    lib, _ = golden
    h0, h1 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    ids = [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_REMAPPED_COR]
    v0 = lib.nvmlDeviceGetFieldValues(h0, ids)
    assert v0[0].nvmlReturn == pynvml.NVML_SUCCESS and v0[0].value.uiVal == 78
    assert v0[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # golden GPU 0 lists remapped_rows unsupported
    v1 = lib.nvmlDeviceGetFieldValues(h1, ids)
    assert v1[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # no memory temperature declared
    assert v1[1].nvmlReturn == pynvml.NVML_SUCCESS and v1[1].value.uiVal == 1


def test_energy_integrates_power_over_scenario_time(golden):
    lib, clock = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    start = lib.nvmlDeviceGetTotalEnergyConsumption(h)
    clock.advance(10)
    assert lib.nvmlDeviceGetTotalEnergyConsumption(h) - start == 2_990_000  # 299 W x 10 s in mJ


def test_signals_follow_the_injected_clock(golden):
    lib, clock = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetUtilizationRates(h).gpu == 80
    clock.set(30)
    assert lib.nvmlDeviceGetUtilizationRates(h).gpu == 40


def test_mig_devices_have_their_own_handles_and_memory(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(1)
    assert lib.nvmlDeviceGetMigMode(h) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    count = lib.nvmlDeviceGetMaxMigDeviceCount(h)
    found = []
    for i in range(count):
        try:
            m = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except pynvml.NVMLError_NotFound:
            continue
        found.append((lib.nvmlDeviceGetGpuInstanceId(m), lib.nvmlDeviceGetMemoryInfo(m).used))
    assert found == [(1, 20 * 2**30), (2, 10 * 2**30)]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetUtilizationRates(h)  # as on a real MIG-enabled GPU
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(0))  # GPU 0 has no MIG


@pytest.mark.parametrize(
    "name", ["GPU_IS_LOST", "NVML_ERROR_NO_PERMISSION", "NOT_SUPPORTED", "UNKNOWN", "RESET_REQUIRED", "TIMEOUT"]
)
def test_injected_errors_raise_the_matching_pynvml_subclass(golden, name):
    lib, _ = golden
    code = error_code(name)
    lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error=name)
    h0, h1 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError) as info:
        lib.nvmlDeviceGetPowerUsage(h0)
    assert info.value.value == code and type(info.value) is pynvml.nvmlExceptionClass(code)
    assert lib.nvmlDeviceGetPowerUsage(h1) == 180_000  # the other GPU is untouched
    lib.clear()
    assert lib.nvmlDeviceGetPowerUsage(h0) == 299_000


def test_a_fault_for_n_calls_expires(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetTemperature", error="UNKNOWN", calls=2)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            lib.nvmlDeviceGetTemperature(h, 0)
    assert lib.nvmlDeviceGetTemperature(h, 0) == 71


def test_a_fault_window_follows_scenario_time(golden):
    lib, clock = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetFanSpeed", error="GPU_IS_LOST", start=10, until=20)
    assert lib.nvmlDeviceGetFanSpeed(h) == 65
    clock.set(10)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        lib.nvmlDeviceGetFanSpeed(h)
    clock.set(20)
    assert lib.nvmlDeviceGetFanSpeed(h) == 65


def test_scenario_faults_and_missing_functions_apply():
    scenario = parse_scenario(
        "missing_functions: [nvmlDeviceGetComputeRunningProcesses_v3]\n"
        "faults:\n  - {call: nvmlInit, error: DRIVER_NOT_LOADED, calls: 1}\n"
        "gpus:\n  - {name: x, memory_total: 1GiB, power_limit: 100, processes: [{pid: 5, used_memory: 1MiB}]}\n"
    )
    lib = scenario.nvml_library(clock=ManualClock())
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        lib.nvmlInit()
    lib.nvmlInit()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        lib.nvmlDeviceGetComputeRunningProcesses_v3(h)
    assert [p.pid for p in lib.nvmlDeviceGetComputeRunningProcesses_v2(h)] == [5]


def test_a_hang_blocks_until_released(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetPowerUsage", hang=30)
    done = []
    worker = threading.Thread(target=lambda: done.append(lib.nvmlDeviceGetPowerUsage(h)))
    started = time.monotonic()
    worker.start()
    time.sleep(0.1)
    assert not done
    lib.release()
    worker.join(5)
    assert done == [299_000] and time.monotonic() - started < 5


def test_shutdown_interrupts_a_hang_which_then_sees_the_library_gone(golden):
    lib, _ = golden
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetPowerUsage", hang=30)
    errors = []

    def call():
        try:
            lib.nvmlDeviceGetPowerUsage(h)
        except pynvml.NVMLError as exc:
            errors.append(exc.value)

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(0.1)
    lib.nvmlShutdown()
    worker.join(5)
    assert not worker.is_alive() and errors == [pynvml.NVML_ERROR_UNINITIALIZED]


def test_xids_arrive_through_registered_event_sets_only(golden):
    lib, clock = golden
    es = lib.nvmlEventSetCreate()
    lib.nvmlDeviceRegisterEvents(lib.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es)
    data = lib.nvmlEventSetWait(es, 100)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 13)  # golden: XID 13 at t=0
    assert lib.nvmlDeviceGetUUID(data.device) == "GPU-00000000-0000-4000-8000-000000000000"
    with pytest.raises(pynvml.NVMLError_Timeout):
        lib.nvmlEventSetWait(es, 50)  # delivered once
    lib.inject_xid(1, 31)  # GPU 1 is not registered
    with pytest.raises(pynvml.NVMLError_Timeout):
        lib.nvmlEventSetWait(es, 50)
    lib.inject_xid(0, 79)
    assert lib.nvmlEventSetWait(es, 100).eventData == 79


def test_calls_are_counted_per_function_and_gpu(golden):
    lib, _ = golden
    h0, h1 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    lib.calls.clear()
    lib.nvmlDeviceGetPowerUsage(h0)
    lib.nvmlDeviceGetPowerUsage(h0)
    lib.nvmlDeviceGetPowerUsage(h1)
    lib.nvmlDeviceGetCount()
    assert lib.calls == {
        ("nvmlDeviceGetPowerUsage", 0): 2,
        ("nvmlDeviceGetPowerUsage", 1): 1,
        ("nvmlDeviceGetCount", None): 1,
    }
    assert lib.callers["nvmlDeviceGetPowerUsage"] == {threading.current_thread().name}


def test_a_foreign_handle_is_an_invalid_argument(golden):
    lib, _ = golden
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetPowerUsage(object())
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetHandleByIndex(7)


@pytest.mark.parametrize(("name", "code"), [("GPU_IS_LOST", 15), ("NVML_ERROR_TIMEOUT", 10), (999, 999)])
def test_error_code_accepts_short_and_full_names(name, code):
    assert error_code(name) == code


def test_error_code_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown NVML error 'MELTED'"):
        error_code("MELTED")
