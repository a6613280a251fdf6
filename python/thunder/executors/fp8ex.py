"""The fp8 executor: linear layers trained in FP8 through cuBLASLt (`torch._scaled_mm`), with
per-tensor scaling as TransformerEngine's recipes do it.

    tmodel = thunder.jit(model, executors=["fp8", *thunder.get_default_executors()])
    tmodel = thunder.jit(model, executors=["fp8"], fp8_recipe=DelayedScaling(amax_history_len=16))
    tmodel = thunder.jit(model, executors=["fp8"], fp8_recipe=CurrentScaling())

It claims `ltorch.linear`. The forward multiplies the input and the weight in float8_e4m3fn; the
backward multiplies the output gradient in float8_e5m2 (a wider range, fewer mantissa bits) by the
e4m3 weight (dgrad) and by the e4m3 input saved by the forward (wgrad). Each tensor is cast with
one float32 scale, fp8_max / amax, and _scaled_mm takes the reciprocals to undo it:

- DelayedScaling (the default) uses the scale computed from the amax history of the tensor's role
  (input, weight, output gradient) in that layer: the largest (amax_compute_algo="max") or the
  latest ("most_recent") of the last amax_history_len amaxes, divided by 2**margin. Values beyond
  the scale's range saturate at fp8_max. Each cast appends its tensor's amax to the history and
  recomputes the scale for the next call. A role's first cast, while its history is empty, uses
  its own amax.
- CurrentScaling computes each tensor's amax just before its cast (one more pass over it).

The weight is cast once per value it takes: the FP8 copy (and the transposed copy dgrad reads) is
kept until the weight's version counter changes (the optimizer's in-place step), so micro-batches
of one step share it.

Layouts: _scaled_mm takes its first operand row-major and its second column-major. The forward
reads the input and the weight row-major; dgrad reads the output gradient row-major and the
weight transposed; wgrad reads the transposes of the output gradient and of the input. So each
tensor a backward follows is cast in both layouts by one kernel, and the forward saves the
transposed input (the only layout the backward reads): no FP8 tensor is copied into another layout.

Scaling state: thunder.jit(module) with DelayedScaling gives each nn.Linear that can run in FP8 two
buffers, `fp8_amax_history` (float32 [amax_history_len, 3]: input, weight, gradient) and
`fp8_scale` (float32 [3]), so the module's state_dict saves them and load_state_dict restores
them. Linears called with tensors that are not a jitted module's Linear weights (a jitted function
of its own parameters) keep their state by the weight tensor, not in any state_dict. Under
torch.autocast the weight a linear sees is a new bfloat16 copy at each call: it is cast to FP8 at
each call and every scale comes from its tensor's own amax (current scaling, whatever the recipe);
train bfloat16 parameters for the delayed recipe and the once-per-step weight cast.
DDP/FSDP modules (thunder.distributed) get no recipe or state buffers from here: their linears use
the default recipe with state kept by weight.

Calls it cannot run in FP8 stay in the usual precision and say why in the trace:

    (t0, t5, t6) = fp8_linear(t_0, t_fc1_weight, t_fc1_bias, 't_fc1_weight', 'delayed:16:max:0', True)
    t3 = linear_not_fp8(t2, t_head_weight, t_head_bias, 'out_features 10 is not a multiple of 16')
    (t19, t20, t21) = fp8_linear_backward(t25, t16, t17, t_fc2_weight, 't_fc2_weight', 'delayed:16:max:0', True)

fp8_linear's last argument says whether a backward follows. Then it returns the output, the e4m3
input transposed ([in_features, tokens], a float8_e4m3fn tensor: f8e4m3fn in the trace) and its
scale's reciprocal, which the backward reads instead of the input; else the output alone.

FP8 needs a CUDA device of compute capability 8.9 or more (Ada, Hopper), an input and a weight of
one dtype (bfloat16, float16 or float32), in_features and out_features multiples of 16 and at
least the recipe's min_features (smaller layers gain nothing from FP8 and lose accuracy), and a
weight not named by the recipe's `skip`. Token counts that are not multiples of 16 are padded
with zero rows. THUNDER_FP8_CPU=1 also runs FP8 on CPU (torch's reference _scaled_mm: for tests).

On CUDA with Triton a cast is one Triton kernel (fp8_triton.py) that reads the tensor once and
writes the layouts asked for and, for delayed scaling, the tensor's amax (the previous scale is
known before the pass); the history and scale update is one kernel that torch.compile makes of
it. Current scaling reads the tensor once more for its amax first. THUNDER_FP8_TRITON=0 casts with
torch ops (compiled by torch.compile where THUNDER_FP8_COMPILED_CASTS says: by default on CUDA,
=0 eager ops, =1 on CPU too).

THUNDER_FP8_FUSED_CASTS=1 writes the input and gradient casts into the trace as torch ops, once
every such role of a jitted module's linears has had its first cast (_Group, in the module's cache
key: one more trace): `fp8_scale` gives the layer's scale, the trace multiplies, saturates,
converts and takes each row's amax, and the fuser computes that in the kernel producing the
tensor (an RMSNorm, a SwiGLU, a residual add); `fp8_linear_cast` / `fp8_linear_cast_backward`
record the amaxes, transpose the FP8 tensor in one Triton pass and multiply. Bit for bit the
same casts as the executor's own on CPU. Off by default: on the H200's Llama step it was slower
(benchmarks/RESULTS.md, session 39).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref

import torch

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.transforms import get_grad, put_grads
from thunder.executors import fp8_triton
from thunder.extend import OperatorExecutor, register_executor

__all__ = [
    "fp8_ex",
    "Recipe",
    "DelayedScaling",
    "CurrentScaling",
    "fp8_linear",
    "fp8_linear_backward",
    "linear_not_fp8",
    "fp8_available",
]

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# The roles of a layer's tensors: columns of its amax history, entries of its scales.
INPUT, WEIGHT, GRAD = 0, 1, 2
_ALIGN = 16  # cuBLASLt's FP8 kernels need every dimension a multiple of 16


# ---- recipes -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    """What both recipes share: linears with in_features or out_features below min_features stay
    in the usual precision, as do those whose weight's name (as the trace names it, e.g.
    't_lm_head_weight') contains one of the strings in `skip`."""

    min_features: int = 64
    skip: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.min_features, int) or self.min_features < 0:
            raise ValueError(f"{type(self).__name__}: min_features must be an int >= 0, got {self.min_features!r}")
        if isinstance(self.skip, str) or not all(isinstance(s, str) for s in self.skip):
            raise TypeError(f"{type(self).__name__}: skip must be a tuple of strings, got {self.skip!r}")
        object.__setattr__(self, "skip", tuple(self.skip))

    @property
    def key(self) -> str:
        """The recipe's scaling as the printed trace names it (min_features and skip act when tracing)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, kw_only=True)
