"""headroom: a GPU host monitoring agent that knows the AI workload it runs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("headroom")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
