"""``python -m headroom.analysis.bottleneck``: the thresholds table of docs/analysis.md."""

from headroom.analysis.thresholds import thresholds_markdown

print(thresholds_markdown(), end="")
