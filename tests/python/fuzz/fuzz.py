"""The differential fuzzer: random programs run eagerly and under thunder.jit, compared.

    python tests/python/fuzz/fuzz.py --start 0 --count 200 [--executors default,fuser] [--jobs 2]

Each program (programs.generate(seed)) runs in a worker subprocess, with every executor set:
forward, a second (cached) call on fresh inputs, and backward with random cotangents, each
compared with eager; where they differ beyond the dtype's tolerance, with a float64 reference
(eager's own error in float32 can be the larger). A worker that dies (a signal, an abort) or
stops answering (a hang) costs the program it was running a counted failure, and a new worker
goes on from the next seed. Each failure prints a minimal standalone repro (the program reduced
to the statements the failure needs) and is saved under --out.

Outcomes per program and executor set: ok; eager_error (both raise, same type); clear_error
(thunder rejects a program eager runs, with a message naming the op); and failures: mismatch,
cached_mismatch, grad_mismatch, error_type (both raise, other types), accepted_invalid (eager
raises, thunder returns), unclear_error (thunder rejects without naming an op, or an internal
error), crash, hang.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES = {"mismatch", "cached_mismatch", "grad_mismatch", "error_type", "accepted_invalid",
            "unclear_error", "crash", "hang"}

# ---- in the worker ---------------------------------------------------------------------------


def _tolerance(dtype):
    import torch

    return {torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2), torch.float32: (1e-4, 1e-4),
            torch.float64: (1e-9, 1e-9)}.get(dtype, (0, 0))


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    return []


def _close(got, want, ref=None, floor=None) -> str | None:
    """None when `got` matches `want` (or is at least as close to the float64 `ref`); else why.
    `floor`: a dtype whose tolerance is the least used (a program that computes in bfloat16
    anywhere: eager's autograd formulas round their intermediates in the operands' dtypes, so
    even a float32 gradient carries bfloat16 rounding, which the float64 reference, running the
    program's own casts, repeats)."""
    import torch

    g, w = _tensors(got), _tensors(want)
    if len(g) != len(w):
        return f"{len(g)} tensors, eager {len(w)}"
    r = _tensors(ref) if ref is not None else [None] * len(w)
    for i, (a, b, c) in enumerate(zip(g, w, r)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {a.dtype}{list(a.shape)}, eager {b.dtype}{list(b.shape)}"
        if a.dtype.is_floating_point or a.dtype.is_complex:
            rtol, atol = _tolerance(a.dtype)
            if floor is not None:
                rtol, atol = max(rtol, _tolerance(floor)[0]), max(atol, _tolerance(floor)[1])
            if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                continue
            if c is not None and c.shape == a.shape:
                # eager's own rounding error can be the larger: compare both with float64
                a64, b64, c64 = a.double(), b.double(), c.double()
                same_nan = a64.isnan() == c64.isnan()
                # An infinite error stays infinite: thunder's inf where the reference is finite is
                # never accepted, and eager's is never taken as exact (seed 30649: eager's log of
                # a sigmoid flushed to 0 is -inf, thunder's -99.98, the float64 value -100).
                inf = float("inf")
                ea = (a64 - c64).abs().nan_to_num(0.0, inf, inf)
                eb = (b64 - c64).abs().nan_to_num(0.0, inf, inf)
                finite = c64.isfinite()
                inf_same = (a64 == c64) | finite | c64.isnan()
                if bool(same_nan.all()) and bool(inf_same.all()) and bool(
                        (ea <= 2 * eb + atol + rtol * c64.abs().nan_to_num(0.0, 0.0, 0.0)).all()):
                    continue
            diff = (a.double() - b.double()).abs()
            return f"output {i} ({a.dtype}{list(a.shape)}): max abs diff {diff.nan_to_num(float('inf')).max().item() if diff.numel() else 0}; thunder {a.flatten()[:6].tolist()} eager {b.flatten()[:6].tolist()}"
        elif not torch.equal(a, b):
            return f"output {i} ({a.dtype}{list(a.shape)}): thunder {a.flatten()[:6].tolist()} eager {b.flatten()[:6].tolist()}"
    return None


def _clear(e: BaseException) -> bool:
    msg = str(e)
    if "internal error" in msg.lower():
        return False
    return any(k in msg for k in ("ltorch.", "prims.", "thunder", "torch.", "clang.")) and len(msg) > 20


# The sign bit of a NaN is not specified (IEEE 754 leaves it to the implementation): eager's
# vectorized asin of bfloat16 makes a negative NaN where the fuser's makes a positive one, and
# copysign passes that bit on (seed 14472). Both runs read copysign's sign operand with NaN as +1.0,
# the one place a program's result shows the bit; everything else about copysign is compared.
_COPYSIGN = re.compile(r"torch\.copysign\((\w+), (\w+)\)")


def _nan_signs_unspecified(src: str) -> str:
    return _COPYSIGN.sub(r"torch.copysign(\1, torch.nan_to_num(\2, nan=1.0))", src)


def _load(src: str):
    src = _nan_signs_unspecified(src)
    ns: dict = {}
    exec(compile(src, "<fuzz program>", "exec"), ns)  # noqa: S102 - generated program
    return ns["prog"], ns["make_inputs"]


def _float64(inputs):
    return [x.double() if x.is_floating_point() else x for x in inputs]


def _grad_inputs(inputs):
    import torch

    return [x.detach().requires_grad_(True) if x.dtype in (torch.float32, torch.float64, torch.bfloat16) else x
            for x in inputs]


def check(src: str, executors, seed: int) -> tuple[str, str]:
    """Runs one program with one executor set: (outcome, detail)."""
    import torch
    import thunder

    prog, make_inputs = _load(src)
    floor = next((d for n, d in (("bfloat16", torch.bfloat16), ("float16", torch.float16)) if n in src), None)
    try:
        want = prog(*make_inputs())
        eager_err = None
    except Exception as e:  # noqa: BLE001
        want, eager_err = None, e
    jf = thunder.jit(prog, executors=executors)
    try:
        got = jf(*make_inputs())
    except Exception as e:  # noqa: BLE001
        if eager_err is not None:
            if isinstance(e, type(eager_err)) or isinstance(eager_err, type(e)):
                return "eager_error", ""
            return "error_type", f"thunder {type(e).__name__}: {str(e)[:300]} / eager {type(eager_err).__name__}: {str(eager_err)[:300]}"
        return ("clear_error" if _clear(e) else "unclear_error"), f"{type(e).__name__}: {str(e)[:400]}"
    if eager_err is not None:
        return "accepted_invalid", f"eager raised {type(eager_err).__name__}: {str(eager_err)[:300]}"
    ref = None
    why = _close(got, want)
    if why is not None:
        try:
            ref = prog(*_float64(make_inputs()))
        except Exception:  # noqa: BLE001
            ref = None
        why = _close(got, want, ref)
        if why is not None:
            return "mismatch", why
    got2 = jf(*make_inputs())
    why = _close(got2, want, ref)
    if why is not None:
        return "cached_mismatch", why
    # backward with random cotangents, where an output is differentiable
    inputs = _grad_inputs(make_inputs())
    diff_in = [x for x in inputs if x.requires_grad]
    if not diff_in:
        return "ok", ""
    try:
        outs_e = _tensors(prog(*inputs))
    except Exception:  # noqa: BLE001
        return "ok", ""
    pick = [i for i, o in enumerate(outs_e) if o.requires_grad and o.numel() > 0]
    if not pick:
        return "ok", ""
    gen = torch.Generator().manual_seed(seed)
    cots = [torch.randn(outs_e[i].shape, generator=gen, dtype=torch.float64).to(outs_e[i].dtype) for i in pick]
    try:
        ge = torch.autograd.grad([outs_e[i] for i in pick], diff_in, cots, allow_unused=True)
        eager_gerr = None
    except Exception as e:  # noqa: BLE001
        ge, eager_gerr = None, e
    inputs_t = _grad_inputs(make_inputs())
    diff_t = [x for x in inputs_t if x.requires_grad]
    try:
        outs_t = _tensors(jf(*inputs_t))
        gt = torch.autograd.grad([outs_t[i] for i in pick], diff_t, cots, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        if eager_gerr is not None:
            return "ok", ""
        return ("clear_error" if _clear(e) else "unclear_error"), f"backward {type(e).__name__}: {str(e)[:400]}"
    if eager_gerr is not None:
        return "ok", ""  # eager's autograd rejects it (a non-differentiable path); thunder's is its own
    zero = lambda g, x: torch.zeros_like(x) if g is None else g  # noqa: E731
    ge = [zero(g, x) for g, x in zip(ge, diff_in)]
    gt = [zero(g, x) for g, x in zip(gt, diff_t)]
    why = _close(gt, ge, floor=floor)
    if why is not None:
        inputs64 = _grad_inputs(_float64(make_inputs()))
        d64 = [x for x in inputs64 if x.requires_grad]
        try:
            o64 = _tensors(prog(*inputs64))
            g64 = torch.autograd.grad([o64[i] for i in pick], d64, [c.double() for c in cots], allow_unused=True)
            g64 = [zero(g, x) for g, x in zip(g64, d64)]
        except Exception:  # noqa: BLE001
            g64 = None
        why = _close(gt, ge, g64, floor=floor)
        if why is not None:
            return "grad_mismatch", why
    return "ok", ""


def minimize(program, executors, outcome: str) -> str:
    """The shortest prefix of the program, returning one value, with the same outcome; then the
    statements that value does not need are dropped."""
    import re

    for k in range(1, len(program.body) + 1):
        body = program.body[:k]
        src = program.source(body, [body[-1][0]])
        try:
            if check(src, executors, program.seed)[0] == outcome:
                break
        except Exception:  # noqa: BLE001
            continue
    else:
        return program.source()
    needed = {body[-1][0]}
    kept = []
    for t, e in reversed(body):
        if t in needed:
            kept.append((t, e))
            needed |= set(re.findall(r"\b(t\d+)\b", e))
    kept.reverse()
    src = program.source(kept, [kept[-1][0]])
    try:
        if check(src, executors, program.seed)[0] == outcome:
            return src
    except Exception:  # noqa: BLE001
        pass
    return program.source(body, [body[-1][0]])


def repro(src: str, executors) -> str:
    return (src + "\n\nimport thunder\n"
            f"eager = prog(*make_inputs())\n"
            f"jitted = thunder.jit(prog, executors={executors!r})(*make_inputs())\n"
            "print(eager)\nprint(jitted)\n")


def worker(executor_sets) -> None:
    """Reads seeds on stdin; for each, prints 'start <seed>' then one JSON line per executor set."""
    sys.path.insert(0, HERE)
    import warnings

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    import programs

    crash_seed = os.environ.get("THUNDER_FUZZ_TEST_CRASH_SEED")  # the harness's own test
    for line in sys.stdin:
        seed = int(line)
        print(f"start {seed}", flush=True)
        if crash_seed is not None and seed == int(crash_seed):
            print("exec default", flush=True)
            os.abort()
        program = programs.generate(seed)
        src = program.source()
        for name, ex in executor_sets:
            print(f"exec {name}", flush=True)
            try:
                outcome, detail = check(src, ex, seed)
            except Exception as e:  # noqa: BLE001 - a failure of the harness's own eager reruns
                outcome, detail = "ok", f"harness: {type(e).__name__}: {e}"
            rep = ""
            if outcome in FAILURES:
                try:
                    rep = repro(minimize(program, ex, outcome), ex)
                except Exception:  # noqa: BLE001
                    rep = repro(src, ex)
            print(json.dumps({"seed": seed, "executors": name, "outcome": outcome, "detail": detail,
                              "repro": rep}), flush=True)
        print("done", flush=True)


# ---- the driver ------------------------------------------------------------------------------

EXECUTOR_SETS = {"default": None, "fuser": ["fuser"], "torch": ["torch"]}


def _spawn(names: list[str]):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.Popen([sys.executable, __file__, "--worker", ",".join(names)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def run(seeds, names, timeout: float, jobs: int, out_dir: str | None, quiet: bool = False,
        budget: float | None = None, progress: float | None = None, recycle: int = 0):
    """Runs the seeds over `jobs` workers (no new seed after `budget` seconds; a summary line
    every `progress` seconds; a worker is replaced after `recycle` programs, 0: never); returns
    {executor set: Counter of outcomes} and the failures (dicts with seed, executors, outcome,
    detail, repro)."""
    import selectors

    started = time.time()
    last_progress = started

    counts = {n: collections.Counter() for n in names}
    failures = []
    pending = list(seeds)[::-1]
    sel = selectors.DefaultSelector()
    workers = []

    def record(r):
        counts[r["executors"]][r["outcome"]] += 1
        if r["outcome"] in FAILURES:
            failures.append(r)
            if not quiet:
                print(f"FAIL seed {r['seed']} [{r['executors']}] {r['outcome']}: {r['detail']}\n{r['repro']}",
                      flush=True)
            if out_dir:
                os.makedirs(out_dir, exist_ok=True)
                with open(os.path.join(out_dir, f"seed{r['seed']}_{r['executors']}_{r['outcome']}.py"), "w") as f:
                    f.write(f"# {r['outcome']}: {r['detail']}\n" + (r["repro"] or ""))

    def start():
        if not pending:
            return
        p = _spawn(names)
        w = {"p": p, "seed": None, "done": set(), "exec": None, "since": time.time(), "buf": b"", "ran": 0}
        sel.register(p.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        feed(w)

    def feed(w):
        if budget is not None and time.time() - started > budget:
            pending.clear()
        if pending and recycle and w["ran"] >= recycle:
            # this worker ends (its stdin closed) and a fresh one takes the next seed
            w["seed"] = None
            w["p"].stdin.close()
            start()
        elif pending:
            w["ran"] += 1
            w["seed"], w["done"], w["exec"], w["since"] = pending.pop(), set(), None, time.time()
            w["p"].stdin.write(f"{w['seed']}\n")
            w["p"].stdin.flush()
        else:
            w["seed"] = None
            w["p"].stdin.close()

    def lost(w, outcome):
        # the worker died or hung: the current executor set (else the next) failed
        seed = w["seed"]
        name = w["exec"] or next((n for n in names if n not in w["done"]), names[0])
        sys.path.insert(0, HERE)
        import programs

        rep = repro(programs.generate(seed).source(), EXECUTOR_SETS[name])
        rc = w["p"].poll()
        record({"seed": seed, "executors": name, "outcome": outcome,
                "detail": f"worker {'exit code ' + str(rc) if rc is not None else 'stopped answering'}",
                "repro": rep})
        for n in names:
            if n not in w["done"] and n != name:
                counts[n]["not_run"] += 1
        sel.unregister(w["p"].stdout)
        if w["p"].poll() is None:
            w["p"].kill()
        w["p"].wait()
        workers.remove(w)
        start()

    for _ in range(min(jobs, len(pending))):
        start()
    while workers:
        if progress is not None and time.time() - last_progress >= progress:
            last_progress = time.time()
            print(f"progress {last_progress - started:.0f} s: " + summary(counts).replace("\n", " | "), flush=True)
        events = sel.select(timeout=1.0)
        for key, _ in events:
            w = key.data
            # Raw reads: a buffered readline would leave lines the selector never reports.
            chunk = os.read(w["p"].stdout.fileno(), 1 << 20)
            if not chunk:
                if w["seed"] is not None:
                    lost(w, "crash")
                else:
                    sel.unregister(w["p"].stdout)
                    w["p"].wait()
                    workers.remove(w)
                continue
            w["buf"] += chunk
            w["since"] = time.time()
            *lines, w["buf"] = w["buf"].split(b"\n")
            for raw in lines:
                line = raw.decode().strip()
                if line.startswith("exec "):
                    w["exec"] = line[5:]
                elif line.startswith("{"):
                    r = json.loads(line)
                    w["done"].add(r["executors"])
                    record(r)
                elif line == "done":
                    feed(w)
        for w in list(workers):
            if w["seed"] is not None and time.time() - w["since"] > timeout:
                lost(w, "hang")
    return counts, failures


def summary(counts) -> str:
    lines = []
    for name, c in counts.items():
        total = sum(v for k, v in c.items() if k != "not_run")
        fails = sum(v for k, v in c.items() if k in FAILURES)
        lines.append(f"{name}: {total} programs, {fails} failures; " +
                     ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--executors", default="default,fuser")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds without progress that count as a hang")
    ap.add_argument("--out", default=None, help="folder for the repro of each failure")
    ap.add_argument("--seconds", type=float, default=None, help="start no new program after this long")
    ap.add_argument("--progress", type=float, default=None, help="print the counts every this many seconds")
    ap.add_argument("--recycle", type=int, default=0,
                    help="programs per worker process before a fresh one (default 0: the worker lives on)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        worker([(n, EXECUTOR_SETS[n]) for n in a.worker.split(",")])
        return 0
    names = a.executors.split(",")
    for n in names:
        if n not in EXECUTOR_SETS:
            ap.error(f"unknown executor set {n!r}; choose from {sorted(EXECUTOR_SETS)}")
    t0 = time.time()
    counts, failures = run(range(a.start, a.start + a.count), names, a.timeout, a.jobs, a.out,
                           budget=a.seconds, progress=a.progress, recycle=a.recycle)
    print(summary(counts))
    print(f"seeds from {a.start} ({a.count} asked) in {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
