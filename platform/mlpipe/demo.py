"""``mlpipe demo``: the whole loop on a fresh embedded stack, narrated through a callback.

The demo builds its own home (``.mlpipe-demo/`` under the project home, wiped
at the start) with a copy of the feature repository, so it never touches the
user's stores and can run again and again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlpipe.config import Settings

MODEL = "fraud"
DEMO_DIR = ".mlpipe-demo"


@dataclass(frozen=True)
class DemoEvent:
    """One thing the demo did: a title, and optionally a record or a table to show."""

    title: str
    detail: str = ""
    deployment: Any = None
    table: tuple[list[str], list[list[Any]]] | None = None


Narrate = Callable[[DemoEvent], None]


def demo_settings(settings: Settings) -> Settings:
    """Settings for a fresh demo home beside the project."""
    from mlpipe.config import load_settings

    home = settings.home / DEMO_DIR
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    shutil.copytree(
        settings.feature_repo_path, home / "feature_repo", ignore=shutil.ignore_patterns("data")
    )
    return load_settings(home=home, serving=settings.serving, monitor=settings.monitor)


def run(settings: Settings, narrate: Narrate, *, customers: int = 500, days: int = 30) -> Settings:
    """Build, register and walk a deployment through its lifecycle; returns the demo settings."""
    from mlpipe import deployments, stack

    demo = demo_settings(settings)
    stack.init(demo)
    narrate(DemoEvent("local stack", f"created in {demo.home}"))
    datasets = build_datasets(demo, narrate, customers=customers, days=days)
    versions = train_and_register(demo, datasets, narrate)
    v1, v2 = versions
    steps: list[tuple[str, Callable[[], Any]]] = [
        (f"deploy v{v1} as champion", lambda: deployments.deploy(demo, MODEL, v1, reason="demo")),
        (
            f"deploy v{v2} as 10 % canary",
            lambda: deployments.deploy(demo, MODEL, v2, canary=10, reason="demo"),
        ),
        (f"promote v{v2}", lambda: deployments.promote(demo, MODEL, reason="demo")),
        ("roll back", lambda: deployments.rollback(demo, MODEL, reason="demo")),
    ]
    for title, change in steps:
        narrate(DemoEvent(title, deployment=change()))
    return demo


def build_datasets(
    settings: Settings, narrate: Narrate, *, customers: int, days: int
) -> dict[str, Path]:
    """Generate data, apply and materialize Feast, and build one training set per service."""
    from mlpipe import features

    data = features.generate(
        settings.feature_repo_path / "data", customers=customers, days=days, seed=7
    )
    narrate(
        DemoEvent(
            "generated transactions",
            f"{data.transaction_count} transactions, {data.customers} customers, "
            f"fraud rate {data.fraud_rate:.1%}",
        )
    )
    applied = features.apply(settings)
    features.materialize(settings)
    narrate(
        DemoEvent(
            "feature store ready",
            f"applied {', '.join(applied.feature_views)}; materialized to the online store",
        )
    )
    import pandas as pd

    entities = pd.read_parquet(data.transactions)
    out = {}
    for service in ("fraud_v1", "fraud_v2"):
        frame = features.training_set(settings, service, entities)
        out[service] = features.write_dataset(
            frame, settings.home / "datasets" / f"{service}.parquet"
        )
    narrate(
        DemoEvent(
            "point-in-time training sets",
            ", ".join(f"{s}: {len(entities)} rows" for s in out),
        )
    )
    return out


def train_and_register(
    settings: Settings, datasets: dict[str, Path], narrate: Narrate
) -> list[str]:
    """Train v1 (fraud_v1, small) and v2 (fraud_v2, larger); register both with lineage."""
    import joblib
    import pandas as pd

    from mlpipe import features, registry, training

    versions = []
    rows = []
    for service, n_estimators in (("fraud_v1", 40), ("fraud_v2", 150)):
        spec = features.describe_service(settings, service)
        frame = pd.read_parquet(datasets[service])
        inputs = [*spec.features, "amount"]
        trained = training.train_lightgbm(frame, inputs, "is_fraud", n_estimators=n_estimators)
        model_path = settings.state_path / f"{service}.joblib"
        joblib.dump(trained.model, model_path)
        info = registry.register(
            settings,
            MODEL,
            dataset=datasets[service],
            model_path=model_path,
            feature_service=service,
            label="is_fraud",
            metrics=trained.metrics,
        )
        versions.append(info.version)
        rows.append(
            [
                info.version,
                service,
                f"{trained.metrics['auc']:.3f}",
                info.tags["mlpipe.data_sha256"][:12],
                info.tags["mlpipe.artifact_sha256"][:12],
            ]
        )
    narrate(
        DemoEvent(
            "registered in MLflow",
            table=(["version", "feature service", "auc", "data sha256", "artifact sha256"], rows),
        )
    )
    return versions


__all__ = ["DEMO_DIR", "MODEL", "DemoEvent", "run"]
