"""A torch module as a ``torch.export`` program with a dynamic batch dimension.

What the torch flavor stores and serves (decision 033): a candidate module
(eager, TorchScript through torch's converter, or an export whose batch is
fixed) is exported once, with ``Dim("batch")`` traced on ``EXAMPLE_ROWS`` zero
rows, and the result kept while the candidate lives and its weights are
unchanged, so that a registration reads the task from, scores and logs one
program.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from mlpipe.errors import InvalidInput
from mlpipe.registry._client import first_line

EXAMPLE_ROWS = 8  # the example batch an export traces (above 1: torch specializes 0 and 1)

# Candidates already exported (by task_of, first in a registration): the state of their
# weights then, and the exported module.
_EXPORTED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def exported_module(model: Any) -> Any:
    """``model`` as the module of a ``torch.export`` program with a dynamic batch dimension.

    A module that already is one is returned as it is; anything else (an export
    with a fixed batch too) is exported once (TorchScript through torch's
    converter) and the result kept while ``model`` lives and its weights are
    unchanged. Raises InvalidInput (one line) when it cannot be exported.
    """
    if is_exported(model) and dynamic_batch(model):
        return model
    cached = cached_export(model)
    if cached is None:
        cached = export_program(model, input_width(model), input_dtype(model)).module()
        _EXPORTED[model] = (_weights_state(model), cached)
    return cached


def cached_export(model: Any) -> Any:
    """The export kept for ``model``, unless its weights changed since (trained further)."""
    state, module = _EXPORTED.get(model, (None, None))
    return module if state is not None and state == _weights_state(model) else None


def _weights_state(model: Any) -> tuple[tuple[int, int], ...]:
    """Which tensors the module holds and how often each was changed in place."""
    tensors = [*model.parameters(), *model.buffers()]
    return tuple((id(t), t._version) for t in tensors)


def export_program(model: Any, width: int, dtype: Any) -> Any:
    """The ExportedProgram of ``model`` on ``[batch, width]`` inputs, ``batch`` dynamic."""
    import torch
    from torch.export import Dim

    example = torch.zeros(EXAMPLE_ROWS, width, dtype=dtype)
    try:
        if isinstance(model, torch.jit.ScriptModule):
            model = _from_torchscript(model, example)
        with warnings.catch_warnings(), quiet_torch_logs():  # torch's notes: not the user's
            warnings.simplefilter("ignore")
            return torch.export.export(
                in_eval_mode(model), (example,), dynamic_shapes=({0: Dim("batch")},), strict=False
            )
    except InvalidInput:
        raise
    except Exception as exc:  # noqa: BLE001 - torch.export raises many kinds here
        raise InvalidInput(
            f"the torch model cannot be exported with torch.export on [batch, {width}] inputs "
            f"with a dynamic batch: {type(exc).__name__}: {first_line(exc)}"
        ) from exc


def _from_torchscript(model: Any, example: Any) -> Any:
    """A TorchScript module converted to an eager-equivalent exported module."""
    from torch._export.converter import TS2EPConverter

    try:
        with warnings.catch_warnings(), quiet_torch_logs():
            warnings.simplefilter("ignore")
            return TS2EPConverter(model.eval(), (example,)).convert().module()
    except Exception as exc:  # noqa: BLE001 - the converter raises many kinds
        raise InvalidInput(
            "the TorchScript model cannot be converted to torch.export "
            f"({type(exc).__name__}: {first_line(exc)}); save the nn.Module instead, "
            "as a .pt2 file (torch.export.save) or whole (torch.save)"
        ) from exc


def is_exported(model: Any) -> bool:
    """Whether ``model`` is the module of a ``torch.export`` program (its input has a shape)."""
    return _example_input(model) is not None


def dynamic_batch(model: Any) -> bool:
    """Whether an exported module takes any number of rows (a ``.pt2`` file may fix it)."""
    import torch

    return isinstance(_example_input(model).shape[0], torch.SymInt)


def in_eval_mode(model: Any) -> Any:
    """``model`` in eval mode (an exported module has no train mode to leave)."""
    return model if is_exported(model) else model.eval()


def _example_input(model: Any) -> Any:
    """The fake tensor ``torch.export`` recorded for an exported module's first input."""
    import torch

    if not isinstance(model, torch.fx.GraphModule):
        return None
    for node in model.graph.nodes:
        if node.op == "placeholder":
            return node.meta.get("val")
    return None


def input_width(model: Any) -> int:
    """How many inputs a row of ``model`` has: from its export, else its first matrix weight."""
    import torch

    example = _example_input(model)
    if example is not None:
        return int(example.shape[-1])
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            return int(module.in_features)
    for param in model.parameters():
        if param.ndim == 2:
            return int(param.shape[1])
    raise InvalidInput(
        "mlpipe cannot tell how many inputs this torch model takes (it has no Linear layer); "
        "export it with torch.export.save and register the .pt2 file"
    )


def input_dtype(model: Any) -> Any:
    """The dtype ``model`` takes: its export's, else its first floating parameter's."""
    import torch

    example = _example_input(model)
    if example is not None:
        return example.dtype
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """torch's loggers silenced (their levels follow ``torch``'s): on a user's bad file or
    module torch logs a traceback or a graph dump before it raises; the user gets one line."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # and its graph dumps
            yield
    finally:
        logger.setLevel(level)
