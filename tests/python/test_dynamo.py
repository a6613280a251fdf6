"""thunder.dynamo: torch.compile with thunder on the pieces of each graph it can take.

Every test compares with eager PyTorch: values, dtypes and gradients. Data-dependent programs run
twice: with dynamo's defaults (it breaks the graph at .item(), x[mask], nonzero) and with dynamo
capturing scalar outputs and data-dependent shapes as graph nodes, which the splitter then sends
to PyTorch with the reason.
"""

import copy

import sys

import pytest
import torch
import torch._dynamo.config as dynamo_config
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.dynamo import ThunderCompiler, thunderfx


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _close(actual, expected, what="", atol=1e-5, rtol=1.3e-6):
    assert type(actual) is type(expected) or not isinstance(expected, torch.Tensor), what
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _close(a, e, f"{what}[{i}]", atol, rtol)
        return
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, eager's {expected.dtype}"
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")
    else:
        assert actual == expected, what


def _check_values_and_grads(fn, make_args, compiled=None, atol=1e-5, rtol=1.3e-6):
    """fn compiled by thunderfx and eager fn give the same outputs and input gradients."""
    args = make_args()
    ref_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                for a in args]
    compiled = compiled or thunderfx(fn)
    out, ref = compiled(*args), fn(*ref_args)
    _close(out, ref, "output", atol, rtol)
    outs, refs = (out if isinstance(out, tuple) else (out,)), (ref if isinstance(ref, tuple) else (ref,))
    # (an output that came back without a gradient would otherwise skip the check of gradients)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in refs], "outputs' requires_grad"
    leaves = [o for o in outs if o.requires_grad]
    ref_leaves = [o for o in refs if o.requires_grad]
    if leaves:
        sum(o.float().sum() for o in leaves).backward()
        sum(o.float().sum() for o in ref_leaves).backward()
        for i, (a, r) in enumerate(zip(args, ref_args)):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                _close(a.grad, r.grad, f"grad of input {i}", atol, rtol)
    return compiled


# ---- data-dependent programs --------------------------------------------------------------------


def item_in_middle(x, w):
    y = torch.tanh(x @ w)
    scale = y.abs().sum().item()
    return (y * scale).sin()


def mask_indexing(x, m):
    return (x[m] * 2).exp().sum() + x.sum()


def nonzero_rows(x):
    idx = torch.nonzero(x[:, 0] > 0).squeeze(1)
    return x.index_select(0, idx).cos() * 3


def data_branch(x):
    y = x * 2
    if y.max() > 1:
        return y.sin()
    return y.cos() + 1


def edge_mask(x, edges):
    # torch_geometric's pattern: keep the edges whose ends differ, then gather and scatter.
    keep = edges[0] != edges[1]
    e = edges[:, keep]
    msg = x.index_select(0, e[0]) * 0.5
    return torch.zeros_like(x).index_add(0, e[1], msg) + x


def _randn(*shape):
    return lambda: (torch.randn(*shape, requires_grad=True),)


DATA_DEPENDENT = [
    pytest.param(item_in_middle, lambda: (torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)), id="item"),
    pytest.param(mask_indexing, lambda: (lambda x: (x, x.detach() > 0))(torch.randn(6, 3, requires_grad=True)),
                 id="mask"),
    pytest.param(nonzero_rows, lambda: (torch.randn(6, 3, requires_grad=True),), id="nonzero"),
    pytest.param(data_branch, lambda: (torch.randn(5, requires_grad=True),), id="branch-true"),
    pytest.param(data_branch, lambda: (torch.full((5,), -1.0, requires_grad=True),), id="branch-false"),
    pytest.param(edge_mask, lambda: (torch.randn(5, 4, requires_grad=True),
                                     torch.tensor([[0, 1, 2, 3, 3], [1, 1, 0, 3, 4]])), id="edge-mask"),
]
CAPTURE = [
    pytest.param({}, id="breaks"),
    pytest.param({"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}, id="captured"),
]


@pytest.mark.parametrize("config", CAPTURE)
@pytest.mark.parametrize("fn,make_args", DATA_DEPENDENT)
def test_data_dependent(fn, make_args, config):
    with dynamo_config.patch(**config):
        f = _check_values_and_grads(fn, make_args)
        # A second call with new data takes the compiled path again, and stays right.
        _check_values_and_grads(fn, make_args, compiled=f)
    assert any(traces for traces in f.last_traces), "no thunder piece ran"
    if not config:
        # dynamo broke the graph where the data decides: the report says why.
        assert len(f.subgraph_infos) >= 2
        assert "dynamo's graph breaks" in f.report()


def test_report_names_dynamo_graph_breaks():
    f = _check_values_and_grads(item_in_middle, lambda: (torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)))
    text = f.report()
    assert "Tensor.item()" in text and "(x1)" in text, text
    torch._dynamo.reset()
    assert "Data-dependent branching" in _check_values_and_grads(data_branch, _randn(5)).report()


def test_captured_data_dependent_nodes_run_in_pytorch_with_reason():
    with dynamo_config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        f = _check_values_and_grads(item_in_middle, lambda: (torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)))
    (info,) = f.subgraph_infos
    assert [p.thunder for p in info.pieces] == [True, False, True]
    (reason,) = info.split_reasons
    assert reason.target == "Tensor.item" and "data-dependent" in reason.reason
    assert "item (Tensor.item): data-dependent" in f.report()


