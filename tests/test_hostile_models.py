"""Model files that another user's launcher points the agent at (issue 24, items 3, 5, 6, 7): `vllm serve /dev/zero`,
a sparse 2 GiB config.json, a huge safetensors header, symlinks and weight_map names leading out of the model
directory, files and directories the process's own user cannot read, a symlink swapped between check and
open, a process that changes credentials, a FIFO config.json. Each is refused with one line (never a file's
content), fast, in bounded memory, and never blocks the model worker or the agent's exit."""

from __future__ import annotations

import json
import os
import re
import resource
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from headroom.safeio import Credentials, FileRefused, Tree
from headroom.samples import IdentityGroup, PreviousTick
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector, process_identity, read_launcher_model

# read_launcher_model, MODEL_READ_SECONDS: patched in the model reader's module, where it looks them up
from headroom.sources.identity import models as identity_models
from headroom.workload import modelconfig
from headroom.workload.modelconfig import ModelConfigError, read_model_config

HF = Path(__file__).resolve().parent / "fixtures" / "hf"
QWEN3 = (HF / "qwen3-0.6b" / "config.json").read_text()
ROOT_ONLY = os.getuid() == 0
needs_root = pytest.mark.skipif(not ROOT_ONLY, reason="needs root: files owned by another user")


def fake_proc(tmp_path: Path, pid: int, argv: list[str], root: Path | None = None, uid: int = 1000,
              ppid: int = 1) -> Path:
    """/proc/PID of a process of uid ``uid`` (groups 1000) whose root is ``root`` (tmp_path/rootfs)."""
    proc = tmp_path / "proc"
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (p) S {ppid} {pid} {pid} 0 -1 4194560 10 0 0 0 0 0 0 0 20 0 1 0 900000 1000000 0 "
                            "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "environ").write_bytes(b"HF_HUB_CACHE=/hub\0")
    (d / "cgroup").write_text("0::/\n")
    status(d, uid)
    rootfs = root or tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    os.symlink(rootfs, d / "root")
    os.symlink(rootfs, d / "cwd")
    return proc


def status(d: Path, uid: int, euid: int | None = None) -> None:
    e = uid if euid is None else euid
    (d / "status").write_text(f"Name:\tp\nUid:\t{uid}\t{e}\t{e}\t{e}\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000\n"
                              "CapEff:\t0000000000000000\n")


def model_dir(rootfs: Path, name: str = "m", config: str = QWEN3) -> Path:
    d = rootfs / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(config)
    return d


def safetensors(path: Path, header: bytes, pad: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * pad)


def st_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    out, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = 2
        for d in shape:
            n *= d
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    return json.dumps(out, separators=(",", ":")).encode()


def one_line(reason: str) -> None:
    assert reason and "\n" not in reason and "Traceback" not in reason and len(reason) <= 400, reason


