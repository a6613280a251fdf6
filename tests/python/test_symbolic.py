"""Symbolic sizes (issue 29, docs/symbolic_sizes.md): a dimension marked dynamic is a size symbol of
the trace, and one trace serves every size its guards allow, each call equal to eager."""

import pytest
import torch
import torch.nn.functional as F

import thunder

LENGTHS = (5, 7, 12, 2, 9)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"))]


def _marked(*tensors_dims):
    """The tensors, each marked dynamic along its dims (as torch.compile users mark them)."""
    out = []
    for t, dims in tensors_dims:
        t = t.clone()
        for d in dims:
            torch._dynamo.mark_dynamic(t, d)
        out.append(t)
    return out


def _check_lengths(fn, make, lengths=LENGTHS, traces=1, atol=None, rtol=None):
    """Calls jit(fn) on make(n) for each length n, each result equal to eager's; the number of
    traces it made must be `traces`."""
    jf = thunder.jit(fn)
    for n in lengths:
        args = make(n)
        expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        got = jf(*args)
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    assert thunder.cache_misses(jf) == traces, (thunder.cache_misses(jf), jf.last_symbolic_fallback)
    return jf


def _x(n, *rest, dtype=torch.float32, dims=(0,)):
    g = torch.Generator().manual_seed(n)
    return _marked((torch.randn(n, *rest, generator=g).to(dtype), dims))[0]