# ---- an op thunder refuses ----------------------------------------------------------------------


def with_cond(x):
    y = x.sin() * 2
    z = torch.cond(y.sum() > 0, lambda t: t.exp(), lambda t: t.cos(), (y,))
    return (z + 1).tanh()


@pytest.mark.parametrize("positive", [True, False])
def test_unsupported_op_is_split_out_with_reason(positive):
    sign = 1.0 if positive else -1.0
    f = _check_values_and_grads(with_cond, lambda: ((torch.rand(4) + 0.1).mul(sign).requires_grad_(),))
    (info,) = f.subgraph_infos
    kinds = [p.thunder for p in info.pieces]
    assert kinds == [True, False, True]
    (reason,) = info.split_reasons
    assert reason.node == "cond" and reason.target == "torch.ops.higher_order.cond"
    assert reason.reason.startswith("thunder cannot trace torch.ops.higher_order.cond")
    text = f.report()
    assert "cond (torch.ops.higher_order.cond): thunder cannot trace" in text
    assert "[torch]: cond" in text
    # The thunder pieces ran in thunder: their traces are thunder's.
    assert len(f.last_traces) == 2 and all(len(t) >= 2 for t in f.last_traces)
    assert "tanh" in str(f.last_traces[1][-1])


def test_custom_autograd_function_runs_in_thunder_with_its_own_backward():
    # Dynamo records the Function as its autograd_function_apply higher-order op; thunder takes it
    # (its apply is a fallback call: the forward as PyTorch runs it, the gradient from the
    # author's backward, here twice the forward's derivative), so nothing splits the graph.
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 6 * x * x * g

    def fn(x):
        return Cube.apply(x.sin()).cos().sum()

    f = _check_values_and_grads(fn, _randn(5))
    (info,) = f.subgraph_infos
    assert info.split_reasons == [] and [p.thunder for p in info.pieces] == [True]
    assert "_apply" in str(f.last_traces[0][-1])


