"""Per-row scoring cost by model format, in-process, at batch 1, 16 and 256.

Each model is trained here on the same synthetic binary task (30 features,
as in the breast-cancer set) and scored through the scorer its registry flavor
gives serving (``ModelFlavor.scorer``): what ``/predict`` pays per batch, without
HTTP, features or logging. ONNX rows are the same models converted with
``convert_to_onnx`` (what ``register --to-onnx`` does) and scored with ONNX Runtime.
The torch MLP is scored as a server holds it (a ``torch.export`` program saved as
``.pt2`` and loaded back) and, for comparison, as TorchScript (how it was stored before).
Nothing asserts a timing.

    python -m bench.formats [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCHES = (1, 16, 256)
FEATURES = 30
TREES = 100


def _data(rows: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, FEATURES))
    y = (x[:, :5].sum(axis=1) + rng.normal(0, 1, rows) > 0).astype(int)
    return x, y


def _models(x: np.ndarray, y: np.ndarray) -> dict[str, tuple[str, Any]]:
    """name -> (flavor for conversion, candidate model)."""
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    models: dict[str, tuple[str, Any]] = {
        "sklearn LogisticRegression": ("sklearn", LogisticRegression(max_iter=500).fit(x, y)),
        "sklearn RandomForest (100)": (
            "sklearn",
            RandomForestClassifier(TREES, max_depth=8, n_jobs=1, random_state=0).fit(x, y),
        ),
        "LightGBM Booster (100)": (
            "lightgbm",
            lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, y), TREES),
        ),
        "XGBoost Booster (100)": (
            "xgboost",
            xgb.train({"objective": "binary:logistic", "max_depth": 6}, xgb.DMatrix(x, y), TREES),
        ),
    }
    torch_model = _torch_mlp(x, y)
    if torch_model is not None:
        models["torch MLP (torch.export, pt2)"] = ("torch", _as_served(torch_model))
        models["torch MLP (TorchScript, before)"] = ("torch", _scripted(torch_model))
    return models


def _torch_mlp(x: np.ndarray, y: np.ndarray) -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1), torch.nn.Sigmoid()
    )
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    for _ in range(50):
        optimizer.zero_grad()
        torch.nn.functional.binary_cross_entropy(net(xt).squeeze(1), yt).backward()
        optimizer.step()
    return net.eval()


def _as_served(module: Any) -> Any:
    """The module as a server holds a torch version: exported with a dynamic batch, saved
    as ``.pt2`` and loaded back (``torch.export.load(...).module()``)."""
    import io

    import torch
    from torch.export import Dim

    program = torch.export.export(
        module, (torch.zeros(8, FEATURES),), dynamic_shapes=({0: Dim("batch")},)
    )
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    return torch.export.load(buffer).module()


def _scripted(module: Any) -> Any:
    """The same module as TorchScript: how torch versions were stored before decision 033."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(module)


def _per_row_us(score: Callable[[np.ndarray], Any], x: np.ndarray, budget_s: float) -> float:
    """Median µs per row over repeated calls of ``score(x)`` for about ``budget_s``."""
    score(x)  # warm
    times = []
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        score(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / len(x) * 1e6


def measure(budget_s: float) -> list[dict[str, Any]]:
    """One row per (model, format): µs per row at each batch size, and the ONNX deltas."""
    from mlpipe.registry import candidate_scorer, convert_to_onnx

    x, y = _data()
    rows = []
    for name, (flavor, model) in _models(x, y).items():
        scorer = candidate_scorer(model)
        variants = [(name, scorer, None)]
        if flavor != "torch":
            proto, _ = convert_to_onnx(flavor, model, FEATURES)
            onnx_scorer = candidate_scorer(proto)
            delta = float(np.max(np.abs(onnx_scorer(x) - scorer(x))))
            variants.append((f"{name} → ONNX", onnx_scorer, delta))
        for label, score, delta in variants:
            row: dict[str, Any] = {"model": label, "max_abs_delta": delta}
            for batch in BATCHES:
                row[f"us_per_row_b{batch}"] = _per_row_us(score, x[:batch], budget_s)
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = "| model | " + " | ".join(f"µs/row @{b}" for b in BATCHES) + " | ONNX max |Δ| |"
    lines = [head, "|---|" + "---:|" * (len(BATCHES) + 1)]
    for row in rows:
        cells = [f"{row[f'us_per_row_b{b}']:.2f}" for b in BATCHES]
        delta = "" if row["max_abs_delta"] is None else f"{row['max_abs_delta']:.1e}"
        lines.append(f"| {row['model']} | " + " | ".join(cells) + f" | {delta} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.1 s per cell instead of 1 s")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    rows = measure(0.1 if args.quick else 1.0)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
