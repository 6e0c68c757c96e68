"""``mlpipe register`` and ``mlpipe models list|show``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

if TYPE_CHECKING:
    from mlpipe.registry import VersionInfo
    from mlpipe.tasks import Task

models_app = typer.Typer(help="Read the model registry.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("register")(register_version)
    app.add_typer(models_app, name="models")


def _parse_metrics(pairs: list[str]) -> dict[str, float]:
    from mlpipe.errors import InvalidInput

    metrics = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            metrics[key] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise InvalidInput(f"--metric expects KEY=NUMBER, got {pair!r}")
    return metrics


def _parse_task(task: str | None) -> Task | None:
    from mlpipe.errors import InvalidInput
    from mlpipe.tasks import TASKS

    if task is None:
        return None
    for known in TASKS:
        if task == known:
            return known
    raise InvalidInput(f"--task is one of {', '.join(TASKS)}, got {task!r}")


def register_version(
    name: str = typer.Argument(..., help="Registered model name."),
    model: Path | None = typer.Option(None, "--model", help="Model file or MLflow dir."),
    run: str | None = typer.Option(None, "--run", help="MLflow run id holding 'model'."),
    dataset: Path = typer.Option(..., "--dataset", help="Training set (CSV/Parquet)."),
    eval_dataset: Path | None = typer.Option(
        None,
        "--eval-dataset",
        help="Holdout (its inputs and the label): the version's metrics are measured on it.",
    ),
    feature_service: str | None = typer.Option(None, "--feature-service"),
    label: str = typer.Option("label", "--label", help="Label column in the dataset."),
    features: str | None = typer.Option(
        None, "--features", help="a,b,c: the model's input columns (default: all but the label)."
    ),
    metric: list[str] = typer.Option([], "--metric", help="KEY=VALUE, repeatable."),
    threshold: float | None = typer.Option(
        None, "--threshold", help="Binary only: P(class 1) at or above → label 1 (0.5)."
    ),
    task: str | None = typer.Option(
        None,
        "--task",
        help="binary|multiclass|regression: what the model predicts, where it cannot tell.",
    ),
    trust: list[str] = typer.Option(
        [],
        "--trust",
        help="Extra skops type to trust; 'pickle': read a pickle from an MLflow dir or --run.",
    ),
    quantize: str | None = typer.Option(
        None, "--quantize", help="fp16|bf16|int8: derive a version; --dataset is the eval set."
    ),
    to_onnx: bool = typer.Option(
        False, "--to-onnx", help="Derive an ONNX version; --dataset is the eval set."
    ),
    parent: str | None = typer.Option(
        None, "--parent", help="Version to quantize or convert (latest)."
    ),
    accept_degradation: bool = typer.Option(
        False, "--accept-degradation", help="Register a quantized version that lost recall/AUC."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Register a new model version with its lineage (or a quantized or ONNX version of one)."""
    from mlpipe import registry
    from mlpipe.errors import InvalidInput

    if quantize is not None and to_onnx:
        raise InvalidInput("give one of --quantize or --to-onnx, not both")
    if eval_dataset is not None and model is None and run is None:
        raise InvalidInput(
            "--eval-dataset goes with --model or --run (a quantized or ONNX version "
            "derived from a registered one is checked on --dataset)"
        )
    if (quantize is not None or to_onnx) and (task is not None or threshold is not None):
        raise InvalidInput(
            "a derived version keeps its parent's task and threshold; "
            "--task and --threshold go with --model or --run"
        )
    if quantize is not None:
        info = registry.register_quantized(
            state.settings(), name, recipe=quantize, dataset=dataset, parent=parent, label=label,
            accept_degradation=accept_degradation,
        )  # fmt: skip
        _render_version(info, json_out, title=f"registered {info.name} version {info.version}")
        return
    if to_onnx and (model is not None or run is not None):  # the model, then its ONNX version
        source = registry.register(
            state.settings(), name, dataset=dataset, model_path=model, run_id=run,
            feature_service=feature_service, label=label, metrics=_parse_metrics(metric),
            trust=tuple(trust), to_onnx=True, eval_dataset=eval_dataset,
            features=None if features is None else [f.strip() for f in features.split(",")],
        )  # fmt: skip
        if not json_out:
            console.status(f"registered {source.name} version {source.version}")
        parent = source.version
    if to_onnx:
        info = registry.register_onnx(
            state.settings(), name, dataset=dataset, parent=parent, label=label
        )
        _render_version(info, json_out, title=f"registered {info.name} version {info.version}")
        return
    info = registry.register(
        state.settings(),
        name,
        dataset=dataset,
        model_path=model,
        run_id=run,
        feature_service=feature_service,
        label=label,
        metrics=_parse_metrics(metric),
        threshold=threshold,
        trust=tuple(trust),
        features=None if features is None else [f.strip() for f in features.split(",")],
        task=_parse_task(task),
        eval_dataset=eval_dataset,
    )
    _render_version(info, json_out, title=f"registered {info.name} version {info.version}")


@models_app.command("list")
def list_models(json_out: bool = typer.Option(False, "--json")) -> None:
    """Registered models with their latest version and aliases."""
    from dataclasses import asdict

    from mlpipe import registry

    models = registry.list_models(state.settings())
    if json_out:
        console.print_json([asdict(m) for m in models])
        return
    rows = [
        [m.name, m.latest_version, " ".join(f"@{a}={v}" for a, v in sorted(m.aliases.items()))]
        for m in models
    ]
    console.show(console.table("models", ["name", "latest", "aliases"], rows))


@models_app.command("show")
def show(
    ref: str = typer.Argument(..., help="NAME, NAME/VERSION or NAME@ALIAS."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """One version with its lineage tags."""
    from mlpipe import registry

    _render_version(registry.show(state.settings(), ref), json_out, title=ref)


def _render_version(info: VersionInfo, json_out: bool, title: str) -> None:
    from dataclasses import asdict

    if json_out:
        console.print_json(asdict(info))
        return
    rows: list[list[Any]] = [
        ["version", info.version],
        ["aliases", " ".join("@" + a for a in info.aliases)],
    ]
    rows += [["run", info.run_id], ["source", info.source]]
    rows += [[k, v] for k, v in sorted(info.tags.items())]
    console.show(console.table(title, ["field", "value"], rows))
