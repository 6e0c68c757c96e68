"""The first line of a driver's error, as the warehouse's messages quote it."""

from __future__ import annotations

from mlpipe.warehouse._sql import first_line


def test_first_line_of_an_error_or_its_name() -> None:
    assert first_line(ValueError("relation x does not exist\nLINE 1: SELECT")) == (
        "relation x does not exist"
    )
    assert first_line(ValueError("  \n")) == "ValueError"