# (id, function, inputs for a length n): each served by one trace at every length.
CASES = [
    ("unary_chain", lambda x: torch.tanh(x.exp() * 0.5 - 1).sigmoid(), lambda n: (_x(n, 4),)),
    ("broadcast_row", lambda x, w: x * w + 1, lambda n: (_x(n, 4), torch.randn(4))),
    ("broadcast_col", lambda x, c: x - c, lambda n: (_x(n, 4), _x(n, 1))),
    ("where_masked_fill", lambda x: torch.where(x > 0, x, 0.0).masked_fill(x < -1, 3.0), lambda n: (_x(n, 3),)),
    ("sum_mean_amax", lambda x: (x.sum(0), x.mean(-1, keepdim=True), x.amax(1), x.sum()), lambda n: (_x(n, 6),)),
    ("softmax_log_softmax", lambda x: (x.softmax(0), F.log_softmax(x, -1)), lambda n: (_x(n, 5),)),
    ("reshape_view_infer", lambda x: (x.reshape(-1), x.view(x.shape[0], 2, 3), x.reshape(-1, 3)), lambda n: (_x(n, 6),)),
    ("expand_permute", lambda x: x.unsqueeze(1).expand(-1, 3, -1).permute(2, 0, 1), lambda n: (_x(n, 4),)),
    ("transpose_flatten", lambda x: x.transpose(0, 1).flatten(), lambda n: (_x(n, 2, 3),)),
    ("squeeze_static", lambda x: x.unsqueeze(0).squeeze(0) + x[:, :1].squeeze(1).unsqueeze(-1), lambda n: (_x(n, 4),)),
    ("cat_stack", lambda x, y: (torch.cat([x, y, x], 0), torch.stack([x, x], 1)), lambda n: (_x(n, 4), torch.randn(3, 4))),
    ("arange_of_size", lambda x: x + torch.arange(x.shape[0], device=x.device).unsqueeze(1), lambda n: (_x(n, 3),)),
    ("arange_start_end", lambda x: torch.arange(2, x.shape[0] + 2, dtype=torch.float32), lambda n: (_x(n),)),
    ("factories", lambda x: (torch.zeros(x.shape[0], 2), torch.full((3, x.shape[0]), 2.5), x.new_ones(x.shape)),
     lambda n: (_x(n, 2),)),
    ("slices", lambda x: (x[1:], x[: x.shape[0] - 1], x[-2:], x[:, 1:3], x[2:-1], x[..., 0], x[None, :3]),
     lambda n: (_x(n, 4, dims=(0,)) if n >= 3 else _x(n + 3, 4),)),
    ("matmul_linear", lambda x, w: (x @ w, F.linear(x, w.t(), torch.ones(5, device=x.device))),
     lambda n: (_x(n, 4), torch.randn(4, 5))),
    ("batched_matmul", lambda a, b: a @ b.transpose(-1, -2), lambda n: (_x(2, n, 8, dims=(1,)), _x(2, n, 8, dims=(1,)))),
    ("embedding", lambda i, w: F.embedding(i, w), lambda n: (_marked((torch.arange(n) % 10, (0,)))[0], torch.randn(10, 4))),
    ("layer_norm", lambda x, w: F.layer_norm(x, (8,), w), lambda n: (_x(n, 8), torch.randn(8))),
    ("index_select", lambda x, i: x.index_select(0, i), lambda n: (torch.randn(6, 3), _marked((torch.arange(n) % 6, (0,)))[0])),
    ("narrow", lambda x: x.narrow(0, 1, x.shape[0] - 1), lambda n: (_x(n, 3),)),
    ("addmm_split", lambda x, w, b: torch.addmm(b, x, w).split(2, -1), lambda n: (_x(n, 4), torch.randn(4, 6), torch.randn(6))),
    ("chunk_unbind", lambda x: (x.chunk(3, 1), x.unbind(1)), lambda n: (_x(n, 3),)),
    ("diff_min_max", lambda x: (x.diff(dim=0), torch.max(x, x * 2), x.min(0).values, x.max()), lambda n: (_x(n, 3),)),
    ("bf16", lambda x, w: (x.float() @ w).to(torch.bfloat16) * 2, lambda n: (_x(n, 4, dtype=torch.bfloat16), torch.randn(4, 4))),
    ("activations", lambda x: (F.silu(x), F.gelu(x), F.gelu(x, approximate="tanh"), x.tanh(), x.sigmoid()),
     lambda n: (_x(n, 4),)),
    ("activations_bf16", lambda x: (F.silu(x), F.gelu(x, approximate="tanh"), x.tanh(), x.sigmoid()),
     lambda n: (_x(n, 4, dtype=torch.bfloat16),)),
    # A size read as a number by math on 0-dim tensors (a loss normalized by the batch): the
    # decomposition holds the number's value at the hints, so these calls run whole, unfused.
    ("size_first", lambda x: (x.shape[1] - x, x.shape[1] * 2 - x.sum(), torch.sub(x.size(1), x), torch.rsub(x, x.shape[1]),
                              torch.tensor(x.shape[1]) * x.sum()),
     lambda n: (_x(3, n, dims=(1,)),)),
    ("size_in_scalar_math", lambda x: ((x.sum() + 1) / x.size(1), x.amax() * x.shape[1] - x.shape[1]),
     lambda n: (_x(3, n, dims=(1,)),)),
    # torch.add/div/... given numbers only (PyTorch's parser takes them for tensors): 0-dim tensors
    ("numbers_as_tensors", lambda x: (torch.div(x.size(0), 2, rounding_mode="trunc") - 1, torch.add(x.size(0), 0.5),
                                      x * torch.sub(x.shape[0], 1)), lambda n: (_x(n, 3),)),
    # attention: a fused kernel (float32), and the decomposition (float64, grouped heads)
    ("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda n: tuple(_x(1, 2, n, 8, dims=(2,)) for _ in range(3))),
    ("attention_decomposed", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
     lambda n: (_x(1, 4, n, 8, dims=(2,), dtype=torch.float64), _x(1, 2, n, 8, dims=(2,), dtype=torch.float64),
                _x(1, 2, n, 8, dims=(2,), dtype=torch.float64))),
]


def _on(device, make):
    """make, its tensors moved to `device` with their dynamic marks."""

    def moved(t):
        if not isinstance(t, torch.Tensor):
            return t
        u = t.to(device)
        for d in getattr(t, "_dynamo_dynamic_indices", ()):
            torch._dynamo.mark_dynamic(u, d)
        return u

    return lambda n: tuple(moved(a) for a in make(n))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,make", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_trace_serves_every_length(fn, make, device):
    _check_lengths(fn, _on(device, make))


def _attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("device", DEVICES)
def test_attention_over_a_growing_cache(device):
    # A decoding step: the keys and values one token longer at each call, the mask their length.
    def step(q, kc, vc, knew, vnew, mask):
        k = torch.cat([kc, knew], -2)
        v = torch.cat([vc, vnew], -2)
        return _attention(q, k, v, mask[:, None, None, :].bool()), k, v

    def make(n):
        g = torch.Generator().manual_seed(n)
        kc, vc = _marked((torch.randn(1, 2, n, 8, generator=g), (2,)), (torch.randn(1, 2, n, 8, generator=g), (2,)))
        mask = _marked((torch.ones(1, n + 1), (1,)))[0]
        return torch.randn(1, 2, 1, 8, generator=g), kc, vc, torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8), mask

    _check_lengths(step, _on(device, make))


