"""``mlpipe demo``: the whole loop on a fresh embedded stack, narrated through a callback.

The demo builds its own home (``.mlpipe-demo/`` under the project home, wiped
at the start) with a copy of the fraud feature repository the package carries
(``feature_repo/`` of the source tree), so it never touches the user's stores,
runs from an installed wheel in any directory, and can run again and again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from mlpipe import deployments, features, monitoring, registry, stack
from mlpipe.config import Settings, load_settings
from mlpipe.demo._traffic import TrafficResult, fraud_requests, send, wait_for_generation
from mlpipe.demo._training import WARMUP_DAYS, train_lightgbm, without_warmup
from mlpipe.demo._transactions import generate
from mlpipe.serving import ScoringProcess, free_port

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
    """Settings for a fresh demo home beside the project, with the packaged feature repository."""
    home = settings.home / DEMO_DIR
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    template = Path(str(files("mlpipe").joinpath("_bundled", "feature_repo")))
    shutil.copytree(template, home / "feature_repo", ignore=shutil.ignore_patterns("data"))
    return load_settings(home=home, serving=settings.serving, monitor=settings.monitor)


def run(
    settings: Settings,
    narrate: Narrate,
    *,
    customers: int = 500,
    days: int = 30,
    serve: bool = True,
    requests_per_phase: int = 600,
) -> Settings:
    """Build, register and walk a deployment through its lifecycle; returns the demo settings.

    With ``serve`` the loop runs under real traffic: a scoring service in the
    background, traffic before and after each change, drifted traffic at the end,
    and a drift report over everything the service logged.
    """
    demo = demo_settings(settings)
    stack.init(demo)
    narrate(DemoEvent("local stack", f"created in {demo.home}"))
    datasets = build_datasets(demo, narrate, customers=customers, days=days)
    v1, v2 = train_and_register(demo, datasets, narrate)
    changes: list[tuple[str, Callable[[], Any]]] = [
        (f"deploy v{v1} as champion", lambda: deployments.deploy(demo, MODEL, v1, reason="demo")),
        (
            f"deploy v{v2} as 20 % canary",
            lambda: deployments.deploy(demo, MODEL, v2, canary=20, reason="demo"),
        ),
        (
            f"promote v{v2}",
            # the demo shows the loop, not a canary analysis (issue 22): promote is forced
            lambda: deployments.promote(demo, MODEL, reason="demo", force=True),
        ),
        ("roll back", lambda: deployments.rollback(demo, MODEL, reason="demo")),
    ]
    if not serve:
        for title, change in changes:
            narrate(DemoEvent(title, deployment=change()))
        return demo
    _run_with_traffic(demo, narrate, changes, requests_per_phase)
    return demo


def _run_with_traffic(
    demo: Settings,
    narrate: Narrate,
    changes: list[tuple[str, Callable[[], Any]]],
    n: int,
) -> None:
    title, first = changes[0]
    narrate(DemoEvent(title, deployment=first()))
    transactions = demo.feature_repo_path / "data" / "transactions.parquet"
    results: list[tuple[str, TrafficResult]] = []
    with ScoringProcess(demo, port=free_port(), workers=1) as server:
        narrate(DemoEvent("scoring service ready", server.url))
        for seed, (title, change) in enumerate(changes[1:]):
            results.append((f"before: {title}", _phase(server.url, transactions, n, seed)))
            record = change()
            narrate(DemoEvent(title, deployment=record))
            probe = fraud_requests(transactions, 1, seed=99)[0]
            wait_for_generation(server.url, probe, record.generation)
        results.append(("after rollback", _phase(server.url, transactions, n, 10)))
        drifted = fraud_requests(transactions, 2 * n, seed=11, amount_factor=4.0)
        results.append(("drifted: amount × 4", send(server.url, drifted, concurrency=8)))
    narrate(DemoEvent("traffic seen by the client", table=_traffic_table(results)))
    _drift_report(demo, narrate)


def _phase(url: str, transactions: Path, n: int, seed: int) -> Any:
    return send(url, fraud_requests(transactions, n, seed=seed), concurrency=8)


def _traffic_table(results: list[tuple[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    columns = ["phase", "ok", "errors", "per arm", "versions", "p50 ms", "p99 ms"]
    rows = [
        [
            phase,
            r.ok,
            sum(r.errors.values()),
            " ".join(f"{arm}={count}" for arm, count in sorted(r.by_arm.items())),
            " ".join(f"v{v}={count}" for v, count in sorted(r.by_version.items())),
            f"{r.percentile(50):.1f}",
            f"{r.percentile(99):.1f}",
        ]
        for phase, r in results
    ]
    return columns, rows


def _drift_report(demo: Settings, narrate: Narrate) -> None:
    verdict = monitoring.drift(demo, MODEL, window="1h", history=deployments.history_feed(demo))
    rows = [
        [arm.arm, arm.version, ", ".join(arm.drifted_features) or "none"] for arm in verdict.arms
    ]
    narrate(
        DemoEvent(
            f"drift report: {verdict.verdict}",
            f"{verdict.report_dir}",
            table=(["arm", "version", "drifted features"], rows),
        )
    )


def build_datasets(
    settings: Settings, narrate: Narrate, *, customers: int, days: int
) -> dict[str, Path]:
    """Generate data, apply and materialize Feast, and build one training set per service."""
    data = generate(settings.feature_repo_path / "data", customers=customers, days=days, seed=7)
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
        # a short history (the tests' few days) keeps its later two thirds
        warmup = min(WARMUP_DAYS, days // 3)
        frame = without_warmup(features.training_set(settings, service, entities), days=warmup)
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

    versions = []
    rows = []
    for service, n_estimators in (("fraud_v1", 40), ("fraud_v2", 150)):
        spec = features.describe_service(settings, service)
        frame = pd.read_parquet(datasets[service])
        inputs = [*spec.features, "amount"]
        trained = train_lightgbm(frame, inputs, "is_fraud", n_estimators=n_estimators)
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
