"""Symbolic sizes while a program is traced (docs/symbolic_sizes.md).

A dimension of an input marked dynamic (`torch._dynamo.mark_dynamic(x, dim)`, or, with
`thunder.jit(fn, cache="symbolic values")`, a dimension whose size changed between two calls) is
a size symbol s<k> of the trace. The program sees its sizes as `SymInt`s: ints that carry an
affine expression over the symbols next to their value at trace time (the hint). Sums, differences
and products by constants stay symbolic; a thunder op that receives one records the expression,
and the trace computes it again from the inputs' sizes at each call. Anything else the program
asks of one is answered with the hint and recorded as a guard, so the trace is reused only where
the answer is the same:

- comparisons and `bool()` record their outcome (`if n > 1:` holds for every size it serves);
- `int()`, `__index__` (a Python `range(n)`, a list index), `float()`, hashing and a product of two
  symbolic ints pin the expression to its hint (the trace then serves that value only).
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import threading

import torch

from thunder import _C

_DEBUG = bool(os.environ.get("THUNDER_DEBUG_SYMBOLIC"))

__all__ = ["SymInt", "SymSize", "is_symbolic"]


def _terms_add(a: tuple, b: tuple, sign: int = 1) -> tuple:
    out = dict(a)
    for k, c in b:
        out[k] = out.get(k, 0) + sign * c
    return tuple(sorted((k, c) for k, c in out.items() if c != 0))


def _parts(x):
    """(hint, constant, terms) of an int (a bool is one, as Python computes with it) or a SymInt;
    None for anything else."""
    if isinstance(x, SymInt):
        return x.hint, x.const, x.terms
    if not isinstance(x, int):
        return None
    x = int(x)
    return x, x, ()


def _make(hint: int, const: int, terms: tuple):
    return SymInt(hint, const, terms) if terms else hint


_tls = threading.local()


@contextlib.contextmanager
def tracing_scope():
    """While a call is traced: the SymInts made are recorded, and when the outermost trace ends
    each becomes the constant it was traced at. A size the program stored where it outlives the
    trace (`sizes.append(x.shape[0])` on a global list, an object's attribute) is then the int
    eager stores: read by a later trace, its expression would be over that trace's symbols, and
    its value the new call's size, not the stored one."""
    depth = getattr(_tls, "depth", 0)
    if depth == 0:
        _tls.made = []
    _tls.depth = depth + 1
    try:
        yield
    finally:
        _tls.depth = depth
        if depth == 0:
            made, _tls.made = _tls.made, None
            for s in made:
                s.const, s.terms = s.hint, ()


class SymInt:
    """An int computed from size symbols: `hint` its value at trace time, `const + sum(c * s_k)`
    its expression."""

    __slots__ = ("hint", "const", "terms")

    def __init__(self, hint: int, const: int, terms: tuple):
        self.hint, self.const, self.terms = int(hint), int(const), tuple((int(k), int(c)) for k, c in terms)
        made = getattr(_tls, "made", None)
        if made is not None and self.terms:
            made.append(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # torch.arange(n), torch.zeros(n, 4): a torch function given a symbolic int is traced as a
        # tensor method is (PyTorch's argument parser hands over objects with __torch_function__).
        from thunder.core.proxies import dispatch

        if not any(is_symbolic(a) for a in torch.utils._pytree.tree_leaves((args, kwargs))):
            # Sizes a finished trace left (constants now): the call as PyTorch makes it with ints.
            args, kwargs = torch.utils._pytree.tree_map(lambda a: a.hint if isinstance(a, SymInt) else a,
                                                        (args, kwargs or {}))
            if not any(type(a) is _C.TensorProxy for a in torch.utils._pytree.tree_leaves((args, kwargs))):
                with torch._C.DisableTorchFunction():
                    return func(*args, **kwargs)
        return dispatch(func, args, kwargs or {})

    @property
    def _thunder_sym(self):
        return self.hint, self.const, self.terms

    def __repr__(self):
        if not self.terms:
            return repr(self.hint)  # (a size its trace left: the int it stands for)
        return f"SymInt({self._expr()}, hint={self.hint})"

    def _expr(self) -> str:
        s = ""
        for k, c in self.terms:
            a = abs(c)
            s += ("-" if c < 0 else "") if not s else (" - " if c < 0 else " + ")
            s += (f"{a}*" if a != 1 else "") + f"s{k}"
        if self.const:
            s += f" {'+' if self.const > 0 else '-'} {abs(self.const)}"
        return s

    # ---- what pins or guards --------------------------------------------------------------------

    def _guard(self, less_than: bool, outcome: bool, const: int, terms: tuple) -> None:
        if _DEBUG:
            import traceback

            print(f"thunder: the program compares {self!r}:", "".join(traceback.format_stack(limit=4)[:-2]),
                  file=sys.stderr)
        if terms:
            _C.add_size_guard(const, terms, less_than, outcome)

    def _pin(self) -> int:
        """The hint, guarded: the trace serves only sizes where this expression has this value."""
        if _DEBUG:
            import traceback

            print(f"thunder: {self!r} pinned at", "".join(traceback.format_stack(limit=4)[:-1]), file=sys.stderr)
        self._guard(False, True, self.const - self.hint, self.terms)
        return self.hint

    def __int__(self):
        return self._pin()

    def __index__(self):
        return self._pin()

    def __float__(self):
        return float(self._pin())

    def __hash__(self):
        return hash(self._pin())

    def __bool__(self):
        outcome = self.hint != 0
        self._guard(False, not outcome, self.const, self.terms)
        return outcome

    # A comparison of d = self - other with 0, as the guard (sign * d + offset) rel 0 records it.
    _GUARDS = {"eq": (False, 1, 0), "ne": (False, 1, 0), "lt": (True, 1, 0), "le": (True, 1, -1),
               "gt": (True, -1, 0), "ge": (True, -1, -1)}

    def _compare(self, other, op: str):
        o = _parts(other)
        if o is None:
            if isinstance(other, float):
                return getattr(operator, op)(float(self._pin()), other)
            return NotImplemented
        less_than, sign, offset = SymInt._GUARDS[op]
        v = sign * (self.hint - o[0]) + offset
        holds = v < 0 if less_than else v == 0
        terms = tuple((k, sign * c) for k, c in _terms_add(self.terms, o[2], -1))
        if terms:
            self._guard(less_than, holds, sign * (self.const - o[1]) + offset, terms)
        return not holds if op == "ne" else holds

    # ---- arithmetic that stays symbolic -----------------------------------------------------------

    def __add__(self, other):
        o = _parts(other)
        if o is None:
            return float(self) + other if isinstance(other, float) else NotImplemented
        return _make(self.hint + o[0], self.const + o[1], _terms_add(self.terms, o[2]))

    __radd__ = __add__

    def __sub__(self, other):
        o = _parts(other)
        if o is None:
            return float(self) - other if isinstance(other, float) else NotImplemented
        return _make(self.hint - o[0], self.const - o[1], _terms_add(self.terms, o[2], -1))

    def __rsub__(self, other):
        o = _parts(other)
        if o is None:
            return other - float(self) if isinstance(other, float) else NotImplemented
        return _make(o[0] - self.hint, o[1] - self.const, _terms_add(o[2], self.terms, -1))

    def __neg__(self):
        return _make(-self.hint, -self.const, tuple((k, -c) for k, c in self.terms))

    def __pos__(self):
        return self

    def __mul__(self, other):
        o = _parts(other)
        if o is None:
            return float(self) * other if isinstance(other, float) else NotImplemented
        if o[2]:  # a product of two symbolic ints is not affine: the other one is pinned
            other = int(other)
        k = int(other)
        return _make(self.hint * k, self.const * k, tuple((s, c * k) for s, c in self.terms if c * k != 0))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        o = _parts(other)
        if o is None or o[2] or o[0] <= 0:
            return int(self) // other
        d = o[0]
        if all(c % d == 0 for _, c in self.terms):
            # (c0 + sum(c_k s_k)) // d with every c_k a multiple of d: the constant's floor.
            return _make(self.hint // d, self.const // d, tuple((s, c // d) for s, c in self.terms))
        return self._pin() // d

    def __rfloordiv__(self, other):
        return other // int(self)

    def __mod__(self, other):
        o = _parts(other)
        if o is None or o[2] or o[0] <= 0:
            return int(self) % other
        d = o[0]
        if all(c % d == 0 for _, c in self.terms):
            return self.const % d
        return self._pin() % d

    def __rmod__(self, other):
        return other % int(self)

    def __truediv__(self, other):
        return float(self) / other

    def __rtruediv__(self, other):
        return other / float(self)

    def __pow__(self, other):
        return int(self) ** other

    def __abs__(self):
        return self if self >= 0 else -self

    def __round__(self, ndigits=None):
        return self

    def __trunc__(self):
        return self

    def __floor__(self):
        return self

    def __ceil__(self):
        return self

    def __format__(self, spec):
        return format(int(self), spec)

    def __str__(self):
        # (a string of the size is a value the program may compute with: `int(str(n))`, a key)
        return str(int(self))

    def __getattr__(self, name):
        # int's methods and properties (n.bit_length(), n.numerator): the pinned int's
        if name.startswith("_") or not hasattr(int, name):
            raise AttributeError(f"'SymInt' object has no attribute '{name}'")
        return getattr(int(self), name)


for _op in SymInt._GUARDS:
    setattr(SymInt, f"__{_op}__", (lambda op: lambda self, other: self._compare(other, op))(_op))


def _pinned(x):
    return int(x) if isinstance(x, SymInt) else x


# What stays no affine expression (bitwise ops, shifts, divmod, a size as an exponent, a bool
# operand): the value of the pinned ints, as Python computes it for ints.
for _name, _op in (("and", operator.and_), ("or", operator.or_), ("xor", operator.xor), ("lshift", operator.lshift),
                   ("rshift", operator.rshift), ("divmod", divmod)):
    setattr(SymInt, f"__{_name}__", (lambda op: lambda self, other: op(int(self), _pinned(other)))(_op))
    setattr(SymInt, f"__r{_name}__", (lambda op: lambda self, other: op(_pinned(other), int(self)))(_op))
SymInt.__invert__ = lambda self: ~int(self)
SymInt.__rpow__ = lambda self, other, mod=None: pow(other, int(self), mod)


class SymSize(tuple):
    """A shape with symbolic sizes: a tuple of ints and SymInts that answers like torch.Size."""

    def numel(self):
        n = 1
        for d in self:
            n = n * d
        return n

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return SymSize(r) if isinstance(i, slice) else r

    def __add__(self, other):
        return SymSize(tuple(self) + tuple(other))

    def __radd__(self, other):
        return SymSize(tuple(other) + tuple(self))

    def __repr__(self):
        return f"SymSize({list(self)})"


def is_symbolic(x) -> bool:
    return isinstance(x, SymInt) and bool(x.terms)


def has_symbolic_size(*tensors) -> bool:
    """Whether a tensor proxy among `tensors` has a size that varies with the trace's size symbols
    (executors whose kernels take static sizes decline such calls)."""
    return any(bool(getattr(t, "_sym", None)) for t in tensors)


def shape_of(proxy):
    """The proxy's shape: torch.Size where every size is static, else a SymSize."""
    sym = proxy._sym
    if not sym:
        return torch.Size(proxy._shape)
    return SymSize(d if e is None else SymInt(d, e[0], e[1]) for d, e in zip(proxy._shape, sym))