@pytest.mark.parametrize("device", DEVICES)
def test_causal_attention_of_a_variable_length(device):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    _check_lengths(f, _on(device, lambda n: tuple(_x(1, 2, n, 8, dims=(2,)) for _ in range(3))))


def test_comparisons_are_guards():
    # Each branch is its own trace; a length on the same side of the comparison reuses it.
    def f(x):
        if x.shape[0] > 6:
            return x * 2
        return x - 1

    jf = _check_lengths(f, lambda n: (_x(n, 3),), lengths=(3, 4, 5, 8, 9, 10), traces=2)
    assert any("guard" in line for line in str(thunder.last_traces(jf)[-1]).splitlines())


def test_a_size_used_as_a_python_int_pins_it():
    # range(n) needs the int: the trace serves that length only, and every result is still right.
    def f(x):
        return sum(x[i] for i in range(x.shape[0]))

    _check_lengths(f, lambda n: (_x(n, 3),), lengths=(3, 4, 5), traces=3)


def test_an_op_without_a_rule_pins_the_sizes_it_reads():
    def f(x):
        return torch.flip(x, (0,)) * 2 + torch.cumprod(x, 0)

    _check_lengths(f, lambda n: (_x(n, 2),), lengths=(3, 4, 5), traces=3)


def test_sizes_0_and_1_stay_static():
    # A marked size of 1 or 0 is not a symbol (broadcasting and squeezing treat them apart), and
    # a trace with a symbol serves sizes of at least 2 only.
    def f(x, y):
        return x + y

    jf = thunder.jit(f)
    for n in (1, 4, 6, 1, 0):
        x, y = _marked((torch.randn(n, 3), (0,)), (torch.randn(1, 3), ()))
        torch.testing.assert_close(jf(x, y), f(x, y))
    assert thunder.cache_misses(jf) == 3  # 1, then 4 (serving 6), then 0


def test_symbolic_values_cache_option():
    # A size that changes between calls becomes a symbol of the next trace: 2 traces for any
    # number of lengths (as torch.compile's automatic dynamic shapes).
    def f(x, w):
        return torch.cat([x, x], 0).softmax(-1) @ w

    jf = thunder.jit(f, cache="symbolic values")
    w = torch.randn(4, 3)
    for n in range(3, 12):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder.cache_misses(jf) == 2
    assert thunder.last_traces(jf)[0].symbols == [("t_0", 0, 4)]


def test_cache_option_is_checked():
    with pytest.raises(ValueError, match="cache must be one of"):
        thunder.jit(lambda x: x, cache="dynamic")


def test_printed_trace_reads_its_symbols():
    def f(x):
        return torch.arange(x.shape[0] + 1)[1:] * x.sum(-1)

    jf = thunder.jit(f)
    x = _x(6, 2)
    jf(x)
    final = str(thunder.last_traces(jf)[-1])
    assert "s0 = t_0.shape[0]" in final and "s0 + 1" in final
    assert "# guard: s0 >= 2" in final


# Cases whose backward specializes the sizes (the case traces at each length, values and gradients
# still eager's), and why.
TRAINING_PER_LENGTH = {
    "index_select": "index_select's gradient has no rule at symbolic sizes",
    "diff_min_max": "diff's, min's and max's gradients have no rules at symbolic sizes",
}


