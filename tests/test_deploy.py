"""deploy/kubernetes: every kustomization renders (deploy/render.py, and `kubectl kustomize` where installed, to
the same objects), every object validates against the Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields fail) and the Prometheus Operator CRDs checked in under deploy/kubernetes/crds, the ConfigMap holds
a configuration the agent accepts, and the DaemonSet keeps the properties docs/deploy.md promises."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml

from headroom.config import check_config_text

from conftest import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ("base", "servicemonitor", "podmonitor")
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")  # oldest supported upstream release we target, and a recent one
_spec = importlib.util.spec_from_file_location("deploy_render", ROOT / "deploy" / "render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


def rendered(name: str) -> list[dict]:
    return render.render(DEPLOY / name)


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


def test_overlays_add_exactly_their_monitor():
    kinds = {name: sorted(o["kind"] for o in rendered(name)) for name in KUSTOMIZATIONS}
    assert kinds["servicemonitor"] == sorted(kinds["base"] + ["ServiceMonitor"])
    assert kinds["podmonitor"] == sorted(kinds["base"] + ["PodMonitor"])
    for obj in rendered("servicemonitor"):
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "headroom", obj["kind"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: its kustomize is the reference")
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_render_equals_kubectl_kustomize(name):
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY / name)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(yaml.safe_load_all(out.stdout), key=key) == sorted(rendered(name), key=key)


def test_the_renderer_refuses_fields_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(render.RenderError, match="commonLabels"):
        render.render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    with pytest.raises(render.RenderError, match="missing.yaml does not exist"):
        render.render(tmp_path)


def test_the_configmap_holds_a_valid_agent_configuration():
    cm = by_kind(rendered("base"), "ConfigMap")
    check_config_text(cm["data"]["config.yaml"], "configmap:config.yaml")


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


@pytest.mark.parametrize("name,kind", [("servicemonitor", "ServiceMonitor"), ("podmonitor", "PodMonitor")])
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
    [sub] = [a for a in parser._actions if a.dest == "command"]
    known = {s for a in sub.choices["run"]._actions for s in a.option_strings}
    assert not [a.split("=")[0] for a in c["args"][1:] if a.split("=")[0] not in known]
