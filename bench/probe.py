"""`headroom probe` against vLLM's own `vllm bench serve`, side by side on one real vLLM server (issue 28).

    HEADROOM_REAL_VENV=/work/real-venv python -m bench.probe            # ~12 minutes on 2 busy cores
    python -m bench.probe --levels 1,4 --rounds 4 --step 30 --output section.md --json rounds.json

A benchmark, not a timed test: it prints (and with --output writes) the Markdown section for docs/benchmarks.md.

One server: a tiny random-weight Llama made here with tests/real_vllm.py (`make_tiny_llama`, nothing
downloaded), served by `vllm.entrypoints.openai.api_server` from the real venv (`vllm_server`, CPU build,
`--enforce-eager`, `--no-enable-prefix-caching`: every round's prompts are new to the server). ``--rounds``
rounds (default ROUNDS, 4: even, so each tool goes first as often); in each, at each concurrency, both tools
one after the other, the order alternating by
round (headroom first in odd rounds), each round with its own seed:

- `vllm bench serve` (run as `vllm.benchmarks.serve`'s own parser and main, since this build's `vllm` console
  script and `vllm.entrypoints.cli.main` stop on missing package metadata): `--backend vllm --endpoint
  /v1/completions --dataset-name random --random-range-ratio 0 --ignore-eos --temperature 0 --request-rate inf
  --max-concurrency C --num-prompts N`, TTFT/ITL percentiles 50 and 95 from its result JSON (`--temperature 0`:
  greedy, as the probe samples; vLLM's tool no longer sets it and the server then samples at temperature 1, whose
  sampler made every decode step about 9 % slower on this tiny model: ITL p50 8.5 against 7.8 ms at 4);
- `headroom probe --url ... --levels C --step S --warmup W --input-tokens IN --output-tokens OUT --json
  --no-save --no-agent --no-host`: the same lengths, closed loop at the same concurrency, its step's figures,
  the client alone (no host watch beside it, as vLLM's tool has none).

N (vLLM's prompts) is what the probe's latest run at that concurrency completed (at least MIN_PROMPTS), so both
tools measure about as many requests. The section gives, per concurrency and tool, the median over the rounds
of each metric (each on its own; no round dropped), then every round's figures. Pinning (unless --no-pin): the
bench process, and so both tools' processes, are put on the CPUs the server's compute thread is not bound to
(vLLM's CPU worker binds its OpenMP thread to a core itself); the server is left as vLLM sets it up. Both
clients run at nice CLIENT_NICE (--client-nice): a client left waiting for a CPU reads a whole stream at once.
Client CPU per request: the probe's own (`client_cpu_seconds_per_request`, its event loop thread's CPU over the
step); vLLM's tool's, its process' user + system CPU (os.wait4) minus what it had used when it printed
"Starting main benchmark run" (/proc/PID/stat: imports, tokenizer, dataset and its test request left out), over
its requests.
The ratio column is headroom / vLLM; the issue asks for TTFT, ITL and throughput within 10 %.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path[:0] = [str(ROOT), str(ROOT / "agent")]
sys.path.insert(0, str(ROOT / "tests"))  # tests/real_vllm.py, the torch helper's harness (read-only here)

MIN_PROMPTS = 16  # vllm bench serve's prompts per level, at least
KV_CACHE_BYTES = 64 * 2**20  # roomy for the tiny model: this compares clients, it does not fill the KV cache
TOLERANCE = 0.10  # the "within 10 %"
PAIR_WARMUP_SECONDS = 5.0  # an untimed probe run at the pair's concurrency before each pair: both tools meet a warm server
ROUNDS = 4  # even, so each tool goes first as often: the second of a pair did better at concurrency 4 (docs/probe.md)
CLIENT_NICE = -10  # both clients' niceness: on a shared host a client waiting for a CPU times its streams late
METRICS = ("ttft_p50", "ttft_p95", "itl_p50", "itl_p95", "rps", "tok_s", "cpu_per_request")  # compared, per tool

VLLM_BENCH = r"""
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
MAIN_RUN = b"Starting main benchmark run"  # what vllm bench serve prints when its measured run starts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_cpu(pid: int) -> float | None:
    """A live process' user + system CPU seconds from /proc/PID/stat, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_cpu(cmd: list[str], env: dict[str, str], timeout: float, marker: bytes | None = None
             ) -> tuple[int, float, float | None, str]:
    """(exit status, the child's user + system CPU seconds, its CPU when ``marker`` appeared in its output (None:
    no marker, or never seen), its output's tail)."""
    at_marker = None
    with tempfile.NamedTemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if marker is not None and at_marker is None and marker in Path(out.name).read_bytes():
                at_marker = _proc_cpu(proc.pid)
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return (proc.returncode, usage.ru_utime + usage.ru_stime, at_marker,
                out.read().decode(errors="replace")[-3000:])