class DelayedScaling(Recipe):
    """TransformerEngine's default: scales from the amax history of each tensor role."""

    amax_history_len: int = 16
    amax_compute_algo: str = "max"
    margin: int = 0

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.amax_history_len, int) or self.amax_history_len < 1:
            raise ValueError(f"DelayedScaling: amax_history_len must be an int >= 1, got {self.amax_history_len!r}")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"DelayedScaling: amax_compute_algo must be 'max' or 'most_recent', "
                             f"got {self.amax_compute_algo!r}")
        if not isinstance(self.margin, int) or self.margin < 0:
            raise ValueError(f"DelayedScaling: margin must be an int >= 0, got {self.margin!r}")

    @property
    def key(self) -> str:
        return f"delayed:{self.amax_history_len}:{self.amax_compute_algo}:{self.margin}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CurrentScaling(Recipe):
    """Just-in-time scaling: each tensor's scale from its own amax."""

    margin: int = 0

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.margin, int) or self.margin < 0:
            raise ValueError(f"CurrentScaling: margin must be an int >= 0, got {self.margin!r}")

    @property
    def key(self) -> str:
        return f"current:{self.margin}"


# Recipes by key: the trace names a recipe by its key, the run-time functions look it up here.
_RECIPES: dict[str, Recipe] = {}
_tls = threading.local()


def _recipe_in_scope() -> Recipe:
    return getattr(_tls, "recipe", None) or DelayedScaling()


class _RecipeScope:
    """While a jitted object traces: its recipe is the one its linears use."""

    def __init__(self, recipe: Recipe, group: _Group | None = None):
        self._recipe, self._group = recipe, group

    def __enter__(self):
        self._old = getattr(_tls, "recipe", None), getattr(_tls, "group", None)
        _tls.recipe, _tls.group = self._recipe, self._group

    def __exit__(self, *exc):
        _tls.recipe, _tls.group = self._old
        return False


# ---- scaling state -----------------------------------------------------------------------------


class _Info:
    """What the run time keeps per weight: its layer's Linear (whose buffers hold the state) or its
    own state, which roles have had their first cast, and the weight's FP8 copies with the version
    they were cast from."""

    def __init__(self, w: torch.Tensor):
        self.ref = weakref.ref(w)
        self.owner = None  # weakref to the Linear holding w
        self.loose = None  # (amax history, scale) of a weight no module holds
        self.fresh = [True, True, True]
        self.group = None  # the _Group of the jitted module whose linear holds w
        self.trace_name = None  # w's name in that module's traces
        self.cache_key = None
        self.w8 = None
        self.w8_t = None
        self.w_scale_inv = None


