"""The reinplace pass (csrc/transforms/reinplace.h): a functionalized in-place update of an input
(`buf.index_copy_(...)` traced as an out-of-place index_copy plus a copy back into buf) runs in
place again where nothing can tell. Each case runs eagerly and jitted on copies of the same
inputs, compares outputs and every input afterwards (forward, and gradients where an input
requires grad), and checks which calls the final trace holds."""

import os
import sys

import pytest
import torch

import thunder

sys.path.insert(0, os.path.dirname(__file__))
from models import llama  # noqa: E402


def _clone(xs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in xs]


def _calls(trace) -> list:
    """The statements of a final trace (comments and del lines left out)."""
    lines = str(trace).split("def computation", 1)[1].splitlines()[1:]
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", "del ", "return"))]


def _index_copy(buf, i, v):
    buf.index_copy_(1, i, v)
    return buf.sum(1)


def _index_add(buf, i, v):
    buf.index_add_(0, i, v, alpha=2.0)
    return buf * 3


def _scatter(buf, i, v):
    buf.scatter_(1, i, v)
    return buf.amax(1)


def _scatter_add(buf, i, v):
    buf.scatter_add_(1, i, v)
    return buf.mean()


def _two_updates(buf, i, v):
    # A chain: the second update reads the first's result only.
    buf.index_copy_(0, i, v)
    buf.index_copy_(0, i + 1, v * 2)
    return buf.sum()


def _read_before(buf, i, v):
    s = buf.sum(0)  # a fresh tensor made before the update
    buf.index_copy_(0, i, v)
    return s + buf.mean(0)


def _old_value_read_after(buf, i, v):
    new = buf.index_copy(0, i, v)
    r = buf * 2  # the old value, read after the update: the update moves below it
    buf.copy_(new)
    return r


def _old_value_read_after_new(buf, i, v):
    new = buf.index_copy(0, i, v)
    a = new.amax()
    r = buf * a  # the old value, read after the new one was: no place for an in-place update
    buf.copy_(new)
    return r


def _result_returned(buf, i, v):
    buf.index_copy_(0, i, v)
    return buf


def _source_is_view_of_buffer(buf, i):
    # Out of place, as here, eager reads rows of buf while writing others; in place it would
    # refuse (the source overlaps what it writes).
    new = buf.index_copy(0, i, buf[1:2])
    buf.copy_(new)
    return buf.sum()


def _source_made_from_buffer(buf, i):
    buf.index_copy_(0, i, buf[1:2] * 2 + buf[2:3])
    return buf.sum()


def _rows(n=5, w=4):
    return torch.randn(n, w)


# (name, fn, inputs, in-place calls the final trace must hold, whether copy_ must be gone)
CASES = [
    ("index_copy", _index_copy, lambda: (torch.randn(3, 6), torch.tensor([4, 1]), torch.randn(3, 2)),
     ["Tensor.index_copy_"], True),
    ("index_add", _index_add, lambda: (_rows(), torch.tensor([0, 3, 3]), torch.randn(3, 4)),
     ["Tensor.index_add_"], True),
    ("scatter", _scatter, lambda: (torch.randn(3, 6), torch.tensor([[0, 5], [2, 1], [3, 3]]), torch.randn(3, 2)),
     ["torchex.scatter_"], True),
    ("scatter_add", _scatter_add, lambda: (torch.randn(3, 6), torch.tensor([[0, 5], [2, 2], [3, 3]]), torch.randn(3, 2)),
     ["Tensor.scatter_add_"], True),
    ("two_updates", _two_updates, lambda: (_rows(), torch.tensor([1]), torch.randn(1, 4)),
     ["Tensor.index_copy_", "Tensor.index_copy_"], True),
    # The fuser places the sum of the old value after the mean of the new one; the pass moves
    # in-place updates down, never reads up, so this one stays out of place.
    # The sum reads the old value and runs first (the fusion partition keeps a passed-over call
    # after the kernel that does not read it), so the update goes in place.
    ("read_before", _read_before, lambda: (_rows(), torch.tensor([2]), torch.randn(1, 4)),
     ["Tensor.index_copy_"], True),
    ("old_value_read_after", _old_value_read_after, lambda: (_rows(), torch.tensor([2]), torch.randn(1, 4)),
     ["Tensor.index_copy_"], True),
    ("old_value_read_after_new", _old_value_read_after_new, lambda: (_rows(), torch.tensor([2]), torch.randn(1, 4)),
     [], False),
    ("result_returned", _result_returned, lambda: (_rows(), torch.tensor([2]), torch.randn(1, 4)), [], False),
    ("source_is_view_of_buffer", _source_is_view_of_buffer, lambda: (_rows(), torch.tensor([3])), [], False),
    ("source_made_from_buffer", _source_made_from_buffer, lambda: (_rows(), torch.tensor([3])),
     ["Tensor.index_copy_"], True),
]


