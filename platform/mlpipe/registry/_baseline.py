"""A version's quality baseline: its own metrics, measured at register on its data or a holdout.

``monitor drift`` judges labelled traffic against the metrics a version
records (``mlpipe.metric.*``) and each class's recall (``mlpipe.class_recall``,
with the rows of each class it rests on, ``mlpipe.class_support``).
Register measures them itself (:mod:`._dataset_metrics`), on one of:

- the registration dataset (``--dataset``, usually the training set): the
  figures are optimistic, so the quality check judges them with wide margins
  (only a collapse alarms); ``mlpipe.metrics_source`` is ``training``;
- a holdout (``--eval-dataset``, rows the model was not fit on, with the same
  input columns and the label): an honest estimate, judged with the normal
  margins; ``mlpipe.metrics_source`` is ``holdout``, and the file's name and
  sha256 are ``mlpipe.eval_dataset`` and ``mlpipe.eval_data_sha256``.

``mlpipe.metrics_on`` says the same in words. A holdout is checked before
anything is written: it exists, has rows, the label column and every input of
the model, labels the model can be judged on (a class of the model, a number
for a regression), and values serving would take (each row as a request would
be checked: an unknown category the model cannot score, a gap in an input the
model cannot take a gap in, text in a number column are refused, naming the
row). Metrics given with ``--metric`` win over measured ones of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.registry import _lineage, tag_names
from mlpipe.registry._dataset_metrics import dataset_metrics
from mlpipe.registry._input_schema import InputSchema
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pandas as pd

FLAG = "--eval-dataset"
TRAINING = "training"
HOLDOUT = "holdout"
_SHOWN = 12  # columns or labels named in a refusal


@dataclass(frozen=True)
class Baseline:
    """What register measures a version's metrics on: labelled rows and what they are.

    ``source`` is :data:`TRAINING` or :data:`HOLDOUT`; ``path`` the holdout file
    (its name and sha256 are recorded), None for the registration dataset.
    """

    frame: pd.DataFrame
    label: str
    path: Path
    source: str = TRAINING

    @property
    def words(self) -> str:
        """What the metrics were measured on, as ``mlpipe.metrics_on`` says it."""
        if self.source == HOLDOUT:
            return f"dataset {self.path.name} (the {FLAG} holdout)"
        return f"dataset {self.path.name} (the registration dataset)"


def read_holdout(
    path: Path, *, features: list[str], label: str, task: TaskSpec, training: Path
) -> Baseline:
    """The ``--eval-dataset`` file as a :class:`Baseline`, once its columns and labels are
    fit to judge the model on. Raises NotFound (no such file) and InvalidInput, naming the
    flag and the file: unreadable or empty, no rows, no ``label`` column, an input of the
    model missing, no usable label or labels the model cannot be judged on, the same file
    as ``training``. Its values are checked when the input schema is known
    (:func:`measured_tags`)."""
    import pandas as pd

    path = Path(path)
    where = f"{FLAG} {path.name}"
    if not path.is_file():
        raise NotFound(f"{FLAG} file {path} does not exist")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{where} is empty (no columns, no rows)")
    try:
        frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise InvalidInput(f"{where} is not a readable CSV/Parquet file: {exc}") from exc
    if label not in frame.columns:
        raise InvalidInput(
            f"{where} has no label column {label!r} (the --label of the registration "
            f"dataset; its columns: {_listed(frame.columns)})"
        )
    missing = [c for c in features if c not in frame.columns]
    if missing:
        raise InvalidInput(
            f"{where} lacks input column(s) the model takes: {_listed(missing)} "
            f"(its columns: {_listed(frame.columns)})"
        )
    if len(frame) == 0:
        raise InvalidInput(f"{where} has no rows (only its header)")
    _check_labels(frame[label], label, task, where)
    if _lineage.file_sha256(path) == _lineage.file_sha256(Path(training)):
        raise InvalidInput(
            f"{where} is the registration dataset itself, not a holdout: give rows the model "
            "was not fit on (or leave the flag out to measure on --dataset)"
        )
    return Baseline(frame[[*features, label]], label, path, HOLDOUT)


def _check_labels(labels: pd.Series, label: str, task: TaskSpec, where: str) -> None:
    """InvalidInput unless some label is usable and every given one is (a class of the
    model, or a number for a regression)."""
    import pandas as pd

    given = labels[labels.notna() & (labels.astype(str).str.strip() != "")]
    if given.empty:
        raise InvalidInput(f"{where}: no row has a label in column {label!r}")
    if task.is_classifier:
        bad = [v for v in pd.unique(given) if task.class_index(v) is None]
        if bad:
            raise InvalidInput(
                f"{where}: label(s) {_listed([repr(_plain(v)) for v in bad])} in column {label!r} "
                f"name no class of the model (its classes: {_listed(task.classes)})"
            )
        return
    numbers = pd.to_numeric(given, errors="coerce")
    bad = list(pd.unique(given[numbers.isna()]))
    if bad:
        raise InvalidInput(
            f"{where}: label(s) {_listed([repr(_plain(v)) for v in bad])} in column {label!r} "
            "are not numbers (a regression is judged on numeric labels)"
        )


def measured_tags(
    task: TaskSpec,
    output_of: Callable[[Any], np.ndarray],
    schema: InputSchema,
    features: list[str],
    baseline: Baseline,
) -> dict[str, str]:
    """The version's metrics and per-class recall on ``baseline`` as tags, with what they
    were measured on. A holdout's values are checked as serving checks a request first
    (InvalidInput naming the row and the field)."""
    x = baseline.frame[features]
    holdout = baseline.source == HOLDOUT
    if holdout:
        _check_values(schema, x, f"{FLAG} {baseline.path.name}")
    measured = dataset_metrics(task, output_of, schema, x, baseline.frame[baseline.label])
    if not measured.metrics and not measured.class_recall:
        return {}
    tags = {
        **tag_names.metric_tags(measured.metrics),
        tag_names.METRICS_ON: baseline.words,
        tag_names.METRICS_SOURCE: baseline.source,
    }
    if measured.class_recall:
        tags[tag_names.CLASS_RECALL] = tag_names.per_class_tag(measured.class_recall)
        tags[tag_names.CLASS_SUPPORT] = tag_names.per_class_tag(measured.class_rows)
    if holdout:
        tags[tag_names.EVAL_DATASET] = baseline.path.name
        tags[tag_names.EVAL_DATA_SHA256] = _lineage.file_sha256(baseline.path)
    return tags


def _check_values(schema: InputSchema, x: pd.DataFrame, where: str) -> None:
    """InvalidInput for the first value serving would refuse in a request (each distinct
    value of a column is checked once), naming its row (1 is the first data row)."""
    import pandas as pd

    for column in schema.columns:
        values = x[column.name]
        for value in pd.unique(values.to_numpy(dtype=object)):
            try:
                column.check(_plain(value))
            except InvalidInput as exc:
                row = _first_row(values, value)
                raise InvalidInput(
                    f"{where}, row {row}: {exc} (serving refuses it, so the holdout cannot "
                    "be scored as served)"
                ) from None


def _first_row(values: pd.Series, value: Any) -> int:
    """The 1-based position of ``value``'s first occurrence (NaN matches NaN)."""
    import numpy as np

    missing = value is None or value != value
    same = values.isna().to_numpy() if missing else (values == value).to_numpy()
    return int(np.argmax(same)) + 1


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value a request would hold."""
    return value.item() if hasattr(value, "item") else value


def with_measured(tags: dict[str, str], measured: dict[str, str]) -> dict[str, str]:
    """``tags`` with the ``measured`` ones that ``--metric`` did not give (under their name
    or an alias: a holdout ``logloss`` wins over a measured ``log_loss``), and the names of
    the measured metrics kept (``METRICS_MEASURED``)."""
    prefix = tag_names.METRIC_PREFIX
    given = {
        tag_names.METRIC_ALIASES.get(k[len(prefix) :], k[len(prefix) :])
        for k in tags
        if k.startswith(prefix)
    }
    kept = {
        k: v
        for k, v in measured.items()
        if not k.startswith(prefix) or k[len(prefix) :] not in given
    }
    names = sorted(k[len(prefix) :] for k in kept if k.startswith(prefix))
    return {**kept, **tags, tag_names.METRICS_MEASURED: ",".join(names)}


def _listed(names: Any, limit: int = _SHOWN) -> str:
    """``a, b, c`` for the first ``limit`` names, and how many more."""
    names = [str(n) for n in names]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
