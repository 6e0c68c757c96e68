"""A torch MLP: register (TorchScript), verified load, serve on the CPU, and quantized versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

FEATURES = ["amount", "n_items"]


def _train_mlp(home: Path) -> tuple[Path, Path, Any]:
    """A small MLP on fraud-like data, saved as TorchScript; (model file, dataset, module)."""
    import torch

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"amount": rng.gamma(2, 50, 2000), "n_items": rng.integers(1, 9, 2000)})
    logit = (frame["amount"] - 100) / 40 + (frame["n_items"] - 4) * 0.4
    frame["label"] = (rng.random(2000) < 1 / (1 + np.exp(-logit))).astype(int)
    x = torch.tensor(frame[FEATURES].to_numpy(), dtype=torch.float32)
    y = torch.tensor(frame["label"].to_numpy(), dtype=torch.float32)
    scale = torch.tensor([100.0, 4.0])
    net = torch.nn.Sequential(
        torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1), torch.nn.Sigmoid()
    )
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    for _ in range(150):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy(net(x / scale).squeeze(1), y)
        loss.backward()
        opt.step()

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.register_buffer("scale", scale)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x / self.scale)

    module = torch.jit.script(Scaled().eval())
    model_path, data = home / "mlp.pt", home / "train.csv"
    torch.jit.save(module, str(model_path))
    frame.to_csv(data, index=False)
    return model_path, data, module


def test_mlp_registers_loads_verified_and_serves_on_cpu(home: Path, settings: Any) -> None:
    import torch

    from mlpipe import deployments, registry
    from mlpipe.serving import PredictRequest, ServingRuntime

    model_path, data, module = _train_mlp(home)
    info = registry.register(settings, "fraud-mlp", dataset=data, model_path=model_path)
    assert info.tags["mlpipe.flavor"] == "torch" and info.features == FEATURES

    loaded = registry.load_verified(settings, "fraud-mlp", info.version)
    x = pd.read_csv(data)[FEATURES].to_numpy()[:64]
    expected = module(torch.tensor(x, dtype=torch.float32)).squeeze(1).detach().numpy()
    assert loaded.predict_scores(x) == pytest.approx(expected.astype(float), abs=1e-6)

    deployments.deploy(settings, "fraud-mlp", info.version)
    runtime = ServingRuntime(settings).start()
    try:
        assert runtime.loader.wait_ready(60)
        req = PredictRequest(
            model="fraud-mlp", entity={}, features={"amount": 80.0, "n_items": 3}, request_id="r1"
        )
        (answer,) = runtime.pipeline.predict_batch([req])
    finally:
        runtime.close()
    assert answer["version"] == info.version
    assert answer["score"] == pytest.approx(float(loaded.predict_scores(np.array([[80.0, 3]]))[0]))


def test_int8_version_names_its_parent_and_stays_within_tolerance(
    home: Path, settings: Any, cli: Any
) -> None:
    from mlpipe import registry
    from mlpipe.errors import InvalidInput

    model_path, data, _ = _train_mlp(home)
    parent = registry.register(settings, "fraud-mlp", dataset=data, model_path=model_path)
    result = cli(
        "register", "fraud-mlp", "--quantize", "int8", "--parent", parent.version,
        "--dataset", str(data), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    derived = registry.show(settings, f"fraud-mlp/{json.loads(result.stdout)['version']}")
    tags = derived.tags
    assert tags["mlpipe.parent_version"] == f"fraud-mlp/{parent.version}"
    assert tags["mlpipe.parent_artifact_sha256"] == parent.tags["mlpipe.artifact_sha256"]
    assert tags["mlpipe.quantize"] == "int8" and tags["mlpipe.features"] == json.dumps(FEATURES)
    tolerance = derived.metrics["max_abs_score_delta"]
    assert 0 < tolerance < 0.05 and abs(derived.metrics["accuracy_delta"]) < 0.02

    x = pd.read_csv(data)[FEATURES].to_numpy()
    before = registry.load_verified(settings, "fraud-mlp", parent.version).predict_scores(x)
    after = registry.load_verified(settings, "fraud-mlp", derived.version).predict_scores(x)
    assert np.max(np.abs(after - before)) <= tolerance

    half = registry.register_quantized(
        settings, "fraud-mlp", recipe="fp16", dataset=data, parent=parent.version
    )
    assert half.tags["mlpipe.parent_version"] == f"fraud-mlp/{parent.version}"
    assert half.metrics["max_abs_score_delta"] < 0.01
    with pytest.raises(InvalidInput, match="--quantize must be one of"):
        registry.register_quantized(settings, "fraud-mlp", recipe="int4", dataset=data)
