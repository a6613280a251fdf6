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
