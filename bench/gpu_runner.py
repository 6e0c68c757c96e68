"""The MLP runner's batched throughput and p99 latency, CPU vs GPU, at batch sizes 1..256.

Scores through mlpipe's own torch runner (``mlpipe.registry.torch_scorer``,
what a served torch version calls per batch), on a TorchScript MLP shaped like a
fraud model (16 inputs, two hidden layers of 256). Rows: CPU FP32, CPU dynamic
INT8 (mlpipe's ``--quantize int8`` recipe), and, when ``torch.cuda.is_available()``,
GPU FP32 and GPU FP16. Without a GPU the GPU rows are skipped with a note.

    python bench/gpu_runner.py [--seconds 0.5] [--threads N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FEATURES = 16


def _mlp() -> object:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
        torch.nn.Sigmoid(),
    )
    return torch.jit.script(net.eval())


def _copy(model: object) -> object:
    import io

    import torch

    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer, map_location="cpu")


def _measure(score: Callable[[np.ndarray], np.ndarray], batch: int, seconds: float) -> tuple:
    x = np.random.default_rng(batch).normal(size=(batch, FEATURES))
    for _ in range(5):
        score(x)
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 20:
        t0 = time.perf_counter()
        score(x)  # returns numpy on the host: includes the device round trip
        times.append(time.perf_counter() - t0)
    lat = np.asarray(times)
    return batch / lat.mean(), float(np.percentile(lat, 99) * 1e3)


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*grad attribute")
    import torch

    from mlpipe.registry import quantize_module, torch_scorer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per cell")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = _mlp()
    variants = [
        ("cpu", "fp32", lambda: torch_scorer(_copy(model), "cpu")),
        ("cpu", "int8", lambda: torch_scorer(quantize_module(model, "int8"), "cpu")),
    ]
    gpu = torch.cuda.is_available()
    if gpu:
        variants += [
            ("cuda", "fp32", lambda: torch_scorer(_copy(model), "cuda")),
            ("cuda", "fp16", lambda: torch_scorer(quantize_module(model, "fp16"), "cuda")),
        ]
    name = torch.cuda.get_device_name(0) if gpu else "none"
    print(f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}, GPU: {name}")
    print(f"{'device':<6} {'dtype':<5} {'batch':>5} {'rows/s':>12} {'p99 ms':>9}")
    for device, dtype, build in variants:
        score = build()
        for batch in BATCHES:
            rps, p99 = _measure(score, batch, args.seconds)
            print(f"{device:<6} {dtype:<5} {batch:>5} {rps:>12,.0f} {p99:>9.3f}")
    if not gpu:
        print("note: no CUDA device (torch.cuda.is_available() is False): GPU rows skipped")


if __name__ == "__main__":
    main()