# By the weight's id (tensors compare by value, so no WeakKeyDictionary); dropped with the weight.
_INFO: dict[int, _Info] = {}


def _forget(key: int, info: _Info) -> None:
    if _INFO.get(key) is info:
        del _INFO[key]


def _info(w: torch.Tensor) -> _Info:
    info = _INFO.get(id(w))
    if info is None or info.ref() is not w:
        info = _INFO[id(w)] = _Info(w)
        weakref.finalize(w, _forget, id(w), info)
    return info


class _Group:
    """The FP8 linears of one jitted module, and whether each role that the casts in the trace
    serve (inputs, output gradients) has had its first cast in all of them: `warm()`, part of the
    module's cache key. A role's first cast scales by its tensor's own amax, a pass over the tensor
    before the cast; after it the scale is known before the tensor is made, and the module traces
    again with those casts written as torch ops (the scale's product, the saturation, the
    conversion and each row's amax) that the fuser computes in the kernel producing the tensor
    (an RMSNorm, a SwiGLU, a residual add), in place of a Triton pass that reads it again."""

    def __init__(self):
        self.infos: list[_Info] = []
        self._warm = [False, False]

    def warm(self) -> tuple[bool, bool]:
        if os.environ.get("THUNDER_FP8_FUSED_CASTS") != "1":  # (off: no second trace)
            return False, False
        for k, role in enumerate((INPUT, GRAD)):
            if not self._warm[k]:  # once warm, a role stays so until a state is loaded (reset)
                self._warm[k] = all(not i.fresh[role] for i in self.infos)
        return self._warm[0], self._warm[1]

    def reset(self) -> None:
        self._warm = [False, False]


def _new_state(history_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(history_len, 3, dtype=torch.float32, device=device),
            torch.ones(3, dtype=torch.float32, device=device))


def _state(w: torch.Tensor, recipe: DelayedScaling) -> tuple[torch.Tensor, torch.Tensor]:
    """The (amax history, scale) of w's layer."""
    info = _info(w)
    mod = info.owner() if info.owner is not None else None
    if mod is not None:
        hist = mod.fp8_amax_history
        if hist.shape[0] == recipe.amax_history_len and hist.device == w.device:
            return hist, mod.fp8_scale
    state = info.loose
    if state is None or state[0].shape[0] != recipe.amax_history_len or state[0].device != w.device:
        state = info.loose = _new_state(recipe.amax_history_len, w.device)
    return state


def _read_state(module) -> None:
    # A role whose history holds an amax has had its first cast (reads the device once).
    info = _info(module.weight)
    info.fresh = [not bool(module.fp8_amax_history[:, r].any()) for r in range(3)]
    info.cache_key = None
    if info.group is not None:
        info.group.reset()


def _after_load(module, incompatible_keys) -> None:
    if isinstance(getattr(module, "fp8_amax_history", None), torch.Tensor):
        _read_state(module)


def _static_reason(in_features: int, out_features: int, name: str, recipe: Recipe) -> str | None:
    """Why a linear of these sizes and weight name stays in the usual precision, or None."""
    for what, n in (("in_features", in_features), ("out_features", out_features)):
        if n % _ALIGN:
            return f"{what} {n} is not a multiple of {_ALIGN}"
        if n < recipe.min_features:
            return f"{what} {n} is below the recipe min_features={recipe.min_features}"
    for s in recipe.skip:
        if s in name:
            return f"the recipe skips weights named *{s}*"
    return None


def prepare_module(module: torch.nn.Module, recipe: Recipe) -> _Group | None:
    """Gives module's nn.Linear layers that can run in FP8 their scaling state buffers (for
    DelayedScaling; CurrentScaling keeps none); returns their _Group."""
    if not isinstance(recipe, DelayedScaling):
        return None
    group = _Group()
    for name, mod in module.named_modules():
        if not isinstance(mod, torch.nn.Linear) or not isinstance(mod.weight, torch.Tensor):
            continue
        # The weight's name in the trace, as thunder.jit names a module's parameters.
        qual = "t_" + "".join(c if c.isalnum() else "_" for c in (f"{name}.weight" if name else "weight"))
        if _static_reason(mod.in_features, mod.out_features, qual, recipe) is not None:
            continue
        info = _info(mod.weight)
        hist = getattr(mod, "fp8_amax_history", None)
        if not (isinstance(hist, torch.Tensor) and hist.shape[0] == recipe.amax_history_len):
            hist, scale = _new_state(recipe.amax_history_len, mod.weight.device)
            mod.register_buffer("fp8_amax_history", hist)
            mod.register_buffer("fp8_scale", scale)
            info.fresh, info.cache_key = [True, True, True], None
        else:  # jitted again, or a deep copy of a jitted module: the state goes on
            _read_state(mod)
        if info.owner is None or info.owner() is not mod:
            mod.register_load_state_dict_post_hook(_after_load)
            info.owner = weakref.ref(mod)
        info.group, info.trace_name = group, qual
        group.infos.append(info)
    return group


