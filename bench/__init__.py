"""The benchmark harness (issue 7): what one tick, one scrape and a steady agent cost, side by side
with node_exporter and a bare prometheus-client exporter. Run ``python -m bench`` (``make bench``);
it writes docs/benchmarks.md. See bench/run.py for the flags.
"""
