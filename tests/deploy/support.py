"""What the deploy tests share: the repository's paths, deploy/env.example, and the environment names the
service understands (service.config.Settings is the contract; a misspelt name there is silently ignored)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import AliasChoices

from service.config import Settings
from service.engine.dispatch import PASSED_THROUGH

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# Names the service's process does not parse itself but hands to a library it uses, or to every job.
LIBRARY_ENV = {
    "MLFLOW_TRACKING_USERNAME": "MLflow's client logs in with it (basic auth)",
    "MLFLOW_TRACKING_PASSWORD": "MLflow's client logs in with it",
    "AWS_ACCESS_KEY_ID": "boto3 / pyarrow",
    "AWS_SECRET_ACCESS_KEY": "boto3 / pyarrow",
    "AWS_ENDPOINT_URL": "boto3 / pyarrow: the S3 endpoint (MinIO)",
    "AWS_DEFAULT_REGION": "boto3 / pyarrow",
    "HF_HUB_OFFLINE": "Hugging Face libraries",
    "TRANSFORMERS_OFFLINE": "Hugging Face libraries",
    "RAY_AUTH_MODE": "Ray's client",
    **dict.fromkeys(PASSED_THROUGH, "passed through to every job (service.engine.dispatch.PASSED_THROUGH)"),
}


def settings_env_names() -> set[str]:
    """Every environment name a Settings field is read from (upper case: pydantic-settings ignores case)."""
    prefix = Settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(choice.upper() for choice in alias.choices if isinstance(choice, str))
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field}".upper())
    return names


def unknown_env_names(names: set[str]) -> set[str]:
    """The names that are neither a Settings field nor a documented library name: typos, or settings the
    service does not have (yet)."""
    known = settings_env_names() | set(LIBRARY_ENV)
    return {name for name in names if name.upper() not in known}


def env_example() -> dict[str, str]:
    """deploy/env.example as NAME -> value (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in (DEPLOY / "env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


_VAR = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


def interpolations(text: str) -> list[re.Match[str]]:
    """Every `${NAME...}` compose interpolates in `text` (`$${...}` is an escape, left to the container)."""
    return list(_VAR.finditer(text))


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's interpolation of one value with `env` (the forms this repository uses: plain, :-, :?)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"]
        given = env.get(name, "")
        if op == ":-":
            return given or arg
        if op == "-":
            return env.get(name, arg)
        return given

    return _VAR.sub(one, value)
