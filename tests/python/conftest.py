"""Makes the in-tree package importable (python/thunder) and the op table (tests/python)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.normpath(os.path.join(_HERE, "..", "..", "python"))
for _p in (_PACKAGE, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
# The suite's "default" executor set keeps CPU calls on ATen: every op is also tested with the
# "fuser" set explicitly, and compiling a C++ kernel per sample twice over makes a cold run several
# times slower on a 2-core machine. Tests of the CPU fuser as the default set the variable
# themselves (a fresh process each).
os.environ.setdefault("THUNDER_CPU_FUSER", "0")
# Subprocesses started by tests import the in-tree package too.
if _PACKAGE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE, os.environ.get("PYTHONPATH")) if p)


import zlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# PyPI's torchvision stops importing beside the CPU build of torch, and make deps keeps it and timm
# out of site-packages (benchmarks/libraries.py says why): the tests' own `import torchvision` and
# `pytest.importorskip("timm")` find them the way the suite and the sweeps do.
sys.path.append(os.path.normpath(os.path.join(_HERE, "..", "..")))
from benchmarks.libraries import prepare_vision_libraries  # noqa: E402

try:
    prepare_vision_libraries()
except Exception:  # a broken install: the tests that need it fail or skip at their own import
    pass


@pytest.fixture(autouse=True)
def _seed(request):
    """Random inputs that are the same on every run of a test (THUNDER_TEST_SEED varies them)."""
    base = int(os.environ.get("THUNDER_TEST_SEED", "0"))
    torch.manual_seed(base + zlib.crc32(request.node.nodeid.encode()))
