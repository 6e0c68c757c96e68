"""A version's own metrics on a labelled dataset, recorded at register as its quality baseline.

Without a baseline, ``monitor drift`` cannot judge labelled traffic: a model at
chance level would pass. So register scores the dataset (a sample of it) the
way serving scores it and records the metrics the quality check judges, under
the same names and computed by the same functions (binary: AUC, recall and
precision at the threshold, log loss; multiclass: accuracy, macro F1, log
loss; regression: MAE, RMSE, bias). Metrics given with ``--metric`` win. On the
training set the figures are optimistic; ``--eval-dataset`` (a holdout) gives
honest ones, and the tag :data:`_tags.METRICS_ON` says which was used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlpipe.registry._input_schema import InputSchema
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pandas as pd

SAMPLE_ROWS = 20_000  # scored for the baseline; enough for every metric to the 3rd decimal


def dataset_metrics(
    task: TaskSpec,
    output_of: Callable[[Any], np.ndarray],
    schema: InputSchema,
    x: pd.DataFrame,
    labels: pd.Series,
) -> dict[str, float]:
    """The task's metrics on rows ``x`` with true ``labels``; ``output_of`` scores rows as
    serving hands them over and returns the task's checked output. Rows without a usable
    label are left out, and so is a metric that is undefined on them."""
    import math

    import numpy as np

    y = _targets(task, labels)
    keep = ~np.isnan(y)
    if keep.sum() == 0:
        return {}
    x, y = x[keep], y[keep]
    if len(x) > SAMPLE_ROWS:
        pick = np.sort(np.random.default_rng(0).choice(len(x), SAMPLE_ROWS, replace=False))
        x, y = x.iloc[pick], y[pick]
    output = output_of(_as_served(schema, x))
    figures = _metrics(task, output, y)
    return {k: v for k, v in figures.items() if not math.isnan(v)}


def _targets(task: TaskSpec, labels: pd.Series) -> np.ndarray:
    """Each label as the quality check reads an outcome: a class index, or a number."""
    import numpy as np
    import pandas as pd

    if task.is_classifier:
        index = [None if pd.isna(v) else task.class_index(v) for v in labels]
        return np.array([np.nan if i is None else i for i in index], dtype=float)
    return pd.to_numeric(labels, errors="coerce").to_numpy(dtype=float)


def _as_served(schema: InputSchema, x: pd.DataFrame) -> Any:
    """The rows as serving hands them to the model: a float array, or the schema's frame."""
    import numpy as np

    if not schema.frame:
        return x.to_numpy(dtype=np.float64)
    from mlpipe.registry._register import _as_served as served_value

    rows = [
        [served_value(c, v) for c, v in zip(schema.columns, row, strict=True)]
        for row in x.itertuples(index=False)
    ]
    return schema.to_frame(rows)


def _metrics(task: TaskSpec, output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    import numpy as np

    from mlpipe.monitoring import _label_metrics as lm
    from mlpipe.monitoring import _task_metrics as tm

    rows = np.arange(len(y))  # every row its own entity: no bootstrap here
    if task.task == "binary":
        scores = np.asarray(output, dtype=float)
        scored = lm.Scored(scores, scores >= task.threshold, y.astype(int), rows)
        return lm.point_metrics(scored)
    return tm.point_metrics(task.task, tm.Labelled(output, y, rows))
