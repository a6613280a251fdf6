"""Seed 001 (Extending Thunder): every CPU cell, run as written, in order.

Each printed trace must make the same calls in the same order as the seed's (nested
subsymbol comments included); names of temporaries may differ.
"""

import re
from numbers import Number

import numpy as np
import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor

try:
    from thunder.core.transforms import get_grad, grad, put_grads
except ImportError:  # autodiff not there yet: the grad cells skip, the others run
    grad = get_grad = put_grads = None

needs_grad = pytest.mark.skipif(grad is None, reason="thunder.core.transforms.grad is not available")

_CALL = re.compile(r"^(\s*)(?:# )?(?:.* = )?([A-Za-z_][\w.]*)\(")


def calls(trace_text: str) -> list[tuple[int, str]]:
    """(nesting depth, callee) of every call statement, subsymbol comments included."""
    out = []
    for line in str(trace_text).splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("def ", "return", "del ", "@", "import ", "from ")):
            continue
        if stripped.startswith("# ") and ": \"" in stripped and "=" not in stripped:
            continue  # an input's type comment
        m = _CALL.match(line)
        if m and not stripped.startswith("# Constructed"):
            out.append((len(m.group(1)) // 2, m.group(2)))
    return out


def assert_same_calls(trace, expected: str):
    got, want = calls(trace), calls(expected)
    assert got == want, f"calls differ.\n--- got:\n{trace}\n--- seed:\n{expected}"


SEED_MULTIMUL = """
def computation(t_0, t_1, t_2, t_3):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  # t_2: "cpu f32[2, 2]"
  # t_3: "cpu f32[2, 2]"
  (t0, t1) = multimul(t_0, t_1, t_2, t_3)
    # t0 = ltorch.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
      # t0 = prims.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
    # t1 = ltorch.mul(t_2, t_3)  # t1: "cpu f32[2, 2]"
      # t1 = prims.mul(t_2, t_3)  # t1: "cpu f32[2, 2]"
  del t_0, t_1, t_2, t_3
  return (t0, t1)
"""

SEED_CFOO_GRAD = """
def computation(t_0, t_1, t_2, t_3):
  # t_1: "cpu f32[2, 2]"
  t8 = torch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t8: "cpu f32[2, 2]"
    # t8 = ltorch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t8: "cpu f32[2, 2]"
      # t8 = prims.full((2, 2), 1.0, device=devices.Device("cpu"), dtype=dtypes.float32)  # t8: "cpu f32[2, 2]"
  t2 = torch.mul(t_1, t8)  # t2: "cpu f32[2, 2]"
    # t2 = ltorch.mul(t_1, t8)  # t2: "cpu f32[2, 2]"
      # t2 = prims.mul(t_1, t8)  # t2: "cpu f32[2, 2]"
  del t_1
  # t_0: "cpu f32[2, 2]"
  t3 = torch.mul(t_0, t8)  # t3: "cpu f32[2, 2]"
    # t3 = ltorch.mul(t_0, t8)  # t3: "cpu f32[2, 2]"
      # t3 = prims.mul(t_0, t8)  # t3: "cpu f32[2, 2]"
  del t_0, t8
  # t_3: "cpu f32[2, 2]"
  t9 = torch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t9: "cpu f32[2, 2]"
    # t9 = ltorch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t9: "cpu f32[2, 2]"
      # t9 = prims.full((2, 2), 1.0, device=devices.Device("cpu"), dtype=dtypes.float32)  # t9: "cpu f32[2, 2]"
  t6 = torch.mul(t_3, t9)  # t6: "cpu f32[2, 2]"
    # t6 = ltorch.mul(t_3, t9)  # t6: "cpu f32[2, 2]"
      # t6 = prims.mul(t_3, t9)  # t6: "cpu f32[2, 2]"
  del t_3
  # t_2: "cpu f32[2, 2]"
  t7 = torch.mul(t_2, t9)  # t7: "cpu f32[2, 2]"
    # t7 = ltorch.mul(t_2, t9)  # t7: "cpu f32[2, 2]"
      # t7 = prims.mul(t_2, t9)  # t7: "cpu f32[2, 2]"
  del t_2, t9
  return [t2, t3, t6, t7]
"""

SEED_BAR = """
def computation(t_0, t_1):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  (t0, _) = multimul(t_0, t_1, 0, 0)
    # t0 = ltorch.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
      # t0 = prims.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
  del t_0, t_1
  return t0
"""

SEED_BAR_GRAD = """
def computation(t_0, t_1):
  # t_1: "cpu f32[2, 2]"
  t4 = torch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t4: "cpu f32[2, 2]"
    # t4 = ltorch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t4: "cpu f32[2, 2]"
      # t4 = prims.full((2, 2), 1.0, device=devices.Device("cpu"), dtype=dtypes.float32)  # t4: "cpu f32[2, 2]"
  (t2, _) = multimul(t_1, t4, 0, 0)
    # t2 = ltorch.mul(t_1, t4)  # t2: "cpu f32[2, 2]"
      # t2 = prims.mul(t_1, t4)  # t2: "cpu f32[2, 2]"
  del t_1
  # t_0: "cpu f32[2, 2]"
  (t3, _) = multimul(t_0, t4, 0, 0)
    # t3 = ltorch.mul(t_0, t4)  # t3: "cpu f32[2, 2]"
      # t3 = prims.mul(t_0, t4)  # t3: "cpu f32[2, 2]"
  del t_0, t4
  return [t2, t3]
"""

SEED_BAR_GRAD_MULTIMUL = """
def computation(t_0, t_1):
  # t_0: "cpu f32[2, 2]"
  t4 = torch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t4: "cpu f32[2, 2]"
    # t4 = ltorch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t4: "cpu f32[2, 2]"
      # t4 = prims.full((2, 2), 1.0, device=devices.Device("cpu"), dtype=dtypes.float32)  # t4: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  (t2, t3) = multimul(t_1, t4, t_0, t4)
    # t2 = ltorch.mul(t_1, t4)  # t2: "cpu f32[2, 2]"
      # t2 = prims.mul(t_1, t4)  # t2: "cpu f32[2, 2]"
    # t3 = ltorch.mul(t_0, t4)  # t3: "cpu f32[2, 2]"
      # t3 = prims.mul(t_0, t4)  # t3: "cpu f32[2, 2]"
  del t_1, t4, t_0
  return [t2, t3]
"""

SEED_CAZ = """
def computation(t_0, t_1):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  t1 = Tensor.contiguous(t_0, memory_format=_torch_memory_format_0)  # t1: "cpu f32[2, 2]"
    # t1 = ltorch.contiguous(t_0, memory_format=_torch_memory_format_0)  # t1: "cpu f32[2, 2]"
      # t1 = prims.stride_order(t_0, (1, 0))  # t1: "cpu f32[2, 2]"
  del t_0
  t2 = Tensor.contiguous(t_1, memory_format=_torch_memory_format_0)  # t2: "cpu f32[2, 2]"
    # t2 = ltorch.contiguous(t_1, memory_format=_torch_memory_format_0)  # t2: "cpu f32[2, 2]"
      # t2 = prims.stride_order(t_1, (1, 0))  # t2: "cpu f32[2, 2]"
  del t_1
  (t0, _) = multimul(t1, t2, 0, 0)
    # t0 = ltorch.mul(t1, t2)  # t0: "cpu f32[2, 2]"
      # t0 = prims.mul(t1, t2)  # t0: "cpu f32[2, 2]"
  del t1, t2
  return t0
"""


def test_calls_helper_sees_nesting():
    assert calls(SEED_BAR) == [(1, "multimul"), (2, "ltorch.mul"), (3, "prims.mul")]
    assert calls(SEED_BAR) != calls(SEED_CAZ)


# ---- the notebook, cell by cell (module state carries from one test to the next, as in the
# notebook; pytest runs them in file order) ---------------------------------------------------

myex = OperatorExecutor("myex", version="0.1")


def multimul_impl(
        a: Number | torch.Tensor,
        b: Number | torch.Tensor,
        c: Number | torch.Tensor,
        d: Number | torch.Tensor,) -> tuple[torch.Tensor, torch.Tensor]:
    return np.multiply(a, b), np.multiply(c, d)


a = torch.randn((2, 2))
b = torch.randn((2, 2))


def multimul_like(
        a: Number | TensorProxy,
        b: Number | TensorProxy,
        c: Number | TensorProxy,
        d: Number | TensorProxy,
):
    return a * b, c * d


multimul = myex.register_operator('multimul', like=multimul_like, fn=multimul_impl)


def foo(a, b, c, d):
    return multimul(a, b, c, d)


cfoo = thunder.jit(foo, executors=[myex])


def test_multimul_impl_on_tensors():
    x, y = multimul_impl(a, b, a, b)
    torch.testing.assert_close(x, a * b)
    torch.testing.assert_close(y, a * b)


def test_multimul_in_jit():
    x, y = cfoo(a, b, a, b)
    torch.testing.assert_close(x, a * b)
    torch.testing.assert_close(y, a * b)
    trace = thunder.last_traces(cfoo)[-1]
    assert str(trace).startswith("# Constructed by Delete Last Used")
    assert_same_calls(trace, SEED_MULTIMUL)
    assert "(t0, t1) = multimul(t_0, t_1, t_2, t_3)" in str(trace)


@needs_grad
def test_grad_of_multimul():
    cfoo_grad = grad(cfoo)
    grads = cfoo_grad(a, b, a, b)
    # d/da sum(a*b) = b, and so on; the seed returns [g_a, g_b, g_c, g_d].
    for g, want in zip(grads, (b, a, b, a)):
        torch.testing.assert_close(g, want)
    assert_same_calls(thunder.last_traces(cfoo_grad)[-1], SEED_CFOO_GRAD)


def mul_to_multimul(a: Number | TensorProxy, b: Number | TensorProxy) -> TensorProxy:
    result, _ = multimul(a, b, 0, 0)
    return result


def mul_to_multimul_checker(a: Number | TensorProxy, b: Number | TensorProxy) -> bool:
    def is_cpu(x: Number | TensorProxy) -> bool:
        if isinstance(a, TensorProxy):
            return a.device.devicetype == DeviceType.CPU
        return True

    return all(is_cpu(x) for x in (a, b))


def bar(a, b):
    return a * b


cbar = None


def test_mul_claimed_by_multimul():
    global cbar
    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker, execution_transform=mul_to_multimul)
    cbar = thunder.jit(bar, executors=[myex])
    torch.testing.assert_close(cbar(a, b), a * b)
    trace = thunder.last_traces(cbar)[-1]
    assert_same_calls(trace, SEED_BAR)
    assert "(t0, _) = multimul(t_0, t_1, 0, 0)" in str(trace)


@needs_grad
def test_grad_of_mul_uses_multimul_twice():
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    assert_same_calls(thunder.last_traces(cbar_grad)[-1], SEED_BAR_GRAD)


def mymul_grad(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    fwd = a * b

    g = get_grad(fwd)
    a_grad, b_grad = multimul(b, g, a, g)
    put_grads((a, b), (a_grad, b_grad))

    return fwd


@needs_grad
def test_grad_transform_gives_one_multimul():
    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker, execution_transform=mul_to_multimul, grad_transform=mymul_grad)
    cbar_grad = grad(cbar)
    ga, gb = cbar_grad(a, b)
    torch.testing.assert_close(ga, b)
    torch.testing.assert_close(gb, a)
    trace = thunder.last_traces(cbar_grad)[-1]
    assert_same_calls(trace, SEED_BAR_GRAD_MULTIMUL)
    assert [c for c in calls(trace) if c[1] == "multimul"] == [(1, "multimul")]


def mul_to_contiguous_multimul(a: Number | TensorProxy, b: Number | TensorProxy) -> TensorProxy:
    a = a.contiguous()
    b = b.contiguous()
    result, _ = multimul(a, b, 0, 0)
    return result


def caz(a, b):
    return a * b


def test_contiguous_prologue():
    myex.register_implementation(ltorch.mul, checker=mul_to_multimul_checker, execution_transform=mul_to_contiguous_multimul)
    ccaz = thunder.jit(caz, executors=[myex])
    torch.testing.assert_close(ccaz(a, b), a * b)
    trace = thunder.last_traces(ccaz)[-1]
    assert_same_calls(trace, SEED_CAZ)
    assert "from torch import Tensor" in str(trace)
    # Non-contiguous inputs are made contiguous before NumPy sees them.
    at = a.t()
    torch.testing.assert_close(ccaz(at, b), at * b)


def test_to_torch_dtype_round_trip():
    dtype = torch.float32
    assert ltorch.to_torch_dtype(dtype) is torch.float32
    assert ltorch.to_torch_dtype(ltorch.to_thunder_dtype(torch.bfloat16)) is torch.bfloat16
