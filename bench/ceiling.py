"""``python -m bench.ceiling``: what a ``/predict`` costs up to each layer, measured end to end.

Builds one source tree per *cut* from the checkout's ``HEAD`` (``git archive``).
In a cut's tree one place answers ``POST /predict`` at once with a constant
instead of passing the request on; the cuts go from the outermost layer to the
pipeline (:data:`CUTS`). :mod:`bench.ab` then measures every cut beside the
tree as it is, in paired rounds at c=32. A cut's throughput is what the path
up to that place lets the machine answer; the step from one cut to the next is
that stretch's cost, in the machine's CPU time per answered request (cores ÷
req/s: the server, the load generator and the kernel together, which is what
a benchmark's ratio counts; a py-spy profile sees only a worker's Python).

The cuts are places on the app's path, so every cut is served with the predict
lane off (``serving.lane=false``), and so is one more row, the app's whole
path; the last row is the tree as it serves, the lane on (decision 047).

The trees are experiments, never served to anyone: a cut is a few lines put
into a copy of the source (:func:`cut_tree`), and a test checks that every cut
still finds its place in the source.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import ab
from bench.run import RESULTS

ROOT = Path(__file__).resolve().parent.parent
SERVING = "platform/mlpipe/serving"
_CALL = "    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:\n"
# the answer of an "entry" cut: the body read whole (the project's own read_body) and
# parsed, a constant sent back
_ANSWER_AT_ENTRY = """\
        if scope.get("path") == "/predict":
            import json as _json

            from mlpipe.serving._asgi import read_body as _read_body

            _json.loads(await _read_body(scope, receive))
            _body = b'{"score":0.0,"label":0}'
            _length = str(len(_body)).encode()
            _head = [(b"content-type", b"application/json"), (b"content-length", _length)]
            await send({"type": "http.response.start", "status": 200, "headers": _head})
            await send({"type": "http.response.body", "body": _body})
            return
"""


def _scored(req: str) -> str:
    """The source of a scored answer of the bench model to the request named ``req``, for
    the cuts after the gateway's admission."""
    return (
        f'{{"request_id": {req}.request_id, "model": {req}.model, "version": "1", '
        '"arm": "champion", "generation": 1, "score": 0.5, "label": 0}'
    )


# the body of ScoringPipeline.predict_batch_async, the batch the service's API scores
_ASYNC_BATCH = """\
        unserved, items = self._score_batch(requests)
        own, rows = _own_and_rows(items)
        await self._log(own)
"""


@dataclass(frozen=True)
class Cut:
    """Where a cut answers: at the entry of ``cls``'s ``__call__`` in ``path``, or, with
    ``replace``, by putting ``by`` in the place of that text (once in the file)."""

    name: str
    says: str  # what the path up to here holds
    path: str
    cls: str = ""
    replace: str = ""
    by: str = ""


CUTS: tuple[Cut, ...] = (
    Cut(
        "front-door",
        "the worker's HTTP protocol (HeadGuard on uvicorn), the front door",
        f"{SERVING}/_overload.py",
        cls="FrontDoor",
    ),
    Cut(
        "deadline",
        "+ BentoML's app: RouteMetrics, Starlette's error middleware and app",
        f"{SERVING}/_deadline.py",
        cls="Deadline",
    ),
    Cut(
        "auth", "+ the deadline (a timer, a send wrapper)", f"{SERVING}/_auth.py", cls="AuthGateway"
    ),
    Cut(
        "protocol",
        "+ auth and rate limit, readiness, the intake (body timer, content type)",
        f"{SERVING}/_oip.py",
        cls="InferenceProtocol",
    ),
    Cut(
        "gateway",
        "+ the Open Inference Protocol's route check, the overload gate",
        f"{SERVING}/_gateway.py",
        cls="PredictGateway",
    ),
    Cut(
        "admitted",
        "+ the gateway: parse, admission checks, ids, its latency histogram, the answer",
        f"{SERVING}/_gateway.py",
        replace="            (result,) = await self.batch([req])\n",
        by=f"            result = {_scored('req')}\n",
    ),
    Cut(
        "batcher",
        "+ BentoML's batcher (the pipeline answers constants)",
        f"{SERVING}/_pipeline.py",
        replace=_ASYNC_BATCH,
        by=f"        return [{_scored('r')} for r in requests]\n",
    ),
    Cut(
        "scored",
        "+ the pipeline's routing, features and scoring",
        f"{SERVING}/_pipeline.py",
        replace="        await self._log(own)\n",  # in predict_batch_async, which the service calls
        by=f"        return [{_scored('r')} for r in requests]\n",
    ),
)


