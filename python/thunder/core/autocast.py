"""torch.autocast applied while tracing.

Under an active torch.autocast, each torch call traced becomes its thunder symbol called on
arguments cast as PyTorch's autocast would cast them (ATen's autocast_mode: a policy per op and
device type), so the trace holds explicit casts the fuser can fuse, and the program runs with
autocast off (`@no_autocast`; the runtime excludes autocast's dispatch keys). The state in force
when an op is traced decides: an autocast region entered inside the traced function, or
`enabled=False` inside one, applies to the ops traced in it, as in eager. The cache key holds
whether autocast is on and its dtype for each device type.

One table, _POLICY, keyed by the symbol's name (the ltorch name, or the ATen name of a call that
falls back to PyTorch), gives each op's class per device type:
- LOWER: every eligible tensor argument cast to the autocast dtype (matmuls, convolutions, SDPA);
- FP32: every eligible tensor argument cast to float32 (pointwise ops that lose range, norms,
  losses);
- FP32_UNLESS_DTYPE: the op computes in float32 (its first argument cast) unless the call names
  an output dtype (softmax, sum, cumsum: ATen sets their dtype argument);
- PROMOTE: every eligible tensor argument cast to the widest floating type among them (cat, stack
  on CPU; addcmul, index_put on CUDA);
- UNSAFE: refused by PyTorch under autocast (binary_cross_entropy on CUDA).
An eligible tensor is a floating-point, non-float64 tensor on the device type whose autocast
applies; the device type is CUDA's when any tensor argument is on CUDA, as ATen's dispatch picks.
Ops not in the table run in the dtypes their arguments have.
"""

from __future__ import annotations

import torch

from thunder import _C

LOWER, FP32, FP32_UNLESS_DTYPE, PROMOTE, UNSAFE = "lower", "fp32", "fp32_unless_dtype", "promote", "unsafe"


def _classes(**groups: str) -> dict:
    """{op name: class} from {class: space-separated op names}."""
    return {name: cls for cls, names in groups.items() for name in names.split()}


# As torch 2.13's ATen/autocast_mode.h and autocast_mode.cpp register AutocastCUDA and AutocastCPU
# kernels, by the names thunder's symbols and PyTorch's callables carry. Composite ops whose ATen
# decomposition reaches a listed op take its class (CUDA's cross_entropy computes log_softmax in
# float32; CPU's einsum runs bmm in lower precision).
_POLICY = {
    "cuda": _classes(
        lower=(
            "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d convolution "
            "_convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm "
            "chain_matmul linalg_multi_dot lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
            "scaled_dot_product_attention"
        ),
        fp32=(
            "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus "
            "layer_norm rms_norm group_norm norm nuclear_norm cosine_similarity poisson_nll_loss "
            "cosine_embedding_loss nll_loss hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss "
            "mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
            "multi_margin_loss binary_cross_entropy_with_logits cross_entropy dist pdist cdist renorm "
            "logsumexp arccos arcsin square rtruediv normalize trace pairwise_distance upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_linear1d "
            "upsample_bilinear2d upsample_trilinear3d upsample_bicubic2d"
        ),
        fp32_unless_dtype=(
            "prod softmax log_softmax cumprod cumsum sum linalg_vector_norm vector_norm linalg_matrix_norm"
        ),
        promote=(
            "addcdiv addcmul atan2 bilinear cross linalg_cross dot vdot grid_sample index_put tensordot scatter_add"
        ),
        unsafe="binary_cross_entropy",
    ),
    "cpu": _classes(
        lower=(
            "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d _convolution bmm "
            "mm linalg_vecdot baddbmm addmm addbmm linear matmul einsum prelu scaled_dot_product_attention"
        ),
        fp32=(
            "avg_pool3d binary_cross_entropy grid_sample polar prod quantile nanquantile stft cdist trace "
            "view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse "
            "max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d adaptive_max_pool3d adaptive_max_pool3d_with_indices "
            "fractional_max_pool2d fractional_max_pool3d mse_loss cosine_embedding_loss nll_loss "
            "hinge_embedding_loss poisson_nll_loss cross_entropy smooth_l1_loss huber_loss l1_loss "
            "margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div "
            "multilabel_margin_loss binary_cross_entropy_with_logits geqrf qr svd triangular_solve "
            "fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 "
            "fft_rfftn fft_irfftn fft_hfft fft_ihfft linalg_cholesky linalg_cholesky_ex linalg_cond "
            "linalg_eig linalg_eigh linalg_eigvals linalg_eigvalsh linalg_householder_product linalg_inv "
            "linalg_inv_ex linalg_lstsq linalg_matrix_rank linalg_qr linalg_solve linalg_svd linalg_svdvals "
            "linalg_tensorinv linalg_tensorsolve"
        ),
        promote="cat stack index_copy",
    ),
}