def vllm_bench(python: Path, env: dict[str, str], url: str, model: str, level: int, prompts: int, ins: int,
               outs: int, work: Path, seed: int) -> dict[str, Any]:
    name = f"vllm-bench-c{level}-s{seed}.json"
    cmd = [str(python), "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", model, "--tokenizer", model, "--dataset-name", "random", "--random-input-len", str(ins),
           "--random-output-len", str(outs), "--random-range-ratio", "0", "--ignore-eos", "--temperature", "0",
           "--num-prompts", str(prompts), "--max-concurrency", str(level), "--request-rate", "inf",
           "--percentile-metrics", "ttft,itl,e2el", "--metric-percentiles", "50,95", "--save-result",
           "--result-dir", str(work), "--result-filename", name, "--disable-tqdm", "--seed", str(seed)]
    code, cpu, at_start, tail = _run_cpu(cmd, env, 1800, MAIN_RUN)
    if code != 0:
        raise RuntimeError(f"vllm bench serve exited {code}:\n{tail}")
    doc = json.loads((work / name).read_text())
    return {"ttft_p50": doc["p50_ttft_ms"] / 1000, "ttft_p95": doc["p95_ttft_ms"] / 1000,
            "itl_p50": doc["p50_itl_ms"] / 1000, "itl_p95": doc["p95_itl_ms"] / 1000,
            "rps": doc["request_throughput"], "tok_s": doc["output_throughput"], "requests": doc["completed"],
            "cpu_run": None if at_start is None else cpu - at_start}


def headroom_probe(url: str, level: int, ins: int, outs: int, step: float, warmup: float, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "headroom", "probe", "--url", url, "--levels", str(level), "--step", f"{step:g}s",
           "--warmup", f"{warmup:g}s", "--input-tokens", str(ins), "--output-tokens", str(outs), "--json",
           "--no-save", "--no-agent", "--no-host", "--seed", str(seed)]  # the client alone, as vLLM's tool
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "agent"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=step * 4 + 600, env=env)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"headroom probe exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout)
    if not result["steps"]:
        raise RuntimeError(f"headroom probe ran no step: {result.get('message')}")
    s = result["steps"][0]
    return {"ttft_p50": s["ttft"].get("p50"), "ttft_p95": s["ttft"].get("p95"), "itl_p50": s["itl"].get("p50"),
            "itl_p95": s["itl"].get("p95"), "rps": s["requests_per_second"], "tok_s": s["output_tokens_per_second"],
            "requests": s["completed"], "cpu_per_request": s.get("client_cpu_seconds_per_request"),
            "saturated": s.get("client_saturated"), "starved": s.get("client_starved"),
            "lag_p95": s.get("client_loop_lag_p95"), "cpu_wait": s.get("client_cpu_wait_ratio"),
            "lengths_exact": s.get("lengths_exact"),
            "input_mean": s.get("input_tokens_mean"), "output_mean": s.get("output_tokens_mean")}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "-"
    r = a / b
    return f"{r:.2f}" + ("" if abs(r - 1) <= TOLERANCE else " (!)")