def regions_across_a_split(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.cond(y.sum() > 0, lambda t: t.exp(), lambda t: t.cos(), (y,))
        u = z @ w  # bfloat16 @ float32: legal under autocast only
    with torch.no_grad():
        s = (u * 2).sum()
    return u.float() * s


def test_autocast_and_grad_regions_across_a_split():
    f = _check_values_and_grads(regions_across_a_split,
                                lambda: (torch.randn(4, 4) * 0.3, (torch.randn(4, 4) * 0.3).requires_grad_()),
                                atol=2e-2, rtol=2e-2)
    (info,) = f.subgraph_infos
    # The piece after the split runs in the regions: thunder takes the matmul under autocast.
    assert [p.thunder for p in info.pieces] == [True, False, True]
    assert "u" in info.pieces[2].nodes and [r.node for r in info.split_reasons] == ["cond"]
    assert "bf16" in str(f.last_traces[1][-1])


def no_grad_across_a_graph_break(x):
    y = x * 2
    with torch.no_grad():
        z = y * 3
        print("a graph break inside no_grad")
        w = z + y
    return y * w


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_no_grad_region_across_a_graph_break(dynamic, capsys):
    # The piece before the break ends inside the region (its graph switches grad mode off and the
    # next piece switches it back on): thunder took the call for inference, and y, computed before
    # the switch, came back without a gradient, so the output did not require grad.
    f = thunderfx(no_grad_across_a_graph_break, dynamic=dynamic)
    for n in (2, 4, 5):
        x = torch.randn(n, 3, requires_grad=True)
        ref_x = x.detach().clone().requires_grad_()
        out, ref = f(x), no_grad_across_a_graph_break(ref_x)
        assert out.requires_grad and torch.is_grad_enabled()
        _close(out, ref, "output")
        out.sum().backward()
        ref.sum().backward()
        _close(x.grad, ref_x.grad, "grad")


# ---- modules and training -----------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(8, 16), nn.Linear(16, 4), nn.LayerNorm(16)

    def forward(self, x, target):
        h = F.gelu(self.norm(self.fc1(x)))
        return F.cross_entropy(self.fc2(h), target)


def test_mlp_training_matches_eager():
    model = MLP()
    ref = copy.deepcopy(model)
    compiled = thunderfx(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, t = torch.randn(6, 8), torch.randint(0, 4, (6,))
        loss, ref_loss = compiled(x, t), ref(x, t)
        _close(loss, ref_loss, f"loss at step {step}")
        loss.backward()
        ref_loss.backward()
        for (name, p), r in zip(model.named_parameters(), ref.parameters()):
            _close(p.grad, r.grad, f"grad of {name} at step {step}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, r in zip(model.parameters(), ref.parameters()):
        _close(p, r, "parameters after 3 steps")
    assert all(p.thunder for info in compiled.subgraph_infos for p in info.pieces)
    assert thunder.last_backward_traces(compiled.backend.thunder_pieces[0])


def test_torch_compile_with_backend_and_options():
    backend = ThunderCompiler(executors=["torch"])
    model = torch.compile(MLP(), backend=backend)
    x, t = torch.randn(3, 8), torch.randint(0, 4, (3,))
    ref = model._orig_mod(x, t)
    _close(model(x, t), ref)
    (piece,) = backend.thunder_pieces
    assert isinstance(piece, thunder.ThunderModule)
    assert piece._executors == ["fallback", "torch"]  # (thunder.jit adds the fallback executor)
    assert "fusion" not in str(thunder.last_traces(piece)[-1]).lower()


def test_bad_thunder_option_fails_at_construction():
    with pytest.raises(TypeError, match="unexpected keyword"):
        ThunderCompiler(no_such_option=1)


# ---- recompiles ---------------------------------------------------------------------------------


def test_recompile_on_new_shape_and_dtype():
    def fn(x, y):
        return (x * y.unsqueeze(0)).softmax(-1).sum(0)

    f = thunderfx(fn)
    for shape, dtype in [((3, 4), torch.float32), ((5, 4), torch.float32), ((7, 4), torch.float32),
                         ((7, 6), torch.float32), ((7, 6), torch.float64), ((2, 6), torch.float64)]:
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        y = torch.randn(shape[1], dtype=dtype)
        _check_values_and_grads(fn, lambda: (x, y), compiled=f)
    # dynamo recompiled for the new shape (then with a symbolic size) and the new dtype.
    assert len(f.subgraph_infos) >= 3


def test_static_shapes_option():
    f = thunderfx(lambda x: x.cos() + 1, dynamic=False)
    for n in (2, 3, 4):
        x = torch.randn(n)
        _close(f(x), x.cos() + 1)
    assert len(f.subgraph_infos) == 3


def test_marked_dynamic_dimension():
    def fn(x):
        return x.sum(1) * x.shape[1]

    f = thunderfx(fn)
    for n in (3, 5, 8):
        x = torch.randn(2, n)
        torch._dynamo.mark_dynamic(x, 1)
        _close(f(x), fn(x))
    assert len(f.subgraph_infos) == 1


# ---- autocast -----------------------------------------------------------------------------------


def autocast_inside(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = (x @ w).relu()
    return y.float().softmax(-1) @ w.t()


def autocast_outside(x, w):
    return F.linear(x, w).log_softmax(-1) + (x @ w.t()).sum()


@pytest.mark.parametrize("fn,outside", [(autocast_inside, False), (autocast_outside, True)], ids=["inside", "outside"])
def test_autocast_cpu_bf16(fn, outside):
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    wr = w.detach().clone().requires_grad_()
    f = thunderfx(fn)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=outside):
        out = f(x, w)
        ref = fn(x, wr)
    _close(out, ref, "output", atol=1e-2, rtol=1e-2)
    out.float().sum().backward()
    ref.float().sum().backward()
    _close(w.grad, wr.grad, "grad", atol=1e-2, rtol=1e-2)
    # The same function without autocast: dynamo guards on the autocast state and recompiles.
    if outside:
        _close(f(x, w), fn(x, w), "output without autocast")


# ---- models we did not write --------------------------------------------------------------------


def _check_module(model, inputs, output_of=lambda o: o, atol=1e-5, rtol=1e-4):
    """thunderfx(model) and model give the same output and parameter gradients."""
    ref = copy.deepcopy(model)
    compiled = thunderfx(model)
    out, ref_out = output_of(compiled(*inputs)), output_of(ref(*inputs))
    _close(out, ref_out, "output", atol, rtol)
    out.float().sum().backward()
    ref_out.float().sum().backward()
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        if r.grad is None:
            assert p.grad is None or not p.grad.any(), name
            continue
        _close(p.grad, r.grad, f"grad of {name}", atol, rtol)
    assert compiled.backend.thunder_pieces, "thunder compiled nothing"
    return compiled


def _graph(n=6):
    x = torch.randn(n, 5)
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 0, 2]])
    return x, edges


