"""`smartune train`: its flags come from the trial's declaration; a real run on real files; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import build_parser, main
from cli.train_cmd import config_from_args
from worker.contract.trial import KNOBS


@pytest.mark.glue
def test_smartune_train_end_to_end_on_real_rte(glue_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "train", "--task", "rte", "--data", str(glue_dir), "--model", "minilm-l6", "--method", "smart",
            "--epochs", "1", "--max-train-samples", "16", "--max-eval-samples", "16", "--max-seq-length", "64",
            "--batch-size", "16", "--lambda-s", "3", "--output", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["main_metric"] == "accuracy"
    assert 0.0 <= metrics["best"]["accuracy"] <= 1.0
    assert [e["epoch"] for e in metrics["epochs"]] == [1]
    for key in ("r_s", "d_breg", "delta_linf", "delta_l2", "grad_ratio_rs", "task_loss"):
        assert key in metrics["epochs"][0]["components"], key
    assert metrics["epochs"][0]["components"]["delta_linf"] <= 1e-5 * 1.0001  # the paper's ball
    assert metrics["examples_per_s"] > 0 and metrics["train_examples"] == 16  # one step: MiniLM is slow
    assert metrics["config"]["resolved_method"]["lambda_s"] == 3.0
    assert (
        metrics["provenance"]["torch_threads"] >= 1
        and len(metrics["provenance"]["initial_model_sha256"]) == 64
    )
    assert (out / "best" / "model.safetensors").is_file() and (out / "best" / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "nope"], "nope"),
        (["--task", "rte", "--epochs", "0"], "epochs"),
        (["--task", "rte", "--bregman", "vanilla"], "no-op"),
        # An override that would turn R3F into SMART, or vanilla into a regularised method, is refused.
        (["--task", "rte", "--method", "r3f", "--ascent-steps", "1"], "ascent_steps must be 0"),
        (["--task", "rte", "--method", "vanilla", "--lambda-s", "1"], "no SMART regulariser"),
        (["--task", "rte", "--epsilon", "1e-6"], "below what fp32 resolves"),
    ],
)
def test_bad_input_is_one_clear_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", *argv, "--model", "tiny-random", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_every_trial_field_marked_cli_is_a_flag_with_its_declared_help() -> None:
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]  # type: ignore[union-attr]
    by_dest = {a.dest: a for a in train._actions}
    for name, knob in KNOBS.items():
        assert (f"t_{name}" in by_dest) == knob.cli, name
        if knob.cli:
            assert by_dest[f"t_{name}"].help == knob.help


def test_flags_make_the_trial_config_and_relative_paths_become_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "glue").mkdir()
    args = build_parser().parse_args(["train", "--task", "mrpc", "--data", "glue", "--lr", "2e-5", "--no-length-grouping",
                                      "--columns", '{"sentence1": "a"}', "--lambda-s", "3", "--output", "out"])  # fmt: skip
    config = config_from_args(args)
    assert (
        config.data == str(tmp_path / "glue") and config.learning_rate == 2e-5 and not config.length_grouping
    )
    assert config.columns == {"sentence1": "a"} and config.method_params == {"lambda_s": 3.0}
    assert config.epochs == 3  # unset flags keep the declaration's defaults
