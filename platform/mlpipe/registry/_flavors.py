"""The flavor table: a name → class table (``FLAVORS``) and the lookups into it.

A version records its flavor as the tag ``mlpipe.flavor``; versions registered
before flavors existed have none and are ``sklearn``. What each flavor does is
in :mod:`._model_flavor`; the flavors themselves are in their own modules.
"""

from __future__ import annotations

from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.registry import _tags
from mlpipe.registry._model_flavor import ModelFlavor
from mlpipe.registry._sklearn_flavor import SklearnFlavor
from mlpipe.registry._torch_flavor import TorchFlavor

FLAVORS: dict[str, type[ModelFlavor]] = {"sklearn": SklearnFlavor, "torch": TorchFlavor}


def for_candidate(model: Any) -> ModelFlavor:
    """The flavor of a candidate object; raises InvalidInput for anything else."""
    for cls in FLAVORS.values():
        flavor = cls()
        if flavor.accepts(model):
            return flavor
    raise InvalidInput(
        f"a {type(model).__name__} is not a model mlpipe registers: a classifier with "
        "predict_proba (scikit-learn, LightGBM) or a torch module"
    )


def for_version(tags: dict[str, str]) -> ModelFlavor:
    """The flavor a registered version was stored with (``sklearn`` if it predates the tag)."""
    name = tags.get(_tags.FLAVOR, "sklearn")
    cls = FLAVORS.get(name)
    if cls is None:
        raise InvalidInput(f"unknown model flavor {name!r} (known: {', '.join(FLAVORS)})")
    return cls()
