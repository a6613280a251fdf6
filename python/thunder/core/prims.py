"""The prims: thunder's primitive operations (defined in C++, csrc/ops/prims.def)."""

from thunder import _C

for _sym in _C.symbols("prims"):
    globals()[_sym.name] = _sym
del _sym
