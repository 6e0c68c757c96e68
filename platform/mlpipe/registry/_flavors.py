"""Model flavors: how each kind of model is read, logged to MLflow, loaded and scored.

A name → class table (``FLAVORS``). A version records its flavor as the tag
``mlpipe.flavor``; versions registered before flavors existed have none and
are ``sklearn``. Each flavor knows four things:

- ``accepts(model)``: whether a candidate object is of this flavor;
- ``registration_tags(model, trust)``: the tags loading will need (skops types);
- ``log(model, signature)``: log it as the run's ``model`` artifact;
- ``load(local, tags)``: load the downloaded, already verified, artifact dir.

and ``scorer(model)`` gives the vectorized ``X -> P(class 1)`` serving calls.

``torch`` stores TorchScript (``mlflow.pytorch`` with the ``pickle`` format,
which for a ScriptModule is ``torch.jit.save``), so a serving process loads it
with ``torch.jit.load`` and never unpickles. It scores in chunks on ``cuda``
when ``torch.cuda.is_available()`` and on the CPU otherwise, with the same code
(dynamic INT8 versions stay on the CPU: their kernels are CPU-only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlpipe.errors import InvalidInput

TAG = "mlpipe."
TORCH_SUFFIXES = (".pt", ".pth", ".torchscript")
TORCH_FILE = Path("data") / "model.pth"
TORCH_CHUNK_ROWS = 4096

Scorer = Callable[[np.ndarray], np.ndarray]


class ModelFlavor:
    """One kind of model; subclasses fill in every method."""

    name: ClassVar[str]

    def accepts(self, model: Any) -> bool:
        raise NotImplementedError

    def registration_tags(self, model: Any, trust: tuple[str, ...]) -> dict[str, str]:
        return {}

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        """Log ``model`` as artifact ``model`` of the active run; MLflow's ModelInfo."""
        raise NotImplementedError

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        raise NotImplementedError

    def scorer(self, model: Any) -> Scorer:
        raise NotImplementedError


class SklearnFlavor(ModelFlavor):
    """scikit-learn and LightGBM's scikit-learn API, stored with skops."""

    name = "sklearn"

    def accepts(self, model: Any) -> bool:
        return hasattr(model, "predict_proba")

    def registration_tags(self, model: Any, trust: tuple[str, ...]) -> dict[str, str]:
        from mlpipe.registry import _artifacts

        return {TAG + "skops_trusted_types": json.dumps(_artifacts.trusted_types_for(model, trust))}

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.sklearn

        trusted = json.loads(tags[TAG + "skops_trusted_types"])
        return mlflow.sklearn.log_model(
            model,
            name="model",
            serialization_format="skops",
            skops_trusted_types=trusted,
            signature=signature,
            pip_requirements=sklearn_requirements(trusted),
        )

    def load(self, local: Path, tags: dict[str, str]) -> Any:
        from mlpipe.registry import _artifacts

        trusted = json.loads(tags.get(TAG + "skops_trusted_types", "[]"))
        return _artifacts.load_skops(local / _artifacts.SKOPS_FILE, trusted)

    def scorer(self, model: Any) -> Scorer:
        from mlpipe.registry import _artifacts

        return _artifacts.positive_scores(model)  # type: ignore[no-any-return]


# The distributions behind the modules whose types mlpipe trusts without --trust.
_DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "lightgbm": "lightgbm",
    "numpy": "numpy",
    "scipy": "scipy",
}


def sklearn_requirements(trusted_types: list[str]) -> list[str] | None:
    """Pinned pip requirements for a skops-stored model, or None to let MLflow infer them.

    MLflow infers requirements by loading the model in a fresh Python process,
    which costs several seconds a registration (and more under contention). When
    every type the model holds comes from a library mlpipe pins, the list is
    known without that: the model libraries, skops, and what skops loads with.
    A type from anywhere else (named with ``--trust``) leaves it to MLflow.
    """
    from importlib.metadata import PackageNotFoundError, version

    modules = {t.split(".", 1)[0] for t in trusted_types} - {"collections"}
    if not modules <= _DISTRIBUTIONS.keys():
        return None
    wanted = sorted(
        {"scikit-learn", "skops", "numpy", "scipy"} | {_DISTRIBUTIONS[m] for m in modules}
    )
    try:
        return [f"{dist}=={version(dist)}" for dist in wanted]
    except PackageNotFoundError:
        return None


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


FLAVORS: dict[str, type[ModelFlavor]] = {"sklearn": SklearnFlavor, "torch": TorchFlavor}


def for_candidate(model: Any) -> ModelFlavor:
    """The flavor of a candidate object; raises InvalidInput for anything else."""
    for cls in FLAVORS.values():
        flavor = cls()
        if flavor.accepts(model):
            return flavor
    raise InvalidInput(
        f"a {type(model).__name__} is not a model mlpipe registers: a classifier with "
        "predict_proba (scikit-learn, LightGBM) or a torch module"
    )


def for_version(tags: dict[str, str]) -> ModelFlavor:
    """The flavor a registered version was stored with (``sklearn`` if it predates the tag)."""
    name = tags.get(TAG + "flavor", "sklearn")
    cls = FLAVORS.get(name)
    if cls is None:
        raise InvalidInput(f"unknown model flavor {name!r} (known: {', '.join(FLAVORS)})")
    return cls()


__all__ = ["FLAVORS", "ModelFlavor", "for_candidate", "for_version", "torch_scorer"]
