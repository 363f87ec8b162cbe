"""Task metrics against hand-computed values (and scikit-learn/scipy where installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worker.contract.tasks import get_task
from worker.training.metrics import (
    accuracy,
    binary_f1,
    compute_metrics,
    main_metric_value,
    matthews_corrcoef,
    pearson,
    spearman,
)

# Binary case used by several tests: TP = 2, FP = 1, FN = 1, TN = 1.
PRED = np.array([1, 1, 0, 0, 1])
GOLD = np.array([1, 0, 1, 0, 1])


def test_accuracy_f1_mcc_by_hand() -> None:
    assert accuracy(PRED, GOLD) == pytest.approx(3 / 5)
    assert binary_f1(PRED, GOLD) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # 2/3
    # (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2) = 1/6
    assert matthews_corrcoef(PRED, GOLD) == pytest.approx(1 / 6)


def test_f1_positive_class_is_label_one() -> None:
    # Swapping the classes changes F1 (not symmetric): class 0 has TP = 1, FP = 1, FN = 1.
    assert binary_f1(1 - PRED, 1 - GOLD) == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    assert binary_f1(np.zeros(4, int), np.zeros(4, int)) == 0.0  # no positives anywhere: 0, not NaN


def test_mcc_edge_cases() -> None:
    labels = np.array([0, 1, 1, 0, 1])
    assert matthews_corrcoef(labels, labels) == pytest.approx(1.0)
    assert matthews_corrcoef(1 - labels, labels) == pytest.approx(-1.0)
    assert matthews_corrcoef(np.ones(5, int), labels) == 0.0  # one predicted class: undefined -> 0
    # Three classes by hand: C = [[2,0,0],[1,1,0],[0,1,1]]; c = 4, s = 6, p = (3,2,1), t = (2,2,2)
    # (4·6 − (3·2+2·2+1·2)) / sqrt((36 − 14)(36 − 12)) = 12 / sqrt(528)
    gold, pred = np.array([0, 0, 1, 1, 2, 2]), np.array([0, 0, 0, 1, 1, 2])
    assert matthews_corrcoef(pred, gold) == pytest.approx(12 / math.sqrt(528))


def test_correlations_by_hand() -> None:
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])
    # centred x = (−1, 0, 1), y = (−4/3, −1/3, 5/3): r = 3 / sqrt(2 · 42/9)
    assert pearson(x, y) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert spearman(x, y) == pytest.approx(1.0)  # monotone
    assert pearson(x, -y) == pytest.approx(-pearson(x, y))
    # Ties get average ranks: x ranks (1, 2.5, 2.5, 4) vs y ranks (1, 3, 2, 4).
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1.0, 3, 2, 4])
    expected = float(np.corrcoef(rx, ry)[0, 1])
    assert spearman(np.array([0.1, 0.5, 0.5, 0.9]), np.array([10.0, 30, 20, 40])) == pytest.approx(expected)


def test_constant_inputs_give_zero_not_nan() -> None:
    varied = np.array([0.2, 0.4, 0.9])
    for constant in (np.full(3, 0.1), np.zeros(3), np.full(3, 2.5)):  # mean([0.1]*3) != 0.1 exactly
        assert pearson(constant, varied) == 0.0
        assert spearman(varied, constant) == 0.0


def test_against_scipy_and_sklearn() -> None:
    stats = pytest.importorskip("scipy.stats")
    sk = pytest.importorskip("sklearn.metrics")  # a test-only cross-check, not a project dependency
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    y = x + rng.normal(size=200)
    y[::7] = y[0]  # some ties
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    gold, pred = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    assert binary_f1(pred, gold) == pytest.approx(sk.f1_score(gold, pred))
    assert matthews_corrcoef(pred, gold) == pytest.approx(sk.matthews_corrcoef(gold, pred))
    gold3, pred3 = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert matthews_corrcoef(pred3, gold3) == pytest.approx(sk.matthews_corrcoef(gold3, pred3))
    assert accuracy(pred3, gold3) == pytest.approx(sk.accuracy_score(gold3, pred3))


def test_compute_metrics_per_task() -> None:
    mrpc = compute_metrics(get_task("mrpc"), PRED, GOLD)
    assert mrpc == pytest.approx({"accuracy": 0.6, "f1": 2 / 3, "combined_score": (0.6 + 2 / 3) / 2})
    assert main_metric_value(get_task("mrpc"), mrpc) == pytest.approx(2 / 3)
    assert compute_metrics(get_task("rte"), PRED, GOLD) == {"accuracy": pytest.approx(0.6)}  # no combined
    cola = compute_metrics(get_task("cola"), PRED, GOLD)
    assert cola == {"mcc": pytest.approx(1 / 6)} and main_metric_value(get_task("cola"), cola) == cola["mcc"]
    stsb = compute_metrics(get_task("stsb"), np.array([[1.0], [2.0], [3.0]]), np.array([1.0, 2.0, 4.0]))
    assert set(stsb) == {"pearson", "spearman", "combined_score"}
    assert stsb["spearman"] == pytest.approx(1.0)
    assert stsb["combined_score"] == pytest.approx((stsb["pearson"] + 1.0) / 2)
    assert all(isinstance(v, float) for v in (*mrpc.values(), *stsb.values()))


def test_logits_are_reduced_with_argmax() -> None:
    logits = np.array([[2.0, -1.0, 0.0], [0.0, 0.1, 3.0], [0.0, 5.0, 1.0]])  # argmax 0, 2, 1
    assert compute_metrics(get_task("mnli"), logits, np.array([0, 2, 2])) == {
        "accuracy": pytest.approx(2 / 3)
    }


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="must both be"):
        compute_metrics(get_task("rte"), np.array([0, 1]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="zero examples"):
        compute_metrics(get_task("rte"), np.array([], int), np.array([], int))
    with pytest.raises(ValueError, match="NaN"):
        compute_metrics(get_task("stsb"), np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    with pytest.raises(KeyError, match="main metric 'f1'"):
        main_metric_value(get_task("mrpc"), {"accuracy": 0.5})
