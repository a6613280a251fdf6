"""Numerical edge cases against eager PyTorch: integer overflow in fused kernels, infinities,
requested reduction dtypes, rounding to decimals, long-row sums, tied medians, xlogy at zero and
the poles of digamma and polygamma."""

import pytest
import torch

import thunder
from thunder import _C

# "default" runs CPU programs through ATen (tests/python/conftest.py), "fuser" through the CPU
# fuser's generated C++.
EXECUTORS = {"default": None, "fuser": ["fuser"]}
executor = pytest.mark.parametrize("executor", sorted(EXECUTORS))


def _jit(fn, executor):
    return thunder.jit(fn, executors=EXECUTORS[executor])

I32 = torch.tensor([2**31 - 1, -(2**31), 0, 5, -7], dtype=torch.int32)
I64 = torch.tensor([2**63 - 1, -(2**63), 0, 5, -7], dtype=torch.int64)

# Signed overflow wraps around in eager (two's complement); in C++ it is undefined, and an
# optimizing compiler folds these comparisons to a constant.
WRAPS = {
    "add_gt": lambda a: (a + 1) > a,
    "sub_lt": lambda a: (a - 1) < a,
    "mul_lt0": lambda a: (a * 2) < 0,
    "abs_ge0": lambda a: torch.abs(a) >= 0,
    "neg_lt0": lambda a: (-a) < 0,
    "values": lambda a: (a + a) * 3 - (-a).abs(),
}


@executor
@pytest.mark.parametrize("a", [I32, I64], ids=["int32", "int64"])
@pytest.mark.parametrize("name", sorted(WRAPS))
def test_integer_overflow_wraps_as_eager(name, a, executor):
    fn = WRAPS[name]
    assert torch.equal(_jit(fn, executor)(a), fn(a))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_cuda_integer_arithmetic_is_unsigned(dtype):
    # NVRTC has no -fwrapv: CUDA kernels compute 32- and 64-bit integer add, sub, mul and neg in
    # the unsigned type; float arithmetic keeps the plain operators.
    a = I32 if dtype == torch.int32 else I64
    fn = WRAPS["values"]
    jf = thunder.jit(fn, executors=[])
    jf(a)
    ((_, source),) = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda")
    u = "uint32_t" if dtype == torch.int32 else "uint64_t"
    for line in source.splitlines():
        if line.rstrip().endswith(("// add", "// sub", "// mul", "// neg")):
            assert f"static_cast<{u}>" in line, line
    if _C.nvrtc_available():
        assert _C.nvrtc_compile(source, "sm_90") > 0

    jf = thunder.jit(lambda x: (x + x) * 3 - (-x), executors=[])
    jf(torch.randn(8))
    ((_, fsource),) = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cuda")
    assert "uint32_t>(v" not in fsource and "uint64_t>(v" not in fsource


def test_cpu_kernels_compile_with_fwrapv():
    assert "-fwrapv" in _C.cpu_compile_flags().split()


FLOATS = [torch.float32, torch.float64, torch.bfloat16]
INF = float("inf")


def _value_and_grad(fn, x):
    x = x.clone().requires_grad_()
    y = fn(x)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    return y.detach(), g


@executor
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logsigmoid_at_infinities_and_zero(dtype, executor):
    # logsigmoid(-inf) = -inf, logsigmoid(inf) = 0 (not inf * 0 = NaN); the gradient is
    # 1 - sigmoid(x): 1 at -inf, 0 at inf, 1/2 at +-0.
    fn = torch.nn.functional.logsigmoid
    x = torch.tensor([-INF, INF, -1.0, 0.0, -0.0, 1.0, -100.0, 100.0, 1e-8, 30.0, -30.0, float("nan")], dtype=dtype)
    ye, ge = _value_and_grad(fn, x)
    yt, gt = _value_and_grad(_jit(fn, executor), x)
    torch.testing.assert_close(yt, ye, equal_nan=True)
    torch.testing.assert_close(gt, ge, equal_nan=True)
    assert yt[0].item() == -INF and yt[1].item() == 0.0


