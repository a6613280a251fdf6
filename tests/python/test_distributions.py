"""torch.distributions under thunder.jit, as policies and probabilistic models use them: log-probs,
entropies, KL divergences and reparameterized samples, forward and gradients against eager
(float64). Their argument validation (`if not torch._is_all_true(valid): raise ValueError`) is
traced as passing and checked as the program runs: invalid arguments still raise."""

import pytest
import torch

import thunder
from thunder.core.fallback import CheckFailed

D = torch.distributions
f64 = torch.float64


@pytest.fixture(autouse=True)
def _validation_on():
    # Importing torch.compile's inductor turns the distributions' default validation off for the
    # process (Distribution._validate_args): these tests run with PyTorch's own default.
    saved = D.Distribution._validate_args
    D.Distribution.set_default_validate_args(True)
    yield
    D.Distribution.set_default_validate_args(saved)


def _x(*shape, low=None):
    g = torch.Generator().manual_seed(sum(shape) + 7)
    t = torch.randn(shape, dtype=f64, generator=g)
    return t if low is None else t.abs() + low


def _tril(n):
    return torch.eye(n, dtype=f64) + 0.1 * torch.tril(_x(n, n), -1)


CASES = [
    ("normal_log_prob", lambda m, s, v: D.Normal(m, s).log_prob(v), (_x(4, 5), _x(4, 5, low=0.5), _x(4, 5))),
    ("normal_entropy", lambda m, s: D.Normal(m, s).entropy(), (_x(4, 5), _x(4, 5, low=0.5))),
    ("normal_cdf", lambda m, s, v: D.Normal(m, s).cdf(v), (_x(3), _x(3, low=0.5), _x(3))),
    ("kl_normal", lambda m, s: D.kl_divergence(D.Normal(m, s), D.Normal(torch.zeros_like(m), torch.ones_like(s))),
     (_x(6), _x(6, low=0.5))),
    ("independent", lambda m, s, v: D.Independent(D.Normal(m, s), 1).log_prob(v), (_x(4, 5), _x(4, 5, low=0.5), _x(4, 5))),
    ("categorical", lambda l, a: D.Categorical(logits=l).log_prob(a) + D.Categorical(logits=l).entropy(),
     (_x(4, 5), torch.tensor([0, 1, 4, 2]))),
    ("categorical_probs", lambda p, a: D.Categorical(probs=p.softmax(-1)).log_prob(a), (_x(4, 5), torch.tensor([3, 1, 0, 2]))),
    ("bernoulli", lambda l, v: D.Bernoulli(logits=l).log_prob(v), (_x(4, 5), (_x(4, 5) > 0).double())),
    ("beta", lambda a, b, v: D.Beta(a, b).log_prob(v), (_x(4, low=0.5), _x(4, low=1.0), torch.tensor([0.2, 0.5, 0.7, 0.9], dtype=f64))),
    ("gamma", lambda a, b, v: D.Gamma(a, b).log_prob(v), (_x(4, low=0.5), _x(4, low=1.0), _x(4, low=0.3))),
    ("tanh_normal", lambda m, s, v: D.TransformedDistribution(D.Normal(m, s), [D.transforms.TanhTransform()]).log_prob(v),
     (_x(4), _x(4, low=0.5), torch.tensor([-0.5, 0.1, 0.3, 0.8], dtype=f64))),
    ("mvn_scale_tril", lambda m, L, v: D.MultivariateNormal(m, scale_tril=L).log_prob(v), (_x(5), _tril(5), _x(5))),
    ("laplace", lambda m, s, v: D.Laplace(m, s).log_prob(v), (_x(5), _x(5, low=0.5), _x(5))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_distribution_matches_eager(case):
    _, fn, inputs = case
    e_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    t_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    expected = fn(*e_in)
    jf = thunder.jit(fn)
    got = jf(*t_in)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    for e, t in zip(e_in, t_in):
        # (None where eager's is None: Normal's entropy does not depend on loc)
        assert (e.grad is None) == (t.grad is None)
        if e.grad is not None:
            torch.testing.assert_close(t.grad, e.grad)
    torch.testing.assert_close(jf(*t_in), expected)


def test_reparameterized_sample_has_eager_gradients():
    def f(m, s):
        x = D.Normal(m, s).rsample()
        return x, (x * x).sum()

    m, s = _x(3, 4).requires_grad_(), _x(3, 4, low=0.5).requires_grad_()
    x, loss = thunder.jit(f)(m, s)
    gm, gs = torch.autograd.grad(loss, (m, s))
    eps = (x - m) / s  # the standard normal draw
    torch.testing.assert_close(gm, 2 * x)
    torch.testing.assert_close(gs, 2 * x * eps)


def test_invalid_arguments_raise_as_the_program_runs():
    jf = thunder.jit(lambda m, s: D.Normal(m, s).log_prob(m + 1))
    m, s = _x(3), _x(3, low=0.5)
    torch.testing.assert_close(jf(m, s), D.Normal(m, s).log_prob(m + 1))
    with pytest.raises(ValueError):
        D.Normal(m, -s)  # eager
    with pytest.raises(ValueError, match=r"value check failed \(torch\._is_all_true at .*test_distributions"):
        jf(m, -s)  # the cached trace checks it
    assert thunder.cache_misses(jf) == 1
    # a first call with invalid arguments raises too
    with pytest.raises(CheckFailed):
        thunder.jit(lambda m, s: D.Normal(m, s).log_prob(m))(m, -s)
    # (validation off: no check in the trace)
    jf_off = thunder.jit(lambda m, s: D.Normal(m, s, validate_args=False).log_prob(m))
    assert torch.isnan(jf_off(m, -s)).all() == torch.isnan(D.Normal(m, -s, validate_args=False).log_prob(m)).all()
    assert "check_true" not in str(thunder.last_traces(jf_off)[-1])


def test_check_tensor_all_raises_runtime_error():
    def f(x):
        torch._check_tensor_all(x > 0, lambda: "x must be positive")
        return x.log()

    jf = thunder.jit(f)
    x = _x(4, low=0.1)
    torch.testing.assert_close(jf(x), x.log())
    assert "check_true" in str(thunder.last_traces(jf)[-1])
    with pytest.raises(RuntimeError, match="value check failed"):
        jf(-x)


def test_printed_program_runs_its_checks():
    from thunder import extend

    jf = thunder.jit(lambda m, s: D.Normal(m, s).log_prob(m * 0.5))
    m, s = _x(3), _x(3, low=0.5)
    want = jf(m, s)
    trace = thunder.last_traces(jf)[-1]
    assert str(trace).count("check_true(") == 3  # loc, scale, the value
    scope = extend.execution_scope(trace)
    exec(compile(str(trace), "<trace>", "exec"), scope)
    torch.testing.assert_close(scope["computation"](m, s), want)
    with pytest.raises(CheckFailed):
        scope["computation"](m, -s)


def test_broadcast_tensors_are_views_with_eager_gradients():
    def f(a, b):
        x, y = torch.broadcast_tensors(a, b)
        return y.sum()

    def g(a, b, c):
        x, y, z = torch.broadcast_tensors(a, b, c)
        return (x * y).sum()

    for fn, shapes in ((f, [(3,), (2, 3)]), (g, [(3, 1), (1, 4), ()])):
        e_in = [_x(*s).requires_grad_() for s in shapes]
        t_in = [x.detach().clone().requires_grad_() for x in e_in]
        jf = thunder.jit(fn)
        torch.testing.assert_close(jf(*t_in), fn(*e_in))
        fn(*e_in).backward()
        jf(*t_in).backward()
        for e, t in zip(e_in, t_in):
            assert (e.grad is None) == (t.grad is None)  # a's expansion is unused in f: None
            if e.grad is not None:
                torch.testing.assert_close(t.grad, e.grad)
    with pytest.raises(TypeError, match="broadcast_tensors"):
        thunder.jit(lambda a: torch.broadcast_tensors(a, 2))(_x(3))
