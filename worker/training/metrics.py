"""Task metrics as GLUE defines them.

accuracy, binary F1 (positive class = label id 1, i.e. "1" for MRPC and QQP), Matthews correlation
(CoLA), Pearson and Spearman correlation (STS-B). Values are fractions (accuracy, F1 in [0, 1];
correlations in [-1, 1]), not percentages. Where a value is undefined (a constant input to a
correlation, no positives for F1) it is 0.0, never NaN, so that model selection and JSON logging
never see a NaN. Tasks with more than one metric also get ``combined_score``, their mean (as
Hugging Face's ``run_glue`` reports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from worker.contract.tasks import TaskSpec

COMBINED = "combined_score"


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of exact matches. Shapes (N,) and (N,)."""
    return float(np.mean(predictions == labels))


def binary_f1(predictions: np.ndarray, labels: np.ndarray, positive: int = 1) -> float:
    """F1 of class ``positive``: 2·TP / (2·TP + FP + FN); 0.0 when there are no positives at all."""
    tp = int(np.sum((predictions == positive) & (labels == positive)))
    fp = int(np.sum((predictions == positive) & (labels != positive)))
    fn = int(np.sum((predictions != positive) & (labels == positive)))
    denominator = 2 * tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


def matthews_corrcoef(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Matthews correlation, multiclass form (Gorodkin 2004; the binary MCC for two classes).

    From the confusion matrix C (rows = true class, columns = predicted):
    ``(c·s − Σ_k p_k·t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²))`` with c = correct, s = samples,
    p_k = predicted count, t_k = true count. 0.0 when the denominator is 0 (one class only).
    """
    classes, inverse = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true_ids, pred_ids = inverse[: len(labels)], inverse[len(labels) :]
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    np.add.at(confusion, (true_ids, pred_ids), 1.0)
    t_k, p_k = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, samples = np.trace(confusion), confusion.sum()
    numerator = correct * samples - p_k @ t_k
    denominator = np.sqrt((samples**2 - p_k @ p_k) * (samples**2 - t_k @ t_k))
    return float(numerator / denominator) if denominator > 0 else 0.0


def pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Pearson correlation of two float vectors; 0.0 when either is constant (undefined)."""
    # Test constancy exactly: after centring, a constant vector can keep ~1e-17 of rounding noise
    # (mean([0.1]*3) != 0.1), which would turn 0/0 into an arbitrary +-1.
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    x = predictions.astype(np.float64) - predictions.mean()
    y = labels.astype(np.float64) - labels.mean()
    return float(np.clip((x @ y) / np.sqrt((x @ x) * (y @ y)), -1.0, 1.0))


def spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Spearman correlation: Pearson of the ranks, ties given their average rank; 0.0 if constant."""
    from scipy.stats import rankdata  # here: scipy.stats costs ~1 s to import, and only STS-B needs it

    return pearson(rankdata(predictions), rankdata(labels))


# name -> function(predictions, labels) for every metric a TaskSpec may list.
METRIC_FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": accuracy,
    "f1": binary_f1,
    "mcc": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def compute_metrics(task: TaskSpec, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics, plus ``combined_score`` (their mean) when it has more than one.

    ``predictions``: class ids, shape (N,), for classification (logits of shape (N, C) are accepted
    and reduced with argmax); floats, shape (N,) or (N, 1), for regression. ``labels``: shape (N,).
    """
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if task.is_regression:
        predictions = (
            predictions.reshape(-1) if predictions.ndim == 2 and predictions.shape[1] == 1 else predictions
        )
        predictions, labels = predictions.astype(np.float64), labels.astype(np.float64)
    elif predictions.ndim == 2:
        predictions = predictions.argmax(axis=-1)  # (N, C) logits -> (N,) class ids
    if predictions.ndim != 1 or predictions.shape != labels.shape:
        raise ValueError(f"predictions {predictions.shape} and labels {labels.shape} must both be (N,)")
    if predictions.size == 0:
        raise ValueError("cannot compute metrics on zero examples")
    if task.is_regression and not (np.isfinite(predictions).all() and np.isfinite(labels).all()):
        raise ValueError("regression predictions or labels contain NaN or infinity")
    results = {name: METRIC_FUNCTIONS[name](predictions, labels) for name in task.metrics}
    if len(task.metrics) > 1:
        results[COMBINED] = float(np.mean([results[name] for name in task.metrics]))
    return results


def main_metric_value(task: TaskSpec, metrics: Mapping[str, float]) -> float:
    """The value model selection uses (``task.main_metric``) from a :func:`compute_metrics` result."""
    if task.main_metric in metrics:
        return float(metrics[task.main_metric])
    raise KeyError(f"task {task.name!r}: main metric {task.main_metric!r} not in {sorted(metrics)}")
