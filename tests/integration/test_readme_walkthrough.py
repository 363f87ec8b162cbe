"""The README's first hour, run as a newcomer would (issue 31): `make run` starts the service with its own
Ray head, then every marked command block of "Your first hour" runs in order in one bash shell (its
`export`s carry from block to block, as in the newcomer's second terminal), and the quick example's sweep
ends SUCCEEDED with no request answered 4xx or 5xx. The dashboard the README sends them to answers with the
job. Only the port, the data dir and HOME differ from a newcomer's machine, through the variables the README
itself names (`SMARTUNE_PORT`, `SMARTUNE_DATA_DIR`).

`make run` is run with the install step held off (`make -o .venv/.installed-stamp run`): it would otherwise
reinstall the venv the test runs in whenever pyproject.toml is newer than its stamp. What it then runs is
checked to be `.venv/bin/smartune serve`, the Makefile's recipe."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import REPO, ProcessDied, base_env, free_port, stop_group, wait_for
from tests.support.walkthrough import Block, readme_blocks

STAMP = ".venv/.installed-stamp"  # the Makefile's $(STAMP): `-o` keeps make from remaking it
ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
WALKTHROUGH_TIMEOUT_S = 900  # Ray's job start-up (25-50 s here) + 4 MiniLM trials on a shared 2-core host


@pytest.fixture
def newcomer(tmp_path: Path, glue_dir: Path) -> dict[str, str]:
    """A newcomer's environment: their own HOME and data dir, a free API port, nothing of ours."""
    if shutil.which("make") is None or not (REPO / ".venv" / "bin" / "smartune").exists():
        pytest.skip("the walkthrough needs `make` and the checkout's .venv (make install)")
    home = tmp_path / "home"
    home.mkdir()
    # Not make's own variables either: under `make test-all` (MAKELEVEL, MAKEFLAGS) the README's `make run`
    # would be a sub-make, printing "Entering directory" lines a newcomer's shell never shows.
    env = {
        k: v
        for k, v in base_env().items()
        if not k.startswith(("SMARTUNE_", "RAY_"))
        and k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")
    }
    env |= {
        "HOME": str(home),
        "SMARTUNE_PORT": str(free_port()),
        "SMARTUNE_DATA_DIR": str(home / ".smartune"),
        "SMARTUNE_GLUE_DIR": str(glue_dir),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    return env


@pytest.fixture
def served(newcomer: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """The README's server block, run in the background until the API answers; yields its log."""
    (server,) = [b for b in readme_blocks() if b.kind == "server"]
    assert server.commands() == ["make run"], server.text
    make = ["make", "-o", STAMP, "run"]
    planned = subprocess.run([*make[:-1], "-n", "run"], cwd=REPO, env=newcomer, capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert planned.stdout.split("\n")[-2:] == [".venv/bin/smartune serve", ""], planned.stdout
    log = tmp_path / "make-run.log"
    process = subprocess.Popen(make, cwd=REPO, env=newcomer, stdout=log.open("w"),
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{newcomer['SMARTUNE_PORT']}"
    try:
        wait_for(lambda: _up(process, log, url), 300, "make run", interval=1.0)
        yield log
    finally:
        stop_group(process, signal.SIGTERM, timeout=120)  # make and `smartune serve`: it stops its Ray head
        subprocess.run([str(REPO / ".venv" / "bin" / "smartune"), "stop", "--data-dir",
                        newcomer["SMARTUNE_DATA_DIR"]], env=newcomer, capture_output=True, timeout=180)  # fmt: skip
        for found in re.finditer(r"temp dir (\S+)", log.read_text()):  # Ray's, in /tmp when the data dir's
            temp = Path(found.group(1))  # path is too long for its sockets: the newcomer's, not ours to keep
            if temp.parent == Path(tempfile.gettempdir()) and temp.name.startswith("smartune-ray-"):
                shutil.rmtree(temp, ignore_errors=True)


def _up(process: subprocess.Popen[bytes], log: Path, url: str) -> bool:
    if process.poll() is not None:
        raise ProcessDied(f"make run exited {process.returncode}:\n{log.read_text()[-3000:]}")
    return httpx.get(f"{url}/healthz", timeout=2).status_code == 200


def script(blocks: list[Block], out: Path) -> str:
    """One bash script: each block sourced in turn (its variables stay for the next), announced on stderr,
    and stopping at the first command that fails; at the end, the team key the blocks exported."""
    lines = ["set -euo pipefail"]
    for i, block in enumerate(blocks, 1):
        path = out / f"block-{i}.sh"
        path.write_text(block.text + "\n")
        lines += [
            f"echo '::walkthrough block {i} (README.md line {block.line})' >&2",
            f"source {shlex.quote(str(path))}",
        ]
    lines += [
        f'printf %s "$SMARTUNE_API_KEY" > {shlex.quote(str(out / "team-key"))}',
        "echo '::walkthrough done' >&2",
    ]
    return "\n".join(lines) + "\n"


def test_the_readme_walkthrough_runs_as_written(
    newcomer: dict[str, str], served: Path, tmp_path: Path
) -> None:
    blocks = [b for b in readme_blocks() if b.kind == "run"]
    started = time.monotonic()
    ran = subprocess.run(["bash", "-c", script(blocks, tmp_path)], cwd=REPO, env=newcomer, capture_output=True,
                         text=True, timeout=WALKTHROUGH_TIMEOUT_S)  # fmt: skip
    took = time.monotonic() - started
    said = f"stdout:\n{ran.stdout[-4000:]}\nstderr:\n{ran.stderr[-4000:]}"
    assert ran.returncode == 0, said  # every block's every command exited 0 (set -e)
    for i in range(1, len(blocks) + 1):
        assert f"::walkthrough block {i} " in ran.stderr, said
    assert "::walkthrough done" in ran.stderr, said

    url = f"http://127.0.0.1:{newcomer['SMARTUNE_PORT']}"
    key = (tmp_path / "team-key").read_text()
    assert key.startswith("smt_"), "create-team printed no key (`export` hides its exit status)"
    with httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as api:
        jobs = api.get("/jobs").json()["data"]
        assert [job["state"] for job in jobs] == ["SUCCEEDED"], jobs
        job = api.get(f"/jobs/{jobs[0]['id']}").json()
        cells = api.get(f"/jobs/{job['id']}/results").json()["cells"]
    assert job["progress"]["total"] == 4 and job["progress"]["by_state"] == {"TERMINATED": 4}, job["progress"]
    assert sorted(cell["n"] for cell in cells) == [2, 2], cells  # two learning rates x two seeds
    print(f"walkthrough {took:.0f} s; cells {[(c['params'], c['mean'], c['std']) for c in cells]}")  # noqa: T201

    # Step 5: `/` leads to the dashboard, and the team's key signs in and sees the job.
    home = httpx.get(f"{url}/", follow_redirects=False, timeout=10)
    assert home.status_code == 307 and home.headers["location"].startswith("/ui"), home.headers
    with httpx.Client(base_url=url, timeout=30, follow_redirects=True) as browser:
        form = browser.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert form.status_code == 200 and csrf, form.text[:500]
        signed = browser.post("/ui/login", data={"csrf": csrf.group(1), "key": key, "next": "/ui/jobs"})
        assert signed.status_code == 200 and str(signed.url).endswith("/ui/jobs"), signed.status_code
        page = browser.get(f"/ui/jobs/{job['id']}")
        assert page.status_code == 200 and job["id"] in page.text

    requests = [m.groupdict() for m in ACCESS.finditer(served.read_text())]
    assert any(r["method"] == "POST" and r["path"] == "/api/v1/jobs" for r in requests), requests[-20:]
    refused = [r for r in requests if int(r["status"]) >= 400]
    assert not refused, (
        refused
    )  # the walkthrough as written is never refused (the admin key's 403, above all)
