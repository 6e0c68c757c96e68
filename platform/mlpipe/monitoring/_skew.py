"""``monitor skew``: train/serve skew, served features vs the offline definition as of request time.

For a sample of logged predictions in the window, the features each version's
FeatureService defines are fetched offline with a Feast point-in-time join as of
the request's timestamp (:func:`mlpipe.features.training_set`, the very join
training sets are built with) and compared with what serving logged. A feature
is skewed when more than ``skew_max_mismatch_rate`` of its compared rows differ
beyond ``skew_rel_tolerance`` (relative). Model inputs the service does not
define (request-time inputs such as ``amount``) have no offline definition and
are skipped, by name.

One version per figure: each version served in the window is compared with its
own FeatureService and reported on its own (its rows, its comparisons, its
verdict), never pooled with another version's under one feature's name;
``version`` keeps one and notes how many rows of other versions it left out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from mlpipe import features, registry, warehouse
from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from mlpipe.monitoring._reports import Finding, new_report, pruned_notes, publish, read_logged
from mlpipe.monitoring._screen import SkippedColumn
from mlpipe.registry.tag_names import FEATURE_SERVICE
from mlpipe.windows import Window, window_ending

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SkewOutcome = Literal["ok", "skew", "no_data"]  # no_data: no row could be compared
EXIT_CODES: dict[SkewOutcome, int] = {"ok": 0, "no_data": 0, "skew": 1}
# Below this a difference is float noise, whatever the relative tolerance says.
SKEW_ABS_TOLERANCE = 1e-9
_EXAMPLES = 5


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
    """One feature of one version: its served values against the offline ones."""

    feature: str
    feature_service: str
    compared: int
    mismatched: int
    mismatch_rate: float
    max_abs_diff: float | None
    skewed: bool
    examples: list[SkewExample] = field(default_factory=list)
    version: str | None = None  # the version that served the compared rows


@dataclass
class VersionSkew:
    """One served version in the window: its rows, how many were compared, its verdict."""

    version: str
    rows: int  # the version's rows read from the window (a sample where it was sampled)
    compared: int = 0
    verdict: SkewOutcome = "no_data"
    skewed_features: list[str] = field(default_factory=list)


@dataclass
class SkewVerdict:
    """The answer to ``monitor skew``: a line per feature, and the verdict over them."""

    model: str
    window_start: datetime
    window_end: datetime
    verdict: SkewOutcome
    rows_in_window: int
    rows_compared: int
    sampled: bool
    rel_tolerance: float
    max_mismatch_rate: float
    features: list[FeatureSkew] = field(default_factory=list)  # per version, then feature
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report_path: str | None = None
    versions: list[VersionSkew] = field(default_factory=list)  # the newest served first

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def skewed_features(self) -> list[str]:
        """The features skewed under any version (each named once)."""
        return list(dict.fromkeys(f.feature for f in self.features if f.skewed))

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "skewed_features": self.skewed_features,
            "exit_code": self.exit_code,
        }


def _feature_service(settings: Settings, model: str, version: str) -> str | None:
    return registry.show(settings, f"{model}/{version}").tags.get(FEATURE_SERVICE)


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


@dataclass
class _Tally:
    """One version's comparisons per feature, why other features were left out, notes, and
    how many of its rows were compared."""

    version: str
    rel_tolerance: float
    max_mismatch_rate: float
    features: dict[str, FeatureSkew] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    compared: int = 0

    def skip(self, feature: str, why: str) -> None:
        self.skipped.setdefault(feature, why)

    def summary(self, rows: int) -> VersionSkew:
        """The version's line: its ``rows`` in the window, compared rows, verdict."""
        skewed = [k for k in sorted(self.features) if self.features[k].skewed]
        verdict: SkewOutcome = ("skew" if skewed else "ok") if self.compared else "no_data"
        return VersionSkew(self.version, rows, self.compared, verdict, skewed)


def _offline_keys(join_keys: list[str], rows: pd.DataFrame, entities: pd.DataFrame) -> pd.DataFrame:
    """The entity frame of a point-in-time join: join keys, and each request's time."""
    import pandas as pd

    frame = pd.DataFrame({k: _join_key_column(entities[k]).to_numpy() for k in join_keys})
    frame["event_timestamp"] = pd.to_datetime(rows["ts"].to_numpy(), utc=True)
    return frame


def _examples_meta(rows: pd.DataFrame, entities: pd.DataFrame) -> pd.DataFrame:
    """What names a mismatching row: request id, entity key, request time."""
    import pandas as pd

    meta = pd.DataFrame(
        {
            "request_id": rows["request_id"].to_numpy(),
            "entity_key": entities["entity_key"].to_numpy(),
            "ts": rows["ts"].to_numpy(),
        }
    )
    meta["ts"] = pd.to_datetime(meta["ts"])
    return meta


def _compare_version(
    settings: Settings,
    model: str,
    logged: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    tally: _Tally,
) -> None:
    """Compare one version's logged (rows, served features, entities) with its FeatureService."""
    rows, served, entities = logged
    version = tally.version
    service = _feature_service(settings, model, version)
    if not service:
        tally.notes.append(
            f"v{version} was registered without a feature service: "
            f"{len(rows)} row(s) have nothing to compare offline"
        )
        return
    spec = features.describe_service(settings, service)
    absent = [k for k in spec.join_keys if k not in entities]
    if absent:
        tally.notes.append(
            f"v{version}: logged entities lack the join key(s) {', '.join(absent)} "
            f"of {service}: {len(rows)} row(s) not compared"
        )
        return
    keyed = entities[spec.join_keys].notna().all(axis=1).to_numpy()
    if not keyed.all():
        tally.notes.append(f"v{version}: {int((~keyed).sum())} row(s) without join keys")
    rows, served, entities = rows[keyed], served[keyed], entities[keyed]
    if not len(rows):
        return
    offline = features.training_set(
        settings, service, _offline_keys(spec.join_keys, rows, entities)
    )
    meta = _examples_meta(rows, entities)
    for name in served.columns:
        if name not in spec.features:
            tally.skip(
                name, f"not in feature service {service} (request-time input): no offline value"
            )
    for name in spec.features:
        if name not in served:
            tally.skip(name, f"defined by {service} but not logged by serving")
            continue
        part = _compare(
            service,
            name,
            served[name].reset_index(drop=True),
            offline[name],
            meta,
            tally.rel_tolerance,
            tally.max_mismatch_rate,
        )
        part.version = version
        tally.features[name] = part
    tally.compared = len(rows)


