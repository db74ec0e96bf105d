"""Workload modelling: what a workload is and what it should use.

- ``profiles``: the declared workload (config.yaml ``workloads:``), its types and validation;
- ``modelconfig``: a Hugging Face ``config.json`` read into a profile's architecture;
- ``sizing``: the memory model (weights, KV cache, activations, optimizer state) per GPU;
- ``serving_memory``: what a serving runtime (vLLM, SGLang, TGI) itself reserves and reports;
- ``estimate`` and ``sizing_table``: ``headroom estimate`` and the generated table in docs/sizing.md;
- ``attribution``: each tick, a workload's processes joined with NVML's per-GPU process lists,
  measured against expected.

Pure code: nothing here reads the host, NVML or the network (tests/test_architecture.py).
"""
