"""Every op of the OpInfo tables, and the nn.functional and composite calls models make, under
torch.autocast: thunder.jit(op) against eager under the same autocast region (autocast_check.py:
result dtypes equal exactly; values as close to float32 as eager autocast's, test_autocast.py's
rule; a call eager refuses under autocast refused; gradients with the forward under autocast and
the backward outside it, their dtypes the inputs'). The expectations are eager's on the device the
row runs on: the CPU rows in CI, the CUDA rows (CUDA's own autocast lists) on a GPU machine.

Per op: its first float32 sample and first gradient sample under bfloat16, and its first sample
with the first floating-point tensor in float16 (a mixed-dtype call) under float16.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import thunder
from autocast_check import check_call, check_grads
from opinfo_framework import collect_opinfos, describe

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=cuda)]

opinfos = [op for op in collect_opinfos() if torch.float32 in op.dtypes]


def _moved(x, device, first_to=None, state=None):
    """x with its tensors on `device`; the first floating-point one converted to `first_to`."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to(device)
        if first_to is not None and x.is_floating_point() and not state:
            state.append(True)
            return x.to(first_to)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_moved(y, device, first_to, state) for y in x)
    if isinstance(x, dict):
        return {k: _moved(v, device, first_to, state) for k, v in x.items()}
    return x


def _sample(op, samples, device, first_to=None):
    args, kwargs = samples[0]
    state = []
    return _moved(args, device, first_to, state), _moved(kwargs, device, first_to, state)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", opinfos, ids=[op.name for op in opinfos])
def test_opinfo_op_follows_eager_autocast(op, device):
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    samples = op.samples(torch.float32, "cpu")
    assert samples, f"{op.name} has no float32 samples"
    # What users write: the torch callable (an op given as a thunder symbol is traced through its
    # torch reference, the call autocast applies to).
    fn = op.reference if hasattr(op.op, "id") and op._reference is not None else op.op
    jf = thunder.jit(fn)
    # float32 arguments under bfloat16
    args, kwargs = _sample(op, samples, device)
    what = f"{op.name}[{device} bf16]{describe(args, kwargs)}"
    check_call(jf, fn, args, kwargs, device, torch.bfloat16, what, random=op.random)
    if op.supports_grad and not op.random:
        gargs, gkwargs = _sample(op, op.grad_samples(torch.float32, "cpu"), device)
        check_grads(jf, fn, gargs, gkwargs, device, torch.bfloat16,
                    f"{op.name}[{device} bf16]{describe(gargs, gkwargs)}", op.no_grad_kwargs)
    # a float16 argument among float32 ones under float16
    if torch.float16 in op.dtypes:
        args, kwargs = _sample(op, samples, device, first_to=torch.float16)
        what = f"{op.name}[{device} f16]{describe(args, kwargs)}"
        check_call(jf, fn, args, kwargs, device, torch.float16, what, random=op.random)


# ---- calls models make: nn.functional, tensor methods, composite ops, mixed dtypes -------------
# (name, function, input specs): a shape is a float32 tensor of that shape drawn from randn; a
# (shape, dtype) pair one of that dtype; a callable makes the input from the device.


def _idx(n, high):
    return lambda device: torch.randint(0, high, (n,), device=device)


def _pos(shape):
    return lambda device: torch.rand(shape, device=device) + 0.5


BF, F16, F64 = torch.bfloat16, torch.float16, torch.float64

