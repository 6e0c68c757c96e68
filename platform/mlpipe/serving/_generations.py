"""The models a worker serves: the versions of each model's current deployment generation.

A :class:`GenerationLoader` polls the control plane (``deployments.generations``,
one cheap query) every ``reload_interval_s``. When a model's generation
changes it loads every version the new record names (reusing those already
loaded), each verified against its registry sha256, and only then swaps the
model's :class:`ServingModel` in one reference assignment. Batches in flight
keep the snapshot they started with. A version that fails to load (tampered
artifact, registry down, a package the model needs missing) is refused with one
error log line, and the previous generation keeps serving; the refused
generation is retried only after ``retry_after_s``.

A refused model with no previous generation to serve (deployed while the worker
ran, or the worker restarted) is *unloadable*: its :class:`LoadFailure` says
why, so requests for it are answered 503 with that reason, not 404, and
readiness names it, until a later generation loads or it is undeployed. The
worker's other models are served meanwhile: the loader is ready once every
deployed model was loaded or refused.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mlpipe import deployments, features, registry
from mlpipe.errors import MlpipeError
from mlpipe.routing import Router
from mlpipe.serving._vectors import InputSlot, input_slots
from mlpipe.tasks import TaskSpec

if TYPE_CHECKING:
    from mlpipe.config import Settings
    from mlpipe.serving._metrics import ServingMetrics

logger = logging.getLogger("mlpipe.serving")
# Logged once by each worker when every deployed model is loaded (ScoringProcess counts it).
READY_LOG = "ready: serving"


@dataclass(frozen=True)
class VersionPlan:
    """One loaded version and where each of its inputs comes from."""

    model: Any  # mlpipe.registry.LoadedModel
    spec: Any | None  # mlpipe.features.FeatureServiceSpec, or None: all inputs from the request
    store_features: frozenset[str]
    request_features: tuple[str, ...]
    # The version's typed inputs when it is scored on a DataFrame (string inputs, columns
    # selected by name); None for the float-array path. Read once, here.
    frame_inputs: Any | None = field(init=False, default=None)
    # What the version predicts and how its output reads (binary at the model's threshold
    # for a model that names no task). Read once, here.
    task: TaskSpec = field(init=False, default_factory=TaskSpec)
    # The version's typed inputs on either path (None: registered before them), and those
    # it scores a missing value for (none for a version registered before they were
    # probed). Read once, here.
    inputs: Any | None = field(init=False, default=None)
    nullable: frozenset[str] = field(init=False, default=frozenset())
    # The inputs in scoring order, each with how a value becomes the model's
    # (:func:`~mlpipe.serving._vectors.build_vector`). Read once, here.
    vector_slots: tuple[InputSlot, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame_inputs", getattr(self.model, "frame_inputs", None))
        object.__setattr__(self, "vector_slots", input_slots(self.model, self.frame_inputs))
        inputs = getattr(self.model, "input_schema", None)
        object.__setattr__(self, "inputs", inputs)
        if inputs is not None:
            object.__setattr__(self, "nullable", inputs.nullable_names)
        object.__setattr__(self, "task", _task_of(self.model))

    @property
    def version(self) -> str:
        return str(self.model.version)


@dataclass(frozen=True)
class LoadFailure:
    """Why a deployed model's current generation could not be loaded."""

    generation: int
    cause: str  # "ExceptionClass: message", cut to MAX_CAUSE characters

    def message(self, name: str) -> str:
        """What a request for ``name`` and readiness say (the cause is the operator's to fix)."""
        return (
            f"model {name!r} is deployed but cannot be loaded "
            f"(generation {self.generation}): {self.cause}"
        )


MAX_CAUSE = 300


@dataclass(frozen=True)
class ServingModel:
    """One model at one deployment generation: its router and its loaded versions."""

    name: str
    generation: int
    router: Router
    versions: Mapping[str, VersionPlan]

    @property
    def task(self) -> TaskSpec:
        """The champion's task: what the model's Open Inference Protocol outputs follow."""
        return self.versions[self.router.champion].task

    def primary_versions(self) -> list[VersionPlan]:
        """The versions that answer requests (champion and, if set, canary)."""
        names = [self.router.champion]
        if self.router.canary is not None and self.router.canary_weight > 0:
            names.append(self.router.canary)
        return [self.versions[v] for v in names]


