"""The bench home (the demo's stack, v2 as a 10 % canary) and the request mix.

Every system gets the same stream of cases (customer, amount); mlpipe gets the
mlpipe request and fetches the customer's features itself, the baselines get
the same customer's v1 feature row (read from the same Feast online store
once, up front) plus the amount. The amount changes with every request, so
the prediction cache cannot turn the run into a cache benchmark.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import BodyFactory

CUSTOMERS = 500
MARKER = "bench-ready"


def ensure_home(
    root: Path, *, rebuild: bool = False, customers: int = CUSTOMERS, days: int = 30
) -> Path:
    """The demo home under ``root`` (built if missing): returns ``<root>/.mlpipe-demo``."""
    home = root / ".mlpipe-demo"
    if not rebuild and (home / MARKER).is_file():
        return home
    from mlpipe import demo, deployments
    from mlpipe.config import load_settings

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    repo = Path(__file__).resolve().parents[1] / "feature_repo"
    shutil.copytree(repo, root / "feature_repo", ignore=shutil.ignore_patterns("data"))
    settings = demo.run(load_settings(home=root), lambda _e: None, customers=customers, days=days)
    deployments.deploy(settings, "fraud", "2", canary=10, reason="bench: 10 % canary")
    (home / MARKER).write_text("ok\n")
    return home


@contextmanager
def onnx_deployed(home: Path) -> Iterator[None]:
    """The bench model's champion (1) and 10 % canary (2) swapped for their ONNX conversions
    (``register --to-onnx``, registered once and reused), put back on exit."""
    from mlpipe import deployments
    from mlpipe.config import load_settings

    settings = load_settings(home=home)
    converted = {parent: _onnx_version(settings, parent) for parent in ("1", "2")}
    deployments.deploy(settings, "fraud", converted["1"], reason="bench: ONNX champion")
    deployments.deploy(settings, "fraud", converted["2"], canary=10, reason="bench: ONNX canary")
    try:
        yield
    finally:
        deployments.deploy(settings, "fraud", "1", reason="bench: back to LightGBM")
        deployments.deploy(settings, "fraud", "2", canary=10, reason="bench: 10 % canary")


def _onnx_version(settings: Any, parent: str) -> str:
    """The ONNX version derived from ``fraud/<parent>``, registered on first use."""
    from mlpipe import registry

    (summary,) = [m for m in registry.list_models(settings) if m.name == "fraud"]
    for version in range(3, int(summary.latest_version or 0) + 1):
        tags = registry.show(settings, f"fraud/{version}").tags
        if (
            tags.get("mlpipe.parent_version") == f"fraud/{parent}"
            and tags.get("mlpipe.flavor") == "onnx"
        ):
            return str(version)
    evaluation = settings.home / f"onnx-eval-{parent}.parquet"
    registry.load_reference(settings, "fraud", parent).to_parquet(evaluation)
    return registry.register_onnx(settings, "fraud", dataset=evaluation, parent=parent).version


def v1_features(home: Path, customers: int = CUSTOMERS) -> tuple[list[str], np.ndarray]:
    """(feature names of fraud v1, one row per customer 1..N with amount left as NaN).

    Read once from the home's online store and kept next to it
    (``bench-v1-features.npz``): loading the model and Feast to read them again
    took ~25 s of every run here. The home's features never change after it is
    built, and ``--rebuild`` removes the file with the home.
    """
    cache = home / "bench-v1-features.npz"
    if cache.is_file():
        with np.load(cache) as saved:
            if saved["table"].shape[0] == customers:
                return [str(n) for n in saved["names"]], saved["table"]
    names, table = _read_v1_features(home, customers)
    tmp = cache.with_name(cache.name + ".tmp.npz")
    np.savez(tmp, names=np.array(names), table=table)
    tmp.replace(cache)
    return names, table


def _read_v1_features(home: Path, customers: int) -> tuple[list[str], np.ndarray]:
    from mlpipe import registry
    from mlpipe.config import load_settings
    from mlpipe.features import OnlineFeatures

    settings = load_settings(home=home)
    model = registry.load_verified(settings, "fraud", "1")
    online = OnlineFeatures(settings, model.feature_service or "fraud_v1", cache_size=0)
    rows = online.get_many([{"customer_id": i} for i in range(1, customers + 1)])
    table = np.full((customers, len(model.features)), np.nan)
    for r, row in enumerate(rows):
        for c, name in enumerate(model.features):
            if name in row.values:
                table[r, c] = float(row.values[name])
    return list(model.features), table


class Cases:
    """A deterministic stream of (customer id, amount); request ``i`` is the same for everyone."""

    def __init__(self, customers: int = CUSTOMERS, seed: int = 5, size: int = 8192) -> None:
        rng = np.random.default_rng(seed)
        self.customers = rng.integers(1, customers + 1, size).tolist()
        self.amounts = np.round(rng.lognormal(4.0, 1.0, size), 2).tolist()
        self.size = size

    def case(self, i: int) -> tuple[int, float]:
        j = i % self.size
        # a new cent offset per lap keeps every request's feature vector unique
        return self.customers[j], round(self.amounts[j] + (i // self.size) * 0.01, 2)


def mlpipe_bodies(cases: Cases) -> BodyFactory:
    def body(i: int) -> bytes:
        cid, amount = cases.case(i)
        return b'{"model":"fraud","entity":{"customer_id":%d},"features":{"amount":%s}}' % (
            cid,
            repr(amount).encode(),
        )

    return body


def _row(cases: Cases, names: list[str], table: np.ndarray, i: int) -> list[float]:
    cid, amount = cases.case(i)
    row = table[cid - 1].tolist()
    row[names.index("amount")] = amount
    return [0.0 if v != v else v for v in row]  # NaN (missing) → 0.0; JSON has no NaN


def bentoml_bodies(cases: Cases, names: list[str], table: np.ndarray) -> BodyFactory:
    def body(i: int) -> bytes:
        return json.dumps([_row(cases, names, table, i)]).encode()

    return body


def mlflow_bodies(cases: Cases, names: list[str], table: np.ndarray) -> BodyFactory:
    def body(i: int) -> bytes:
        payload: dict[str, Any] = {
            "dataframe_split": {"columns": names, "data": [_row(cases, names, table, i)]}
        }
        return json.dumps(payload).encode()

    return body