def cut_source(source: str, cut: Cut) -> str:
    """``source`` (the text of ``cut.path``) with the cut made; ValueError if its place is gone."""
    if cut.replace:
        if source.count(cut.replace) != 1:
            raise ValueError(f"{cut.name}: the text to replace is not once in {cut.path}")
        return source.replace(cut.replace, cut.by)
    start = source.find(f"\nclass {cut.cls}")
    at = source.find(_CALL, start) if start >= 0 else -1
    if at < 0:
        raise ValueError(f"{cut.name}: no {cut.cls}.__call__ in {cut.path}")
    at += len(_CALL)
    return source[:at] + _ANSWER_AT_ENTRY + source[at:]


def cut_tree(root: Path, cut: Cut, into: Path) -> Path:
    """``HEAD`` of the repository at ``root`` in ``into/<cut name>`` (made afresh), with the
    cut made."""
    tree = into / cut.name
    shutil.rmtree(tree, ignore_errors=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    target = tree / cut.path
    target.write_text(cut_source(target.read_text(), cut))
    return tree


APP_PATH = "lane=false"  # the bench.ab variant of the app's whole path, the lane off


def steps(rows: list[dict[str, Any]], labels: dict[str, str], cores: int) -> str:
    """The table: each cut's median req/s, the machine's CPU µs an answer, and the step
    from the cut before it (the app's whole path, then the lane, last)."""
    lines = [
        "| answered at | what the path holds | req/s (median) | CPU µs / answer | step µs |",
        "|---|---|---|---|---|",
    ]
    before: float | None = None
    for label, says in labels.items():
        rps = [r["rps"] for r in rows if r["label"] == label and r["mode"] == "closed"]
        if not rps:
            continue
        median = statistics.median(rps)
        cost = cores * 1e6 / median
        step = "–" if before is None else f"{cost - before:+.0f}"
        name = _NAMES.get(label) or label.rsplit("/", 1)[-1].removesuffix(f"+{APP_PATH}")
        lines.append(f"| {name} | {says} | {median:,.0f} | {cost:.0f} | {step} |")
        before = cost
    return "\n".join(lines) + "\n"


_NAMES = {APP_PATH: "the app's whole path", ab.BASELINE: "the whole path, the lane on"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--cuts", default=",".join(c.name for c in CUTS), help="a subset, in order")
    p.add_argument("--trees", type=Path, default=RESULTS / "ceiling-trees")
    p.add_argument("--home", type=Path, default=RESULTS / "home")
    p.add_argument("--out", type=Path, default=RESULTS / "ceiling")
    a = p.parse_args(argv)
    known = {c.name: c for c in CUTS}
    unknown = [n for n in a.cuts.split(",") if n not in known]
    if unknown:
        p.error(f"--cuts: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    a.cuts = [known[n] for n in a.cuts.split(",")]
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    labels: dict[str, str] = {}
    for cut in args.cuts:
        tree = cut_tree(ROOT, cut, args.trees)
        labels[f"tree={tree}+{APP_PATH}"] = cut.says
    labels[APP_PATH] = "+ the answers and the prediction log"
    labels[ab.BASELINE] = "the predict lane instead of the app (decision 047)"
    variants = [ab.BASELINE, *(v for v in labels if v != ab.BASELINE)]
    argv_ab = ["--variants", ",".join(variants), "--rounds", str(args.rounds)]
    code = ab.main([*argv_ab, "--home", str(args.home), "--out", str(args.out)])
    if code:
        return code
    rows = json.loads((args.out / "ab-latest.json").read_text())["rows"]
    table = steps(rows, labels, os.cpu_count() or 1)
    (args.out / "ceiling-latest.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