# ---- casts and matmuls -------------------------------------------------------------------------


def _scale_from(amax: torch.Tensor, fp8_max: float, margin: int, previous: torch.Tensor | None) -> torch.Tensor:
    """fp8_max / amax / 2**margin as float32; where amax is 0, inf or nan: the previous scale (1 if none)."""
    amax = amax.float()
    scale = (fp8_max / (2.0 ** margin)) / amax
    keep = previous if previous is not None else torch.ones_like(scale)
    return torch.where((amax > 0) & torch.isfinite(amax), scale, keep)


def _amax(x: torch.Tensor) -> torch.Tensor:
    # The largest |x| in one pass (abs().amax() would write |x| first).
    return torch.linalg.vector_norm(x, float("inf")).float()


def _saturated(x, scale, fp8: torch.dtype):
    """x times `scale` in fp8, with torch ops."""
    fp8_max = torch.finfo(fp8).max
    # In float32: a bfloat16 product would round twice. Saturating: values out of range would
    # become inf (e5m2) or nan (e4m3 on CUDA).
    return (x.float() * scale).clamp(-fp8_max, fp8_max).to(fp8)


def _record(amaxes, column, scale, fp8_max: float, most_recent: bool, margin: int):
    """Delayed scaling's state update after a cast: the tensor's amax (the largest of `amaxes`)
    first in the history `column` (a view of the layer's history), and the next scale into `scale`
    (a one-element view of the layer's scales)."""
    amax = amaxes.amax().float()
    column.copy_(torch.cat([amax.reshape(1), column[:-1]]))
    latest = amax if most_recent else column.amax()
    nxt = (fp8_max / 2.0 ** margin) / latest
    scale.copy_(torch.where((latest > 0) & torch.isfinite(latest), nxt, scale))


_COMPILED: dict = {}
_compiled_ok = True


def _use_compiled(x: torch.Tensor) -> bool:
    flag = os.environ.get("THUNDER_FP8_COMPILED_CASTS", "")
    if flag == "0" or not _compiled_ok:
        return False
    if flag == "1":
        return True
    return x.device.type == "cuda" and fp8_triton.available()  # torch.compile's CUDA kernels are Triton's


_triton_ok = True


def _use_triton(x: torch.Tensor) -> bool:
    return (x.device.type == "cuda" and _triton_ok and fp8_triton.available()
            and os.environ.get("THUNDER_FP8_TRITON") != "0")


def _run(fn, *args):
    """fn(*args) compiled by torch.compile where _use_compiled says so: one kernel instead of a
    dozen eager ops. Dynamic shapes: one graph per function and fp8 dtype serves every layer.
    Where the compile fails, the eager ops compute the same."""
    global _compiled_ok
    if _use_compiled(args[0]):
        compiled = _COMPILED.get(fn)
        if compiled is None:
            compiled = _COMPILED[fn] = torch.compile(fn, dynamic=True, fullgraph=True)
        try:
            return compiled(*args)
        except Exception as e:
            import warnings

            warnings.warn(f"thunder fp8 executor: torch.compile of the FP8 casts failed ({type(e).__name__}: {e}); "
                          "casting with eager ops")
            _compiled_ok = False
    return fn(*args)


def _cast(x2: torch.Tensor, scale: torch.Tensor, fp8: torch.dtype, m_pad: int, row: bool, col: bool, amax: bool):
    """x2 [M, K] times `scale` in fp8, padded with zero rows to m_pad: (row-major [m_pad, K] or
    None, the transpose [K, m_pad] row-major or None, a float32 tensor whose largest element is
    max |x2| or None). On CUDA one Triton kernel reads x2 once for all three (fp8_triton.py)."""
    global _triton_ok
    if _use_triton(x2):
        try:
            return fp8_triton.cast(x2, scale, fp8, torch.finfo(fp8).max, m_pad, row, col, amax)
        except Exception as e:  # a Triton that cannot compile the kernel: torch ops compute the same
            import warnings

            warnings.warn(f"thunder fp8 executor: the Triton FP8 cast failed ({type(e).__name__}: {e}); "
                          "casting with torch ops")
            _triton_ok = False
    x8 = _run(_saturated, _padded_rows(x2, m_pad), scale, fp8)
    return x8 if row else None, x8.t().contiguous() if col else None, _amax(x2) if amax else None


