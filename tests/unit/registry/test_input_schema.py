"""A version's typed inputs: read from the dataset, held to by serving, built into a DataFrame."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from mlpipe.errors import InvalidInput
from mlpipe.registry import InputSchema
from mlpipe.registry._input_schema import MAX_CATEGORIES, infer_schema


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "student": ["Yes", "No", "Yes"],
            "balance": [1.5, 20.0, 300.25],
            "cards": np.array([1, 2, 3], dtype=np.int64),
            "active": [True, False, True],
            "tier": pd.Categorical(["gold", "silver", "gold"], categories=["gold", "silver"]),
        }
    )


def test_the_schema_is_read_from_the_dataset_columns_and_survives_its_tag() -> None:
    schema = infer_schema(_frame())
    kinds = [(c.name, c.kind, c.dtype, c.categories) for c in schema.columns]
    assert kinds == [
        ("student", "string", "object", ("No", "Yes")),
        ("balance", "number", "float64", None),
        ("cards", "integer", "int64", None),
        ("active", "boolean", "bool", None),
        ("tier", "string", "category", ("gold", "silver")),
    ]
    assert not schema.numeric and not schema.frame
    assert InputSchema.from_json(schema.to_json()) == schema
    opened = schema.with_frame(True).opened({"tier"})
    assert InputSchema.from_json(opened.to_json()) == opened
    assert opened.column("tier").open and not opened.column("student").open  # type: ignore[union-attr]


def test_many_distinct_strings_are_free_text_and_odd_columns_are_refused() -> None:
    many = pd.DataFrame({"city": [f"c{i}" for i in range(MAX_CATEGORIES + 1)]})
    assert infer_schema(many).columns[0].categories is None
    with pytest.raises(InvalidInput, match="dataset column 'mixed' mixes strings"):
        infer_schema(pd.DataFrame({"mixed": ["a", 1]}))
    with pytest.raises(InvalidInput, match="dataset column 'when' has type datetime64"):
        infer_schema(pd.DataFrame({"when": pd.to_datetime(["2026-01-01"])}))


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("student", 1.0, "features.student: expected a string (allowed: No, Yes), got 1.0"),
        ("student", "Maybe", "features.student: unknown category 'Maybe' (allowed: No, Yes)"),
        ("student", "Y\x1bes", "features.student: control character U+001B not allowed"),
        ("balance", "lots", "features.balance: expected a number, got a string 'lots'"),
        ("balance", "NaN", "features.balance: expected a finite number, got 'NaN'"),
        ("cards", 2.5, "features.cards: expected an integer, got 2.5"),
        ("active", 2.0, "features.active: expected a boolean, got 2.0"),
        ("nope", 1.0, "features.nope: not an input of this model"),
    ],
)
def test_a_value_its_input_cannot_take_is_refused_naming_the_field(
    name: str, value: object, message: str
) -> None:
    schema = infer_schema(_frame())
    with pytest.raises(InvalidInput) as raised:
        schema.check(name, value)
    assert str(raised.value) == message


def test_values_are_handed_over_as_the_model_takes_them() -> None:
    schema = infer_schema(_frame())
    assert schema.check("student", "Yes") == "Yes"
    assert schema.check("balance", "1.5") == 1.5  # a number as a JSON string, as ever
    assert schema.check("cards", 3.0) == 3.0
    assert schema.check("active", 1.0) == 1.0
    assert schema.opened({"student"}).check("student", "Maybe") == "Maybe"


def test_rows_become_a_frame_with_the_training_names_and_dtypes() -> None:
    schema = infer_schema(_frame())
    frame = schema.to_frame([["Yes", 1.0, 2.0, 1.0, "gold"], ["No", 2.0, 3.0, 0.0, "silver"]])
    assert list(frame.columns) == ["student", "balance", "cards", "active", "tier"]
    assert [str(t) for t in frame.dtypes] == ["object", "float64", "int64", "bool", "category"]
    assert list(frame["tier"].cat.categories) == ["gold", "silver"]
    missing = schema.to_frame([[None, math.nan, math.nan, math.nan, None]])
    assert str(missing["cards"].dtype) == "float64" and missing["student"].isna().all()


def _scored(model: object, x: pd.DataFrame) -> tuple[InputSchema, np.ndarray]:
    """The schema and scores registration settles on (the path serving will take)."""
    from mlpipe.registry._register import _fit_schema
    from mlpipe.registry._sklearn_flavor import SklearnFlavor

    return _fit_schema(SklearnFlavor(), model, x)


def test_a_numeric_model_that_takes_an_array_keeps_the_array_path() -> None:
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = _frame()[["balance", "cards"]]
    y = [0, 1, 0]
    plain = LogisticRegression().fit(x, y)
    schema, scores = _scored(plain, x)
    assert not schema.frame
    assert scores.tolist() == plain.predict_proba(x.to_numpy())[:, 1].tolist()
    by_name = make_pipeline(
        ColumnTransformer([("n", StandardScaler(), ["balance", "cards"])]), LogisticRegression()
    ).fit(x, y)
    schema, scores = _scored(by_name, x)
    assert schema.frame  # selects columns by name: a DataFrame with the training names
    assert scores.tolist() == by_name.predict_proba(x)[:, 1].tolist()


def test_a_pandas_categorical_is_scored_with_its_categories_and_unknowns_follow_the_model() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    x = pd.DataFrame(
        {
            "tier": pd.Categorical(rng.choice(["gold", "silver", "bronze"], 200)),
            "balance": rng.normal(size=200),
        }
    )
    y = ((x["tier"] == "gold") ^ (x["balance"] > 0)).astype(int)
    model = HistGradientBoostingClassifier(categorical_features="from_dtype", max_iter=20)
    model.fit(x, y)
    schema, scores = _scored(model, x.head(100))
    assert schema.frame and schema.column("tier").dtype == "category"  # type: ignore[union-attr]
    assert scores.tolist() == model.predict_proba(x.head(100))[:, 1].tolist()
    assert schema.column("tier").open  # type: ignore[union-attr]  # unknown: treated as missing


def test_missing_values_are_recorded_and_a_schema_without_them_takes_none() -> None:
    frame = pd.DataFrame({"student": ["Yes", None, "No"], "balance": [1.0, 2.0, np.nan]})
    frame["cards"] = [1, 2, 3]
    schema = infer_schema(frame).with_nullable({"balance", "student"})
    assert [(c.name, c.missing, c.nullable) for c in schema.columns] == [
        ("student", True, True),
        ("balance", True, True),
        ("cards", False, False),
    ]
    assert InputSchema.from_json(schema.to_json()) == schema
    assert schema.nullable_names == {"student", "balance"}
    legacy = json.loads(schema.to_json())
    for column in legacy["columns"]:
        del column["missing"], column["nullable"]
    assert InputSchema.from_json(json.dumps(legacy)).nullable_names == frozenset()


@pytest.mark.parametrize("gap", [None, math.nan])
def test_a_missing_value_is_nan_where_the_model_takes_one_else_refused(gap: float | None) -> None:
    schema = infer_schema(_frame()).with_nullable({"student", "balance"})
    assert math.isnan(schema.check("student", gap))
    assert math.isnan(schema.check("balance", gap))
    with pytest.raises(InvalidInput) as caught:
        schema.check("cards", gap)
    assert str(caught.value) == (
        "features.cards: required request-time input; this model cannot take a missing value"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("balance", "features.balance: expected a number, got a boolean (true)"),
        ("cards", "features.cards: expected an integer, got a boolean (true)"),
        ("student", "features.student: expected a string, got a boolean (true)"),
    ],
)
def test_a_boolean_is_taken_only_by_a_boolean_input(name: str, message: str) -> None:
    schema = infer_schema(_frame())
    assert schema.check("active", True) == 1.0
    with pytest.raises(InvalidInput) as caught:
        schema.check(name, True)
    assert str(caught.value) == message
