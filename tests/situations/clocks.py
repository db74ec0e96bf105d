"""Clock-event reasons as distinct causes (issue 12, class 5): heat, power, and the ambiguous hardware
slowdown, judged against the GPU's own temperature limits; MIG GPUs, which report no utilization."""

from __future__ import annotations

from situations import GIB, SERVER, TRAINER, Gpu, Host, Situation

H100_LIMITS = (87, 89, 92, 95)  # max operating, slowdown, shutdown, memory max operating (nvidia-smi -q)

SITUATIONS = [
    Situation(
        "hardware slowdown on a cool GPU is a power problem", TRAINER, Host(),
        [Gpu(util=0.97, temperature=44, power=310, sm_clock_ratio=0.45, reasons=("hw_slowdown",),
             thresholds=H100_LIMITS)],
        "gpu_power", tags=("class-5", "power"),
        source="https://github.com/leptonai/gpud/pull/330",  # constant HW slowdown: a failing PSU, or heat
    ),
    Situation(
        "hardware slowdown at the slowdown temperature is heat", TRAINER, Host(),
        [Gpu(util=0.97, temperature=88, power=520, sm_clock_ratio=0.5, reasons=("hw_slowdown",),
             thresholds=H100_LIMITS)],
        "gpu_thermal", tags=("class-5", "thermal"),
        source="https://minerstat.com/help/nvidia-throttling-slowdown",  # slowdown: heat or an external brake
    ),
    Situation(
        "an asserted hardware power brake at 40 °C", SERVER, Host(),
        [Gpu(util=0.95, temperature=40, power=180, power_limit=1000, sm_clock_ratio=0.3,
             reasons=("hw_power_brake_slowdown", "hw_slowdown"), thresholds=H100_LIMITS, name="NVIDIA GB200")],
        "gpu_power", tags=("class-5", "power"),
        source="https://github.com/NVIDIA/NVSentinel/issues/1666",  # GB200 nodes braked 100 % for 36 h
    ),
    Situation(
        "software thermal slowdown at a low max operating temperature", SERVER, Host(),
        [Gpu(util=0.93, temperature=56, power=40, power_limit=60, sm_clock_ratio=0.55,
             reasons=("sw_thermal_slowdown",), thresholds=(57, 97, 102, None), name="NVIDIA GeForce MX330",
             mem_used=1 * GIB, mem_total=2 * GIB)],
        "gpu_thermal", tags=("class-5", "thermal"),
        source="https://github.com/intel/thermal_daemon/issues/300",  # GPU Max Operating Temp 57 C, at 56 C
    ),
    Situation(
        "hot HBM slows a cool core", SERVER, Host(),
        [Gpu(util=0.96, temperature=62, memory_temperature=94, sm_clock_ratio=0.6,
             reasons=("hw_thermal_slowdown",), thresholds=H100_LIMITS)],
        "gpu_thermal", tags=("class-5", "thermal"),
        source="https://tekkix.com/articles/hardware/2026/02/let-s-throttle-a-bit",  # core 65 C, VRAM 105 C
    ),
    Situation(
        "a chassis power budget caps one GPU below its limit", TRAINER, Host(),
        [Gpu(util=0.98, temperature=61, power=240, power_limit=400, sm_clock_ratio=0.6, reasons=("sw_power_cap",),
             thresholds=H100_LIMITS, name="NVIDIA A100-SXM4-80GB")],
        "gpu_power", tags=("class-5", "power"),
        source="https://github.com/l4rz/reverse-engineering-dell-idrac-to-get-rid-of-gpu-throttling/issues/3",
    ),
    Situation(
        "a hot card at its power cap is power-limited, not thermal", TRAINER, Host(),
        [Gpu(util=0.97, temperature=84, power=700, sm_clock_ratio=0.8, reasons=("sw_power_cap",),
             thresholds=H100_LIMITS)],
        "gpu_power", tags=("class-5", "power", "distractor"),
        source="https://factryze.ai/scale-atlas/power/power-capping",  # the cap clips the draw, not the heat
    ),
    Situation(
        "an occasional power cap on a busy GPU is compute", SERVER, Host(),
        [Gpu(util=0.98, power=690, reasons=("sw_power_cap",), reasons_share=0.1, thresholds=H100_LIMITS)],
        "gpu_compute", tags=("class-5", "power", "distractor"),
        source="https://forums.developer.nvidia.com/t/gpu-is-throttled-nv-gpu-perf-decrease-reason-api-triggered/205097",
    ),
    Situation(
        "a braked idle GPU is not a bottleneck", SERVER, Host(cpu_busy=0.02),
        [Gpu(util=0.0, temperature=37, power=70, reasons=("hw_power_brake_slowdown",), thresholds=H100_LIMITS)],
        "none", tags=("class-5", "idle", "distractor"),
        source="https://github.com/choderalab/perses/issues/613",  # an idle P8 GPU and its throttle reasons
    ),
    Situation(
        "a GPU that overheats over a long run", TRAINER, Host(),
        [Gpu(util=0.95, temperature=91, sm_clock_ratio=0.55, reasons=("hw_thermal_slowdown", "sw_thermal_slowdown"),
             thresholds=H100_LIMITS, name="NVIDIA GeForce GTX 1080 Ti", mem_total=11 * GIB, mem_used=8 * GIB,
             power=230, power_limit=250)],
        "gpu_thermal", tags=("class-5", "thermal"),
        source="https://github.com/tensorflow/tensorflow/issues/40042",  # "the GPU got overheated and slows down"
    ),
    # MIG: NVML reports no utilization for a GPU in MIG mode (nvidia-smi shows N/A): the power draw says
    # whether it works, and nothing claims starvation without a busy figure
    Situation(
        "a throttled GPU in MIG mode", SERVER, Host(),
        [Gpu(mig=True, temperature=89, power=380, power_limit=400, sm_clock_ratio=0.6,
             reasons=("hw_thermal_slowdown",), thresholds=H100_LIMITS, name="NVIDIA A100-SXM4-80GB")],
        "gpu_thermal", tags=("class-5", "mig", "thermal"),
        source="https://github.com/NVIDIA/dcgm-exporter/issues/105",  # no DCGM_FI_DEV_GPU_UTIL in MIG mode
    ),
    Situation(
        "a GPU in MIG mode beside a busy host CPU is not starved", SERVER, Host(cpu_busy=0.97, psi={"cpu.some": 0.3}),
        [Gpu(mig=True, power=87, power_limit=400, name="NVIDIA A800-SXM4-80GB", mem_used=36 * GIB)],
        "none", tags=("mig", "distractor"),
        source="https://github.com/utkuozdemir/nvidia_gpu_exporter/issues/203",  # MIG on: GPU-Util N/A
    ),
]
