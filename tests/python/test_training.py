"""Training through thunder.jit: one autograd node per call, optimizer loops, grad mode, saved
tensors and rematerialization, errors, and a small transformer trained with AdamW."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.core.transforms import saved_for_backward

torch.manual_seed(0)


def _leaf(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def _clone(*xs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in xs]


def test_one_autograd_node_per_call():
    def f(x, w, b):
        return torch.tanh(x @ w + b).sum()

    x, w, b = _leaf(3, 4), _leaf(4, 5), _leaf(5)
    y = thunder.jit(f)(x, w, b)
    assert "ThunderFunction" in type(y.grad_fn).__name__ or "ThunderFunction" in y.grad_fn.name()
    nexts = [fn for fn, _ in y.grad_fn.next_functions]
    assert all(type(n).__name__ == "AccumulateGrad" for n in nexts) and len(nexts) == 3
    y.backward()
    ex, ew, eb = _clone(x, w, b)
    f(ex, ew, eb).backward()
    for a, e in ((x, ex), (w, ew), (b, eb)):
        torch.testing.assert_close(a.grad, e.grad)


def test_mlp_sgd_matches_eager_without_recompiling():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).double()
    ref = copy.deepcopy(model)
    tmodel = thunder.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(5):
        x, target = torch.randn(6, 8, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
        loss = F.mse_loss(tmodel(x), target)
        ref_loss = F.mse_loss(ref(x), target)
        torch.testing.assert_close(loss, ref_loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, r)
    assert thunder.cache_misses(tmodel) == 1
    assert thunder.cache_hits(tmodel) == 4
    assert thunder.last_backward_traces(tmodel)


def test_no_grad_runs_the_inference_program():
    model = nn.Linear(4, 3).double()
    tmodel = thunder.jit(model)
    x = torch.randn(2, 4, dtype=torch.float64)
    with torch.no_grad():
        y = tmodel(x)
    assert y.grad_fn is None and not y.requires_grad
    assert thunder.last_backward_traces(tmodel) == []
    y = tmodel(x)
    assert y.requires_grad and thunder.last_backward_traces(tmodel)
    assert thunder.cache_misses(tmodel) == 2


def test_inputs_not_requiring_grad():
    def f(x, w):
        return (x * w).sin().sum()

    x = torch.randn(3, 4, dtype=torch.float64)
    w = _leaf(3, 4)
    thunder.jit(f)(x, w).backward()
    assert x.grad is None
    torch.testing.assert_close(w.grad, (x * w.detach()).cos() * x)


def test_detach_inside_the_function():
    def f(x):
        return (x * x.detach()).sum()

    x = _leaf(5)
    thunder.jit(f)(x).backward()
    torch.testing.assert_close(x.grad, x.detach())


def test_non_differentiable_outputs():
    def f(x):
        y = x.exp()
        return y, y.argmax(-1), (x > 0).long()

    x = _leaf(3, 4)
    y, am, ints = thunder.jit(f)(x)
    assert not am.requires_grad and not ints.requires_grad
    assert am.dtype == torch.int64 and ints.dtype == torch.int64
    torch.testing.assert_close(am, x.detach().exp().argmax(-1))
    y.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().exp())


def test_several_outputs_only_some_get_a_gradient():
    def f(x, w):
        return x @ w, (x * 2).sum(), w.cos()

    x, w = _leaf(3, 4), _leaf(4, 2)
    a, b, c = thunder.jit(f)(x, w)
    (a.sum() * 3).backward(retain_graph=True)
    ex, ew = _clone(x, w)
    ea, _, _ = f(ex, ew)
    (ea.sum() * 3).backward()
    torch.testing.assert_close(x.grad, ex.grad)
    torch.testing.assert_close(w.grad, ew.grad)
    x.grad = w.grad = None
    torch.autograd.backward([b, c], [torch.tensor(1.0, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)])
    torch.testing.assert_close(x.grad, torch.full((3, 4), 2.0, dtype=torch.float64))
    torch.testing.assert_close(w.grad, -w.detach().sin())


def test_output_that_is_an_input():
    def f(x, y):
        return x, x * y

    x, y = _leaf(3), _leaf(3)
    a, b = thunder.jit(f)(x, y)
    (a.sum() + b.sum()).backward()
    torch.testing.assert_close(x.grad, 1 + y.detach())
    torch.testing.assert_close(y.grad, x.detach())


def test_a_tensor_returned_twice_is_one_tensor():
    # `return y, y` (a ModelOutput holding a tensor under two names): one object, as in eager. The
    # training call returned the second as an alias with a gradient of its own, and an in-place
    # update of one made PyTorch refuse the other ("a view ... of a function that returns multiple
    # views").
    def f(x, w):
        y = x @ w
        return y, {"again": y}, y * 2

    x = _leaf(3, 4)
    w = _leaf(4, 4)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    results = []
    for fn, args in ((f, (xe, we)), (thunder.jit(f), (x, w))):
        y, d, z = fn(*args)
        assert d["again"] is y
        y.add_(1)
        (d["again"].sum() + z.sum()).backward()
        results.append(y.detach())
    torch.testing.assert_close(results[1], results[0])
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)


def test_backward_twice_raises_and_retain_graph_allows_it():
    f = thunder.jit(lambda x: (x.sin() * x).sum())
    x = _leaf(4)
    y = f(x)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    x.grad = None
    y = f(x)
    y.backward(retain_graph=True)
    y.backward()
    torch.testing.assert_close(x.grad, 2 * (x.detach().cos() * x.detach() + x.detach().sin()))


def test_last_backward_traces_print_the_backward():
    f = thunder.jit(lambda x, w: F.linear(x, w).sum())
    f(_leaf(2, 3), _leaf(4, 3))
    fw, bw = thunder.last_traces(f)[-1], thunder.last_backward_traces(f)[-1]
    assert "def computation(" in str(fw) and "def backward(" in str(bw)
    assert "torch.matmul" in str(bw)


def _eager_saved(fn, *args):
    """Count and bytes of the distinct tensors autograd saves for fn(*args) (saved-tensor hooks
    see thunder's saved tensors too)."""
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, len(seen), sum(seen.values())


def test_saved_tensors_are_rematerialized():
    def f(x, w):
        h = x @ w
        # elementwise ops without a rule of their own (gelu's backward is eager's formula over h)
        return (h * torch.sigmoid(h * 1.702)).sum()

    x, w = _leaf(64, 32, dtype=torch.float32), _leaf(32, 128, dtype=torch.float32)
    tf = thunder.jit(f)
    out, count, nbytes = _eager_saved(tf, x, w)
    info = saved_for_backward(tf)
    assert info["count"] == count and info["bytes"] == nbytes
    # Without remat the backward reads elementwise intermediates (the sigmoid); with it only
    # the matmul's output and the inputs are saved.
    assert info["bytes"] < info["bytes_without_remat"]
    assert info["count"] < info["count_without_remat"]
    h_bytes = 64 * 128 * 4
    assert info["bytes"] == h_bytes + x.numel() * 4 + w.numel() * 4
    # Eager saves about as much (h and the sigmoid's output; matmul saves x and w).
    _, eager_count, eager_bytes = _eager_saved(f, *_clone(x, w))
    assert info["bytes"] <= eager_bytes
    out.backward()
    ex, ew = _clone(x, w)
    f(ex, ew).backward()
    torch.testing.assert_close(x.grad, ex.grad)
    torch.testing.assert_close(w.grad, ew.grad)


def test_cheap_convert_is_recomputed_instead_of_saved():
    def f(x):
        y = x.float()  # bf16 -> f32 doubles the bytes
        return (y * y).sum()

    x = torch.randn(16, 16, dtype=torch.bfloat16, requires_grad=True)
    tf = thunder.jit(f)
    tf(x).backward()
    info = saved_for_backward(tf)
    assert info["bytes"] == 16 * 16 * 2 and info["bytes_without_remat"] == 16 * 16 * 4
    torch.testing.assert_close(x.grad, (2 * x.detach().float()).bfloat16())


# ---- a small transformer trained with AdamW ----------------------------------------------------


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(B, T, self.heads, C // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
        future = torch.ones(T, T).tril() == 0
        att = torch.softmax(att.masked_fill(future, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=32, d=32, heads=4, layers=2, block=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def test_transformer_adamw_50_steps_matches_eager():
    torch.manual_seed(0)
    model = TinyGPT()
    ref = copy.deepcopy(model)
    tmodel = thunder.jit(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=3e-3)
    # Counting sequences: the next token is learnable.
    data = (torch.randint(0, 32, (50, 4, 1)) + torch.arange(9)) % 32
    losses, ref_losses = [], []
    for step in range(50):
        idx, targets = data[step, :, :-1], data[step, :, 1:]
        loss = tmodel(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = ref(idx, targets)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        losses.append(loss.item())
        ref_losses.append(ref_loss.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-4)
    assert losses[-1] < losses[0] - 0.3  # it learns
    assert thunder.cache_misses(tmodel) == 1


class _TwoHeads(nn.Module):
    # A model whose second output (an auxiliary head, a pooler) the loss does not read.
    def __init__(self):
        super().__init__()
        self.body, self.head, self.aux = nn.Linear(4, 8), nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head(h), self.aux(h)


def test_parameters_only_an_unused_output_reads_keep_grad_none():
    # As in eager: .grad stays None (not zeros), so AdamW skips the parameter instead of decaying it.
    torch.manual_seed(0)
    model = _TwoHeads()
    ref = copy.deepcopy(model)
    jm = thunder.jit(model)
    opt, ref_opt = (torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5) for m in (model, ref))
    for step in range(3):
        x = torch.randn(5, 4)
        jm(x)[0].square().mean().backward()
        ref(x)[0].square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), (name, step)
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    assert model.aux.weight.grad is None
    # autograd.grad of an unused parameter raises as eager does, and allow_unused gives None
    out = jm(torch.randn(5, 4))[0].sum()
    with pytest.raises(RuntimeError, match="not have been used in the graph"):
        torch.autograd.grad(out, [model.aux.weight], retain_graph=True)
    assert torch.autograd.grad(out, [model.aux.weight, model.head.bias], allow_unused=True)[0] is None


class _AttentionPool(nn.Module):
    # SigLIP's pooling head: a probe attending over the encoder's output through
    # nn.MultiheadAttention (a call PyTorch differentiates: one fallback VJP in the backward).
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.probe = nn.Parameter(torch.randn(1, 1, 16))
        self.attention = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        h = self.body(x)
        return h, self.attention(self.probe.repeat(h.shape[0], 1, 1), h, h)[0]


@pytest.mark.parametrize("used", [0, 1])
def test_unused_attention_head_keeps_grad_none(used):
    torch.manual_seed(0)
    model = _AttentionPool()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 5, 16)
    thunder.jit(model)(x)[used].square().sum().backward()
    ref(x)[used].square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_remat_saves_a_residual_sum_not_its_summands():
    """Saving a residual stream's sum or the summand it adds costs the same bytes; the sum is
    saved, so the backward does not recompute the stream (a chain of adds over every layer, one
    kernel at the start of a transformer's backward)."""
    def f(x, w1, w2):
        h1 = x + x @ w1
        h2 = h1 + h1 @ w2
        return (h2.float() ** 2).sum()

    x, w1, w2 = _leaf(8, 16, dtype=torch.bfloat16), _leaf(16, 16, dtype=torch.bfloat16), _leaf(16, 16, dtype=torch.bfloat16)
    tf = thunder.jit(f)
    tf(x, w1, w2).backward()
    bwd = str(thunder.last_backward_traces(tf)[-1])
    # Only the two gradient accumulations add (h1's and x's); recomputing h2 would be a third.
    assert bwd.count("prims.add(") == 2, bwd
    ex, ew1, ew2 = _clone(x, w1, w2)
    f(ex, ew1, ew2).backward()
    for a, e in ((x, ex), (w1, ew1), (w2, ew2)):
        torch.testing.assert_close(a.grad, e.grad, rtol=2e-2, atol=2e-2)
