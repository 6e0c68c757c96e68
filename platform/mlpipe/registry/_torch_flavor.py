"""The PyTorch flavor: stored and served as TorchScript.

``torch`` stores TorchScript (``mlflow.pytorch`` with the ``pickle`` format,
which for a ScriptModule is ``torch.jit.save``), so a serving process loads it
with ``torch.jit.load`` and never unpickles. It scores in chunks on ``cuda``
when ``torch.cuda.is_available()`` and on the CPU otherwise, with the same code
(dynamic INT8 versions stay on the CPU: their kernels are CPU-only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlpipe.errors import InvalidInput
from mlpipe.registry._model_flavor import ModelFlavor, Scorer

TORCH_SUFFIXES = (".pt", ".pth", ".torchscript")
TORCH_FILE = Path("data") / "model.pth"
TORCH_CHUNK_ROWS = 4096


class TorchFlavor(ModelFlavor):
    """A PyTorch module mapping float rows ``[N, F]`` to P(class 1): ``[N]``, ``[N, 1]`` or
    two-class probabilities ``[N, 2]``. Stored and served as TorchScript."""

    name = "torch"

    def accepts(self, model: Any) -> bool:
        try:
            import torch
        except ImportError:
            return False
        return isinstance(model, torch.nn.Module)

    def read_file(self, path: Path) -> Any:
        """A TorchScript file, or (a pickle, trusted as any pickle) a whole saved module."""
        import torch

        try:
            return torch.jit.load(str(path), map_location="cpu")
        except RuntimeError:
            pass
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - any failure means "not a torch model file"
            raise InvalidInput(f"{path} is neither TorchScript nor a saved torch module") from exc

    def read_mlflow_dir(self, path: Path) -> Any:
        import mlflow.pytorch

        return mlflow.pytorch.load_model(str(path), map_location="cpu")

    def script(self, model: Any) -> Any:
        """The candidate as TorchScript in eval mode; raises InvalidInput if it cannot be."""
        import torch

        if isinstance(model, torch.jit.ScriptModule):
            return model.eval()
        try:
            return torch.jit.script(model.eval())
        except Exception as exc:  # noqa: BLE001 - torch raises many kinds here
            raise InvalidInput(f"the torch model cannot be compiled to TorchScript: {exc}") from exc

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.pytorch
        import torch

        return mlflow.pytorch.log_model(
            self.script(model),
            name="model",
            serialization_format="pickle",  # for a ScriptModule: torch.jit.save, no pickle
            signature=signature,
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        import torch

        return torch.jit.load(str(local / TORCH_FILE), map_location="cpu").eval()

    def scorer(self, model: Any) -> Scorer:
        return torch_scorer(model)


def torch_device(model: Any) -> str:
    """``cuda`` when there is a GPU and the model can run there, else ``cpu``."""
    import torch

    quantized = any("quantized" in str(node.kind()) for node in _graph_nodes(model))
    return "cuda" if torch.cuda.is_available() and not quantized else "cpu"


def _graph_nodes(model: Any) -> list[Any]:
    graph = getattr(model, "graph", None)
    return list(graph.nodes()) if graph is not None else []


def torch_scorer(model: Any, device: str | None = None) -> Scorer:
    """Vectorized P(class 1) for a torch module: inputs in its parameters' dtype, in chunks."""
    import torch

    device = device or torch_device(model)
    model = model.to(device).eval()
    params = list(model.parameters())
    dtype = params[0].dtype if params else torch.float32

    def _score(x: np.ndarray) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(x), TORCH_CHUNK_ROWS):
                chunk = torch.as_tensor(x[start : start + TORCH_CHUNK_ROWS]).to(device, dtype)
                y = model(chunk).float()
                if y.ndim == 2 and y.shape[1] == 2:
                    y = y[:, 1]
                out.append(y.reshape(-1).cpu().numpy())
        return np.concatenate(out).astype(np.float64) if out else np.empty(0)

    return _score
