"""The torch flavor without a registry: export, the task a module's output tells, scoring.

Real torch throughout: each module is exported with ``torch.export`` (a few
seconds for the first export in a process, then well under one).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry._torch_export import exported_module, is_exported
from mlpipe.registry._torch_flavor import TORCH_CHUNK_ROWS, TorchFlavor
from mlpipe.tasks import TaskSpec

pytestmark = [pytest.mark.nn, pytest.mark.usefixtures("torch_imported")]
torch: Any = None  # set by the torch_imported fixture before the first test

FLAVOR = TorchFlavor()


def _mlp(outputs: int, head: Any = None, inputs: int = 4) -> Any:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(inputs, 16), torch.nn.ReLU(), torch.nn.Linear(16, outputs)]
    return torch.nn.Sequential(*layers, *([head] if head is not None else [])).eval()


def _regressor() -> Any:
    """An MLP giving 5 + something on a zero batch: a value, not a probability."""
    module = _mlp(1)
    with torch.no_grad():
        module[2].bias.fill_(5.0)
    return module


def _module(name: str) -> Any:
    """A module by name (the parametrized tests' cases; built when the test runs):
    ``<head><outputs>`` (``sigmoid1``, ``softmax3``, ``flatten1``, ``plain3``) or
    ``regressor``."""
    if name == "regressor":
        return _regressor()
    heads = {
        "sigmoid": lambda: torch.nn.Sigmoid(),
        "softmax": lambda: torch.nn.Softmax(dim=1),
        "flatten": lambda: torch.nn.Flatten(0),
        "plain": lambda: None,
    }
    head = name.rstrip("0123456789")
    return _mlp(int(name[len(head) :]), heads[head]())


def _rows(n: int, width: int = 4) -> np.ndarray:
    return np.random.default_rng(n).normal(size=(n, width))


def _eager(module: Any, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return module(torch.tensor(x, dtype=torch.float32)).numpy().astype(np.float64)


@pytest.mark.parametrize(
    ("module", "declared", "expected"),
    [
        ("sigmoid1", None, TaskSpec("binary")),
        ("softmax2", None, TaskSpec("binary")),
        ("softmax2", "binary", TaskSpec("binary")),
        ("softmax3", None, TaskSpec("multiclass", (0, 1, 2))),
        ("softmax5", "multiclass", TaskSpec("multiclass", tuple(range(5)))),
        ("regressor", "regression", TaskSpec("regression")),
        ("flatten1", "regression", TaskSpec("regression")),
        ("sigmoid1", "regression", TaskSpec("regression")),
    ],
)
def test_the_task_is_read_from_the_output_on_a_zero_batch(
    module: str, declared: Any, expected: TaskSpec
) -> None:
    assert FLAVOR.task_of(_module(module), declared) == expected


@pytest.mark.parametrize(
    ("module", "declared", "message"),
    [
        (
            "regressor",
            None,
            "the torch model gives one value per row, [0-9.]+ on a batch of zeros: not a "
            r"probability; end it with a sigmoid \(a binary classifier\) or pass --task "
            "regression",
        ),
        (
            "plain3",
            None,
            r"the torch model gives 3 values per row that are not probabilities \(a row of "
            r"zeros gives \[.*\]\); end it with a softmax",
        ),
        (
            "softmax3",
            "regression",
            "--task regression does not match the model: the torch model gives 3 class "
            r"probabilities per row, so it is multiclass \(3 classes\)",
        ),
        (
            "sigmoid1",
            "multiclass",
            "--task multiclass does not match the model: the torch model gives one value per "
            "row, so it is binary",
        ),
        (
            "softmax2",
            "multiclass",
            "--task multiclass does not match the model: the torch model gives 2 class "
            "probabilities per row, so it is binary",
        ),
    ],
)
def test_a_task_the_output_cannot_carry_is_refused_in_one_line(
    module: str, declared: Any, message: str
) -> None:
    built = _module(module)
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        FLAVOR.task_of(built, declared)


def test_a_module_that_cannot_be_exported_is_refused_in_one_line() -> None:
    class Branches(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: Any) -> Any:
            if x.sum() > 0:  # data-dependent control flow: torch.export cannot trace it
                return torch.sigmoid(self.linear(x))
            return torch.sigmoid(-self.linear(x))

    with pytest.raises(InvalidInput, match=r"^the torch model cannot be exported with torch\."):
        FLAVOR.task_of(Branches(), None)


def test_the_export_has_a_dynamic_batch_and_scores_as_the_eager_module() -> None:
    module = _mlp(3, torch.nn.Softmax(dim=1))
    task = FLAVOR.task_of(module, None)
    exported = exported_module(module)
    assert is_exported(exported) and exported_module(module) is exported  # exported once
    score = FLAVOR.scorer(module, task)
    for rows in (1, 2, 7, TORCH_CHUNK_ROWS + 5):
        x = _rows(rows)
        assert score(x) == pytest.approx(_eager(module, x), abs=1e-6)
    assert score(np.empty((0, 4))).shape == (0,)
    with torch.no_grad():
        module[2].bias.add_(1.0)  # trained further: the kept export is stale
    assert exported_module(module) is not exported
    x = _rows(3)
    assert FLAVOR.scorer(module, task)(x) == pytest.approx(_eager(module, x), abs=1e-6)


def test_each_task_gets_its_output_shape() -> None:
    x = _rows(6)
    binary = _mlp(2, torch.nn.Softmax(dim=1))
    assert FLAVOR.scorer(binary, TaskSpec("binary"))(x) == pytest.approx(_eager(binary, x)[:, 1])
    regression = _regressor()
    values = FLAVOR.scorer(regression, TaskSpec("regression"))(x)
    assert values.shape == (6,) and values == pytest.approx(_eager(regression, x)[:, 0], abs=1e-6)
    assert FLAVOR.scorer(_mlp(4, torch.nn.Softmax(dim=1)), TaskSpec("multiclass", (0, 1, 2, 3)))(
        x
    ).shape == (6, 4)


def test_a_torchscript_candidate_is_converted_to_an_export_without_a_warning() -> None:
    module = _mlp(3, torch.nn.Softmax(dim=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scripting it here is the test's doing
        scripted = torch.jit.script(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task = FLAVOR.task_of(scripted, None)
        x = _rows(9)
        scores = FLAVOR.scorer(scripted, task)(x)
    assert task == TaskSpec("multiclass", (0, 1, 2))
    assert is_exported(exported_module(scripted))
    assert scores == pytest.approx(_eager(module, x), abs=1e-6)


def test_a_module_without_a_linear_layer_needs_an_export() -> None:
    with pytest.raises(InvalidInput, match="cannot tell how many inputs .* register the .pt2"):
        FLAVOR.task_of(torch.nn.Sigmoid(), None)


def test_an_mlflow_pt2_directory_is_a_candidate(tmp_path: Any) -> None:
    import mlflow.pytorch
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    from mlpipe.registry._candidate import read_candidate

    module = _mlp(3, torch.nn.Softmax(dim=1))
    signature = ModelSignature(inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 4))]))
    mlflow.pytorch.save_model(
        module,
        str(tmp_path / "model"),
        serialization_format="pt2",
        input_example=np.zeros((8, 4), dtype=np.float32),
        signature=signature,
        pip_requirements=["torch"],
    )
    candidate = read_candidate(tmp_path / "model")
    assert is_exported(candidate)
    assert FLAVOR.task_of(candidate, None) == TaskSpec("multiclass", (0, 1, 2))
    x = _rows(5)
    task = TaskSpec("multiclass", (0, 1, 2))
    assert FLAVOR.scorer(candidate, task)(x) == pytest.approx(_eager(module, x), abs=1e-6)