def _mode(args, kwargs, index: int, default: str) -> str:
    return kwargs.get("mode", args[index] if len(args) > index else default)


def _pad_class(args, kwargs):
    # CPU's reflection_pad1d/2d and replication_pad1d/2d/3d are float32; constant, circular and
    # 3-d reflection padding are not listed.
    mode, pad = _mode(args, kwargs, 2, "constant"), kwargs.get("pad", args[1] if len(args) > 1 else ())
    return FP32 if (mode == "reflect" and len(pad) <= 4) or mode == "replicate" else None


class InsideTheOp(NotImplementedError):
    """Autocast casts values inside the op, between the ops its ATen implementation calls, as
    thunder's symbol cannot: the call falls back to PyTorch, run under the traced autocast state."""


def _einsum_class(args, kwargs):
    """CPU's einsum is not listed: ATen's einsum contracts its operands left to right, a pair by
    bmm (lower precision) when they share a label summed there of length other than 1 on both
    sides, else by mul (their dtypes promoted); one operand is only summed and permuted. So
    torch.einsum("i,j->ij", t, inv_freq) (rotary embeddings' outer product) stays float32, and
    "bqd,bkd->bqk" runs in lower precision. A chain mixing both kinds rounds between them as no
    one class does, and mul promotes operands of two dtypes: PyTorch runs these."""
    eq = kwargs.get("equation", args[0] if args else None)
    ops = args[1:] if len(args) > 1 else kwargs.get("operands", ())
    if len(ops) == 1 and isinstance(ops[0], (tuple, list)):
        ops = ops[0]
    if not isinstance(eq, str) or "." in eq or not ops or not all(_is_tensor(t) for t in ops):
        return LOWER
    eq = eq.replace(" ", "")
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        return LOWER
    if "->" not in eq:
        out = "".join(sorted(c for c in set(lhs) if lhs.count(c) == 1 and c.isalpha()))
    shapes = [tuple(t.shape) for t in ops]
    if any(len(ls) != len(sh) for ls, sh in zip(terms, shapes)):
        return LOWER
    steps = []
    acc = dict(zip(terms[0], shapes[0]))
    for i in range(1, len(terms)):
        keep = set(out).union(*terms[i + 1:])
        nxt = dict(zip(terms[i], shapes[i]))
        steps.append(any(c not in keep and n != 1 and nxt[c] != 1 for c, n in acc.items() if c in nxt))
        merged = {**nxt, **acc}
        acc = {c: max(merged[c], nxt.get(c, 1)) for c in merged if c in keep}
    if all(steps):
        return LOWER if steps else None
    if not any(steps) and len({t.dtype for t in ops}) == 1:
        return None
    raise InsideTheOp(
        f"thunder.jit: torch.einsum('{eq}') under torch.autocast('cpu'): ATen contracts this chain of "
        f"operands partly by bmm (in the autocast dtype) and partly by mul (in the operands' dtypes), "
        f"which thunder's einsum does not")


