"""Seeded random straight-line PyTorch programs for the differential fuzzer.

`generate(seed)` returns a Program: the Python source of `make_inputs()` and `prog(...)`, valid
as a standalone file. Each statement is checked eagerly while the program is built (tiny real
tensors), so shapes and dtypes never need a table; a statement that eager rejects is kept only
sometimes, as the last one, to compare error types.
"""

from __future__ import annotations

import dataclasses
import math
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
    body: list  # (target, expression)
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
            lines.append(f"    {t} = {e}")
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


FAMILIES = [(one_output_program, 0.05), (container_program, 0.05)]