@pytest.mark.parametrize("name,fn,make,inplace,no_copy", CASES, ids=[c[0] for c in CASES])
def test_reinplace_matches_eager(name, fn, make, inplace, no_copy):
    inputs = make()
    jf = thunder.jit(fn)
    eager_in, jit_in = _clone(inputs), _clone(inputs)
    with torch.no_grad():
        for _ in range(2):
            expected = fn(*eager_in)
            actual = jf(*jit_in)
            torch.testing.assert_close(actual, expected)
            for a, e in zip(jit_in, eager_in):
                torch.testing.assert_close(a, e)
    calls = _calls(thunder.last_traces(jf)[-1])
    found = [c.split("=", 1)[1].split("(", 1)[0].strip() for c in calls if "_(" in c.split("=", 1)[-1]]
    assert [f for f in found if f != "torchex.copy_"] == inplace, calls
    assert ("torchex.copy_" in found) != no_copy, calls


def test_not_reinplaced_when_training():
    # With autograd the forward's values may be saved for the backward: the buffer is written back.
    def f(buf, i, x):
        buf.index_copy_(0, i, x.detach() * 2)
        return (x * buf[:2]).sum()

    buf, i, x = torch.randn(4, 3), torch.tensor([1, 3]), torch.randn(2, 3, requires_grad=True)
    jf = thunder.jit(f)
    eb, ex = buf.clone(), x.detach().clone().requires_grad_()
    jb, jx = buf.clone(), x.detach().clone().requires_grad_()
    expected, actual = f(eb, i, ex), jf(jb, i, jx)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(jb, eb)
    expected.backward()
    actual.backward()
    torch.testing.assert_close(jx.grad, ex.grad)
    assert "copy_(" in str(thunder.last_traces(jf)[-1])


@pytest.mark.parametrize("rope", ["halves", "complex"])
def test_kv_cache_decode_updates_the_cache_in_place(rope):
    cfg = llama.Config(rope=rope, n_layer=3)
    torch.manual_seed(0)
    model, ref = llama.GPT(cfg).eval(), llama.GPT(cfg).eval()
    ref.load_state_dict(model.state_dict())
    model.set_kv_cache(1)
    ref.set_kv_cache(1)
    tm = thunder.jit(model)
    buffers = {n: b for n, b in model.named_buffers() if n.endswith((".k", ".v"))}
    ptrs = {n: b.data_ptr() for n, b in buffers.items()}
    prompt = torch.randint(0, cfg.vocab_size, (6,))
    out = llama.generate(model, tm, prompt, 14)
    expected = llama.generate(ref, ref, prompt, 14)
    assert torch.equal(out, expected), (out, expected)
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, msg=f"buffer {name}")
    # The caches stay where they were, and one decode step writes them with one call each,
    # without a copy of any whole cache.
    assert {n: b.data_ptr() for n, b in model.named_buffers() if n in ptrs} == ptrs
    calls = _calls(thunder.last_traces(tm)[-1])
    assert sum("Tensor.index_copy_(" in c for c in calls) == 2 * cfg.n_layer, calls
    assert not any("copy_(" in c and "index_copy_(" not in c for c in calls), calls
    assert not any("scatter" in c for c in calls), calls


