"""Moving tensors between devices inside a jitted function: Tensor.to(device), .cpu(), .cuda().

A move is prims.device_put (a copy on the target device, its gradient moved back); a move to the
device a tensor is on is no call at all, as eager returns the tensor itself. The CUDA cases are
skipped without a GPU; the CPU cases move to and from the meta device."""

import pytest
import torch
from torch import nn

import thunder

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _symbols(jf):
    """The names of the calls of the last execution trace, nested ones included."""
    return str(thunder.last_traces(jf)[-1])


# ---- on any machine ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, fn",
    [
        ("cpu", lambda x: x.cpu() * 2),
        ("to_cpu_str", lambda x: x.to("cpu") + 1),
        ("to_cpu_device", lambda x: x.to(torch.device("cpu"), torch.float64)),
        ("to_device_of", lambda x: x.to(x.device).exp()),
        ("to_other_tensor", lambda x: x.to(torch.empty(0, dtype=torch.float16))),
        ("to_kwargs", lambda x: x.to(device="cpu", dtype=torch.bfloat16, non_blocking=True)),
    ],
)
def test_move_to_the_same_device_is_no_copy(name, fn):
    x = torch.randn(3, 4)
    jf = thunder.jit(fn)
    out, ref = jf(x), fn(x)
    assert out.dtype == ref.dtype and out.device == ref.device
    torch.testing.assert_close(out, ref)
    assert "device_put" not in _symbols(jf)


def test_move_to_meta_has_metadata_of_eager():
    x = torch.randn(2, 3)
    jf = thunder.jit(lambda x: (x.to("meta"), x.to("meta", torch.float16) * 2, x.t().to("meta")))
    for out, ref in zip(jf(x), (x.to("meta"), x.to("meta", torch.float16) * 2, x.t().to("meta"))):
        assert out.device.type == "meta"
        assert (out.shape, out.dtype, out.stride()) == (ref.shape, ref.dtype, ref.stride())
    assert "prims.device_put" in _symbols(jf)


def test_narrowing_conversion_happens_before_the_move():
    # float64 -> float16 on another device: the cast runs where the values are, so the move
    # carries 2-byte values; a widening cast runs after the move.
    jf = thunder.jit(lambda x: (x.to("meta", torch.float16), x.to("meta", torch.float64)))
    jf(torch.randn(4, dtype=torch.float32))
    lines = [ln.strip() for ln in _symbols(jf).splitlines() if "prims." in ln]
    narrow = [i for i, ln in enumerate(lines) if "float16" in ln]
    put = [i for i, ln in enumerate(lines) if "device_put" in ln]
    assert narrow and put and narrow[0] < put[0], lines


_CPU_SCALAR_CASES = [
    # A 0-dim CPU tensor meets tensors on another device, as PyTorch allows: made in the function
    # (DeBERTa's `torch.where(..., torch.tensor(mid - 1).type_as(pos), ...)`) or passed in.
    ("where_made", lambda m, x, s: torch.where(m, torch.tensor(3.0), x)),
    ("where_type_as", lambda m, x, s: torch.where(m, x, torch.tensor(1).type_as(x))),
    ("add_made", lambda m, x, s: x + torch.tensor(2.0)),
    ("mul_passed", lambda m, x, s: x * s),
    ("sub_passed_first", lambda m, x, s: s - x),
    ("lerp_weight", lambda m, x, s: torch.lerp(x, x.exp(), s)),
    ("both_0dim", lambda m, x, s: x.sum() * s),
]


@pytest.mark.parametrize("name, fn", _CPU_SCALAR_CASES)
def test_cpu_scalar_tensor_meets_another_device(name, fn):
    x = torch.randn(3, 4, device="meta")
    m, s = x > 0, torch.tensor(0.5)
    jf = thunder.jit(fn)
    out, ref = jf(m, x, s), fn(m, x, s)
    assert (out.device, out.shape, out.dtype) == (ref.device, ref.shape, ref.dtype)


def _setitem(x, i):
    y = x * 2
    y[i] = 1.0
    return y


_CPU_INDEX_CASES = [
    # CPU index tensors into a tensor on another device, as PyTorch's advanced indexing reads them:
    # BEiT's and MViT's relative position tables indexed by a torch.arange made in forward
    ("getitem_made", lambda x, i: x[torch.arange(3)]),
    ("getitem_passed", lambda x, i: x[i]),
    ("getitem_2d_index", lambda x, i: x[i.view(1, 3)] * 2),
    ("index_put", lambda x, i: x.index_put((i,), torch.ones(3, 4, device=x.device), accumulate=True)),
    ("setitem", _setitem),
]


@pytest.mark.parametrize("name, fn", _CPU_INDEX_CASES)
def test_cpu_index_tensor_into_another_device(name, fn):
    x, i = torch.randn(5, 4, device="meta"), torch.tensor([4, 0, 2])
    out, ref = thunder.jit(fn)(x, i), fn(x, i)
    assert (out.device, out.shape, out.dtype) == (ref.device, ref.shape, ref.dtype)


def test_move_to_unknown_device_names_it():
    with pytest.raises(Exception, match="not .xpu."):
        thunder.jit(lambda x: x.to("xpu"))(torch.randn(2))


