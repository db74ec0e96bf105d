"""The GPU driver stand-in: libnvidia-ml's C entry points beneath the real pynvml binding.

Re-exports what the rest of the repository imports as ``headroom.simulation.nvml_driver``.
"""

from headroom.simulation.nvml_driver.core import ERRORS, NvmlDriver, error_code

__all__ = ["ERRORS", "NvmlDriver", "error_code"]
