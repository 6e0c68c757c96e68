"""Kubernetes manifests for one model's serving stack, built as plain dicts and written as YAML.

Nothing here talks to a cluster or a store: the manifests come from the
settings and the options alone, so ``mlpipe export k8s`` works offline and in
CI. The image is the one ``bentoml containerize`` makes of ``bentos/scoring``;
it holds the ``mlpipe`` CLI too, so the CronJobs run the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput

if TYPE_CHECKING:
    from mlpipe.config import Settings

Manifest = dict[str, Any]

STATE_DIR = "/var/lib/mlpipe"
PREDLOG_DIR = f"{STATE_DIR}/predlog"
REPORTS_DIR = f"{STATE_DIR}/reports"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Settings that name a store; they go to the ConfigMap unless they hold a password.
_STORE_SETTINGS = ("registry_uri", "artifact_root", "control_url", "warehouse_url")


@dataclass(frozen=True)
class K8sOptions:
    """What a platform team tunes per model; the defaults suit a small production service.

    ``target_rps`` is the request rate one gateway pod should carry and
    ``target_in_flight`` the requests queued or running in it (BentoML's
    ``bentoml_service_request_in_progress``); the HPA adds pods when either is
    exceeded, or when CPU passes ``target_cpu_percent``. ``split_runner`` adds a
    separate runner tier (see :func:`k8s_manifests`).
    """

    image: str = "mlpipe-scoring:latest"
    namespace: str | None = None
    profile: str = "prod"
    port: int = 3000
    min_replicas: int = 2
    max_replicas: int = 10
    target_rps: int = 200
    target_in_flight: int = 32
    target_cpu_percent: int = 70
    drift_window: str = "24h"
    drift_schedule: str = "15 6 * * *"
    sync_schedule: str = "*/5 * * * *"
    predlog_storage: str = "20Gi"
    secret_name: str | None = None
    split_runner: bool = False
    runner_image: str | None = None


def k8s_manifests(
    settings: Settings, model: str, options: K8sOptions | None = None
) -> list[Manifest]:
    """Every object one model's serving stack needs, in apply order.

    - ConfigMap ``{app}-config``: ``MLPIPE_PROFILE`` and the store settings
      (a URL that holds a password is left to the Secret ``{app}-secrets``,
      which the pods read if it exists).
    - PersistentVolumeClaim ``{app}-predlog`` (ReadWriteMany): each gateway pod
      writes its prediction log into its own sub-directory.
    - Deployment, Service, HorizontalPodAutoscaler and PodDisruptionBudget
      ``{app}-gateway``: the ``bentos/scoring`` service (gateway, routing,
      features, batching and the model runner in one process, the fastest
      topology measured on CPU), readiness on ``/readyz``, liveness on ``/livez``.
    - With ``split_runner``: the same four for ``{app}-runner``, a runner tier
      scaled on queue depth, for when scoring moves to its own (GPU) pods; it
      runs ``runner_image`` (default: the same bento; see docs/production.md).
    - CronJob ``{app}-warehouse-sync``: loads closed log segments into the warehouse;
      with the log on Kafka (``predlog.sink = "kafka"``) instead a Deployment of the
      same name running ``mlpipe warehouse sync --follow`` (no log volume anywhere).
    - CronJob ``{app}-drift``: ``mlpipe monitor drift NAME --window 24h``.

    ``{app}`` is ``mlpipe-`` plus the model name in DNS form. Raises
    :class:`InvalidInput` for a model name or option Kubernetes would reject.
    """
    options = options or K8sOptions()
    app = _app_name(model)
    _check(options)
    files = settings.predlog.sink != "kafka"  # else the log is a Kafka topic: no volume
    gateway = _Tier(app, "gateway", options)
    objects: list[Manifest] = [
        _config_map(settings, app, model, options),
        *([_predlog_claim(app, options)] if files else []),
        *gateway.objects(predlog=files),
    ]
    if options.split_runner:
        objects.extend(_Tier(app, "runner", options).objects(predlog=False))
    if files:
        sync = ["mlpipe", "warehouse", "sync"]
        objects.append(_cron_job(app, "warehouse-sync", options.sync_schedule, sync, options))
    else:
        objects.append(_sync_follower(app, options))
    objects.append(
        _cron_job(
            app,
            "drift",
            options.drift_schedule,
            ["mlpipe", "monitor", "drift", model, "--window", options.drift_window],
            options,
            predlog=files,
        )
    )
    return objects


def write_k8s(
    settings: Settings, model: str, out: Path, options: K8sOptions | None = None
) -> list[Path]:
    """Write :func:`k8s_manifests` to ``out`` (created), one numbered YAML file per object.

    ``kubectl apply -f OUT`` applies them in order. Returns the paths written.
    """
    import yaml

    objects = k8s_manifests(settings, model, options)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, obj in enumerate(objects, start=1):
        path = out / f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        header = f"# generated by `mlpipe export k8s {model}`; edit the options, not this file\n"
        path.write_text(header + yaml.safe_dump(obj, sort_keys=False))
        paths.append(path)
    return paths


def _app_name(model: str) -> str:
    name = "mlpipe-" + model.lower().replace("_", "-")
    if not _DNS_LABEL.match(name) or len(name) > 40:
        raise InvalidInput(
            f"model name {model!r} does not make a Kubernetes name (letters, digits, '-', '_'; "
            "at most 33 characters)"
        )
    return name


def _check(options: K8sOptions) -> None:
    if not 1 <= options.min_replicas <= options.max_replicas:
        raise InvalidInput(
            f"replicas: need 1 <= min ({options.min_replicas}) <= max ({options.max_replicas})"
        )
    if not 1 <= options.port <= 65535:
        raise InvalidInput(f"port {options.port} is not a TCP port")
    if len(options.drift_schedule.split()) != 5 or len(options.sync_schedule.split()) != 5:
        raise InvalidInput("schedules must be cron expressions with five fields")


def _labels(app: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "mlpipe",
        "app.kubernetes.io/instance": app,
        "app.kubernetes.io/component": component,
    }


def _meta(name: str, app: str, component: str, options: K8sOptions) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(app, component)}
    if options.namespace:
        meta["namespace"] = options.namespace
    return meta


def _config_map(settings: Settings, app: str, model: str, options: K8sOptions) -> Manifest:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    data = {
        "MLPIPE_PROFILE": options.profile,
        "MLPIPE_HOME": STATE_DIR,
        "MLPIPE_PREDLOG_DIR": PREDLOG_DIR,
        "MLPIPE_REPORTS_DIR": REPORTS_DIR,
        "MLPIPE_FEATURE_STORE_YAML": settings.feature_store_yaml,
        "MLPIPE_SERVING__PORT": str(options.port),
    }
    p = settings.predlog
    if p.sink == "kafka":  # librdkafka credentials (predlog.kafka_config) go in the Secret
        data |= {
            "MLPIPE_PREDLOG__SINK": "kafka",
            "MLPIPE_PREDLOG__KAFKA_BOOTSTRAP": p.kafka_bootstrap,
            "MLPIPE_PREDLOG__KAFKA_TOPIC": p.kafka_topic,
            "MLPIPE_PREDLOG__KAFKA_GROUP": p.kafka_group,
        }
    for key in _STORE_SETTINGS:
        value = getattr(settings, key)
        if not value:
            continue
        try:
            has_password = make_url(value).password is not None
        except ArgumentError:
            has_password = "@" in value.split("://", 1)[-1].split("/", 1)[0]
        if not has_password:
            data[f"MLPIPE_{key.upper()}"] = value
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **_meta(f"{app}-config", app, "config", options),
            "annotations": {"mlpipe.io/model": model},
        },
        "data": data,
    }


def _predlog_claim(app: str, options: K8sOptions) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(f"{app}-predlog", app, "predlog", options),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": options.predlog_storage}},
        },
    }


def _env_from(app: str, options: K8sOptions) -> list[dict[str, Any]]:
    secret = options.secret_name or f"{app}-secrets"
    return [
        {"configMapRef": {"name": f"{app}-config"}},
        {"secretRef": {"name": secret, "optional": True}},
    ]


class _Tier:
    """A Deployment with its Service, HPA and PodDisruptionBudget."""

    def __init__(self, app: str, component: str, options: K8sOptions) -> None:
        self.app, self.component, self.options = app, component, options
        self.name = f"{app}-{component}"

    def objects(self, *, predlog: bool) -> list[Manifest]:
        return [self.deployment(predlog), self.service(), self.autoscaler(), self.budget()]

    def deployment(self, predlog: bool) -> Manifest:
        o = self.options
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(self.name, self.app, self.component, o),
            "spec": {
                "replicas": o.min_replicas,
                "selector": {"matchLabels": _labels(self.app, self.component)},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {
                        "labels": _labels(self.app, self.component),
                        "annotations": {
                            "prometheus.io/scrape": "true",
                            "prometheus.io/path": "/metrics",
                            "prometheus.io/port": str(o.port),
                        },
                    },
                    "spec": self.pod(predlog),
                },
            },
        }

    def pod(self, predlog: bool) -> dict[str, Any]:
        """The pod spec: one container with its probes, and the prediction log's volume."""
        o = self.options
        probe = {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5}
        image = o.runner_image if self.component == "runner" and o.runner_image else o.image
        container: dict[str, Any] = {
            "name": self.component,
            "image": image,
            # mlpipe's server, not the image's `bentoml serve`: only its workers bound a
            # request head in size and time (decision 039)
            "command": ["mlpipe", "serve", "--host", "0.0.0.0", "--port", str(o.port)],
            "ports": [{"name": "http", "containerPort": o.port, "protocol": "TCP"}],
            "envFrom": _env_from(self.app, o),
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
            ],
            # Loading and verifying every deployed version can take a while; liveness waits.
            "startupProbe": {
                "httpGet": {"path": "/livez", "port": "http"},
                "periodSeconds": 5,
                "failureThreshold": 60,
            },
            "readinessProbe": {**probe, "failureThreshold": 2},
            "livenessProbe": {
                "httpGet": {"path": "/livez", "port": "http"},
                "periodSeconds": 10,
                "failureThreshold": 3,
            },
            "resources": {
                "requests": {"cpu": "1", "memory": "1Gi"},
                "limits": {"memory": "2Gi"},
            },
        }
        pod: dict[str, Any] = {
            "containers": [container],
            # BentoML drains in-flight requests on SIGTERM; the log is flushed on shutdown.
            "terminationGracePeriodSeconds": 30,
        }
        if predlog:
            container["volumeMounts"] = [
                {"name": "predlog", "mountPath": PREDLOG_DIR, "subPathExpr": "$(POD_NAME)"}
            ]
            pod["volumes"] = [
                {"name": "predlog", "persistentVolumeClaim": {"claimName": f"{self.app}-predlog"}}
            ]
        return pod

    def service(self) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(self.name, self.app, self.component, self.options),
            "spec": {
                "type": "ClusterIP",
                "selector": _labels(self.app, self.component),
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        }

    def autoscaler(self) -> Manifest:
        """Scale on request rate (gateway) or queue depth (both), and CPU.

        The two pod metrics come from Prometheus through prometheus-adapter
        (rules in docs/production.md): ``mlpipe_predictions_per_second`` is the
        rate of ``mlpipe_predictions_total``, ``bentoml_service_request_in_progress``
        BentoML's own gauge of requests queued or running.
        """
        o = self.options
        metrics: list[dict[str, Any]] = []
        if self.component == "gateway":
            metrics.append(_pods_metric("mlpipe_predictions_per_second", o.target_rps))
        metrics.append(_pods_metric("bentoml_service_request_in_progress", o.target_in_flight))
        metrics.append(
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": o.target_cpu_percent},
                },
            }
        )
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta(self.name, self.app, self.component, o),
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": self.name,
                },
                "minReplicas": o.min_replicas,
                "maxReplicas": o.max_replicas,
                "metrics": metrics,
                "behavior": {
                    # Scale up fast on a burst, down slowly so a dip does not drop warm caches.
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 30}],
                    },
                    "scaleDown": {"stabilizationWindowSeconds": 300},
                },
            },
        }

    def budget(self) -> Manifest:
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta(self.name, self.app, self.component, self.options),
            "spec": {
                "minAvailable": 1,
                "selector": {"matchLabels": _labels(self.app, self.component)},
            },
        }


