"""Importing the model libraries the suite, the sweeps and the tests build models from.

PyPI's torchvision wheel for x86_64 is built against the CUDA build of torch. Beside the CPU build
(what `make setup` installs) its compiled operators (nms, roi_align, deform_conv2d) cannot load,
and `import torchvision` then stops while registering fake kernels for `torchvision::nms` and
`torchvision::qnms`, operators that only the compiled library declares. The models themselves
are Python over torch's operators. `import_torchvision` declares those two operators' schemas
(nothing more) when, and only when, the import fails for that reason, so torchvision's models and
timm (which imports torchvision) can be built on such a machine. The compiled operators stay
unavailable: calling `torchvision.ops.nms` there raises torch's "no kernel" error, so a detection
model fails loudly instead of computing anything.

Because transformers imports any torchvision it can find, such a torchvision must not sit in the
interpreter's site-packages: `make deps` puts it (and timm) in VISION_LIBS, which only these
functions put on sys.path.
"""

import importlib
import importlib.util
import os
import sys

VISION_LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".vision-libs")

# torchvision's own schemas for the two operators its import registers fake kernels for.
_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_declared = []  # the torch.library.Library holding the declarations (kept alive)


def _missing_compiled_ops(error):
    return isinstance(error, RuntimeError) and "operator torchvision::" in str(error) and "does not exist" in str(error)


def _look_in_vision_libs():
    if os.path.isdir(VISION_LIBS) and VISION_LIBS not in sys.path:
        sys.path.append(VISION_LIBS)  # after site-packages: an installed torchvision or timm wins


def import_torchvision():
    """torchvision, importable beside a CPU torch whose ABI its compiled operators do not match."""
    _look_in_vision_libs()
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if not _missing_compiled_ops(e) or _declared:
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]  # the half-finished import
    import torch

    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS:
        try:  # declared already (by a library that did load)
            torch._C._get_schema("torchvision::" + schema.split("(", 1)[0], "")
        except RuntimeError:
            lib.define(schema)
    _declared.append(lib)
    return importlib.import_module("torchvision")


def import_library(name):
    """The named library's module; timm and torchvision through `import_torchvision`."""
    if name in ("torchvision", "timm"):
        import_torchvision()
    return importlib.import_module(name)


def prepare_vision_libraries():
    """For a process (the tests) whose code imports timm or torchvision itself: both importable
    where installed, torchvision imported already. Does nothing where neither is installed."""
    _look_in_vision_libs()
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
