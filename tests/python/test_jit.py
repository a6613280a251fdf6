"""thunder.jit's front end: calling conventions, modules, the cache, printed traces, errors."""

import pytest
import torch

import thunder


def test_positional_keyword_and_nested_arguments():
    def f(x, pair, *, scale, d):
        a, b = pair
        return {"sum": x + a * scale, "rest": [b - d["y"], d["z"]]}

    jf = thunder.jit(f)
    x, a, b, y, z = (torch.randn(3, 2) for _ in range(5))
    out = jf(x, (a, b), scale=2.0, d={"y": y, "z": z})
    expected = f(x, (a, b), scale=2.0, d={"y": y, "z": z})
    assert set(out) == {"sum", "rest"} and isinstance(out["rest"], list)
    torch.testing.assert_close(out["sum"], expected["sum"])
    torch.testing.assert_close(out["rest"][0], expected["rest"][0])
    torch.testing.assert_close(out["rest"][1], expected["rest"][1])


def test_python_scalars_are_part_of_the_cache_key():
    calls = []

    def f(x, k):
        calls.append(k)
        return x * k

    jf = thunder.jit(f)
    x = torch.randn(4)
    torch.testing.assert_close(jf(x, 2), x * 2)
    torch.testing.assert_close(jf(x, 3), x * 3)
    torch.testing.assert_close(jf(x, 2), x * 2)
    assert calls == [2, 3]
    assert thunder.cache_misses(jf) == 2 and thunder.cache_hits(jf) == 1


def test_cache_hit_does_not_retrace_and_new_metadata_misses():
    traced = []

    def f(a, b):
        traced.append(1)
        return torch.sin(a) + b

    jf = thunder.jit(f)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    jf(a, b)
    jf(torch.randn(2, 3), torch.randn(2, 3))
    assert len(traced) == 1 and thunder.cache_hits(jf) == 1 and thunder.cache_misses(jf) == 1
    jf(torch.randn(5, 3), torch.randn(5, 3))  # new shape
    jf(a.double(), b.double())  # new dtype
    assert len(traced) == 3 and thunder.cache_misses(jf) == 3
    jf(a, b)
    assert thunder.cache_hits(jf) == 2
    with torch.no_grad():  # grad mode is part of the key
        jf(a, b)
    assert thunder.cache_misses(jf) == 4


def test_module_parameters_and_buffers_are_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.register_buffer("offset", torch.randn(4))

    class WithBuffer(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) + self.inner.offset

    m = WithBuffer(model)
    tm = thunder.jit(m)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(tm(x), m(x))
        trace = thunder.last_traces(tm)[-1]
        names = [p.name for p in trace.inputs]
        assert "t_inner_0_weight" in names and "t_inner_offset" in names
        # an in-place update of a parameter is seen by the next call without a recompile
        model[0].weight.add_(1.0)
        torch.testing.assert_close(tm(x), m(x))
    assert thunder.cache_misses(tm) == 1 and thunder.cache_hits(tm) == 1


def test_closure_tensors_become_inputs():
    w = torch.randn(3, 3)

    def f(x):
        return x @ w

    jf = thunder.jit(f)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jf(x), x @ w)
    trace = thunder.last_traces(jf)[-1]
    assert len(trace.inputs) == 2


def test_factories_inside_the_function():
    def f(x):
        return x + torch.ones(3, dtype=x.dtype) * torch.arange(3) + torch.full((3,), 2.0)

    jf = thunder.jit(f)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jf(x), f(x))


def test_printed_traces_compile_and_have_the_seed_format():
    def f(a, b):
        return torch.nn.functional.relu(a @ b).sum(dim=-1)

    jf = thunder.jit(f)
    jf(torch.randn(2, 3), torch.randn(3, 4))
    traces = thunder.last_traces(jf)
    assert len(traces) >= 3
    for t in traces:
        compile(str(t), "<trace>", "exec")
    final = str(traces[-1])
    lines = final.splitlines()
    assert lines[0].startswith("# Constructed by Delete Last Used (took ")
    assert "import torch" in lines and "from thunder.executors.torchex import no_autocast" in lines
    assert "@torch.no_grad()" in lines and "@no_autocast" in lines
    assert "def computation(t_0, t_1):" in lines
    assert '  # t_0: "cpu f32[2, 3]"' in lines
    assert any(l.strip().startswith("# t") and "ltorch.matmul" in l for l in lines)
    assert any(l.strip().startswith("del ") for l in lines)
    assert lines[-1].startswith("  return ")


def test_data_dependent_shape_names_the_op():
    # No thunder symbol, and no way to know the output's shape without the data.
    def f(x):
        return torch.nonzero(x)

    with pytest.raises(NotImplementedError, match=r"torch\.nonzero has no thunder symbol.*metadata"):
        thunder.jit(f)(torch.randn(3))


def test_data_dependent_python_is_rejected_clearly():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(NotImplementedError, match="__bool__"):
        thunder.jit(f)(torch.randn(3))


def test_meta_errors_name_the_op_and_shapes():
    with pytest.raises(RuntimeError, match=r"ltorch.add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        thunder.jit(lambda a, b: a + b)(torch.randn(2, 3), torch.randn(4))
    with pytest.raises(IndexError, match=r"dimension out of range"):
        thunder.jit(lambda a: a.sum(5))(torch.randn(2, 3))


def test_the_same_function_works_after_an_error():
    jf = thunder.jit(lambda a, b: a * b)
    with pytest.raises(RuntimeError):
        jf(torch.randn(2), torch.randn(3))
    torch.testing.assert_close(jf(torch.ones(2), torch.ones(2)), torch.ones(2))


def test_jit_rejects_non_callables():
    with pytest.raises(TypeError, match="expected a function or an nn.Module"):
        thunder.jit(3)


def test_discarded_jitted_objects_free_their_tensors():
    # The C++ compiled function holds its compile hook; a strong reference from it back to the
    # jitted module was a cycle Python's collector cannot see through C++, so a discarded
    # thunder.jit(module) kept the module's parameters alive for the life of the process.
    import gc
    import weakref

    from thunder.core.transforms import grad

    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    param = weakref.ref(module[0].weight)
    jm = thunder.jit(module)
    jm(torch.randn(2, 8)).sum().backward()
    jitted = weakref.ref(jm)
    del module, jm
    gc.collect()
    assert jitted() is None and param() is None

    w = torch.randn(8, 8, requires_grad=True)
    jf = thunder.jit(lambda x: (x @ w).sin())
    jf(torch.randn(2, 8))
    g = grad(lambda x, w: (x @ w).sin().sum())
    g(torch.randn(2, 8), w)
    refs = [weakref.ref(jf), weakref.ref(g)]
    del jf, g
    gc.collect()
    assert [r() for r in refs] == [None, None]
