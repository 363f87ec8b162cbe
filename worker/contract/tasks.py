"""The task registry, as data.

One frozen :class:`TaskSpec` per supported task says everything the worker needs to know about it:
its text columns, its label set (in the order that defines the label ids), its metrics, the dropout of
its task-specific head, where its files lie in the classic ``glue_data/<TASK>/{train,dev}.tsv`` layout
and how to read them, and where it lives on the Hugging Face hub.

Conventions:

* Canonical text column names are Hugging Face's ``glue``/``snli``/``anli`` feature names
  (``sentence``; ``sentence1``/``sentence2``; ``question1``/``question2``; ``premise``/``hypothesis``;
  ``question``/``sentence``). The label column is always ``label``. Custom files use these names unless
  a column mapping says otherwise.
* ``labels`` holds the label VALUES as they appear in the files (``"0"``/``"1"`` for SST-2,
  ``"entailment"``/``"not_entailment"`` for RTE). Their order is the order of Hugging Face's
  ``ClassLabel`` for the same task, so an integer label from the hub is already a valid id.
* Split names are ``train``, ``dev`` (``dev_matched``/``dev_mismatched`` for MNLI) and ``test``; a
  GLUE-layout file is ``<split>.tsv``; ``hub_splits`` maps a split to the hub's name for it.

This module imports only the standard library, so the control plane can validate task names with it
without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# Canonical name of the label column in every table (and key in TaskSpec.tsv_columns).
LABEL_COLUMN = "label"

# Split names of the GLUE-style layout -> split names of Hugging Face's `glue`, `snli`, `scitail`.
_GLUE_HUB_SPLITS: tuple[tuple[str, str], ...] = (("train", "train"), ("dev", "validation"), ("test", "test"))
_MNLI_HUB_SPLITS: tuple[tuple[str, str], ...] = (
    ("train", "train"),
    ("dev_matched", "validation_matched"),
    ("dev_mismatched", "validation_mismatched"),
    ("test_matched", "test_matched"),
    ("test_mismatched", "test_mismatched"),
)

_NLI3 = ("entailment", "neutral", "contradiction")  # HF ClassLabel order for MNLI, SNLI and ANLI


@dataclass(frozen=True)
class TaskSpec:
    """Everything the worker needs to know about one task (immutable, hashable)."""

    name: str  # registry key, lower case: "rte", "sst2", "anli_r1", ...
    text_columns: tuple[str, ...]  # canonical text column names, 1 (single sentence) or 2 (pair)
    labels: tuple[str, ...] | None  # label values as in the files, in id order; None for regression
    metrics: tuple[str, ...]  # metric names as GLUE defines them: accuracy, f1, mcc, pearson, spearman
    main_metric: str  # the metric model selection uses; one of `metrics`
    head_dropout: float = 0.1  # dropout of the task-specific layer (paper Section 4.1)
    # Classic GLUE TSV layout; None for tasks outside GLUE.
    glue_dir: str | None = None  # folder under the GLUE root: "RTE", "SST-2", ...
    tsv_header: bool = True  # False for CoLA: its TSVs have no header line
    # canonical column -> file column: a header name, or a 0-based index when there is no header.
    tsv_columns: tuple[tuple[str, str | int], ...] = ()
    # The TSV column naming each row's source (STS-B's and MNLI's genre, CoLA's source publication), or
    # None: capped and held-out samples are stratified by it (worker.training.sampling), since GLUE's files
    # are ordered by source. A file without that column is read without it.
    tsv_stratum: str | int | None = None
    train_split: str = "train"
    eval_splits: tuple[str, ...] = ("dev",)  # the splits model selection reports on
    # Hugging Face hub location: dataset id, config (None if the dataset has none), split mapping.
    hub_id: str | None = None
    hub_config: str | None = None
    hub_splits: tuple[tuple[str, str], ...] = _GLUE_HUB_SPLITS
    # Other spellings of label values seen in public copies -> the value in `labels`.
    label_aliases: tuple[tuple[str, str], ...] = ()
    # Label values that mark an example without a gold label; such rows are dropped (SNLI's "-").
    skip_labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Catch registry typos at import time rather than in the middle of a sweep.
        if self.main_metric not in self.metrics:
            raise ValueError(f"task {self.name!r}: main_metric {self.main_metric!r} not in {self.metrics}")
        if not 1 <= len(self.text_columns) <= 2:
            raise ValueError(f"task {self.name!r}: expected 1 or 2 text columns, got {self.text_columns}")
        if self.labels is not None and len(self.labels) < 2:
            raise ValueError(f"task {self.name!r}: a classification task needs at least 2 labels")
        if self.glue_dir is not None:
            mapped = {canonical for canonical, _ in self.tsv_columns}
            missing = set(self.text_columns) | {LABEL_COLUMN}
            if not missing <= mapped:
                raise ValueError(f"task {self.name!r}: tsv_columns lacks {sorted(missing - mapped)}")

    @property
    def is_regression(self) -> bool:
        """True for a real-valued target (STS-B); the head then has one output."""
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """Size of the head's output: the number of classes, or 1 for regression."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_pair(self) -> bool:
        """True when an example is a sentence pair (encoded as ``[CLS] a [SEP] b [SEP]``)."""
        return len(self.text_columns) == 2

    @property
    def splits(self) -> tuple[str, ...]:
        """The train split followed by the eval splits."""
        return (self.train_split, *self.eval_splits)

    def tsv_column(self, canonical: str) -> str | int:
        """The file column (header name or index) holding canonical column ``canonical``."""
        for key, column in self.tsv_columns:
            if key == canonical:
                return column
        raise KeyError(f"task {self.name!r} has no TSV column for {canonical!r}")

    def hub_split(self, split: str) -> str:
        """The hub's name of ``split`` (``dev`` -> ``validation``); unknown names pass through."""
        return dict(self.hub_splits).get(split, split)

    def canonical_label(self, value: str) -> str:
        """``value`` with aliases resolved (``"e"`` -> ``"entailment"`` for ANLI)."""
        return dict(self.label_aliases).get(value, value)