# ---- CUDA ---------------------------------------------------------------------------------------


def _grads(fn, *args):
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(0)
    cot = [torch.randn_like(o) for o in outs]
    wrt = [a for a in args if a.requires_grad]
    return outs, torch.autograd.grad(outs, wrt, cot)


@cuda
@pytest.mark.parametrize(
    "name, fn, devices",
    [
        ("cpu_to_cuda", lambda x, y: x.to(y.device) * y, ("cpu", "cuda")),
        ("cuda_to_cpu", lambda x, y: x.cpu().exp() + y, ("cuda", "cpu")),
        ("round_trip", lambda x, y: (x.cuda() * y).cpu().sin(), ("cpu", "cuda")),
        ("cuda_method", lambda x, y: x.cuda().tanh() * y, ("cpu", "cuda")),
        ("to_with_dtype", lambda x, y: x.to("cuda", torch.bfloat16).float() + y, ("cpu", "cuda")),
        ("to_other", lambda x, y: x.to(y) + y, ("cpu", "cuda")),
        ("both_returned", lambda x, y: (x.cpu() * y, x * 2), ("cuda", "cpu")),
    ],
)
def test_moves_between_cpu_and_cuda_match_eager_with_gradients(name, fn, devices):
    torch.manual_seed(0)
    x = torch.randn(4, 5, device=devices[0])
    y = torch.randn(4, 5, device=devices[1])
    jf = thunder.jit(fn)
    outs, grads = _grads(jf, x, y)
    ref_outs, ref_grads = _grads(fn, x, y)
    for o, r in zip(outs + grads, ref_outs + ref_grads):
        assert o.device == r.device and o.dtype == r.dtype
        torch.testing.assert_close(o, r)
    assert "device_put" in _symbols(jf)


@cuda
@pytest.mark.parametrize("name, fn", _CPU_SCALAR_CASES)
def test_cpu_scalar_tensor_meets_cuda_with_gradients(name, fn):
    torch.manual_seed(0)
    x = torch.randn(3, 4, device="cuda")
    m, s = x > 0, torch.tensor(0.5)
    jf = thunder.jit(fn)
    results = []
    for f in (jf, fn):
        xs, ss = x.clone().requires_grad_(), s.clone().requires_grad_()
        out = f(m, xs, ss)
        results.append((out, *torch.autograd.grad(out, (xs, ss), torch.full_like(out, 0.7), allow_unused=True)))
    for o, r in zip(*results):
        assert (o is None) == (r is None)
        if o is not None:
            assert o.device == r.device and o.dtype == r.dtype
            torch.testing.assert_close(o, r)


@cuda
@pytest.mark.parametrize("name, fn", _CPU_INDEX_CASES)
def test_cpu_index_tensor_into_cuda_with_gradients(name, fn):
    torch.manual_seed(0)
    x, i = torch.randn(5, 4, device="cuda"), torch.tensor([4, 0, 2])
    outs, grads = _grads(thunder.jit(fn), x, i)
    ref_outs, ref_grads = _grads(fn, x, i)
    for o, r in zip(outs + grads, ref_outs + ref_grads):
        assert o.device == r.device and o.dtype == r.dtype
        torch.testing.assert_close(o, r)


@cuda
def test_cuda_without_index_is_the_current_device():
    n = torch.cuda.device_count()
    jf = thunder.jit(lambda x: (x.cuda(), x.to("cuda"), x.cuda(n - 1)))
    x = torch.randn(3)
    with torch.cuda.device(n - 1):
        outs = jf(x)
    assert [o.device for o in outs] == [torch.device("cuda", n - 1)] * 3


@cuda
def test_counter_kept_on_the_cpu_moves_to_the_model_device():
    # The shape of transformers' StaticCache: a position counter on the CPU, moved to the device
    # of the keys it indexes on first use.
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("keys", torch.zeros(1, 8, 4, device="cuda"))
            self.register_buffer("pos", torch.zeros((), dtype=torch.long))

        def forward(self, k):
            pos = self.pos.to(self.keys.device)
            self.keys.index_copy_(1, pos.view(1), k)
            self.pos.add_(1)
            return self.keys.sum(1)

    c, ref = Cache(), Cache()
    jc = thunder.jit(c)
    for _ in range(3):
        k = torch.randn(1, 1, 4, device="cuda")
        torch.testing.assert_close(jc(k), ref(k))
    torch.testing.assert_close(c.keys, ref.keys)
    assert c.pos.item() == ref.pos.item() == 3 and c.pos.device.type == "cpu"


@cuda
def test_graphs_with_a_move_match_eager():
    # A move from the GPU to the CPU inside the program cannot be recorded into a CUDA graph
    # (the host copy); such calls run without graphs, with eager's results.
    fn = lambda x: (x.sin().cpu() * 2, x.cos())
    jf = thunder.jit(fn, plugins="reduce-overhead")
    for _ in range(4):
        x = torch.randn(8, device="cuda")
        for o, r in zip(jf(x), fn(x)):
            assert o.device == r.device
            torch.testing.assert_close(o, r)
