"""Seeded random straight-line PyTorch programs for the differential fuzzer.

`generate(seed)` returns a Program: the Python source of `make_inputs()` and `prog(...)`, valid
as a standalone file. Each statement is checked eagerly while the program is built (tiny real
tensors), so shapes and dtypes never need a table; a statement that eager rejects is kept only
sometimes, as the last one, to compare error types.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random

import torch
import torch.nn.functional as F  # noqa: F401  (used by generated code)

FLOATS = [torch.float32, torch.float32, torch.float32, torch.float64, torch.bfloat16]
DTYPES = FLOATS + [torch.int64, torch.int32, torch.bool]
DIMS = [0, 1, 1, 2, 3, 3, 4, 5]

# Ops as templates: {0}, {1}, ... are operands (tensors), {d} a dim of operand 0, {s} a scalar.
UNARY = [
    "torch.abs({0})", "torch.neg({0})", "torch.exp({0})", "torch.log({0})", "torch.sin({0})",
    "torch.cos({0})", "torch.tanh({0})", "torch.sigmoid({0})", "torch.relu({0})", "torch.sqrt({0})",
    "torch.rsqrt({0})", "torch.floor({0})", "torch.ceil({0})", "torch.round({0})", "torch.trunc({0})",
    "torch.sign({0})", "torch.erf({0})", "torch.expm1({0})", "torch.log1p({0})", "torch.reciprocal({0})",
    "F.gelu({0})", "F.silu({0})", "F.softplus({0})", "torch.square({0})", "torch.logical_not({0})",
    "torch.isnan({0})", "torch.isfinite({0})", "torch.nan_to_num({0})", "{0}.float()", "{0}.to(torch.float64)",
    "{0}.to(torch.int64)", "{0}.bool()", "{0}.to(torch.bfloat16)", "torch.clamp({0}, min={s})",
    "torch.clamp({0}, {s}, {s2})", "F.leaky_relu({0})", "torch.atan({0})", "torch.asin({0})",
    "torch.sinh({0})", "torch.log2({0})", "torch.bitwise_not({0})", "F.hardtanh({0})", "torch.frac({0})",
]
BINARY = [
    "torch.add({0}, {1})", "torch.sub({0}, {1})", "torch.mul({0}, {1})", "torch.div({0}, {1})",
    "{0} + {1}", "{0} - {1}", "{0} * {1}", "{0} / {1}", "{0} ** {1}", "torch.pow({0}, {1})",
    "torch.maximum({0}, {1})", "torch.minimum({0}, {1})", "torch.atan2({0}, {1})",
    "torch.remainder({0}, {1})", "torch.fmod({0}, {1})", "torch.floor_divide({0}, {1})",
    "{0} // {1}", "{0} % {1}", "torch.eq({0}, {1})", "torch.lt({0}, {1})", "torch.ge({0}, {1})",
    "torch.where({0} > 0, {0}, {1})", "torch.logical_and({0}, {1})", "torch.bitwise_and({0}, {1})",
    "torch.bitwise_or({0}, {1})", "torch.bitwise_xor({0}, {1})", "torch.copysign({0}, {1})",
    "torch.add({0}, {1}, alpha={s})", "torch.lerp({0}, {1}, 0.3)", "torch.hypot({0}, {1})",
]
SCALAR = ["{0} + {s}", "{0} * {s}", "{0} - {s}", "{0} / {s}", "{s} - {0}", "{s} / {0}", "{0} ** 2",
          "{0} % {s}", "{0} // {s}", "torch.pow({0}, {s})", "torch.clamp({0}, max={s})", "{0} > {s}"]
REDUCTION = [
    "torch.sum({0})", "torch.sum({0}, {d})", "torch.sum({0}, {d}, keepdim=True)", "torch.mean({0})",
    "torch.mean({0}, {d})", "torch.amax({0}, {d})", "torch.amin({0}, {d})", "torch.var({0}, {d})",
    "torch.std({0}, {d})", "torch.std({0}, {d}, correction=0)", "torch.var({0}, {d}, keepdim=True)",
    "torch.softmax({0}, {d})", "torch.log_softmax({0}, {d})", "torch.max({0}, {d}).values",
    "torch.min({0}, {d})[1]", "torch.argmax({0}, {d})", "torch.prod({0}, {d})", "torch.cumsum({0}, {d})",
    "torch.any({0}, {d})", "torch.all({0})", "torch.logsumexp({0}, {d})", "torch.norm({0})",
    "torch.max({0})", "torch.var_mean({0}, {d})[0]",
]
SHAPE = [
    "{0}.t()", "{0}.transpose(0, {d})", "{0}.reshape(-1)", "{0}.flatten()", "{0}.unsqueeze({d})",
    "{0}.squeeze()", "{0}.squeeze({d})", "{0}.permute(*reversed(range({0}.ndim)))", "{0}.contiguous()",
    "{0}[..., ::2]", "{0}[1:]", "{0}.narrow({d}, 0, 1)", "torch.cat([{0}, {0}], {d})",
    "torch.stack([{0}, {0}], {d})", "{0}.expand(2, *{0}.shape)", "{0}.flip({d})", "torch.cat([{0}, {1}])",
    "{0}.view(-1)", "{0}.mT", "{0}.split(1, {d})[0]", "{0}.chunk(2)[0]", "{0}.repeat(2, 1)",
    "torch.tril({0})", "{0}.clone()", "{0}.unbind({d})[0]",
]
MATMUL = ["torch.matmul({0}, {1})", "{0} @ {1}", "torch.matmul({0}, {0}.mT)", "F.linear({0}, {1})",
          "F.layer_norm({0}, {0}.shape[-1:])", "F.normalize({0}, dim={d})", "F.mse_loss({0}, {1})",
          "F.embedding({1}, {0})", "torch.index_select({0}, {d}, {1})", "F.rms_norm({0}, {0}.shape[-1:])",
          "F.cross_entropy({0}, {1})", "torch.bmm({0}, {1})"]
KINDS = [(UNARY, 5), (BINARY, 5), (SCALAR, 3), (REDUCTION, 3), (SHAPE, 3), (MATMUL, 1)]
SCALARS = ["2", "0.5", "-1.5", "3", "0", "-2", "1e-3", "float('inf')", "float('nan')", "True", "1e4"]


@dataclasses.dataclass
class Program:
    seed: int
    inputs: list  # (name, construction expression)
    body: list  # (target, expression), or (None, statement)
    outputs: list  # names returned
    # Containers the body reads (name, literal): globals that make_inputs() resets in place, and
    # the statements of change(), which the fuzzer runs before the second call.
    containers: list = dataclasses.field(default_factory=list)
    change: list = dataclasses.field(default_factory=list)

    def source(self, body=None, outputs=None) -> str:
        body = self.body if body is None else body
        outputs = self.outputs if outputs is None else outputs
        names = [n for n, _ in self.inputs]
        lines = ["import torch", "import torch.nn.functional as F", ""]
        lines += [f"{n} = {lit}" for n, lit in self.containers]
        if self.change:
            lines += ["", "", "def change():"] + [f"    {c}" for c in self.change]
        lines += ["", "", "def make_inputs():", f"    g = torch.Generator().manual_seed({self.seed})"]
        for n, lit in self.containers:  # in place: the program keeps reading the same objects
            lines += [f"    {n}.clear()", f"    {n}.update({lit})"] if lit.startswith("{") else [f"    {n}[:] = {lit}"]
        for n, e in self.inputs:
            lines.append(f"    {n} = {e}")
        lines += [f"    return [{', '.join(names)}]", "", "", f"def prog({', '.join(names)}):"]
        for t, e in body:
            lines.append(f"    {t} = {e}" if t is not None else f"    {e}")  # None: a statement (t[0] = v)
        ret = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ",)"
        lines.append(f"    return {ret}")
        return "\n".join(lines) + "\n"


def _shape(rng: random.Random, rank=None) -> list[int]:
    rank = rng.choice([0, 1, 2, 2, 3, 3, 4]) if rank is None else rank
    return [rng.choice(DIMS) for _ in range(rank)]


def _input_expr(rng: random.Random, shape, dtype) -> str:
    dt = str(dtype)
    if dtype == torch.bool:
        base = f"torch.randint(0, 2, {tuple(shape)}, generator=g).bool()"
    elif not dtype.is_floating_point:
        base = f"torch.randint(-6, 7, {tuple(shape)}, generator=g, dtype={dt})"
    else:
        scale = rng.choice(["", " * 3", " * 100", " + 2"])
        base = f"(torch.randn({tuple(shape)}, generator=g, dtype=torch.float64){scale}).to({dt})"
        if rng.random() < 0.15 and shape:
            special = rng.choice(["float('inf')", "-float('inf')", "float('nan')", "0.0"])
            base = f"{base}.index_fill({len(shape) - 1}, torch.tensor([0]), {special})" if shape[-1] else base
    if len(shape) >= 2 and rng.random() < 0.25:
        # Non-contiguous: built transposed, then transposed back.
        t = list(shape)
        t[-1], t[-2] = t[-2], t[-1]
        return _input_expr(rng, t, dtype) + ".transpose(-1, -2)"
    if shape and rng.random() < 0.1:
        t = list(shape)
        t[-1] *= 2
        return _input_expr(rng, t, dtype) + "[..., ::2]"
    return base


def _eval(expr: str, env: dict):
    return eval(expr, {"torch": torch, "F": F, "math": math}, env)  # noqa: S307 - generated code


def generate(seed: int, max_steps: int = 6, families: bool = True) -> Program:
    """The program of a seed: one of FAMILIES' for their share of the seeds, else a straight-line
    program (`families=False`: the straight-line program of every seed, as before the families)."""
    family = _family(seed) if families else None
    if family is not None:
        return family(seed)
    rng = random.Random(seed)
    n_inputs = rng.choice([1, 2, 2, 3])
    base = _shape(rng)
    inputs = []
    for i in range(n_inputs):
        shape = list(base)
        r = rng.random()
        if r < 0.3 and shape:  # broadcasting: drop leading dims or set some to 1
            shape = shape[rng.randrange(len(shape) + 1):]
        elif r < 0.5:
            shape = [1 if rng.random() < 0.4 else d for d in shape]
        elif r < 0.6:
            shape = _shape(rng)
        dtype = rng.choice(DTYPES) if i else rng.choice(FLOATS + [torch.int64])
        name = "abc"[i]
        inputs.append((name, _input_expr(rng, shape, dtype)))
    # Inputs are built in order from one generator, as make_inputs() does.
    ns = {"g": torch.Generator().manual_seed(seed)}
    for name, expr in inputs:
        ns[name] = _eval(expr, ns)
    env = {n: ns[n] for n, _ in inputs}
    body, names = [], list(env)
    kinds, weights = zip(*KINDS)
    steps = rng.randint(1, max_steps)
    for step in range(steps):
        for _attempt in range(30):
            table = rng.choices(kinds, weights)[0]
            template = rng.choice(table)
            ops = [rng.choice(names[-3:] if rng.random() < 0.7 else names) for _ in range(2)]
            x = env[ops[0]]
            if not isinstance(x, torch.Tensor):
                continue
            d = rng.randrange(-x.ndim, x.ndim) if x.ndim else 0
            expr = template.format(*ops, d=d, s=rng.choice(SCALARS), s2=rng.choice(SCALARS))
            try:
                val = _eval(expr, dict(env))
            except Exception:  # noqa: BLE001 - eager rejects it: sometimes kept, as the last line
                if step == steps - 1 and rng.random() < 0.1:
                    t = f"t{step}"
                    body.append((t, expr))
                    return Program(seed, inputs, body, [t])
                continue
            if not isinstance(val, torch.Tensor) or val.numel() > 4096:
                continue
            t = f"t{step}"
            env[t] = val
            names.append(t)
            body.append((t, expr))
            break
    if not body:
        body.append(("t0", f"{names[0]} + 1"))
        names.append("t0")
    outs = [body[-1][0]]
    extra = [t for t, _ in body[:-1] if rng.random() < 0.3]
    return Program(seed, inputs, body, outs + extra[:2])


# ---- program families ---------------------------------------------------------------------------
# Besides the straight-line programs, a share of the seeds goes to each family below, chosen by a
# hash of the seed (not by `generate`'s own draws), so the other seeds keep their programs.


def _family(seed: int):
    only = os.environ.get("THUNDER_FUZZ_FAMILY")  # fuzz.py --family: every seed to that family
    if only:
        return next(fn for fn, _ in FAMILIES if fn.__name__ == only)
    r = random.Random(f"family {seed}").random()
    for fn, share in FAMILIES:
        if r < share:
            return fn
        r -= share
    return None


# Multi-output ops with one output used: {0} the input, {d} a dim, {c} a correction. The unused
# outputs (a NaN variance over a dim of length 1, indices) must give the used one no gradient.
ONE_OUTPUT = [
    "torch.var_mean({0}, {d}, correction={c})[1]", "torch.var_mean({0}, {d}, correction={c})[0]",
    "torch.var_mean({0}, {d}, correction={c}, keepdim=True)[1]", "torch.std_mean({0}, {d}, correction={c})[1]",
    "torch.std_mean({0}, {d}, correction={c})[0]", "torch.var_mean({0}, correction={c})[1]",
    "torch.max({0}, {d})[0]", "torch.max({0}, {d}).indices", "torch.min({0}, {d}).values",
    "torch.sort({0}, {d})[0]", "torch.sort({0}, {d}, descending=True).values", "torch.topk({0}, 1, {d})[0]",
    "torch.aminmax({0}, dim={d}).min", "torch.aminmax({0}, dim={d}).max", "torch.median({0}, {d}).values",
    "torch.cummax({0}, {d})[0]", "torch.kthvalue({0}, 1, {d})[0]",
    "torch.native_layer_norm({0}, {0}.shape[-1:], None, None, 1e-5)[0]",
    "torch.native_layer_norm({0}, {0}.shape[-1:], None, None, 1e-5)[1]",
    "torch.native_layer_norm({0}, {0}.shape[-1:], None, None, 1e-5)[2]",
    "F.batch_norm({0}, None, None, training=True)",
]
# What the program does with the output: {0} the output, {1} the input.
ONE_OUTPUT_AFTER = [
    "{0}", "{0} * 2", "torch.exp({0})", "{0}.sum()", "{0}.reshape(-1)[:1]", "{0}[..., :1]",
    "torch.gather({0}.reshape(-1), 0, torch.zeros(1, dtype=torch.int64))", "{0}.unsqueeze(0) + 1",
]


def one_output_program(seed: int) -> Program:
    """A program that uses one output of a multi-output op (then maybe an op after it)."""
    rng = random.Random(seed)
    for _ in range(100):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.choice([1, 2, 3, 3]))]
        dtype = rng.choice([torch.float32, torch.float32, torch.float64])
        inputs = [("a", _input_expr(rng, shape, dtype))]
        ns = {"g": torch.Generator().manual_seed(seed)}
        env = {"a": _eval(inputs[0][1], ns)}
        d = rng.randrange(-len(shape), len(shape))
        op = rng.choice(ONE_OUTPUT).format("a", d=d, c=rng.choice([0, 1, 1, 2]))
        after = rng.choice(ONE_OUTPUT_AFTER).format("t0", "a")
        try:
            env["t0"] = _eval(op, dict(env))
            out = _eval(after, dict(env))
        except Exception:  # noqa: BLE001 - eager rejects it (a batch norm of one value): draw again
            continue
        if not isinstance(out, torch.Tensor):
            continue
        return Program(seed, inputs, [("t0", op), ("t1", after)], ["t1"])
    return Program(seed, inputs, [("t0", "a + 1")], ["t0"])


# Reads of the containers below: {x} a tensor, {y} another.
CONTAINER_READS = [
    "{x} * CFG['scale']", "{x} + CFG['nested']['shift']", "{x} * LST[0] + LST[-1]", "{x} * len(LST)",
    "{x} + sum(LST)", "{x} * CFG.get('extra', 1.5)", "({x} if 'extra' in CFG else {y})",
    "({x}.relu() if CFG['flag'] else {x}.sigmoid())", "{x} * CFG['pair'][1]", "{x}.clamp(max=CFG['scale'])",
    "{x} + LST[1] * CFG['nested']['shift']",
]
CONTAINER_CHANGES = [
    "CFG['scale'] = -0.5", "CFG['nested']['shift'] = 4.0", "CFG['nested'] = {'shift': -2.0}",
    "LST[0] = 3.0", "LST.append(5.0)", "LST.pop()", "CFG['extra'] = 2.5", "CFG['flag'] = False",
    "LST[1] = -1.0", "LST.insert(0, 0.25)", "CFG['pair'] = (1.0, -3.0)",
]


def container_program(seed: int) -> Program:
    """A program that reads a dict (holding a dict and a tuple) and a list held in globals;
    change() updates them in place before the second call, which must compute with the new
    values."""
    rng = random.Random(seed)
    shape = _shape(rng, rng.choice([1, 2]))
    inputs = [("a", _input_expr(rng, shape, rng.choice([torch.float32, torch.float64])))]
    names = ["a"]
    body = []
    for i in range(rng.randint(1, 4)):
        t = f"t{i}"
        body.append((t, rng.choice(CONTAINER_READS).format(x=rng.choice(names), y=rng.choice(names))))
        names.append(t)
    containers = [("CFG", "{'scale': 2.0, 'nested': {'shift': 1.0}, 'flag': True, 'pair': (1.0, 2.0)}"),
                  ("LST", "[1.5, -0.5, 2.0]")]
    change = rng.sample(CONTAINER_CHANGES, rng.choice([1, 1, 2]))
    return Program(seed, inputs, body, [names[-1]], containers, change)


# In-place updates: {0} the tensor updated, {v} a tensor of its shape (or broadcastable to it).
INPLACE = [
    "{0}.add_(1)", "{0}.add_({v})", "{0}.mul_(2)", "{0}.sub_({v}, alpha=0.5)", "{0}.div_(4)", "{0}.relu_()",
    "{0}.clamp_(min=-0.5)", "{0}.clamp_(-1.0, 1.0)", "{0}.sigmoid_()", "{0}.tanh_()", "{0}.exp_()",
    "{0}.neg_()", "{0}.abs_()", "{0}.masked_fill_({0} > 0, 0.5)", "{0}.copy_({v})", "{0}.zero_()",
    "{0}.fill_(1.5)", "F.relu({0}, inplace=True)", "F.leaky_relu({0}, 0.1, inplace=True)",
    "F.hardtanh({0}, inplace=True)", "F.silu({0}, inplace=True)", "{0}.addcmul_({v}, {v}, value=0.5)",
    "{0}.lerp_({v}, 0.25)", "{0}.square_()",
]
# Updates written as statements or into a part of the tensor (needs ndim >= 1 where it indexes).
INPLACE_STATEMENTS = ["{0}[0] = 2.0", "{0}[..., :1] = -1.0", "{0}[0].mul_(3)", "{0}[..., -1:].add_(1)",
                      "{0} += 1", "{0} *= {v}"]
# Ops that return their input itself, a view of it, or (controls) a new tensor as eager decides:
# {0} the tensor, {x} another tensor of its shape and dtype.
ALIASING = [
    "{0}.contiguous()", "{0}.float()", "{0}.to({0}.dtype)", "{0}.to(torch.float32)", "{0}.type_as({x})",
    "{0}.reshape({0}.shape)", "{0}.reshape(-1)", "{0}.view_as({x})", "{0}.view({0}.shape)", "{0}.expand_as({x})",
    "{0}.detach()", "{0}[0]", "{0}[...]", "{0}[:]", "{0}.flatten()", "{0}.squeeze()", "{0}.unsqueeze(0)",
    "{0}.transpose(0, -1)", "{0}.narrow(-1, 0, 1)", "{0}.split(1)[0]", "{0}.chunk(2, -1)[-1]", "{0}.clone()",
    "{0}.double()", "{0}.unbind()[0]", "{0}.mT", "{0}.permute(*reversed(range({0}.ndim)))",
]
# How the updated tensor is made: {a} the input.
INPLACE_BASES = ["{a} * 1", "{a} + 0", "{a}.clone()", "{a}.exp()", "({a} * 2)[..., :2]", "({a} * 1).mT",
                 "{a}.sin()", "({a} + 1).contiguous()"]


def inplace_alias_program(seed: int) -> Program:
    """In-place updates before and after ops that alias their input (contiguous, to the same
    dtype, reshape to the same shape, detach, view_as, expand_as, x[k]...), the aliases and the
    updated tensor returned: each must show every update made to the storage it shares, as in
    eager. Sometimes an alias is updated instead of the tensor, or the input itself."""
    rng = random.Random(seed)
    for _ in range(100):
        shape = [rng.choice([1, 2, 3, 3, 4, 5]) for _ in range(rng.choice([1, 2, 2, 3]))]
        dtype = rng.choice([torch.float32, torch.float32, torch.float64])
        inputs = [("a", _input_expr(rng, shape, dtype)), ("b", _input_expr(rng, shape, dtype))]
        ns = {"g": torch.Generator().manual_seed(seed)}
        env = {}
        for n, e in inputs:
            env[n] = ns[n] = _eval(e, ns)
        base = rng.choice(INPLACE_BASES + ["{a}"]).format(a="a")
        body = [("t0", base)]
        k = 1
        tensors = ["t0"]
        for step in range(rng.randint(2, 5)):
            if rng.random() < 0.5:  # an alias of one of the tensors so far
                op = rng.choice(ALIASING).format(rng.choice(tensors), x=rng.choice(tensors))
                target = f"t{k}"
                k += 1
                stmt = (target, op)
                tensors.append(target)
            else:  # an update of one of them (mostly the first)
                t = "t0" if rng.random() < 0.6 else rng.choice(tensors)
                v = rng.choice(["b", "t0"] + tensors)
                if rng.random() < 0.25:
                    stmt = (None, rng.choice(INPLACE_STATEMENTS).format(t, v=v))
                else:
                    stmt = (f"t{k}", rng.choice(INPLACE).format(t, v=v))
                    k += 1
            try:
                trial = dict(env)
                exec(compile("\n".join(f"{s[0]} = {s[1]}" if s[0] else s[1] for s in body + [stmt]), "<g>", "exec"),
                     {"torch": torch, "F": F}, trial)
            except Exception:  # noqa: BLE001 - eager rejects it (a shape, an expand's overlap): skip
                continue
            body.append(stmt)
        try:
            final = dict(env)
            exec(compile("\n".join(f"{s[0]} = {s[1]}" if s[0] else s[1] for s in body), "<g>", "exec"),
                 {"torch": torch, "F": F}, final)
        except Exception:  # noqa: BLE001
            continue
        outs = [t for t in tensors if isinstance(final.get(t), torch.Tensor)]
        outs = rng.sample(outs, min(len(outs), rng.choice([1, 2, 3])))
        if base == "a" and rng.random() < 0.5:
            outs.append("a")  # the input, updated in place, returned
        if not outs or sum(final[t].numel() for t in outs if t != "a") > 4096:
            continue
        return Program(seed, inputs, body, outs)
    return Program(seed, inputs, [("t0", "a + 1")], ["t0"])


# Models assembled from library blocks, written with torch.nn.functional so that the parameters are
# inputs (their gradients are compared, and the float64 rerun converts them): conv-BatchNorm-act
# with in-place activations, depthwise convolutions, splits and chunks, cats, residual adds,
# channel shuffles, pooling, and a linear head. BatchNorm runs in training mode with running
# statistics made in the program and returned (their in-place update is compared too).
ACTS = ["F.relu({0}, inplace=True)", "F.relu({0})", "F.leaky_relu({0}, 0.1, inplace=True)",
        "F.hardtanh({0}, 0.0, 6.0, inplace=True)", "F.silu({0}, inplace=True)", "F.gelu({0})",
        "{0}.relu_()", "F.hardswish({0}, inplace=True)", "{0}"]


class _Blocks:
    """Builds the statements of a block model, tracking each tensor's channel count."""

    def __init__(self, rng, dtype):
        self.rng, self.dtype = rng, dtype
        self.inputs, self.body, self.stats, self.k = [], [], [], 0

    def tmp(self):
        self.k += 1
        return f"t{self.k}"

    def param(self, shape, scale=None):
        name = f"w{len(self.inputs)}"
        fan = math.prod(shape[1:]) if len(shape) > 1 else 1
        s = scale if scale is not None else 1 / math.sqrt(fan)
        self.inputs.append((name, f"(torch.randn({tuple(shape)}, generator=g, dtype=torch.float64) * {s:.4g})"
                                  f".to({self.dtype})"))
        return name

    def emit(self, expr):
        t = self.tmp()
        self.body.append((t, expr))
        return t

    def conv_bn_act(self, x, cin, cout, k=1, stride=1, groups=1, act=True):
        rng = self.rng
        w = self.param([cout, cin // groups, k, k])
        bias = self.param([cout], 0.1) if rng.random() < 0.3 else "None"
        y = self.emit(f"F.conv2d({x}, {w}, {bias}, {stride}, {k // 2}, 1, {groups})")
        if rng.random() < 0.85:
            gamma = self.param([cout], 1.0) if rng.random() < 0.5 else "None"
            beta = self.param([cout], 0.1) if gamma != "None" else "None"
            if rng.random() < 0.5:
                rm, rv = f"rm{len(self.stats)}", f"rv{len(self.stats)}"
                self.body.append((rm, f"torch.zeros({cout}, dtype={self.dtype})"))
                self.body.append((rv, f"torch.ones({cout}, dtype={self.dtype})"))
                self.stats += [rm, rv]
            else:
                rm = rv = "None"
            y = self.emit(f"F.batch_norm({y}, {rm}, {rv}, {gamma}, {beta}, True, 0.1, 1e-5)")
        if act:
            y = self.emit(rng.choice(ACTS).format(y))
        return y

    def block(self, x, c):
        """One block on x (c channels): (output, its channels)."""
        rng = self.rng
        kind = rng.choice(["residual", "shuffle", "split_cat", "bottleneck", "dense", "contiguous", "pool", "se"])
        if kind == "residual":  # ResNet basic block
            y = self.conv_bn_act(x, c, c, 3)
            y = self.conv_bn_act(y, c, c, 3, act=False)
            y = self.emit(rng.choice([f"{y} + {x}", f"{y}.add_({x})", f"torch.add({y}, {x})"]))
            return self.emit(rng.choice(ACTS).format(y)), c
        if kind == "shuffle":  # ShuffleNetV2, stride 1: chunk, a branch, cat, channel shuffle
            x1, x2 = self.emit(f"{x}.chunk(2, dim=1)[0]"), self.emit(f"{x}.chunk(2, dim=1)[1]")
            h = c // 2
            y = self.conv_bn_act(x2, h, h)
            y = self.conv_bn_act(y, h, h, 3, groups=h, act=False)
            y = self.conv_bn_act(y, h, h)
            y = self.emit(f"torch.cat(({x1}, {y}), dim=1)")
            return self.emit(f"{y}.view({y}.shape[0], 2, {h}, *{y}.shape[2:]).transpose(1, 2)"
                             f".contiguous().view({y}.shape[0], {c}, *{y}.shape[2:])"), c
        if kind == "split_cat":  # CSP-like: split, one part through convs, cat, a 1x1 conv
            x1, x2 = self.emit(f"{x}.split({c // 2}, dim=1)[0]"), self.emit(f"{x}.split({c // 2}, dim=1)[1]")
            y = self.conv_bn_act(x2, c - c // 2, c - c // 2, 3)
            y = self.emit(f"torch.cat([{y}, {x1}], 1)")
            return self.conv_bn_act(y, c, c), c
        if kind == "bottleneck":  # 1x1 down, 3x3, 1x1 up, residual
            m = max(1, c // 2)
            y = self.conv_bn_act(x, c, m)
            y = self.conv_bn_act(y, m, m, 3)
            y = self.conv_bn_act(y, m, c, act=False)
            y = self.emit(f"{y} + {x}")
            return self.emit(rng.choice(ACTS).format(y)), c
        if kind == "dense":  # DenseNet: cat the input with new features
            y = self.conv_bn_act(x, c, 2, 3)
            return self.emit(f"torch.cat([{x}, {y}], 1)"), c + 2
        if kind == "contiguous":  # timm's CSP blocks end in act(bn(conv(x))).contiguous()
            y = self.conv_bn_act(x, c, c, 3)
            return self.emit(rng.choice([f"{y}.contiguous()", f"{y}.float()", f"{y}.reshape({y}.shape)"])), c
        if kind == "pool":
            return self.emit(rng.choice([f"F.max_pool2d({x}, 2, 1)", f"F.avg_pool2d({x}, 3, 1, 1)",
                                         f"F.adaptive_avg_pool2d({x}, 2)"])), c
        # squeeze-and-excitation
        s = self.emit(f"{x}.mean((2, 3), keepdim=True)")
        w1, w2 = self.param([max(1, c // 2), c, 1, 1]), self.param([c, max(1, c // 2), 1, 1])
        s = self.emit(f"F.conv2d({s}, {w1}).relu_()")
        s = self.emit(f"torch.sigmoid(F.conv2d({s}, {w2}))")
        return self.emit(rng.choice([f"{x} * {s}", f"{x}.mul_({s})"])), c


def blocks_program(seed: int) -> Program:
    """A small CNN assembled from the blocks of _Blocks, in training mode: a stem, one to three
    blocks, a head (global pooling, a linear layer), and the BatchNorm running statistics."""
    rng = random.Random(seed)
    dtype = rng.choice([torch.float32, torch.float32, torch.float32, torch.float64])
    for _ in range(20):
        bl = _Blocks(rng, dtype)
        n, cin, hw = rng.choice([2, 3]), rng.choice([1, 3]), rng.choice([4, 5, 6, 8])
        c = rng.choice([2, 4, 6])
        x = "x"
        bl.inputs.append(("x", f"(torch.randn({(n, cin, hw, hw)}, generator=g, dtype=torch.float64)"
                               f"{rng.choice(['', ' + 4', ' * 3'])}).to({dtype})"))
        y = bl.conv_bn_act(x, cin, c, 3, stride=rng.choice([1, 1, 2]))
        for _b in range(rng.randint(1, 3)):
            y, c = bl.block(y, c)
        outs = []
        if rng.random() < 0.7:
            classes = rng.choice([3, 5])
            w = bl.param([classes, c])
            y = bl.emit(f"F.linear({y}.mean((2, 3)), {w})")
            if rng.random() < 0.5:
                y = bl.emit(f"F.cross_entropy({y}, torch.arange({n}) % {classes})")
        outs = [y] + bl.stats[:2 * rng.choice([0, 1, 2])]
        program = Program(seed, bl.inputs, bl.body, outs)
        try:
            ns: dict = {}
            exec(compile(program.source(), "<g>", "exec"), ns)  # noqa: S102 - generated program
            ns["prog"](*ns["make_inputs"]())
        except Exception:  # noqa: BLE001 - a shape the blocks do not take: draw again
            continue
        return program
    return Program(seed, [("a", "torch.ones(2)")], [("t0", "a + 1")], ["t0"])


FAMILIES = [(one_output_program, 0.05), (container_program, 0.05), (inplace_alias_program, 0.05),
            (blocks_program, 0.05)]
