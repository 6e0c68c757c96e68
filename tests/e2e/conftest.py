"""One real scoring server (through :func:`mlpipe.serving.server_command`) per module.

The project home is a temp dir with a small scikit-learn model registered in
four versions; the server's process group is killed in teardown, and the
teardown checks that nothing of it is left.

The modules that serve one model (:func:`deploy_one`) share it: ``fraud`` v1 is
registered once per session into a template home (:func:`fraud_v1`) whose registry
each module copies (a fresh registry database costs seconds of migrations).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from mlpipe.serving import ScoringProcess, free_port

FEATURES = ["amount", "n_items"]


def _train(path: Path, seed: int) -> Path:
    import joblib
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"amount": rng.gamma(2, 50, 2000), "n_items": rng.integers(1, 9, 2000)})
    logit = (frame["amount"] - 100) / 40 + (frame["n_items"] - 4) * (0.3 + seed / 10)
    frame["label"] = (rng.random(2000) < 1 / (1 + np.exp(-logit))).astype(int)
    model = LogisticRegression(C=0.5 + seed).fit(frame[FEATURES], frame["label"])
    data = path / f"train{seed}.csv"
    frame.to_csv(data, index=False)
    joblib.dump(model, path / f"model{seed}.joblib")
    return data


@pytest.fixture(scope="session")
def fraud_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose registry holds one model (seed 1) as ``fraud`` v1, nothing deployed."""
    from mlpipe import registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("fraud-v1")
    data = _train(home, 1)
    registry.register(
        load_settings(home=home), "fraud", dataset=data, model_path=home / "model1.joblib"
    )
    return home


def deploy_one(settings: Any, template: Path | None) -> str:
    """``fraud`` v1 (seed 1) deployed as the champion in the fresh home of ``settings``;
    its version. With ``template`` (:func:`fraud_v1`) the template's registry is copied in;
    its artifact URIs point into the template (MLflow records absolute URIs), and so would
    those of any version registered into the copy: a module that registers more, or takes
    artifacts away, passes None and registers its own."""
    from mlpipe import deployments, registry

    home = settings.home
    if template is None:
        data = _train(home, 1)
        registry.register(settings, "fraud", dataset=data, model_path=home / "model1.joblib")
    else:
        shutil.copytree(template / ".mlpipe", home / ".mlpipe")
    deployments.deploy(settings, "fraud", "1")
    return "1"


def _skops_files(home: Path) -> set[Path]:
    return set(home.rglob("model.skops"))


class Server(ScoringProcess):
    """The module's server: one worker, a long batch window and fast reloads for a loaded CI box."""

    def __init__(self, home: Path, settings: Any) -> None:
        env = {
            "MLPIPE_SERVING__MAX_LATENCY_MS": "2000",
            "MLPIPE_SERVING__RELOAD_INTERVAL_S": "0.5",
            "MLPIPE_PREDLOG__FSYNC_INTERVAL_S": "0.1",
        }
        log_path = home / "server.log"
        super().__init__(settings, port=free_port(), workers=1, log_path=log_path, env=env)
        self.settings = settings

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def post(self, body: Any, **kw: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/predict", json=body, timeout=30, **kw)

    @contextmanager
    def running(self) -> Iterator[Server]:
        """Started; on exit stopped, and no process of its group or under it left behind
        (BentoML's workers run in sessions of their own, outside the group)."""
        from mlpipe.serving._process_tree import descendants, is_running

        try:
            self.start()
            yield self
        finally:
            tree = descendants(self.pid)  # read while the server lives
            self.stop()
            leftover = subprocess.run(
                ["pgrep", "-g", str(self.pid)], capture_output=True, text=True
            ).stdout.split()
            leftover += [str(p.pid) for p in tree if is_running(p)]
            assert not leftover, f"stray server processes: {leftover}"


def predlog_rows(settings: Any) -> list[Any]:
    from mlpipe.predlog import DECODER

    rows = []
    for f in sorted(settings.predlog_path.glob("*.jsonl*")):
        for line in f.read_bytes().splitlines():
            try:
                rows.append(DECODER.decode(line))
            except Exception:  # a half-written last line
                pass
    return rows


async def _fire(url: str, bodies: list[dict[str, Any]], concurrency: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(body: dict[str, Any]) -> httpx.Response:
            async with sem:
                return await client.post("/predict", json=body)

        return await asyncio.gather(*(one(b) for b in bodies))


def fire(url: str, bodies: list[dict[str, Any]], concurrency: int = 32) -> list[httpx.Response]:
    """Send every body concurrently; responses in the same order."""
    return asyncio.run(_fire(url, bodies, concurrency))


def wait_generation(server: Server, generation: int, timeout: float = 20) -> None:
    body = {
        "model": "fraud",
        "entity": {"customer_id": -1},
        "features": {"amount": 1, "n_items": 1},
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = server.post(body)
        if r.status_code == 200 and r.json()["generation"] >= generation:
            return
        time.sleep(0.2)
    raise TimeoutError(f"server never reached generation {generation}:\n{server.log()[-2000:]}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    from mlpipe import deployments, registry
    from mlpipe.config import load_settings

    home = tmp_path_factory.mktemp("mlpipe-home")
    settings = load_settings(home=home)
    versions = {}
    for seed in (1, 2, 3):
        data = _train(home, seed)
        model_path = home / f"model{seed}.joblib"
        info = registry.register(settings, "fraud", dataset=data, model_path=model_path)
        versions[seed] = info.version
    before = _skops_files(home)
    data = _train(home, 4)
    tampered = registry.register(settings, "fraud", dataset=data, model_path=home / "model4.joblib")
    (artifact,) = _skops_files(home) - before
    deployments.deploy(settings, "fraud", versions[1])
    with Server(home, settings).running() as server:
        models = {v: registry.load_verified(settings, "fraud", v) for v in versions.values()}
        yield SimpleNamespace(
            home=home,
            settings=settings,
            server=server,
            versions=versions,
            models=models,
            tampered_version=tampered.version,
            tampered_artifact=artifact,
        )
