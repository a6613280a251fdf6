"""The OpInfo framework itself: collection of the opinfos_*.py tables, the two spellings of an
OpInfo, error inputs and test directives."""

import uuid

import pytest
import torch

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.devices import DeviceType

from opinfo_framework import DecorateInfo, ErrorInput, OpInfo, SampleInput, collect_opinfos, param, table_modules

TABLE = '''
import torch
from opinfo_framework import OpInfo, SampleInput

def gen(op, device, dtype, requires_grad, **kw):
    yield SampleInput(torch.ones(2, device=device, dtype=dtype))

opinfos = [OpInfo({op}, sample_input_generator=gen, torch_reference={ref}, name="{name}")]
'''


def _write_table(directory, module, op="ltorch.neg", ref="torch.neg", name=None):
    (directory / f"{module}.py").write_text(
        "import thunder.torch as ltorch\n" + TABLE.format(op=op, ref=ref, name=name or module)
    )


def test_collects_every_opinfos_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    tag = uuid.uuid4().hex[:8]
    b, a = f"opinfos_{tag}_b", f"opinfos_{tag}_a"
    _write_table(tmp_path, b)
    _write_table(tmp_path, a)
    (tmp_path / f"other_{tag}.py").write_text("raise AssertionError('not a table')\n")
    assert table_modules(str(tmp_path)) == ["opinfos", a, b]
    ops = collect_opinfos(str(tmp_path))
    assert [op.name for op in ops] == [a, b]
    (sample,) = ops[0].samples(torch.float32, "cpu")
    assert isinstance(sample, SampleInput) and torch.equal(sample.args[0], torch.ones(2))
    # The default variants of a symbol: the PyTorch names thunder maps to it.
    assert sorted(q for q, _ in ops[0].variant_list()) == ["torch.Tensor.__neg__", "torch.Tensor.neg", "torch.neg",
                                                            "torch.negative"]


def test_collection_refuses_duplicates_and_modules_without_a_table(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    tag = uuid.uuid4().hex[:8]
    _write_table(tmp_path, f"opinfos_{tag}_a", name="same")
    _write_table(tmp_path, f"opinfos_{tag}_b", name="same")
    with pytest.raises(AssertionError, match=r"OpInfo names defined twice: \['same'\]"):
        collect_opinfos(str(tmp_path))
    (tmp_path / f"opinfos_{tag}_b.py").unlink()
    (tmp_path / f"opinfos_{tag}_c.py").write_text("table = []\n")
    with pytest.raises(AssertionError, match=rf"opinfos_{tag}_c.py has no list `opinfos`"):
        collect_opinfos(str(tmp_path))


def test_the_real_tables_are_collected():
    ops = collect_opinfos()
    names = {op.name for op in ops}
    assert {"acos", "add", "unbind", "scaled_dot_product_attention"} <= names
    assert all(isinstance(op, OpInfo) for op in ops)


def test_old_and_seed_spellings():
    old = OpInfo("neg", ("torch.neg", "torch.Tensor.neg"), lambda dtype: [((torch.ones(2, dtype=dtype),), {})],
                 (torch.float32,), error_inputs=lambda: [ErrorInput((torch.ones(2),), {"x": 1}, TypeError, "x", False)])
    assert old.op is torch.neg and old.reference is torch.neg
    assert [q for q, _ in old.variants_to_test()] == ["torch.Tensor.neg"]
    args, kwargs = old.samples(torch.float32)[0]
    assert args[0].dtype == torch.float32 and kwargs == {}
    (err,) = old.errors()
    assert (err.exc, err.match, err.eager_raises, err.kwargs) == (TypeError, "x", False, {"x": 1})

    def errors(op, device, dtype=torch.float32, **kw):
        yield SampleInput(torch.ones(2), 5), IndexError, "out of range"
        yield ErrorInput(SampleInput(torch.ones(2)), RuntimeError, "bad")

    new = OpInfo(ltorch.neg, sample_input_generator=lambda op, device, dtype, rg: [SampleInput(torch.ones(1))],
                 error_input_generator=errors, torch_reference=torch.neg, dtypes=(dtypes.float32,))
    assert new.name == "neg" and new.op is ltorch.neg and new.reference is torch.neg
    assert new.dtypes == (torch.float32,)
    assert [q for q, _ in new.variants_to_test()] == [q for q, _ in new.variant_list()]
    e1, e2 = new.errors()
    assert (e1.exc, e1.args[1], e1.eager_raises) == (IndexError, 5, True)
    assert (e2.exc, e2.match) == (RuntimeError, "bad")


def test_decorate_info_marks_only_its_tests():
    op = OpInfo(ltorch.acos, sample_input_generator=lambda *a: [], torch_reference=torch.acos, test_directives=(
        DecorateInfo(pytest.mark.xfail, "test_core_vs_torch_consistency", dtypes=(dtypes.float16,),
                     devicetypes=(DeviceType.CPU,), executors=("fuser",)),
    ))
    marks = lambda test, dtype, device, ex: op.marks(test, dtype, device, ex)  # noqa: E731
    assert marks("test_core_vs_torch_consistency", torch.float16, "cpu", "fuser") == [pytest.mark.xfail]
    assert marks("test_core_vs_torch_consistency", torch.float32, "cpu", "fuser") == []
    assert marks("test_core_vs_torch_consistency", torch.float16, "cuda", "fuser") == []
    assert marks("test_core_vs_torch_consistency", torch.float16, "cpu", "default") == []
    assert marks("test_vjp_correctness", torch.float16, "cpu", "fuser") == []
    p = param(op, "test_core_vs_torch_consistency", torch.float16, dtype=torch.float16, executor="fuser", device="cpu")
    assert p.id == "acos-fuser-cpu-float16" and list(p.marks) == [pytest.mark.xfail]
    with pytest.raises(AssertionError, match="unknown executors"):
        DecorateInfo(pytest.mark.skip, "test_core_vs_torch_consistency", executors=("nvfuser",))