def skew(
    settings: Settings,
    model: str,
    window: str = "24h",
    sample: int | None = None,
    end: datetime | None = None,
    sync_first: bool = True,
    notify: warehouse.Notify | None = None,
    history: warehouse.HistorySource | None = None,
    version: str | None = None,
) -> SkewVerdict:
    """Compare served features with their offline point-in-time values over the window.

    Reads up to ``sample`` (default ``monitor.skew_sample_rows``) logged rows in
    the window ending at ``end`` (default now, naive UTC), joins each version's
    FeatureService offline as of each row's timestamp, and reports the mismatch
    rate per feature of each version (``versions``: each one's rows, compared
    rows and verdict; ``version`` keeps that one, noting the rows of other
    versions left out). The verdict is ``skew`` if any version's is. Writes
    ``skew.json`` under the reports directory and a row (kind ``skew``) per
    version in the ``reports`` index; ``history`` is what the sync first
    mirrors into the warehouse (see :func:`mlpipe.warehouse.sync`). Raises
    :class:`InvalidInput` for a bad window, :class:`NotFound` for a model
    without logged predictions, and what :func:`mlpipe.features.training_set`
    raises when the offline store fails; :class:`InvalidInput` in a project
    without a feature store (``feature_store = false``), where there is nothing to
    compare with (nothing synced, no report written).
    """
    if not settings.feature_store:
        raise InvalidInput(
            "skew compares served features with the feature store, and this project has none "
            "(feature_store = false in mlpipe.toml)"
        )
    current = window_ending(window, end)
    sample_rows = sample or settings.monitor.skew_sample_rows
    rel_tol = settings.monitor.skew_rel_tolerance
    max_rate = settings.monitor.skew_max_mismatch_rate
    win = read_logged(
        settings,
        model,
        current,
        sync_first=sync_first,
        history=history,
        notify=notify,
        sample_rows=sample_rows,
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
    _compare_versions(settings, win, ok, version, result)
    result.notes += pruned_notes(settings, current)
    verdicts = {v.verdict for v in result.versions}
    result.verdict = next((v for v in ("skew", "ok") if v in verdicts), "no_data")
    _publish(settings, result, current, notify)
    return result


def _compare_versions(
    settings: Settings,
    win: warehouse.PredictionWindow,
    ok: np.ndarray,
    version: str | None,
    result: SkewVerdict,
) -> None:
    """Each served version's ``ok`` rows against its own FeatureService, one after the other
    (the newest first), into ``result``: never two versions' rows in one figure."""
    assert win.entities is not None
    rows, served, entities = win.rows[ok], win.features[ok], win.entities[ok]
    names = win.rows["version"].astype(str)
    skipped: dict[str, str] = {}
    for name in _served_versions(win.rows, version, result.notes):
        mask = (rows["version"].astype(str) == name).to_numpy()
        tally = _Tally(name, result.rel_tolerance, result.max_mismatch_rate)
        _compare_version(settings, result.model, (rows[mask], served[mask], entities[mask]), tally)
        result.versions.append(tally.summary(int((names == name).sum())))
        result.features += [tally.features[k] for k in sorted(tally.features)]
        result.rows_compared += tally.compared
        result.notes += tally.notes
        for feature, why in tally.skipped.items():
            skipped.setdefault(feature, why)
    compared = {f.feature for f in result.features}
    result.skipped = [
        SkippedColumn(column=k, reason=why)
        for k, why in sorted(skipped.items())
        if k not in compared
    ]


def _served_versions(rows: pd.DataFrame, version: str | None, notes: list[str]) -> list[str]:
    """The versions in the window, the one that served last first; ``version`` keeps that one
    (noting the rows of other versions it leaves out)."""
    names = rows["version"].astype(str)
    last = rows.groupby(names)["ts"].max().sort_values(ascending=False, kind="stable")
    served = [str(v) for v in last.index]
    if version is None:
        return served
    if other := int((names != version).sum()):
        notes.append(f"{other} row(s) of other versions left out (v{version} only)")
    return [version] if version in served else []


def _publish(
    settings: Settings, result: SkewVerdict, window: Window, notify: warehouse.Notify | None
) -> None:
    """``skew.json`` and a row in the ``reports`` index per version (one without a version
    where no version served in the window)."""
    report = new_report(settings, "skew", result.model)
    result.report_path = str(report.document)
    findings = [
        Finding(
            v.verdict,
            {
                "rows": v.rows,
                "rows_compared": v.compared,
                "skewed": v.skewed_features,
                "mismatch_rate": {
                    f.feature: f.mismatch_rate for f in result.features if f.version == v.version
                },
            },
            version=v.version,
        )
        for v in result.versions
    ] or [Finding(result.verdict, {"rows_compared": 0, "skewed": [], "mismatch_rate": {}})]
    publish(settings, report, window, result.to_dict(), findings, notify)
