"""thunder as a torch.compile backend, for programs thunder cannot trace whole.

    backend = ThunderCompiler(executors=[...])       # thunder.jit's options, for every piece
    model = torch.compile(model, backend=backend)
    f = thunderfx(fn_or_module)                      # the same, in one call; f.last_traces, f.report()

Dynamo captures the program as FX graphs, breaking it where Python must run (a value read from a
tensor that decides control flow, a call dynamo cannot trace). Each graph is split (splitter.py)
into pieces thunder takes, each compiled by thunder.jit, and pieces PyTorch runs as they are; the
record of each split and its reason is kept (report.py).
"""

from thunder.dynamo.compiler import ThunderCompiler, ThunderFX, thunderfx
from thunder.dynamo.report import SplitReason, SubgraphInfo

__all__ = ["ThunderCompiler", "ThunderFX", "thunderfx", "SplitReason", "SubgraphInfo"]