def _loss_of(out):
    """A scalar of every floating output, each weighted by a fixed pattern (so that no gradient is
    a plain sum)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    total = 0
    for k, o in enumerate(outs):
        if isinstance(o, (tuple, list)):
            total = total + _loss_of(o)
        elif o.is_floating_point():
            w = (o.detach().float() * 0 + 1).cumsum(-1) % 7 - 3 if o.ndim else 1.0
            total = total + (o.float() * (w + k)).sum()
    return total


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,make", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_training_one_trace_serves_every_length(fn, make, device, request):
    # The forward and the backward serve every length: the backward's calls follow the sizes
    # (rules at symbolic sizes, autodiff.h), and each length's values and gradients are eager's.
    case = request.node.callspec.id.rsplit("-", 1)[0]
    jf = thunder.jit(lambda *a: _loss_of(fn(*a)))
    for n in LENGTHS:
        made = _on(device, make)(n)
        args = [a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in made]
        eargs = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
        loss, expected = jf(*args), _loss_of(fn(*eargs))
        torch.testing.assert_close(loss, expected)
        wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        ewrt = [a for a in eargs if isinstance(a, torch.Tensor) and a.requires_grad]
        if wrt and loss.requires_grad:
            torch.testing.assert_close(torch.autograd.grad(loss, wrt), torch.autograd.grad(expected, ewrt))
    misses = thunder.cache_misses(jf)
    if case in TRAINING_PER_LENGTH:
        assert misses > 1, f"{case} now serves every length: update TRAINING_PER_LENGTH"
    else:
        assert misses == 1, (misses, jf.last_symbolic_fallback)


def test_training_backward_of_an_op_without_an_audited_rule_specializes():
    # cumsum's gradient rule reads sizes as numbers: the call's sizes are specialized (a guard per
    # symbol), so each length traces again, with eager's gradients.
    w = torch.randn(4, 3, requires_grad=True)

    def f(x):
        return (x @ w).cumsum(0).tanh().sum()

    jf = thunder.jit(f)
    for n in (3, 5, 6):
        x = _x(n, 4)
        (g,) = torch.autograd.grad(jf(x), w)
        (ge,) = torch.autograd.grad(f(x), w)
        torch.testing.assert_close(g, ge)
    assert thunder.cache_misses(jf) == 3


def test_tensors_held_by_an_argument_grow_without_new_traces():
    # A cache object whose tensor grows by one row a call (as transformers' DynamicCache): with
    # cache="symbolic values", the second call's trace serves every later length.
    class Cache:
        def __init__(self):
            self.rows = torch.zeros(1, 4)

    def step(x, cache):
        cache.rows = torch.cat([cache.rows, x], 0)
        return cache.rows.sum(0) * cache.rows.shape[0]

    jf = thunder.jit(step, cache="symbolic values")
    a, b = Cache(), Cache()
    for i in range(10):
        x = torch.randn(1, 4)
        torch.testing.assert_close(jf(x, a), step(x, b))
        torch.testing.assert_close(a.rows, b.rows)
    assert thunder.cache_misses(jf) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_fuser_keeps_symbolic_calls_in_aten():
    def f(x, w):
        h = (w.exp() * 2 + 1).tanh()
        return torch.cat([x, x], 0).sigmoid() * h

    jf = thunder.jit(f)
    for n in (5, 8, 3):
        x, w = _x(n, 4).cuda(), torch.randn(4, device="cuda")
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder.cache_misses(jf) == 1
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert sum(n.startswith("cudaFusion") for n in names) == 1, names


def test_cpu_fuser_keeps_symbolic_calls_in_aten():
    # Kernels are generated for static sizes: calls on symbolic sizes run through ATen, the rest
    # fuse, and every length is right.
    from thunder import _C

    if not _C.cpu_compiler_available():
        pytest.skip("no C++ compiler for the CPU fuser")

    def f(x, w):
        h = (w.exp() * 2 + 1).tanh()  # static: fusible
        return torch.cat([x, x], 0).sigmoid() * h

    jf = thunder.jit(f, executors=["fuser"])
    for n in (5, 8, 3):
        x, w = _x(n, 4), torch.randn(4)
        torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder.cache_misses(jf) == 1
    names = thunder.last_traces(jf)[-1].bound_symbol_names
    assert sum(n.startswith("cpuFusion") for n in names) == 1, names


def _n(x):
    return x.shape[1]


# A size read as a number by the ops that take numbers: each under cache="symbolic values" against
# eager at four lengths (the number at the traced length would be wrong at the others).
SIZE_AS_NUMBER = {
 "x + n": lambda x: x + _n(x), "x - n": lambda x: x - _n(x), "n - x": lambda x: _n(x) - x, "x * n": lambda x: x * _n(x),
 "x / n": lambda x: x / _n(x), "n / x": lambda x: _n(x) / x, "x // n": lambda x: x // _n(x), "n // x": lambda x: _n(x) // x,
 "x % n": lambda x: x % _n(x), "n % x": lambda x: _n(x) % x, "x ** n": lambda x: x ** (_n(x) - 20), "n ** x": lambda x: _n(x) ** x,
 "x > n": lambda x: x * 40 > _n(x), "x == n": lambda x: (x * 0 + _n(x)) == _n(x), "max(x, n)": lambda x: torch.clamp(x * 40, min=_n(x)),
 "clamp max": lambda x: (x * 40).clamp(max=_n(x)), "where": lambda x: torch.where(x > 0.5, x, _n(x)),
 "masked_fill": lambda x: x.masked_fill(x > 0.5, _n(x)), "add alpha": lambda x: torch.add(x, x, alpha=_n(x)),
 "sub alpha": lambda x: torch.sub(x, x.exp(), alpha=_n(x)), "lerp": lambda x: torch.lerp(x, x.exp(), _n(x) / 100.0),
 "addcmul": lambda x: torch.addcmul(x, x, x, value=_n(x)), "full": lambda x: torch.full((2, 2), _n(x)),
 "full float": lambda x: torch.full((2, 2), _n(x), dtype=torch.float32) + x.sum(), "full_like": lambda x: torch.full_like(x, _n(x)),
 "new_full": lambda x: x.new_full((3,), _n(x)), "new_tensor": lambda x: x.new_tensor(_n(x)) + x.sum(),
 "tensor(n)": lambda x: torch.tensor(_n(x)) * x.sum(), "pad value": lambda x: F.pad(x, (1, 1), value=_n(x)),
 "fill_": lambda x: x.clone().fill_(_n(x)), "mul_": lambda x: x.clone().mul_(_n(x)), "sub_": lambda x: x.clone().sub_(_n(x)),
 "int x - n": lambda x: (x * 100).long() - _n(x), "n - int x": lambda x: _n(x) - (x * 100).long(),
 "int x * n sum": lambda x: (x * 100).long().sum() * _n(x), "n & int": lambda x: _n(x) & (x * 100).long(),
 "bool x * n": lambda x: (x > 0.5) * _n(x), "arange * n": lambda x: torch.arange(4) * _n(x),
 "mean by n": lambda x: x.sum(1) / _n(x), "0-dim - n": lambda x: x.sum() - _n(x), "n - 0-dim": lambda x: _n(x) - x.sum(),
 "0-dim * n * 2": lambda x: x.sum() * _n(x) * 2, "n * 0-dim * 0.5": lambda x: (_n(x) * x.amax()) * 0.5,
 "rsub": lambda x: torch.rsub(x, _n(x)), "scale tensor": lambda x: x * torch.tensor(float(_n(x))),
 "softmax/temp": lambda x: torch.softmax(x / (_n(x) - 10), -1), "logsumexp - log n": lambda x: torch.logsumexp(x, 1) - _n(x),
 "cumsum / n": lambda x: x.cumsum(1) / _n(x), "bias n": lambda x: F.linear(x, torch.ones(2, _n(x)), torch.ones(2) * _n(x)),
 "div trunc": lambda x: torch.div(x * 100, _n(x), rounding_mode="trunc"), "div floor n first": lambda x: torch.div(_n(x), x + 1, rounding_mode="floor"),
 "float(n)": lambda x: x * float(_n(x)), "n as 0-dim via sum": lambda x: x.new_zeros(()) + _n(x),
}


@pytest.mark.parametrize("fn", list(SIZE_AS_NUMBER.values()), ids=list(SIZE_AS_NUMBER))
def test_sizes_read_as_numbers_match_eager_at_every_length(fn):
    jf = thunder.jit(fn, cache="symbolic values")
    for n in (16, 24, 32, 40):
        x = torch.rand(3, n, generator=torch.Generator().manual_seed(n)) + 0.25
        expected, got = fn(x.clone()), jf(x.clone())
        assert got.dtype == expected.dtype and got.shape == expected.shape, (n, got, expected)
        torch.testing.assert_close(got.double(), expected.double(), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_fusers_keep_sizes_read_as_numbers_out_of_kernels(device):
    # `x.sum() * 2 - x.shape[1]` is math on 0-dim tensors, whose sizes do not vary: the
    # decomposition of the subtraction holds the size's value at the hints (prims.sub(t, 24.0)).
    # A kernel made of it computed with that value at every length (the CPU fuser, before).
    from thunder import _C

    if device == "cpu" and not _C.cpu_compiler_available():
        pytest.skip("no C++ compiler for the CPU fuser")

    def f(x):
        return x.sum() * 2 - x.shape[1], (x.amax() + 1) / x.size(1) * x.shape[1], x.shape[1] - x.exp()

    jf = thunder.jit(f, executors=["fuser"] if device == "cpu" else None)
    for n in (5, 8, 3, 12):
        x = _x(3, n, dims=(1,)).to(device)
        torch._dynamo.mark_dynamic(x, 1)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder.cache_misses(jf) == 1, jf.last_symbolic_fallback


def _tiny_llama(layers=2):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("device", DEVICES)
def test_hf_greedy_decoding_compiles_at_most_three_times(device):
    # transformers' default dynamic cache: a forward per token, the cache one token longer each
    # time. Prefill, the first decoding step, and one trace for every later step.
    model = _tiny_llama().to(device)
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    model.forward = thunder.jit(model.forward, cache="symbolic values")
    with torch.no_grad():
        got = model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    assert torch.equal(got, expected)
    assert thunder.cache_misses(model.forward) <= 3, thunder.cache_misses(model.forward)
    assert model.forward.last_symbolic_fallback == ""


def _tiny_hf(name):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=256))
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    if name == "gemma":
        return T.GemmaForCausalLM(T.GemmaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, head_dim=16,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    if name == "t5":  # an encoder-decoder: the encoder's output is a ModelOutput argument
        return T.T5ForConditionalGeneration(T.T5Config(vocab_size=128, d_model=64, d_ff=128, num_layers=2, num_heads=4,
                                                       d_kv=16, decoder_start_token_id=0))
    raise ValueError(name)


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "gemma", "t5"])
def test_hf_decoders_decode_with_three_traces(name):
    model = _tiny_hf(name).eval()
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model.generate(input_ids=ids, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    model.forward = thunder.jit(model.forward, cache="symbolic values")
    with torch.no_grad():
        got = model.generate(input_ids=ids, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    assert torch.equal(got, expected)
    assert thunder.cache_misses(model.forward) == 3, model.forward.last_symbolic_fallback


def test_dict_subclass_arguments_keep_their_type():
    # A ModelOutput (an OrderedDict subclass) given to a jitted function is the same type inside
    # it (before it was a plain dict, and `encoder_outputs[0]` raised KeyError: T5's generate).
    from collections import OrderedDict

    class Output(OrderedDict):
        def __getitem__(self, k):
            return list(self.values())[k] if isinstance(k, int) else super().__getitem__(k)

    def f(out):
        return out[0] * 2 + out["b"]

    jf = thunder.jit(f)
    o = Output(a=torch.randn(3), b=torch.randn(3))
    torch.testing.assert_close(jf(o), f(o))
    d = {"a": o["a"], "b": o["b"]}
    with pytest.raises(KeyError):
        jf(d)  # a plain dict is another entry, traced as a dict


def _hf_config(T, name):
    """A small config of transformers' `name` (dropout off: training compares with eager)."""
    if name == "bert":
        return T.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
    if name == "gpt2":
        return T.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0)
    if name == "llama":
        return T.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2)
    if name == "t5_encoder":
        return T.T5Config(vocab_size=100, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16)
    raise ValueError(name)