def _glue(
    name: str,
    glue_dir: str,
    text_columns: tuple[str, ...],
    labels: tuple[str, ...] | None,
    metrics: tuple[str, ...],
    main_metric: str,
    tsv_columns: dict[str, str | int],
    *,
    tsv_header: bool = True,
    tsv_stratum: str | int | None = None,
    head_dropout: float = 0.1,
    eval_splits: tuple[str, ...] = ("dev",),
    hub_splits: tuple[tuple[str, str], ...] = _GLUE_HUB_SPLITS,
) -> TaskSpec:
    """A GLUE task: hub dataset ``nyu-mll/glue`` (formerly ``glue``) with config ``name``."""
    return TaskSpec(
        name=name,
        text_columns=text_columns,
        labels=labels,
        metrics=metrics,
        main_metric=main_metric,
        glue_dir=glue_dir,
        tsv_columns=tuple(tsv_columns.items()),
        hub_id="nyu-mll/glue",
        hub_config=name,
        tsv_header=tsv_header,
        tsv_stratum=tsv_stratum,
        head_dropout=head_dropout,
        eval_splits=eval_splits,
        hub_splits=hub_splits,
    )


_BINARY = ("0", "1")  # label values of CoLA, SST-2, MRPC, QQP, WNLI: 1 is the positive class
_PAIR = ("sentence1", "sentence2")
_NLI = ("premise", "hypothesis")
_ACC = ("accuracy",)

