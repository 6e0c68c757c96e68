"""A version's typed inputs: names, kinds, categories, and how serving hands them to the model.

At registration the schema is read from the dataset's columns (see
:func:`infer_schema`) and recorded as the version tag ``mlpipe.input_schema``
(MLflow's signature holds the names and types too, but not the categories).
Each input has a kind:

- ``number`` (a float column), ``integer`` (an integer column), ``boolean``
  (a bool column): a request gives a JSON number (``true``/``false`` or 0/1
  for a boolean);
- ``string``: a string or pandas categorical column, with the categories
  seen in the dataset (up to ``MAX_CATEGORIES``; beyond that any string is
  taken). A request gives a JSON string. An unknown category is refused with
  the allowed values, unless the model scores it: registration probes each
  string input with a value never seen (``UNSEEN``), and an input the model
  takes it for (a ``OneHotEncoder(handle_unknown="ignore")``) is ``open``.

Missing values: ``missing`` says the dataset had some in the column;
``nullable`` says the model scores a missing value there (registration
probes each input with NaN, or None for a string, as it probes unseen
categories). A nullable input takes JSON ``null``, an omitted key and (a
number) ``NaN``, handed to the model as NaN (strings too); any other input refuses
them, naming the field. A version registered before these fields has none
nullable.

``frame`` says how the model is scored: False, on a float ndarray in the
inputs' order (every input numeric and the model takes an array: the fast
path, unchanged); True, on a pandas DataFrame with the training column names
and dtypes (string inputs, or a model that selects columns by name).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput

if TYPE_CHECKING:
    import pandas as pd

MAX_CATEGORIES = 200
UNSEEN = "__mlpipe_unseen_category__"
NUMERIC_KINDS = ("number", "integer", "boolean")
OIP_TYPES = {"number": "FP64", "integer": "INT64", "boolean": "BOOL", "string": "BYTES"}
_SHOWN = 20  # categories named in a refusal
_KIND_WORDS = {
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "string": "a string",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class InputColumn:
    """One model input: its name, kind, training dtype and (strings) categories."""

    name: str
    kind: str
    dtype: str
    categories: tuple[str, ...] | None = None
    open: bool = False  # an unknown category is scored (the model handles it)
    missing: bool = False  # the dataset had missing values in this column
    nullable: bool = False  # the model scores a missing value (probed at registration)

    @property
    def empty(self) -> float:
        """A missing value as the model gets it: NaN, as pandas reads a gap in any column
        (a ``SimpleImputer`` or ``OneHotEncoder`` takes NaN for missing, not None)."""
        return math.nan

    @property
    def expected(self) -> str:
        """The input's kind in words, for messages: ``a number``, ``a string``..."""
        return _KIND_WORDS.get(self.kind, "a number")

    def check(self, value: Any) -> Any:
        """``value`` as the request parsed it, as the model takes it; else InvalidInput.

        A missing value (None, or NaN) is :attr:`empty` for a nullable input and
        refused for any other; a boolean is refused unless the input is one.
        """
        if value is None or value != value:  # only NaN differs from itself
            return self.missing_value()
        if type(value) is bool and self.kind != "boolean":
            raise InvalidInput(
                f"features.{self.name}: expected {self.expected}, got a boolean "
                f"({str(value).lower()})"
            )
        if self.kind == "string":
            return self._string(value)
        if type(value) is float and not math.isfinite(value):
            raise InvalidInput(f"features.{self.name}: expected a finite number, got {value!r}")
        if type(value) is str:
            value = number_from_text(self.name, value)
        if self.kind == "integer" and not float(value).is_integer():
            raise InvalidInput(f"features.{self.name}: expected an integer, got {value!r}")
        if self.kind == "boolean" and float(value) not in (0.0, 1.0):
            raise InvalidInput(f"features.{self.name}: expected a boolean, got {value!r}")
        return float(value)

    def missing_value(self) -> Any:
        """:attr:`empty` if the model takes a missing value here; else InvalidInput."""
        if not self.nullable:
            raise InvalidInput(missing_refused(self.name))
        return self.empty

    def _string(self, value: Any) -> str:
        if type(value) is not str:
            raise InvalidInput(
                f"features.{self.name}: expected a string{self._allowed()}, got {value!r}"
            )
        control = _CONTROL.search(value)
        if control is not None:  # the prediction log and the warehouse keep the string
            code = f"U+{ord(control.group()):04X}"
            raise InvalidInput(f"features.{self.name}: control character {code} not allowed")
        if self.categories is not None and not self.open and value not in self.categories:
            raise InvalidInput(f"features.{self.name}: unknown category {value!r}{self._allowed()}")
        return value

    def _allowed(self) -> str:
        if self.categories is None or self.open:
            return ""
        shown = ", ".join(self.categories[:_SHOWN])
        more = f" and {len(self.categories) - _SHOWN} more" if len(self.categories) > _SHOWN else ""
        return f" (allowed: {shown}{more})"


def missing_refused(name: str) -> str:
    """The refusal of a missing value (null, NaN or an omitted key) for input ``name``."""
    return f"features.{name}: required request-time input; this model cannot take a missing value"


