"""benchmarks.models and benchmarks.models_unseen for the tests (conftest puts the repository root
on sys.path). benchmarks.run gives its process fresh compile caches when it is first imported, so
that a benchmark's first calls compile from nothing; the tests keep the caches they have."""

import os

_env = dict(os.environ)
from benchmarks import models as suite  # noqa: E402,F401
from benchmarks import models_unseen as unseen  # noqa: E402,F401

os.environ.clear()
os.environ.update(_env)