@pytest.mark.parametrize("conv", ["GCNConv", "GATConv"])
def test_torch_geometric(conv):
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    # Importing torch_geometric replaces torch.select process-wide (a wrapper for its HashTensor),
    # which the rest of the suite would then trace instead of torch's own op: put torch's back.
    hash_tensor = sys.modules.get("torch_geometric.hash_tensor")
    if hash_tensor is not None and hasattr(hash_tensor, "_old_select"):
        torch.select = hash_tensor._old_select
    layer = getattr(pyg_nn, conv)(5, 4)
    x, edges = _graph()
    compiled = _check_module(layer, (x, edges))
    # Again with another graph: same results.
    x2 = torch.randn(6, 5)
    _close(compiled(x2, edges), layer(x2, edges), "second graph")


def test_wav2vec2_ctc_loss():
    transformers = pytest.importorskip("transformers")
    config = transformers.Wav2Vec2Config(
        vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2, do_stable_layer_norm=False, ctc_loss_reduction="mean",
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, pad_token_id=0)
    model = transformers.Wav2Vec2ForCTC(config).eval()
    audio = torch.randn(2, 400)
    labels = torch.tensor([[1, 2, 3, -100], [4, 5, -100, -100]])
    compiled = _check_module(_Kw(model, labels=labels), (audio,), output_of=lambda o: o.loss, atol=1e-4)
    # `if labels.max() >= vocab_size` and the labels' mask: dynamo breaks there, the report says so.
    assert "Data-dependent branching" in compiled.report()


class _Kw(nn.Module):
    """model(*args, **kwargs) with fixed keyword arguments (labels), as a module of its own."""

    def __init__(self, model, **kwargs):
        super().__init__()
        self.model, self.kwargs = model, kwargs

    def forward(self, *args):
        return self.model(*args, **self.kwargs)


