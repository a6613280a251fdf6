"""Programs called with changing shapes (batch sizes, sequence lengths, a last partial batch) that
compute with their sizes in Python: every call's outputs and gradients equal eager's, under the
default cache, `cache="symbolic values"` and `torch._dynamo.mark_dynamic`."""

import math

import pytest
import torch

import thunder

MODES = ("default", "symbolic values", "mark_dynamic")


def _jit(fn, mode):
    return thunder.jit(fn, cache="symbolic values") if mode == "symbolic values" else thunder.jit(fn)


def _args(shapes, mode, grad, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        t = torch.randn(*s, generator=g, dtype=torch.float64)
        if mode == "mark_dynamic":
            for d, n in enumerate(s):
                if n > 1:
                    torch._dynamo.mark_dynamic(t, d)
        out.append(t.requires_grad_(grad))
    return out


def _same(got, expected):
    """Equal values of the same types: a Python int is an int (not an object holding the traced
    size), a torch.Size a torch.Size."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            _same(a, b)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            _same(got[k], expected[k])
    else:
        assert got == expected


def _check(fn, shape_seq, mode, grad=True):
    jf = _jit(fn, mode)
    for i, shapes in enumerate(shape_seq):
        xs = _args(shapes, mode, grad, i)
        ex = [x.detach().clone().requires_grad_(grad) for x in xs]
        got, expected = jf(*xs), fn(*ex)
        _same(got, expected)
        if grad:
            outs = [(a, b) for a, b in zip(_flat(got), _flat(expected)) if isinstance(b, torch.Tensor) and b.requires_grad]
            cot = [torch.randn_like(b) for _, b in outs]
            torch.autograd.backward([a for a, _ in outs], cot)
            torch.autograd.backward([b for _, b in outs], cot)
            for a, b in zip(xs, ex):
                torch.testing.assert_close(a.grad, b.grad)
    return jf


def _flat(x):
    if isinstance(x, dict):
        return _flat(list(x.values()))
    if isinstance(x, (tuple, list)) and not isinstance(x, torch.Size):
        return [y for z in x for y in _flat(z)]
    return [x]


# ---- sizes returned to the caller ------------------------------------------------------------------


def _returns_sizes(x):
    return x * 2, x.shape[1], x.shape[1] * 3 + 1, x.shape, x.size(0) - x.size(1)


def _returns_sizes_in_a_dict(x):
    return {"y": x.sum(1), "n": x.shape[1], "shape": x.shape[-1:]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [_returns_sizes, _returns_sizes_in_a_dict])
@pytest.mark.parametrize("grad", [False, True])
def test_returned_sizes_are_the_calls_ints(fn, mode, grad):
    # A symbolic trace returned the SymInt it traced with (its hint) at every later size.
    _check(fn, [[(2, 4)], [(2, 6)], [(3, 8)], [(3, 9)]], mode, grad)


# ---- sizes as tensor values ------------------------------------------------------------------------


def _tensor_of_a_list_of_sizes(x):
    return (torch.tensor([x.shape[0], x.shape[1]]) + 1, torch.tensor(x.shape, dtype=x.dtype) * x.sum(),
            torch.tensor([[x.shape[0]]]), x.new_tensor(x.shape[-1:]), torch.as_tensor((x.shape[1], 2, x.shape[0])))


@pytest.mark.parametrize("mode", MODES)
def test_tensor_of_a_list_of_sizes(mode):
    # torch.tensor([x.shape[0], x.shape[1]]) raised "Could not infer dtype of SymInt".
    _check(_tensor_of_a_list_of_sizes, [[(2, 4)], [(3, 6)], [(4, 8)], [(5, 9)]], mode)


# ---- grad mode left switched by the program ---------------------------------------------------------


def _switches_grad_off(x):
    y = x * 2
    torch._C._set_grad_enabled(False)  # as a piece of a dynamo graph split inside torch.no_grad()
    return y, y * 3


def test_a_program_that_switches_grad_mode_off_is_a_training_call():
    # The training/inference choice read the grad mode the program left: y came back detached.
    jf = thunder.jit(_switches_grad_off)
    for n in (2, 3):
        x = torch.randn(n, 4, requires_grad=True)
        try:
            y, z = jf(x)
        finally:
            torch._C._set_grad_enabled(True)
        assert y.requires_grad and not z.requires_grad
        y.sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


# ---- sizes the program stores where they outlive the trace -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_sizes_stored_on_a_global_list_are_ints(mode):
    # A size appended to a global list stayed a SymInt of its trace: the next trace read it as an
    # expression over its own symbols (the new call's size, not the stored one): wrong values from
    # the third call; and eager code using the list (torch.zeros(n), repr) failed or printed it.
    stored, eager_stored = [1], [1]

    def make(sizes):
        def f(x):
            out = x * sizes[-1]
            sizes.append(x.shape[1])
            return out

        return f

    f, jf = make(eager_stored), _jit(make(stored), mode)
    for i, n in enumerate((2, 3, 4, 5, 6)):
        (x,) = _args([(2, n)], mode, False, i)
        torch.testing.assert_close(jf(x), f(x.clone()))
    assert stored == eager_stored and all(type(int(s)) is int for s in stored)
    assert repr(stored) == repr(eager_stored)
    assert torch.zeros(stored[-1]).shape == (6,) and sum(stored) + 1 == sum(eager_stored) + 1


# ---- bounds computed from sizes that cross zero -----------------------------------------------------


def _slice_from_t_minus_3(x):
    return x[:, x.shape[1] - 3:] * 2


def _slice_to_t_minus_3(x):
    return x[:, 1:x.shape[1] - 3] * 2


def _index_t_minus_3(x):
    return x[:, x.shape[1] - 3] * 2


def _narrow_from_t_minus_3(x):
    return x.narrow(1, x.shape[1] - 3, 1) * 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [_slice_from_t_minus_3, _slice_to_t_minus_3, _index_t_minus_3, _narrow_from_t_minus_3])
def test_bounds_computed_from_sizes_that_turn_negative(fn, mode):
    # x[:, T - 3:] traced at T >= 3 served T = 2 (a bound of -1, the last column in eager) with the
    # length T - (T - 3) = 3: the backward padded with a negative size.
    _check(fn, [[(2, 4)], [(2, 6)], [(2, 9)], [(2, 2)], [(2, 5)], [(3, 2)]], mode)


# ---- Python's int operations on sizes ----------------------------------------------------------------

_INT_OPS = {
    "divmod": lambda n: sum(divmod(n, 3)), "and": lambda n: n & 3, "rand": lambda n: 7 & n, "or": lambda n: n | 1,
    "xor": lambda n: n ^ 1, "rshift": lambda n: n >> 1, "lshift": lambda n: n << 1, "rlshift": lambda n: 1 << n,
    "invert": lambda n: ~n, "rpow": lambda n: 2 ** n, "bit_length": lambda n: n.bit_length(),
    "str": lambda n: int(str(n)), "times a bool": lambda n: n * True + (n > 2),
    "power of two": lambda n: int(n & (n - 1) == 0), "floordiv": lambda n: -n // 4 + n // -2 + n % -3,
}


@pytest.mark.parametrize("mode", ["symbolic values", "mark_dynamic"])
@pytest.mark.parametrize("name", list(_INT_OPS))
def test_python_int_operations_on_sizes(name, mode):
    # Sizes are SymInts while a program is traced with symbols: `n & 3`, `divmod(n, 8)`, `2 ** n`,
    # `n.bit_length()` raised TypeError or AttributeError, and str(n) was "SymInt(s0, hint=4)".
    op = _INT_OPS[name]

    def fn(x):
        return x * op(x.shape[1])

    _check(fn, [[(2, n)] for n in (2, 3, 4, 5, 8, 9)], mode, grad=False)


# ---- calls that leave their input as it is at the traced size -------------------------------------


@pytest.mark.parametrize("mode", ["mark_dynamic"])
@pytest.mark.parametrize("fn", [
    lambda x: x.roll(x.shape[1] - 3, 1) * 2,
    lambda x: x.narrow(1, x.shape[1] - 3, 3) * 2,
    lambda x: x[:, x.shape[1] - 3:x.shape[1]] * 2,
    lambda x: x[:, :1].expand(-1, x.shape[1] - 2) * 2,
    lambda x: x.view(x.shape[0], x.shape[1]) * 2,
], ids=["roll", "narrow", "slice", "expand", "view"])
@pytest.mark.parametrize("grad", [False, True])
def test_a_call_that_is_a_no_op_at_the_traced_size_only(fn, mode, grad):
    # Traced at T = 3, x.roll(T - 3) is x itself: the call was dropped from the trace, which then
    # served T = 5 and 7 returning x unrolled (narrow(x, 1, T - 3, 3), x[:, T-3:T] and
    # x[:, :1].expand(-1, T - 2) returned all of x, or one column).
    _check(fn, [[(3, 3)], [(5, 5)], [(7, 7)], [(4, 4)]], mode, grad)
