"""CUDA graphs on the GPU: correctness of thunder.jit(..., plugins="reduce-overhead"), then the
per-call time of the `overhead` workload (20 x `x = torch.sin(x) * 1.01 + 0.1` on [16, 16]).

Run on a CUDA machine from the repository root, after `make build`:
    PYTHONPATH=python:tests/python python3 tools/gpu_graphs_check.py [--calls 2000] [--repeats 7]

Checks (each prints PASS or FAIL; the exit status is the number of failures):
  outputs against eager over several calls with new inputs, on the C++ path and on the Python one
  (cache.fast = False); an input changed in place between calls; inputs the function updates in
  place are updated as in eager; a new shape captures again; a
  module whose parameters an optimizer steps in place between calls; a parameter replaced (new
  address) captures again; buffers updated in forward advance once per call; a call that needs
  autograd bypasses graphs with eager's gradient; a guarded global that changes captures again.

Timing: back-to-back calls on one input, as a serving loop makes them; us per call is the wall
time of `--calls` calls ended by a synchronization (host-bound when the GPU keeps up) and, beside
it, the same interval on CUDA events. Median of `--repeats`. Contenders: eager, thunder.jit,
thunder.jit with graphs on the C++ path (new; its input copied by the driver, and by ATen's copy_
with cache.driver_copy = False) and on the Python path (old, cache.fast = False),
torch.compile(mode="reduce-overhead"), and the floor: a torch.cuda.CUDAGraph of eager's function
replayed by hand after one copy_ of the input.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import traceback

import torch

import thunder

FAILURES: list[str] = []
DEV = "cuda"


def check(name):
    def deco(fn):
        try:
            fn()
            print(f"PASS  {name}")
        except Exception:
            FAILURES.append(name)
            print(f"FAIL  {name}")
            traceback.print_exc(limit=6)
        return fn

    return deco


def chain(x):
    for _ in range(20):
        x = torch.sin(x) * 1.01 + 0.1
    return x


_SCALE = 2.0


def _scaled(x):
    return x * _SCALE


def run_checks():
    dev = DEV

    for fast in (True, False):

        @check(f"function: outputs match eager over 8 calls with new inputs ({'C++' if fast else 'Python'} path)")
        def _():
            jf = thunder.jit(chain, plugins="reduce-overhead")
            jf._graphs.cache.fast = fast
            for _ in range(8):
                x = torch.randn(16, 16, device=dev)
                torch.testing.assert_close(jf(x), chain(x))
            assert len(jf._graphs.graphs) == 1, jf._graphs.graphs
            assert jf._graphs.cache.replays == (8 - 3 if fast else 0), jf._graphs.cache.replays

    @check("function: an input changed in place between calls")
    def _():
        jf = thunder.jit(chain, plugins="reduce-overhead")
        x = torch.randn(16, 16, device=dev)
        for _ in range(6):
            x.copy_(torch.randn(16, 16, device=dev))
            torch.testing.assert_close(jf(x), chain(x))

    @check("function: two tensors, a scalar and a kwarg; a new shape captures again")
    def _():
        def f(x, y, a, *, b):
            return (x.sin() * a + y).exp() - b

        jf = thunder.jit(f, plugins="reduce-overhead")
        for shape in [(8, 4)] * 5 + [(3, 7)] * 5 + [(8, 4)] * 2:
            x, y = torch.randn(shape, device=dev), torch.randn(shape, device=dev)
            torch.testing.assert_close(jf(x, y, 0.5, b=2.0), f(x, y, 0.5, b=2.0))
        assert len(jf._graphs.graphs) == 2 and len(jf._graphs.cache) == 2

    @check("function: inputs updated in place (add_, index_copy_) are updated as in eager")
    def _():
        def f(x, buf, i, v):
            x.add_(1.0)
            buf.index_copy_(0, i, v)
            return x.sin() + buf.sum()

        jf = thunder.jit(f, plugins="reduce-overhead")
        for _ in range(8):
            args = (torch.randn(16, device=dev), torch.zeros(6, 4, device=dev),
                    torch.tensor([1, 4], device=dev), torch.randn(2, 4, device=dev))
            ref = copy.deepcopy(args)
            torch.testing.assert_close(jf(*args), f(*ref))
            torch.testing.assert_close(args, ref)
        assert jf._graphs.cache.replays == 8 - 3

    for driver in (True, False):

        @check(f"function: transposed, expanded and sliced inputs, updated in place ({'driver' if driver else 'ATen'} copies)")
        def _():
            def f(a, b, c):
                a.mul_(2.0)
                return a @ b + c.sum()

            jf = thunder.jit(f, plugins="reduce-overhead")
            jf._graphs.cache.driver_copy = driver
            for _ in range(8):
                args = (torch.randn(6, 5, device=dev).t(), torch.randn(6, 1, device=dev).expand(6, 3),
                        torch.randn(4, 8, device=dev)[:, ::2])
                ref = copy.deepcopy(args)
                torch.testing.assert_close(jf(*args), f(*ref))
                torch.testing.assert_close(args, ref)
            assert jf._graphs.cache.replays == 8 - 3

    @check("function: outputs are the graph's buffers, overwritten by the next replay")
    def _():
        jf = thunder.jit(chain, plugins="reduce-overhead")
        outs = [jf(torch.randn(16, 16, device=dev)) for _ in range(5)]
        assert outs[3] is outs[4]
        x = torch.randn(16, 16, device=dev)
        torch.testing.assert_close(jf(x), chain(x))

    @check("module: an optimizer steps parameters in place between calls")
    def _():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(dev)
        ref = copy.deepcopy(model)
        tm = thunder.jit(model, plugins="reduce-overhead")
        opts = [torch.optim.AdamW(m.parameters(), lr=0.01) for m in (model, ref)]
        for _ in range(8):
            x = torch.randn(5, 8, device=dev)
            with torch.no_grad():
                torch.testing.assert_close(tm(x), ref(x))
            for m, o in zip((model, ref), opts):
                m(x).square().mean().backward()
                o.step()
                o.zero_grad()
        assert len(tm._graphs.graphs) == 1 and tm._graphs.cache.replays == 8 - 3
        model[0].weight = torch.nn.Parameter(model[0].weight.detach().clone())
        with torch.no_grad():
            for _ in range(4):
                x = torch.randn(5, 8, device=dev)
                torch.testing.assert_close(tm(x), ref(x))
        assert len(tm._graphs.graphs) == 2

    @check("module: buffers updated in forward advance once per call")
    def _():
        class Acc(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                self.steps += 1
                return self.lin(x) * self.steps

        m = Acc().to(dev)
        ref = copy.deepcopy(m)
        tm = thunder.jit(m, plugins="reduce-overhead")
        with torch.no_grad():
            for k in range(10):
                x = torch.randn(3 if k % 2 else 5, 4, device=dev)
                torch.testing.assert_close(tm(x), ref(x))
        assert int(m.steps) == 10 == int(ref.steps)

    @check("module: train() after eval() captures again (the training flag is guarded)")
    def _():
        class TrainScaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                y = self.lin(x)
                return y * 2 if self.training else y

        model = TrainScaled().to(dev)
        tm = thunder.jit(model, plugins="reduce-overhead")
        with torch.no_grad():
            for mode in (False, True, False):
                model.train(mode)
                for _ in range(4):
                    x = torch.randn(3, 4, device=dev)
                    torch.testing.assert_close(tm(x), model(x))
        assert len(tm._graphs.graphs) == 2

    @check("function: a call that needs autograd bypasses graphs, eager's gradient")
    def _():
        jf = thunder.jit(chain, plugins="reduce-overhead")
        for _ in range(4):
            x = torch.randn(16, 16, device=dev, requires_grad=True)
            (g,) = torch.autograd.grad(jf(x).sum(), x)
            xe = x.detach().requires_grad_(True)
            (ge,) = torch.autograd.grad(chain(xe).sum(), xe)
            torch.testing.assert_close(g, ge)
        assert len(jf._graphs.graphs) == 0

    @check("function: a CPU call runs without graphs")
    def _():
        jf = thunder.jit(chain, plugins="reduce-overhead")
        x = torch.randn(16, 16)
        torch.testing.assert_close(jf(x), chain(x))
        assert len(jf._graphs.graphs) == 0

    @check("function: a guarded global that changes captures again")
    def _():
        global _SCALE
        jf = thunder.jit(_scaled, plugins="reduce-overhead")
        for k in range(8):
            if k == 4:
                _SCALE = 3.0
            x = torch.randn(16, device=dev)
            torch.testing.assert_close(jf(x), x * _SCALE)
        assert len(jf._graphs.graphs) == 2


def per_call_us(fn, x, calls, repeats):
    for _ in range(50):
        fn(x)
    torch.cuda.synchronize()
    walls, events = [], []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(calls):
            fn(x)
        end.record()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) / calls * 1e6)
        events.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(walls), statistics.median(events)


def floor_fn():
    """A hand-made torch.cuda.CUDAGraph of eager's function: one copy_ and one replay per call."""
    static = torch.randn(16, 16, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            chain(static)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain(static)

    def call(x):
        static.copy_(x)
        g.replay()
        return out

    def copy_only(x):
        static.copy_(x)
        return out

    def replay_only(x):
        g.replay()
        return out

    return call, copy_only, replay_only


def run_timing(calls, repeats):
    x = torch.randn(16, 16, device=DEV)
    rows = [("eager", chain), ("thunder.jit", thunder.jit(chain))]
    new = thunder.jit(chain, plugins="reduce-overhead")
    old = thunder.jit(chain, plugins="reduce-overhead")
    old._graphs.cache.fast = False
    aten = thunder.jit(chain, plugins="reduce-overhead")
    aten._graphs.cache.driver_copy = False
    rows += [("thunder graphs (C++ path)", new), ("thunder graphs (Python path)", old),
             ("  C++ path without the Python frame", new._graphs.cache),
             ("  C++ path, ATen copy_ of the input", aten)]
    try:
        rows.append(("torch.compile reduce-overhead", torch.compile(chain, mode="reduce-overhead")))
    except Exception as e:
        print(f"torch.compile unavailable: {type(e).__name__}: {e}")
    call, copy_only, replay_only = floor_fn()
    rows.append(("floor: copy_ + CUDAGraph.replay", call))
    ref = chain(x)
    print(f"\n# overhead: 20 x sin(x)*1.01+0.1 on [16,16], {calls} back-to-back calls, median of {repeats}")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"{'contender':<34}{'wall us/call':>14}{'events us/call':>16}")
    for name, fn in rows:
        try:
            for _ in range(4):
                out = fn(x)
            torch.testing.assert_close(out, ref)
            wall, ev = per_call_us(fn, x, calls, repeats)
            print(f"{name:<34}{wall:>14.2f}{ev:>16.2f}")
        except Exception as e:
            FAILURES.append(f"timing {name}")
            print(f"{name:<34}  failed: {type(e).__name__}: {e}")
    for name, fn in (("  its copy_ alone", copy_only), ("  its replay alone", replay_only)):
        wall, ev = per_call_us(fn, x, calls, repeats)
        print(f"{name:<34}{wall:>14.2f}{ev:>16.2f}")
    if new._graphs.cache.replays < calls:
        FAILURES.append("the C++ path did not replay")

    # A module (parameters read in place): an MLP under no_grad.
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(DEV)
    xm = torch.randn(8, 64, device=DEV)
    mods = [("eager", mlp), ("thunder.jit", thunder.jit(mlp))]
    tm_new = thunder.jit(mlp, plugins="reduce-overhead")
    tm_old = thunder.jit(mlp, plugins="reduce-overhead")
    tm_old._graphs.cache.fast = False
    mods += [("thunder graphs (C++ path)", tm_new), ("thunder graphs (Python path)", tm_old)]
    try:
        mods.append(("torch.compile reduce-overhead", torch.compile(mlp, mode="reduce-overhead")))
    except Exception as e:
        print(f"torch.compile unavailable: {type(e).__name__}: {e}")
    print(f"\n# module: Linear(64,256)-GELU-Linear(256,64) on [8,64] under no_grad, {calls} calls")
    print(f"{'contender':<34}{'wall us/call':>14}{'events us/call':>16}")
    with torch.no_grad():
        ref = mlp(xm)
        for name, fn in mods:
            try:
                for _ in range(4):
                    out = fn(xm)
                torch.testing.assert_close(out, ref)
                wall, ev = per_call_us(fn, xm, calls, repeats)
                print(f"{name:<34}{wall:>14.2f}{ev:>16.2f}")
            except Exception as e:
                FAILURES.append(f"timing module {name}")
                print(f"{name:<34}  failed: {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_graphs_check: no CUDA device")
        return 2
    print(f"thunder from {thunder.__file__}")
    run_checks()
    run_timing(args.calls, args.repeats)
    print(f"\n{len(FAILURES)} failure(s)" + (": " + "; ".join(FAILURES) if FAILURES else ""))
    return len(FAILURES)


if __name__ == "__main__":
    sys.exit(main())
