// Fused attention symbols: the meta functions' outputs per kernel and their errors, and which
// calls of scaled_dot_product_attention a fused kernel takes (mirroring at::_fused_sdp_choice).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/sdpa.h"
#include "test_util.h"

namespace thunder {
namespace {

using sdpa::Backend;
using testing::expectError;
using testing::kCpu;
using testing::kCuda0;
using testing::tensor;

/// ltorch.scaled_dot_product_attention's bound arguments.
std::vector<Value> sdpaArgs(Value q, Value k, Value v, Value mask = Value(), double dropout = 0.0,
                            bool causal = false, Value scale = Value(), bool gqa = false) {
  return {q, k, v, mask, dropout, causal, scale, gqa};
}

class SdpaTest : public ::testing::Test {
 protected:
  void SetUp() override { sdpa::registerSdpaSymbols(); }

  Value forward(std::vector<Value> args) {
    TracingScope scope(trace_);
    return call(sdpa::forwardSymbol(), std::move(args));
  }
  Value backward(std::vector<Value> args) {
    TracingScope scope(trace_);
    return call(sdpa::backwardSymbol(), std::move(args));
  }

  Trace trace_;
};

TEST_F(SdpaTest, ForwardMetaPerKernel) {
  for (auto [dev, dt, backend, lseLen] :
       {std::tuple{kCpu, DType::Float32, "flash_cpu", 37}, std::tuple{kCuda0, DType::BFloat16, "flash", 37},
        std::tuple{kCuda0, DType::Float32, "efficient", 64}}) {
    Value q = tensor({2, 3, 37, 16}, dt, dev), k = tensor({2, 3, 5, 16}, dt, dev);
    Value r = forward({q, k, k, Value(), true, 0.25, backend});
    ASSERT_TRUE(r.isSequence());
    const TensorProxy &out = r.items()[0].tensor(), &lse = r.items()[1].tensor();
    EXPECT_EQ(out.shape, (Shape{2, 3, 37, 16})) << backend;
    EXPECT_EQ(out.dtype, dt);
    EXPECT_EQ(out.device, dev);
    EXPECT_EQ(lse.shape, (Shape{2, 3, lseLen})) << backend;
    EXPECT_EQ(lse.dtype, DType::Float32);
    EXPECT_EQ(lse.device, dev);
  }
  EXPECT_EQ(trace_.bsyms.back().sym->id(), "sdpaex.fused_attention_forward");
  // With dropout the CUDA kernels also return their random state; the CPU kernel takes none.
  Value qb = tensor({2, 3, 8, 16}, DType::BFloat16, kCuda0);
  Value bias = tensor({2, 1, 8, 8}, DType::BFloat16, kCuda0);
  for (auto [mask, backend] : {std::pair{Value(), "flash"}, std::pair{bias, "efficient"}}) {
    Value r = forward({qb, qb, qb, mask, false, 0.25, backend, 0.1});
    ASSERT_EQ(r.items().size(), 4u) << backend;
    EXPECT_EQ(r.items()[2].tensor().dtype, DType::Int64);
    Value g = backward({r.items()[0], qb, qb, qb, r.items()[0], r.items()[1], mask, false, 0.25,
                        backend, 0.1, r.items()[2], r.items()[3]});
    EXPECT_EQ(g.items().size(), 3u);
    expectError([&] { backward({r.items()[0], qb, qb, qb, r.items()[0], r.items()[1], mask, false,
                                0.25, backend, 0.1}); },
                ErrorKind::Value, "dropout_p=0.1 needs the forward's rng_seed and rng_offset");
  }
  expectError([&] { forward({qb, qb, qb, bias, false, 0.25, "flash"}); }, ErrorKind::Value,
              "the 'flash' kernel takes no attn_mask");
  Value q = tensor({2, 3, 8, 16});
  expectError([&] { forward({q, q, q, Value(), false, 0.25, "flash_cpu", 0.1}); }, ErrorKind::Value,
              "the 'flash_cpu' kernel takes no dropout, but got dropout_p=0.1");
  expectError([&] { forward({q, q, q, Value(), false, 0.25, "flash_cpu", 1.0}); }, ErrorKind::Value,
              "argument 'dropout_p' must be in [0, 1), but got 1");
}

TEST_F(SdpaTest, MaskGradientFromTheEfficientBackward) {
  // mask_grad: the memory-efficient backward also gives the mask's gradient, at (B, H, L, S).
  Value qb = tensor({2, 3, 8, 16}, DType::BFloat16, kCuda0);
  Value bias = tensor({2, 1, 8, 8}, DType::BFloat16, kCuda0);
  Value r = forward({qb, qb, qb, bias, false, 0.25, std::string("efficient")});
  Value g = backward({r.items()[0], qb, qb, qb, r.items()[0], r.items()[1], bias, false, 0.25,
                      std::string("efficient"), 0.0, Value(), Value(), true});
  ASSERT_EQ(g.items().size(), 4u);
  EXPECT_EQ(g.items()[3].tensor().shape, (Shape{2, 3, 8, 8}));
  EXPECT_EQ(g.items()[3].tensor().dtype, DType::BFloat16);
  Value f = forward({qb, qb, qb, Value(), false, 0.25, std::string("flash")});
  expectError([&] { backward({f.items()[0], qb, qb, qb, f.items()[0], f.items()[1], Value(), false, 0.25,
                              std::string("flash"), 0.0, Value(), Value(), true}); },
              ErrorKind::Value, "mask_grad=True needs an attn_mask and the 'efficient' kernel");
  expectError([&] { backward({r.items()[0], qb, qb, qb, r.items()[0], r.items()[1], bias, false, 0.25,
                              std::string("efficient"), 0.0, Value(), Value(), 1.5}); },
              ErrorKind::Type, "argument 'mask_grad' must be a bool");
}

TEST_F(SdpaTest, BackwardMetaGivesInputMetadata) {
  Value q = tensor({1, 2, 4, 8}), k = tensor({1, 2, 6, 8}), v = tensor({1, 2, 6, 8});
  Value r = forward({q, k, v, Value(), false, 0.5, "flash_cpu"});
  Value out = r.items()[0], lse = r.items()[1];
  Value g = backward({out, q, k, v, out, lse, Value(), false, 0.5, "flash_cpu"});
  ASSERT_EQ(g.items().size(), 3u);
  EXPECT_EQ(g.items()[0].tensor().shape, (Shape{1, 2, 4, 8}));
  EXPECT_EQ(g.items()[1].tensor().shape, (Shape{1, 2, 6, 8}));
  EXPECT_EQ(g.items()[2].tensor().shape, (Shape{1, 2, 6, 8}));
  expectError([&] { backward({out, q, k, v, out, tensor({1, 2, 5}), Value(), false, 0.5, "flash_cpu"}); },
              ErrorKind::Value, "logsumexp must be float32 of shape (1, 2, 4) for the 'flash_cpu' kernel, but got cpu f32[1, 2, 5]");
  expectError([&] { backward({k, q, k, v, out, lse, Value(), false, 0.5, "flash_cpu"}); }, ErrorKind::Value,
              "grad_out and out must have the query's shape (1, 2, 4, 8), but got grad_out (1, 2, 6, 8)");
}

TEST_F(SdpaTest, ForwardErrorsNameOpArgumentAndShapes) {
  Value q = tensor({2, 3, 4, 8}), k = tensor({2, 3, 6, 8});
  const std::string op = "sdpaex.fused_attention_forward";
  expectError([&] { forward({tensor({3, 4, 8}), k, k, Value(), false, 0.5, "flash_cpu"}); }, ErrorKind::Value,
              op + ": query, key and value must be 4-D (batch, heads, sequence, head dim), but got query (3, 4, 8)");
  expectError([&] { forward({q, tensor({2, 3, 6, 8}, DType::Float64), k, Value(), false, 0.5, "flash_cpu"}); },
              ErrorKind::Type, "must have one floating dtype");
  expectError([&] { forward({q, tensor({2, 1, 6, 8}), tensor({2, 1, 6, 8}), Value(), false, 0.5, "flash_cpu"}); },
              ErrorKind::Value, "same batch size and number of heads, but got query (2, 3, 4, 8), key (2, 1, 6, 8)");
  expectError([&] { forward({q, k, tensor({2, 3, 6, 4}), Value(), false, 0.5, "flash_cpu"}); }, ErrorKind::Value,
              "same head dim, but got query (2, 3, 4, 8), key (2, 3, 6, 8), value (2, 3, 6, 4)");
  expectError([&] { forward({q, k, k, Value(), false, 0.5, "cudnn"}); }, ErrorKind::Value,
              op + ": argument 'backend' must be 'flash_cpu', 'flash' or 'efficient', but got 'cudnn'");
  expectError([&] { forward({q, k, k, Value(), false, 0.5, "flash"}); }, ErrorKind::Value,
              op + ": the 'flash' kernel does not run on cpu");
  expectError([&] { forward({q, k, k, tensor({5, 6}), false, 0.5, "flash_cpu"}); }, ErrorKind::Value,
              op + ": attn_mask of shape (5, 6) is not broadcastable to the attention's shape (2, 3, 4, 6)");
  expectError([&] { forward({q, k, k, tensor({4, 6}, DType::Bool), false, 0.5, "flash_cpu"}); }, ErrorKind::Type,
              op + ": attn_mask must have the query's dtype float32");
  Value qc = tensor({2, 3, 4, 8}, DType::BFloat16, kCuda0), kc = tensor({2, 3, 6, 8}, DType::BFloat16, kCuda0);
  expectError([&] { forward({qc, kc, kc, tensor({4, 6}, DType::BFloat16, kCuda0), false, 0.5, "flash"}); },
              ErrorKind::Value, op + ": the 'flash' kernel takes no attn_mask");
}

TEST_F(SdpaTest, ChooseBackendMirrorsFusedSdpChoice) {
  auto choose = [](std::vector<Value> a, bool maskGrad = false) { return sdpa::chooseBackend(a, maskGrad); };
  Value q = tensor({2, 4, 16, 64}), k = tensor({2, 4, 32, 64});
  EXPECT_EQ(choose(sdpaArgs(q, k, k)), Backend::FlashCpu);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, Value(), 0.0, true, 0.3)), Backend::FlashCpu);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, tensor({16, 32}, DType::Bool))), Backend::FlashCpu);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, tensor({2, 1, 16, 32}))), Backend::FlashCpu);
  // Declined on CPU: float64, dropout, 3-D, value head dim, mask with causal, a mask needing a
  // gradient, a mask of another dtype, head counts without enable_gqa.
  Value q64 = tensor({2, 4, 16, 64}, DType::Float64);
  EXPECT_EQ(choose(sdpaArgs(q64, q64, q64)), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, Value(), 0.1)), Backend::None);  // CPU: no dropout kernel
  EXPECT_EQ(choose(sdpaArgs(tensor({4, 16, 64}), tensor({4, 32, 64}), tensor({4, 32, 64}))), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, k, tensor({2, 4, 32, 32}))), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, tensor({16, 32}), 0.0, true)), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, tensor({16, 32})), true), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, k, k, tensor({16, 32}, DType::Float64))), Backend::None);
  Value kg = tensor({2, 2, 32, 64});
  EXPECT_EQ(choose(sdpaArgs(q, kg, kg)), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(q, kg, kg, Value(), 0.0, false, Value(), true)), Backend::FlashCpu);
  EXPECT_EQ(choose(sdpaArgs(q, tensor({2, 3, 32, 64}), tensor({2, 3, 32, 64}), Value(), 0.0, false, Value(), true)),
            Backend::None);
  // CUDA: flash for half types, the memory-efficient kernel for half types with a mask; float32,
  // causal non-square attention or an unaligned head dim go through the decomposition.
  auto cuda = [](Shape s, DType d) { return tensor(std::move(s), d, kCuda0); };
  Value qb = cuda({2, 4, 16, 128}, DType::BFloat16), kb = cuda({2, 4, 16, 128}, DType::BFloat16);
  EXPECT_EQ(choose(sdpaArgs(qb, kb, kb, Value(), 0.0, true)), Backend::Flash);
  Value kb2 = cuda({2, 4, 32, 128}, DType::BFloat16);
  EXPECT_EQ(choose(sdpaArgs(qb, kb2, kb2, Value(), 0.0, true)), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(qb, kb2, kb2)), Backend::Flash);
  EXPECT_EQ(choose(sdpaArgs(qb, kb2, kb2, Value(), 0.1)), Backend::Flash);  // dropout in the kernel
  EXPECT_EQ(choose(sdpaArgs(qb, kb2, kb2, cuda({16, 32}, DType::BFloat16), 0.1)), Backend::Efficient);
  Value qf = cuda({2, 4, 16, 128}, DType::Float32);
  EXPECT_EQ(choose(sdpaArgs(qf, qf, qf, Value(), 0.0, true)), Backend::None);
  Value q12 = cuda({2, 4, 16, 12}, DType::Float16);
  EXPECT_EQ(choose(sdpaArgs(q12, q12, q12)), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(qb, kb, kb, cuda({16, 16}, DType::Bool))), Backend::Efficient);
  EXPECT_EQ(choose(sdpaArgs(qb, kb, kb, cuda({2, 1, 1, 16}, DType::BFloat16))), Backend::Efficient);
  // A mask that needs a gradient (T5's position bias): the memory-efficient backward gives it.
  EXPECT_EQ(choose(sdpaArgs(qb, kb, kb, cuda({1, 4, 16, 16}, DType::BFloat16)), true), Backend::Efficient);
  EXPECT_EQ(choose(sdpaArgs(qb, kb, kb, cuda({1, 4, 16, 16}, DType::BFloat16), 0.0, true), true), Backend::None);
  EXPECT_EQ(choose(sdpaArgs(qf, qf, qf, cuda({16, 16}, DType::Float32))), Backend::None);
  Value qwide = cuda({1, 1, 8, 256}, DType::BFloat16);
  EXPECT_EQ(choose(sdpaArgs(qwide, qwide, qwide, cuda({8, 8}, DType::Bool))), Backend::None);
  Value qbig = cuda({1, 1, 8, 512}, DType::Float16);
  EXPECT_EQ(choose(sdpaArgs(qbig, qbig, qbig)), Backend::None);
}

}  // namespace
}  // namespace thunder