ROUND_VALUES = [0.25, 1.45, -2.55, 1234.5678, 0.5, 1.5, -0.5, 2.675, 15.0, 25.0, -35.0, 1e-7, 0.0, -0.0, INF, -INF,
                float("nan"), 3e38, 1e30]


@executor
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("decimals", [0, 1, 2, 3, -1, -2, 10, 40, -40, 400])
def test_round_decimals(decimals, dtype, executor):
    # ATen: rint(x * 10^d) / 10^d, rint(x / 10^-d) * 10^-d for d < 0, in the math type (float for
    # the 16-bit dtypes); 10^d past its range is inf and the result NaN. The gradient is 0.
    x = torch.tensor(ROUND_VALUES, dtype=torch.float64).to(dtype)
    fn = lambda a: torch.round(a, decimals=decimals)  # noqa: E731
    ye, ge = _value_and_grad(fn, x)
    yt, gt = _value_and_grad(_jit(fn, executor), x)
    assert yt.dtype == ye.dtype
    assert torch.equal(yt.isnan(), ye.isnan())
    assert torch.equal(yt.nan_to_num(0.0), ye.nan_to_num(0.0))
    assert torch.equal(gt, ge)


@executor
def test_round_decimals_method_and_integers(executor):
    x = torch.tensor([1.2345, -6.789])
    assert torch.equal(_jit(lambda a: a.round(decimals=2), executor)(x), x.round(decimals=2))
    i = torch.tensor([15, -25], dtype=torch.int32)
    assert torch.equal(_jit(lambda a: torch.round(a), executor)(i), torch.round(i))
    # Integers with decimals: eager's error (round_cpu is not implemented for them).
    with pytest.raises(NotImplementedError, match="round_cpu|needs a floating dtype"):
        _jit(lambda a: torch.round(a, decimals=-1), executor)(i)


# (input, op, dtype): eager converts the input to the requested dtype, then reduces as for an
# input of that dtype (a float16 sum accumulates in float32).
REQUESTED_DTYPE = {
    "sum_f32_to_f16": (lambda: torch.randn(4, 37) * 100, "sum", torch.float16),
    "sum_f32_to_bf16": (lambda: torch.randn(4, 37) * 100, "sum", torch.bfloat16),
    "sum_i32_overflows_f16": (lambda: torch.tensor([[70000, -70000, 1, 2]], dtype=torch.int32), "sum", torch.float16),
    "sum_f64_to_f16": (lambda: torch.tensor([[1e5, -1e5, 0.5]], dtype=torch.float64), "sum", torch.float16),
    "sum_f32_to_i32": (lambda: torch.tensor([[1.7, -2.7, 3.9]]), "sum", torch.int32),
    "sum_f32_to_f64": (lambda: torch.randn(3, 50), "sum", torch.float64),
    "prod_f32_overflows_f16": (lambda: torch.tensor([[70000.0, 1e-5], [2.0, 3.0]]), "prod", torch.float16),
    "prod_f32_to_bf16": (lambda: torch.rand(4, 9) + 0.5, "prod", torch.bfloat16),
    "prod_i64_to_f16": (lambda: torch.tensor([[100000, 0, 3]]), "prod", torch.float16),
}


@executor
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", sorted(REQUESTED_DTYPE))
def test_reduction_with_requested_dtype(name, keepdim, executor):
    make, op, dtype = REQUESTED_DTYPE[name]
    a = make()
    fn = lambda x: getattr(x, op)(-1, keepdim=keepdim, dtype=dtype)  # noqa: E731
    expected, got = fn(a), _jit(fn, executor)(a)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # Eager's CPU prod accumulates 16-bit floats in their dtype, thunder in float32: bfloat16
    # products differ by a few of its ulps (assert_close's default tolerance).
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())


@executor
def test_full_sum_with_requested_dtype(executor):
    a = torch.tensor([70000, -70000, 5], dtype=torch.int32)
    fn = lambda x: x.sum(dtype=torch.float16)  # noqa: E731
    assert _jit(fn, executor)(a).isnan().item() and fn(a).isnan().item()


