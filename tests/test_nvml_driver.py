"""The NVML driver stand-in, called through the real pynvml binding: the binding's marshalling, struct
versions and error mapping over libnvidia-ml's C entry points; scenario-driven values, faults, XIDs.

``make test`` runs this file (and the other GPU test files) twice: on the installed nvidia-ml-py and on
the oldest version pyproject.toml accepts (tests/bindings.sh)."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pynvml
import pytest

from headroom.simulation import ManualClock, load_scenario, parse_scenario
from headroom.simulation.nvml_driver import NvmlDriver, error_code
from headroom.simulation.nvml_driver import nvml_h as drv  # the nvml.h structs the binding is checked against


@pytest.fixture
def golden():
    scenario = load_scenario("golden")
    clock = ManualClock()
    lib = scenario.nvml_library(clock=clock)
    pynvml.nvmlInit()
    yield lib, clock
    lib.release()
    assert lib.errors == []  # no exception inside the stand-in itself


def test_the_binding_under_test_is_the_one_make_test_asked_for():
    """``make test`` reruns the GPU tests with the oldest supported nvidia-ml-py first on the path."""
    from importlib import metadata

    expected = os.environ.get("HEADROOM_EXPECT_NVML_BINDING")
    found = metadata.version("nvidia-ml-py")
    assert found == (expected or found)
    if expected:
        assert f"{os.sep}{expected}{os.sep}" in pynvml.__file__


def test_the_library_is_cached_per_scenario_and_its_clock_replaceable():
    scenario = load_scenario("golden")
    first = scenario.nvml_library()
    clock = ManualClock(42)
    assert scenario.nvml_library(clock=clock) is first
    assert first.clock() == 42


def test_calls_before_init_raise_uninitialized():
    NvmlDriver(load_scenario("golden")).install()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_and_shutdown_are_reference_counted():
    NvmlDriver(load_scenario("golden")).install()
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 2
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()  # one shutdown too many, as libnvidia-ml answers


def test_the_binding_resolves_the_stand_in_entry_points_and_maps_missing_ones(golden):
    lib, _ = golden
    assert pynvml.nvmlLib is lib
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetVbiosVersion(pynvml.nvmlDeviceGetHandleByIndex(0))  # not exported by the stand-in
    assert str(pynvml.NVMLError(drv.ERRORS["NOT_READY"])) == "Not ready"  # via the stand-in's nvmlErrorString


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("Memory", "c_nvmlMemory_t"), ("MemoryV2", "c_nvmlMemory_v2_t"), ("Utilization", "c_nvmlUtilization_t"),
        ("PciInfo", "nvmlPciInfo_t"), ("ProcessInfo", "c_nvmlProcessInfo_v2_t"), ("ProcessInfo", "c_nvmlProcessInfo_t"),
        ("ProcessUtilizationSample", "c_nvmlProcessUtilizationSample_t"), ("FieldValue", "c_nvmlFieldValue_t"),
        ("EventData", "c_nvmlEventData_t"), ("TemperatureV1", "c_nvmlTemperature_v1_t"),
    ],
)  # fmt: skip
def test_the_binding_lays_out_each_struct_as_nvml_h_does(ours, theirs):
    """The stand-in's structs are written from nvml.h; a binding that disagrees (nvidia-ml-py 12.535.77 read
    process lists with a 32-byte stride) would misread a real driver, so it is caught here on both bindings."""
    mine = getattr(drv, ours)
    binding = getattr(pynvml, theirs, None)
    if binding is None:
        assert theirs == "c_nvmlTemperature_v1_t"  # older bindings lack nvmlDeviceGetTemperatureV entirely
        return
    assert ctypes.sizeof(binding) == ctypes.sizeof(mine)
    for name, *_ in mine._fields_:
        assert getattr(binding, name).offset == getattr(mine, name).offset, name


def test_values_have_pynvml_shapes(golden):
    _lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA RTX 6000 Ada Generation"
    assert pynvml.nvmlDeviceGetUUID(h) == "GPU-00000000-0000-4000-8000-000000000000"
    assert pynvml.nvmlDeviceGetPciInfo(h).busId == "00000000:01:00.0"  # pynvml structs decode char arrays
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(util, pynvml.c_nvmlUtilization_t) and (util.gpu, util.memory) == (80, 50)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 299_000  # milliwatts
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 300_000
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 71
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 2100  # MHz
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) == 10001
    assert pynvml.nvmlDeviceGetFanSpeed(h) == 65
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonSwPowerCap
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(1001, 30 * 2**30), (1002, None)]


def test_memory_info_v1_counts_reserved_as_used_and_v2_reports_it_apart(golden):
    _lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert isinstance(v1, pynvml.c_nvmlMemory_t) and isinstance(v2, pynvml.c_nvmlMemory_v2_t)
    assert v2.used == 40 * 2**30 and v2.reserved == 256 * 2**20
    assert v1.used == v2.used + v2.reserved
    assert v1.total == v2.total == v1.used + v1.free == v2.used + v2.reserved + v2.free


def test_field_values_are_real_structs_with_per_field_return_codes(golden):
    _lib, _ = golden
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    ids = [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_REMAPPED_COR]
    v0 = pynvml.nvmlDeviceGetFieldValues(h0, ids)
    assert v0[0].nvmlReturn == pynvml.NVML_SUCCESS and v0[0].value.uiVal == 78
    assert v0[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # golden GPU 0 lists remapped_rows unsupported
    v1 = pynvml.nvmlDeviceGetFieldValues(h1, ids)
    assert v1[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # no memory temperature declared
    assert v1[1].nvmlReturn == pynvml.NVML_SUCCESS and v1[1].value.uiVal == 1


def test_energy_integrates_power_over_scenario_time(golden):
    _lib, clock = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    start = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    clock.advance(10)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - start == 2_990_000  # 299 W x 10 s in mJ


def test_signals_follow_the_injected_clock(golden):
    _lib, clock = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 80
    clock.set(30)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 40


def test_mig_devices_have_their_own_handles_and_memory(golden):
    _lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetMigMode(h) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    count = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
    found = []
    for i in range(count):
        try:
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except pynvml.NVMLError_NotFound:
            continue
        found.append((pynvml.nvmlDeviceGetGpuInstanceId(m), pynvml.nvmlDeviceGetMemoryInfo(m).used))
    assert found == [(1, 20 * 2**30), (2, 10 * 2**30)]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(h)  # as on a real MIG-enabled GPU
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0))  # GPU 0 has no MIG


@pytest.mark.parametrize(
    "name", ["GPU_IS_LOST", "NVML_ERROR_NO_PERMISSION", "NOT_SUPPORTED", "UNKNOWN", "RESET_REQUIRED", "TIMEOUT"]
)
def test_injected_errors_raise_the_matching_pynvml_subclass(golden, name):
    lib, _ = golden
    code = error_code(name)
    lib.inject("nvmlDeviceGetPowerUsage", gpu=0, error=name)
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError) as info:
        pynvml.nvmlDeviceGetPowerUsage(h0)
    assert info.value.value == code and type(info.value) is pynvml.nvmlExceptionClass(code)
    assert pynvml.nvmlDeviceGetPowerUsage(h1) == 180_000  # the other GPU is untouched
    lib.clear()
    assert pynvml.nvmlDeviceGetPowerUsage(h0) == 299_000


def test_a_fault_for_n_calls_expires(golden):
    lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetTemperature", error="UNKNOWN", calls=2)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlDeviceGetTemperature(h, 0)
    assert pynvml.nvmlDeviceGetTemperature(h, 0) == 71


def test_a_fault_window_follows_scenario_time(golden):
    lib, clock = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetFanSpeed", error="GPU_IS_LOST", start=10, until=20)
    assert pynvml.nvmlDeviceGetFanSpeed(h) == 65
    clock.set(10)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetFanSpeed(h)
    clock.set(20)
    assert pynvml.nvmlDeviceGetFanSpeed(h) == 65


def test_scenario_faults_and_missing_functions_apply():
    scenario = parse_scenario(
        "missing_functions: [nvmlDeviceGetComputeRunningProcesses_v3]\n"
        "faults:\n  - {call: nvmlInit, error: DRIVER_NOT_LOADED, calls: 1}\n"
        "gpus:\n  - {name: x, memory_total: 1GiB, power_limit: 100, processes: [{pid: 5, used_memory: 1MiB}]}\n"
    )
    scenario.nvml_library(clock=ManualClock())
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    # the binding's unversioned call is the _v3 entry point (newer bindings re-raise it as a mismatch)
    with pytest.raises((pynvml.NVMLError_FunctionNotFound, getattr(pynvml, "NVMLLibraryMismatchError", pynvml.NVMLError))):
        pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    if hasattr(pynvml, "nvmlDeviceGetComputeRunningProcesses_v2"):  # bindings before 12.550 lack it
        assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h)] == [5]


def test_a_hang_blocks_until_released(golden):
    lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetPowerUsage", hang=30)
    done = []
    worker = threading.Thread(target=lambda: done.append(pynvml.nvmlDeviceGetPowerUsage(h)))
    started = time.monotonic()
    worker.start()
    time.sleep(0.1)
    assert not done
    lib.release()
    worker.join(5)
    assert done == [299_000] and time.monotonic() - started < 5


def test_shutdown_does_not_end_a_hung_call_only_the_driver_answering_does(golden):
    """An assumption about libnvidia-ml, stated in docs/reliability.md: nvmlShutdown on one thread does not
    cancel a call blocked on another (NVML documents no cancellation). The collector must not rely on it."""
    lib, _ = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    lib.inject("nvmlDeviceGetPowerUsage", hang=30)
    errors = []

    def call():
        try:
            pynvml.nvmlDeviceGetPowerUsage(h)
        except pynvml.NVMLError as exc:
            errors.append(exc.value)

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(0.1)
    pynvml.nvmlShutdown()
    worker.join(0.3)
    assert worker.is_alive()
    lib.release()
    worker.join(5)
    assert not worker.is_alive() and errors == []  # it answers when the driver does


def test_xids_arrive_through_registered_event_sets_only(golden):
    lib, _clock = golden
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es)
    data = pynvml.nvmlEventSetWait(es, 100)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 13)  # golden: XID 13 at t=0
    assert pynvml.nvmlDeviceGetUUID(data.device) == "GPU-00000000-0000-4000-8000-000000000000"
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 50)  # delivered once
    lib.inject_xid(1, 31)  # GPU 1 is not registered
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 50)
    lib.inject_xid(0, 79)
    assert pynvml.nvmlEventSetWait(es, 100).eventData == 79
    pynvml.nvmlEventSetFree(es)


def test_each_xid_reaches_every_event_set_registered_before_it(golden):
    """As the driver does: two sets registered for a GPU both get its XID (so a second watcher would count
    it twice); a set registered afterwards does not get it."""
    lib, clock = golden
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.set(5)
    sets = [pynvml.nvmlEventSetCreate() for _ in range(2)]
    for es in sets:
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    lib.inject_xid(0, 79)
    assert [pynvml.nvmlEventSetWait(es, 100).eventData for es in sets] == [79, 79]
    clock.set(6)
    late = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, late)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(late, 50)
    for es in (*sets, late):
        pynvml.nvmlEventSetFree(es)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetFree(late)  # freed once


def test_calls_are_counted_per_function_and_gpu(golden):
    lib, _ = golden
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    lib.calls.clear()
    pynvml.nvmlDeviceGetPowerUsage(h0)
    pynvml.nvmlDeviceGetPowerUsage(h0)
    pynvml.nvmlDeviceGetPowerUsage(h1)
    pynvml.nvmlDeviceGetCount()
    assert lib.calls == {
        ("nvmlDeviceGetPowerUsage", 0): 2,
        ("nvmlDeviceGetPowerUsage", 1): 1,
        ("nvmlDeviceGetCount_v2", None): 1,  # the entry point the binding's nvmlDeviceGetCount calls
    }
    assert lib.calls[("nvmlDeviceGetCount", None)] == 1  # also answers to the binding's name
    assert lib.callers["nvmlDeviceGetPowerUsage"] == {threading.current_thread().name}


def test_a_foreign_handle_is_an_invalid_argument(golden):
    _lib, _ = golden
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(ctypes.cast(ctypes.c_void_p(0x1234), pynvml.c_nvmlDevice_t))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(7)


@pytest.mark.parametrize(("name", "code"), [("GPU_IS_LOST", 15), ("NVML_ERROR_TIMEOUT", 10), (999, 999)])
def test_error_code_accepts_short_and_full_names(name, code):
    assert error_code(name) == code


def test_error_code_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown NVML error 'MELTED'"):
        error_code("MELTED")