def _quantize(x2: torch.Tensor, role: int, fp8: torch.dtype, recipe: Recipe, w: torch.Tensor, m_pad: int,
              row: bool = True, col: bool = False):
    """x2 [M, K] in fp8 padded with zero rows to m_pad (see _cast: the row-major copy where `row`,
    the transposed one where `col`) and the float32 reciprocal of its scale; records x2's amax in
    w's layer's state."""
    info = _info(w)
    fp8_max = torch.finfo(fp8).max
    if isinstance(recipe, DelayedScaling) and not info.fresh[role]:
        # The previous casts' scale: the amax and the cast are independent, one pass over x2.
        _, scales = _state(w, recipe)
        scale = scales[role:role + 1]
        scale_inv = scale.reciprocal().reshape(())
        x8, x8_t, amaxes = _cast(x2, scale, fp8, m_pad, row, col, amax=True)
        _record_rows(amaxes, w, recipe, role, fp8)
        return x8, x8_t, scale_inv
    # The scale from x's own amax (a pass before the cast): current scaling, and a delayed
    # role's first cast, whose history is empty.
    amax = _amax(x2)
    scale = _scale_from(amax, fp8_max, recipe.margin, None)
    x8, x8_t, _ = _cast(x2, scale, fp8, m_pad, row, col, amax=False)
    if isinstance(recipe, DelayedScaling):
        hist, scales = _state(w, recipe)
        hist[:, role] = 0
        hist[0, role] = amax
        scales[role] = scale
        info.fresh[role] = False
    return x8, x8_t, scale.reciprocal()


def _weight_fp8(w: torch.Tensor, recipe: Recipe, transposed: bool):
    """(w in e4m3, its transpose in e4m3 where cast, its scale's reciprocal), cast once per version
    of w: a forward that a backward follows casts both layouts in one pass, the backward's dgrad
    reads the transpose."""
    info = _info(w)
    key = (w._version, w.data_ptr(), recipe.key)
    if info.cache_key != key or (transposed and info.w8_t is None):
        info.w8, info.w8_t, info.w_scale_inv = _quantize(w.detach(), WEIGHT, E4M3, recipe, w, w.shape[0],
                                                         col=transposed)
        info.cache_key = key
    return info.w8, info.w8_t, info.w_scale_inv


def _mm(a8, b8, a_scale_inv, b_scale_inv, out_dtype, bias=None, fast_accum=False):
    """a8 @ b8 (b8 column-major) undoing both scales; a bias of out_dtype is added by the kernel
    where it takes one (cuBLASLt's FP8 epilogue takes a 16-bit bias only)."""
    fused_bias = bias is not None and out_dtype in (torch.bfloat16, torch.float16) and bias.dtype == out_dtype
    out = torch._scaled_mm(a8, b8, scale_a=a_scale_inv, scale_b=b_scale_inv, bias=bias if fused_bias else None,
                           out_dtype=out_dtype, use_fast_accum=fast_accum)
    if bias is not None and not fused_bias:
        out = out + bias
    return out


def _tokens(shape) -> int | None:
    """The rows of a linear's input of this shape (the product of all dims but the last); None
    where one is symbolic."""
    m = 1
    for d in shape[:-1]:
        if not isinstance(d, int):
            return None
        m *= d
    return m


def _padded(m: int) -> int:
    """m rounded up to a multiple of 16."""
    return m + (-m % _ALIGN)


def _padded_rows(t2: torch.Tensor, m_pad: int) -> torch.Tensor:
    """The matrix t2 with zero rows appended up to m_pad rows."""
    return torch.nn.functional.pad(t2, (0, 0, 0, m_pad - t2.shape[0])) if m_pad > t2.shape[0] else t2


# ---- operators ---------------------------------------------------------------------------------


def _fwd_meta(a, w, bias, layer, recipe, for_backward):
    out = TensorProxy(like=a, shape=(*a.shape[:-1], w.shape[0]))
    if not for_backward:
        return out
    a8_t = TensorProxy(like=a, shape=(a.shape[-1], _padded(_tokens(a.shape))), dtype=dtypes.float8_e4m3fn)
    a_scale_inv = TensorProxy(like=a, shape=(), dtype=dtypes.float32)
    return out, a8_t, a_scale_inv


def _fwd_impl(a, w, bias, layer, recipe, for_backward):
    recipe = _RECIPES[recipe]
    a2 = a.reshape(-1, a.shape[-1])
    m = a2.shape[0]
    # The backward's wgrad reads the input transposed: cast in both layouts in one pass.
    a8, a8_t, a_scale_inv = _quantize(a2, INPUT, E4M3, recipe, w, _padded(m), col=for_backward)
    w8, _, w_scale_inv = _weight_fp8(w, recipe, transposed=for_backward)
    out = _mm(a8, w8.t(), a_scale_inv, w_scale_inv, a.dtype, bias, fast_accum=True)
    out = out[:m].reshape(*a.shape[:-1], w.shape[0])
    if not for_backward:
        return out
    return out, a8_t, a_scale_inv