def _median(rounds: list[dict[str, Any]], key: str) -> float | None:
    vs = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(vs) if vs else None


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric, the median over the rounds (each metric on its own: no round is picked or dropped)."""
    return {k: _median(rounds, k) for k in METRICS} | {"requests": sum(r["requests"] for r in rounds)}


def _flags(h: dict[str, Any]) -> str:
    return " saturated" if h.get("saturated") else " starved" if h.get("starved") else ""


def section(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    n = meta["rounds"]
    lines = [
        "## headroom probe against vllm bench serve (issue 28)",
        "",
        f"`python -m bench.probe` on {meta['machine']} (load average {meta['load_before']} before, "
        f"{meta['load_after']} after: shared with other sessions): one vLLM {meta['vllm']} CPU server "
        f"(`--enforce-eager`, `--no-enable-prefix-caching` so no round reuses another's prompts, a tiny "
        f"random-weight Llama: {meta['model']}), {meta['ins']} input / {meta['outs']} output tokens, text prompts "
        f"and greedy sampling for both (vLLM: random dataset, `--ignore-eos --temperature 0`; headroom: words of "
        f"exact length, `lengths_exact` {meta['exact']}), closed loop at each concurrency. {n} rounds; in each, "
        f"at each concurrency, both tools one after the other, the order alternating by round (headroom first in "
        f"rounds 1, 3, ...), after an untimed {PAIR_WARMUP_SECONDS:g} s probe run at that concurrency (so both meet "
        f"a server as warm); each round its own seed. headroom's step {meta['step']:g} s after a "
        f"{meta['warmup']:g} s warm-up; vLLM's tool as many prompts as the probe completed at that concurrency "
        f"in its latest run (at least {MIN_PROMPTS}). "
        f"{meta['pinning']} Client side; latencies in ms. The first table is the median over the rounds of each "
        f"metric for each tool (ratio = headroom / vLLM, (!) outside {TOLERANCE * 100:.0f} %), the second every "
        "round. Client CPU per request: headroom's own measure (its event loop thread over the step); vLLM's, "
        "its process' CPU from its 'Starting main benchmark run' line to its exit, over its requests. "
        "\"saturated\": the probe's own work kept its loop late; \"starved\": its loop was late (p95 over "
        "50 ms) because its thread waited for a CPU (docs/probe.md).",
        "",
        f"| concurrency | tool | requests ({n} rounds) | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | req/s "
        "| output tok/s | client CPU ms/request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        h, v = medians(r["headroom"]), medians(r["vllm"])
        for name, m in (("headroom probe", h), ("vllm bench serve", v)):
            lines.append(f"| {r['level']} | {name} | {m['requests']} | {_ms(m['ttft_p50'])} | {_ms(m['ttft_p95'])} "
                         f"| {_ms(m['itl_p50'])} | {_ms(m['itl_p95'])} | {m['rps']:.2f} | {m['tok_s']:.1f} "
                         f"| {_ms(m['cpu_per_request'])} |")
        lines.append(f"| {r['level']} | ratio | | " + " | ".join(_ratio(h[k], v[k]) for k in METRICS) + " |")
    lines += ["", "| concurrency | round | first | tool | requests | TTFT p50 | TTFT p95 | ITL p50 | ITL p95 | req/s "
              "| client CPU ms/request | client loop lag p95 ms, CPU wait |", "|---" * 12 + "|"]
    for r in rows:
        for i, (h, v) in enumerate(zip(r["headroom"], r["vllm"], strict=True)):
            first = r["order"][i][0]
            for name, m in (("headroom", h), ("vllm", v)):
                extra = (f"{_ms(m.get('lag_p95'))}, {m['cpu_wait']:.0%}{_flags(m)}" if name == "headroom"
                         and m.get("cpu_wait") is not None else "")
                lines.append(f"| {r['level']} | {i + 1} | {first} | {name} | {m['requests']} | {_ms(m['ttft_p50'])} "
                             f"| {_ms(m['ttft_p95'])} | {_ms(m['itl_p50'])} | {_ms(m['itl_p95'])} | {m['rps']:.2f} "
                             f"| {_ms(m['cpu_per_request'])} | {extra} |")
    lines += ["", f"Wall time of the whole benchmark: {meta['wall']:.0f} s (server start {meta['start']:.0f} s).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,4", help="concurrencies (default 1,4)")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--step", type=float, default=30.0, help="headroom's step, seconds (default 30)")
    ap.add_argument("--warmup", type=float, default=5.0, help="headroom's warm-up, seconds (default 5)")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"rounds, the tools' order alternating (default {ROUNDS})")
    ap.add_argument("--no-pin", action="store_true", help="leave the clients on every CPU (default: on the CPUs the "
                                                          "server's compute thread is not bound to)")
    ap.add_argument("--client-nice", type=int, default=CLIENT_NICE,
                    help=f"both clients' niceness (default {CLIENT_NICE}: ahead of other processes for a CPU; "
                         "0 leaves it)")
    ap.add_argument("--output", metavar="FILE.md", help="also write the section there")
    ap.add_argument("--json", metavar="FILE.json", help="also write every round's figures there")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    if args.rounds < 1 or not levels:
        print("bench.probe: --rounds must be at least 1 and --levels name a concurrency", file=sys.stderr)
        return 2

    import real_vllm  # tests/real_vllm.py

    t0 = time.monotonic()
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    python = real_vllm.venv_dir() / "bin" / "python"
    if not python.exists():
        print(f"bench.probe: no real venv at {real_vllm.venv_dir()} (set HEADROOM_REAL_VENV)", file=sys.stderr)
        return 2
    env = real_vllm.real_env(VLLM_TARGET_DEVICE="cpu")
    everything = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory(prefix="bench-probe-") as tmp:
        work = Path(tmp)
        model = real_vllm.make_tiny_llama(work / "model", python)
        started = time.monotonic()
        with real_vllm.vllm_server(model, _free_port(), KV_CACHE_BYTES, ("--no-enable-prefix-caching",), pin=False,
                                   python=python) as url:
            start = time.monotonic() - started
            real_vllm.completion(url, str(model), max_tokens=4)  # the first request compiles and warms: not counted
            server = real_vllm.server_cpus(real_vllm.vllm_server.last_pid)
            clients = everything - server
            if args.no_pin or not server or not clients:
                pinning = ("Nothing pinned (--no-pin)." if args.no_pin else
                           f"Nothing pinned (the server bound itself to {sorted(server) or 'no CPU'}).")
            else:
                os.sched_setaffinity(0, clients)  # both tools' processes inherit it
                threads = real_vllm.pin_server(real_vllm.vllm_server.last_pid, server)
                pinning = (f"Pinned: both clients (each tool's whole process) on CPU {_cpus(clients)}; the whole "
                           f"server ({threads} threads: its compute thread, where vLLM binds it with "
                           f"`VLLM_CPU_OMP_THREADS_BIND=auto`, its API server and engine loop) on CPU "
                           f"{_cpus(server)}, so no client shares a core with the server it measures. Other "
                           "sessions' processes run anywhere.")
            niceness = os.getpriority(os.PRIO_PROCESS, 0)
            if args.client_nice:
                try:
                    os.setpriority(os.PRIO_PROCESS, 0, args.client_nice)  # both tools' processes inherit it
                    pinning += (f" Both clients at nice {args.client_nice} (a client left waiting for a CPU reads a "
                                "whole stream at once: ITL 0, TTFT late; docs/probe.md).")
                except OSError as exc:
                    pinning += f" Clients at the default priority (nice {args.client_nice} refused: {exc.strerror})."
            rows = [{"level": level, "headroom": [], "vllm": [], "order": []} for level in levels]
            for rnd in range(args.rounds):
                for row in rows:
                    level = row["level"]
                    order = ("headroom", "vllm") if rnd % 2 == 0 else ("vllm", "headroom")
                    seed = 1000 * (rnd + 1) + level
                    # untimed: vLLM's tool has no warm-up of its own, so whichever tool came second met a server
                    # the first had warmed at this concurrency (the order effect in docs/probe.md)
                    headroom_probe(url, level, args.input_tokens, args.output_tokens, PAIR_WARMUP_SECONDS, 0, seed + 500)
                    for tool in order:
                        if tool == "headroom":
                            row["headroom"].append(headroom_probe(url, level, args.input_tokens, args.output_tokens,
                                                                  args.step, args.warmup, seed))
                        else:  # as many prompts as the probe's latest run at this level completed
                            prompts = max(MIN_PROMPTS, row["headroom"][-1]["requests"])
                            v = vllm_bench(python, env, url, str(model), level, prompts, args.input_tokens,
                                           args.output_tokens, work, seed)
                            v["cpu_per_request"] = (None if v["cpu_run"] is None
                                                    else v["cpu_run"] / max(1, v["requests"]))
                            row["vllm"].append(v)
                        print(f"bench.probe: round {rnd + 1}/{args.rounds}, concurrency {level}: {tool} done",
                              file=sys.stderr)
                    row["order"].append(order)
            os.sched_setaffinity(0, everything)
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
        version = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                 text=True, env=env, timeout=300).stdout.strip().splitlines()[-1:] or ["?"]
    meta = {"machine": f"{os.cpu_count()} cores", "vllm": version[0],
            "model": (f"{real_vllm.TINY_LLAMA['num_hidden_layers']} layers, "
                      f"hidden {real_vllm.TINY_LLAMA['hidden_size']}"),
            "ins": args.input_tokens, "outs": args.output_tokens, "step": args.step, "warmup": args.warmup,
            "rounds": args.rounds, "pinning": pinning, "load_before": load_before,
            "load_after": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
            "exact": ", ".join(sorted({str(h["lengths_exact"]) for r in rows for h in r["headroom"]})),
            "wall": time.monotonic() - t0, "start": start}
    text = section(rows, meta)
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


def _cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


if __name__ == "__main__":
    raise SystemExit(main())