_TASK_LIST: tuple[TaskSpec, ...] = (
    # CoLA TSV: no header; columns source (publication code, e.g. gj04), label, mark (author's judgement), sentence.
    _glue("cola", "CoLA", ("sentence",), _BINARY, ("mcc",), "mcc", {"sentence": 3, "label": 1},
          tsv_header=False, tsv_stratum=0, head_dropout=0.05),
    _glue("sst2", "SST-2", ("sentence",), _BINARY, _ACC, "accuracy", {"sentence": "sentence", "label": "label"}),
    # MRPC header: Quality, #1 ID, #2 ID, #1 String, #2 String (the BOM is stripped by the reader).
    # The paper's Table 3 reports MRPC F1, so F1 selects models.
    _glue("mrpc", "MRPC", _PAIR, _BINARY, ("accuracy", "f1"), "f1",
          {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"}),
    # STS-B header: index, genre (main-captions, main-news, main-forum[s]), filename, year, ..., score.
    _glue("stsb", "STS-B", _PAIR, None, ("pearson", "spearman"), "pearson",
          {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score"}, tsv_stratum="genre"),
    _glue("qqp", "QQP", ("question1", "question2"), _BINARY, ("accuracy", "f1"), "accuracy",
          {"question1": "question1", "question2": "question2", "label": "is_duplicate"}),
    _glue("mnli", "MNLI", _NLI, _NLI3, _ACC, "accuracy",
          {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label"}, tsv_stratum="genre",
          eval_splits=("dev_matched", "dev_mismatched"), hub_splits=_MNLI_HUB_SPLITS, head_dropout=0.3),
    _glue("qnli", "QNLI", ("question", "sentence"), ("entailment", "not_entailment"), _ACC, "accuracy",
          {"question": "question", "sentence": "sentence", "label": "label"}),
    _glue("rte", "RTE", _PAIR, ("entailment", "not_entailment"), _ACC, "accuracy",
          {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}),
    # WNLI: "0" = not_entailment, "1" = entailment (HF ClassLabel order).
    _glue("wnli", "WNLI", _PAIR, _BINARY, _ACC, "accuracy",
          {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}),
    # SNLI: rows whose annotators reached no consensus carry "-" (files) or -1 (hub); both are dropped.
    TaskSpec(name="snli", text_columns=_NLI, labels=_NLI3, metrics=_ACC, main_metric="accuracy",
             hub_id="stanfordnlp/snli", skip_labels=("-", "-1")),
    # SciTail, HF config `tsv_format`: premise, hypothesis, label in {"entails", "neutral"}.
    TaskSpec(name="scitail", text_columns=_NLI, labels=("entails", "neutral"), metrics=_ACC,
             main_metric="accuracy", hub_id="allenai/scitail", hub_config="tsv_format",
             label_aliases=(("entailment", "entails"),)),
)  # fmt: skip

# ANLI rounds: one hub dataset whose splits are named train_r1, dev_r1, test_r1, ...; its own jsonl
# files spell labels "e", "n", "c".
_ANLI = tuple(
    TaskSpec(
        name=f"anli_r{r}",
        text_columns=_NLI,
        labels=_NLI3,
        metrics=_ACC,
        main_metric="accuracy",
        hub_id="facebook/anli",
        hub_splits=(("train", f"train_r{r}"), ("dev", f"dev_r{r}"), ("test", f"test_r{r}")),
        label_aliases=(("e", "entailment"), ("n", "neutral"), ("c", "contradiction")),
    )
    for r in (1, 2, 3)
)

TASKS: dict[str, TaskSpec] = {task.name: task for task in (*_TASK_LIST, *_ANLI)}

# The nine GLUE tasks, in the benchmark's order.
GLUE_TASKS: tuple[str, ...] = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``.

    Case-insensitive, and GLUE's folder spellings are accepted too (``SST-2``, ``STS-B``, ``anli-r1``).
    Raises ``ValueError`` naming the unknown task and listing the known ones.
    """
    key = name.strip().lower()
    for candidate in (key, key.replace("-", "_"), key.replace("-", "").replace("_", "")):
        if candidate in TASKS:
            return TASKS[candidate]
    raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