def _bwd_meta(g, a8_t, a_scale_inv, w, layer, recipe, has_bias):
    ga, gw = TensorProxy(like=g, shape=(*g.shape[:-1], w.shape[1])), TensorProxy(like=w)
    return (ga, gw, TensorProxy(like=w, shape=(w.shape[0],))) if has_bias else (ga, gw)


def _bwd_impl(g, a8_t, a_scale_inv, w, layer, recipe, has_bias):
    recipe = _RECIPES[recipe]
    g2 = g.reshape(-1, g.shape[-1])
    m = g2.shape[0]
    g8, g8_t, g_scale_inv = _quantize(g2, GRAD, E5M2, recipe, w, _padded(m), col=True)
    _, w8_t, w_scale_inv = _weight_fp8(w, recipe, transposed=True)
    # _scaled_mm takes its first operand row-major and its second column-major (a row-major
    # transpose, .t()): dgrad g [M, N] @ w [N, K] reads w's transpose, wgrad g^T [N, M] @ a [M, K]
    # the transposes of g and a. Every operand was cast in its layout; none is copied here.
    ga = _mm(g8, w8_t.t(), g_scale_inv, w_scale_inv, g.dtype)[:m].reshape(*g.shape[:-1], w.shape[1])
    gw = _mm(g8_t, a8_t.t(), g_scale_inv, a_scale_inv, w.dtype)
    if has_bias:
        return ga, gw, g2.sum(0, dtype=torch.float32).to(w.dtype)
    return ga, gw


# The casts written as torch ops (_Group): fp8_scale gives the scale, the trace casts with it
# (fused into the kernel producing the tensor), fp8_linear_cast / fp8_linear_cast_backward record
# the rows' amaxes and multiply.


def _scale_meta(w, layer, recipe, role):
    return TensorProxy(like=w, shape=(), dtype=dtypes.float32)


def _scale_impl(w, layer, recipe, role):
    """The layer's scale for `role` now (a copy: the record after the cast updates the state)."""
    _, scales = _state(w, _RECIPES[recipe])
    return scales[role].clone()


def _traced_cast(x, scale, fp8):
    """x times scale, saturated and rounded to fp8, and the largest |x| of each row, as torch ops."""
    fp8_max = torch.finfo(fp8).max
    x32 = ltorch.to(x, dtype=dtypes.float32)
    x8 = ltorch.to(ltorch.clamp(ltorch.mul(x32, scale), -fp8_max, fp8_max), dtype=dtypes.to_dtype(fp8))
    return x8, ltorch.amax(ltorch.abs(x32), -1)


_ONES: dict = {}  # a float32 1 per device: the transpose's scale


def _transposed(x8: torch.Tensor) -> torch.Tensor:
    """The FP8 matrix x8 [M, K] as [K, M] row-major: one Triton pass on CUDA (ATen's FP8 strided
    copy moves a byte per access)."""
    global _triton_ok
    if _use_triton(x8):
        try:
            one = _ONES.get(x8.device)
            if one is None:
                one = _ONES[x8.device] = torch.ones(1, dtype=torch.float32, device=x8.device)
            return fp8_triton.cast(x8, one, x8.dtype, torch.finfo(x8.dtype).max, x8.shape[0], row=False, col=True,
                                   amax=False)[1]
        except Exception as e:
            import warnings

            warnings.warn(f"thunder fp8 executor: the Triton FP8 transpose failed ({type(e).__name__}: {e}); "
                          "transposing with torch ops")
            _triton_ok = False
    return x8.t().contiguous()


def _record_rows(rows, w, recipe, role, fp8):
    """Records the largest of `rows` (partial amaxes) as role's latest amax in w's layer's state."""
    hist, scales = _state(w, recipe)
    _run(_record, rows, hist[:, role], scales[role:role + 1], torch.finfo(fp8).max,
         recipe.amax_compute_algo == "most_recent", recipe.margin)


def _cast_fwd_meta(a8, rows, scale, w, bias, layer, recipe, for_backward):
    out = TensorProxy(like=w, shape=(*a8.shape[:-1], w.shape[0]))
    if not for_backward:
        return out
    return (out, TensorProxy(like=a8, shape=(a8.shape[-1], _tokens(a8.shape))),
            TensorProxy(like=w, shape=(), dtype=dtypes.float32))


def _cast_fwd_impl(a8, rows, scale, w, bias, layer, recipe, for_backward):
    recipe = _RECIPES[recipe]
    a_scale_inv = scale.reciprocal()
    _record_rows(rows, w, recipe, INPUT, E4M3)
    a2 = a8.reshape(-1, a8.shape[-1])
    w8, _, w_scale_inv = _weight_fp8(w, recipe, transposed=for_backward)
    out = _mm(a2, w8.t(), a_scale_inv, w_scale_inv, w.dtype, bias, fast_accum=True)
    out = out.reshape(*a8.shape[:-1], w.shape[0])
    if not for_backward:
        return out
    return out, _transposed(a2), a_scale_inv