def _matrix_sizes(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def _tensordot_class(args, kwargs, name="tensordot"):
    """CPU's tensordot is not listed: ATen's multiplies the free dims' matrices by mm (lower
    precision), but a product of two vectors (one free element on each side) by dot, not listed."""
    a = args[0] if args else kwargs.get("a")
    b = args[1] if len(args) > 1 else kwargs.get("b")
    dims = args[2] if len(args) > 2 else kwargs.get("dims", 2)
    if not (_is_tensor(a) and _is_tensor(b)):
        return LOWER
    if a.dtype != b.dtype:
        # ATen checks before its mm, which autocast would cast.
        raise RuntimeError(f"{name}: both inputs should have same dtype, but got {a.dtype} and {b.dtype} "
                           f"(torch.autocast('cpu') does not cast {name}'s arguments, as in eager)")
    if _is_tensor(dims):
        return LOWER
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = (list(d) if isinstance(d, (list, tuple)) else [d] for d in dims)
    da = [d % a.ndim for d in da] if a.ndim else []
    db = [d % b.ndim for d in db] if b.ndim else []
    free_a = _matrix_sizes(a, [d for d in range(a.ndim) if d not in da])
    free_b = _matrix_sizes(b, [d for d in range(b.ndim) if d not in db])
    return None if free_a == 1 and free_b == 1 else LOWER


def _inner_class(args, kwargs):
    """ATen's inner: mul for a 0-dim operand, else tensordot over the last dims."""
    a = args[0] if args else kwargs.get("input")
    b = args[1] if len(args) > 1 else kwargs.get("other")
    if not (_is_tensor(a) and _is_tensor(b)) or a.ndim == 0 or b.ndim == 0:
        return None
    return _tensordot_class((a, b, ([a.ndim - 1], [b.ndim - 1])), {}, "inner")


# Ops whose class depends on their mode: ATen runs a kernel per mode, listed or not.
_MODE_RULES = {
    # upsample_* kernels are float32; "area" is adaptive_avg_pool, not listed.
    ("cuda", "interpolate"): lambda args, kwargs: None if _mode(args, kwargs, 3, "nearest") == "area" else FP32,
    ("cpu", "pad"): _pad_class,
    # Composite ops of CPU's autocast, by the ATen op their decomposition reaches.
    ("cpu", "einsum"): _einsum_class,
    ("cpu", "tensordot"): _tensordot_class,
    ("cpu", "inner"): _inner_class,
    # CUDA's tensordot is listed (promote); inner reaches it, but for a 0-dim operand (mul).
    ("cuda", "inner"): lambda args, kwargs: None if any(
        _is_tensor(t) and t.ndim == 0 for t in args[:2]) else PROMOTE,
    # Tensor.sum_to_size sums (listed) only where the size differs.
    ("cuda", "sum_to_size"): lambda args, kwargs: FP32_UNLESS_DTYPE if _is_tensor(args[0]) and tuple(
        args[0].shape) != _size_arg(args[1:]) else None,
}


def _size_arg(rest) -> tuple:
    return tuple(rest[0]) if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)) else tuple(rest)


# Entries of the CUDA policy that PyTorch versions list differently (rms_norm is float32 from
# torch 2.13, linalg_cross promotes there; torch 2.11 lists neither): asked of the installed
# torch on a tiny CUDA call the first time they matter.
def _cuda_rms_norm_listed() -> bool:
    x = torch.ones(1, 2, device="cuda", dtype=torch.float16)
    with torch.autocast("cuda", dtype=torch.float16):
        return torch.nn.functional.rms_norm(x, (2,)).dtype == torch.float32


def _cuda_linalg_cross_listed() -> bool:
    a = torch.ones(1, 3, device="cuda", dtype=torch.float16)
    with torch.autocast("cuda", dtype=torch.float16):
        try:
            torch.linalg.cross(a, a.float())
        except RuntimeError:
            return False
    return True


_VERSIONED = {("cuda", "rms_norm"): _cuda_rms_norm_listed, ("cuda", "linalg_cross"): _cuda_linalg_cross_listed}
_versioned_answers: dict = {}