CALLS = [
    ("layer_norm", lambda x, g, b: F.layer_norm(x, (8,), g, b), [(4, 8), (8,), (8,)]),
    ("layer_norm_bf16_input", lambda x, g, b: F.layer_norm(x, (8,), g, b), [((4, 8), BF), (8,), (8,)]),
    ("group_norm", lambda x, g, b: F.group_norm(x, 2, g, b), [(2, 4, 5), (4,), (4,)]),
    ("batch_norm_train", lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True), [(4, 3, 5), (3,), (3,)]),
    ("rms_norm", lambda x, g: F.rms_norm(x, (8,), g), [((4, 8), BF), (8,)]),
    ("softmax", lambda x: F.softmax(x, -1), [((4, 8), BF)]),
    ("softmax_dtype", lambda x: F.softmax(x, -1, dtype=torch.float32), [((4, 8), BF)]),
    ("log_softmax", lambda x: F.log_softmax(x, -1), [((4, 8), F16)]),
    ("log_softmax_dtype", lambda x: torch.log_softmax(x, -1, dtype=torch.float64), [(4, 8)]),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t), [((4, 6), BF), _idx(4, 6)]),
    ("cross_entropy_smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [(4, 6), _idx(4, 6)]),
    ("nll_loss", lambda x, t: F.nll_loss(x, t), [((4, 6), BF), _idx(4, 6)]),
    ("mse_loss_mixed", lambda x, y: F.mse_loss(x, y), [((4, 8), BF), (4, 8)]),
    ("embedding", lambda i, w: F.embedding(i, w), [_idx(5, 10), (10, 4)]),
    ("embedding_bag", lambda i, w: F.embedding_bag(i.view(1, -1), w), [_idx(5, 10), (10, 4)]),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b), [(2, 3, 9), (4, 3, 3), (4,)]),
    ("conv2d_bf16_weight", lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 6, 6), ((4, 3, 3, 3), BF)]),
    ("conv3d", lambda x, w: F.conv3d(x, w), [(1, 2, 4, 4, 4), (3, 2, 2, 2, 2)]),
    ("conv_transpose1d", lambda x, w: F.conv_transpose1d(x, w, stride=2), [(2, 3, 5), (3, 4, 3)]),
    ("conv_transpose3d", lambda x, w: F.conv_transpose3d(x, w), [(1, 2, 3, 3, 3), (2, 3, 2, 2, 2)]),
    ("addmm_mixed", lambda c, a, b: torch.addmm(c, a, b), [(4, 5), ((4, 8), BF), (8, 5)]),
    ("addbmm", lambda c, a, b: torch.addbmm(c, a, b), [(4, 5), (2, 4, 8), (2, 8, 5)]),
    ("baddbmm_beta", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2), [(2, 4, 5), (2, 4, 8), (2, 8, 5)]),
    ("bmm_f64", lambda a, b: torch.bmm(a, b), [((2, 4, 8), F64), ((2, 8, 5), F64)]),
    ("matmul_1d", lambda a, b: a @ b, [(8,), (8,)]),
    ("matmul_method", lambda a, b: a.matmul(b), [(2, 3, 8), (8, 4)]),
    ("linalg_matmul", lambda a, b: torch.linalg.matmul(a, b), [(3, 8), (8, 4)]),
    ("mm_int", lambda a, b: torch.mm(a, b), [lambda d: torch.randint(-3, 3, (3, 4), device=d),
                                           lambda d: torch.randint(-3, 3, (4, 2), device=d)]),
    ("einsum_attention", lambda q, k: torch.einsum("bqd,bkd->bqk", q, k), [(2, 4, 8), (2, 5, 8)]),
    ("einsum_rope_outer", lambda t, f: torch.einsum("i,j->ij", t, f), [(6,), (4,)]),
    ("einsum_transpose", lambda x: torch.einsum("ij->ji", x), [(3, 4)]),
    ("einsum_hadamard", lambda a, b: torch.einsum("ij,ij->ij", a, b), [(3, 4), (3, 4)]),
    ("einsum_dot", lambda a, b: torch.einsum("i,i->", a, b), [(5,), (5,)]),
    ("einsum_broadcast_dim", lambda a, b: torch.einsum("ij,jk->ik", a, b), [(3, 1), (1, 4)]),
    ("einsum_chain", lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), [(2, 3), (3, 4), (4, 5)]),
    ("einsum_bmm_then_mul", lambda a, b, c: torch.einsum("ij,j,k->ik", a, b, c), [(2, 3), (3,), (4,)]),
    ("einsum_mul_then_bmm", lambda a, b, c: torch.einsum("i,j,ij->", a, b, c), [(2,), (3,), (2, 3)]),
    ("einsum_outer_mixed", lambda a, b: torch.einsum("i,j->ij", a, b), [((3,), BF), (4,)]),
    ("einsum_bmm_mixed", lambda a, b: torch.einsum("ij,jk->ik", a, b), [((3, 4), BF), (4, 2)]),
    ("tensordot", lambda a, b: torch.tensordot(a, b, 1), [(2, 3), (3, 4)]),
    ("tensordot_mixed", lambda a, b: torch.tensordot(a, b, 1), [((2, 3), BF), (3, 4)]),
    ("tensordot_full", lambda a, b: torch.tensordot(a, b, 2), [(2, 3), (2, 3)]),
    ("inner", lambda a, b: torch.inner(a, b), [(2, 3), (4, 3)]),
    ("inner_vectors", lambda a, b: torch.inner(a, b), [(3,), (3,)]),
    ("outer", lambda a, b: torch.outer(a, b), [(3,), (4,)]),
    ("multi_dot", lambda a, b, c: torch.linalg.multi_dot([a, b, c]), [(2, 3), (3, 4), (4, 5)]),
    ("chain_matmul", lambda a, b: torch.chain_matmul(a, b, a.T), [(3, 4), (4, 4)]),
    ("matrix_power", lambda a: torch.linalg.matrix_power(a, 3), [(4, 4)]),
    ("bilinear", lambda a, b, w: F.bilinear(a, b, w), [(4, 3), (4, 5), (2, 3, 5)]),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [(1, 2, 5, 8)] * 3),
    ("sdpa_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [(1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8), (5, 6)]),
    ("mha", lambda x, w, b, wo, bo: F.multi_head_attention_forward(
        x, x, x, 8, 2, w, b, None, None, False, 0.0, wo, bo, training=False)[0],
     [(3, 2, 8), (24, 8), (24,), (8, 8), (8,)]),
    ("rnn_tanh_cell", lambda x, h, wi, wh, bi, bh: torch.rnn_tanh_cell(x, h, wi, wh, bi, bh),
     [(3, 4), (3, 5), (5, 4), (5, 5), (5,), (5,)]),
    ("gru_cell", lambda x, h, wi, wh, bi, bh: torch.gru_cell(x, h, wi, wh, bi, bh),
     [(3, 4), (3, 5), (15, 4), (15, 5), (15,), (15,)]),
    ("lstm_cell", lambda x, h, c, wi, wh: torch.lstm_cell(x, (h, c), wi, wh)[1],
     [(3, 4), (3, 5), (3, 5), (20, 4), (20, 5)]),
    ("cumsum_dtype", lambda x: torch.cumsum(x, 0, dtype=torch.float32), [((4, 3), BF)]),
    ("cumprod", lambda x: torch.cumprod(x, 1), [((4, 3), F16)]),
    ("prod", lambda x: x.prod(), [_pos((3, 2))]),
    ("sum_dtype", lambda x: x.sum(-1, dtype=torch.float64), [((4, 8), BF)]),
    ("mean_dtype", lambda x: x.mean(-1, dtype=torch.float32), [((4, 8), BF)]),
    ("sum_int", lambda x: x.sum(), [lambda d: torch.randint(0, 5, (4, 3), device=d)]),
    ("norm", lambda x: x.norm(), [((4, 8), BF)]),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x, 3, dim=-1), [((4, 8), F16)]),
    ("matrix_norm", lambda x: torch.linalg.matrix_norm(x), [(3, 4)]),
    ("pow_tensor", lambda x, y: torch.pow(x, y), [_pos((4, 3)), (4, 3)]),
    ("pow_scalar_method", lambda x: x.pow(2.5), [((4, 3), BF)]),
    ("exp_log_family", lambda x: x.exp() + x.abs().log1p() + x.expm1() + (x.abs() + 1).log2() + x.sinh(),
     [((4, 8), BF)]),
    ("rsqrt_reciprocal", lambda x: (x.abs() + 1).rsqrt() + (x.abs() + 1).reciprocal(), [((4, 8), F16)]),
    ("cdist", lambda a, b: torch.cdist(a, b), [(4, 3), (5, 3)]),
    ("cdist_bf16", lambda a, b: torch.cdist(a, b), [((4, 3), BF), ((5, 3), BF)]),
    ("cosine_similarity", lambda a, b: F.cosine_similarity(a, b), [((4, 8), BF), (4, 8)]),
    ("interpolate_bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [((1, 2, 4, 4), BF)]),
    ("interpolate_nearest", lambda x: F.interpolate(x, size=6), [((1, 2, 4), BF)]),
    ("interpolate_bicubic", lambda x: F.interpolate(x, size=(5, 7), mode="bicubic"), [(1, 2, 4, 4)]),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2), [((1, 2, 4, 4, 4), BF)]),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2), [((1, 2, 4, 4, 4), BF)]),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, 2), [((1, 2, 4, 4, 4), BF)]),
    ("binary_cross_entropy", lambda x, y: F.binary_cross_entropy(x.sigmoid(), y), [((4, 3), BF), lambda d: torch.rand(4, 3, device=d)]),
    ("bce_with_logits", lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()), [((4, 3), BF), (4, 3)]),
    ("kl_div", lambda x, y: F.kl_div(x.log_softmax(-1), y.softmax(-1), reduction="batchmean"), [((4, 8), BF), (4, 8)]),
    ("smooth_l1_loss", lambda x, y: F.smooth_l1_loss(x, y), [((4, 8), BF), (4, 8)]),
    ("cat_mixed", lambda a, b: torch.cat([a, b]), [((2, 3), BF), (2, 3)]),
    ("stack_f64", lambda a, b: torch.stack([a, b]), [((2, 3), F64), (2, 3)]),
    ("linear_f64_input", lambda x, w: F.linear(x, w), [((4, 8), F64), ((6, 8), F64)]),
    ("linear_bf16_weight", lambda x, w, b: F.linear(x, w, b), [(4, 8), ((6, 8), BF), (6,)]),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [((4, 8), BF)]),
    ("silu_mul", lambda x, y: F.silu(x) * y, [((4, 8), BF), (4, 8)]),
    ("prelu", lambda x, w: F.prelu(x, w), [(2, 3, 4), (3,)]),
    ("pad_reflect2d", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), [((1, 2, 4, 4), BF)]),
    ("grid_sample", lambda x, g: F.grid_sample(x, g.tanh(), align_corners=False), [((1, 2, 4, 4), BF), (1, 3, 3, 2)]),
    ("logsumexp", lambda x: torch.logsumexp(x, -1), [((4, 8), BF)]),
    ("topk_values", lambda x: torch.topk(x, 3).values, [((4, 8), BF)]),
    ("where_mixed", lambda c, a, b: torch.where(c > 0, a, b), [(4, 3), ((4, 3), BF), (4, 3)]),
    ("to_dtype_in_region", lambda x, w: F.linear(x, w).float().softmax(-1), [(4, 8), (6, 8)]),
]


