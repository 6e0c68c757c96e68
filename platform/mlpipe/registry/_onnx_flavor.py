"""The ONNX flavor: an ``.onnx`` graph, scored with ONNX Runtime on the CPU.

A candidate is an ``onnx.ModelProto`` (read from an ``.onnx`` file or an MLflow
``onnx`` directory, or made by ``register --to-onnx``). It is logged with
``mlflow.onnx`` as one ``model.onnx`` file and loaded into an ONNX Runtime
``InferenceSession`` (one intra-op thread, as LightGBM scores on one thread).

Inputs and outputs come from the graph:

- inputs: one 2-D tensor takes every feature in order (cast to the tensor's
  element type); several inputs take one feature each, by name, as ``[N, 1]``;
- output: the probability output is a ``seq(map)`` (scikit-learn's ZipMap) or a
  float tensor, preferring one whose name says ``prob``; P(class 1) is its
  second class (a ``[N, 2]`` column 1, a map's second key), or the value itself
  for ``[N]`` / ``[N, 1]``. Label outputs (integer or string tensors) are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, not_binary

ONNX_SUFFIXES = (".onnx",)
ONNX_FILE = "model.onnx"
_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64}


@dataclass(frozen=True)
class OnnxModel:
    """A loaded graph: its ONNX Runtime session and which input/output mean what."""

    session: Any
    inputs: list[tuple[str, Any]]  # (name, numpy dtype) in graph order
    output: str
    zipmap: bool
    width: int | None  # columns of a tensor output, when the graph states them


class OnnxFlavor(ModelFlavor):
    """An ONNX binary classifier, scored with ONNX Runtime."""

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

    def check_binary(self, model: Any) -> None:
        graph = as_session_model(model)
        if graph.width is not None and graph.width > 2:
            raise not_binary(f"this ONNX graph's output {graph.output!r} has {graph.width} classes")

    def input_names(self, model: Any) -> list[str] | None:
        inputs = as_session_model(model).inputs
        return [name for name, _ in inputs] if len(inputs) > 1 else None

    def scorer(self, model: Any) -> Scorer:
        graph = as_session_model(model)

        def _score(x: np.ndarray) -> np.ndarray:
            feeds = _feeds(graph, x)
            (out,) = graph.session.run([graph.output], feeds)
            return _positive(graph, out, len(x))

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
                f"the ONNX graph's input {arg.name!r} is {arg.type}; mlpipe feeds numeric "
                "tensors (float, double, int64) only"
            )
        inputs.append((arg.name, _DTYPES[arg.type]))
    return _with_output(session, inputs)


def _with_output(session: Any, inputs: list[tuple[str, Any]]) -> OnnxModel:
    candidates = [o for o in session.get_outputs() if _is_probability(o.type)]
    if not candidates:
        kinds = ", ".join(f"{o.name}: {o.type}" for o in session.get_outputs())
        raise InvalidInput(f"the ONNX graph has no probability output (outputs: {kinds})")
    named = [o for o in candidates if "prob" in o.name.lower()]
    output = (named or candidates)[-1]
    shape = output.shape if output.type.startswith("tensor") else []
    width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) else None
    return OnnxModel(session, inputs, output.name, output.type.startswith("seq(map"), width)


def _is_probability(kind: str) -> bool:
    return kind in ("tensor(float)", "tensor(double)") or kind.startswith("seq(map(")


def _feeds(graph: OnnxModel, x: np.ndarray) -> dict[str, np.ndarray]:
    if len(graph.inputs) == 1:
        name, dtype = graph.inputs[0]
        return {name: np.ascontiguousarray(x, dtype=dtype)}
    if x.shape[1] != len(graph.inputs):
        raise InvalidInput(f"the ONNX graph takes {len(graph.inputs)} inputs, got {x.shape[1]}")
    return {
        name: np.ascontiguousarray(x[:, [i]], dtype=dtype)
        for i, (name, dtype) in enumerate(graph.inputs)
    }


def _positive(graph: OnnxModel, out: Any, rows: int) -> np.ndarray:
    """P(class 1) per row from the probability output."""
    if graph.zipmap:
        if out and len(out[0]) != 2:
            raise not_binary(f"this ONNX graph's output {graph.output!r} has {len(out[0])} classes")
        return np.fromiter((list(row.values())[1] for row in out), np.float64, count=rows)
    scores = np.asarray(out, dtype=np.float64)
    if scores.ndim == 2 and scores.shape[1] == 2:
        return scores[:, 1]
    if scores.ndim == 2 and scores.shape[1] > 2:
        raise not_binary(f"this ONNX graph's output {graph.output!r} has {scores.shape[1]} classes")
    return scores.reshape(-1)
