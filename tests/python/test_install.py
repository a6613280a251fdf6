"""`make setup` leaves thunder importable from any directory (tools/develop.py)."""

import os
import subprocess
import sys

import thunder


def test_import_thunder_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import thunder, torch; print(thunder.__file__); print(thunder.jit(lambda x: x * 2)(torch.ones(2)).tolist())"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"`import thunder` outside the tree failed (run `make setup`):\n{r.stderr}"
    where, result = r.stdout.split("\n")[:2]
    assert os.path.realpath(where) == os.path.realpath(thunder.__file__)
    assert result == "[2.0, 2.0]"
