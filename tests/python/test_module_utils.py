"""torch.nn.utils' weight reparametrizations under thunder.jit, and Tensor.type: outputs, every
gradient and the module's state after each call match eager's, with one trace for all calls."""

import warnings

import pytest
import torch
from torch.nn.utils import parametrizations

import thunder


def _steps(make, shape, steps=3):
    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    jm = thunder.jit(model)
    for _ in range(steps):
        x = torch.randn(shape)
        out, want = jm(x), ref(x)
        torch.testing.assert_close(out, want)
        got_g = torch.autograd.grad(out.square().sum(), list(model.parameters()))
        want_g = torch.autograd.grad(want.square().sum(), list(ref.parameters()))
        for g, w in zip(got_g, want_g):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    return model, ref, jm


def _old_weight_norm(module, dim):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (deprecated in favor of parametrizations)
        return torch.nn.utils.weight_norm(module, dim=dim)


@pytest.mark.parametrize("dim", [0, 1, -2, None])
@pytest.mark.parametrize("api", ["hook", "parametrization"])
def test_weight_norm_matches_eager(api, dim):
    wrap = _old_weight_norm if api == "hook" else parametrizations.weight_norm
    model, ref, jm = _steps(lambda: wrap(torch.nn.Conv1d(4, 6, 3), dim=dim), (2, 4, 9))
    assert thunder.cache_misses(jm) == 1
    assert "_weight_norm" not in str(thunder.last_traces(jm)[0])  # thunder's own norm, not a fallback
    if api == "hook":
        # The pre-hook's `module.weight = ...` rebinds the attribute to this call's weight, as in
        # eager: a tensor of the autograd graph.
        torch.testing.assert_close(model.weight, ref.weight)
        assert model.weight.grad_fn is not None


def test_old_spectral_norm_after_double_matches_eager():
    # The hook-based spectral_norm keeps `weight` as a plain attribute, which module.double() leaves
    # float32; its pre-hook rebinds it to a float64 tensor each call, as thunder now does too.
    def make():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.nn.utils.spectral_norm(torch.nn.Linear(5, 4)).double()

    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    jm = thunder.jit(model)
    for _ in range(3):
        x = torch.randn(3, 5, dtype=torch.float64)
        out, want = jm(x), ref(x)
        torch.testing.assert_close(out, want)
        for g, w in zip(torch.autograd.grad(out.sum(), list(model.parameters())),
                        torch.autograd.grad(want.sum(), list(ref.parameters()))):
            torch.testing.assert_close(g, w)
        torch.testing.assert_close(model.weight_u, ref.weight_u)
    assert model.weight.dtype == torch.float64


def test_spectral_norm_matches_eager():
    # Power iteration on buffers updated in place without grad, every training call.
    model, ref, jm = _steps(lambda: parametrizations.spectral_norm(torch.nn.Linear(5, 4)), (3, 5))
    torch.testing.assert_close(model.parametrizations.weight[0]._u, ref.parametrizations.weight[0]._u)


@pytest.mark.parametrize("to", [torch.float64, "torch.IntTensor", torch.HalfTensor, "torch.BFloat16Tensor", None])
def test_tensor_type(to):
    x = torch.randn(3, 2) * 4

    def f(x):
        return (x + 1).type(to) if to is not None else (x + 1, x.type())

    got, want = thunder.jit(f)(x), f(x)
    if to is None:
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == "torch.FloatTensor"
    else:
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_tensor_type_rejects_unknown_names():
    with pytest.raises(ValueError, match="Tensor.type: invalid type 'torch.NoSuchTensor'"):
        thunder.jit(lambda x: x.type("torch.NoSuchTensor"))(torch.ones(2))


@pytest.mark.parametrize("pytype", [int, float, bool, complex])
def test_python_types_as_dtypes(pytype):
    # torch reads int, float, bool and complex as int64, float64, bool and complex128
    x = torch.randn(3, 2)

    def f(x):
        made = torch.zeros(3, dtype=pytype), (x * 3).to(pytype), torch.ones_like(x, dtype=pytype)
        return made + ((torch.arange(3, dtype=pytype),) if pytype in (int, float) else ())  # (eager has no such aranges)

    got, want = thunder.jit(f)(x), f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        torch.testing.assert_close(g, w)


def test_namedtuple_arguments_keep_their_type():
    # A namedtuple (a PackedSequence, a config record) reaches the program as itself: fields by name.
    import collections

    Pair = collections.namedtuple("Pair", "x scale")

    def f(p, m):
        return p.x * p.scale + m.values

    x = torch.randn(3)
    m = torch.max(torch.randn(2, 3), dim=0)  # torch.return_types.max, a tuple subclass too
    torch.testing.assert_close(thunder.jit(f)(Pair(x, 2.0), m), f(Pair(x, 2.0), m))


FACTORIES = [
    lambda: torch.ones(3), lambda: torch.zeros(2, 2), lambda: torch.full((3,), 0.1), lambda: torch.full((3,), 2),
    lambda: torch.arange(3.0), lambda: torch.arange(3), lambda: torch.tensor(0.1), lambda: torch.tensor([1, 2]),
    lambda: torch.eye(2), lambda: torch.linspace(0, 1, 5), lambda: torch.empty(2).fill_(1.5),
]


@pytest.mark.parametrize("k", range(len(FACTORIES)))
def test_factories_follow_the_default_dtype(k):
    # torch.set_default_dtype between calls: factories make what eager makes, traced again.
    make = FACTORIES[k]

    def f(x):
        return x.sum() * 0 + make()

    jf, x = thunder.jit(f), torch.ones(2, dtype=torch.int32)
    try:
        for default in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(default)
            got, want = jf(x), f(x)
            assert got.dtype == want.dtype, (default, got.dtype, want.dtype)
            torch.testing.assert_close(got, want)
    finally:
        torch.set_default_dtype(torch.float32)


def _device_cases():
    # (how the default device is set, the device factories then use): the global setting and the
    # context manager; "meta" stands in for an accelerator on machines without one.
    other = "cuda" if torch.cuda.is_available() else "meta"
    return [("set_default_device", other), ("with torch.device", other)]


@pytest.mark.parametrize("how,device", _device_cases())
def test_factories_follow_the_default_device(how, device):
    # A trace made on the CPU default ran again under torch.set_default_device(...): its factories
    # made CPU tensors where eager's are on the new default. The default device is in the cache key.
    def f(n):
        return torch.ones(n) * 2 + torch.arange(n)

    jf = thunder.jit(f)
    assert jf(3).device.type == "cpu"
    try:
        if how == "set_default_device":
            torch.set_default_device(device)
            got, want = jf(3), f(3)
        else:
            with torch.device(device):
                got, want = jf(3), f(3)
    finally:
        torch.set_default_device(None)
    assert got.device == want.device, (got.device, want.device)
    if device != "meta":
        torch.testing.assert_close(got, want)
    back = jf(3)  # the CPU trace again, from the cache
    assert back.device.type == "cpu"
    torch.testing.assert_close(back, f(3))
    assert thunder.cache_misses(jf) == 2
