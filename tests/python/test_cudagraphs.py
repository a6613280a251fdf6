"""thunder.jit(..., plugins="reduce-overhead"): CUDA graphs replay jitted calls (CUDA only)."""

import pytest
import torch

import thunder

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def test_unknown_plugin_is_refused():
    with pytest.raises(ValueError, match=r"unknown plugin 'fast'"):
        thunder.jit(lambda x: x, plugins="fast")


def test_cpu_calls_run_without_graphs():
    jf = thunder.jit(lambda x: x.sin() * 2, plugins="reduce-overhead")
    x = torch.randn(4)
    torch.testing.assert_close(jf(x), x.sin() * 2)


@cuda
def test_function_replays_with_new_inputs():
    def f(x):
        for _ in range(20):
            x = torch.sin(x) * 1.01 + 0.1
        return x

    jf = thunder.jit(f, plugins="reduce-overhead")
    for _ in range(3):
        x = torch.randn(16, 16, device="cuda")
        torch.testing.assert_close(jf(x), f(x))
    assert len(jf._graphs.graphs) == 1


@cuda
def test_graphs_without_random_numbers_launch_directly():
    # No draw from the generator: the C++ path launches the graph itself (cuGraphLaunch), with
    # the results of replay().
    def f(x):
        return torch.sin(x) * 1.01 + 0.1

    jf = thunder.jit(f, plugins="reduce-overhead")
    for _ in range(6):
        x = torch.randn(16, 16, device="cuda")
        torch.testing.assert_close(jf(x), f(x))
    assert jf._graphs.cache.direct_launches == jf._graphs.cache.replays > 0


@cuda
def test_graphs_that_draw_random_numbers_replay_with_fresh_ones():
    # A draw in the program: replay() advances the generator, so every call has new numbers
    # (the same stream as without graphs), and the graph is never launched directly.
    def f(x):
        return x + torch.rand_like(x)

    jf = thunder.jit(f, plugins="reduce-overhead")
    x = torch.zeros(64, device="cuda")
    outs = [jf(x).clone() for _ in range(6)]
    assert all(not torch.equal(a, b) for a, b in zip(outs, outs[1:]))
    assert jf._graphs.cache.direct_launches == 0 and jf._graphs.cache.replays > 0
    torch.cuda.manual_seed(7)
    graphed = [jf(x).clone() for _ in range(2)]
    torch.cuda.manual_seed(7)
    plain = thunder.jit(f)
    torch.testing.assert_close(graphed, [plain(x) for _ in range(2)])