# (length, make): a fused elementwise + row sum over a long row; the error against float64 stays
# within a small factor of eager's (cascaded) one.
LONG_ROWS = {
    "const_200k": (200_000, lambda n: torch.full((2, n), 0.1)),
    "const_3M": (3_000_000, lambda n: torch.full((1, n), 0.1)),
    "rand_1M": (1_000_000, lambda n: torch.rand(2, n)),
    "randn_17k": (17_000, lambda n: torch.randn(3, n) + 1),
}


@executor
@pytest.mark.parametrize("name", sorted(LONG_ROWS))
def test_long_row_sum_accuracy(name, executor):
    n, make = LONG_ROWS[name]
    x = make(n)
    fn = lambda a: (a * 1.5).sum(-1)  # noqa: E731
    ref = (x.double() * 1.5).sum(-1)
    err_eager = (fn(x).double() - ref).abs().max().item()
    err = (_jit(fn, executor)(x).double() - ref).abs().max().item()
    assert err <= 20 * err_eager + 1e-6 * ref.abs().max().item(), (err, err_eager)


@executor
@pytest.mark.parametrize("n", [1, 1023, 1024, 16 * 1024, 16 * 1024 + 1, 256 * 1024 + 5000])
def test_row_sum_lengths_around_blocks(n, executor):
    # Integer sums are exact in any order: every block and cascade boundary is added once.
    x = torch.arange(2 * n, dtype=torch.int64).reshape(2, n) % 7
    fn = lambda a: (a + 1).sum(-1)  # noqa: E731
    assert torch.equal(_jit(fn, executor)(x), fn(x))
    xf = torch.randn(2, n, dtype=torch.float64)
    torch.testing.assert_close(_jit(lambda a: (a * 2).sum(-1), executor)(xf), (xf * 2).sum(-1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("values", [[1, 1, 2, 3], [3, 1, 2, 2, 2, 5], [1.0, float("nan"), 2.0, float("nan")], [4.0],
                                    [0.1, 0.1, 0.1, 0.5, 0.7]], ids=str)
def test_median_shares_its_gradient_among_ties(values, dtype):
    # eager's evenly_distribute_backward: [1, 1, 2, 3] gives [0.5, 0.5, 0, 0] (thunder gave [0, 1, 0, 0])
    x = torch.tensor(values, dtype=dtype)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = a.median(), thunder.jit(lambda y: y.median())(b)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(torch.autograd.grad(got, b)[0], torch.autograd.grad(want, a)[0], equal_nan=True)


NAN = float("nan")
# x == 0 against log's and log1p's poles and edges; the last entries are away from them.
XLOGY_X = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.0, 1.5, -2.0, 1.5, -0.5, 2.0]
XLOGY_Y = [0.0, -1.0, -2.0, NAN, INF, 2.0, 0.0, 0.0, -1.0, NAN, INF, 3.0]
XLOGY_OPS = {"xlogy": torch.xlogy, "xlog1py": torch.special.xlog1py}
# (x, y): None is the tensor; a number is that operand as a Python number (eager's Scalar_Self and
# Scalar_Other forms, each with its own derivative formula).
XLOGY_FORMS = {"tensors": (None, None), **{f"y={v}": (None, v) for v in (0.0, -1.0, -2.0, 0.5, NAN, INF)},
               **{f"x={v}": (v, None) for v in (0.0, 2.0, -1.5)}}


@executor
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("form", sorted(XLOGY_FORMS))
@pytest.mark.parametrize("name", sorted(XLOGY_OPS))
def test_xlogy_at_zero_and_poles(name, form, dtype, executor):
    # eager: 0 where x == 0 unless y is nan; d/dx is xlogy(g, y) set to 0 where x == 0 and y <= 0
    # (xlog1py: y <= -1), or for a number y not above it where x == 0; d/dy is g * x / y (xlog1py:
    # / (1 + y)), nan at x == y == 0. thunder gave log(y) for d/dx and 0 for d/dy at x == 0.
    op = XLOGY_OPS[name]
    fx, fy = XLOGY_FORMS[form]

    def run(f):
        x = torch.tensor(XLOGY_X, dtype=dtype, requires_grad=True) if fx is None else fx
        y = torch.tensor(XLOGY_Y, dtype=dtype, requires_grad=True) if fy is None else fy
        out = f(x, y)
        ins = [v for v in (x, y) if isinstance(v, torch.Tensor)]
        cot = torch.linspace(0.5, 2.0, out.numel(), dtype=dtype)
        return out.detach(), torch.autograd.grad(out, ins, cot)

    want, want_grads = run(op)
    got, got_grads = run(_jit(op, executor))
    torch.testing.assert_close(got, want, equal_nan=True)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, equal_nan=True)


