"""The torch language (ltorch): thunder symbols mirroring PyTorch's API (defined in C++)."""

from thunder import _C
from thunder.core.dtypes import to_dtype, to_torch_dtype  # noqa: F401
from thunder.core.dtypes import to_dtype as to_thunder_dtype  # noqa: F401

for _sym in _C.symbols("ltorch"):
    globals()[_sym.name] = _sym
del _sym