def _conv_bn(momentum):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8, momentum=momentum), torch.nn.ReLU(inplace=True)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_training_updates_running_statistics_in_place(dtype, momentum):
    # The training forward runs ATen's batch_norm that updates the statistics it is given (as
    # eager does) and adds to the batch counter in place: no functional copies written back.
    # bfloat16 on the CPU: the parameters go to ATen as float32 and the statistics come back.
    torch.manual_seed(0)
    model = _conv_bn(momentum).to(dtype)
    ref = _conv_bn(momentum).to(dtype)
    ref.load_state_dict(model.state_dict())
    bn = model[1]
    ptrs = {n: b.data_ptr() for n, b in bn.named_buffers()}
    tm = thunder.jit(model)
    x = torch.randn(4, 3, 10, 10, dtype=dtype)
    for _ in range(3):
        tm(x).float().square().mean().backward()
        ref(x).float().square().mean().backward()
    for (n, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, msg=f"state {n}")
    if dtype == torch.float32:  # bfloat16's: the fused backward rounds once where eager rounds per op
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {n}")
    assert {n: b.data_ptr() for n, b in bn.named_buffers()} == ptrs
    calls = _calls(thunder.last_traces(tm)[-1])
    assert any("torchex.batch_norm_(" in c for c in calls), calls
    assert any("Tensor.add_(" in c for c in calls), calls
    assert not any("copy_(" in c for c in calls), calls


def test_running_statistic_read_after_the_update_is_written_back():
    # The forward reads the updated running mean: the functional value is read by more than its
    # write-back, so the statistics are copied back as before, and the values are eager's.
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(5)

        def forward(self, x):
            return self.bn(x) * self.bn.running_mean

    torch.manual_seed(0)
    model, ref = M(), M()
    ref.load_state_dict(model.state_dict())
    tm = thunder.jit(model)
    x = torch.randn(6, 5, requires_grad=True)
    for _ in range(2):
        torch.testing.assert_close(tm(x), ref(x))
    torch.testing.assert_close(model.state_dict(), ref.state_dict())
    assert "copy_(" in str(thunder.last_traces(tm)[-1])


def test_first_convolution_computes_no_input_gradient():
    # The model's input needs no gradient: the first convolution's backward computes the
    # weight's gradient alone (the input's is the most expensive part at a network's stem).
    torch.manual_seed(0)
    model, ref = _conv_bn(0.1), _conv_bn(0.1)
    ref.load_state_dict(model.state_dict())
    tm = thunder.jit(model)
    x = torch.randn(2, 3, 9, 9)
    tm(x).sum().backward()
    ref(x).sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {n}")
    calls = str(thunder.last_backward_traces(tm)[-1])
    assert "torchex.convolution_backward_weight(" in calls, calls
    # With an input that needs its gradient, both are computed.
    xg = x.clone().requires_grad_()
    tm(xg).sum().backward()
    assert xg.grad is not None and xg.grad.abs().sum() > 0
    calls = str(thunder.last_backward_traces(tm)[-1])
    assert "torchex.convolution_backward(" in calls and "convolution_backward_weight" not in calls, calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_printed_forms_compute_what_the_runtime_computes(dtype):
    # The Python functions the printed traces call (thunder.executors.torchex) for the forms above.
    from thunder.executors import torchex

    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, dtype=dtype)
    w, b = torch.rand(3, dtype=dtype) + 0.5, torch.randn(3, dtype=dtype)
    rm, rv = torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5
    erm, erv = rm.clone(), rv.clone()
    out, mean, invstd, nrm, nrv = torchex.batch_norm_(x, w, b, rm, rv, 0.1, 1e-5)
    expected = torch.nn.functional.batch_norm(x, erm, erv, w, b, training=True, momentum=0.1, eps=1e-5)
    assert nrm is rm and nrv is rv
    torch.testing.assert_close(rm, erm)
    torch.testing.assert_close(rv, erv)
    # bfloat16: thunder's CPU kernels take float32 parameters (the C++ runtime does the same)
    torch.testing.assert_close(out, expected, **({"atol": 1e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}))
    g, weight = torch.randn(4, 2, 3, 3, dtype=dtype), torch.randn(2, 3, 3, 3, dtype=dtype)
    args = ((1, 1), (0, 0), (1, 1), False, (0, 0), 1)
    gi, gw = torchex.convolution_backward(g, x, weight, *args)
    none, gw_only = torchex.convolution_backward_weight(g, x, weight, *args)
    assert none is None
    torch.testing.assert_close(gw_only, gw)
