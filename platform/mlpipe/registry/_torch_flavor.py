"""The PyTorch flavor: stored and served as a ``torch.export`` program (MLflow's ``pt2``).

A candidate (an ``nn.Module``, a ``.pt2`` ExportedProgram file, or a TorchScript
file, converted) is exported with ``torch.export`` with a dynamic batch
dimension and logged with ``mlflow.pytorch`` in the ``pt2`` format. A serving
process loads it with ``mlflow.pytorch.load_model``, which checks that the
archive holds no pickle before ``torch.export.load``: nothing is unpickled and
no TorchScript runs on the serving path. Versions registered as TorchScript
before (``data/model.pth``) still load with ``torch.jit.load``, its deprecation
warning silenced (decision 033).

What a module predicts is read from its output on a small zero batch (see
:meth:`TorchFlavor.task_of`). It scores in chunks on ``cuda`` when
``torch.cuda.is_available()`` and on the CPU otherwise, with the same code
(dynamic INT8 TorchScript versions, quantized before, stay on the CPU).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line
from mlpipe.registry._model_flavor import ModelFlavor, Scorer, settled
from mlpipe.registry._torch_export import (
    EXAMPLE_ROWS,
    cached_export,
    dynamic_batch,
    exported_module,
    in_eval_mode,
    input_dtype,
    input_width,
    quiet_torch_logs,
)
from mlpipe.tasks import Task, TaskSpec

TORCH_SUFFIXES = (".pt", ".pth", ".torchscript", ".pt2")
TORCH_FILE = Path("data") / "model.pth"  # TorchScript versions, registered before decision 033
TORCH_PT2_FILE = Path("data") / "model.pt2"
TORCH_CHUNK_ROWS = 4096
PROBE_ROWS = 2  # the zero batch whose output tells the task
SUM_TOLERANCE = 1e-3  # how far a row of class probabilities may sum from 1


class TorchFlavor(ModelFlavor):
    """A PyTorch module mapping float rows ``[N, F]`` to its task's output: P(class 1) as
    ``[N]``, ``[N, 1]`` or ``[N, 2]`` (binary), class probabilities ``[N, K]`` (multiclass),
    or values ``[N]``/``[N, 1]`` (regression, declared). Stored as a ``torch.export`` program."""

    name = "torch"

    def accepts(self, model: Any) -> bool:
        try:
            import torch
        except ImportError:
            return False
        return isinstance(model, torch.nn.Module)

    def read_file(self, path: Path) -> Any:
        """A ``.pt2`` ExportedProgram, a TorchScript file or (a pickle, trusted as any pickle)
        a whole saved module; InvalidInput (one line) for anything else."""
        import torch

        if path.suffix.lower() == ".pt2":
            try:
                with quiet_torch_logs():
                    program = torch.export.load(str(path))
            except Exception as exc:  # noqa: BLE001 - any failure means "not an ExportedProgram"
                raise InvalidInput(
                    f"{path} is not a torch.export program (save one with torch.export.save)"
                ) from exc
            module = program.module()
            # A fixed batch is re-exported with a dynamic one: its guard must not pin it.
            return module if dynamic_batch(module) else program.module(check_guards=False)
        try:
            with _quiet_jit():
                # torch leaves torch.jit.load unannotated
                return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
        except RuntimeError:
            pass
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - any failure means "not a torch model file"
            raise InvalidInput(f"{path} is neither TorchScript nor a saved torch module") from exc

    def read_mlflow_dir(self, path: Path) -> Any:
        import mlflow.pytorch

        with _quiet_jit():
            return mlflow.pytorch.load_model(str(path), map_location="cpu")

    def task_of(self, model: Any, declared: Task | None) -> TaskSpec:
        """The task told by the module's output on a zero batch of its input width.

        ``[N]``/``[N, 1]``: binary P(class 1), or regression when declared; ``[N, 2]``:
        binary (column 1); ``[N, K]``, K ≥ 3: multiclass over classes ``0..K-1``, whose
        rows must be probabilities. Exports the module first (cached for the
        registration), so an export failure is refused here, before anything is written.
        """
        import torch

        module = exported_module(model)
        try:
            with torch.inference_mode():
                probe = torch.zeros(PROBE_ROWS, input_width(module), dtype=input_dtype(module))
                out = module(probe).float().cpu().numpy()
        except Exception as exc:  # noqa: BLE001 - the user's module fails in its own way
            raise InvalidInput(
                f"the torch model fails on a batch of zeros: {type(exc).__name__}: "
                f"{first_line(exc)}"
            ) from exc
        return _task_from_output(out, declared)

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.pytorch
        import torch

        module = exported_module(model)
        width, dtype = input_width(module), input_dtype(module)
        return mlflow.pytorch.log_model(
            module,
            name="model",
            serialization_format="pt2",  # torch.export.save: no pickle in the archive
            signature=_tensor_signature(signature, width, dtype),
            input_example=np.zeros((EXAMPLE_ROWS, width), dtype=_numpy_dtype(dtype)),
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        """The version's program (``pt2``), or its TorchScript for versions stored before."""
        if (local / TORCH_PT2_FILE).exists():
            import mlflow.pytorch

            return mlflow.pytorch.load_model(str(local))  # refuses a pt2 archive with a pickle
        import torch

        with _quiet_jit():
            # torch leaves torch.jit.load unannotated
            script = torch.jit.load(str(local / TORCH_FILE), map_location="cpu")  # type: ignore[no-untyped-call]
            return script.eval()

    def scorer(self, model: Any, task: TaskSpec | None = None) -> Scorer:
        cached = cached_export(model)
        return torch_scorer(model if cached is None else cached, task=task)


