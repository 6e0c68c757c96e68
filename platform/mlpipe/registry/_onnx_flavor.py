"""The ONNX flavor: an ``.onnx`` graph, scored with ONNX Runtime on the CPU.

A candidate is an ``onnx.ModelProto`` (read from an ``.onnx`` file or an MLflow
``onnx`` directory, or made by ``register --to-onnx``). It is logged with
``mlflow.onnx`` as one ``model.onnx`` file and loaded into an ONNX Runtime
``InferenceSession`` (one intra-op thread, as LightGBM scores on one thread).

Inputs and outputs come from the graph:

- inputs: one 2-D tensor takes every feature in order (cast to the tensor's
  element type); several inputs take one feature each as ``[N, 1]``: by
  position from a float array, by name from a DataFrame (a version whose
  inputs include strings is scored on one: ``register --to-onnx`` of a
  ColumnTransformer pipeline). A string input takes text; a missing value
  there is refused (the graph has no missing string);
- output: the scored output is a ``seq(map)`` (scikit-learn's ZipMap) or a
  float tensor, preferring one whose name says ``prob``. Label outputs (integer
  or string tensors) are not scored, but say the graph is a classifier.

The task (see :mod:`mlpipe.tasks`) comes from the graph: a classifier (a label
output beside the probabilities, or a ZipMap) with 2 classes is binary (P(class 1)
is the second class: a ``[N, 2]`` column 1, a map's second key), with more it is
multiclass; its classes are the converter's ``classlabels_int64s`` /
``classlabels_strings`` attributes where the graph has them, else 0..K-1. A plain
float output ``[N, K]`` (K ≥ 2) is a classifier over 0..K-1. One value per row
(``[N]`` or ``[N, 1]``) is either P(class 1) or a regression: the graph cannot
tell, so registration asks for ``--task binary`` or ``--task regression``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, classifier_task, settled
from mlpipe.tasks import ClassLabel, Task, TaskSpec

ONNX_SUFFIXES = (".onnx",)
ONNX_FILE = "model.onnx"
_LABEL_TYPES = ("tensor(int64)", "tensor(string)")
_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(string)": np.object_,
}


@dataclass(frozen=True)
class OnnxModel:
    """A loaded graph: its ONNX Runtime session and which input/output mean what."""

    session: Any
    inputs: list[tuple[str, Any]]  # (name, numpy dtype) in graph order
    output: str
    zipmap: bool
    width: int | None  # columns of a tensor output (1 for [N]), when the graph states them
    labelled: bool = False  # the graph also outputs a class label (a classifier)


class OnnxFlavor(ModelFlavor):
    """An ONNX classifier or regressor, scored with ONNX Runtime."""

    name = "onnx"

    def accepts(self, model: Any) -> bool:
        try:
            import onnx
        except ImportError:
            return False
        return isinstance(model, onnx.ModelProto)

    def read_file(self, path: Path) -> Any:
        """An ``.onnx`` file as a ModelProto; InvalidInput if it is not one."""
        import onnx

        try:
            model = onnx.load(str(path))
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - DecodeError, ValidationError, OSError
            raise InvalidInput(f"{path} is not a valid ONNX model: {first_line(exc)}") from exc
        return model

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.onnx
        import onnx
        import onnxruntime

        return mlflow.onnx.log_model(
            model,
            name="model",
            signature=signature,
            save_as_external_data=False,
            pip_requirements=[
                f"onnx=={onnx.__version__}",
                f"onnxruntime=={onnxruntime.__version__}",
            ],
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        return session_model((local / ONNX_FILE).read_bytes())

    def read_mlflow_dir(self, path: Path) -> Any:
        return self.read_file(path / ONNX_FILE)

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        graph = as_session_model(model)
        what = f"this ONNX graph's output {graph.output!r}"
        if graph.zipmap or graph.labelled or (graph.width or 0) >= 2:
            classes = _class_labels(model, graph.width)
            if classes is None:
                raise InvalidInput(
                    f"{what} is a classifier's, but the graph names no class labels and does "
                    "not state how many classes it has"
                )
            return classifier_task(classes, declared, what)
        width = "is one number per row" if graph.width == 1 else "states no width"
        one_value = f"{what} {width}"
        if declared == "binary":
            return TaskSpec("binary")
        if declared == "regression":
            return TaskSpec("regression")
        if declared == "multiclass":
            return settled(TaskSpec("binary"), declared, f"{one_value}, P(class 1) at most")
        raise InvalidInput(
            f"{one_value}: P(class 1) of a binary classifier or a regression's prediction; "
            "say which with --task binary or --task regression"
        )

    def input_names(self, model: Any) -> list[str] | None:
        inputs = as_session_model(model).inputs
        return [name for name, _ in inputs] if len(inputs) > 1 else None

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        graph = as_session_model(model)
        kind = "binary" if task is None else task.task

        def _score(x: np.ndarray) -> np.ndarray:
            feeds = _feeds(graph, x)
            (out,) = graph.session.run([graph.output], feeds)
            return _shaped(graph, out, len(x), kind)

        return _score


def as_session_model(model: Any) -> OnnxModel:
    """``model`` itself if loaded, else a session over the ModelProto."""
    if isinstance(model, OnnxModel):
        return model
    return session_model(model.SerializeToString())


def session_model(data: bytes) -> OnnxModel:
    """An ONNX Runtime session over serialized ``data``, inputs and output mapped."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no optimizer chatter on the terminal
    try:
        session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph kinds
        raise InvalidInput(f"ONNX Runtime cannot load the graph: {first_line(exc)}") from exc
    inputs = []
    for arg in session.get_inputs():
        if arg.type not in _DTYPES:
            raise InvalidInput(
                f"the ONNX graph's input {arg.name!r} is {arg.type}; mlpipe feeds "
                "float, double, int64 and string tensors only"
            )
        inputs.append((arg.name, _DTYPES[arg.type]))
    return _with_output(session, inputs)


