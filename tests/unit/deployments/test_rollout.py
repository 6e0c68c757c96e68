"""``parse_steps``: the canary weights of a rollout, checked before anything changes."""

import pytest

from mlpipe.deployments import parse_steps
from mlpipe.errors import InvalidInput


def test_steps_are_percentages_in_order() -> None:
    assert parse_steps("5,25,50,100") == [5.0, 25.0, 50.0, 100.0]
    assert parse_steps(" 10 , 100 ,") == [10.0, 100.0]


@pytest.mark.parametrize("text", ["", "a,b", "0,50", "50,25", "5,5,100", "5,150"])
def test_bad_steps_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="bad steps"):
        parse_steps(text)
