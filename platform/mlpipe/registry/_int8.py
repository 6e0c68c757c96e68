"""INT8 Linear layers for a ``torch.export`` program, with nothing but ATen ops.

torch's dynamic quantization (``torch.ao.quantization``) swaps ``nn.Linear``
modules, which an exported program no longer has, and its packed weights are
TorchScript objects that a pickle-free ``pt2`` archive cannot hold. Here each
``aten.linear`` of an exported module whose weight the module holds becomes an
:class:`Int8Linear`: the weight stored in INT8 with one scale (per-tensor,
symmetric), the input rounded to INT8 levels per row at run time, the product
taken in float32 on those levels (``aten._int_mm``, the INT8 kernel, is 25 ×
slower than the float32 product on the CPU in torch 2.13; decision 033). Per
row, not per batch, so a row's output never depends on the rows batched with
it. No dtype conversion node, so the program names no device. Imported only when
an INT8 version is made (it imports torch).
"""

from __future__ import annotations

from typing import Any

import torch

LEVELS = 127  # symmetric INT8: -127..127


class Int8Linear(torch.nn.Module):
    """``y = x Wᵀ + b`` with ``W`` in INT8 (one scale) and ``x`` rounded to INT8 per row."""

    weight_t: torch.Tensor  # INT8, [in, out]
    weight_scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        weight = weight.detach().float()
        scale = weight.abs().max().clamp(min=1e-12) / LEVELS
        quantized = torch.round(weight / scale).clamp(-LEVELS, LEVELS).to(torch.int8)
        self.register_buffer("weight_t", quantized.t().contiguous())
        self.register_buffer("weight_scale", scale.reshape(1))
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / LEVELS
        levels = torch.round(rows / scale).clamp(-LEVELS, LEVELS)  # INT8 values, as floats
        y = (levels @ (self.weight_t * self.weight_scale)) * scale  # INT8 × float promotes
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


def int8_linears(module: Any) -> int:
    """Replace, in the graph of an exported ``module`` (in place), each ``aten.linear`` whose
    weight and bias the module holds by an :class:`Int8Linear`; how many were replaced."""
    graph, replaced = module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.linear.default:
            continue
        x, weight, *rest = node.args
        bias = rest[0] if rest else None
        if weight.op != "get_attr" or (bias is not None and bias.op != "get_attr"):
            continue
        name = f"int8_linear_{replaced}"
        held = None if bias is None else _tensor(module, bias.target)
        module.add_submodule(name, Int8Linear(_tensor(module, weight.target), held))
        with graph.inserting_before(node):
            node.replace_all_uses_with(graph.call_module(name, (x,)))
        graph.erase_node(node)
        replaced += 1
    for node in list(graph.nodes):  # the float weights, now unused, are not stored
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)
            owner, _, leaf = str(node.target).rpartition(".")
            delattr(module.get_submodule(owner), leaf)
    module.recompile()
    return replaced


def _tensor(module: Any, target: str) -> torch.Tensor:
    owner, _, leaf = target.rpartition(".")
    tensor: torch.Tensor = getattr(module.get_submodule(owner), leaf)
    return tensor