def _with_output(session: Any, inputs: list[tuple[str, Any]]) -> OnnxModel:
    outputs = session.get_outputs()
    candidates = [o for o in outputs if _is_probability(o.type)]
    if not candidates:
        kinds = ", ".join(f"{o.name}: {o.type}" for o in outputs)
        raise InvalidInput(f"the ONNX graph has no float or probability output (outputs: {kinds})")
    named = [o for o in candidates if "prob" in o.name.lower()]
    output = (named or candidates)[-1]
    shape = output.shape if output.type.startswith("tensor") else []
    width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) else None
    if len(shape) == 1:
        width = 1
    labelled = any(o.type in _LABEL_TYPES for o in outputs)
    zipmap = output.type.startswith("seq(map")
    return OnnxModel(session, inputs, output.name, zipmap, width, labelled)


def _is_probability(kind: str) -> bool:
    return kind in ("tensor(float)", "tensor(double)") or kind.startswith("seq(map(")


def _feeds(graph: OnnxModel, x: Any) -> dict[str, np.ndarray]:
    columns = getattr(x, "columns", None)
    if columns is not None and len(graph.inputs) > 1:  # a DataFrame: each input by its name
        return {name: _column_feed(x, name, dtype) for name, dtype in graph.inputs}
    if len(graph.inputs) == 1:
        name, dtype = graph.inputs[0]
        return {name: np.ascontiguousarray(x, dtype=dtype)}
    if x.shape[1] != len(graph.inputs):
        raise InvalidInput(f"the ONNX graph takes {len(graph.inputs)} inputs, got {x.shape[1]}")
    return {
        name: np.ascontiguousarray(x[:, [i]], dtype=dtype)
        for i, (name, dtype) in enumerate(graph.inputs)
    }


def _column_feed(frame: Any, name: str, dtype: Any) -> np.ndarray:
    if name not in frame.columns:
        raise InvalidInput(f"the ONNX graph's input {name!r} is no input of this version")
    values = frame[name]
    if dtype is not np.object_:
        return np.ascontiguousarray(values.to_numpy(dtype=dtype).reshape(-1, 1))
    if values.isna().any():
        raise InvalidInput(f"features.{name}: the ONNX graph takes no missing string")
    strings: np.ndarray = values.astype(str).to_numpy(dtype=object).reshape(-1, 1)
    return strings


def _shaped(graph: OnnxModel, out: Any, rows: int, task: Task) -> np.ndarray:
    """The output as the task's shape: P(class 1), class probabilities or values."""
    if graph.zipmap:
        if task == "binary":
            return np.fromiter((list(row.values())[1] for row in out), np.float64, count=rows)
        return np.asarray([list(row.values()) for row in out], dtype=np.float64)
    scores = np.asarray(out, dtype=np.float64)
    if task == "multiclass":
        return scores
    if task == "binary" and scores.ndim == 2 and scores.shape[1] == 2:
        return scores[:, 1]
    return scores.reshape(-1)


def _class_labels(model: Any, width: int | None) -> tuple[ClassLabel, ...] | range | None:
    """The classes the graph's classifier (or ZipMap) node names, else 0..width-1."""
    labels = _named_labels(model)
    if labels is not None and (width is None or len(labels) == width):
        return tuple(labels)
    return range(width) if width is not None and width >= 2 else None


def _named_labels(model: Any) -> list[ClassLabel] | None:
    """``classlabels_int64s``/``classlabels_strings`` of the graph's ZipMap or classifier node
    (None for a loaded graph, which keeps no ModelProto, or a graph without them)."""
    graph = getattr(model, "graph", None)
    if graph is None or not hasattr(graph, "node"):
        return None
    found: list[ClassLabel] | None = None
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "classlabels_int64s" and attr.ints:
                labels: list[ClassLabel] = [int(v) for v in attr.ints]
            elif attr.name == "classlabels_strings" and attr.strings:
                labels = [v.decode("utf-8") for v in attr.strings]
            else:
                continue
            if node.op_type == "ZipMap":
                return labels
            found = found or labels
    return found
