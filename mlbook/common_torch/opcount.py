"""Every operator one call runs, counted once: its FLOPs, the bytes of its
operands, its shape, and where in the step it ran.

``count_ops(fn)`` runs ``fn()`` once under a ``TorchDispatchMode``, which sees
each aten operator as it runs below autograd: the forward's, the backward's
(which autograd calls from C++) and the optimizer's. For each it keeps

- ``flops``: what ``torch.utils.flop_counter.FlopCounterMode`` counts for it,
  from the same registry; and, where the counter has no formula for the fused
  attention kernel of a CPU (it counts it as 0), the formula it uses for the
  same kernel on a GPU (the full s x s square, as the book counts it);
- ``bytes``: the bytes of its tensor operands, every input read once and
  every output written once (a tensor it updates in place counts as read and
  written). An operator whose outputs all share storage with its inputs (a
  view, a transpose, a detach) and that writes nothing moves no bytes. Caches
  are not modelled: an operand counts whole, even where it is already in
  cache or where a gather reads only some of its rows;
- ``gemm``: (m, n, k) of a matmul (``mm``, ``addmm``; per matrix of a
  ``bmm``, with the batch apart), what a matmul sweep times;
- ``attention``: the (b, heads, s_q, s_k, head_dim) of a fused attention
  kernel, forward or backward;
- where it ran: the stack of ``record_function`` scopes open around it (the
  dispatch mode sees their enter and exit as operators too), and the
  operator a profiler would show at the top: in the backward pass the
  autograd node being run (``MmBackward0``), in the forward the outermost
  torch function called from Python (``linear``), seen by a
  ``TorchFunctionMode`` beside the dispatch mode.

Nothing here decides what a bucket is or how long an operator takes: that is
mlbook.common.stepmodel's, torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import (
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from mlbook.common_torch.dtypes import DTYPES

_ENTER = "profiler::_record_function_enter_new"
_EXIT = "profiler::_record_function_exit"
_MATMULS = ("aten::mm", "aten::addmm")
_CPU_ATTENTION = "aten::_scaled_dot_product_flash_attention_for_cpu"
_ATTENTION_OPS = (
    _CPU_ATTENTION,
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
)
_NAMES = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class CountedOp:
    """One operator as it ran: what it is, what it did, and where."""

    name: str  # the aten operator, "aten::mm"
    flops: int  # FlopCounterMode's count (the CPU's fused attention added)
    bytes: int  # operand bytes read and written (0 for a view)
    dtype: str  # of its first floating-point operand ("fp32", "bf16", ...; "" if none)
    scopes: tuple  # the record_function scopes open around it, outermost first
    top: str  # the operator a profiler shows at the top (module docstring)
    gemm: tuple | None = None  # (m, n, k) of one matmul
    batch: int = 1  # matrices in a bmm (1 for mm and addmm)
    attention: tuple | None = None  # (b, heads, s_q, s_k, head_dim) of fused attention
    backward: bool = False  # run by autograd's backward pass


def _tensors(tree) -> list:
    """The tensors in nested tuples, lists and dicts (an operator's
    arguments and results), in order."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # a tensor without storage (a fake or sparse one)
        return None


_WRITES: dict = {}


def _written_arguments(func) -> tuple:
    """(position, name) of each argument the operator's schema marks as
    written (``Tensor(a!)``), once per operator."""
    if func not in _WRITES:
        _WRITES[func] = tuple(
            (i, a.name)
            for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        )
    return _WRITES[func]


def operand_bytes(func, args, kwargs, out) -> int:
    """Bytes an operator moves (module docstring): its tensor inputs read,
    its outputs and the inputs its schema says it writes written; 0 where it
    only makes views of its inputs."""
    inputs, outputs = _tensors((args, kwargs)), _tensors(out)
    written = []
    for i, name in _written_arguments(func):
        written += _tensors(args[i] if i < len(args) else kwargs.get(name))
    ids = {id(w) for w in written}
    fresh = [t for t in outputs if id(t) not in ids]
    stored = {_storage(t) for t in inputs} - {None}
    if not written and all(_storage(t) in stored for t in fresh):
        return 0  # a view: nothing new is written, nothing needs reading
    return sum(map(_nbytes, inputs)) + sum(map(_nbytes, written + fresh))


def _dtype(tensors) -> str:
    for t in tensors:
        if t.is_floating_point():
            return _NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return ""


def operator_flops(func, args, kwargs, out) -> int:
    """FlopCounterMode's count for one operator; for the CPU's fused
    attention kernel, which the counter does not know, the count it gives
    the same kernel on a GPU."""
    name = func._schema.name
    if name == _CPU_ATTENTION:
        q, k, v = args[:3]
        return sdpa_flop_count(q.shape, k.shape, v.shape)
    if name == _CPU_ATTENTION + "_backward":
        grad, q, k, v = args[:4]
        return sdpa_backward_flop_count(grad.shape, q.shape, k.shape, v.shape)
    count = flop_registry.get(func._overloadpacket)
    return int(count(*args, **kwargs, out_val=out)) if count else 0


def _shapes(name: str, args) -> dict:
    """The gemm or attention shape of a matmul or fused attention operator."""
    if name in _MATMULS:
        a, b = (args[0], args[1]) if name == "aten::mm" else (args[1], args[2])
        return {"gemm": (a.shape[0], b.shape[1], a.shape[1])}
    if name == "aten::bmm":
        a, b = args[0], args[1]  # (B, m, k) @ (B, k, n)
        return {"gemm": (a.shape[1], b.shape[2], a.shape[2]), "batch": a.shape[0]}
    base = name.removesuffix("_backward")
    if base in _ATTENTION_OPS:
        grad = name.endswith("_backward")
        q, k = (args[1], args[2]) if grad else (args[0], args[1])
        b, heads, s_q, hd = q.shape
        return {"attention": (b, heads, s_q, k.shape[2], hd)}
    return {}


class _TopFunctions(TorchFunctionMode):
    """Keeps the name of the outermost torch function running, if any (the
    mode is switched off inside its own handler, so calls nested in a torch
    function are not seen)."""

    def __init__(self):
        super().__init__()
        self.current = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.current = getattr(func, "__name__", str(func)).strip("_")
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.current = None


class _Counter(TorchDispatchMode):
    def __init__(self, functions: _TopFunctions):
        super().__init__()
        self.ops, self.scopes, self.functions = [], [], functions

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        out = func(*args, **kwargs)
        if name == _ENTER:
            self.scopes.append(args[0])
            return out
        if name == _EXIT:
            if self.scopes:
                self.scopes.pop()
            return out
        node = torch._C._current_autograd_node()
        if node is not None:
            top = "autograd::engine::evaluate_function: " + node.name()
        elif self.functions.current is not None:
            top = "aten::" + self.functions.current
        else:
            top = name
        self.ops.append(
            CountedOp(
                name,
                operator_flops(func, args, kwargs, out),
                operand_bytes(func, args, kwargs, out),
                _dtype(_tensors((args, kwargs)) + _tensors(out)),
                tuple(self.scopes),
                top,
                backward=node is not None,
                **_shapes(name, args),
            )
        )
        return out


def count_ops(fn) -> tuple:
    """Run ``fn()`` once and return a CountedOp for every operator it ran,
    in order (module docstring). ``fn`` runs for real: count a step that
    has been run once already, so that lazily created state (an optimizer's
    moments) is counted as a step finds it."""
    functions = _TopFunctions()
    counter = _Counter(functions)
    with functions, counter:
        fn()
    return tuple(counter.ops)
