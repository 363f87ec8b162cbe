"""`smartune bench job-startup`: where one small Ray job's time goes, phase by phase (issue 31).

A real local Ray head (`service.engine.local_head`, as `smartune serve` starts it, with token auth) runs
`--repeats` jobs of `examples/quick.yaml` (2 trials of a tiny random BERT, 32 RTE rows, one epoch each),
submitted through the service's Jobs-API adapter with the environment the service gives a sweep driver.
This process polls Ray every 0.1 s. The phases, in seconds, medians over the jobs:

- `submit_to_running`: Ray's JobSupervisor actor and runtime env, until the entrypoint runs;
- `running_to_parent_run`: the driver's interpreter, imports, `ray.init` and MLflow experiment, until the
  parent run is open (`driver_import_seconds`, `driver_ready_seconds`: the same from the driver's side,
  from its process's start; logged by versions that log them);
- `parent_run_to_first_trial`: shared data, Tuner, the trial's worker process (started by Ray, which
  unpickles the trainable, importing the training stack), until the first trial's MLflow run opens
  (`worker_start_seconds`: the trials' own view, where logged);
- `first_trial_to_first_epoch`: data and model (`setup_seconds`) and the first epoch;
- `last_epoch_to_trials_end`: final metrics and the best model logged as an MLflow model;
- `trials_end_to_parent_end`: Tune's end, outcomes, model registration, summary;
- `parent_end_to_job_end`: the driver's exit, until Ray's end time; `total`: submission to a final state.

With `--baseline DIR` (another checkout, e.g. `git archive HEAD | tar -x -C DIR`), jobs alternate between
this tree and that one on the same head (PYTHONPATH in the job's runtime env), so a busy machine's drift
hits both alike. Also the import cost of the driver's and the trial's modules in a fresh interpreter.
The service notices a job's end on its next engine round (`SMARTUNE_SCHEDULER_INTERVAL_S`, 2 s by
default: 1 s on average); not part of the phases.
`smartune bench job-startup --json > bench/results/job_startup.json` (`make bench`). Needs GLUE data
(SMARTUNE_GLUE_DIR). Not a test: the numbers depend on what else runs on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.launch import free_port

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.1
JOB_TIMEOUT_S = 600.0
PHASES = ("submit_to_running", "running_to_parent_run", "parent_run_to_first_trial",
          "first_trial_to_first_epoch", "last_epoch_to_trials_end", "trials_end_to_parent_end",
          "parent_end_to_job_end", "total")  # fmt: skip
DRIVER_METRICS = ("driver_import_seconds", "driver_ready_seconds")
TRIAL_METRICS = ("worker_start_seconds", "setup_seconds")
# The driver's module, and the trial's (its trainable's body and the training stack).
IMPORTED = ("worker.tune.sweep", "worker.tune.trainable")


def import_seconds(trees: dict[str, Path], modules: tuple[str, ...], repeats: int) -> dict[str, Any]:
    """Median wall seconds of `import module` in a fresh interpreter run in each tree (`-c` puts the working
    directory first on the path, before PYTHONPATH), interleaved (tree after tree, module after module,
    `repeats` rounds) so drift hits every tree alike."""
    code = (
        "import sys, time; t = time.perf_counter(); __import__(sys.argv[1]); print(time.perf_counter() - t)"
    )
    seen: dict[str, dict[str, list[float]]] = {name: {m: [] for m in modules} for name in trees}
    for _ in range(repeats):
        for module in modules:
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree)}
                done = subprocess.run([sys.executable, "-c", code, module], env=env, cwd=tree,
                                      capture_output=True, text=True, check=True)  # fmt: skip
                seen[name][module].append(float(done.stdout.strip().splitlines()[-1]))
    return {name: {m: round(statistics.median(v), 2) for m, v in by.items()} for name, by in seen.items()}


def job_env(tree: Path, root: Path, glue: str) -> dict[str, str]:
    """What service.engine.dispatch.submission gives a sweep driver (SQLite MLflow here), plus the tree."""
    from worker.contract.specfile import spec_from_file

    spec = spec_from_file(REPO / "examples" / "quick.yaml")
    return {
        "PYTHONPATH": str(tree),
        "SMARTUNE_JOB_SPEC": spec.canonical_json(),
        "SMARTUNE_STORAGE_PATH": str(root / "storage"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
        "SMARTUNE_MLFLOW_EXPERIMENT": "bench-job-startup",
        "SMARTUNE_TEAM": "bench",
        "SMARTUNE_GLUE_DIR": glue,
        "SMARTUNE_DATA_ROOTS": os.pathsep.join([glue, str(root)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def run_job(adapter: Any, sid: str, env: dict[str, str]) -> dict[str, float]:
    """Submit one job, poll it to a final state; Ray's and our clock readings (epoch seconds)."""
    from service.engine.ray_jobs import RAY_FINAL

    entry = f"{sys.executable} -m worker.tune.sweep --job-id {sid} --attempt 1"
    submitted = time.time()
    adapter.submit(submission_id=sid, entrypoint=entry, env_vars=env, metadata={})
    running = None
    while True:
        info = adapter.info(sid)
        now = time.time()
        if info is not None and info.status != "PENDING" and running is None:
            running = now
        if info is not None and info.status in RAY_FINAL:
            break
        if now - submitted > JOB_TIMEOUT_S:
            raise TimeoutError(f"job {sid} not final after {JOB_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)
    if info.status != "SUCCEEDED":
        raise RuntimeError(f"job {sid} {info.status}: {info.message}\n{(adapter.logs(sid) or '')[-3000:]}")
    details = adapter._request("GET", f"/api/jobs/{sid}").json()  # Ray's start/end times (ms)
    return {"submitted": submitted, "running": running or now, "final": now,
            "ray_start": details["start_time"] / 1000, "ray_end": details["end_time"] / 1000}  # fmt: skip


def mlflow_times(tracking_uri: str, job_id: str) -> dict[str, Any]:
    """The job's parent and trial runs: start/end times (epoch s), start-up metrics, first/last epoch."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("bench-job-startup")
    assert experiment is not None, "the driver made no MLflow experiment"
    runs = client.search_runs([experiment.experiment_id], f"tags.`smartune.job_id` = '{job_id}'")
    parent = next(r for r in runs if r.info.run_name == job_id)
    trials = [r for r in runs if r is not parent]
    epochs = [m.timestamp / 1000 for t in trials for m in client.get_metric_history(t.info.run_id, "epoch")]
    out: dict[str, Any] = {
        "parent_start": parent.info.start_time / 1000,
        "parent_end": parent.info.end_time / 1000,
        "first_trial": min(t.info.start_time for t in trials) / 1000,
        "trials_end": max(t.info.end_time for t in trials) / 1000,
        "first_epoch": min(epochs),
        "last_epoch": max(epochs),
    }
    out |= {k: parent.data.metrics[k] for k in DRIVER_METRICS if k in parent.data.metrics}
    for key in TRIAL_METRICS:
        values = [t.data.metrics[key] for t in trials if key in t.data.metrics]
        if values:
            out[key] = max(values)  # the slower trial: the one the job waits for
    return out


def phases(ray: dict[str, float], runs: dict[str, Any]) -> dict[str, float]:
    marks = [ray["submitted"], ray["running"], runs["parent_start"], runs["first_trial"],
             runs["first_epoch"]]  # fmt: skip
    out = {name: marks[i + 1] - marks[i] for i, name in enumerate(PHASES[:4])}
    out["last_epoch_to_trials_end"] = runs["trials_end"] - runs["last_epoch"]
    out["trials_end_to_parent_end"] = runs["parent_end"] - runs["trials_end"]
    out["parent_end_to_job_end"] = ray["ray_end"] - runs["parent_end"]
    out["total"] = ray["final"] - ray["submitted"]
    out |= {k: runs[k] for k in (*DRIVER_METRICS, *TRIAL_METRICS) if k in runs}
    return out


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = [k for k in (*PHASES, *DRIVER_METRICS, *TRIAL_METRICS) if any(k in r for r in rows)]
    return {k: round(statistics.median(r[k] for r in rows if k in r), 2) for k in keys}


def _wait_for_node(adapter: Any, timeout_s: float = 180.0) -> None:
    """Until the head lists its node (a fresh dashboard answers before its job and state modules do)."""
    from service.engine.ray_jobs import RayUnavailable

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            adapter.capacity()
            return
        except RayUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def measure(trees: dict[str, Path], repeats: int, num_cpus: int, glue: str) -> dict[str, Any]:
    from service.engine import local_head
    from service.engine.head_plan import RAY_DEFAULT_PORTS
    from service.engine.ray_jobs import JobSubmissionAdapter

    root = Path(tempfile.mkdtemp(prefix="st-js-"))  # short: Ray's socket paths live under its temp dir
    cwd = os.getcwd()
    os.chdir(root)  # the head's (and so the drivers') working directory: no tree found by accident
    head = None
    try:
        head = local_head.start_or_reuse(
            root / "data", num_cpus=num_cpus, num_gpus=0, temp_dir=root / "ray",
            ports={flag: free_port() for flag in RAY_DEFAULT_PORTS},
        )  # fmt: skip
        adapter = JobSubmissionAdapter(head.address, token=head.token, timeout_s=60)
        _wait_for_node(adapter)
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for n in range(repeats):  # interleaved: drift on a busy machine hits every tree alike
            for name, tree in trees.items():
                sid = f"js-{name}-{n}"
                ray = run_job(adapter, sid, job_env(tree, root, glue))
                rows[name].append(phases(ray, mlflow_times(f"sqlite:///{root / 'mlflow.db'}", sid)))
    finally:
        if head is not None:
            local_head.stop(head)
        os.chdir(cwd)
        shutil.rmtree(root, ignore_errors=True)
    return {name: {"median": medians(r), "jobs": [{k: round(v, 2) for k, v in row.items()} for row in r]}
            for name, r in rows.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="smartune bench job-startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="jobs per tree")
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local head")
    parser.add_argument("--baseline", default=None, help="another checkout to compare with, side by side")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    from worker.contract.sources import glue_dir

    glue = glue_dir()
    if glue is None:
        print("set SMARTUNE_GLUE_DIR to a folder of GLUE data (RTE/, ...)", file=sys.stderr)
        return 2
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    trees = {"current": REPO} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    imports = import_seconds(trees, IMPORTED, args.repeats)
    result = {"spec": "examples/quick.yaml", "repeats": args.repeats, "num_cpus": args.num_cpus,
              "load_average": os.getloadavg()[0], "import_seconds": imports,
              "jobs": measure(trees, args.repeats, args.num_cpus, str(glue))}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, row in result["jobs"].items():
            print(name, json.dumps(row["median"]), "imports:", json.dumps(imports[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
