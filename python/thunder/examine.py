"""thunder.examine: which torch calls of a program thunder runs natively, which fall back to
PyTorch, and which it cannot run.

    report = thunder.examine(model, x)     # runs model(x) eagerly, recording every torch call
    print(report)                          # the calls by kind, with counts
    report.failing                         # {name: (count, reason)}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from thunder.core import proxies

__all__ = ["examine", "ExamineReport"]


@dataclass
class ExamineReport:
    """Torch calls of one eager run, by what thunder does with them: name -> count (and, for the
    failing ones, the reason)."""

    native: dict = field(default_factory=dict)
    fallback: dict = field(default_factory=dict)
    failing: dict = field(default_factory=dict)

    @property
    def num_calls(self) -> int:
        return sum(self.native.values()) + sum(self.fallback.values()) + sum(c for c, _ in self.failing.values())

    def __str__(self) -> str:
        lines = [
            f"thunder.examine: {self.num_calls} torch calls of {len(self.native) + len(self.fallback) + len(self.failing)} "
            f"kinds: {len(self.native)} native, {len(self.fallback)} fall back to PyTorch, {len(self.failing)} cannot run"
        ]
        for title, table in (("native", self.native), ("fallback (run by PyTorch)", self.fallback)):
            if table:
                lines.append(f"{title}:")
                lines += [f"  {name} x{count}" for name, count in sorted(table.items())]
        if self.failing:
            lines.append("cannot run:")
            lines += [f"  {name} x{count}: {reason}" for name, (count, reason) in sorted(self.failing.items())]
        return "\n".join(lines)


_COMPARE = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "less": "lt", "less_equal": "le", "greater": "gt",
            "greater_equal": "ge"}
KNOWN_BOOL = "torch.Tensor.__bool__ (of a value known while tracing)"


class _Recorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self.first: dict = {}
        self.known_bools = 0
        # Values thunder knows while tracing (see proxies._note_range): id -> (tensor, range or
        # answer); the tensor is held so that its id is not reused.
        self._ranges: dict = {}
        self._answers: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__bool__ and args and id(args[0]) in self._answers:
            self.known_bools += 1
            return func(*args, **kwargs)
        self.counts[func] += 1
        if func not in self.first:
            self.first[func] = (args, kwargs)
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "").strip("_")
        # (while a program is traced torch.rand is thunder's wrapper of it: thunder._factory_for)
        if func in (getattr(torch.rand, "__wrapped__", torch.rand), torch.rand_like) and isinstance(out, torch.Tensor):
            self._ranges[id(out)] = (out, proxies.uniform_range(out.dtype))
        elif name in _COMPARE and len(args) == 2 and not kwargs and isinstance(out, torch.Tensor):
            if proxies.comparison_answer(_COMPARE[name], *args, self._range_of) is not None:
                self._answers[id(out)] = out
        return out

    def _range_of(self, x):
        hit = self._ranges.get(id(x)) if isinstance(x, torch.Tensor) else None
        return None if hit is None else hit[1]


def _is_attribute_read(func) -> bool:
    # Tensor.shape, Tensor.dtype, ... reach __torch_function__ as their descriptors' __get__.
    return getattr(func, "__name__", "") == "__get__"


def _meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def _classify(func, args, kwargs):
    """("native" | "fallback" | "failing", reason)."""
    if (func in proxies._TORCH_MAP or func in proxies._SPECIAL or func in proxies._TRACED_THROUGH
            or _is_attribute_read(func)):
        return "native", ""
    if func is torch.Tensor.__setitem__:
        return "native", ""
    if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs))):
        # No tensor argument (torch.is_grad_enabled(), a factory of constants): thunder runs it
        # while tracing, as the program does.
        return "native", ""
    hit = proxies._inplace_functional(func)
    if hit is not None:
        functional = hit[1]
        if functional is proxies._RETURN_SELF or isinstance(functional, proxies._Rule):
            return "native", ""
        kind, reason = _classify(functional, args, kwargs)
        return kind, reason
    if proxies._inplace_kwarg(func, args, kwargs) is not None or (kwargs and kwargs.get("out") is not None):
        return "native" if func in proxies._TORCH_MAP else "fallback", ""
    margs, mkwargs = pytree.tree_map(_meta, (args, kwargs))
    try:
        with torch._C.DisableTorchFunction():
            out = func(*margs, **mkwargs)
    except Exception as e:  # noqa: BLE001 - any failure means the call cannot be traced
        return "failing", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    for leaf in pytree.tree_leaves(out):
        if leaf is not None and not isinstance(leaf, torch.Tensor):
            return "failing", f"returns a {type(leaf).__name__}, whose value depends on the data"
    return "fallback", ""


def examine(fn, *args, **kwargs) -> ExamineReport:
    """Runs fn(*args, **kwargs) eagerly, recording every torch call, and reports which calls
    thunder runs natively, which fall back to PyTorch and which it cannot run. Prints the report
    and returns it."""
    from thunder import _compiling

    rec = _Recorder()
    # As under thunder.jit, torch.compiler.is_compiling() is True: the program takes the paths
    # it takes when traced.
    grad_enabled = torch.is_grad_enabled()
    try:
        with _compiling(), rec:
            fn(*args, **kwargs)
    finally:
        # Some programs leave grad mode changed when run under a TorchFunctionMode.
        torch.set_grad_enabled(grad_enabled)
    report = ExamineReport()
    if rec.known_bools:
        report.native[KNOWN_BOOL] = rec.known_bools
    for func, count in rec.counts.items():
        name = proxies._qualname(func)
        a, k = rec.first[func]
        kind, reason = _classify(func, a, k)
        if kind == "failing":
            report.failing[name] = (count, reason)
        else:
            getattr(report, kind)[name] = getattr(report, kind).get(name, 0) + count
    print(report)
    return report