def _hf_model(name, classes):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return getattr(T, classes[name])(_hf_config(T, name))


def _hf_encoder(name):
    # GPT-2's Conv1D: addmm and a split of the fused projection; Llama's causal mask: a diff of the
    # positions (its packed-sequence check); T5's relative position buckets: min, where, log of aranges
    return _hf_model(name, {"bert": "BertModel", "gpt2": "GPT2Model", "llama": "LlamaModel",
                            "t5_encoder": "T5EncoderModel"})


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "t5_encoder"])
def test_hf_variable_sequence_length_inference(name):
    # A module's input marked dynamic along the sequence: one trace for every length.
    model = _hf_encoder(name).eval()
    kw = {"use_cache": False} if name in ("gpt2", "llama") else {}
    jm = thunder.jit(model)
    with torch.no_grad():
        for n in (8, 13, 21, 9):
            ids = torch.randint(0, 100, (2, n), generator=torch.Generator().manual_seed(n))
            torch._dynamo.mark_dynamic(ids, 1)
            torch.testing.assert_close(jm(input_ids=ids, **kw).last_hidden_state,
                                       model(input_ids=ids, **kw).last_hidden_state)
    assert thunder.cache_misses(jm) == 1, jm._cfn.last_symbolic_fallback


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_backward_symbols_are_atens(dtype):
    # The rules at symbolic sizes run ATen's activation backward kernels (ltorch.tanh_backward and
    # the others, one call each); their decompositions (what the fuser would run) compute the same.
    import thunder.torch as ltorch

    def f(g, y, x):
        return (ltorch.tanh_backward(g, y), ltorch.sigmoid_backward(g, y), ltorch.silu_backward(g, x),
                ltorch.gelu_backward(g, x), ltorch.gelu_backward(g, x, approximate="tanh"))

    g, y, x = (torch.randn(4, 5, generator=torch.Generator().manual_seed(k)).to(dtype) for k in range(3))
    A = torch.ops.aten
    expected = (A.tanh_backward(g, y), A.sigmoid_backward(g, y), A.silu_backward(g, x), A.gelu_backward(g, x),
                A.gelu_backward(g, x, approximate="tanh"))
    for executors in (["torch"], ["fuser"]):
        torch.testing.assert_close(thunder.jit(f, executors=executors)(g, y, x), expected)


