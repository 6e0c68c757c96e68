"""The runtime slot the layers are given, and the one readiness and saturation checks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mlpipe.serving import Admission, RuntimeSlot
from mlpipe.serving._error_bodies import NotReady, Overloaded, error_for


def test_an_empty_slot_or_a_loading_runtime_is_not_ready() -> None:
    loading: Any = SimpleNamespace(ready=False)
    for slot in (RuntimeSlot(), RuntimeSlot(loading)):
        assert not slot.ready()
        with pytest.raises(NotReady) as caught:
            slot.ready_runtime()
        assert error_for(caught.value) == {
            "error": "not ready: models still loading",
            "status": 503,
        }


def test_the_slot_filled_later_is_seen_by_whoever_was_given_it() -> None:
    slot = RuntimeSlot()
    runtime: Any = SimpleNamespace(ready=True)
    slot.runtime = runtime  # what the service's __init__ does
    assert slot.ready() and slot.ready_runtime() is runtime


def test_saturation_is_one_refusal() -> None:
    admission = Admission(1)
    assert admission.refusal() is None
    admission.hold()
    refusal = admission.refusal()
    assert isinstance(refusal, Overloaded)
    assert error_for(refusal) == {"error": "overloaded: 1 requests in flight", "status": 503}
    admission.release()
    assert admission.refusal() is None
