"""Renders a kustomize directory of deploy/kubernetes/ to one multi-document YAML stream, without kustomize.

    python3 deploy/render.py deploy/kubernetes/servicemonitor > headroom.yaml

The layout is a plain kustomize base and overlays (`kubectl apply -k DIR` works the same); this script
implements the two kustomization fields they use, `resources` (files, or directories holding a
kustomization.yaml) and `namespace`, and refuses any other field, so its output cannot silently differ
from kustomize's (tests/test_deploy.py compares them where kubectl is installed). It exists because
neither helm nor kustomize can be installed from the package sources CI has.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace"}
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                  "RuntimeClass", "StorageClass", "PersistentVolume", "Node"}


class RenderError(Exception):
    pass


def render(directory: Path) -> list[dict]:
    """The objects the kustomization in DIRECTORY produces, in kustomize's order of resources."""
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(path.read_text()) or {}
    unknown = set(k) - SUPPORTED
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not implement: {', '.join(sorted(unknown))}")
    objects: list[dict] = []
    for entry in k.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects.extend(render(target))
        elif target.is_file():
            objects.extend(d for d in yaml.safe_load_all(target.read_text()) if d)
        else:
            raise RenderError(f"{path}: resource {entry} does not exist")
    namespace = k.get("namespace")
    if namespace:
        for obj in objects:
            if obj.get("kind") not in CLUSTER_SCOPED:
                obj.setdefault("metadata", {})["namespace"] = namespace
    seen = set()
    for obj in objects:
        key = (obj.get("apiVersion"), obj.get("kind"), obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in seen:
            raise RenderError(f"{path}: {key[1]} {key[3]} defined twice")
        seen.add(key)
    return objects


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: render.py KUSTOMIZATION_DIR", file=sys.stderr)
        return 2
    try:
        objects = render(Path(argv[0]))
    except (RenderError, OSError, yaml.YAMLError) as exc:
        print(f"render.py: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