def test_training_binary_rules_compute_in_the_result_dtype():
    # pow of a 0-dim float64 base and an int exponent is float64; its gradient's `exponent - 1`
    # (float32 for an int tensor minus 1.0) took the 0-dim base's pow to float32 (fuzzer seed 6510
    # with every dimension marked dynamic: a float64 gradient 5e-8 off).
    def f(x, e):
        return torch.pow(x.mean(), e) * x

    jf = thunder.jit(f)
    for n in (5, 7):
        x = _marked((torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) + 3, (0,)))[0]
        x.requires_grad_()
        e = _marked(((torch.arange(n) % 5) - 2, (0,)))[0]
        (g,) = torch.autograd.grad(jf(x, e).sum(), x)
        (ge,) = torch.autograd.grad(f(x, e).sum(), x)
        torch.testing.assert_close(g, ge, rtol=1e-12, atol=0)
    assert thunder.cache_misses(jf) == 1, jf.last_symbolic_fallback


def test_training_keeps_an_executors_grad_rule():
    # An executor's grad transform that takes a call is what the user asked for: at symbolic sizes
    # too it runs (and specializes the sizes), not thunder's own rule.
    from thunder.core.transforms import get_grad, put_grad
    from thunder.extend import OperatorExecutor, register_executor
    import thunder.torch as ltorch

    ex = OperatorExecutor("symbolic_sin_rule", version="0.1")
    register_executor(ex)

    def sin_grad(a):
        fwd = ltorch.sin(a)
        put_grad(a, get_grad(fwd) * ltorch.cos(a) * 3)  # deliberately not sin's derivative
        return fwd

    ex.register_implementation(ltorch.sin, grad_transform=sin_grad)
    jf = thunder.jit(lambda a: a.sin(), executors=[ex])
    for n in (3, 5):
        x = _x(n, 4).requires_grad_()
        jf(x).sum().backward()
        torch.testing.assert_close(x.grad, 3 * x.detach().cos())
    assert thunder.cache_misses(jf) == 2