def _cast_bwd_meta(g8, rows, scale, a8_t, a_scale_inv, w, layer, recipe):
    return TensorProxy(like=w, shape=(*g8.shape[:-1], w.shape[1])), TensorProxy(like=w)


def _cast_bwd_impl(g8, rows, scale, a8_t, a_scale_inv, w, layer, recipe):
    recipe = _RECIPES[recipe]
    g_scale_inv = scale.reciprocal()
    _record_rows(rows, w, recipe, GRAD, E5M2)
    g2 = g8.reshape(-1, g8.shape[-1])
    _, w8_t, w_scale_inv = _weight_fp8(w, recipe, transposed=True)
    ga = _mm(g2, w8_t.t(), g_scale_inv, w_scale_inv, w.dtype).reshape(*g8.shape[:-1], w.shape[1])
    gw = _mm(_transposed(g2), a8_t.t(), g_scale_inv, a_scale_inv, w.dtype)
    return ga, gw


def _not_fp8_meta(a, w, bias, why):
    return TensorProxy(like=a, shape=(*a.shape[:-1], w.shape[0]))


def _not_fp8_impl(a, w, bias, why):
    return torch.nn.functional.linear(a, w, bias)


class FP8Executor(OperatorExecutor):
    """The fp8 executor. thunder.jit hands it its `fp8_recipe=` option and the jitted object
    (attach), whose linears then use that recipe and whose Linear layers get their scaling state."""

    jit_options = ("fp8_recipe",)

    def attach(self, jitted, fn, fp8_recipe: Recipe | None = None) -> None:
        recipe = DelayedScaling() if fp8_recipe is None else fp8_recipe
        if not isinstance(recipe, Recipe):
            raise TypeError(f"thunder.jit: fp8_recipe must be a DelayedScaling or CurrentScaling, got "
                            f"{type(recipe).__name__}")
        group = prepare_module(fn, recipe) if isinstance(fn, torch.nn.Module) else None
        jitted._trace_scopes.append(lambda: _RecipeScope(recipe, group))
        if group is not None and hasattr(jitted, "_cfn"):
            # Whether the casts are written as torch ops (_Group) is part of the cache key.
            from thunder import _install_guard

            jitted._state_guards.append(group.warm)
            _install_guard(jitted, jitted._cfn)


fp8_ex = FP8Executor("fp8", version=f"scaled_mm-torch-{torch.__version__}")
register_executor(fp8_ex)

fp8_linear = fp8_ex.register_operator("fp8_linear", meta=_fwd_meta, fn=_fwd_impl)
fp8_linear_backward = fp8_ex.register_operator("fp8_linear_backward", meta=_bwd_meta, fn=_bwd_impl)
linear_not_fp8 = fp8_ex.register_operator("linear_not_fp8", meta=_not_fp8_meta, fn=_not_fp8_impl)
fp8_scale = fp8_ex.register_operator("fp8_scale", meta=_scale_meta, fn=_scale_impl)
fp8_linear_cast = fp8_ex.register_operator("fp8_linear_cast", meta=_cast_fwd_meta, fn=_cast_fwd_impl)
fp8_linear_cast_backward = fp8_ex.register_operator("fp8_linear_cast_backward", meta=_cast_bwd_meta, fn=_cast_bwd_impl)


# ---- claiming ----------------------------------------------------------------------------------

_SUPPORTED = (dtypes.bfloat16, dtypes.float16, dtypes.float32)


def fp8_available(device: torch.device | str | None = None) -> bool:
    """Whether FP8 matmuls run on this CUDA device: compute capability 8.9 or more."""
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def _reason(a, w, bias, recipe: Recipe) -> str | None:
    """Why this linear stays in the usual precision, or None when it runs in FP8."""
    dev = a.device
    if dev.devicetype == DeviceType.CUDA:
        major, minor = torch.cuda.get_device_capability(dev.index or 0)
        if (major, minor) < (8, 9):
            return f"{dev} has compute capability {major}.{minor}; FP8 needs 8.9 (Ada, Hopper) or more"
    elif not (dev.devicetype == DeviceType.CPU and os.environ.get("THUNDER_FP8_CPU") == "1"):
        return f"device {dev} is not CUDA"
    if any(t.device != dev for t in (w, bias) if t is not None):
        return "input, weight and bias on different devices"
    if a.dtype not in _SUPPORTED or w.dtype != a.dtype or (bias is not None and bias.dtype != a.dtype):
        dts = ", ".join(str(t.dtype).removeprefix("torch.") for t in (a, w, bias) if t is not None)
        return f"dtypes {dts} (one of bfloat16, float16, float32 for all)"
    if a.ndim < 2 or w.ndim != 2:
        return f"input of {a.ndim} dims and weight of {w.ndim} (at least 2 and 2)"
    if any(d == 0 for d in a.shape):
        return "an empty input"
    why = _static_reason(w.shape[1], w.shape[0], w.name, recipe)
    return why