class GenerationLoader:
    """Keeps ``models`` equal to the current generation of every deployed model."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: ServingMetrics | None = None,
        load_model: Callable[[Settings, str, str], Any] | None = None,
        describe_service: Callable[[Settings, str], Any] | None = None,
        generations: Callable[[Settings], dict[str, int]] | None = None,
        current: Callable[[Settings, str], Any] | None = None,
        retry_after_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._load_model = load_model or registry.load_verified
        self._describe = describe_service or features.describe_service
        self._generations = generations or deployments.generations
        self._current = current or deployments.current
        self.retry_after_s = retry_after_s
        self.models: dict[str, ServingModel] = {}
        # replaced whole on each poll, never changed in place: request threads read it
        self.failures: Mapping[str, LoadFailure] = {}
        self._announced = False
        self._refused: dict[tuple[str, int], float] = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._specs: dict[str, Any] = {}

    @property
    def ready(self) -> bool:
        """True once a poll found every deployed model loaded or refused (:meth:`unloadable`)."""
        return self._ready.is_set()

    def unloadable(self) -> dict[str, LoadFailure]:
        """The deployed models with nothing to serve because their generation was refused.

        A model whose newer generation was refused while an older one still serves is
        not here: it answers (each response names the version), and its failure is in
        ``failures``, the log and ``mlpipe_generation_loads_total{result="refused"}``.
        """
        models = self.models
        return {name: f for name, f in self.failures.items() if name not in models}

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def start(self) -> None:
        """Load now and then follow the control plane from a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="mlpipe-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def refresh(self) -> None:
        """One poll: load and swap every model whose generation changed."""
        try:
            wanted = self._generations(self.settings)
        except MlpipeError as exc:
            logger.warning("deployment poll failed (still serving what is loaded): %s", exc)
            return
        models = dict(self.models)
        failures = {name: f for name, f in self.failures.items() if name in wanted}
        for name in [n for n in models if n not in wanted]:
            logger.info("%s is no longer deployed; stopped serving it", name)
            del models[name]
        for name, generation in wanted.items():
            have = models.get(name)
            if have is not None and have.generation == generation:
                continue
            refused_at = self._refused.get((name, generation))
            if refused_at is not None and time.monotonic() - refused_at < self.retry_after_s:
                continue
            loaded = self._load(name, generation, have)
            if isinstance(loaded, LoadFailure):
                failures[name] = loaded
                continue
            failures.pop(name, None)
            if loaded is not None:
                models[name] = loaded
        if any(self.models.get(name) is not m for name, m in models.items()):
            _freeze_heap()
        self.models, self.failures = models, failures
        self._settle(wanted)

    def _settle(self, wanted: Mapping[str, int]) -> None:
        """Ready once every deployed model was tried; ``READY_LOG`` once all of them loaded."""
        if all(name in self.models or name in self.failures for name in wanted):
            self._ready.set()
        if not self._announced and all(name in self.models for name in wanted):
            self._announced = True
            logger.info("%s %s", READY_LOG, _describe(self.models))

    def _load(
        self, name: str, wanted: int, have: ServingModel | None
    ) -> ServingModel | LoadFailure | None:
        """The model at its current generation, why it was refused (``have`` keeps
        serving), or None when its record names nothing to serve.

        A refusal is remembered under the generation the record names (or, when the
        record itself could not be read, the one the poll wanted), so the next polls
        skip it until ``retry_after_s`` has passed, rather than retrying every poll.
        """
        record = None
        try:
            record = self._current(self.settings, name)
            if record is None or record.champion is None:
                return None
            router = Router.for_deployment(record)
            versions: dict[str, VersionPlan] = {}
            for version in record.arms().values():
                if have is not None and version in have.versions:
                    versions[version] = have.versions[version]
                else:
                    versions[version] = self._plan(self._load_model(self.settings, name, version))
        except Exception as exc:  # any failure keeps the old generation serving
            generation = record.generation if record is not None else wanted
            self._refused[(name, generation)] = time.monotonic()
            if self.metrics:
                self.metrics.reloads.labels(name, "refused").inc()
            keep = f"generation {have.generation} keeps serving" if have else "nothing to serve"
            logger.error(
                "refused generation %s of %s: %s: %s (%s)",
                generation,
                name,
                type(exc).__name__,
                exc,
                keep,
            )
            return LoadFailure(generation, f"{type(exc).__name__}: {exc}"[:MAX_CAUSE])
        if self.metrics:
            self.metrics.reloads.labels(name, "loaded").inc()
        logger.info(
            "loaded %s generation %d: %s",
            name,
            record.generation,
            ", ".join(f"{a}={v}" for a, v in record.arms().items()),
        )
        return ServingModel(name, record.generation, router, versions)

    def _plan(self, loaded: Any) -> VersionPlan:
        spec = None
        if loaded.feature_service:
            spec = self._specs.get(loaded.feature_service)
            if spec is None:
                spec = self._describe(self.settings, loaded.feature_service)
                self._specs[loaded.feature_service] = spec
        store = frozenset(spec.features) & frozenset(loaded.features) if spec else frozenset()
        request = tuple(f for f in loaded.features if f not in store)
        return VersionPlan(loaded, spec, store, request)

    def _run(self) -> None:
        interval = self.settings.serving.reload_interval_s
        while True:
            try:
                self.refresh()
            except Exception:  # the poller must outlive any one bad poll
                logger.exception("deployment poll crashed; retrying")
            if self._stop.wait(interval):
                return


def _task_of(model: Any) -> TaskSpec:
    """The loaded version's task, its binary cut at the version's own ``threshold``."""
    task = getattr(model, "task", None) or TaskSpec()
    threshold = getattr(model, "threshold", task.threshold)
    if task.task == "binary" and task.threshold != threshold:
        task = replace(task, threshold=float(threshold))
    return task


def _freeze_heap() -> None:
    """Take every object alive now out of the cycle collector's scans (``gc.freeze``).

    A worker holds ~0.5 M long-lived objects (MLflow, Feast, BentoML, the models).
    A full collection walks them all, ~250 ms here, and under load one came every
    few seconds: the stalls that set the p99 at 32 connections (decision 006).
    Objects created later are collected as usual; frozen ones are still freed by
    reference counting, so a version dropped later goes unless it sits in a cycle.
    Called after every load, so a new version joins the frozen heap too.
    """
    gc.freeze()


def _describe(models: Mapping[str, ServingModel]) -> str:
    return ", ".join(f"{m.name}@{m.generation}" for m in models.values()) or "no models"


__all__ = ["GenerationLoader", "LoadFailure", "ServingModel", "VersionPlan"]
