"""``monitor skew``: train/serve skew, served features vs the offline definition as of request time.

For a sample of logged predictions in the window, the features each version's
FeatureService defines are fetched offline with a Feast point-in-time join as of
the request's timestamp (:func:`mlpipe.features.training_set`, the very join
training sets are built with) and compared with what serving logged. A feature
is skewed when more than ``skew_max_mismatch_rate`` of its compared rows differ
beyond ``skew_rel_tolerance`` (relative). Model inputs the service does not
define (request-time inputs such as ``amount``) have no offline definition and
are skipped, by name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mlpipe import warehouse
from mlpipe.monitoring._reports import entry, report_dir, require_logged, write_json
from mlpipe.monitoring._screen import SkippedColumn
from mlpipe.windows import utcnow, window_ending

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings

EXIT_CODES = {"ok": 0, "no_data": 0, "skew": 1}
# Below this a difference is float noise, whatever the relative tolerance says.
SKEW_ABS_TOLERANCE = 1e-9
_EXAMPLES = 5
_FEATURE_SERVICE_TAG = "mlpipe.feature_service"


@dataclass(frozen=True)
class SkewExample:
    """One mismatching row: who, when, what serving used and what the offline join gives."""

    request_id: str
    entity_key: str
    ts: datetime
    served: float | None
    offline: float | None


@dataclass
class FeatureSkew:
    feature: str
    feature_service: str
    compared: int
    mismatched: int
    mismatch_rate: float
    max_abs_diff: float | None
    skewed: bool
    examples: list[SkewExample] = field(default_factory=list)


@dataclass
class SkewVerdict:
    """The answer to ``monitor skew``: a line per feature, and the verdict over them."""

    model: str
    window_start: datetime
    window_end: datetime
    verdict: str  # "ok" | "skew" | "no_data"
    rows_in_window: int
    rows_compared: int
    sampled: bool
    rel_tolerance: float
    max_mismatch_rate: float
    features: list[FeatureSkew] = field(default_factory=list)
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report_path: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def skewed_features(self) -> list[str]:
        return [f.feature for f in self.features if f.skewed]

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "skewed_features": self.skewed_features,
            "exit_code": self.exit_code,
        }


def _feature_service(settings: Settings, model: str, version: str) -> str | None:
    from mlpipe import registry

    return registry.show(settings, f"{model}/{version}").tags.get(_FEATURE_SERVICE_TAG)


def _join_key_column(values: pd.Series) -> pd.Series:
    """Logged join-key values as the offline store expects them: integers when they all are."""
    import pandas as pd

    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().all() and (numeric == numeric.round()).all():
        return numeric.astype("int64")
    return values.astype(str)


def _as_float(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _compare(
    service: str,
    feature: str,
    served: pd.Series,
    offline: pd.Series,
    meta: pd.DataFrame,
    rel_tol: float,
    max_rate: float,
) -> FeatureSkew:
    import numpy as np

    a = served.to_numpy(dtype="float64")
    b = offline.to_numpy(dtype="float64")
    same = np.isclose(a, b, rtol=rel_tol, atol=SKEW_ABS_TOLERANCE, equal_nan=True)
    # ±inf only matches itself; isclose already says so.
    diff = np.abs(a - b)
    finite = np.isfinite(diff)
    mismatched = int((~same).sum())
    n = len(a)
    rate = mismatched / n if n else 0.0
    examples = [
        SkewExample(
            str(meta["request_id"].iloc[i]),
            str(meta["entity_key"].iloc[i]),
            meta["ts"].iloc[i].to_pydatetime(),
            _as_float(float(a[i])),
            _as_float(float(b[i])),
        )
        for i in np.flatnonzero(~same)[:_EXAMPLES]
    ]
    return FeatureSkew(
        feature=feature,
        feature_service=service,
        compared=n,
        mismatched=mismatched,
        mismatch_rate=rate,
        max_abs_diff=float(diff[finite].max()) if finite.any() else None,
        skewed=rate > max_rate,
        examples=examples,
    )


def skew(
    settings: Settings,
    model: str,
    window: str = "24h",
    sample: int | None = None,
    end: datetime | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
) -> SkewVerdict:
    """Compare served features with their offline point-in-time values over the window.

    Reads up to ``sample`` (default ``monitor.skew_sample_rows``) logged rows in
    the window ending at ``end`` (default now, naive UTC), joins each version's
    FeatureService offline as of each row's timestamp, and reports the mismatch
    rate per feature. Writes ``skew.json`` under the reports directory and a row
    (kind ``skew``) in the ``reports`` index. Raises :class:`InvalidInput` for a
    bad window, :class:`NotFound` for a model without logged predictions, and
    what :func:`mlpipe.features.training_set` raises when the offline store fails.
    """
    import pandas as pd

    from mlpipe import features as feast_features

    current = window_ending(window, end)
    sample_rows = sample or settings.monitor.skew_sample_rows
    rel_tol = settings.monitor.skew_rel_tolerance
    max_rate = settings.monitor.skew_max_mismatch_rate
    require_logged(settings, model, sync_first, notify)
    win = warehouse.prediction_window(
        settings,
        model,
        current.start,
        current.end,
        sample_rows=sample_rows,
        notify=notify,
        with_entities=True,
    )
    result = SkewVerdict(
        model, current.start, current.end, "no_data", win.total, 0, win.sampled, rel_tol, max_rate
    )
    if win.sampled:
        result.notes.append(f"window sampled in the warehouse: {len(win.rows)} of ~{win.total}")
    ok = (win.rows["status"] == "ok").to_numpy()
    if (~ok).any():
        result.notes.append(f"{int((~ok).sum())} error row(s) left out: no features were served")
    rows = win.rows[ok]
    served = win.features[ok]
    assert win.entities is not None
    entities = win.entities[ok]
    by_feature: dict[str, FeatureSkew] = {}
    skipped: dict[str, str] = {}
    for version in sorted(set(rows["version"]), key=str):
        mask = (rows["version"] == version).to_numpy()
        v_rows, v_served, v_entities = rows[mask], served[mask], entities[mask]
        service = _feature_service(settings, model, str(version))
        if not service:
            result.notes.append(
                f"v{version} was registered without a feature service: "
                f"{int(mask.sum())} row(s) have nothing to compare offline"
            )
            continue
        spec = feast_features.describe_service(settings, service)
        absent = [k for k in spec.join_keys if k not in v_entities]
        if absent:
            result.notes.append(
                f"v{version}: logged entities lack the join key(s) {', '.join(absent)} "
                f"of {service}: {int(mask.sum())} row(s) not compared"
            )
            continue
        keyed = v_entities[spec.join_keys].notna().all(axis=1).to_numpy()
        if not keyed.all():
            result.notes.append(f"v{version}: {int((~keyed).sum())} row(s) without join keys")
        v_rows, v_served, v_entities = v_rows[keyed], v_served[keyed], v_entities[keyed]
        if not len(v_rows):
            continue
        frame = pd.DataFrame(
            {k: _join_key_column(v_entities[k]).to_numpy() for k in spec.join_keys}
        )
        frame["event_timestamp"] = pd.to_datetime(v_rows["ts"].to_numpy(), utc=True)
        offline = feast_features.training_set(settings, service, frame)
        meta = pd.DataFrame(
            {
                "request_id": v_rows["request_id"].to_numpy(),
                "entity_key": v_entities["entity_key"].to_numpy(),
                "ts": v_rows["ts"].to_numpy(),
            }
        )
        meta["ts"] = pd.to_datetime(meta["ts"])
        for name in v_served.columns:
            if name not in spec.features:
                skipped.setdefault(
                    name, f"not in feature service {service} (request-time input): no offline value"
                )
        for name in spec.features:
            if name not in v_served:
                skipped.setdefault(name, f"defined by {service} but not logged by serving")
                continue
            part = _compare(
                service,
                name,
                v_served[name].reset_index(drop=True),
                offline[name],
                meta,
                rel_tol,
                max_rate,
            )
            previous = by_feature.get(name)
            if previous is not None:  # the same feature under another version: pool the counts
                part = _pool(previous, part, max_rate)
            by_feature[name] = part
        result.rows_compared += len(v_rows)
    result.features = [by_feature[k] for k in sorted(by_feature)]
    result.skipped = [
        SkippedColumn(k, why) for k, why in sorted(skipped.items()) if k not in by_feature
    ]
    if result.rows_compared:
        result.verdict = "skew" if result.skewed_features else "ok"
    now = utcnow()
    path = report_dir(settings, model, now) / "skew.json"
    write_json(path, result.to_dict())
    result.report_path = str(path)
    summary = {
        "rows_compared": result.rows_compared,
        "skewed": result.skewed_features,
        "mismatch_rate": {f.feature: f.mismatch_rate for f in result.features},
    }
    warehouse.record_reports(
        settings, [entry("skew", model, current, now, result.verdict, path, summary)], notify
    )
    return result


def _pool(a: FeatureSkew, b: FeatureSkew, max_rate: float) -> FeatureSkew:
    compared = a.compared + b.compared
    mismatched = a.mismatched + b.mismatched
    rate = mismatched / compared if compared else 0.0
    diffs = [d for d in (a.max_abs_diff, b.max_abs_diff) if d is not None]
    return FeatureSkew(
        feature=a.feature,
        feature_service=a.feature_service
        if a.feature_service == b.feature_service
        else f"{a.feature_service}, {b.feature_service}",
        compared=compared,
        mismatched=mismatched,
        mismatch_rate=rate,
        max_abs_diff=max(diffs) if diffs else None,
        skewed=rate > max_rate,
        examples=(a.examples + b.examples)[:_EXAMPLES],
    )
