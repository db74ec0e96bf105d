"""Finding and reading a model's config.json: a path (file or directory) or a model in the local Hugging Face cache.

``read_model_config`` resolves the path through safeio.Tree (optionally confined to the model's directory),
reads config.json (``MODEL_CONFIG_BYTES`` at most) and hands it to ``architecture.model_config_from``;
``find_cached_model`` finds ``ORG/NAME``'s snapshot in the hub cache (``cache_dirs``); nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from headroom.jsontypes import JsonDoc
from headroom.safeio import Confine, FileRefused, Tree, Within, show
from headroom.workload.modelconfig.architecture import model_config_from
from headroom.workload.modelconfig.fields import ModelConfig, ModelConfigError, NotCached, _refused

# Caps on what is read of a model's files (docs/serving.md, "Model files"): each well above the largest real file
# of its kind, and low enough that a hostile one costs little memory or time. Every file is read through
# safeio.Tree: regular files only, never blocking, size-capped, symlinks resolved inside the process's root.
# config.json: LLM configs are 1-10 KB; the largest real ones are image classifiers' label maps (ImageNet-21k:
# 21 843 id2label and label2id entries, about 1 MB). Parsed whole: json.loads of 2 MiB costs at most ~25 ms and,
# for the worst shape ("[{},{},...]", 24 bytes of objects per input byte), ~50 MiB
MODEL_CONFIG_BYTES = 2 * 1024 * 1024
REF_BYTES = 256  # a hub cache's refs/main: a 40-character commit hash
SNAPSHOTS = 1024  # entries of a cache repository's snapshots/ looked at (one per revision downloaded)


def _load_json(tree: Tree, path: tuple[str, ...], what: str, within: Within = None) -> JsonDoc:
    """A small JSON object file (config.json), read whole through the tree (MODEL_CONFIG_BYTES at most)."""
    try:
        raw = tree.read(path, MODEL_CONFIG_BYTES, within)
        data = json.loads(raw)
    except FileNotFoundError:
        raise ModelConfigError(show(path), f"no {what} there") from None
    except FileRefused as exc:
        raise ModelConfigError(show(path), str(exc.strerror)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(show(path), f"cannot read {what}: {exc.strerror if isinstance(exc, OSError) else exc}"
                               ) from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(show(path), f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(show(path), f"{what} must be a JSON object")
    return data


def read_model_config(path: str | os.PathLike[str], tree: Tree | None = None, confine: bool = False) -> ModelConfig:
    """Read ``path`` (a config.json, or a directory holding one) into a ``ModelConfig``. ``tree``: the files as
    a process sees them (safeio.Tree: its root, its permissions), else the agent's own; ``confine``: every file
    read must lie in the model's directory (or, for a Hugging Face cache snapshot, its repository, whose blobs/
    the snapshot links to), as for a path another user's command line names."""
    if tree is None:
        with Tree("/") as own:
            return read_model_config(os.path.abspath(path), own, confine)
    spath = os.fspath(path)
    try:
        if tree.kind(spath) == "dir":
            directory = tree.resolve_dir(spath)
        else:
            fd, canonical, _ = tree.walk(spath)
            os.close(fd)
            directory = canonical[:-1]
            if canonical[-1] != "config.json":
                raise ModelConfigError(show(canonical), "expected config.json or the directory holding it")
    except FileNotFoundError:
        raise ModelConfigError(spath, "no config.json there") from None
    except OSError as exc:
        raise _refused(exc, spath) from None
    within: Within = None
    if confine:  # a snapshot's files link to its repository's blobs/, as an older local_dir's weights may
        within = Confine(directory, blobs=True)
    p = (*directory, "config.json")
    top = _load_json(tree, p, "config.json", within)
    return model_config_from(top, show(p), directory, tree, within)


# ----------------------------------------------------------------------------------------- cache
def cache_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the Hugging Face hub cache may be, in huggingface_hub's order of precedence."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return [base / "huggingface" / "hub"]


# refs/main holds a commit hash (40 hexadecimal digits): one snapshot directory's name, never a path
_REVISION = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def find_cached_model(name: str, env: Mapping[str, str] | None = None, tree: Tree | None = None) -> Path:
    """The snapshot directory of ``ORG/NAME`` in the local cache (refs/main first, else the newest one).
    ``tree``: the files as a process sees them (its root and permissions; ``env``'s paths are in that root)."""
    parts = name.strip().split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ModelConfigError("--model", f"expected ORG/NAME as on the Hugging Face hub; got {name!r}")
    if tree is None:
        with Tree("/") as own:
            return find_cached_model(name, env, own)
    searched = []
    for root in cache_dirs(env):
        repo = str(root / f"models--{parts[0]}--{parts[1]}")
        searched.append(repo)
        try:
            if tree.kind(repo) != "dir":
                continue
            repo_dir = tree.resolve_dir(repo)
            ref = (*repo_dir, "refs", "main")
            if tree.kind(ref, repo_dir) == "file":
                revision = tree.read(ref, REF_BYTES, repo_dir).decode("ascii", "replace").strip()
                if not _REVISION.fullmatch(revision):
                    raise ModelConfigError(show(ref), "does not hold a revision (a commit hash): not followed")
                snap = (*repo_dir, "snapshots", revision)
                if tree.kind((*snap, "config.json"), repo_dir) != "":
                    return Path(show(snap))
            snaps: list[tuple[float, tuple[str, ...]]] = []
            snapshots = (*repo_dir, "snapshots")
            if tree.kind(snapshots, repo_dir) == "dir":
                for entry in tree.listdir(snapshots, SNAPSHOTS):
                    snap = (*snapshots, entry)
                    if tree.kind((*snap, "config.json"), repo_dir) != "":
                        fd, _, st = tree.walk(snap, repo_dir, final="dir")
                        os.close(fd)
                        snaps.append((st.st_mtime, snap))
        except OSError as exc:
            raise _refused(exc, repo) from None
        if snaps:
            return Path(show(max(snaps)[1]))
        raise ModelConfigError("--model", f"{repo} holds no snapshot with a config.json")
    raise NotCached("--model", f"{name} is not in the local Hugging Face cache (looked in "
                                      f"{', '.join(searched)}; set HF_HUB_CACHE or HF_HOME, or use --model-config PATH); "
                                      "nothing is downloaded")  # fmt: skip
