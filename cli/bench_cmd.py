"""`smartune bench ...`: benchmarks (not tests). `bench step` times one training step per method; `bench api`
the control plane's latency under load and its scheduler; `bench sweep` the sweep's orchestration overhead
and what ASHA saves."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="benchmarks: step time and memory per method, padding")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    step = kinds.add_parser(
        "step", help="time and memory of one training step per method, vs vanilla and smart-pytorch"
    )
    step.add_argument("--model", default="minilm-l6")
    step.add_argument(
        "--methods",
        default="vanilla,smart,smart+diagnostics_every=1,smart-renorm,smart-rs-only,smart-breg-only,r3f,freelb,pgd",
        help="method presets, each optionally with overrides: smart+rs_dropout=shared+diagnostics_every=1",
    )
    step.add_argument(
        "--rs-dropout",
        default="",
        help="also time every R_s method under these dropout modes (independent,shared,off)",
    )
    step.add_argument("--batch-size", type=int, default=16)
    step.add_argument("--seq-len", type=int, default=64)
    step.add_argument("--steps", type=int, default=10, help="timed steps per method (after warm-up)")
    step.add_argument(
        "--device", default="cpu", help="cpu or cuda (falls back to cpu when no GPU is visible)"
    )
    step.add_argument(
        "--padding-tasks", default="rte,mrpc,cola", help="tasks of the padding comparison ('' skips it)"
    )
    step.add_argument(
        "--precision", default="fp32", choices=("fp32", "bf16"), help="bf16: each step's loss under autocast"
    )
    step.add_argument("--compile", action="store_true", help="compile each copy's encoder (compile: true)")
    step.add_argument("--json", action="store_true", help="print one JSON object")
    step.set_defaults(handler=run_step)
    _register_sweep(kinds)


def _register_sweep(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = kinds.add_parser(
        "sweep", help="orchestration overhead (sweep vs in-process trainings) and ASHA vs the full grid"
    )
    sweep.add_argument("--model", default="minilm-l6")
    sweep.add_argument("--task", default="rte")
    sweep.add_argument("--data", default=None, help="default: $SMARTUNE_GLUE_DIR or ../shared/data/glue")
    sweep.add_argument("--method", default="smart")
    sweep.add_argument("--epochs", type=int, default=2)
    sweep.add_argument("--batch-size", type=int, default=16)
    sweep.add_argument("--seq-len", type=int, default=128)
    sweep.add_argument("--eval-samples", type=int, default=128, help="dev examples evaluated per epoch")
    sweep.add_argument("--trainings", type=int, default=8, help="trainings of the overhead comparison")
    sweep.add_argument("--min-seconds", type=float, default=120.0, help="least duration of one training")
    sweep.add_argument("--probe-samples", type=int, default=64, help="examples timed to size the trainings")
    sweep.add_argument("--asha-lrs", default="1e-5,2e-5,3e-5,5e-5", help="learning rates of the ASHA grid")
    sweep.add_argument("--asha-seeds", type=int, default=2, help="seeds per learning rate")
    sweep.add_argument("--asha-samples", type=int, default=512, help="training examples of the ASHA grid")
    sweep.add_argument("--asha-reduction", type=float, default=2.0, help="ASHA reduction factor")
    sweep.add_argument("--asha-cpus", type=float, default=1.0, help="CPUs per ASHA-grid trial")
    sweep.add_argument("--asha-concurrency", type=int, default=2, help="concurrent trials of the ASHA grid")
    sweep.add_argument("--skip-overhead", action="store_true")
    sweep.add_argument("--skip-asha", action="store_true")
    sweep.add_argument(
        "--data-dir", default=None, help="storage + MLflow of the bench runs (default: a temp dir)"
    )
    sweep.set_defaults(handler=run_sweep)

    api = kinds.add_parser(
        "api", help="REST latency under concurrent clients (SQLite) and the scheduler's decision time"
    )
    api.add_argument("--clients", type=int, default=32, help="concurrent clients")
    api.add_argument("--submits", type=int, default=20, help="POST /api/v1/jobs per client")
    api.add_argument("--reads", type=int, default=100, help="GET /api/v1/jobs/{id} per client")
    api.add_argument("--queued", type=int, default=10_000, help="queued jobs of the scheduler benchmark")
    api.add_argument("--teams", type=int, default=50, help="teams those jobs belong to")
    api.add_argument("--rounds", type=int, default=20, help="scheduling rounds timed")
    api.add_argument("--json", action="store_true", help="print one JSON object")
    api.set_defaults(handler=run_api)

    load = kinds.add_parser(
        "load",
        help="the whole service (real Ray, real jobs) under concurrent clients; zero 5xx, all jobs final",
    )
    load.add_argument("--clients", type=int, default=32, help="concurrent clients, one API key each")
    load.add_argument("--teams", type=int, default=4, help="teams the clients belong to")
    load.add_argument("--seconds", type=float, default=60.0, help="how long the clients send requests")
    load.add_argument("--queue-limit", type=int, default=4, help="queued jobs per team (then 429)")
    load.add_argument("--drain-timeout", type=float, default=1200.0, help="seconds for every job to end")
    load.add_argument(
        "--database-url",
        action="append",
        default=None,
        metavar="URL",
        help="the job store: a SQLAlchemy URL (a PostgreSQL of your own; the run's teams, keys and jobs stay "
        "in it) or 'sqlite' (the default: a fresh file in a temp folder); repeat to run against each in turn",
    )
    load.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="a running Ray cluster for the service's jobs (as RAY_ADDRESS: the dashboard's http://host:8265); "
        "default: `smartune serve` starts a local head of its own",
    )
    load.add_argument(
        "--noisy-neighbour",
        action="store_true",
        help="instead: one quiet team of --clients clients, alone and beside a noisy team at its limits, "
        "--seconds each (bench/noisy_neighbour.py); passes when the quiet p99 beside it stays within "
        "--p99-bound of the p99 alone and the quiet team gets no error",
    )
    load.add_argument("--noisy-clients", type=int, default=4, help="the noisy team's API keys")
    load.add_argument(
        "--noisy-concurrency", type=int, default=4, help="requests the noisy team has in flight per key"
    )
    load.add_argument(
        "--noisy-quota-bytes", type=int, default=200_000, help="the noisy team's storage quota (bytes)"
    )
    load.add_argument(
        "--rounds", type=int, default=4, help="alone/beside window pairs the 2 x --seconds are cut into"
    )
    load.add_argument("--p99-bound", type=float, default=2.0, help="loaded p99 / unloaded p99 that passes")
    load.set_defaults(handler=run_load)

    # Benchmarks with their own options (`smartune bench dashboard --help`): the arguments pass through.
    for name, help_text in (
        (
            "dashboard",
            "the job page of a 500-trial x 10-epoch sweep in headless Chromium (bench/dashboard.py)",
        ),
        (
            "startup",
            "a trial's start-up with and without the sweep's shared tokenised data (bench/startup.py)",
        ),
        (
            "job-startup",
            "a small Ray job's start-up, phase by phase, on a real local head (bench/job_startup.py)",
        ),
    ):
        # `+` as the only prefix: every `--option` is a plain word here, handed on to the benchmark.
        passthrough = kinds.add_parser(name, help=help_text, add_help=False, prefix_chars="+")
        passthrough.add_argument("args", nargs="*", help="the benchmark's own options")
        passthrough.set_defaults(handler=run_passthrough, bench_module=f"bench.{name.replace('-', '_')}")


def run_step(args: argparse.Namespace) -> int:
    from bench.step import main

    return main(args)


def run_api(args: argparse.Namespace) -> int:
    from bench.api_load import main

    return main(args)


def run_load(args: argparse.Namespace) -> int:
    if args.noisy_neighbour:
        from bench.noisy_neighbour import main
    else:
        from bench.load import main

    return main(args)


def run_passthrough(args: argparse.Namespace) -> int:
    import importlib

    main = importlib.import_module(args.bench_module).main
    return int(main(list(args.args)))


def run_sweep(args: argparse.Namespace) -> int:
    from bench.orchestration import main

    return main(args)