def _listed_here(device_type: str, name: str) -> bool:
    key = (device_type, name)
    probe = _VERSIONED.get(key)
    if probe is None:
        return True
    if key not in _versioned_answers:
        try:
            _versioned_answers[key] = probe()
        except Exception:  # noqa: BLE001 - no CUDA to ask: the table's entry
            _versioned_answers[key] = True
    return _versioned_answers[key]


def _is_tensor(x) -> bool:
    return isinstance(x, (_C.TensorProxy, torch.Tensor))


def _device_type(x) -> str:
    return x._device_str.split(":")[0] if isinstance(x, _C.TensorProxy) else x.device.type


def _tensors(x):
    """The tensors of an argument: itself, or those of a list or tuple (cat's, einsum's operands)."""
    if _is_tensor(x):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)


def _map_tensors(x, f):
    if _is_tensor(x):
        return f(x)
    if isinstance(x, (tuple, list)) and any(True for _ in _tensors(x)):
        return type(x)(_map_tensors(y, f) for y in x)
    return x


def _eligible(x, device_type: str) -> bool:
    return x.dtype.is_floating_point and x.dtype != torch.float64 and _device_type(x) == device_type


def _cast(x, dtype):
    # The trace's explicit cast: a convert_element_type the fuser fuses with its neighbours.
    return _C.get_symbol("prims.convert_element_type")(x, dtype)


def _promoted(name: str, tensors, device_type: str, lower: torch.dtype) -> torch.dtype:
    """The widest floating type among the eligible tensors, as ATen's autocast promotes (float64
    tensors are left out; lower precision widens only to float32)."""
    to = lower
    for t in tensors:
        if not t.dtype.is_floating_point or _device_type(t) != device_type or t.dtype == torch.float64:
            continue
        if to == torch.float32 or t.dtype == torch.float32:
            to = torch.float32
        elif t.dtype != lower:
            raise RuntimeError(
                f"{name}: autocast ({device_type}, {lower}) cannot promote a {t.dtype} argument with "
                f"{lower} arguments; cast it to {lower} or float32"
            )
    return to


def apply(name: str, args: tuple, kwargs: dict, for_fallback: bool = False) -> tuple[tuple, dict]:
    """(args, kwargs) of a call of op `name` cast as autocast would cast them now; the same
    objects when autocast is off for the op's device type or the op is not in its policy.
    Raises InsideTheOp where only PyTorch's op can apply the policy; `for_fallback`: the
    arguments of that call (the same objects; it runs under the autocast state)."""
    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
        return args, kwargs
    tensors = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
    if not tensors:
        return args, kwargs
    device_type = "cuda" if any(_device_type(t) == "cuda" for t in tensors) else "cpu"
    if not torch.is_autocast_enabled(device_type):
        return args, kwargs
    rule = _MODE_RULES.get((device_type, name))
    try:
        cls = rule(args, kwargs) if rule is not None else _POLICY[device_type].get(name)
    except InsideTheOp:
        if for_fallback:
            return args, kwargs
        raise
    if cls is None or not _listed_here(device_type, name):
        return args, kwargs
    lower = torch.get_autocast_dtype(device_type)
    if cls == UNSAFE:
        raise RuntimeError(
            f"torch.nn.functional.{name} is unsafe to autocast: it is refused under torch.autocast "
            f"({device_type}), as in eager; use {name}_with_logits, or disable autocast around it"
        )
    if cls == FP32_UNLESS_DTYPE:
        first = args[0] if args else None
        named = kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args)
        if named or not _is_tensor(first) or not _eligible(first, device_type):
            return args, kwargs
        return (_cast(first, torch.float32) if first.dtype != torch.float32 else first, *args[1:]), kwargs
    to = {LOWER: lower, FP32: torch.float32}.get(cls) or _promoted(name, tensors, device_type, lower)

    def cast(t):
        return _cast(t, to) if _eligible(t, device_type) and t.dtype != to else t

    return tuple(_map_tensors(a, cast) for a in args), {k: _map_tensors(v, cast) for k, v in kwargs.items()}

