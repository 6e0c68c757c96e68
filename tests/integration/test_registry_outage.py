"""Registry unreachable → a serving process keeps serving the generation it has loaded.

A real :class:`GenerationLoader` (real registry, real control plane) loads
generation 1 of ``fraud``. Generation 2 is deployed, then the registry goes
away before the loader polls: the embedded registry's files vanish (its
SQLite database and artifact root moved off, as when their volume is
unmounted). The poll refuses generation 2 with one error line and a
``refused`` count, generation 1 keeps scoring, polls within ``retry_after_s``
do not retry, and once the registry is back and ``retry_after_s`` has passed
generation 2 is loaded. Where PostgreSQL runs, the same story against the
production profile's MLflow tracking server, stopped and started again.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from mlpipe import deployments, registry
from mlpipe.config import Settings, load_settings
from mlpipe.serving import GenerationLoader, serving_metrics
from mlpipe.serving import _generations as generations
from tests.conftest import train_toy_model

pytestmark = pytest.mark.integration

RETRY_AFTER_S = 30.0


def _scores(loader: GenerationLoader, version: str, rows: np.ndarray) -> np.ndarray:
    return loader.models["fraud"].versions[version].model.predict_scores(rows)


def _count(metrics, result: str) -> float:  # type: ignore[no-untyped-def]
    return float(metrics.reloads.labels("fraud", result)._value.get())


class _Clock:
    """``time.monotonic`` for the loader, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _check_outage_is_survived(
    settings: Settings,
    rows: np.ndarray,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    outage,  # type: ignore[no-untyped-def]
) -> None:
    """Generation 1 loaded, generation 2 deployed, then the poll runs inside ``outage()``."""
    clock = _Clock()
    monkeypatch.setattr(generations, "time", clock)  # retry_after_s runs on this clock
    deployments.deploy(settings, "fraud", "1")
    metrics = serving_metrics(CollectorRegistry())
    loader = GenerationLoader(settings, metrics=metrics, retry_after_s=RETRY_AFTER_S)
    loader.refresh()
    assert loader.ready and loader.models["fraud"].generation == 1
    before = _scores(loader, "1", rows)
    assert deployments.deploy(settings, "fraud", "2").generation == 2

    with outage(), caplog.at_level(logging.INFO, logger="mlpipe.serving"):
        started = time.monotonic()
        loader.refresh()
        refused_after_s = time.monotonic() - started
        clock.now += RETRY_AFTER_S / 2
        served = loader.models["fraud"]
        assert (served.generation, served.router.champion) == (1, "1")
        np.testing.assert_array_equal(_scores(loader, "1", rows), before)
        refusals = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(refusals) == 1, caplog.text
        assert "refused generation 2 of fraud: StoreUnavailable" in refusals[0].getMessage()
        assert "(generation 1 keeps serving)" in refusals[0].getMessage()
        assert (_count(metrics, "refused"), _count(metrics, "loaded")) == (1, 1)
        loader.refresh()  # within retry_after_s: not tried again, not counted again
        assert _count(metrics, "refused") == 1 and loader.models["fraud"].generation == 1
    assert refused_after_s < 30, f"the refused poll took {refused_after_s:.0f} s"

    loader.refresh()  # the registry is back, but retry_after_s has not passed yet
    assert loader.models["fraud"].generation == 1
    clock.now += RETRY_AFTER_S / 2
    loader.refresh()
    assert loader.models["fraud"].generation == 2
    assert (_count(metrics, "refused"), _count(metrics, "loaded")) == (1, 2)
    assert set(loader.models["fraud"].versions) == {"2"}
    assert _scores(loader, "2", rows).shape == (len(rows),)


def _rows(home: Path) -> np.ndarray:
    frame = pd.read_parquet(home / "inputs" / "train-1.parquet")
    return frame[["amount", "txn_count_7d"]].head(50).to_numpy()


def _register_two(settings: Settings, home: Path) -> None:
    for seed in (1, 2):
        model_path, data_path = train_toy_model(home / "inputs", seed=seed)
        registry.register(settings, "fraud", dataset=data_path, model_path=model_path)


def test_embedded_registry_gone_keeps_generation_1_serving(
    home: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not the shared registry template: its versions' artifacts live in the template's
    # home (MLflow records absolute URIs), and this test takes this home's files away.
    settings = load_settings()
    _register_two(settings, home)
    state = home / ".mlpipe"
    away = home / "unmounted"

    @contextmanager
    def files_gone() -> Iterator[None]:
        away.mkdir()
        for name in ("mlflow.db", "artifacts"):
            (state / name).rename(away / name)
        try:
            yield
        finally:
            (state / "mlflow.db").unlink(missing_ok=True)  # an empty one SQLite made meanwhile
            for name in ("mlflow.db", "artifacts"):
                if (state / name).is_dir():
                    shutil.rmtree(state / name)
                (away / name).rename(state / name)

    _check_outage_is_survived(settings, _rows(home), caplog, monkeypatch, files_gone)


@pytest.mark.postgres
def test_prod_registry_server_down_keeps_generation_1_serving(
    home: Path,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.integration.prod_services import MlflowServer, postgres_database

    # MLflow's client retries a refused connection for minutes by default; a serving
    # process that sets these fails a poll in seconds (see docs/registry.md).
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    tmp = tmp_path_factory.mktemp("outage-prod")
    with postgres_database() as backend:
        server = MlflowServer(backend, tmp / "artifacts", tmp / "server.log")
        try:
            server.start()
            settings = load_settings(
                registry_uri=server.url, artifact_root="mlflow-artifacts:/mlpipe"
            )
            _register_two(settings, home)

            @contextmanager
            def server_down() -> Iterator[None]:
                server.stop()
                try:
                    yield
                finally:
                    server.start()

            _check_outage_is_survived(settings, _rows(home), caplog, monkeypatch, server_down)
        finally:
            server.stop()


def test_a_record_that_cannot_be_read_waits_for_retry_after_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal is remembered under the polled generation even when the record read
    itself fails, so a broken read is not retried (and logged, and counted) every poll."""
    from mlpipe.errors import StoreUnavailable

    clock = _Clock()
    monkeypatch.setattr(generations, "time", clock)
    reads: list[int] = []

    def current(_settings: Settings, _name: str) -> object:
        reads.append(1)
        raise StoreUnavailable("control plane unavailable: disk I/O error")

    metrics = serving_metrics(CollectorRegistry())
    loader = GenerationLoader(
        load_settings(home=tmp_path),
        metrics=metrics,
        generations=lambda _s: {"fraud": 3},
        current=current,
        retry_after_s=RETRY_AFTER_S,
    )
    with caplog.at_level(logging.ERROR, logger="mlpipe.serving"):
        for _ in range(3):
            loader.refresh()
    assert (len(reads), _count(metrics, "refused")) == (1, 1)
    assert "refused generation 3 of fraud: StoreUnavailable" in caplog.text
    clock.now += RETRY_AFTER_S
    loader.refresh()
    assert len(reads) == 2 and set(loader.unloadable()) == {"fraud"}
