"""The quantization guard: a derived version that loses a class's recall (or, for a regression,
its MAE) is refused; the figures each task records.

The INT8 cliff is provoked deterministically: the fraud signal passes through
a weight (0.01) that shares its tensor with a large one (100), so per-tensor
INT8 (scale 100/127) rounds it to zero and every score falls to the same
value: fraud recall 1.0 → 0.0, AUC 1.0 → 0.5. In FP16 the weight survives.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.nn]
FEATURES = ["amount", "n_items"]


def _cliff_mlp(home: Path) -> tuple[Path, Path]:
    """A TorchScript MLP flagging amount > 500 (3 % of rows), and its evaluation set
    (TorchScript still registers: it is converted to a torch.export program)."""
    import torch

    rng = np.random.default_rng(0)
    amount = np.where(
        rng.random(2000) < 0.03, rng.uniform(600, 1000, 2000), rng.uniform(0, 400, 2000)
    )
    frame = pd.DataFrame({"amount": amount, "n_items": rng.uniform(0, 0.01, 2000)})
    frame["label"] = (frame["amount"] > 500).astype(int)
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[0.01, 0.0], [0.0, 100.0]]))
        first.bias.zero_()
        second.weight.copy_(torch.tensor([[1.0, 0.0]]))
        second.bias.fill_(-5.0)
    net = torch.nn.Sequential(first, torch.nn.ReLU(), second, torch.nn.Sigmoid()).eval()

    class Scores(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    model_path, data = home / "cliff.pt", home / "eval.csv"
    with warnings.catch_warnings():  # TorchScript warns it is deprecated: the user's file
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Scores().eval()), str(model_path))
    frame.to_csv(data, index=False)
    return model_path, data


def test_an_int8_recall_cliff_is_refused_and_registers_nothing(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    from mlpipe import registry

    model_path, data = _cliff_mlp(home)
    parent = registry.register(settings, "fraud-mlp", dataset=data, model_path=model_path)
    args = ["register", "fraud-mlp", "--quantize", "int8", "--dataset", str(data)]
    refused = cli_in_process(*args)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert f"int8 of fraud-mlp/{parent.version} degrades it on eval.csv" in line
    assert "recall of class 1 1.000 -> 0.000 (tolerance 0.05)" in line
    assert "AUC 1.000 -> 0.500 (tolerance 0.02)" in line
    assert "--accept-degradation" in line
    assert registry.show(settings, "fraud-mlp").version == parent.version  # nothing registered

    accepted = registry.register_quantized(
        settings, "fraud-mlp", recipe="int8", dataset=data, accept_degradation=True
    )
    assert accepted.tags["mlpipe.accepted_degradation"].startswith("AUC 1.000 -> 0.500")
    m = accepted.metrics
    assert (m["parent_recall_class_1"], m["recall_class_1"]) == (1.0, 0.0)
    assert m["parent_auc"] == 1.0 and m["auc"] == 0.5 and m["recall_class_0"] == 1.0


def test_a_benign_quantization_is_registered_with_per_class_figures_beside_the_parent(
    home: Path, settings: Any
) -> None:
    from mlpipe import registry

    model_path, data = _cliff_mlp(home)
    parent = registry.register(settings, "fraud-mlp", dataset=data, model_path=model_path)
    half = registry.register_quantized(settings, "fraud-mlp", recipe="fp16", dataset=data)
    assert half.tags["mlpipe.parent_version"] == f"fraud-mlp/{parent.version}"
    assert "mlpipe.accepted_degradation" not in half.tags
    m = half.metrics
    for key in ("recall_class_0", "recall_class_1", "auc"):
        assert m[key] == pytest.approx(m["parent_" + key], abs=0.01)


def _cliff_regression(home: Path) -> tuple[Path, Path]:
    """A linear regression reading amount through a weight (0.01) that shares its tensor with
    a large one (100): per-tensor INT8 rounds it to zero, and every prediction to ~0."""
    import torch

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"amount": rng.uniform(0, 1000, 500), "n_items": rng.uniform(0, 1e-3, 500)}
    )
    frame["label"] = 0.01 * frame["amount"] + rng.normal(0, 0.1, 500)
    net = torch.nn.Linear(2, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.01, 100.0]]))
        net.bias.zero_()
    model_path, data = home / "basket.pt", home / "basket-eval.csv"
    torch.save(net.eval(), model_path)
    frame.to_csv(data, index=False)
    return model_path, data


def test_a_regression_whose_mae_degrades_is_refused_and_registers_nothing(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    from mlpipe import registry

    model_path, data = _cliff_regression(home)
    parent = registry.register(
        settings, "basket", dataset=data, model_path=model_path, task="regression"
    )
    refused = cli_in_process("register", "basket", "--quantize", "int8", "--dataset", str(data))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert f"int8 of basket/{parent.version} degrades it on basket-eval.csv: MAE 0." in line
    assert "%, tolerance 5%); not registered (--accept-degradation" in line
    assert registry.show(settings, "basket").version == parent.version  # nothing registered

    accepted = registry.register_quantized(
        settings, "basket", recipe="int8", dataset=data, accept_degradation=True
    )
    assert accepted.tags["mlpipe.accepted_degradation"].startswith("MAE ")
    assert accepted.tags["mlpipe.task"] == "regression"
    m = accepted.metrics
    frame = pd.read_csv(data)
    x, y = frame[FEATURES].to_numpy(), frame["label"].to_numpy()
    before = registry.load_verified(settings, "basket", parent.version).predict_scores(x)
    after = registry.load_verified(settings, "basket", accepted.version).predict_scores(x)
    assert m["parent_mae"] == pytest.approx(np.mean(np.abs(before - y)), rel=1e-6)
    assert m["mae"] == pytest.approx(np.mean(np.abs(after - y)), rel=1e-6)
    assert m["rmse"] == pytest.approx(np.sqrt(np.mean((after - y) ** 2)), rel=1e-6)
    assert m["mae_delta"] == pytest.approx(m["mae"] - m["parent_mae"])
    assert m["max_abs_prediction_delta"] == pytest.approx(np.max(np.abs(after - before)), rel=1e-6)
    assert m["mae"] > 10 * m["parent_mae"] and "parent_rmse" in m


def test_a_multiclass_quantization_records_per_class_recall_macro_f1_and_probability_delta(
    home: Path, settings: Any
) -> None:
    import torch

    from mlpipe import registry

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"amount": rng.normal(0, 1, 600), "n_items": rng.normal(0, 1, 600)})
    hidden, out = torch.nn.Linear(2, 4), torch.nn.Linear(4, 3)
    with torch.no_grad():  # class 0: amount high, 1: amount low, 2: n_items far from 0
        hidden.weight.copy_(torch.tensor([[1.0, 0], [-1, 0], [0, 1], [0, -1]]))
        hidden.bias.zero_()
        out.weight.copy_(torch.tensor([[3.0, 0, 0, 0], [0, 3, 0, 0], [0, 0, 3, 3]]))
        out.bias.zero_()
    net = torch.nn.Sequential(hidden, torch.nn.ReLU(), out, torch.nn.Softmax(dim=1)).eval()
    with torch.inference_mode():
        scores = net(torch.tensor(frame.to_numpy(), dtype=torch.float32)).numpy()
    frame["label"] = scores.argmax(axis=1)
    assert sorted(frame["label"].unique()) == [0, 1, 2]
    model_path, data = home / "tiers.pt", home / "tiers.csv"
    torch.save(net, model_path)
    frame.to_csv(data, index=False)
    parent = registry.register(settings, "tiers", dataset=data, model_path=model_path)

    derived = registry.register_quantized(settings, "tiers", recipe="int8", dataset=data)
    assert derived.tags["mlpipe.task"] == "multiclass"
    assert derived.tags["mlpipe.classes"] == parent.tags["mlpipe.classes"] == "[0, 1, 2]"
    m = derived.metrics
    for key in ("recall_class_0", "recall_class_1", "recall_class_2", "macro_f1"):
        assert m["parent_" + key] == 1.0 and m[key] == pytest.approx(1.0, abs=0.05)
    assert m["accuracy"] == pytest.approx(1.0 + m["accuracy_delta"])
    x = frame[FEATURES].to_numpy()
    before = registry.load_verified(settings, "tiers", parent.version).predict_scores(x)
    after = registry.load_verified(settings, "tiers", derived.version).predict_scores(x)
    assert after.shape == (600, 3)
    assert 0 < np.max(np.abs(after - before)) <= m["max_abs_probability_delta"] + 1e-7
    assert "auc" not in m and "max_abs_score_delta" not in m