def _inputs(specs, device):
    out = []
    for s in specs:
        if callable(s):
            out.append(s(device))
        elif isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], torch.dtype):
            out.append(torch.randn(s[0], device=device).to(s[1]))
        else:
            out.append(torch.randn(s, device=device))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("low", [BF, F16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name,fn,specs", CALLS, ids=[c[0] for c in CALLS])
def test_model_call_follows_eager_autocast(name, fn, specs, low, device):
    torch.manual_seed(0)
    args = _inputs(specs, device)
    grad = not name.endswith("_int")
    check_call(thunder.jit(fn), fn, args, {}, device, low, f"{name}[{device} {low}]", grad=grad)


# ---- the autocast state inside the program ------------------------------------------------------


def _reads_state(x, w):
    y = F.linear(x, w)
    if torch.is_autocast_enabled("cpu"):
        y = y * 2
    return y.float() + torch.ones((), dtype=torch.get_autocast_dtype("cpu")), torch.is_autocast_enabled()


def _cache_variants(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        a = F.linear(x, w)
    with torch.autocast("cpu", dtype=torch.float16, cache_enabled=True):
        b = F.linear(x, w)
    return a, b


def _enabled_false_nested(x, w):
    with torch.autocast("cpu", enabled=False):
        a = F.linear(x, w)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = F.linear(x, w)
    return a, b, F.linear(x, w)


def _amp_spellings(x, w):
    with torch.amp.autocast("cpu", dtype=torch.float16):
        a = F.linear(x, w)
    with torch.autocast(device_type="cpu"):
        b = F.linear(x, w).softmax(-1)
    return a, b, torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")


def _decorated(x, w):
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def inner(x):
        return F.linear(x, w)

    return inner(x), F.linear(x, w)


@pytest.mark.parametrize("outer", [None, BF, F16], ids=["plain", "outer-bf16", "outer-f16"])
@pytest.mark.parametrize("fn", [_reads_state, _cache_variants, _enabled_false_nested, _amp_spellings, _decorated],
                         ids=lambda f: f.__name__.strip("_"))
def test_autocast_state_inside_the_program(fn, outer):
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    jfn = thunder.jit(fn)
    with torch.autocast("cpu", dtype=outer or BF, enabled=outer is not None):
        out, ref = jfn(x, w), fn(x, w)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        if isinstance(r, torch.Tensor):
            assert o.dtype == r.dtype
            torch.testing.assert_close(o, r)  # the same casts, the same kernels: equal values
        else:
            assert o == r
