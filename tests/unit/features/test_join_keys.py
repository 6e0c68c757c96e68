"""Join keys checked against their entity's Feast value type, before any store read."""

from __future__ import annotations

from typing import Any

import pytest

from mlpipe.errors import InvalidInput
from mlpipe.features import check_join_key


@pytest.mark.parametrize(
    ("value", "value_type", "expected"),
    [
        (2**63 - 1, "INT64", 2**63 - 1),
        (-(2**63), "INT64", -(2**63)),
        ("42", "INT64", 42),
        (2**31 - 1, "INT32", 2**31 - 1),
        (7, "STRING", "7"),
        ("x", "STRING", "x"),
        (2**70, "STRING", str(2**70)),  # a string key holds any integer
        ("x", None, "x"),
    ],
)
def test_keys_that_fit_their_type(value: Any, value_type: str | None, expected: Any) -> None:
    assert check_join_key("customer_id", value, value_type) == expected


@pytest.mark.parametrize(
    ("value", "value_type", "words"),
    [
        (2**63, "INT64", "outside the INT64 range"),
        (-(2**63) - 1, "INT64", "outside the INT64 range"),
        (10**30, "INT64", "outside the INT64 range"),
        ("9223372036854775808", "INT64", "outside the INT64 range"),
        (2**31, "INT32", "outside the INT32 range"),
        ("12x", "INT64", "is not an integer (INT64)"),
        (True, "INT64", "expected an integer or a string"),
        (1.5, "STRING", "expected an integer or a string"),
    ],
)
def test_keys_that_do_not_fit_are_refused_naming_the_field(
    value: Any, value_type: str, words: str
) -> None:
    with pytest.raises(InvalidInput, match=r"^entity\.customer_id: ") as err:
        check_join_key("customer_id", value, value_type)
    assert words in str(err.value)