def _pods_metric(name: str, average: int) -> dict[str, Any]:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": str(average)},
        },
    }


SYNC_METRICS_PORT = 9400


def _sync_follower(app: str, options: K8sOptions) -> Manifest:
    """``mlpipe warehouse sync --follow``: the Kafka topic's consumer, its lag on /metrics.

    One replica: more share the partitions (a consumer group) but only on a
    warehouse that takes several writers (PostgreSQL). SIGTERM ends it after the
    batch in hand is committed with its offsets.
    """
    name = f"{app}-warehouse-sync"
    command = [
        *("mlpipe", "warehouse", "sync", "--follow"),
        *("--metrics-port", str(SYNC_METRICS_PORT)),
    ]
    container = {
        "name": "warehouse-sync",
        "image": options.image,
        "command": command,
        "envFrom": _env_from(app, options),
        "ports": [{"name": "metrics", "containerPort": SYNC_METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, app, "warehouse-sync", options),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels(app, "warehouse-sync")},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {
                    "labels": _labels(app, "warehouse-sync"),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(SYNC_METRICS_PORT),
                    },
                },
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 60},
            },
        },
    }


def _cron_job(
    app: str,
    job: str,
    schedule: str,
    command: list[str],
    options: K8sOptions,
    *,
    predlog: bool = True,
) -> Manifest:
    name = f"{app}-{job}"
    container: dict[str, Any] = {
        "name": job,
        "image": options.image,
        "command": command,
        "envFrom": _env_from(app, options),
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
    }
    volumes = []
    if predlog:
        container["volumeMounts"] = [{"name": "predlog", "mountPath": PREDLOG_DIR}]
        volumes = [{"name": "predlog", "persistentVolumeClaim": {"claimName": f"{app}-predlog"}}]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(name, app, job, options),
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5,
            "jobTemplate": {
                "spec": {
                    # Exit 1 (drift) must stay a failed Job that alerts, not be retried away.
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": _labels(app, job)},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [container],
                            **({"volumes": volumes} if volumes else {}),
                        },
                    },
                }
            },
        },
    }