def in_child(fn, *, memory_mib: int = 512, timeout: float = 60.0) -> dict:
    """Run ``fn()`` in a forked child with its address space capped ``memory_mib`` above what it has; return
    {"value": fn's JSON-able result, "rss_growth_mib": peak RSS above the start, "seconds", "max_stall_ms": the
    most CPU fn's thread ran while another thread waited for the interpreter (a sleep of 1 ms)}. A MemoryError, an exception or a hang is a failed test."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            with open("/proc/self/status") as f:
                vm = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in f) if k in ("VmSize", "VmRSS")}
            resource.setrlimit(resource.RLIMIT_AS, ((vm["VmSize"] + memory_mib * 1024) * 1024,) * 2)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS (VmHWM)
            stalls = [0.0]
            stop = threading.Event()
            # a stall is CPU that fn's thread ran while the ticker waited for the interpreter: a host loaded by
            # other processes delays both threads (wall time), but only a held interpreter lets fn run meanwhile
            fn_clock = time.pthread_getcpuclockid(threading.get_ident())

            def ticker():
                while not stop.is_set():
                    t = time.clock_gettime(fn_clock)
                    time.sleep(0.001)
                    stalls[0] = max(stalls[0], time.clock_gettime(fn_clock) - t)

            th = threading.Thread(target=ticker, daemon=True)
            th.start()
            t0 = time.perf_counter()
            value = fn()
            seconds = time.perf_counter() - t0
            stop.set()
            th.join()
            with open("/proc/self/status") as f:
                hwm = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
            out = {"value": value, "seconds": seconds, "rss_growth_mib": (hwm - vm["VmRSS"]) / 1024,
                   "max_stall_ms": stalls[0] * 1000}
        except BaseException as exc:  # noqa: BLE001 - everything is the test's failure, reported to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            code = 1
        os.write(w, json.dumps(out).encode())
        os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        raise AssertionError(f"the child took more than {timeout} s")
    with os.fdopen(r, "rb") as f:
        got = json.loads(f.read() or b"{}")
    assert "error" not in got, got.get("error")
    return got


# ------------------------------------------------------------------------- item 3: memory and time
def test_vllm_serve_dev_zero_is_refused_at_once(tmp_path):
    """`vllm serve /dev/zero` (and a config.json that is a symlink to it) took the agent from 73 to 440 MiB in
    1.8 s and to OOM; now one line, in milliseconds, no memory."""
    proc = fake_proc(tmp_path, 40, ["vllm", "serve", "/dev/zero"], root=Path("/"))
    got = in_child(lambda: read_launcher_model(proc, 40, "/dev/zero").error)
    one_line(got["value"])
    assert "character device" in got["value"] or "config.json" in got["value"], got["value"]
    assert got["seconds"] < 1.0 and got["rss_growth_mib"] < 20, got

    proc2 = fake_proc(tmp_path / "b", 41, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "b" / "rootfs")
    (m / "config.json").unlink()
    os.symlink("/dev/zero", m / "config.json")  # inside the process's root: /dev/zero is not there
    (tmp_path / "b" / "rootfs" / "dev").mkdir()
    os.symlink("/proc/self/root/dev/zero", tmp_path / "b" / "rootfs" / "dev" / "zero")
    got = in_child(lambda: read_launcher_model(proc2, 41, "/m").error)
    one_line(got["value"])
    assert got["seconds"] < 1.0 and got["rss_growth_mib"] < 20, got


def test_a_sparse_2_gib_config_json_is_refused_by_its_size(tmp_path):
    proc = fake_proc(tmp_path, 42, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "rootfs")
    with open(m / "config.json", "r+b") as f:
        f.truncate(2 << 30)
    got = in_child(lambda: read_launcher_model(proc, 42, "/m").error)
    assert got["value"] == "/m/config.json: larger than the 2 MiB allowed: not read", got
    assert got["seconds"] < 1.0 and got["rss_growth_mib"] < 20, got


def test_a_directory_or_fifo_config_json_is_one_line(tmp_path):
    proc = fake_proc(tmp_path, 43, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "rootfs")
    (m / "config.json").unlink()
    (m / "config.json").mkdir()
    info = read_launcher_model(proc, 43, "/m")
    assert info.error == "/m/config.json: is a directory, not a regular file", info.error
    (m / "config.json").rmdir()
    os.mkfifo(m / "config.json")
    t = time.monotonic()
    info = read_launcher_model(proc, 43, "/m")
    assert info.error == "/m/config.json: is a FIFO, not a regular file" and time.monotonic() - t < 1, info.error


def _many_tensors(size: int) -> bytes:
    """A header of ``size`` bytes of tiny tensors: the most entries (Python objects) per byte."""
    entry = '"t{:07d}":{{"dtype":"F16","shape":[1,1],"data_offsets":[0,2]}}'
    n = size // len(entry.format(0)) - 1
    return ("{" + ",".join(entry.format(i) for i in range(n)) + "}").encode()


def test_a_safetensors_header_over_the_cap_is_refused_without_echoing_its_length(tmp_path):
    """A 95 MiB header (under the old 100 MiB cap) peaked at 944 MiB and held the interpreter 9.5 s."""
    d = model_dir(tmp_path, config=json.dumps({"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 1}))
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", 95 << 20))
        f.truncate(8 + (95 << 20) + 16)  # sparse: the length is honest
    got = in_child(lambda: _error_of(lambda: read_model_config(d)))
    assert "larger than the 16 MiB allowed" in got["value"] and str(95 << 20) not in got["value"], got
    assert got["seconds"] < 1.0 and got["rss_growth_mib"] < 20, got


def _error_of(fn) -> str:
    try:
        fn()
    except ModelConfigError as exc:
        return str(exc)
    return ""


def test_a_large_header_is_scanned_in_bounded_memory_without_stalling_other_threads(tmp_path):
    """A 15 MiB header of 260 k tiny tensors, just under the cap: json.loads of it took ~190 MiB and held the
    interpreter ~0.9 s in one call; scanned tensor by tensor it costs the bytes and lets others run."""
    d = model_dir(tmp_path, config=json.dumps({"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 1}))
    safetensors(d / "model.safetensors", _many_tensors(15 << 20))
    got = in_child(lambda: read_model_config(d).fields["params"])
    assert got["value"] > 250_000, got
    assert got["rss_growth_mib"] < 60, got  # the header's bytes and little more
    assert got["max_stall_ms"] < 200, got


def test_headers_written_other_ways_are_read_the_same(tmp_path):
    """The fast path (the safetensors library's compact layout) and the general one agree."""
    tensors = {"a.weight": ("BF16", [4, 8]), "b.qweight": ("I32", [2, 3]), "c": ("F32", [])}
    compact = st_header(tensors)
    spaced = json.dumps({"__metadata__": {"format": "pt", "note": "a } in it"},
                         **{k: {"shape": s, "data_offsets": [0, 1], "dtype": t} for k, (t, s) in tensors.items()}},
                        indent=2).encode()
    for header in (compact, spaced):
        tensors_read = list(modelconfig.safetensors_tensors(header, "h"))
        assert tensors_read == [("a.weight", "BF16", (4, 8)), ("b.qweight", "I32", (2, 3)), ("c", "F32", ())]


@pytest.mark.parametrize(("header", "reason"), [
    (b'{"t":{"dtype":"F16","shape":[' + b"1," * 5000 + b'1],"data_offsets":[0,2]}}', "longer than the 4096 bytes"),
    (b'{"t":{"dtype":"F16","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,2]}}', "more than 8 dimensions"),
    (b'{"t":{"dtype":"F16","shape":[99999999999,99999999999],"data_offsets":[0,2]}}', "larger than any checkpoint"),
    (b'{"t":' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper"),
    (b'{"t":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}', "expected"),
    (b'{"t":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}xx', "data after"),
    (b'[1,2]', "expected a JSON object"),
])  # fmt: skip
def test_hostile_headers_are_one_line_reasons(header, reason):
    with pytest.raises(ModelConfigError) as exc:
        list(modelconfig.safetensors_tensors(header, "/m/model.safetensors"))
    one_line(str(exc.value))
    assert reason in str(exc.value) and "99999" not in str(exc.value), str(exc.value)


def test_a_huge_index_keeps_only_its_shard_names(tmp_path):
    """A 30 MiB model.safetensors.index.json (over twice Kimi-K2's): its 430 k weight_map entries are scanned,
    not built: a few MiB beyond its bytes, and other threads keep running."""
    d = model_dir(tmp_path, config=(HF / "llama-3-8b" / "config.json").read_text())
    entries = ",".join(f'"model.layers.{i}.mlp.experts.{i % 384}.w":"model-{i % 163:05d}-of-00163.safetensors"'
                       for i in range(430_000))
    (d / "model.safetensors.index.json").write_text('{"metadata":{"total_size":16060522496},"weight_map":{'
                                                    + entries + "}}")
    assert 30 << 20 < (d / "model.safetensors.index.json").stat().st_size < 32 << 20
    got = in_child(lambda: read_model_config(d).params_from)
    assert got["value"] == "safetensors index", got
    assert got["rss_growth_mib"] < 60 and got["max_stall_ms"] < 200, got


# ------------------------------------------------------------------- item 5: confined to the model directory
@needs_root
def test_a_weight_file_symlink_out_of_the_model_directory_is_not_read(tmp_path):
    """`model.safetensors -> /etc/shadow` gave "header of 3619251681095544690 bytes": 8 bytes of a root-only
    file through the status API. Now: not followed out of the model directory, and no number in the reason."""
    proc = fake_proc(tmp_path, 44, ["vllm", "serve", "/m"])
    rootfs = tmp_path / "rootfs"
    m = model_dir(rootfs)
    (rootfs / "etc").mkdir()
    secret = rootfs / "etc" / "shadow"
    secret.write_bytes(b"root:$6$saltsalt$hashhash:19000:0:99999:7:::\n" * 4)
    os.chmod(secret, 0o600)
    for target in ("/etc/shadow", "../etc/shadow", str(secret)):
        if (m / "model.safetensors").is_symlink():
            (m / "model.safetensors").unlink()
        os.symlink(target, m / "model.safetensors")
        info = read_launcher_model(proc, 44, "/m")
        if target == str(secret):  # the agent's path to it: inside the process's root it names nothing
            assert info.error == "" and "params" not in json.loads(info.fields_json), info
            continue
        one_line(info.error)
        assert info.fields_json == "" and "outside /m" in info.error, (target, info.error)
        assert not re.search(r"\d{7,}", info.error), info.error


@needs_root
@pytest.mark.parametrize("name", ["/etc/shadow", "../etc/shadow", "sub/../../etc/shadow", ".."])
def test_a_weight_map_naming_a_file_out_of_the_model_directory_is_not_read(tmp_path, name):
    proc = fake_proc(tmp_path, 45, ["vllm", "serve", "/m"])
    rootfs = tmp_path / "rootfs"
    m = model_dir(rootfs, config=(HF / "llama-3-8b" / "config.json").read_text())
    (rootfs / "etc").mkdir()
    safetensors(rootfs / "etc" / "shadow", st_header({"x": ("F16", [1])}), pad=2)
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": name}}))
    info = read_launcher_model(proc, 45, "/m")
    assert info.error == ("weight_map: /m/model.safetensors.index.json names a file outside the model directory: "
                          "not read"), info.error


@needs_root
def test_every_weight_file_is_checked_against_the_processs_user(tmp_path):
    """Only config.json had the owner check: a root-only shard was read for uid 1000."""
    proc = fake_proc(tmp_path, 46, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "rootfs")
    safetensors(m / "model.safetensors", st_header({"x": ("F16", [1])}), pad=2)
    os.chmod(m / "model.safetensors", 0o600)
    info = read_launcher_model(proc, 46, "/m")
    assert info.error == ("/m/model.safetensors: not readable by the process's user (uid 1000): not read on its "
                          "behalf"), info.error
    os.chmod(m / "model.safetensors", 0o644)
    assert read_launcher_model(proc, 46, "/m").error == ""


def test_a_hub_cache_snapshot_reads_its_blobs_and_refs_main_stays_inside(tmp_path):
    """huggingface_hub's layout: snapshots/REV/config.json -> ../../blobs/SHA, within the repository; a
    refs/main that is a path is not followed."""
    proc = fake_proc(tmp_path, 47, ["vllm", "serve", "o/m"])
    repo = tmp_path / "rootfs" / "hub" / "models--o--m"
    rev = "0123456789abcdef0123456789abcdef01234567"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "blobs" / "c0ffee").write_text(QWEN3)
    os.symlink("../../blobs/c0ffee", repo / "snapshots" / rev / "config.json")
    safetensors(repo / "blobs" / "beef", st_header({"x": ("BF16", [3, 5])}), pad=30)
    os.symlink("../../blobs/beef", repo / "snapshots" / rev / "model.safetensors")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    info = read_launcher_model(proc, 47, "o/m")
    assert info.error == "" and json.loads(info.fields_json)["params"] == 15, info
    assert info.source == f"/hub/models--o--m/snapshots/{rev}/config.json"
    (repo / "refs" / "main").write_text("../../../../etc")
    assert "refs/main: does not hold a revision" in read_launcher_model(proc, 47, "o/m").error
    # an older huggingface_hub's local_dir: config.json copied, the weights linked to the cache's blobs
    local = model_dir(tmp_path / "rootfs", "local")
    os.symlink("/hub/models--o--m/blobs/beef", local / "model.safetensors")
    info = read_launcher_model(proc, 47, "/local")
    assert info.error == "" and json.loads(info.fields_json)["params"] == 15, info


# ---------------------------------------------------- item 6: checked on the descriptor, as the process's user
@needs_root
def test_a_file_in_another_users_0700_home_is_not_read(tmp_path):
    """A 0644 config.json in uid 2000's 0700 home: uid 1000 cannot reach it, so neither does the agent for it."""
    proc = fake_proc(tmp_path, 48, ["vllm", "serve", "/home/alice/m"])
    home = tmp_path / "rootfs" / "home" / "alice"
    model_dir(home)
    os.chown(home, 2000, 2000)
    os.chmod(home, 0o700)
    info = read_launcher_model(proc, 48, "/home/alice/m")
    assert "a directory on the way is not searchable by the process's user (uid 1000)" in info.error, info.error
    os.chown(home, 1000, 1000)  # her own home
    assert read_launcher_model(proc, 48, "/home/alice/m").error == ""


@needs_root
def test_a_symlink_swapped_between_check_and_open_never_reads_the_forbidden_file(tmp_path):
    """config.json flips between a link to a readable config and one to a root-only config (6 of 37 tries read
    the root-only one before; 1 in 300 on this machine): the check is on the descriptor that is read, so never."""
    proc = fake_proc(tmp_path, 49, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "rootfs")
    (m / "config.json").unlink()
    (m / "ok.json").write_text(QWEN3)
    secret = json.loads(QWEN3)
    secret["num_hidden_layers"] = 999
    (m / "secret.json").write_text(json.dumps(secret))
    os.chmod(m / "secret.json", 0o600)
    os.symlink("ok.json", m / "config.json")
    stop = threading.Event()

    def swap():
        links = [m / "l-ok", m / "l-secret"]
        os.symlink("ok.json", links[0])
        os.symlink("secret.json", links[1])
        i = 0
        while not stop.is_set():
            os.symlink(("ok.json", "secret.json")[i % 2], m / "next")
            os.replace(m / "next", m / "config.json")
            i += 1

    th = threading.Thread(target=swap)
    th.start()
    outcomes = {"read": 0, "refused": 0}
    try:
        for _ in range(1000):
            info = read_launcher_model(proc, 49, "/m")
            if info.fields_json:
                assert json.loads(info.fields_json)["architecture"]["layers"] == 28, "read the root-only file"
                outcomes["read"] += 1
            else:
                outcomes["refused"] += 1
                one_line(info.error)
    finally:
        stop.set()
        th.join()
    assert outcomes["read"] and outcomes["refused"], outcomes  # the swap did race both ways


@needs_root
def test_credentials_are_the_ones_captured_with_the_command_line(tmp_path):
    """A launcher that execs a setuid program after its command line was read does not lend the agent root's
    permissions: the captured credentials are used, and a process whose credentials changed by the end of
    the read is not sized."""
    proc = fake_proc(tmp_path, 50, ["vllm", "serve", "/m"])
    m = model_dir(tmp_path / "rootfs")
    os.chmod(m / "config.json", 0o600)  # root's
    who = process_identity(proc, 50)
    assert not isinstance(who, str) and who.creds.uid == 1000
    status(proc / "50", 1000, euid=0)  # now setuid root: real uid still 1000
    info = read_launcher_model(proc, 50, "/m", who)
    assert "not readable by the process's user (uid 1000)" in info.error, info.error
    # a setuid-root process is checked as its real user too (who wrote its argv)
    assert "not readable" in read_launcher_model(proc, 50, "/m").error
    os.chmod(m / "config.json", 0o644)
    info = read_launcher_model(proc, 50, "/m", who)  # readable, but the process is no longer the one captured
    assert info.fields_json == "" and "the process changed" in info.error, info.error
    status(proc / "50", 1000)
    assert read_launcher_model(proc, 50, "/m", who).error == ""


@needs_root
def test_a_real_unprivileged_process_is_read_as_its_own_user(tmp_path):
    """A real process (uid 65534) through the real /proc: its credentials and root, a root-only file refused,
    a world-readable one read."""
    d = Path(f"/run/headroom-test-{os.getpid()}")
    d.mkdir()
    try:
        m = model_dir(d)
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setgid(65534); os.setuid(65534); "
                                  "time.sleep(30)"])
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                who = process_identity(Path("/proc"), child.pid)
                if not isinstance(who, str) and who.creds.uid == 65534:
                    break
                time.sleep(0.02)
            assert read_launcher_model(Path("/proc"), child.pid, str(m)).error == ""
            os.chmod(m / "config.json", 0o600)
            assert "not readable by the process's user (uid 65534)" in \
                read_launcher_model(Path("/proc"), child.pid, str(m)).error
        finally:
            child.kill()
            child.wait()
    finally:
        for p in sorted(d.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        d.rmdir()


def test_credentials_from_status():
    text = "Uid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nGroups:\t27 1000\nCapEff:\t000001ffffffffff\n"
    c = Credentials.from_status(text)
    assert (c.uid, c.real_uid, c.privileged, c.gids) == (0, 1000, False, frozenset({1000, 27}))
    root = Credentials.from_status(text.replace("1000\t0\t0\t0", "0\t0\t0\t0"))
    assert root.privileged
    nocaps = Credentials.from_status(text.replace("1000\t0\t0\t0", "0\t0\t0\t0").replace("1ffffffffff", "0"))
    assert not nocaps.privileged  # a root process without CAP_DAC_*: the mode bits apply to it too
    with pytest.raises(ValueError, match=r"^no Uid, Gid and Groups lines$"):
        Credentials.from_status("Name:\tx\n")


def test_a_tree_resolves_absolute_symlinks_and_dotdot_inside_its_root(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    os.symlink("/a/f", tmp_path / "abs")
    os.symlink("../../../../a/f", tmp_path / "a" / "up")
    os.symlink("loop", tmp_path / "loop")
    with Tree(tmp_path) as t:
        assert t.read("/abs", 10) == b"x" and t.read("/a/up", 10) == b"x" and t.read("/../../a/f", 10) == b"x"
        with pytest.raises(FileRefused, match="more than 40 symlinks"):
            t.read("/loop", 10)
        with pytest.raises(FileRefused, match="leads outside /b"):
            t.read("/abs", 10, within=("b",))
        with pytest.raises(FileNotFoundError):
            t.read("/nope", 10)


# ------------------------------------------------------------------------ item 7: never block the worker
def _two_launchers(tmp_path: Path) -> tuple[IdentityCollector, Path]:
    """Launchers 60 (/slow) and 70 (/m) with GPU processes 61 and 71."""
    proc = fake_proc(tmp_path, 60, ["vllm", "serve", "/slow", "--port", "8001"])
    fake_proc(tmp_path / "x", 61, ["VLLM::EngineCore"], ppid=60)
    os.rename(tmp_path / "x" / "proc" / "61", proc / "61")
    fake_proc(tmp_path / "y", 70, ["vllm", "serve", "/m", "--port", "8002"])
    os.rename(tmp_path / "y" / "proc" / "70", proc / "70")
    fake_proc(tmp_path / "z", 71, ["VLLM::EngineCore"], ppid=70)
    os.rename(tmp_path / "z" / "proc" / "71", proc / "71")
    for p in (70, 71):
        os.unlink(proc / str(p) / "root")
        os.symlink(tmp_path / "rootfs", proc / str(p) / "root")
    model_dir(tmp_path / "rootfs")
    from test_launchers import _sample

    previous = _sample(0.0, (IdentityGroup(kind="x", name="x", pids=(61, 71)),))
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(previous)))
    return c, tmp_path / "rootfs"


