"""thunder's dtypes: thin objects over the C++ list, interchangeable with torch.dtype."""

import torch

# Mirrors csrc/ir/dtypes.def: (thunder name, torch dtype), in enum order.
_ORDER = [
    ("bool8", torch.bool),
    ("uint8", torch.uint8),
    ("int8", torch.int8),
    ("int16", torch.int16),
    ("int32", torch.int32),
    ("int64", torch.int64),
    ("bfloat16", torch.bfloat16),
    ("float16", torch.float16),
    ("float32", torch.float32),
    ("float64", torch.float64),
    ("complex64", torch.complex64),
    ("complex128", torch.complex128),
    ("float8_e4m3fn", torch.float8_e4m3fn),
    ("float8_e5m2", torch.float8_e5m2),
]


class dtype:
    """A thunder dtype. Compares equal to the torch.dtype it stands for."""

    __slots__ = ("name", "_thunder_dtype", "_torch")

    def __init__(self, name: str, index: int, torch_dtype: torch.dtype):
        self.name = name
        self._thunder_dtype = index
        self._torch = torch_dtype

    def __repr__(self) -> str:
        return f"thunder.dtypes.{self.name}"

    def __eq__(self, other) -> bool:
        if isinstance(other, dtype):
            return self._thunder_dtype == other._thunder_dtype
        if isinstance(other, torch.dtype):
            return self._torch == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._torch)

    @property
    def is_floating_point(self) -> bool:
        return self._torch.is_floating_point

    @property
    def is_complex(self) -> bool:
        return self._torch.is_complex


_BY_TORCH = {}
for _i, (_name, _t) in enumerate(_ORDER):
    _d = dtype(_name, _i, _t)
    globals()[_name] = _d
    _BY_TORCH[_t] = _d
bool8 = globals()["bool8"]
float32 = globals()["float32"]


def to_torch_dtype(x):
    """thunder dtype or torch dtype (or None) -> torch dtype."""
    if x is None or isinstance(x, torch.dtype):
        return x
    if isinstance(x, dtype):
        return x._torch
    raise ValueError(f"to_torch_dtype: {x!r} is not a dtype")


def to_dtype(x):
    """torch dtype or thunder dtype (or None) -> thunder dtype."""
    if x is None or isinstance(x, dtype):
        return x
    if isinstance(x, torch.dtype):
        try:
            return _BY_TORCH[x]
        except KeyError:
            raise ValueError(f"thunder does not support {x}") from None
    raise ValueError(f"to_dtype: {x!r} is not a dtype")
