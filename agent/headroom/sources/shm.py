"""The shm collector: size, used and available bytes of shared-memory mounts (/dev/shm).

node_exporter hides every mount under /dev, so shared memory (what DataLoader workers and NCCL
fill, and what "Bus error" means when it runs out) is ours to export.

Under simulation, a scenario whose ``host:`` section declares shm mounts answers statvfs for them
(``ctx.scenario.host_statvfs``, the only syscall the synthetic host tree cannot fake).

Settings (``collectors.shm``):
  mountpoints  list of host paths, default ["/dev/shm"], resolved through --path.rootfs.

The label (MountUsage.mountpoint) is the host path as configured. The fstype comes from
<procfs>/self/mounts (fallback <procfs>/mounts), looked up by the rootfs-prefixed path (the agent's
own mount namespace), its realpath, then the configured path (a host table); a directory that is
in none of them gets "unknown". A configured mountpoint that does not exist (or cannot be statvfs'd) goes into
ShmSample.missing and is logged when that changes, never raised.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import structlog

from headroom.samples import MountUsage, ShmSample
from headroom.sources import Collector, CollectorError, SourceContext, procfs, register

log = structlog.get_logger("headroom.sources.shm")

DEFAULT_MOUNTPOINTS = ("/dev/shm",)


def _mountpoints(value: object) -> tuple[str, ...]:
    """Returns the configured mountpoints; raises CollectorError when they are not a list of paths."""
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(
        isinstance(v, str) and v for v in value
    ):
        raise CollectorError(f"collectors.shm.mountpoints: expected a list of paths, got {value!r}")
    return tuple(value)


@register
class ShmCollector(Collector):
    name = "shm"
    default_enabled = True
    description = "Shared memory mounts (/dev/shm): size, used and available bytes"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._mountpoints = _mountpoints(ctx.settings.get("mountpoints", DEFAULT_MOUNTPOINTS))
        self._paths = [(mountpoint, ctx.paths.host(mountpoint)) for mountpoint in self._mountpoints]
        self._missing: dict[str, str] = {}  # mountpoint -> why, as last logged
        self._table_error: str | None = None
        keep = procfs.is_live_procfs(ctx.paths.procfs)
        self._table_files = (procfs.ProcFile(ctx.paths.procfs / "self" / "mounts", keep),
                             procfs.ProcFile(ctx.paths.procfs / "mounts", keep))  # before 2.6.25: no self/mounts
        self._table: tuple[bytes, dict[str, str]] | None = None  # the mount table's text and what it says

    def collect(self) -> ShmSample:
        """Returns usage of every configured mountpoint that exists, and the names of those that don't."""
        fstypes = self._fstypes()
        mounts: list[MountUsage] = []
        missing: dict[str, str] = {}
        for mountpoint, path in self._paths:
            if not os.path.isdir(path):
                missing[mountpoint] = f"{path} does not exist or is not a directory"
                continue
            fstype = (
                fstypes.get(str(path))  # the table of our own namespace: the rootfs-prefixed path
                or fstypes.get(os.path.realpath(path))
                or fstypes.get(mountpoint)  # a host table (e.g. <procfs> is the host's /proc)
                or "unknown"
            )
            try:
                mounts.append(self._usage(path, mountpoint, fstype))
            except OSError as exc:
                missing[mountpoint] = f"cannot statvfs {path}: {exc.strerror or exc}"
        self._log_changes(missing)
        return ShmSample(mounts=tuple(mounts), missing=tuple(missing))

    def _usage(self, path: Path, mountpoint: str, fstype: str) -> MountUsage:
        """statvfs of ``path`` as a MountUsage; raises OSError when the syscall fails.

        Under a scenario whose ``host:`` section declares this mountpoint, the scenario's
        ``host_statvfs`` stands in for the syscall (a tree of files cannot fake statvfs); its
        answer None means "not synthesized here": the real syscall runs.
        """
        synthetic = getattr(self.ctx.scenario, "host_statvfs", None)
        usage: MountUsage | None = synthetic(mountpoint) if synthetic is not None else None
        if usage is not None:
            return dataclasses.replace(usage, mountpoint=mountpoint, fstype=fstype)
        return procfs.mount_usage(path, mountpoint=mountpoint, fstype=fstype)

    def _fstypes(self) -> dict[str, str]:
        """Returns mountpoint -> fstype from the mount table ({} when unreadable, logged once)."""
        root = self.ctx.paths.procfs
        try:
            try:
                raw = self._table_files[0].read()
            except FileNotFoundError:
                raw = self._table_files[1].read()
            if self._table is None or self._table[0] != raw:  # parsed again only when a mount changed
                table = procfs.parse_mounts(raw.decode("utf-8", "surrogateescape"))
                # later entries hide earlier ones at the same mountpoint: the last one wins
                self._table = (raw, {entry.mountpoint: entry.fstype for entry in table})
        except (OSError, ValueError) as exc:
            error = str(procfs.read_failure(root / "self" / "mounts", exc))
            if error != self._table_error:
                log.warning("mount_table_unreadable", error=error)
                self._table_error = error
            return {}
        if self._table_error is not None:
            log.info("mount_table_readable_again")
            self._table_error = None
        return self._table[1]

    def _log_changes(self, missing: dict[str, str]) -> None:
        """Logs mountpoints that went missing (or changed reason) and those that came back."""
        for mountpoint, why in missing.items():
            if self._missing.get(mountpoint) != why:
                log.warning("shm_mountpoint_missing", mountpoint=mountpoint, reason=why)
        for mountpoint in self._missing.keys() - missing.keys():
            log.info("shm_mountpoint_found", mountpoint=mountpoint)
        self._missing = missing

    def close(self) -> None:
        for f in self._table_files:
            f.close()