def _until_sized(c: IdentityCollector, seconds: float) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while True:
        s = c.collect()
        models = {g.launcher.model: (g.model.error if g.model is not None else "") for g in s.groups}
        if all(not e.startswith(("reading", "waiting")) for e in models.values()) or time.monotonic() > deadline:
            return models
        time.sleep(0.02)


def test_a_fifo_config_json_does_not_stop_the_next_launcher_being_sized(tmp_path):
    """A FIFO config.json blocked the only model worker forever: no later launcher was ever sized."""
    c, rootfs = _two_launchers(tmp_path)
    (rootfs / "slow").mkdir()
    os.mkfifo(rootfs / "slow" / "config.json")
    try:
        models = _until_sized(c, 10)
        assert models == {"/slow": "/slow/config.json: is a FIFO, not a regular file", "/m": ""}, models
    finally:
        c.close()
        try:  # the code before this fix sits in open(): a writer lets it go
            os.close(os.open(rootfs / "slow" / "config.json", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_a_read_stuck_past_its_deadline_is_given_up_and_the_next_runs(tmp_path, monkeypatch):
    """A read stuck inside a system call (a hung NFS mount) gets a reason after MODEL_READ_SECONDS; the next
    launcher's model is read in a new thread."""
    c, _ = _two_launchers(tmp_path)
    release = threading.Event()
    real = identity_models.read_launcher_model

    def read(procfs_root, pid, model, *args, **kwargs):
        if model == "/slow":
            release.wait(30)
        return real(procfs_root, pid, model, *args, **kwargs)

    monkeypatch.setattr(identity_models, "read_launcher_model", read)
    monkeypatch.setattr(identity_models, "MODEL_READ_SECONDS", 0.3)
    try:
        t = time.monotonic()
        models = _until_sized(c, 10)
        assert time.monotonic() - t < 5
        assert models["/m"] == "" and "gave up reading its model files after 0.3 s" in models["/slow"], models
    finally:
        release.set()
        c.close()


_STUCK = """
import sys, threading, time
sys.path.insert(0, {tests!r})
from pathlib import Path
# the model reader's module, where it looks read_launcher_model up
from headroom.sources.identity import models as identity
import test_hostile_models as t
release = threading.Event()
identity.read_launcher_model = lambda *a, **k: release.wait()  # a read that never returns
c, _ = t._two_launchers(Path({tmp!r}))
c.collect()
time.sleep(0.2)
c.close()
print("closed", flush=True)
"""


def test_a_stuck_model_read_does_not_keep_the_process_from_exiting(tmp_path):
    """The worker was a ThreadPoolExecutor thread, joined at exit: a read stuck forever kept the agent alive."""
    script = _STUCK.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30, text=True)
    assert out.returncode == 0 and "closed" in out.stdout, out.stderr[-2000:]
    assert time.monotonic() - t < 10


def test_sigterm_of_headroom_run_returns_promptly_with_a_fifo_config_json(tmp_path, agent_factory):
    """`headroom run` with a launcher whose config.json is a FIFO: SIGTERM hung until the FIFO got a writer."""
    from conftest import http_get

    proc = fake_proc(tmp_path, 4300, ["vllm", "serve", "/slow", "--port", "8001"])
    (tmp_path / "rootfs" / "slow").mkdir()
    fifo = tmp_path / "rootfs" / "slow" / "config.json"
    os.mkfifo(fifo)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("gpus:\n  - name: NVIDIA H100 80GB HBM3\n    memory_total: 80GiB\n    power_limit: 700\n"
                        "    processes:\n      - {pid: 4300, used_memory: 20GiB}\n")
    agent = agent_factory("--simulate", str(scenario), "--sample.interval", "200ms", "--path.procfs", str(proc))
    try:
        error = ""
        for _ in range(100):
            doc = json.loads(http_get(f"{agent.url}/api/v1/status")[2])
            found = [w for w in doc.get("workloads", []) if "slow" in json.dumps(w)]
            if found:
                error = json.dumps(found)
                if "FIFO" in error:
                    break
            time.sleep(0.1)
        t = time.monotonic()
        agent.proc.terminate()
        try:
            agent.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t
        assert agent.proc.returncode is not None and took < 10, f"SIGTERM took over {took:.1f} s"
    finally:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
