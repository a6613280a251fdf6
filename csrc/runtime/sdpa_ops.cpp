// ATen kernels of the fused attention symbols (ops/sdpa.h), run by the torch executor and printed
// as sdpaex.fused_attention_forward / sdpaex.fused_attention_backward. Dropout is never used (the
// grad rule declines it), so the random state of the CUDA kernels is not kept: their backward
// reads it only when dropout_p > 0.
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

// fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend)
c10::IValue forward(K& a) {
  const at::Tensor q = denseLastDim(a.t(0)), k = denseLastDim(a.t(1)), v = denseLastDim(a.t(2));
  bool causal = a.b(4);
  double scale = a.d(5);
  switch (sdpa::parseBackend(a.str(6), "sdpaex.fused_attention_forward")) {
    case sdpa::Backend::FlashCpu: {
      auto [out, lse] =
          at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, optTensor(a, 3), scale);
      return tuple({out, lse});
    }
    case sdpa::Backend::Flash: {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, scale);
      return tuple({std::get<0>(r), std::get<1>(r)});
    }
    case sdpa::Backend::Efficient: {
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, optTensor(a, 3), true, 0.0, causal, scale);
      return tuple({std::get<0>(r), std::get<1>(r)});
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
  switch (sdpa::parseBackend(a.str(9), "sdpaex.fused_attention_backward")) {
    case sdpa::Backend::FlashCpu: {
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          g, q, k, v, out, lse, 0.0, causal, optTensor(a, 6), scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Flash: {
      // Dense inputs: no cumulative sequence lengths; the maximal lengths are L and S.
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
          g, q, k, v, out, lse, at::Tensor(), at::Tensor(), q.size(2), k.size(2), 0.0, causal,
          unusedRngState(), unusedRngState(), scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Efficient: {
      at::Tensor bias = a.none(6) ? at::Tensor() : a.t(6);
      auto r = at::_scaled_dot_product_efficient_attention_backward(
          g, q, k, v, bias, out, lse, unusedRngState(), unusedRngState(), 0.0,
          {true, true, true, false}, causal, scale);
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
