"""Writes a Prometheus file_sd target file from a host inventory.

    python -m headroom.fleet.file_sd inventory.yaml /etc/prometheus/targets/headroom.json

inventory.yaml (every key but ``hosts`` optional):

    port: 9843                      # default port of every host
    labels: {cluster: eu-1}         # added to every host
    hosts:
      - gpu-node-01                 # a host name: scraped at gpu-node-01:9843, instance="gpu-node-01"
      - {name: gpu-node-02, address: 10.0.4.2, port: 9843, labels: {pool: h100}}

Each target carries its name in the label ``__host__``; the relabelling in deploy/prometheus/file-sd.yml turns it
into ``instance`` (so instance is the host name, not an address:port that changes with the network), and
Prometheus drops ``__``-prefixed labels after relabelling; so each host is a target group of its own. The
file is replaced atomically (written beside it, then renamed), as file_sd expects: Prometheus never reads a
half-written file. Bad input stops with ``inventory.yaml: hosts[3].port: ...`` and exit status 2.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import yaml

from headroom.jsontypes import JsonDoc, YamlMapping, YamlValue

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)$")
RESERVED = {"instance", "job", "__address__", "__host__"}


class InventoryError(ValueError):
    pass


def _port(value: YamlValue, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InventoryError(f"{where}: expected a port number 1-65535, got {value!r}")
    return value


def _labels(value: YamlValue, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InventoryError(f"{where}: expected a mapping of label names to values")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not _LABEL.match(k) or k.startswith("__") or k in RESERVED:
            raise InventoryError(f"{where}.{k}: not a label name you may set (letters, digits, _; not instance, "
                                 "job or __*)")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise InventoryError(f"{where}.{k}: expected a string value, got {v!r}")
        out[k] = str(v)
    return out


def target_groups(inventory: YamlMapping) -> list[JsonDoc]:
    """The file_sd target groups for an inventory (already loaded), one per host, sorted."""
    if not isinstance(inventory, Mapping):
        raise InventoryError("expected a mapping with a hosts list")
    unknown = set(inventory) - {"port", "labels", "hosts"}
    if unknown:
        raise InventoryError(f"unknown keys: {', '.join(sorted(map(str, unknown)))} (port, labels, hosts)")
    port = _port(inventory.get("port", 9843), "port")
    common = _labels(inventory.get("labels"), "labels")
    hosts = inventory.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        raise InventoryError("hosts: expected a non-empty list of host names or {name, address, port, labels}")
    groups: dict[tuple, list[str]] = {}
    names: set[str] = set()
    for i, h in enumerate(hosts):
        where = f"hosts[{i}]"
        if isinstance(h, str):
            h = {"name": h}
        if not isinstance(h, Mapping):
            raise InventoryError(f"{where}: expected a host name or a mapping")
        unknown = set(h) - {"name", "address", "port", "labels"}
        if unknown:
            raise InventoryError(f"{where}: unknown keys: {', '.join(sorted(map(str, unknown)))}")
        name = h.get("name")
        if not isinstance(name, str) or not _HOST.match(name):
            raise InventoryError(f"{where}.name: expected a host name, got {name!r}")
        if name in names:
            raise InventoryError(f"{where}.name: {name} is listed twice")
        names.add(name)
        address = h.get("address", name)
        if not isinstance(address, str) or not _ADDRESS.match(address):
            raise InventoryError(f"{where}.address: expected a host name or IP address, got {address!r}")
        labels = {**common, **_labels(h.get("labels"), f"{where}.labels"), "__host__": name}
        target = f"{address}:{_port(h.get('port', port), f'{where}.port')}"
        groups.setdefault(tuple(sorted(labels.items())), []).append(target)
    return [{"targets": sorted(targets), "labels": dict(key)} for key, targets in sorted(groups.items())]


def write_atomically(path: Path, groups: list[JsonDoc]) -> None:
    """Replaces PATH with the target groups as JSON in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(groups, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m headroom.fleet.file_sd INVENTORY.yaml TARGETS.json", file=sys.stderr)
        return 2
    source, dest = Path(argv[0]), Path(argv[1])
    try:
        groups = target_groups(yaml.safe_load(source.read_text()))
        write_atomically(dest, groups)
    except InventoryError as exc:
        print(f"{source}: {exc}", file=sys.stderr)
        return 2
    except (OSError, yaml.YAMLError) as exc:
        print(f"file_sd: {exc}", file=sys.stderr)
        return 2
    print(f"{dest}: {sum(len(g['targets']) for g in groups)} targets in {len(groups)} groups")
    return 0


if __name__ == "__main__":
    sys.exit(main())
