"""Torch models: register (stored as a torch.export program), verified load, serve on the CPU,
quantized versions, each task (binary, multiclass, regression), and TorchScript versions
registered before the export."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_in_process

pytestmark = [pytest.mark.integration, pytest.mark.nn]

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

    with warnings.catch_warnings():  # TorchScript warns it is deprecated: the user's file
        warnings.simplefilter("ignore", DeprecationWarning)
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
    assert info.tags["mlpipe.task"] == "binary"

    loaded = registry.load_verified(settings, "fraud-mlp", info.version)
    assert _is_export(loaded.model)  # the TorchScript file was converted, and is served so
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


def _is_export(model: Any) -> bool:
    from mlpipe.registry._torch_export import is_exported

    return is_exported(model)


def _frame(rows: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({"amount": rng.gamma(2, 50, rows), "n_items": rng.integers(1, 9, rows)})


def _mlp(outputs: int, head: Any = None) -> Any:
    import torch

    torch.manual_seed(0)
    scale = torch.nn.Linear(2, 2)
    with torch.no_grad():  # inputs scaled inside the model, as the docs ask
        scale.weight.copy_(torch.diag(torch.tensor([1 / 100, 1 / 4])))
        scale.bias.zero_()
    layers = [scale, torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, outputs)]
    return torch.nn.Sequential(*layers, *([head] if head is not None else [])).eval()


def _eager(module: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return module(torch.tensor(x, dtype=torch.float32)).numpy().astype(np.float64)


def test_a_multiclass_softmax_module_from_a_pt2_file_loads_without_warnings_and_scores_as_eager(
    home: Path, settings: Any
) -> None:
    import torch

    from mlpipe import registry

    module = _mlp(3, torch.nn.Softmax(dim=1))
    program = torch.export.export(module, (torch.zeros(8, 2),))  # a static batch: re-exported
    model_path, data = home / "tiers.pt2", home / "tiers.csv"
    torch.export.save(program, str(model_path))
    frame = _frame()
    frame["label"] = _eager(module, frame[FEATURES].to_numpy()).argmax(axis=1)
    frame.to_csv(data, index=False)

    info = registry.register(settings, "tiers", dataset=data, model_path=model_path)
    assert info.tags["mlpipe.task"] == "multiclass"
    assert json.loads(info.tags["mlpipe.classes"]) == [0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation (TorchScript) warning on load
        loaded = registry.load_verified(settings, "tiers", info.version)
    assert _is_export(loaded.model) and loaded.task.task == "multiclass"
    x = frame[FEATURES].to_numpy()
    for rows in (1, 16, len(x)):
        assert loaded.predict_scores(x[:rows]) == pytest.approx(_eager(module, x[:rows]), abs=1e-6)


def test_a_regression_module_registers_once_declared_and_scores_as_eager(
    home: Path, settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from mlpipe import registry
    from mlpipe.errors import NotFound

    module = _mlp(1)
    with torch.no_grad():
        module[3].bias.fill_(20.0)  # a value, not a probability, even on zeros
    model_path, data = home / "basket.pt", home / "basket.csv"
    torch.save(module, model_path)
    frame = _frame()
    frame["label"] = _eager(module, frame[FEATURES].to_numpy())[:, 0] + 0.5
    frame.to_csv(data, index=False)

    args = ("register", "basket", "--model", str(model_path), "--dataset", str(data))
    code, out, err = run_in_process(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "on a batch of zeros: not a probability; end it with a sigmoid (a binary classifier) "
            "or pass --task regression"
        )
    )
    with pytest.raises(NotFound):
        registry.show(settings, "basket")  # nothing registered

    info = registry.register(
        settings, "basket", dataset=data, model_path=model_path, task="regression"
    )
    assert info.tags["mlpipe.task"] == "regression" and "mlpipe.classes" not in info.tags
    loaded = registry.load_verified(settings, "basket", info.version)
    x = frame[FEATURES].to_numpy()
    assert loaded.predict_scores(x) == pytest.approx(_eager(module, x)[:, 0], abs=1e-4)


class _TorchScriptFlavor:
    """The torch flavor as it logged versions before torch.export: TorchScript."""

    name = "torch"

    def log(self, model: Any, signature: Any, tags: dict[str, str]) -> Any:
        import mlflow.pytorch

        return mlflow.pytorch.log_model(
            model, name="model", serialization_format="pickle", signature=signature,
            pip_requirements=["torch"],
        )  # fmt: skip


def test_a_version_registered_as_torchscript_still_loads_and_quantizes(
    home: Path, settings: Any
) -> None:
    from mlflow.models import infer_signature

    from mlpipe import registry
    from mlpipe.registry import _registration

    model_path, data, module = _train_mlp(home)
    frame = pd.read_csv(data)
    tags = {
        "mlpipe.flavor": "torch",
        "mlpipe.features": json.dumps(FEATURES),
        "mlpipe.threshold": "0.5",
    }
    signature = infer_signature(frame[FEATURES].head(5), np.zeros(5))
    _registration.log_and_register(
        settings, "old-mlp", flavor=_TorchScriptFlavor(), model=module,  # type: ignore[arg-type]
        signature=signature, reference=frame.head(50), tags=tags, description=None,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old path silences TorchScript's deprecation
        loaded = registry.load_verified(settings, "old-mlp", "1")
    assert not _is_export(loaded.model) and loaded.task.task == "binary"
    x = frame[FEATURES].to_numpy()[:32]
    expected = _eager(module, x)[:, 0]
    assert loaded.predict_scores(x) == pytest.approx(expected, abs=1e-6)

    half = registry.register_quantized(settings, "old-mlp", recipe="fp16", dataset=data)
    derived = registry.load_verified(settings, "old-mlp", half.version)
    assert _is_export(derived.model)  # the derived version is stored as an export
    assert derived.predict_scores(x) == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize(
    ("file", "message"),
    [
        (
            "logits.pt2",
            r"error: the torch model gives 3 values per row that are not probabilities \(a row "
            r"of zeros gives \[.*\]\); end it with a softmax",
        ),
        ("broken.pt2", r"error: .*broken.pt2 is not a torch.export program \(save one with"),
    ],
)
def test_a_torch_file_mlpipe_cannot_serve_is_refused_in_one_line_and_registers_nothing(
    home: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    file: str,
    message: str,
) -> None:
    import re

    import torch

    from mlpipe import registry

    model_path, data = home / file, home / "tiers.csv"
    if file == "broken.pt2":
        model_path.write_bytes(b"not a zip archive")
    else:  # class scores without a softmax head
        torch.export.save(torch.export.export(_mlp(3), (torch.zeros(8, 2),)), str(model_path))
    frame = _frame(20).assign(label=0)
    frame.to_csv(data, index=False)
    args = ("register", "tiers", "--model", str(model_path), "--dataset", str(data))
    code, out, err = run_in_process(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(message + ".*", lines[0]), err
    assert registry.list_models(settings) == []