@cuda
def test_module_sees_optimizer_steps_between_replays():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).cuda()
    tm = thunder.jit(model, executors=["cudagraphs"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8, device="cuda")
    for _ in range(3):
        with torch.no_grad():
            torch.testing.assert_close(tm(x), model(x))
        # A training step outside the graph: parameters change in place.
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert len(tm._graphs.graphs) == 1


@cuda
def test_training_attention_under_graphs_matches_float64():
    # cuDNN's attention backward runs on thunder's own thread (cudnnex._on_own_thread), which a
    # capture on the caller's stream must take in: its kernels land on that stream.
    from thunder.executors.cudnnex import cudnn_available

    if not cudnn_available():
        pytest.skip("this PyTorch has no cuDNN")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda") for _ in range(3))

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float().square().sum()

    jf = thunder.jit(f, plugins="reduce-overhead")
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    f(*ref).backward()
    for _ in range(5):
        ins = [t.bfloat16().requires_grad_() for t in (q, k, v)]
        jf(*ins).backward()
        for a, r in zip(ins, ref):
            assert ((a.grad.double() - r.grad).norm() / r.grad.norm()).item() < 0.02
    assert "cudnn_sdpa_bwd(" in str(thunder.last_backward_traces(jf)[-1])


@cuda
def test_kv_cache_decode_under_graphs():
    import sys, os
    sys.path.insert(0, os.path.dirname(__file__))
    from models import llama

    cfg = llama.Config()
    torch.manual_seed(0)
    model = llama.GPT(cfg).cuda().eval()
    ref = llama.GPT(cfg).cuda().eval()
    ref.load_state_dict(model.state_dict())
    model.set_kv_cache(1, device="cuda")
    ref.set_kv_cache(1, device="cuda")
    tm = thunder.jit(model, plugins="reduce-overhead")
    prompt = torch.randint(1, cfg.vocab_size, (5,), device="cuda")
    out = llama.generate(model, tm, prompt, 12)
    expected = llama.generate(ref, ref, prompt, 12)
    assert torch.equal(out, expected)


# ---- the call logic on the CPU: a stand-in for CUDA graphs -----------------------------------------
# The runner's warm-up, capture, keys, bypass and replay run with a backend whose "graph" records
# the captured call and replays it by running it again into the captured output buffers: what a
# CUDA graph does, minus the GPU.

import copy
import contextlib

import torch.utils._pytree as pytree

from thunder.core import guards
from thunder.core.cudagraphs import WARMUP_CALLS, CUDAGraphRunner


class _FakeGraph:
    def __init__(self, thunk, out):
        self.thunk, self.out, self.replays = thunk, out, 0

    def replay(self):
        self.replays += 1
        for o, n in zip(pytree.tree_leaves(self.out), pytree.tree_leaves(self.thunk())):
            o.copy_(n)


class _CPUBackend:
    device = "cpu"
    side_stream = staticmethod(contextlib.nullcontext)

    @staticmethod
    def capture(thunk):
        out = thunk()
        return _FakeGraph(thunk, out), out


def _fake_graphs(jfn, fn):
    """Gives a thunder.jit result the CPU stand-in for graphs (as plugins="reduce-overhead" would)."""
    module = isinstance(jfn, thunder.ThunderModule)
    guard = guards.guard_for_module(fn) if module else guards.guard_for_function(fn)
    jfn._graphs = CUDAGraphRunner(jfn._call_compiled, stable_first=module, guard=guard, backend=_CPUBackend,
                                  written=jfn._cfn.last_written_leaves)
    return jfn


def _chain(x, y):
    for _ in range(3):
        x = torch.sin(x) * 1.01 + y
    return x


def _new_cache(stable_first=False, device="cpu", guard=None):
    c = thunder._C.GraphCache(lambda *a, **k: None, lambda *a: None, stable_first, device)
    c.set_guard(guard)
    return c


_A, _B = torch.randn(4, 3), torch.randn(4, 3)
_KINDS = [
    # (name, args, kwargs, grad mode, expected kind)
    ("tensors", (_A, _B), {}, False, "graph"),
    ("tensor and scalars", (_A, 2, 0.5, True, None, "s"), {}, False, "graph"),
    ("kwargs and containers", ([_A, (_B,)],), {"y": _B, "n": 3}, False, "graph"),
    ("requires grad under no_grad", (torch.randn(2, requires_grad=True),), {}, False, "graph"),
    ("requires grad under grad", (torch.randn(2, requires_grad=True),), {}, True, "bypass"),
    ("no tensors", (1, 2.0), {}, False, "bypass"),
    ("an object leaf", (_A, object()), {}, False, "general"),
    ("a dtype and a device", (_A, torch.float32, torch.device("cpu")), {}, False, "graph"),
    ("a module leaf", (_A, torch.nn.Identity()), {}, False, "general"),
]


@pytest.mark.parametrize("name,args,kwargs,grad,kind", _KINDS, ids=[k[0] for k in _KINDS])
def test_graph_cache_classifies_calls(name, args, kwargs, grad, kind):
    with torch.set_grad_enabled(grad):
        got, key = _new_cache().describe(*args, **kwargs)
    assert got == kind
    assert (key is not None) == (kind == "graph")


def test_graph_cache_bypasses_tensors_of_another_device():
    assert _new_cache(device="cuda").describe(_A)[0] == "bypass"
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cpu'"):
        thunder._C.GraphCache(lambda: None, lambda: None, False, "mps")


_P = torch.randn(4, 3)
_SAME, _OTHER = "same", "other"
_KEYS = [
    ("new tensor, same metadata", ((_A,), {}), ((torch.randn(4, 3),), {}), False, _SAME),
    ("shape", ((_A,), {}), ((torch.randn(3, 4),), {}), False, _OTHER),
    ("strides", ((_A,), {}), ((torch.randn(3, 4).t(),), {}), False, _OTHER),
    ("dtype", ((_A,), {}), ((_A.double(),), {}), False, _OTHER),
    ("int value", ((_A, 2), {}), ((_A, 3), {}), False, _OTHER),
    ("int vs float", ((_A, 2), {}), ((_A, 2.0), {}), False, _OTHER),
    ("structure", (((_A, _B),), {}), (([_A, _B],), {}), False, _OTHER),
    ("dtype value", ((_A, torch.float32), {}), ((_A, torch.float64), {}), False, _OTHER),
    ("same device, new object", ((_A, torch.device("cpu")), {}), ((_A, torch.device("cpu")), {}), False, _SAME),
    ("device value", ((_A, torch.device("cpu")), {}), ((_A, torch.device("meta")), {}), False, _OTHER),
    ("kwarg name", ((), {"x": _A}), ((), {"y": _A}), False, _OTHER),
    ("stable tensor, same address", (((_P,), _A), {}), (((_P,), _B), {}), True, _SAME),
    ("stable tensor, new address", (((_P,), _A), {}), (((_P.clone(),), _A), {}), True, _OTHER),
    ("stable in place, updated", (((_P,), _A), {}), (((_P.add_(0),), _A), {}), True, _SAME),
    ("copied tensor, new address", (((_P,), _A), {}), (((_P,), _A.clone()), {}), True, _SAME),
]


@pytest.mark.parametrize("name,first,second,stable_first,expect", _KEYS, ids=[k[0] for k in _KEYS])
def test_graph_cache_keys(name, first, second, stable_first, expect):
    c = _new_cache(stable_first)
    k1 = c.describe(*first[0], **first[1])[1]
    k2 = c.describe(*second[0], **second[1])[1]
    assert (k1 == k2) == (expect == _SAME)


def test_graph_cache_keys_grad_mode_and_guard():
    flag = [1]
    c = _new_cache(guard=lambda: (flag[0],))
    with torch.no_grad():
        k1 = c.describe(_A)[1]
    k2 = c.describe(_A)[1]
    flag[0] = 2
    k3 = c.describe(_A)[1]
    assert len({k1, k2, k3}) == 3


def test_graph_cache_install_checks_buffers():
    c = _new_cache()
    with pytest.raises(TypeError, match="input buffer 0 must be a tensor or None"):
        c.install(b"k", [3], lambda: None, None, None)


def _to_dtype(x, dtype):
    return (x * 2).to(dtype)


_ARG_CASES = [
    # (name, function, args maker, eager function)
    ("tensor and dtype", _to_dtype, lambda: (torch.randn(3), torch.float64), None),
    ("two tensors", _chain, lambda: (torch.randn(4, 3), torch.randn(4, 3)), _chain),
    ("tensor and scalar kwarg", lambda x, *, s: x * s + 1, lambda: (torch.randn(5),), None),
    ("list of tensors", lambda xs: xs[0].exp() + xs[1], lambda: ([torch.randn(2, 2), torch.randn(2, 2)],), None),
]


@pytest.mark.parametrize("name,fn,make,_eager", _ARG_CASES, ids=[c[0] for c in _ARG_CASES])
def test_fake_graphs_replay_matches_eager(name, fn, make, _eager):
    jf = _fake_graphs(thunder.jit(fn), fn)
    kwargs = {"s": 3.0} if "kwarg" in name else {}
    for k in range(6):
        args = make()
        out = jf(*args, **kwargs)
        torch.testing.assert_close(out, fn(*args, **kwargs))
    graphs = jf._graphs
    assert len(graphs.graphs) == 1 and len(graphs.cache) == 1
    # Calls 1-2 warm up, call 3 captures and replays (in Python), calls 4-6 replay in C++.
    assert graphs.cache.replays == 6 - WARMUP_CALLS - 1
    (g,) = graphs.graphs.values()
    assert g.graph.replays == 6 - WARMUP_CALLS


def test_fake_graphs_output_is_the_graph_buffer():
    jf = _fake_graphs(thunder.jit(_chain), _chain)
    y = torch.randn(4, 3)
    outs = [jf(torch.randn(4, 3), y) for _ in range(5)]
    assert outs[2] is outs[3] is outs[4]  # overwritten by each replay, as torch.compile's
    x = torch.randn(4, 3)
    torch.testing.assert_close(jf(x, y), _chain(x, y))
    torch.testing.assert_close(outs[4], _chain(x, y))


def test_fake_graphs_program_on_another_device_runs_without_graph():
    # A program that moves a tensor off the graph's device (here the stand-in's CPU to meta, as
    # x.cpu() leaves CUDA) cannot be recorded: every call runs the program, none is captured.
    def f(x):
        return x * 2, x.to("meta")

    jf = _fake_graphs(thunder.jit(f), f)
    jf._graphs.devices = jf.last_devices
    for _ in range(5):
        x = torch.randn(3)
        out, moved = jf(x)
        torch.testing.assert_close(out, x * 2)
        assert moved.device.type == "meta"
    assert jf.last_devices() == ["cpu", "meta"]
    (g,) = jf._graphs.graphs.values()
    assert g.plain and g.graph is None and len(jf._graphs.cache) == 0


def test_fake_graphs_new_shape_captures_again():
    jf = _fake_graphs(thunder.jit(_chain), _chain)
    for shape in [(4, 3), (4, 3), (4, 3), (4, 3), (2, 5), (2, 5), (2, 5), (2, 5), (4, 3)]:
        x, y = torch.randn(shape), torch.randn(shape)
        torch.testing.assert_close(jf(x, y), _chain(x, y))
    assert len(jf._graphs.graphs) == 2 and len(jf._graphs.cache) == 2


def test_fake_graphs_general_path_for_object_leaves():
    class Box:
        def __init__(self, v):
            self.v = v

    def f(x, box):
        return x * 2 + 1

    jf = _fake_graphs(thunder.jit(f), f)
    box = Box(1)
    for _ in range(5):
        x = torch.randn(3)
        torch.testing.assert_close(jf(x, box), f(x, box))
    assert len(jf._graphs.graphs) == 1 and len(jf._graphs.cache) == 0  # keyed and replayed in Python
    (g,) = jf._graphs.graphs.values()
    assert g.graph.replays == 5 - WARMUP_CALLS


def test_fake_graphs_python_path_when_fast_is_off():
    jf = _fake_graphs(thunder.jit(_chain), _chain)
    jf._graphs.cache.fast = False
    for _ in range(5):
        x, y = torch.randn(4, 3), torch.randn(4, 3)
        torch.testing.assert_close(jf(x, y), _chain(x, y))
    assert len(jf._graphs.graphs) == 1 and len(jf._graphs.cache) == 0 and jf._graphs.cache.replays == 0


def test_fake_graphs_bypass_for_autograd_matches_eager_gradient():
    jf = _fake_graphs(thunder.jit(_chain), _chain)
    for _ in range(4):
        x = torch.randn(4, 3, requires_grad=True)
        y = torch.randn(4, 3)
        out = jf(x, y)
        (gx,) = torch.autograd.grad(out.sum(), x)
        xe = x.detach().requires_grad_(True)
        (ge,) = torch.autograd.grad(_chain(xe, y).sum(), xe)
        torch.testing.assert_close(out, _chain(x, y))
        torch.testing.assert_close(gx, ge)
    assert len(jf._graphs.graphs) == 0


def test_fake_graphs_guarded_global_captures_again():
    global _SCALE
    _SCALE = 2.0

    def f(x):
        return x * _SCALE

    jf = _fake_graphs(thunder.jit(f), f)
    try:
        for k in range(8):
            if k == 4:
                _SCALE = 3.0
            x = torch.randn(3)
            torch.testing.assert_close(jf(x), x * _SCALE)
        assert len(jf._graphs.graphs) == 2
    finally:
        del _SCALE


def test_fake_graphs_module_reads_parameters_in_place():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    tm = _fake_graphs(thunder.jit(model), model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(6):
        x = torch.randn(5, 8)
        with torch.no_grad():
            torch.testing.assert_close(tm(x), ref(x))
        for m, o in ((model, opt), (ref, ref_opt)):
            m(x).square().mean().backward()  # eager training step: parameters change in place
            o.step()
            o.zero_grad()
    assert len(tm._graphs.graphs) == 1 and tm._graphs.cache.replays == 6 - WARMUP_CALLS - 1
    # A new tensor in a parameter's place (a new address) captures again.
    model[0].weight = torch.nn.Parameter(model[0].weight.detach().clone())
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(tm(x), ref(x))
    assert len(tm._graphs.graphs) == 2


class _TrainScaled(torch.nn.Module):
    """Doubles its output in training mode: which program runs depends on `training` alone."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if self.training else y


def test_fake_graphs_module_training_flag_is_guarded():
    torch.manual_seed(0)
    model = _TrainScaled()
    tm = _fake_graphs(thunder.jit(model), model)
    with torch.no_grad():
        for mode in (False, True, False):
            model.train(mode)
            for _ in range(4):
                x = torch.randn(3, 4)
                torch.testing.assert_close(tm(x), model(x))
    assert len(tm._graphs.graphs) == 2


def _add_(x, y):
    x.add_(y)
    return x * 2


def _copy_second(x, y):
    y.copy_(x.sin())
    return x + 1


def _index_copy_(buf, i, v):
    buf.index_copy_(0, i, v)
    return buf.sum(0)


def _kwarg_mul_(x, *, acc):
    acc.mul_(x)
    return acc + x


_MUTATING = [
    # (name, function, args maker, kwargs maker)
    ("add_ on the first input", _add_, lambda: (torch.randn(3), torch.randn(3)), dict),
    ("copy_ into the second input", _copy_second, lambda: (torch.randn(2, 3), torch.zeros(2, 3)), dict),
    ("index_copy_ (reinplaced)", _index_copy_,
     lambda: (torch.zeros(5, 2), torch.tensor([1, 3]), torch.randn(2, 2)), dict),
    ("mul_ on a kwarg", _kwarg_mul_, lambda: (torch.randn(4),), lambda: {"acc": torch.randn(4)}),
]


@pytest.mark.parametrize("name,fn,make,make_kwargs", _MUTATING, ids=[m[0] for m in _MUTATING])
def test_fake_graphs_inputs_updated_in_place_as_in_eager(name, fn, make, make_kwargs):
    jf = _fake_graphs(thunder.jit(fn), fn)
    for _ in range(6):
        args, kwargs = make(), make_kwargs()
        ref_args, ref_kwargs = copy.deepcopy((args, kwargs))
        out = jf(*args, **kwargs)
        expected = fn(*ref_args, **ref_kwargs)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close((args, kwargs), (ref_args, ref_kwargs))
    assert jf._graphs.cache.replays == 6 - WARMUP_CALLS - 1


def test_graph_cache_install_checks_write_back():
    c = _new_cache()
    with pytest.raises(ValueError, match="leaf 1 is written back but has no buffer"):
        c.install(b"k", [torch.zeros(1), None], lambda: None, None, None, [1])


def test_jitted_function_with_graphs_is_collected():
    import gc
    import weakref

    jf = thunder.jit(_chain, plugins="reduce-overhead")
    jf(torch.randn(2), torch.randn(2))
    ref = weakref.ref(jf)
    del jf
    gc.collect()
    assert ref() is None
