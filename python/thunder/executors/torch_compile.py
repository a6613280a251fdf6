"""The torchcompile executor: regions of the trace run through torch.compile.

    from thunder.executors.torch_compile import torch_compile_ex
    thunder.jit(fn, executors=[torch_compile_ex])             # or with the fuser: [torch_compile_ex, "fuser"]

A fusion executor (thunder.extend.RegionExecutor) on thunder's fusion partition: each run of calls
that the torch executor can run (elementwise ops, reductions, shape ops, matmuls; no random or
effectful ones) and that holds at least two computing ops becomes one Python function of the
region's inputs, compiled with `torch.compile(dynamic=False)` at its first call, and printed as

    [t2, t5] = TorchCompile0(t0, t1)

with the region's prims as nested comments. It runs on the forward and backward traces alike.
Executors before it in `executors=[...]` claim first (a fusion pass earlier in the list takes its
regions first). Where torch.compile cannot work (no torch.compile, Dynamo unsupported on this
Python, no C++ compiler for CPU regions, no Triton for CUDA ones) the executor declines every
region (THUNDER_DEBUG_CLAIMS=1 says why) and the torch executor runs the calls; if compiling a
region fails at its first call, that region runs its Python program uncompiled, with a warning.
"""

from __future__ import annotations

import functools
import shutil
import warnings

import torch

from thunder.extend import RegionExecutor, declined, register_executor

__all__ = ["torch_compile_ex", "torch_compile_available", "region_source"]


@functools.lru_cache(maxsize=None)
def _unavailable_reason(device_type: str) -> str | None:
    if not hasattr(torch, "compile"):
        return "this PyTorch has no torch.compile"
    try:
        from torch import _dynamo

        if not _dynamo.is_dynamo_supported():
            return "torch.compile does not support this Python version"
    except Exception as e:  # a broken install: decline rather than fail every jit
        return f"torch._dynamo cannot be imported ({type(e).__name__}: {e})"
    if device_type == "cpu" and not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return "no C++ compiler for torch.compile's CPU kernels"
    if device_type == "cuda":
        try:
            from torch.utils._triton import has_triton

            if not has_triton():
                return "no Triton for torch.compile's CUDA kernels"
        except ImportError:
            return "no Triton for torch.compile's CUDA kernels"
    return None


def torch_compile_available(device: str = "cpu") -> bool:
    """Whether torch.compile can compile regions on this device type ("cpu" or "cuda")."""
    return _unavailable_reason(device.split(":")[0]) is None


_sources: dict[str, str] = {}


def region_source(name: str) -> str:
    """The Python source of the last region compiled under this name (TorchCompile0, ...)."""
    return _sources[name]


class _Region:
    """One region: its Python program and the torch.compile'd function, compiled at the first
    call. Runs without autograd (thunder's own backward differentiates the trace)."""

    def __init__(self, name: str, fn, source: str):
        self.name, self.fn, self.source = name, fn, source
        self.compiled = torch.compile(fn, dynamic=False)
        self.run = None

    def __call__(self, *args):
        with torch.no_grad():
            if self.run is not None:
                return self.run(*args)
            try:
                out = self.compiled(*args)
                self.run = self.compiled
                return out
            except Exception as e:
                warnings.warn(f"thunder: torch.compile failed on {self.name} ({type(e).__name__}: {e}); "
                              "the region runs uncompiled", RuntimeWarning, stacklevel=2)
                self.run = self.fn
                return self.fn(*args)


def _compile_region(name: str, source: str, device: str):
    reason = _unavailable_reason(device.split(":")[0])
    if reason is not None:
        declined(torch_compile_ex, name, reason)
        return None
    scope: dict = {}
    exec(compile(source, f"<thunder {name}>", "exec"), scope)  # noqa: S102 - a printed trace
    _sources[name] = source
    return _Region(name, scope[name], source)


torch_compile_ex = RegionExecutor("torchcompile", prefix="TorchCompile", compile_region=_compile_region,
                                  version=torch.__version__)
register_executor(torch_compile_ex)
