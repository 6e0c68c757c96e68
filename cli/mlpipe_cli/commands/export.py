"""``mlpipe export k8s``: Kubernetes manifests for one model's serving stack, written offline."""

from __future__ import annotations

from pathlib import Path

import typer

from mlpipe_cli import console
from mlpipe_cli.state import state

export_app = typer.Typer(
    help="Write deployment artifacts (Kubernetes manifests) from the settings.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")


@export_app.command("k8s")
def k8s(
    name: str = typer.Argument(..., help="Model name."),
    out: Path = typer.Option(Path("k8s"), "--out", help="Directory to write the YAML files to."),
    image: str = typer.Option(
        "mlpipe-scoring:latest", "--image", help="The image `bentoml containerize` built."
    ),
    namespace: str | None = typer.Option(None, "--namespace", help="Kubernetes namespace."),
    min_replicas: int = typer.Option(2, "--min-replicas", help="Gateway pods at least."),
    max_replicas: int = typer.Option(10, "--max-replicas", help="Gateway pods at most."),
    target_rps: int = typer.Option(200, "--target-rps", help="Requests/s one pod should carry."),
    split_runner: bool = typer.Option(
        False, "--split-runner", help="Add a separate runner tier (e.g. GPU scoring)."
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Deployment, Service, HPA for the gateway (and runner), drift and sync CronJobs."""
    from mlpipe.export import K8sOptions, write_k8s

    options = K8sOptions(
        image=image,
        namespace=namespace,
        profile=state.profile or "prod",
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_rps=target_rps,
        split_runner=split_runner,
    )
    paths = write_k8s(state.settings(), name, out, options)
    if json_out:
        console.print_json([str(p) for p in paths])
        return
    for path in paths:
        console.out.print(str(path))
    console.status(f"wrote {len(paths)} manifests to {out}; apply with `kubectl apply -f {out}`")
