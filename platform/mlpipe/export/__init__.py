"""Deployment artifacts for running mlpipe elsewhere: Kubernetes manifests, written offline."""

from mlpipe.export._k8s import K8sOptions, k8s_manifests, write_k8s

__all__ = ["K8sOptions", "k8s_manifests", "write_k8s"]