def test_training_through_the_cross_entropy_upcast_fold():
    # `F.cross_entropy(logits.float(), ...)` of bfloat16 logits becomes cross_entropy_upcast where an
    # executor implements it (apex's, on CUDA): its decomposition serves symbolic sizes too.
    from thunder.extend import OperatorExecutor, register_executor
    import thunder.torch as ltorch

    ex = OperatorExecutor("symbolic_xent_upcast", version="0.1")
    register_executor(ex)
    ex.register_implementation(ltorch.cross_entropy_upcast, checker=lambda *a, **k: False,
                               execution_transform=lambda *a, **k: None)
    w = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True)

    def f(x, y):
        return F.cross_entropy((x @ w).float().view(-1, 16), y.view(-1))

    jf = thunder.jit(f, executors=[ex, *thunder.get_default_executors()])
    for n in (5, 9, 7):
        x = _x(n, 8, dtype=torch.bfloat16)
        y = _marked((torch.arange(n) % 16, (0,)))[0]
        (g,) = torch.autograd.grad(jf(x, y), w)
        (ge,) = torch.autograd.grad(f(x, y), w)
        torch.testing.assert_close(g, ge)
    traces = [str(t) for t in thunder.last_traces(jf)]
    assert any("cross_entropy_upcast" in t for t in traces)
    assert thunder.cache_misses(jf) == 1, jf.last_symbolic_fallback


