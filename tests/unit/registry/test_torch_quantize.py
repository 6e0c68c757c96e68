"""Quantizing a torch module (fp16, bf16, int8 as exported programs) and the per-task figures."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry._quantize import quantize_module
from mlpipe.registry._quantize_figures import degradation, evaluate
from mlpipe.registry._torch_export import exported_module, is_exported
from mlpipe.registry._torch_flavor import torch_scorer
from mlpipe.tasks import TaskSpec

pytestmark = [pytest.mark.nn, pytest.mark.usefixtures("torch_imported")]
torch: Any = None  # set by the torch_imported fixture before the first test

MULTICLASS = TaskSpec("multiclass", (0, 1, 2))


def _mlp(outputs: int, head: Any = None) -> Any:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, outputs)]
    return torch.nn.Sequential(*layers, *([head] if head is not None else [])).eval()


def _rows(n: int) -> np.ndarray:
    return np.random.default_rng(n).normal(size=(n, 4)).astype(np.float32)


@pytest.mark.parametrize("recipe", ["fp16", "bf16", "int8"])
def test_each_recipe_gives_an_exported_copy_close_to_the_parent_and_leaves_it_as_it_was(
    recipe: str,
) -> None:
    module = _mlp(3, torch.nn.Softmax(dim=1))
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no TorchScript, no torch.ao deprecation on the way
        derived = quantize_module(module, recipe)
    assert is_exported(derived)
    x = _rows(300)
    before = torch_scorer(module, "cpu", MULTICLASS)(x)
    after = torch_scorer(derived, "cpu", MULTICLASS)(x)
    assert after.shape == (300, 3) and 0 < np.max(np.abs(after - before)) < 0.02
    assert all(torch.equal(weights[k], v) for k, v in module.state_dict().items())


def test_int8_stores_int8_weights_scores_each_row_alone_and_names_no_device() -> None:
    derived = quantize_module(_mlp(1, torch.nn.Sigmoid()), "int8")
    int8 = [name for name, t in derived.state_dict().items() if t.dtype == torch.int8]
    assert len(int8) == 2  # both Linear weights, and no float copy of them kept
    assert not [n for n, t in derived.state_dict().items() if t.ndim == 2 and t.is_floating_point()]
    x = _rows(64)
    score = torch_scorer(derived, "cpu")
    batched = score(x)
    alone = np.concatenate([score(x[i : i + 1]) for i in range(len(x))])
    assert np.max(np.abs(batched - alone)) < 1e-6  # per-row scales: no row hangs on another
    assert not [n for n in derived.graph.nodes if "device" in n.kwargs]  # movable to a GPU


def test_int8_of_a_module_without_a_linear_layer_is_refused() -> None:
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(1, 4))

        def forward(self, x: Any) -> Any:
            return torch.sigmoid((x * self.weight).sum(dim=1))

    with pytest.raises(InvalidInput, match="^int8 quantizes Linear layers, and this torch"):
        quantize_module(Scaled().eval(), "int8")


def test_multiclass_figures_recall_per_class_macro_f1_and_the_largest_probability_change() -> None:
    parent = exported_module(_mlp(3, torch.nn.Softmax(dim=1)))
    derived = quantize_module(parent, "int8")
    x = _rows(400)
    before = torch_scorer(parent, "cpu", MULTICLASS)(x)
    after = torch_scorer(derived, "cpu", MULTICLASS)(x)
    y = before.argmax(axis=1).astype(str)  # labels as a CSV gives them: text
    y[:40] = "2"
    figures = evaluate(parent, derived, x, y, MULTICLASS)
    truth = y.astype(int)
    assert figures["max_abs_probability_delta"] == pytest.approx(np.max(np.abs(after - before)))
    assert figures["accuracy"] == pytest.approx(np.mean(after.argmax(axis=1) == truth))
    assert figures["accuracy_delta"] == pytest.approx(
        figures["accuracy"] - np.mean(before.argmax(axis=1) == truth)
    )
    for c in range(3):
        rows = truth == c
        assert figures[f"parent_recall_class_{c}"] == pytest.approx(
            np.mean(before.argmax(axis=1)[rows] == c)
        )
    assert 0 < figures["macro_f1"] <= 1 and 0 < figures["parent_macro_f1"] <= 1
    assert "auc" not in figures and "max_abs_score_delta" not in figures


def test_a_label_that_names_no_class_is_refused() -> None:
    module = exported_module(_mlp(3, torch.nn.Softmax(dim=1)))
    x = _rows(3)
    with pytest.raises(InvalidInput, match=r"1 value\(s\) that name no class .* e.g. 'cat'"):
        evaluate(module, module, x, np.array(["0", "cat", "2"]), MULTICLASS)


def test_regression_figures_mae_rmse_and_the_guard_on_a_relative_mae_rise() -> None:
    parent = exported_module(_mlp(1))
    derived = quantize_module(parent, "fp16")
    x = _rows(200)
    task = TaskSpec("regression")
    before = torch_scorer(parent, "cpu", task)(x)
    after = torch_scorer(derived, "cpu", task)(x)
    y = before + np.random.default_rng(0).normal(0, 0.5, len(x))
    figures = evaluate(parent, derived, x, y, task)
    assert figures["parent_mae"] == pytest.approx(np.mean(np.abs(before - y)))
    assert figures["mae"] == pytest.approx(np.mean(np.abs(after - y)))
    assert figures["rmse"] == pytest.approx(math.sqrt(np.mean((after - y) ** 2)))
    assert figures["mae_delta"] == pytest.approx(figures["mae"] - figures["parent_mae"])
    assert figures["max_abs_prediction_delta"] == pytest.approx(np.max(np.abs(after - before)))
    assert degradation(figures) == []
    worse = {**figures, "mae": figures["parent_mae"] * 1.2}
    (line,) = degradation(worse)
    assert line.startswith("MAE ") and line.endswith("(+20.0%, tolerance 5%)")


def test_binary_figures_keep_their_names() -> None:
    parent = exported_module(_mlp(1, torch.nn.Sigmoid()))
    x = _rows(100)
    y = (torch_scorer(parent, "cpu")(x) >= 0.5).astype(int)
    figures = evaluate(parent, parent, x, y, TaskSpec("binary"))
    assert set(figures) == {
        "accuracy",
        "accuracy_delta",
        "max_abs_score_delta",
        "recall_class_0",
        "recall_class_1",
        "auc",
        "parent_recall_class_0",
        "parent_recall_class_1",
        "parent_auc",
    }
    assert figures["accuracy"] == 1.0 and figures["max_abs_score_delta"] == 0.0
