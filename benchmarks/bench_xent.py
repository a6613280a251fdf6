"""Cross-entropy and attention executors against eager PyTorch and torch.compile, in one run (CUDA).

Forward+backward of F.cross_entropy at [2048, 50257] float32 and at [8192, 128256] bfloat16 logits
computed in float32 (`F.cross_entropy(logits.float(), labels)`), through thunder's default
executors (the `.float()` folded into apex_cross_entropy_upcast, which reads the bf16 logits),
apex_ex (and triton_ex where Triton exists); thunder's apex_ex also on the bf16 logits directly
(its kernels compute in float32 and round the loss to bf16). SDPA forward+backward at [4, 32, 2048, 128] bfloat16 causal
with thunder's default executors and with cudnn_ex. Prints one table (milliseconds, ratio to eager and to
torch.compile) with the device, versions and commit.

    PYTHONPATH=python python benchmarks/bench_xent.py
"""

import os
import platform
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.provenance import commit  # noqa: E402
import thunder
from thunder.executors import triton_crossentropy
from thunder.executors.apexex import apex_ex
from thunder.executors.cudnnex import cudnn_available, cudnn_ex


def cuda_time(fn, iters=20):
    """Best of 5 averages of `iters` calls, in milliseconds."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / iters)
    return best


def fwd_bwd(f, *args):
    def step():
        out = f(*args)
        out.backward()
        args[0].grad = None

    return step


def xent_f32(logits, labels):
    return F.cross_entropy(logits, labels)


def xent_upcast(logits, labels):
    return F.cross_entropy(logits.float(), labels)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()


def row(name, times, rows):
    eager, compiled = times.get("eager"), times.get("torch.compile")
    for impl, ms in times.items():
        r_e = f"{eager / ms:5.2f}x" if eager else "-"
        r_c = f"{compiled / ms:5.2f}x" if compiled else "-"
        rows.append(f"| {name} | {impl} | {ms:8.3f} | {r_e} | {r_c} |")


def check(name, ref, got, tol):
    torch.testing.assert_close(got.float(), ref.float(), rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def main():
    if not torch.cuda.is_available():
        print("bench_xent: needs a CUDA GPU")
        return 0
    dev = "cuda"
    rows = []
    xexes = [("thunder apex_ex", apex_ex)]
    if triton_crossentropy.triton_available():
        xexes.append(("thunder triton_ex", triton_crossentropy.triton_ex))

    # [2048, 50257] float32
    logits = torch.randn(2048, 50257, device=dev, requires_grad=True)
    labels = torch.randint(0, 50257, (2048,), device=dev)
    times = {"eager": cuda_time(fwd_bwd(xent_f32, logits, labels)),
             "torch.compile": cuda_time(fwd_bwd(torch.compile(xent_f32), logits, labels))}
    ref = xent_f32(logits, labels)
    for name, ex in xexes:
        jf = thunder.jit(xent_f32, executors=[ex])
        check(name, ref, jf(logits, labels), 1e-4)
        times[name] = cuda_time(fwd_bwd(jf, logits, labels))
    row("cross_entropy fwd+bwd [2048, 50257] f32", times, rows)
    del logits

    # [8192, 128256] bf16 logits, computed in float32
    logits = torch.randn(8192, 128256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 128256, (8192,), device=dev)
    times = {"eager": cuda_time(fwd_bwd(xent_upcast, logits, labels), iters=5),
             "torch.compile": cuda_time(fwd_bwd(torch.compile(xent_upcast), logits, labels), iters=5)}
    ref = xent_upcast(logits, labels)
    # thunder with no executors named: the fold of `.float()` into the cross-entropy and apex_ex's
    # kernels on the bf16 logits (apex_cross_entropy_upcast), as a user's training script gets it.
    jd = thunder.jit(xent_upcast)
    check("thunder default", ref, jd(logits, labels), 1e-4)
    times["thunder default (.float() program)"] = cuda_time(fwd_bwd(jd, logits, labels), iters=5)
    for name, ex in xexes:
        jf = thunder.jit(xent_upcast, executors=[ex])
        check(name, ref, jf(logits, labels), 1e-4)
        times[name + " (.float() program)"] = cuda_time(fwd_bwd(jf, logits, labels), iters=5)
        jb = thunder.jit(xent_f32, executors=[ex])
        check(name, ref, jb(logits, labels), 2e-2)
        times[name + " (bf16 in, f32 math)"] = cuda_time(fwd_bwd(jb, logits, labels), iters=5)
    row("cross_entropy fwd+bwd [8192, 128256] bf16->f32", times, rows)
    del logits

    # SDPA [4, 32, 2048, 128] bf16 causal
    q, k, v = (torch.randn(4, 32, 2048, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def sdpa_step(f):
        def step():
            f(q, k, v).backward()
            q.grad = k.grad = v.grad = None

        return step

    times = {"eager": cuda_time(sdpa_step(sdpa)), "torch.compile": cuda_time(sdpa_step(torch.compile(sdpa)))}
    jf = thunder.jit(sdpa)
    check("sdpa", sdpa(q, k, v), jf(q, k, v), 2e-2)
    times["thunder"] = cuda_time(sdpa_step(jf))
    if cudnn_available():
        jc = thunder.jit(sdpa, executors=[cudnn_ex])
        check("sdpa cudnn_ex", sdpa(q, k, v), jc(q, k, v), 2e-2)
        times["thunder cudnn_ex"] = cuda_time(sdpa_step(jc))
    row("sdpa fwd+bwd [4, 32, 2048, 128] bf16 causal", times, rows)
    sdpa_trace = str(thunder.last_traces(jf)[-1])

    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; CUDA {torch.version.cuda}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'not installed')}; "
          f"python {platform.python_version()}; commit {commit()}")
    print("| benchmark | implementation | ms | vs eager | vs torch.compile |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("thunder's SDPA forward trace:\n" + sdpa_trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
