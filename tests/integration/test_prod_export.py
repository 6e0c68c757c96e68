"""``mlpipe export k8s``: the manifests validate offline against the Kubernetes schemas.

``kubernetes-validate`` ships the OpenAPI-derived JSON schemas of each
Kubernetes release in the package, so this needs no cluster and no network.
Strict mode rejects any field the schema does not know.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.export import K8sOptions, k8s_manifests
from tests.conftest import run_cli

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (pip install 'mlpipe[dev]')"
)

pytestmark = pytest.mark.integration

K8S_VERSIONS = ("1.29", "1.33")


def _validate(manifest: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = f"{manifest['kind']}/{manifest['metadata']['name']} on Kubernetes {version}"
            pytest.fail(f"{where}: {str(exc).splitlines()[0]} at {list(getattr(exc, 'path', []))}")


def _by_kind(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_cli_writes_manifests_that_validate_strictly(home: Path) -> None:
    out = home / "k8s"
    result = run_cli("export", "k8s", "fraud", "--out", str(out), "--image", "reg/scoring:1.2")
    assert result.returncode == 0, result.stderr
    written = [Path(line) for line in result.stdout.split()]
    assert written == sorted(out.glob("*.yaml")) and len(written) == 8
    objects = [yaml.safe_load(p.read_text()) for p in written]
    for obj in objects:
        _validate(obj)
    kinds = _by_kind(objects)
    gateway = kinds[("Deployment", "mlpipe-fraud-gateway")]["spec"]["template"]["spec"]
    container = gateway["containers"][0]
    assert container["image"] == "reg/scoring:1.2"
    # mlpipe's server (its workers guard request heads), on the port the probes use
    assert container["command"] == ["mlpipe", "serve", "--host", "0.0.0.0", "--port", "3000"]
    assert container["ports"][0]["containerPort"] == 3000
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert kinds[("Service", "mlpipe-fraud-gateway")]["spec"]["ports"][0]["targetPort"] == "http"
    hpa = kinds[("HorizontalPodAutoscaler", "mlpipe-fraud-gateway")]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "mlpipe-fraud-gateway"
    metric_names = {m["pods"]["metric"]["name"] for m in hpa["metrics"] if m["type"] == "Pods"}
    assert metric_names == {"mlpipe_predictions_per_second", "bentoml_service_request_in_progress"}
    drift = kinds[("CronJob", "mlpipe-fraud-drift")]["spec"]["jobTemplate"]["spec"]["template"]
    command = drift["spec"]["containers"][0]["command"]
    assert command == ["mlpipe", "monitor", "drift", "fraud", "--window", "24h"]
    sync = kinds[("CronJob", "mlpipe-fraud-warehouse-sync")]["spec"]["jobTemplate"]["spec"]
    assert sync["template"]["spec"]["containers"][0]["command"] == ["mlpipe", "warehouse", "sync"]
    assert kinds[("ConfigMap", "mlpipe-fraud-config")]["data"]["MLPIPE_PROFILE"] == "prod"


def test_split_runner_namespace_and_secrets_stay_out_of_the_config_map() -> None:
    settings = Settings(
        registry_uri="http://mlflow.ml.svc:5000",
        artifact_root="mlflow-artifacts:/mlpipe",
        control_url="postgresql+psycopg://mlpipe:s3cret@pg.ml.svc/control",
        warehouse_url="postgresql+psycopg://mlpipe@pg.ml.svc/warehouse",
        feature_store_yaml="feature_store.prod.yaml",
    )
    options = K8sOptions(namespace="ml", split_runner=True, runner_image="reg/runner-gpu:1")
    objects = k8s_manifests(settings, "fraud_v2", options)
    for obj in objects:
        _validate(obj)
        assert obj["metadata"]["namespace"] == "ml"
    kinds = _by_kind(objects)
    runner = kinds[("Deployment", "mlpipe-fraud-v2-runner")]["spec"]["template"]["spec"]
    assert runner["containers"][0]["image"] == "reg/runner-gpu:1"
    runner_hpa = kinds[("HorizontalPodAutoscaler", "mlpipe-fraud-v2-runner")]["spec"]
    assert {m["pods"]["metric"]["name"] for m in runner_hpa["metrics"] if m["type"] == "Pods"} == {
        "bentoml_service_request_in_progress"
    }
    data = kinds[("ConfigMap", "mlpipe-fraud-v2-config")]["data"]
    assert "s3cret" not in yaml.safe_dump(objects)
    assert "MLPIPE_CONTROL_URL" not in data  # holds a password: the Secret supplies it
    assert data["MLPIPE_WAREHOUSE_URL"] == "postgresql+psycopg://mlpipe@pg.ml.svc/warehouse"
    assert data["MLPIPE_FEATURE_STORE_YAML"] == "feature_store.prod.yaml"
    env_from = runner["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "mlpipe-fraud-v2-secrets", "optional": True}} in env_from


def test_bad_names_and_options_are_input_errors(home: Path) -> None:
    with pytest.raises(InvalidInput, match="Kubernetes name"):
        k8s_manifests(Settings(), "Fraud.Model")
    with pytest.raises(InvalidInput, match="replicas"):
        k8s_manifests(Settings(), "fraud", K8sOptions(min_replicas=5, max_replicas=2))
    result = run_cli("export", "k8s", "a" * 40, "--out", str(home / "k8s"))
    assert result.returncode == 2 and "Kubernetes name" in result.stderr
    assert not (home / "k8s").exists()


def test_a_log_on_kafka_gets_a_following_consumer_and_no_log_volume() -> None:
    settings = Settings(
        predlog={"sink": "kafka", "kafka_bootstrap": "kafka-0.kafka:9092", "kafka_topic": "preds"}
    )
    objects = k8s_manifests(settings, "fraud")
    for obj in objects:
        _validate(obj)
    kinds = _by_kind(objects)
    assert not [k for k in kinds if k[0] == "PersistentVolumeClaim"]
    assert ("CronJob", "mlpipe-fraud-warehouse-sync") not in kinds
    follower = kinds[("Deployment", "mlpipe-fraud-warehouse-sync")]["spec"]
    assert follower["replicas"] == 1
    container = follower["template"]["spec"]["containers"][0]
    assert container["command"] == [
        "mlpipe", "warehouse", "sync", "--follow", "--metrics-port", "9400",
    ]  # fmt: skip
    gateway = kinds[("Deployment", "mlpipe-fraud-gateway")]["spec"]["template"]["spec"]
    assert "volumes" not in gateway and "volumeMounts" not in gateway["containers"][0]
    data = kinds[("ConfigMap", "mlpipe-fraud-config")]["data"]
    assert data["MLPIPE_PREDLOG__SINK"] == "kafka"
    assert data["MLPIPE_PREDLOG__KAFKA_BOOTSTRAP"] == "kafka-0.kafka:9092"
    assert data["MLPIPE_PREDLOG__KAFKA_TOPIC"] == "preds"