def test_longformer():
    transformers = pytest.importorskip("transformers")
    config = transformers.LongformerConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        attention_window=[4], max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=1)
    model = transformers.LongformerModel(config).eval()
    ids = torch.randint(2, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    global_mask = torch.zeros(2, 8, dtype=torch.long)
    global_mask[:, 0] = 1
    _check_module(_Kw(model, attention_mask=mask, global_attention_mask=global_mask), (ids,),
                  output_of=lambda o: o.last_hidden_state, atol=1e-4)


def test_torchaudio_conformer():
    models = pytest.importorskip("torchaudio.models")
    model = models.Conformer(input_dim=8, num_heads=2, ffn_dim=16, num_layers=1, depthwise_conv_kernel_size=3,
                             dropout=0.0).eval()
    x = torch.randn(2, 10, 8)
    lengths = torch.tensor([10, 7])
    _check_module(model, (x, lengths), output_of=lambda o: o[0], atol=1e-4)


def test_torchaudio_wav2vec2_lengths():
    models = pytest.importorskip("torchaudio.models")
    model = models.wav2vec2_model(
        extractor_mode="group_norm", extractor_conv_layer_config=[(8, 10, 5), (8, 3, 2)], extractor_conv_bias=False,
        encoder_embed_dim=16, encoder_projection_dropout=0.0, encoder_pos_conv_kernel=4, encoder_pos_conv_groups=2,
        encoder_num_layers=1, encoder_num_heads=2, encoder_attention_dropout=0.0, encoder_ff_interm_features=24,
        encoder_ff_interm_dropout=0.0, encoder_dropout=0.0, encoder_layer_norm_first=False, encoder_layer_drop=0.0,
        aux_num_out=12).eval()
    audio = torch.randn(2, 400)
    lengths = torch.tensor([400, 300])
    _check_module(model, (audio, lengths), output_of=lambda o: o[0], atol=1e-4)


class _Router(torch.nn.Module):
    """Switch Transformers' router: it converts its classifier to float32 in forward
    (`self.classifier = self.classifier.to(dtype)`), which dynamo records as a set_ of the weight
    under no_grad, between a view of the input and the classifier's matmul."""

    def __init__(self):
        super().__init__()
        self.classifier = torch.nn.Linear(4, 3, bias=False)

    def forward(self, x):
        h = x.view(-1, 4)
        self.classifier = self.classifier.to(torch.float32)
        return (self.classifier(h).softmax(-1) * h[:, :3]).sum() + h.sum()


def test_a_grad_mode_region_across_pieces_keeps_the_gradients():
    # The no_grad region around the set_ opened right after the view: its entry joined the view's
    # thunder piece, which then ended with grad mode off and returned the view detached, so the
    # input got no gradient at all (Switch Transformers trained on wrong gradients). A state
    # change now joins the piece after it.
    eager = _Router()
    model = copy.deepcopy(eager)
    x1 = torch.randn(2, 3, 4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    eager(x1).backward()
    compiled = thunderfx(model)
    compiled(x2).backward()
    assert x2.grad is not None
    torch.testing.assert_close(x2.grad, x1.grad)
    torch.testing.assert_close(model.classifier.weight.grad, eager.classifier.weight.grad)
    assert torch.is_grad_enabled()
    info = compiled.subgraph_infos[0]
    # (torch 2.11's dynamo breaks the graph at the module's reassignment: then no state change
    # reaches the splitter, and only the gradients above are to check)
    if any(n.target is torch._C._set_grad_enabled for n in info.original_graph_module.graph.nodes):
        assert len(info.thunder_pieces) == 2


def test_vmap_inside_a_graph_runs_in_pytorch():
    # dynamo inlines torch.vmap (Mamba's associative scan uses it) as functorch nesting calls
    # around batched ops. thunder runs its pieces as C++ autograd functions, which functorch's
    # transforms refuse, and asking thunder about a nesting call would push a vmap level for the
    # process: what the nesting encloses runs in PyTorch, the rest in thunder.
    def fn(x, w):
        y = (x * w).tanh()
        z = torch.vmap(lambda row: row.sin() * 2 + row.sum())(y)
        return (z * y.exp()).sum()

    f = _check_values_and_grads(fn, lambda: (torch.randn(3, 4), torch.randn(4, requires_grad=True)))
    assert torch._C._functorch.get_dynamic_layer_stack_depth() == 0
    (info,) = f.subgraph_infos
    assert any(p.thunder for p in info.pieces) and any(not p.thunder for p in info.pieces)


def test_a_state_change_after_the_last_node_runs_in_pytorch():
    # The graph ends in a grad-mode change: PyTorch makes it in a piece of its own, so thunder's
    # piece returns its output with its gradient, and grad mode is left off as eager leaves it.
    def fn(x):
        y = x * 2
        torch._C._set_grad_enabled(False)
        return y

    x = torch.randn(3, requires_grad=True)
    compiled = thunderfx(fn)
    try:
        y = compiled(x)
        assert not torch.is_grad_enabled()
    finally:
        torch._C._set_grad_enabled(True)
    assert y.requires_grad
    torch.testing.assert_close(y, x * 2)
    assert [p.thunder for p in compiled.subgraph_infos[0].pieces] == [True, False]