# Poles (0 and the negative integers), values near and between them, nan and infinities.
GAMMA_X = [0.0, -0.0, -1.0, -2.0, -2.5, -0.5, 1e-3, 0.25, 1.0, 2.5, 30.0, 1e4, NAN, INF, -INF]
GAMMA_OPS = {
    "digamma": torch.digamma,
    "special.digamma": torch.special.digamma,
    "lgamma": torch.lgamma,
    **{f"polygamma{n}": (lambda a, n=n: torch.polygamma(n, a)) for n in (0, 1, 2, 3)},
    "special.polygamma2": lambda a: torch.special.polygamma(2, a),
    "Tensor.polygamma1": lambda a: a.polygamma(1),
}


@executor
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(GAMMA_OPS))
def test_digamma_and_polygamma_values_and_gradients(name, dtype, executor):
    # d/dx digamma = polygamma(1, x), d/dx polygamma(n, x) = polygamma(n + 1, x), d/dx lgamma =
    # digamma(x), as eager, poles included (digamma had no gradient in thunder).
    fn = GAMMA_OPS[name]
    x = torch.tensor(GAMMA_X, dtype=dtype)
    ye, ge = _value_and_grad(fn, x)
    yt, gt = _value_and_grad(_jit(fn, executor), x)
    assert yt.dtype == ye.dtype and gt.dtype == ge.dtype
    torch.testing.assert_close(yt, ye, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(gt, ge, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(XLOGY_OPS))
def test_xlogy_kernels_compile_and_polygamma_stays_with_aten(name):
    # xlogy's and xlog1py's values and gradients are fusible prims: the generated CUDA kernels of
    # both traces compile. polygamma, as digamma, has no fused kernel: it runs as ATen's.
    op = XLOGY_OPS[name]
    fn = lambda x, y: op(x, y) * 2 + torch.polygamma(2, y) + op(x, -0.5)  # noqa: E731
    x, y = torch.randn(8, requires_grad=True), (torch.rand(8) + 0.5).requires_grad_()
    jf = thunder.jit(fn, executors=[])
    jf(x, y).sum().backward()
    for trace in (thunder.last_traces(jf)[1], thunder.last_backward_traces(jf)[0]):
        sources = _C.generate_fusion_sources(trace, "cuda")
        assert sources and all("polygamma" not in s for _, s in sources)
        if _C.nvrtc_available():
            for _, source in sources:
                assert _C.nvrtc_compile(source, "sm_90") > 0
    assert "torch.polygamma(2, " in str(thunder.last_traces(jf)[-1])
    assert "torch.polygamma(3, " in str(thunder.last_backward_traces(jf)[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_entr_gradient_outside_its_domain_is_eagers(dtype):
    # d/dx entr(x) = -(1 + log x): inf at 0 and NaN below, as eager's backward gives, where the
    # decomposition's branches (0 at 0, -inf below) differentiate to 0.
    def f(x):
        return torch.special.entr(x)

    x = torch.tensor([-1.0, 0.0, 0.5, 2.0, float("nan"), float("inf")], dtype=dtype)
    xe, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yt = f(xe), thunder.jit(f)(xt)
    torch.testing.assert_close(yt, ye, equal_nan=True)
    g = torch.linspace(0.5, 1.5, x.numel(), dtype=dtype)
    ye.backward(g)
    yt.backward(g)
    assert xt.grad.dtype == xe.grad.dtype
    torch.testing.assert_close(xt.grad, xe.grad, equal_nan=True)