def _checker(a, w, bias=None) -> bool:
    # Every linear of tensors is claimed: those that cannot run in FP8 run as linear_not_fp8, which
    # prints the reason in the trace.
    return isinstance(a, TensorProxy) and isinstance(w, TensorProxy) and (bias is None or isinstance(bias, TensorProxy))


def _register_recipe() -> Recipe:
    recipe = _recipe_in_scope()
    _RECIPES.setdefault(recipe.key, recipe)
    return recipe


# The longest rows whose casts are written as torch ops: the cast's row amax makes the kernel a
# row kernel, and a [16384, 128256] output gradient (the lm_head's, made by the cross-entropy's own
# kernel) cast alone that way took 7.1 ms on an H200 against the Triton pass's 2.4.
_MAX_TRACED_ROW = 16384


def _traced_casts(a, w, recipe) -> tuple[bool, bool]:
    """Whether this linear's input cast and its output gradient's cast are written as torch ops
    (_Group): with THUNDER_FP8_FUSED_CASTS=1, for a module's linear, delayed scaling, every role of
    the kind past its first cast, a token count that is a multiple of 16 (no padded rows), rows of
    at most _MAX_TRACED_ROW. Off by default: on the 4-layer Llama step (H200) the traced casts made
    the step slower (benchmarks/RESULTS.md, session 39)."""
    group = getattr(_tls, "group", None)
    if group is None or not isinstance(recipe, DelayedScaling) or os.environ.get("THUNDER_FP8_FUSED_CASTS") != "1":
        return False, False
    info = next((i for i in group.infos if i.trace_name == w.name and i.ref() is not None), None)
    m = _tokens(a.shape)
    if info is None or m is None or m % _ALIGN:
        return False, False
    warm_input, warm_grad = group.warm()
    return warm_input and w.shape[1] <= _MAX_TRACED_ROW, warm_grad and w.shape[0] <= _MAX_TRACED_ROW


def _execution_transform(a, w, bias=None):
    recipe = _register_recipe()
    why = _reason(a, w, bias, recipe)
    if why is not None:
        return linear_not_fp8(a, w, bias, why)
    if _traced_casts(a, w, recipe)[0]:
        scale = fp8_scale(w, w.name, recipe.key, INPUT)
        a8, rows = _traced_cast(a, scale, E4M3)
        return fp8_linear_cast(a8, rows, scale, w, bias, w.name, recipe.key, False)
    return fp8_linear(a, w, bias, w.name, recipe.key, False)


def _grad_transform(a, w, bias=None):
    recipe = _register_recipe()
    why = _reason(a, w, bias, recipe)
    if why is not None:
        out = linear_not_fp8(a, w, bias, why)
        g = get_grad(out)
        g2 = ltorch.reshape(g, (-1, w.shape[0]))
        ga = ltorch.matmul(g, w)
        gw = ltorch.matmul(ltorch.transpose(g2, 0, 1), ltorch.reshape(a, (-1, w.shape[1])))
        gb = ltorch.sum(g2, 0) if bias is not None else None
        put_grads((a, w, bias), (ga, gw, gb))
        return out
    fused_input, fused_grad = _traced_casts(a, w, recipe)
    if fused_input:
        scale = fp8_scale(w, w.name, recipe.key, INPUT)
        a8, rows = _traced_cast(a, scale, E4M3)
        out, a8_t, a_scale_inv = fp8_linear_cast(a8, rows, scale, w, bias, w.name, recipe.key, True)
    else:
        out, a8_t, a_scale_inv = fp8_linear(a, w, bias, w.name, recipe.key, True)
    g = get_grad(out)
    if fused_grad:
        gscale = fp8_scale(w, w.name, recipe.key, GRAD)
        g8, grows = _traced_cast(g, gscale, E5M2)
        ga, gw = fp8_linear_cast_backward(g8, grows, gscale, a8_t, a_scale_inv, w, w.name, recipe.key)
        gb = ltorch.sum(ltorch.reshape(g, (-1, w.shape[0])), 0) if bias is not None else None
        put_grads((a, w, bias), (ga, gw, gb))
        return out
    grads = fp8_linear_backward(g, a8_t, a_scale_inv, w, w.name, recipe.key, bias is not None)
    put_grads((a, w, bias)[: len(grads)], grads)
    return out


fp8_ex.register_implementation(
    ltorch.linear,
    checker=_checker,
    execution_transform=_execution_transform,
    grad_transform=_grad_transform,
)
