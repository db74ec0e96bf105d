"""Batch jobs: dcgm-exporter's HPC job mapping directory (``--hpc-job-mapping-dir``: a file per GPU index listing
job IDs, one a line, written by a site's Slurm prolog), read when it changed and within bounds
(``JobMappingReader``). The jobs a cgroup path names are ``cgroup_paths``'s; what the mapping adds to the tick's
groups is ``additions``'s.
"""

from __future__ import annotations

import errno
import os
import re
import stat as stat_module
from pathlib import Path

# the job mapping directory is read when it changed (its mtime; each GPU file's inode, size and mtime), within these
# bounds; a file or the directory changed less than MAPPING_RACY_SECONDS before it was looked at is looked at again
# at the next tick (a rewrite within the clock's granularity keeps the mtime)
MAPPING_ENTRIES = 1024  # directory entries looked at per listing (a GPU's file is named by its index: a few)
MAPPING_FILES = 64  # GPU files read (the lowest indices), besides this host's GPUs' own
MAPPING_FILE_BYTES = 4096  # of one GPU file (job IDs, one a line: hundreds fit); a larger one is refused
MAPPING_RACY_SECONDS = 2.0
_JOB_ID = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")  # Slurm's 4242, 4242_7 (array), 4242+1 (heterogeneous), PBS's 12.host


class JobMappingReader:
    """dcgm-exporter's HPC job mapping directory: a file per GPU index (its name) listing job IDs, one a line.
    ``read()`` answers {GPU index: job IDs} and one-line reasons for what it refused (a FIFO, a device, a file
    over MAPPING_FILE_BYTES, lines that are not job IDs, entries beyond the bounds); it lists the directory
    only when the directory changed and reads a file only when it changed, through ``safeio.read_config_bytes``
    (non-blocking open, regular files only, bounded). Other names and sub-directories are ignored; raises
    OSError when the directory cannot be read."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = str(directory)
        self._listed: tuple[int, int] | None = None  # (inode, mtime) of the directory at the last listing
        self._names: list[str] = []
        self._notes: list[str] = []  # what the listing left out
        self._files: dict[str, tuple[tuple[int, int, int, int], tuple[str, ...], str]] = {}  # name -> (stat, jobs, why)
        self._answer: tuple[dict[int, tuple[str, ...]], tuple[str, ...]] = ({}, ())

    def read(self, indices: tuple[int, ...] = ()) -> tuple[dict[int, tuple[str, ...]], tuple[str, ...]]:
        """``indices``: this host's GPUs, whose files are looked at whatever the listing found (a directory
        filled with other files does not hide them)."""
        import time

        from headroom import safeio

        st = os.stat(self.directory)
        if not stat_module.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        racy = time.time_ns() - int(MAPPING_RACY_SECONDS * 1e9)
        changed = False
        if (st.st_ino, st.st_mtime_ns) != self._listed:
            self._list()
            self._listed = (st.st_ino, st.st_mtime_ns) if st.st_mtime_ns < racy else None
            changed = True
        files = self._files
        names = self._names
        if indices:
            listed = set(names)
            names = names + [str(i) for i in indices if str(i) not in listed]
        for name in [n for n in files if n not in names]:
            del files[name]
            changed = True
        for name in names:
            path = f"{self.directory}/{name}"
            try:
                fst = os.stat(path)  # a FIFO or a device is only stat()ed here: read_config_bytes refuses it
            except OSError:
                if files.pop(name, None) is not None:
                    changed = True
                continue  # removed by the epilog meanwhile: no job there
            key = (fst.st_ino, fst.st_size, fst.st_mtime_ns, fst.st_mode)
            known = files.get(name)
            if known is not None and known[0] == key and fst.st_mtime_ns < racy:
                continue
            jobs: tuple[str, ...]
            if stat_module.S_ISDIR(fst.st_mode):
                jobs, why = (), ""
            else:
                try:
                    text = safeio.read_config_bytes(path, MAPPING_FILE_BYTES).decode("utf-8", "replace")
                    jobs, why = _jobs_of(name, text)
                except OSError as exc:
                    jobs, why = (), f"{name}: {exc.strerror or type(exc).__name__}: not read"
            if known is None or known[1:] != (jobs, why):
                changed = True
            files[name] = (key, jobs, why)
        if changed:
            mapping = {int(n): f[1] for n, f in sorted(files.items(), key=lambda item: int(item[0])) if f[1]}
            self._answer = (mapping, (*self._notes, *(f[2] for _, f in sorted(files.items(), key=lambda item: int(item[0]))
                                                      if f[2])))
        return self._answer

    def _list(self) -> None:
        names, notes = [], []
        with os.scandir(self.directory) as entries:
            for n, entry in enumerate(entries):
                if n >= MAPPING_ENTRIES:
                    notes.append(f"more than {MAPPING_ENTRIES} entries: the rest are not looked at")
                    break
                name = entry.name
                if name.isascii() and name.isdigit() and len(name) <= 4:
                    names.append(name)
        names.sort(key=int)
        if len(names) > MAPPING_FILES:
            notes.append(f"{len(names)} GPU files: only the first {MAPPING_FILES} (by index) are read")
            del names[MAPPING_FILES:]
        self._names, self._notes = names, notes


def _jobs_of(name: str, text: str) -> tuple[tuple[str, ...], str]:
    """The job IDs of one GPU file, and why lines were refused ("" when none were)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    jobs = tuple(dict.fromkeys(line for line in lines if _JOB_ID.match(line)))
    bad = sum(1 for line in lines if not _JOB_ID.match(line))
    why = f"{name}: {bad} line(s) are not job IDs (letters, digits and _.+-, at most 64): ignored" if bad else ""
    return jobs, why


def read_job_mapping(directory: Path) -> dict[int, tuple[str, ...]]:
    """The job mapping directory's {GPU index: job IDs} (``JobMappingReader``, read once)."""
    return JobMappingReader(directory).read()[0]
