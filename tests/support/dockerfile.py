"""Reading the deploy/*.Dockerfile files: their instructions, a RUN line's shell commands, an image's CMD.
What tests/deploy lints and tests/support/image_envs.py replays."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = {name: REPO / "deploy" / f"{name}.Dockerfile" for name in ("service", "worker", "mlflow")}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped; in FROM and
    RUN, each `$NAME` / `${NAME}` of an ARG is replaced by the ARG's default (what a build without
    --build-arg uses: the public base images, torch's CUDA build)."""
    result: list[tuple[str, str]] = []
    defaults: dict[str, str] = {}
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        keyword, arguments = keyword.upper(), arguments.strip()
        if keyword == "ARG" and "=" in arguments:
            name, _, value = arguments.partition("=")
            defaults[name] = value.strip('"')
        elif keyword in {"FROM", "RUN"}:
            arguments = _with_defaults(arguments, defaults)
        result.append((keyword, arguments))
        pending = ""
    return result


def _with_defaults(arguments: str, defaults: dict[str, str]) -> str:
    def default(match: re.Match[str]) -> str:
        return defaults.get(match.group(1) or match.group(2), match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", default, arguments)


def run_mounts(arguments: str) -> tuple[list[dict[str, str]], str]:
    """A RUN's `--mount=type=bind,source=...,target=...` flags (as dicts) and the command after them."""
    mounts: list[dict[str, str]] = []
    while arguments.startswith("--mount="):
        flag, _, arguments = arguments.partition(" ")
        pairs = (item.partition("=") for item in flag.removeprefix("--mount=").split(","))
        mounts.append({key: value for key, _, value in pairs})
        arguments = arguments.strip()
    return mounts, arguments


def shell_commands(line: str) -> list[tuple[list[str], str | None]]:
    """A RUN line's `&&`-joined commands, as /bin/sh splits them: (argv, the file `>` sends stdout to, or
    None). Any other operator (pipes, `;`, `||`) is refused: a replay would have to guess its meaning."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    commands: list[tuple[list[str], str | None]] = []
    argv: list[str] = []
    stdout: str | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "&&":
            commands.append((argv, stdout))
            argv, stdout = [], None
        elif token == ">":
            index += 1
            stdout = tokens[index]
        elif token and set(token) <= set("|;&<>()"):
            raise ValueError(f"cannot replay {token!r} in RUN {line}")
        else:
            argv.append(token)
        index += 1
    commands.append((argv, stdout))
    return commands


def image_command(image: str, keyword: str = "CMD") -> list[str]:
    """The image's last CMD (or ENTRYPOINT), in exec form."""
    found = [arguments for k, arguments in instructions(DOCKERFILES[image]) if k == keyword]
    return list(json.loads(found[-1]))
