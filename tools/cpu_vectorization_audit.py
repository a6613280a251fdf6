"""Which inner loops of the CPU fuser's kernels GCC leaves scalar, for common ops in float32 and
bfloat16: compiles each generated kernel with the fuser's flags (at x86-64-v3) and
-fopt-info-vec, and prints the kernels with an element loop that did not vectorize (empty loops
and the interleaved form's tail aside). A loop left scalar ran 5-20x slower than eager (a clamp,
a row amax, a row kernel's stores: session 39). Expected scalar: calls into libm (pow of a
float exponent, atan2, fmod/remainder).

    PYTHONPATH=python python tools/cpu_vectorization_audit.py
"""
import os
import re
import subprocess
import tempfile

import torch
import torch.nn.functional as F

import thunder
from thunder import _C

TMP = tempfile.mkdtemp(prefix="thunder_vec_audit_")
CPP, OBJ = os.path.join(TMP, "kernel.cpp"), os.path.join(TMP, "kernel.o")
M = 64
progs = {
 "gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": lambda x: F.silu(x),
 "tanh": lambda x: torch.tanh(x), "sigmoid": lambda x: torch.sigmoid(x), "exp": lambda x: torch.exp(x), "log1p": lambda x: torch.log1p(x.abs()),
 "erf": lambda x: torch.erf(x), "pow3": lambda x: x.pow(3), "pow_float": lambda x: x.abs().pow(1.7), "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
 "relu": lambda x: F.relu(x), "leaky": lambda x: F.leaky_relu(x, 0.1), "elu": lambda x: F.elu(x), "hardswish": lambda x: F.hardswish(x),
 "hardsigmoid": lambda x: F.hardsigmoid(x), "softplus": lambda x: F.softplus(x), "mish": lambda x: F.mish(x), "relu6": lambda x: F.relu6(x),
 "where": lambda x: torch.where(x > 0, x, x * 2), "masked_fill": lambda x: x.masked_fill(x > 1, float("-inf")), "sign": lambda x: torch.sign(x),
 "floor": lambda x: torch.floor(x), "round": lambda x: torch.round(x), "remainder": lambda x: torch.remainder(x, 0.7), "fmod": lambda x: torch.fmod(x, 0.7),
 "abs": lambda x: x.abs(), "isnan": lambda x: torch.isnan(x).float(), "nan_to_num": lambda x: torch.nan_to_num(x),
 "maximum": lambda x: torch.maximum(x, x * 0.5), "clamp": lambda x: x.clamp(-1, 1), "to_int": lambda x: (x * 10).to(torch.int32) * 2,
 "to_bool": lambda x: (x > 0) & (x < 1), "softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
 "layernorm": lambda x: F.layer_norm(x, (x.shape[-1],)), "rmsnorm": lambda x: F.rms_norm(x, (x.shape[-1],)), "sum": lambda x: x.sum(-1),
 "mean_var": lambda x: torch.var_mean(x, -1), "amax": lambda x: x.amax(-1), "logsumexp": lambda x: torch.logsumexp(x, -1),
 "dropout_eval": lambda x: F.dropout(x, 0.0) * 2, "atan2": lambda x: torch.atan2(x, x + 1), "sinusoid": lambda x: torch.sin(x) * torch.cos(x),
 "lerp": lambda x: torch.lerp(x, x * 2, 0.3), "addcmul": lambda x: torch.addcmul(x, x, x, value=0.5), "argmax_like": lambda x: (x == x.amax(-1, keepdim=True)).float(),
}
flags = "-O3 -march=x86-64-v3 -fopenmp -fno-math-errno -fno-trapping-math -ffp-contract=off -std=c++17 -fPIC -c".split()
for dt in (torch.float32, torch.bfloat16):
    for name, f in progs.items():
        x = torch.randn(M, 256).to(dt)
        try:
            jf = thunder.jit(f, executors=[]); jf(x)
            srcs = _C.generate_fusion_sources(thunder.last_traces(jf)[1], "cpp")
        except Exception as e:
            print(f"{name} {dt}: ERR {type(e).__name__} {str(e)[:100]}"); continue
        for kname, src in srcs:
            open(CPP, "w").write(src)
            r = subprocess.run(["g++", *flags, CPP, "-o", OBJ, "-fopt-info-vec-optimized", "-fopt-info-vec-missed"], capture_output=True, text=True)
            # the loops over n (inner element loops)
            loops = set(int(m) for m in re.findall(r"kernel\.cpp:(\d+):\d+: (?:optimized|missed)", r.stderr))
            lines = src.splitlines()
            inner = [i + 1 for i, l in enumerate(lines) if re.search(r"for \(int64_t n = ", l)]
            vec = set(int(m) for m in re.findall(r"kernel\.cpp:(\d+):\d+: optimized: loop vectorized", r.stderr))
            bad = [i for i in inner if not any(j in vec for j in (i - 1, i, i + 1, i + 2)) and 'n0 + 4 * h' not in lines[i - 1]
                   and lines[i].strip() != '}']  # (not an empty loop)
            if bad:
                print(f"{name} {str(dt)[6:]} {kname}: {len(bad)} of {len(inner)} element loops scalar (lines {bad})")
print("done")