def number_from_text(name: str, text: str) -> float:
    """A number given as a JSON string (``"1.5"``), as ``/predict`` has always taken one."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"features.{name}: expected a number, got a string {text!r}") from None
    if not math.isfinite(value):
        raise InvalidInput(f"features.{name}: expected a finite number, got {text!r}")
    return value


@dataclass(frozen=True)
class InputSchema:
    """A version's inputs in order, and whether the model is scored on a DataFrame."""

    columns: tuple[InputColumn, ...]
    frame: bool = False

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def numeric(self) -> bool:
        return all(c.kind in NUMERIC_KINDS for c in self.columns)

    @property
    def nullable_names(self) -> frozenset[str]:
        """The inputs the model takes a missing value for."""
        return frozenset(c.name for c in self.columns if c.nullable)

    def column(self, name: str) -> InputColumn | None:
        return next((c for c in self.columns if c.name == name), None)

    def check(self, name: str, value: Any) -> Any:
        """``value`` for input ``name`` as the model takes it; InvalidInput naming the field,
        and the expected type or the allowed categories, if it cannot be."""
        index = self.__dict__.get("_index")
        if index is None:
            index = {c.name: c for c in self.columns}
            object.__setattr__(self, "_index", index)
        column = index.get(name)
        if column is None:
            raise InvalidInput(f"features.{name}: not an input of this model")
        return column.check(value)

    def to_json(self) -> str:
        return json.dumps(
            {
                "frame": self.frame,
                "columns": [_column_json(c) for c in self.columns],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> InputSchema:
        data = json.loads(text)
        columns = tuple(
            InputColumn(
                name=c["name"],
                kind=c["kind"],
                dtype=c["dtype"],
                categories=tuple(c["categories"]) if c.get("categories") is not None else None,
                open=bool(c.get("open", False)),
                missing=bool(c.get("missing", False)),
                nullable=bool(c.get("nullable", False)),
            )
            for c in data["columns"]
        )
        return cls(columns, frame=bool(data.get("frame", False)))

    def with_frame(self, frame: bool) -> InputSchema:
        return replace(self, frame=frame)

    def opened(self, names: set[str]) -> InputSchema:
        """The schema with the string inputs ``names`` taking unknown categories."""
        return replace(self, columns=tuple(replace(c, open=c.name in names) for c in self.columns))

    def with_nullable(self, names: set[str]) -> InputSchema:
        """The schema with the inputs ``names`` taking a missing value."""
        return replace(
            self, columns=tuple(replace(c, nullable=c.name in names) for c in self.columns)
        )

    def to_frame(self, rows: list[list[Any]]) -> pd.DataFrame:
        """Rows (values in the inputs' order) as a DataFrame with the training names and dtypes."""
        import pandas as pd

        frame = pd.DataFrame(rows, columns=self.names)
        for c in self.columns:
            frame[c.name] = _as_dtype(frame[c.name], c)
        return frame


def _column_json(column: InputColumn) -> dict[str, Any]:
    data: dict[str, Any] = {"name": column.name, "kind": column.kind, "dtype": column.dtype}
    if column.kind == "string":
        data.update(categories=column.categories, open=column.open)
    data.update(missing=column.missing, nullable=column.nullable)
    return data


def _as_dtype(values: pd.Series, column: InputColumn) -> pd.Series:
    import pandas as pd

    if column.dtype == "category":
        return values.astype(pd.CategoricalDtype(list(column.categories or ())))
    if column.kind == "string":
        return values.astype(column.dtype if column.dtype == "string" else object)
    if values.isna().any():  # a missing number: NaN, which no int or bool column holds
        return values.astype("float64")
    return values.astype(column.dtype)


def infer_schema(frame: pd.DataFrame) -> InputSchema:
    """The schema of the dataset's model inputs (``frame`` holds exactly them, in order)."""
    return InputSchema(
        tuple(
            replace(_column(str(name), frame[name]), missing=bool(frame[name].isna().any()))
            for name in frame.columns
        )
    )


def _column(name: str, values: pd.Series) -> InputColumn:
    import pandas as pd
    from pandas.api import types

    dtype = values.dtype
    if types.is_bool_dtype(dtype):
        return InputColumn(name, "boolean", "bool")
    if types.is_integer_dtype(dtype):
        return InputColumn(name, "integer", "int64")
    if types.is_float_dtype(dtype):
        return InputColumn(name, "number", "float64")
    if isinstance(dtype, pd.CategoricalDtype):
        seen = [str(v) for v in dtype.categories]
        return InputColumn(name, "string", "category", tuple(seen))
    if not (types.is_object_dtype(dtype) or types.is_string_dtype(dtype)):
        raise InvalidInput(
            f"dataset column {name!r} has type {dtype}; model inputs are numbers, "
            "integers, booleans or strings"
        )
    present = values.dropna()
    if not all(isinstance(v, str) for v in present):
        raise InvalidInput(f"dataset column {name!r} mixes strings with other values")
    seen = sorted(set(present))
    categories = tuple(seen) if len(seen) <= MAX_CATEGORIES else None
    kept = "string" if str(dtype) == "string" else "object"
    return InputColumn(name, "string", kept, categories)
