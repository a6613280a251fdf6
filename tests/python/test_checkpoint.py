"""torch.utils.checkpoint under thunder.jit: both forms, checkpoint_sequential and Hugging Face's
gradient_checkpointing_enable() give eager's values and gradients (the parameters the checkpointed
function closes over included)."""

import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import thunder

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x, scale=1.0):
        return x + scale * self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


class Net(torch.nn.Module):
    def __init__(self, reentrant, d=8):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(3))
        self.reentrant = reentrant

    def forward(self, x):
        for b in self.blocks:
            if self.reentrant is None:
                x = b(x, 0.5)
            else:
                x = checkpoint(b, x, 0.5, use_reentrant=self.reentrant)
        return x.square().mean()


def _compare(model, *inputs):
    ref = copy.deepcopy(model)
    jm = thunder.jit(model)
    loss, want = jm(*inputs), ref(*inputs)
    torch.testing.assert_close(loss, want)
    loss.backward(), want.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    return jm


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_matches_eager(reentrant, device):
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=device, requires_grad=True)
    _compare(Net(reentrant).to(device), x)


def test_checkpoint_sequential_matches_eager():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(*(Block(8) for _ in range(4)))

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = seq

        def forward(self, x):
            return checkpoint_sequential(self.seq, 2, x, use_reentrant=False).sum()

    _compare(M(), torch.randn(3, 8))


def test_hugging_face_gradient_checkpointing_matches_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg).train()
    model.gradient_checkpointing_enable()
    ids = torch.randint(1, 64, (2, 12))

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, labels=ids).loss

    _compare(Loss(), ids)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_calls_are_recomputed_not_saved(reentrant, device):
    # The checkpointed blocks' activations (LayerNorm, both matmuls, GELU) are recomputed by the
    # backward from each block's input, which is saved, as eager's checkpoint saves it: beyond the
    # parameters, the three blocks' inputs, the last one's output and LayerNorm's row statistics
    # (the same network without checkpoints also saves both matmuls' outputs).
    from thunder.core.transforms import saved_for_backward

    def activation_bytes(reentrant):
        torch.manual_seed(0)
        model = Net(reentrant, d=64).to(device)
        jm = thunder.jit(model)
        jm(torch.randn(256, 64, device=device, requires_grad=True)).backward()
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        return saved_for_backward(jm)["bytes"] - params

    plain, checkpointed = activation_bytes(None), activation_bytes(reentrant)
    activation = 256 * 64 * 4
    assert 4 * activation <= checkpointed <= 4.5 * activation < plain, (checkpointed, plain)


@pytest.mark.parametrize("device", DEVICES)
def test_random_draws_in_a_checkpointed_region_are_not_drawn_again(device):
    # Dropout inside checkpoint: the backward uses the forward's mask (gradient zero exactly where
    # the output was dropped), as eager's preserved RNG state does.
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16, device=device)

    def f(x):
        return checkpoint(lambda y: torch.nn.functional.dropout(lin(y), 0.5), x, use_reentrant=False)

    x = torch.randn(64, 16, device=device, requires_grad=True)
    out = thunder.jit(f)(x)
    (gx,) = torch.autograd.grad(out, x, torch.ones_like(out))
    kept = (out != 0).float()
    torch.testing.assert_close(gx, 2.0 * kept @ lin.weight)
