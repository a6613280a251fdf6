"""BatchNorm with momentum=None (a cumulative moving average) while thunder traces.

Eager's _BatchNorm.forward computes the average's factor as `1.0 / float(num_batches_tracked)`:
a tensor's value, which a trace does not have (Tensor.__float__ of a proxy is refused). While a
program is traced, _BatchNorm.forward is replaced by `traced_forward(original)`: in that one case
it computes the factor as a 0-dim float64 tensor, 1 / num_batches_tracked after its increment, and
passes it to F.batch_norm as the momentum (ltorch.batch_norm takes a 0-dim tensor there), so that
each call of the compiled program mixes its batch in with the factor of its own step. Every other
case runs eager's forward as it is.
"""

from __future__ import annotations

import functools

import torch

from thunder import _C


def traced_forward(original):
    """_BatchNorm.forward, with momentum=None's cumulative average computed in the trace."""

    @functools.wraps(original)
    def forward(self, input):
        counter = self.num_batches_tracked
        if (self.momentum is not None or not (self.training and self.track_running_stats)
                or not isinstance(counter, _C.TensorProxy)):
            return original(self, input)
        self._check_input_dim(input)
        self.num_batches_tracked.add_(1)
        # eager's 1.0 / float(n), in float64
        factor = self.num_batches_tracked.double().reciprocal()
        return torch.nn.functional.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                              True, factor, self.eps)

    return forward
