"""The quantization guard: a derived version that loses a class's recall is refused.

The INT8 cliff is provoked deterministically: the fraud signal passes through
a weight (0.01) that shares its tensor with a large one (100), so per-tensor
INT8 (scale 100/127) rounds it to zero and every score falls to the same
value: fraud recall 1.0 → 0.0, AUC 1.0 → 0.5. In FP16 the weight survives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration
FEATURES = ["amount", "n_items"]


def _cliff_mlp(home: Path) -> tuple[Path, Path]:
    """A TorchScript MLP flagging amount > 500 (3 % of rows), and its evaluation set."""
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
    torch.jit.save(torch.jit.script(Scores().eval()), str(model_path))
    frame.to_csv(data, index=False)
    return model_path, data


def test_an_int8_recall_cliff_is_refused_and_registers_nothing(
    home: Path, settings: Any, cli: Any
) -> None:
    from mlpipe import registry

    model_path, data = _cliff_mlp(home)
    parent = registry.register(settings, "fraud-mlp", dataset=data, model_path=model_path)
    args = ["register", "fraud-mlp", "--quantize", "int8", "--dataset", str(data)]
    refused = cli(*args)
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
