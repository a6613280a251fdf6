// ATen kernels of the fused attention symbols (ops/sdpa.h), run by the torch executor and printed
// as sdpaex.fused_attention_forward / sdpaex.fused_attention_backward. With dropout (CUDA kernels
// only) the forward returns the kernels' random state and the backward passes it back, so that
// the same elements are dropped; without, the backward gets an unused placeholder.
#include <ATen/ATen.h>

#include "executors/executor.h"
#include "ir/error.h"
#include "ops/sdpa.h"
#include "runtime/kernels.h"

namespace thunder::runtime {
namespace {

using K = KernelArgs;

std::optional<at::Tensor> optTensor(K& a, size_t i) {
  return a.none(i) ? std::nullopt : std::optional<at::Tensor>(a.t(i));
}

c10::IValue tuple(std::vector<c10::IValue> items) { return c10::ivalue::Tuple::create(std::move(items)); }

/// The philox seed and offset the CUDA kernels return when they use no dropout.
at::Tensor unusedRngState() { return at::empty({}, at::TensorOptions().dtype(at::kLong)); }

/// The fused kernels read the head dimension as contiguous (PyTorch's own sdpa makes it so);
/// a strided one (a sliced or transposed view) is copied first.
at::Tensor denseLastDim(const at::Tensor& t) {
  return t.dim() == 0 || t.stride(-1) == 1 ? t : t.contiguous();
}

/// The memory-efficient kernels read the bias as (B, H, L, S) with a dense last dim and the other
/// strides multiples of 16 elements: a bias that is not is padded along S (and sliced back, so
/// only its strides change), then expanded to the attention's shape (broadcast dims: stride 0).
std::optional<at::Tensor> efficientBias(K& a, size_t i, const at::Tensor& q, const at::Tensor& k) {
  if (a.none(i)) return std::nullopt;
  at::Tensor bias = a.t(i);
  constexpr int64_t kAlign = 16;
  bool aligned = bias.dim() > 0 && bias.stride(-1) == 1;
  for (int64_t d = 0; aligned && d + 1 < bias.dim(); ++d)
    aligned = bias.stride(d) % kAlign == 0;
  if (!aligned) {
    int64_t s = bias.size(-1);
    bias = at::constant_pad_nd(bias, {0, (kAlign - s % kAlign) % kAlign}).slice(-1, 0, s);
  }
  return bias.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend)
c10::IValue forward(K& a) {
  const at::Tensor q = denseLastDim(a.t(0)), k = denseLastDim(a.t(1)), v = denseLastDim(a.t(2));
  bool causal = a.b(4);
  double scale = a.d(5);
  double dropout = a.v.size() > 7 ? a.d(7) : 0.0;
  switch (sdpa::parseBackend(a.str(6), "sdpaex.fused_attention_forward")) {
    case sdpa::Backend::FlashCpu: {
      auto [out, lse] =
          at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, optTensor(a, 3), scale);
      return tuple({out, lse});
    }
    case sdpa::Backend::Flash: {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, dropout, causal, false, scale);
      if (dropout == 0.0) return tuple({std::get<0>(r), std::get<1>(r)});
      return tuple({std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)});
    }
    case sdpa::Backend::Efficient: {
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, efficientBias(a, 3, q, k), true,
                                                           dropout, causal, scale);
      if (dropout == 0.0) return tuple({std::get<0>(r), std::get<1>(r)});
      return tuple({std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)});
    }
    case sdpa::Backend::None: break;
  }
  throw Error(ErrorKind::Value, "sdpaex.fused_attention_forward: no fused kernel named '" + a.str(6) + "'");
}

// fused_attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask, is_causal,
//                          scale, backend)
c10::IValue backward(K& a) {
  const at::Tensor g = denseLastDim(a.t(0)), q = denseLastDim(a.t(1)), k = denseLastDim(a.t(2)),
                   v = denseLastDim(a.t(3)), out = denseLastDim(a.t(4)), &lse = a.t(5);
  bool causal = a.b(7);
  double scale = a.d(8);
  double dropout = a.v.size() > 10 ? a.d(10) : 0.0;
  at::Tensor seed = dropout > 0.0 ? a.t(11) : unusedRngState();
  at::Tensor offset = dropout > 0.0 ? a.t(12) : unusedRngState();
  switch (sdpa::parseBackend(a.str(9), "sdpaex.fused_attention_backward")) {
    case sdpa::Backend::FlashCpu: {
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          g, q, k, v, out, lse, 0.0, causal, optTensor(a, 6), scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Flash: {
      // Dense inputs: no cumulative sequence lengths; the maximal lengths are L and S.
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
          g, q, k, v, out, lse, at::Tensor(), at::Tensor(), q.size(2), k.size(2), dropout, causal,
          seed, offset, scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Efficient: {
      at::Tensor bias = efficientBias(a, 6, q, k).value_or(at::Tensor());
      auto r = at::_scaled_dot_product_efficient_attention_backward(
          g, q, k, v, bias, out, lse, seed, offset, dropout, {true, true, true, false}, causal,
          scale);
      return tuple({std::get<0>(r), std::get<1>(r), std::get<2>(r)});
    }
    case sdpa::Backend::None: break;
  }
  throw Error(ErrorKind::Value, "sdpaex.fused_attention_backward: no fused kernel named '" + a.str(9) + "'");
}

}  // namespace

void registerSdpaKernels(Executor& torch) {
  sdpa::registerSdpaSymbols();
  for (auto [semantic, kernel] : {std::pair<const Symbol*, Kernel>{&sdpa::forwardSymbol(), forward},
                                  std::pair<const Symbol*, Kernel>{&sdpa::backwardSymbol(), backward}}) {
    const Symbol* exec = makeExecSymbol("torch", "sdpaex", semantic->name, *semantic);
    setKernel(exec, std::move(kernel));
    torch.addImplementation(semantic->id(), Implementation{exec, {}, {}});
  }
}

}  // namespace thunder::runtime
