"""The model suite of benchmarks/models.py at its CPU sizes: thunder's loss, gradients, buffers
and outputs match eager's (measured against float64) for every model whose library is installed,
through the command line that the GPU runs use; and its report: tables, geomean rows, failing
contenders, skipped libraries, the time limit and merged runs."""

import json
import sys

import pytest

from benchmark_models import suite


@pytest.mark.parametrize("mode", suite.MODES)
@pytest.mark.parametrize("name", list(suite.MODELS))
def test_suite_model_matches_eager(name, mode, monkeypatch, capsys):
    pytest.importorskip(suite.MODELS[name].library)
    # The CPU fuser, as the benchmark (and a user) runs thunder.
    monkeypatch.setenv("THUNDER_CPU_FUSER", "1")
    rc = suite.main(["--device", "cpu", "--check", "--only", name, "--mode", mode])
    out = capsys.readouterr().out
    assert rc == 0 and "1 passed, 0 failed" in out, out


def test_check_fails_when_thunder_differs(monkeypatch, capsys):
    # A model whose thunder result differs from eager's fails the check (exit status 1).
    pytest.importorskip("transformers")
    real_jit = suite.thunder.jit

    def off_by_a_little(module):
        jitted = real_jit(module)
        return lambda **kw: jitted(**kw) * 1.001

    monkeypatch.setattr(suite.thunder, "jit", off_by_a_little)
    assert suite.main(["--device", "cpu", "--check", "--only", "llama", "--mode", "train"]) == 1
    assert "FAIL llama train" in capsys.readouterr().out


def _run(tmp_path, *args):
    rc = suite.main(["--device", "cpu", "--repeats", "2", "--warmup", "1", "--contenders", "eager,thunder",
                     "--out", str(tmp_path), "--markdown", *args])
    assert rc == 0
    doc = json.loads((tmp_path / "models.json").read_text())
    return doc, (tmp_path / "models.md").read_text()


def test_timed_run_writes_tables_with_geomean_and_failing_contender(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    real_wrap = suite._wrap

    def wrap(module, contender):
        # thunder fails on GPT-2 only: its cell says why, the run goes on to Llama.
        if contender == "thunder" and "GPT2" in type(module.model).__name__:
            raise RuntimeError("no | luck")
        return real_wrap(module, contender)

    monkeypatch.setattr(suite, "_wrap", wrap)
    doc, md = _run(tmp_path, "--only", "gpt2,llama", "--mode", "infer")
    r = doc["results"]["infer"]
    assert r["gpt2"]["contenders"]["thunder"] == {"error": "RuntimeError: no | luck"}
    assert r["gpt2"]["contenders"]["eager"]["median_s"] > 0
    assert all(r["llama"]["contenders"][c]["median_s"] > 0 for c in ("eager", "thunder"))
    assert doc["results"].keys() == {"infer"} and doc["libraries"]["transformers"]
    rows = md.splitlines()
    assert any(row.startswith("| GPT-2 small | tiny config,") and "fails: RuntimeError: no \\| luck" in row
               for row in rows), md
    llama = r["llama"]["contenders"]
    ratio = llama["eager"]["median_s"] / llama["thunder"]["median_s"]
    assert f"| **geomean** (1 of 2 models) | | | | | **{ratio:.2f}x** |" in md, md
    assert "Inference (no_grad forward)" in md and "Training" not in md


def test_time_limit_and_merge(tmp_path):
    pytest.importorskip("transformers")
    first, _ = _run(tmp_path / "a", "--only", "gpt2,bert", "--mode", "train", "--time-limit", "0")
    # The first model always starts; the time limit stops the next.
    assert list(first["results"]["train"]) == ["gpt2"] and first["not_run"] == ["bert"]
    _run(tmp_path / "b", "--only", "bert", "--mode", "train")
    rc = suite.main(["--merge", str(tmp_path / "a" / "models.json"), str(tmp_path / "b" / "models.json"),
                     "--out", str(tmp_path / "m")])
    assert rc == 0
    merged = json.loads((tmp_path / "m" / "models.json").read_text())
    assert list(merged["results"]["train"]) == ["gpt2", "bert"] and merged["not_run"] == []
    assert "(2 of 2 models)" in (tmp_path / "m" / "models.md").read_text()


def test_missing_library_skips_its_models(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    monkeypatch.setattr(suite, "_libraries", {})
    names = suite.selected("")
    assert "timm not usable (ModuleNotFoundError" in capsys.readouterr().out
    assert not any(suite.MODELS[n].library == "timm" for n in names)
    # transformers' ViT stands in for timm's where transformers is installed.
    assert ("vit_hf" in names) == (suite.library("transformers") is not None)
    assert suite.selected("gpt2,bert,llama", shard=(2, 2)) == (["bert"] if suite.library("transformers") else [])