def _hf_causal_lm(name):
    return _hf_model(name, {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM"})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_hf_training_over_five_lengths_traces_once(name, device):
    # A training loop (loss, backward, optimizer step) over 5 sequence lengths marked dynamic: one
    # trace; each step's loss and the parameters after it as eager's.
    import copy

    model = _hf_causal_lm(name).train().to(device)
    eager = copy.deepcopy(model)
    jm = thunder.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eopt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for n in (8, 13, 5, 21, 9):
        ids = torch.randint(0, 100, (2, n), generator=torch.Generator().manual_seed(n)).to(device)
        torch._dynamo.mark_dynamic(ids, 1)
        loss = jm(input_ids=ids, labels=ids).loss
        eloss = eager(input_ids=ids, labels=ids).loss
        torch.testing.assert_close(loss, eloss)
        loss.backward()
        eloss.backward()
        for m, o in ((model, opt), (eager, eopt)):
            o.step()
            o.zero_grad()
    for p, e in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, e)
    assert thunder.cache_misses(jm) == 1, jm._cfn.last_symbolic_fallback


def test_hf_training_with_the_symbolic_values_cache_traces_twice():
    # cache="symbolic values" in a training loop: the first length traces static, the second makes
    # the changed dimension a size symbol, and that trace serves every later length.
    import copy

    model = _hf_causal_lm("llama").train()
    eager = copy.deepcopy(model)
    jm = thunder.jit(model, cache="symbolic values")
    for n in (8, 13, 5, 21, 9):
        ids = torch.randint(0, 100, (2, n), generator=torch.Generator().manual_seed(n))
        loss, eloss = jm(input_ids=ids, labels=ids).loss, eager(input_ids=ids, labels=ids).loss
        torch.testing.assert_close(loss, eloss)
        loss.backward()
        eloss.backward()
        for p, e in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, e.grad)
        model.zero_grad()
        eager.zero_grad()
    assert thunder.cache_misses(jm) == 2, jm._cfn.last_symbolic_fallback
