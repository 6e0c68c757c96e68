"""A bad ``--eval-dataset`` is refused in one line, and nothing is registered (issue 28, item 5).

The model is a small pipeline the demo never made: a numeric input with gaps
(imputed), a string input any category of which it scores (``color``, open) and
one whose unseen categories and gaps it cannot score (``plan``, closed), and
classes named by text. Each refusal names the flag and the file, says what is
wrong (the row and the field for a value), and leaves no registry behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import registry
from mlpipe.config import load_settings
from mlpipe.errors import InvalidInput, NotFound

SPECIES = np.array(["setosa", "versicolor", "virginica"])


def frame(rows: int, seed: int) -> pd.DataFrame:
    """``amount`` (10 % gaps), ``color`` and ``plan`` (strings), ``species`` (3 classes)."""
    rng = np.random.default_rng(seed)
    amount = rng.normal(0, 1, rows)
    plan = rng.choice(["basic", "gold"], rows)
    logits = np.c_[amount, -amount, (plan == "gold") * 1.5] + rng.normal(0, 0.5, (rows, 3))
    out = pd.DataFrame(
        {
            "amount": amount,
            "color": rng.choice(["red", "green", "blue"], rows),
            "plan": plan,
            "species": SPECIES[logits.argmax(axis=1)],
        }
    )
    out.loc[rng.uniform(0, 1, rows) < 0.1, "amount"] = np.nan
    return out


def pipeline() -> Any:
    from sklearn.compose import make_column_transformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    columns = make_column_transformer(
        (SimpleImputer(), ["amount"]),
        (OneHotEncoder(handle_unknown="ignore"), ["color"]),
        (OneHotEncoder(handle_unknown="error"), ["plan"]),
    )
    return make_pipeline(columns, LogisticRegression(max_iter=500))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model.joblib and train.csv, made once."""
    import joblib

    root = tmp_path_factory.mktemp("eval-dataset")
    train = frame(400, 0)
    model = pipeline().fit(train[["amount", "color", "plan"]], train["species"])
    joblib.dump(model, root / "model.joblib")
    train.to_csv(root / "train.csv", index=False)
    return root


def refusal(
    home: Path,
    model: str,
    *,
    dataset: Path,
    model_path: Path,
    label: str,
    eval_dataset: Path,
    error: type[Exception] = InvalidInput,
) -> str:
    """The one-line refusal ``register`` raises for ``eval_dataset``, after checking that
    no registry was created."""
    settings = load_settings(home=home)
    with pytest.raises(error) as raised:
        registry.register(
            settings,
            model,
            dataset=dataset,
            model_path=model_path,
            label=label,
            eval_dataset=eval_dataset,
        )
    assert not settings.state_path.exists()  # no registry was created
    text = str(raised.value)
    assert "\n" not in text
    return text


def species_refusal(
    home: Path, inputs: Path, holdout: Path, error: type[Exception] = InvalidInput
) -> str:
    """:func:`refusal` of ``holdout`` for the module's ``species`` model and dataset."""
    return refusal(
        home,
        "species",
        dataset=inputs / "train.csv",
        model_path=inputs / "model.joblib",
        label="species",
        eval_dataset=holdout,
        error=error,
    )


def _holdout(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], Path]:
    def write(path: Path) -> Path:
        change(frame(200, 1)).to_csv(path, index=False)
        return path

    return write


def _set(column: str, row: int, value: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(f: pd.DataFrame) -> pd.DataFrame:
        f = f.astype({column: object})
        f.loc[row, column] = value
        return f

    return change


def _bytes(content: bytes) -> Callable[[Path], Path]:
    def write(path: Path) -> Path:
        path.write_bytes(content)
        return path

    return write


CASES: dict[str, tuple[Callable[[Path], Path], type[Exception], str]] = {
    "missing file": (lambda p: p, NotFound, "--eval-dataset file {path} does not exist"),
    "empty file": (
        _bytes(b""),
        InvalidInput,
        "--eval-dataset {name} is empty (no columns, no rows)",
    ),
    "header only": (
        _bytes(b"amount,color,plan,species\n"),
        InvalidInput,
        "--eval-dataset {name} has no rows (only its header)",
    ),
    "not a table": (
        _bytes(b"\x00\x01 not parquet"),
        InvalidInput,
        "--eval-dataset {name} is not a readable CSV/Parquet file",
    ),
    "no label column": (
        _holdout(lambda f: f.rename(columns={"species": "target"})),
        InvalidInput,
        "--eval-dataset {name} has no label column 'species' (the --label of the registration "
        "dataset; its columns: amount, color, plan, target)",
    ),
    "an input missing": (
        _holdout(lambda f: f.drop(columns=["plan"])),
        InvalidInput,
        "--eval-dataset {name} lacks input column(s) the model takes: plan "
        "(its columns: amount, color, species)",
    ),
    "a label naming no class": (
        _holdout(_set("species", 5, "dog")),
        InvalidInput,
        "--eval-dataset {name}: label(s) 'dog' in column 'species' name no class of the model "
        "(its classes: setosa, versicolor, virginica)",
    ),
    "no label at all": (
        _holdout(lambda f: f.assign(species=np.nan)),
        InvalidInput,
        "--eval-dataset {name}: no row has a label in column 'species'",
    ),
    "an unseen category the model cannot score": (
        _holdout(_set("plan", 7, "platinum")),
        InvalidInput,
        "--eval-dataset {name}, row 8: features.plan: unknown category 'platinum' "
        "(allowed: basic, gold)",
    ),
    "a gap the model cannot take": (
        _holdout(_set("plan", 3, np.nan)),
        InvalidInput,
        "--eval-dataset {name}, row 4: features.plan: required request-time input",
    ),
    "text in a number column": (
        _holdout(_set("amount", 11, "twelve")),
        InvalidInput,
        "--eval-dataset {name}, row 12: features.amount: expected a number, got a string 'twelve'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_holdout_is_refused_and_nothing_is_registered(
    home: Path, inputs: Path, case: str
) -> None:
    make, error, message = CASES[case]
    suffix = ".parquet" if case == "not a table" else ".csv"
    holdout = make(home / f"holdout{suffix}")
    text = species_refusal(home, inputs, holdout, error)
    assert text.startswith(message.format(path=holdout, name=holdout.name)), text


def test_the_registration_dataset_is_no_holdout(home: Path, inputs: Path) -> None:
    copy = home / "copy.csv"
    copy.write_bytes((inputs / "train.csv").read_bytes())
    text = species_refusal(home, inputs, copy)
    assert "copy.csv is the registration dataset itself" in text, text


def test_a_regression_holdout_needs_numeric_labels(home: Path, tmp_path: Path) -> None:
    import joblib
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(2)
    train = pd.DataFrame({"rooms": rng.normal(5, 1, 200)}).assign(price=lambda f: 30 * f["rooms"])
    joblib.dump(LinearRegression().fit(train[["rooms"]], train["price"]), home / "m.joblib")
    train.to_csv(home / "train.csv", index=False)
    holdout = train.head(20).astype({"price": object})
    holdout.loc[3, "price"] = "cheap"
    holdout.to_csv(home / "holdout.csv", index=False)
    text = refusal(
        home,
        "house",
        dataset=home / "train.csv",
        model_path=home / "m.joblib",
        label="price",
        eval_dataset=home / "holdout.csv",
    )
    assert text == (
        "--eval-dataset holdout.csv: label(s) 'cheap' in column 'price' are not numbers "
        "(a regression is judged on numeric labels)"
    )
