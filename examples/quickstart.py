"""thunder's quickstart: jit the MLP of DESIGN.md, check it against eager, print the final trace."""

import torch

import thunder

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 64))
tmodel = thunder.jit(model)

x = torch.randn(64, 2048)
with torch.no_grad():
    expected = model(x)
    actual = tmodel(x)
torch.testing.assert_close(actual, expected)
print("thunder matches eager PyTorch on the MLP")
print(thunder.last_traces(tmodel)[-1])
