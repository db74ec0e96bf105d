"""Model reading: a launcher's model files (config.json, the safetensors headers), found as the process sees them
(a path, or its Hugging Face cache, through /proc/PID/root) and read with its credentials (``read_launcher_model``),
off the tick, one read at a time in a daemon thread with a deadline (``_ModelReader``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from headroom.safeio import Credentials, Tree
from headroom.samples import ModelInfo
from headroom.sources import procfs
from headroom.workload.modelconfig import ModelConfigError

MODEL_READ_SECONDS = 30.0  # one model's files (config.json, index, every shard's header): then it is given up
STUCK_READERS = 2  # model reads past their deadline (a hung filesystem) before no more are started


class _ModelReader:
    """Reads launchers' model files one at a time, each in a daemon thread of its own, off the tick.

    A read has MODEL_READ_SECONDS (its Tree's deadline, checked between files, and this reader's, for a read
    stuck inside one system call: a hung NFS or FUSE mount). A read past its deadline is given up: its launcher
    gets a reason, the next read starts in a new thread, and the stuck thread is left to finish (a daemon: it
    cannot keep the agent from exiting). With STUCK_READERS stuck, no more are started until one returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: dict[tuple[int, str], _ReadArgs] = {}  # waiting, in order
        self._results: dict[tuple[int, str], ModelInfo] = {}
        self._running: tuple[tuple[int, str], float, threading.Thread] | None = None
        self._stuck: set[threading.Thread] = set()
        self._closed = False

    def queued(self, key: tuple[int, str]) -> bool:
        with self._lock:
            return key in self._queue or key in self._results or (self._running is not None
                                                                   and self._running[0] == key)

    def submit(self, key: tuple[int, str], procfs_root: Path, pid: int, model: str,
               who: ProcessIdentity | None) -> None:  # fmt: skip
        with self._lock:
            self._queue[key] = (procfs_root, pid, model, who)
        self._step()

    def result(self, key: tuple[int, str]) -> ModelInfo | None:
        self._step()
        with self._lock:
            return self._results.pop(key, None)

    def waiting(self, key: tuple[int, str]) -> str:
        with self._lock:
            if self._running is not None and self._running[0] == key:
                return "reading its config.json (in the background)"
            if len(self._stuck) >= STUCK_READERS:
                return (f"waiting to read its config.json: {len(self._stuck)} earlier model reads are stuck "
                        "(a hung filesystem?)")
            return "waiting to read its config.json (in the background)"

    def _step(self) -> None:
        """Give up a read past its deadline; start the next one when none runs."""
        with self._lock:
            self._stuck = {t for t in self._stuck if t.is_alive()}
            now = time.monotonic()
            if self._running is not None:
                key, started, thread = self._running
                if not thread.is_alive():
                    self._running = None
                elif now - started > MODEL_READ_SECONDS + 1.0:
                    self._results[key] = ModelInfo(error=f"gave up reading its model files after "
                                                         f"{MODEL_READ_SECONDS:g} s (a hung filesystem?): not sized")
                    self._stuck.add(thread)
                    self._running = None
            if self._running is not None or not self._queue or self._closed or len(self._stuck) >= STUCK_READERS:
                return
            key = next(iter(self._queue))
            args = self._queue.pop(key)
            thread = threading.Thread(target=self._read, args=(key, args), name="identity-model", daemon=True)
            self._running = (key, now, thread)
        thread.start()

    def _read(self, key: tuple[int, str], args: _ReadArgs) -> None:
        try:
            info = read_launcher_model(*args, deadline=time.monotonic() + MODEL_READ_SECONDS)
        except Exception as exc:  # read_launcher_model turns file problems into reasons; this is a bug's
            info = ModelInfo(error=f"cannot read the model config: {type(exc).__name__}")
        with self._lock:
            if self._running is not None and self._running[0] == key and self._running[2] is threading.current_thread():
                self._results[key] = info
                self._running = None
        self._step()

    def forget(self, live: set[tuple[int, str]]) -> None:
        """Drop the waiting reads and results of launchers that ended."""
        with self._lock:
            for d in (self._queue, self._results):
                for key in [k for k in d if k not in live]:
                    del d[key]

    def close(self) -> None:
        """Start no more reads; one running is not waited for (its thread is a daemon)."""
        with self._lock:
            self._closed = True
            self._queue.clear()


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a launcher is, captured when its command line was read: its credentials and start time. Its model
    files are read with these credentials and the result kept only if the process is still this one after."""

    creds: Credentials
    start: int  # /proc/PID/stat starttime: a pid reused by another process starts later
    status: tuple[str, ...]  # its Uid, Gid and Groups lines: a setuid exec since changes them


# what one queued model read is given: read_launcher_model's (procfs_root, pid, model, who)
_ReadArgs = tuple[Path, int, str, ProcessIdentity | None]


def process_identity(procfs_root: Path, pid: int) -> ProcessIdentity | str:
    """The process's ProcessIdentity, or why it cannot be had (a one-line reason)."""
    try:
        text = _read_status(procfs_root / str(pid) / "status")
        creds = Credentials.from_status(text)
        stat = procfs.read_pid_stat(procfs_root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return "the process's credentials are unreadable: its model files are not read"
    if stat is None:
        return "the process's start time is unreadable: its model files are not read"
    lines = tuple(line for line in text.splitlines() if line.startswith(("Uid:", "Gid:", "Groups:", "CapEff:")))
    return ProcessIdentity(creds, stat.starttime_ticks, lines)


STATUS_BYTES = 64 * 1024  # of /proc/PID/status (about 1.5 KB; a huge Groups line cut here lists fewer groups, and a
# CapEff line cut off reads as no capabilities: a cut refuses more, never allows more)


def _read_status(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(STATUS_BYTES).decode("utf-8", "replace")


def read_launcher_model(procfs_root: Path, pid: int, model: str, who: ProcessIdentity | None = None,
                        deadline: float | None = None) -> ModelInfo:
    """The config.json of the model a launcher names, seen as the process sees it, offline: a path (absolute,
    or relative to its working directory), else ``ORG/NAME`` in its user's Hugging Face cache
    (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub`` from its environment, else its user's
    home). Every file is read through safeio.Tree on /proc/PID/root: symlinks resolved inside the process's
    root, each directory and file checked against ``who``'s credentials (captured when its command line was
    read; read now when not given) on the opened descriptors, regular files only, size-capped, confined to the
    model's directory; the result is kept only if the process is still ``who`` afterwards (same start time,
    same credentials: not exited, its pid not reused, no setuid program exec'd since). Never raises: a problem
    is the ModelInfo's ``error``, one line, never a file's content."""
    import json as _json

    from headroom.workload import modelconfig

    closed = _files_closed(procfs_root / str(pid) / "root")
    if closed:
        return ModelInfo(error=closed)
    if who is None:
        got = process_identity(procfs_root, pid)
        if isinstance(got, str):
            return ModelInfo(error=got)
        who = got
    try:
        with Tree(procfs_root / str(pid) / "root", who.creds, deadline) as tree:
            if model.startswith("/"):
                path, source = model, model
            else:
                cwd = _cwd_in_root(procfs_root, pid)
                local = f"{cwd}/{model}" if cwd is not None else None
                if _looks_like_hub_name(model) and (local is None or tree.kind(f"{local}/config.json") == ""):
                    directory = modelconfig.find_cached_model(model, _cache_env(procfs_root, pid), tree)
                    path, source = str(directory), str(directory / "config.json")
                elif local is None:
                    return ModelInfo(error=f"{model}: its working directory is not inside its root: not read")
                else:
                    path, source = local, f"(working directory)/{model}"  # a path, as vLLM tries first
            mc = modelconfig.read_model_config(path, tree, confine=True)
    except modelconfig.ModelConfigError as exc:
        return ModelInfo(error=_readable(str(exc)))
    except RecursionError:
        return ModelInfo(error=f"{model}: config.json is nested too deeply to read")
    except OSError as exc:  # the root itself (the process exited, /proc/PID/root denied)
        return ModelInfo(error=_readable(f"cannot read the model files: {exc.strerror or type(exc).__name__}"))
    except (ValueError, TypeError) as exc:  # hostile files: a reason, never a traceback
        return ModelInfo(error=_readable(f"cannot read the model config: {type(exc).__name__}"))
    after = process_identity(procfs_root, pid)
    if isinstance(after, str) or after.start != who.start or after.status != who.status:
        return ModelInfo(error="the process changed (exited, or changed credentials: a setuid program?) while its "
                               "model files were read: not sized")  # fmt: skip
    return ModelInfo(source=source, fields_json=_json.dumps(mc.fields, sort_keys=True),
                     max_context=mc.max_context, encoder_only=mc.encoder_only)


def _files_closed(root: Path) -> str:
    """Why the process's files cannot be seen through /proc/PID/root ("" when they can): the kernel's ptrace
    access check (PTRACE_MODE_READ) closes /proc/PID/root, cwd and environ of another uid's process, and of a
    root process holding capabilities the agent lacks, to an agent without CAP_SYS_PTRACE (docs/deploy.md)."""
    try:
        os.stat(root)
    except PermissionError:
        return ("its files and environment are closed to the agent (/proc/PID/root: permission denied; another "
                "user's process, or root's with capabilities the agent lacks): its model config is not read; run "
                "the agent as root with its capabilities, or declare a profile")
    except OSError:
        return ""  # gone: the reader says so
    return ""


def _cwd_in_root(procfs_root: Path, pid: int) -> str | None:
    """The process's working directory as it sees it (inside its root), or None when that cannot be said."""
    try:
        root = os.readlink(procfs_root / str(pid) / "root")
        cwd = os.readlink(procfs_root / str(pid) / "cwd")
    except OSError:
        return None
    if root == "/":  # its own root (another mount namespace shows "/"): cwd is already as it sees it
        return cwd
    if cwd == root or cwd.startswith(root.rstrip("/") + "/"):
        return cwd[len(root.rstrip("/")):] or "/"
    return None


def _looks_like_hub_name(model: str) -> bool:
    parts = model.split("/")
    return len(parts) == 2 and all(parts) and not model.startswith(("~", "."))


def _cache_env(procfs_root: Path, pid: int) -> dict[str, str]:
    """The Hugging Face cache variables of the process (its environment, else its user's home), as the
    process names them (paths inside its root)."""
    env = _environ(procfs_root, pid)
    if not env.get("HOME"):
        home = _home_of(procfs_root, pid)
        if home:
            env["HOME"] = home
    if not env.get("XDG_CACHE_HOME") and env.get("HOME"):
        env["XDG_CACHE_HOME"] = env["HOME"].rstrip("/") + "/.cache"
    if env.get("HUGGINGFACE_HUB_CACHE") and not env.get("HF_HUB_CACHE"):
        env["HF_HUB_CACHE"] = env["HUGGINGFACE_HUB_CACHE"]  # the older name huggingface_hub still reads
    out = {k: v for k, v in env.items() if k in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME") and v.startswith("/")}
    if not out:
        raise ModelConfigError("--model", "no Hugging Face cache to look in: the process's environment and user "
                                          "are unreadable (run headroom as root or as the server's user)")
    return out


def _readable(message: str) -> str:
    """A message without the CLI's prefix, on one line and not too long."""
    message = " ".join(message.replace("--model: ", "").split())
    return message if len(message) <= 400 else message[:397] + "..."


def _environ(procfs_root: Path, pid: int) -> dict[str, str]:
    """The process's initial environment (/proc/PID/environ; readable by its user and root), {} if denied."""
    try:
        with open(procfs_root / str(pid) / "environ", "rb") as f:
            data = f.read(256 * 1024)
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key in (b"HF_HOME", b"HF_HUB_CACHE", b"HUGGINGFACE_HUB_CACHE", b"XDG_CACHE_HOME", b"HOME"):
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _home_of(procfs_root: Path, pid: int) -> str | None:
    """The home directory of the process's real user (passwd), when its environment does not say."""
    import pwd

    try:
        status = procfs.read_pid_status(procfs_root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return None
    uid = getattr(status, "uid", None) if status is not None else None
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