def _task_from_output(out: np.ndarray, declared: Task | None) -> TaskSpec:
    """The task a zero batch's output ``out`` (``[PROBE_ROWS, ...]``) tells, checked against
    ``declared``."""
    shape = list(out.shape)
    if out.ndim == 1 or (out.ndim == 2 and out.shape[1] == 1):
        if declared == "regression":
            return TaskSpec("regression")
        if declared is None and ((out < 0).any() or (out > 1).any()):
            raise InvalidInput(
                f"the torch model gives one value per row, {float(out.reshape(-1)[0]):g} on a "
                "batch of zeros: not a probability; end it with a sigmoid (a binary "
                "classifier) or pass --task regression"
            )
        return settled(TaskSpec("binary"), declared, "the torch model gives one value per row")
    if out.ndim != 2:
        raise InvalidInput(
            f"the torch model gives outputs of shape {shape} for {PROBE_ROWS} rows; mlpipe "
            "takes [N], [N, 1] (a probability or a value) or [N, K] (class probabilities)"
        )
    classes = out.shape[1]
    what = f"the torch model gives {classes} class probabilities per row"
    if not _probabilities(out):
        raise InvalidInput(
            f"the torch model gives {classes} values per row that are not probabilities "
            f"(a row of zeros gives {np.round(out[0], 4).tolist()}); end it with a softmax"
        )
    if classes == 2:
        return settled(TaskSpec("binary"), declared, what)
    return settled(TaskSpec("multiclass", tuple(range(classes))), declared, what)


def _probabilities(out: np.ndarray) -> bool:
    """Whether every row of ``out`` is a probability distribution."""
    in_range = bool(((out >= 0) & (out <= 1)).all())
    return in_range and bool(np.allclose(out.sum(axis=1), 1.0, atol=SUM_TOLERANCE))


# --- storing ---------------------------------------------------------------------------


def _numpy_dtype(dtype: Any) -> Any:
    import torch

    return np.float16 if dtype == torch.float16 else np.float32  # numpy has no bfloat16


def _tensor_signature(signature: Any, width: int, dtype: Any) -> Any:
    """MLflow's ``pt2`` wants a tensor input signature: ``[-1, width]`` of the model's dtype,
    beside the outputs of the column signature registration inferred."""
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    inputs = Schema([TensorSpec(np.dtype(_numpy_dtype(dtype)), (-1, width))])
    return ModelSignature(inputs=inputs, outputs=getattr(signature, "outputs", None))


@contextlib.contextmanager
def _quiet_jit() -> Iterator[None]:
    """TorchScript's deprecation warning silenced (old versions, TorchScript files)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit.* is deprecated")
        yield


# --- scoring --------------------------------------------------------------------------


def torch_device(model: Any) -> str:
    """``cuda`` when there is a GPU and the model can run there, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() and not _cpu_only(model) else "cpu"


def _cpu_only(model: Any) -> bool:
    """Dynamic INT8 TorchScript (versions quantized before decision 033) has CPU kernels only."""
    graph = getattr(model, "graph", None)
    nodes = list(graph.nodes()) if graph is not None and callable(graph.nodes) else []
    return any("quantized" in str(node.kind()) for node in nodes)


def torch_scorer(model: Any, device: str | None = None, task: TaskSpec | None = None) -> Scorer:
    """Vectorized output of a torch module for its task (binary P(class 1) when None):
    inputs in the module's dtype, in chunks of ``TORCH_CHUNK_ROWS``."""
    import torch

    device = device or torch_device(model)
    model = in_eval_mode(model.to(device))
    dtype = input_dtype(model)
    shape = _output_shape(task)

    def _score(x: np.ndarray) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(x), TORCH_CHUNK_ROWS):
                chunk = torch.as_tensor(np.asarray(x[start : start + TORCH_CHUNK_ROWS]))
                out.append(shape(model(chunk.to(device, dtype)).float()).cpu().numpy())
        if not out:
            return np.empty(0)
        return np.concatenate(out).astype(np.float64)

    return _score


def _output_shape(task: TaskSpec | None) -> Any:
    """The function shaping a batch's raw output for ``task`` (see :mod:`mlpipe.tasks`)."""

    def _column(y: Any) -> Any:
        if y.ndim == 2 and y.shape[1] == 2:
            return y[:, 1]
        return y.reshape(-1)

    if task is not None and task.task == "multiclass":
        return lambda y: y
    if task is not None and task.task == "regression":
        return lambda y: y.reshape(-1)
    return _column
