"""The models of benchmarks/models_unseen.py (30 architectures outside the suite) at their CPU
sizes: thunder's loss, gradients, buffers and outputs against a float64 run, as eager's are
(`--check`, through the command line the GPU runs use). wav2vec2's training branches on its labels'
values: thunder.jit refuses it (its message names thunderfx, test_jit.py)."""

import pytest

from benchmark_models import suite, unseen

REFUSED = {("wav2vec2", "train"): "Tensor.__bool__ needs the value of a tensor"}


@pytest.mark.parametrize("mode", suite.MODES)
@pytest.mark.parametrize("name", list(unseen.EXTRA))
def test_unseen_model_matches_eager(name, mode, monkeypatch, capsys):
    pytest.importorskip(unseen.EXTRA[name].library)
    monkeypatch.setenv("THUNDER_CPU_FUSER", "1")
    rc = unseen.main(["--device", "cpu", "--check", "--only", name, "--mode", mode])
    out = capsys.readouterr().out
    if (name, mode) in REFUSED:
        assert rc == 1 and REFUSED[name, mode] in out, out
    else:
        assert rc == 0 and "1 passed, 0 failed" in out, out


def test_the_suite_table_is_left_as_it_was():
    before = dict(suite.MODELS)
    with unseen.these_models():
        assert set(suite.MODELS) == set(unseen.EXTRA)
    assert suite.MODELS == before
