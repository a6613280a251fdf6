// Code generation helpers that are pure arithmetic: the 32-bit division magic numbers and the
// row-kernel launch shapes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "codegen/fusion_codegen.h"

using namespace thunder::codegen;

namespace {

// What the generated CUDA does with a magic number: (umulhi(n, magic) + n) >> shift.
uint32_t magicDivide(uint32_t n, int64_t magic, int64_t shift) {
  uint32_t hi = static_cast<uint32_t>((uint64_t(n) * uint64_t(magic)) >> 32);
  return (hi + n) >> shift;
}

}  // namespace

TEST(DivisionMagic, MatchesDivisionForEveryDivisorShape) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> divisors = {1, 2, 3, 5, 7, 8, 64, 100, 127, 128, 129, 1000, 4096, 8191, 8192,
                                   65535, 65536, 1 << 20, (1 << 20) + 1, 1000003, (int64_t(1) << 30) + 7,
                                   (int64_t(1) << 31) - 1, int64_t(1) << 31};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<int64_t>(rng() % (uint64_t(1) << 31)));
  for (int64_t d : divisors) {
    int64_t magic, shift;
    divisionMagic(d, magic, shift);
    ASSERT_GE(magic, 0);
    ASSERT_LE(magic, int64_t(0xffffffff));
    std::vector<uint32_t> ns = {0, 1, static_cast<uint32_t>(d - 1), static_cast<uint32_t>(d), 0x7fffffffu};
    if (d < (int64_t(1) << 31)) ns.push_back(static_cast<uint32_t>(d + 1));
    for (int k = 0; k < 2000; ++k) ns.push_back(static_cast<uint32_t>(rng() & 0x7fffffffu));
    for (uint32_t n : ns) ASSERT_EQ(magicDivide(n, magic, shift), n / uint64_t(d)) << n << " / " << d;
  }
}

TEST(RowLaunch, ShortRowsTakeAWarpLongRowsABlock) {
  RowLaunch s = chooseRowLaunch(100, 4);  // 25 chunks: one warp, one chunk per lane
  EXPECT_TRUE(s.warp);
  EXPECT_EQ(s.items, 1);
  RowLaunch l = chooseRowLaunch(8192, 4);  // 2048 chunks of 4 floats: 256 threads of 8
  EXPECT_FALSE(l.warp);
  EXPECT_EQ(l.threads, 256);
  EXPECT_EQ(l.items, 8);
  RowLaunch h = chooseRowLaunch(8192, 8);  // 1024 chunks of 8 bf16: 256 threads of 4
  EXPECT_EQ(h.threads, 256);
  EXPECT_EQ(h.items, 4);
  RowLaunch huge = chooseRowLaunch(int64_t(1) << 20, 4);  // more than 16 chunks per thread
  EXPECT_EQ(huge.items, 0);
  for (int64_t L : {1, 31, 1000, 2048, 4096, 65536, 262144})
    for (int vec : {1, 4, 8})
      for (int64_t rows : {int64_t(-1), int64_t(1), kFewRows - 1, kFewRows}) {
        RowLaunch r = chooseRowLaunch(L, vec, 0, false, rows);
        int64_t chunks = (L + vec - 1) / vec;
        if (r.items > 0) EXPECT_GE(int64_t(r.items) * (r.warp ? 32 : r.threads), chunks) << L << " " << vec;
        EXPECT_LE(r.threads, 1024);
      }
}

TEST(RowLaunch, FewRowsTakeABlockEach) {
  // Decoding's [1, 2048] bf16 row: 256 chunks of 8, one per thread of one block.
  RowLaunch one = chooseRowLaunch(2048, 8, 0, false, 1);
  EXPECT_FALSE(one.warp);
  EXPECT_EQ(one.threads, 256);
  EXPECT_EQ(one.items, 1);
  EXPECT_TRUE(chooseRowLaunch(2048, 8, 0, false, kFewRows).warp);  // enough rows: a warp each
  EXPECT_TRUE(chooseRowLaunch(512, 8, 0, true, 1).warp);  // column sums of short rows keep theirs
  EXPECT_TRUE(chooseRowLaunch(100, 4, 0, false, 1).warp);  // one warp's worth: nothing to spread
}

TEST(RowLaunch, WideColumnSumsTakeABlockPerRow) {
  // A norm's backward with its weight gradient: a warp per row would hold 8 chunks and 64 float
  // accumulators per lane (168 registers); a block per row holds one chunk per thread.
  RowLaunch norm = chooseRowLaunch(2048, 8, 0, true);
  EXPECT_FALSE(norm.warp);
  EXPECT_EQ(norm.threads, 256);
  EXPECT_EQ(norm.items, 1);
  RowLaunch wide = chooseRowLaunch(8192, 4, 0, true);  // 2048 chunks of 4 floats
  EXPECT_EQ(wide.threads, 1024);
  EXPECT_EQ(wide.items, 2);
  RowLaunch narrow = chooseRowLaunch(512, 8, 0, true);  // 64 chunks: two per lane of a warp
  EXPECT_TRUE(narrow.warp);
  EXPECT_EQ(narrow.items, 2);
  EXPECT_TRUE(chooseRowLaunch(2048, 8, 0, false).warp);  // no columns: a warp per row
}

// ---- loads and stores at indices (kernel_ir.h: KInput::gatherDim, KOutput::scatterDim) --------

#include "codegen/kernel_ir.h"
#include "ops/prims.h"
#include "test_util.h"

namespace {

using thunder::DType;
using thunder::Shape;
using thunder::Trace;
using thunder::TracingScope;
using thunder::Value;
namespace prims = thunder::prims;
using thunder::testing::addInput;
using thunder::testing::kCuda0;
using thunder::testing::kCpu;

/// The prims of `t` as one region, lowered (inputs: the trace's inputs; outputs: `outs`).
KernelProgram lower(const Trace& t, const std::vector<Value>& outs) {
  std::vector<thunder::TensorPtr> outputs;
  for (const Value& v : outs) outputs.push_back(v.toTensor());
  KernelProgram p;
  std::string why;
  EXPECT_TRUE(lowerRegion("k", t.bsyms, t.inputs, outputs, p, why)) << why;
  return p;
}

}  // namespace

TEST(Gather, TableRowsAtAPositionAreLoadedThroughTheIndex) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {3, 8}, DType::Float32, kCuda0);
  Value table = addInput(t, "table", {16, 8}, DType::Float32, kCuda0);
  Value pos = addInput(t, "pos", {3}, DType::Int64, kCuda0);
  Value y;
  {
    TracingScope scope(t);
    y = prims::mul(x, prims::take(table, pos, 0));
  }
  KernelProgram p = lower(t, {y});
  ASSERT_TRUE(p.indexed());
  int gathers = 0;
  for (const KInput& in : p.inputs) {
    if (!in.gathers()) continue;
    ++gathers;
    EXPECT_EQ(in.tensor->name, "table");
    EXPECT_EQ(in.gatherDim, 0);
    EXPECT_EQ(in.dimMap, (std::vector<int>{-1, 1}));  // dim 0 is read at the index only
    const KNode& index = p.nodes[in.gatherNode];
    ASSERT_EQ(index.kind, KNode::Kind::Load);
    EXPECT_EQ(p.inputs[index.input].tensor->name, "pos");
    EXPECT_EQ(p.inputs[index.input].dimMap, (std::vector<int>{0, -1}));
  }
  EXPECT_EQ(gathers, 1);
  // Element by element, each index checked against the table's 16 rows.
  CudaVariant v = predictCudaVariant(p);
  EXPECT_EQ(v.vec, 1);
  std::string src = emitCuda(p, v);
  EXPECT_NE(src.find("thunder_index((int64_t)v"), std::string::npos);
  EXPECT_NE(src.find(", 16) * (IdxT)g.v["), std::string::npos);
  EXPECT_NE(src.find("__trap()"), std::string::npos);
}

TEST(Gather, RowKernelsTakeTheIndexPerRow) {
  // An embedding's rows normalized: the row kernel's base offset of the table adds the token's
  // row; an index that varies along the row cannot be read that way.
  prims::registerPrims();
  Trace t;
  Value idx = addInput(t, "idx", {2, 5}, DType::Int64, kCuda0);
  Value w = addInput(t, "w", {50, 64}, DType::Float32, kCuda0);
  Value y;
  {
    TracingScope scope(t);
    Value e = prims::embedding(idx, w, std::nullopt);
    Value s = prims::sum(prims::mul(e, e), {2});
    y = prims::mul(e, prims::broadcast_in_dim(prims::rsqrt(s), {2, 5, 64}, {0, 1}));
  }
  KernelProgram p = lower(t, {y});
  ASSERT_TRUE(p.rowKernel());
  std::string src = emitCuda(p);
  EXPECT_NE(src.find("thunder_index((int64_t)in"), std::string::npos) << src;
}

TEST(ChannelSum, IteratesWithTheChannelLast) {
  // A layer scale's gradient: g * x summed over (0, 2, 3) of [N, C, H, W], and g * gamma stored.
  // The region iterates [N, H, W, C] (order {0, 2, 3, 1}), the sum is its column output, the
  // full-size output is stored in that order, and the bf16 activations are predicted channels-last
  // (read at unit stride along C, vectorized).
  prims::registerPrims();
  Trace t;
  Value g = addInput(t, "g", {4, 24, 6, 10}, DType::BFloat16, kCuda0);
  Value x = addInput(t, "x", {4, 24, 6, 10}, DType::BFloat16, kCuda0);
  Value gamma = addInput(t, "gamma", {1, 24, 1, 1}, DType::Float32, kCuda0);
  Value gx, sum;
  {
    TracingScope scope(t);
    Value gf = prims::convert_element_type(g, DType::Float32);
    Value xf = prims::convert_element_type(x, DType::Float32);
    sum = prims::sum(prims::mul(gf, xf), {0, 2, 3});
    gx = prims::convert_element_type(prims::mul(gf, prims::broadcast_in_dim(gamma, {4, 24, 6, 10}, {0, 1, 2, 3})),
                                     DType::BFloat16);
  }
  EXPECT_TRUE(isPermutedColumnSum(t.bsyms[3]));  // (after two conversions and the product)
  KernelProgram p = lower(t, {sum, gx});
  EXPECT_EQ(p.order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(p.iterShape, (Shape{4, 6, 10, 24}));
  ASSERT_EQ(p.outputs.size(), 2u);
  EXPECT_TRUE(p.outputs[0].column);
  EXPECT_FALSE(p.outputs[1].column || p.outputs[1].reduced);
  for (const KInput& in : p.inputs)
    if (in.tensor->name == "x") EXPECT_EQ(in.dimMap, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_FALSE(permutableIteration(p));
  CudaVariant v = predictCudaVariant(p);
  EXPECT_TRUE(v.row);
  EXPECT_GT(v.vec, 1);
  EXPECT_FALSE(emitCuda(p, v).empty());
  // Sums over other dims, or keeping the last one, are not channel sums.
  Trace u;
  Value y = addInput(u, "y", {4, 24, 6, 10}, DType::Float32, kCuda0);
  {
    TracingScope scope(u);
    prims::sum(y, {0, 1, 3});
    prims::sum(y, {0, 1, 2});
    prims::sum(y, {0, 2});
  }
  for (const thunder::BoundSymbol& b : u.bsyms) EXPECT_FALSE(isPermutedColumnSum(b)) << b.args[1].toInts().size();
}

TEST(ChannelsLast, FirstCallVariantsPredictedBothWays) {
  // ConvNeXt's LayerNorm over channels: a row kernel over [N, H, W, C], the permute of a
  // convolution's [N, C, H, W] output. As traced (contiguous NCHW) the rows are read at stride
  // H * W: one element at a time; at run time the convolution's output is channels-last and the
  // rows are read 16 bytes at a time. With the trace's hint both variants are compiled ahead
  // (the first call of a ConvNeXt-T step compiled 76 kernels on its critical path).
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {4, 64, 6, 10}, DType::BFloat16, kCuda0);
  Value y;
  {
    TracingScope scope(t);
    Value xf = prims::convert_element_type(prims::transpose(x, {0, 2, 3, 1}), DType::Float32);
    Value s = prims::sum(prims::mul(xf, xf), {3});
    y = prims::convert_element_type(
        prims::mul(xf, prims::broadcast_in_dim(prims::rsqrt(s), {4, 6, 10, 64}, {0, 1, 2})), DType::BFloat16);
  }
  KernelProgram p = lower(t, {y});
  ASSERT_TRUE(p.rowKernel());
  std::vector<CudaVariant> plain = predictCudaVariants(p, 132);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].vec, 1);
  p.channelsLastHint = true;
  std::vector<CudaVariant> both = predictCudaVariants(p, 132);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].entry(p.name), plain[0].entry(p.name));
  EXPECT_EQ(both[1].vec, 8);
  // A program without 4-D inputs compiles one.
  Trace u;
  Value a = addInput(u, "a", {240, 4096}, DType::BFloat16, kCuda0);
  Value b;
  {
    TracingScope scope(u);
    b = prims::neg(prims::exp(a));
  }
  KernelProgram q = lower(u, {b});
  q.channelsLastHint = true;
  EXPECT_EQ(predictCudaVariants(q, 132).size(), 1u);
}

TEST(Scatter, AnOutputIsStoredIntoTheBufferAtTheIndex) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {1, 4, 1, 8}, DType::BFloat16, kCuda0);
  Value cache = addInput(t, "cache", {1, 4, 64, 8}, DType::BFloat16, kCuda0);
  Value pos = addInput(t, "pos", {1}, DType::Int64, kCuda0);
  Value k;
  {
    TracingScope scope(t);
    k = prims::convert_element_type(prims::mul(prims::convert_element_type(x, DType::Float32), 2.0), DType::BFloat16);
  }
  KernelProgram p = lower(t, {k});
  auto updated = std::make_shared<thunder::TensorProxy>(cache.tensor());
  updated->name = "updated";
  std::string why;
  ASSERT_TRUE(addScatteredOutput(p, k.toTensor(), cache.toTensor(), 2, pos.toTensor(), updated, false, why)) << why;
  ASSERT_EQ(p.outputs.size(), 1u);  // k itself is not stored
  const KOutput& o = p.outputs[0];
  EXPECT_TRUE(o.scattered());
  EXPECT_EQ(o.tensor, updated);
  EXPECT_EQ(o.into, cache.toTensor());
  std::string src = emitCuda(p);
  EXPECT_NE(src.find(", 64) * (IdxT)g.v["), std::string::npos) << src;  // checked against 64 positions

  // Refused: the buffer's shape differs elsewhere, the index has the wrong length, the buffer's
  // dtype differs, the kernel reads the buffer (x, of one position: a race with its own stores).
  KernelProgram q = lower(t, {k});
  Value wide = thunder::testing::tensor({1, 5, 64, 8}, DType::BFloat16, kCuda0, "wide");
  EXPECT_FALSE(addScatteredOutput(q, k.toTensor(), wide.toTensor(), 2, pos.toTensor(), updated, false, why));
  EXPECT_EQ(why, "the buffer's shape differs outside the updated dim");
  why.clear();
  Value two = thunder::testing::tensor({2}, DType::Int64, kCuda0, "two");
  EXPECT_FALSE(addScatteredOutput(q, k.toTensor(), cache.toTensor(), 2, two.toTensor(), updated, false, why));
  EXPECT_EQ(why, "the index is not an int64 vector of the updated dim's length");
  why.clear();
  Value i32 = thunder::testing::tensor({1}, DType::Int32, kCuda0, "i32");  // eager raises for it
  EXPECT_FALSE(addScatteredOutput(q, k.toTensor(), cache.toTensor(), 2, i32.toTensor(), updated, false, why));
  why.clear();
  Value f32 = thunder::testing::tensor({1, 4, 64, 8}, DType::Float32, kCuda0, "f32");
  EXPECT_FALSE(addScatteredOutput(q, k.toTensor(), f32.toTensor(), 2, pos.toTensor(), updated, false, why));
  EXPECT_EQ(why, "the buffer's rank or dtype differs");
  why.clear();
  EXPECT_FALSE(addScatteredOutput(q, k.toTensor(), x.toTensor(), 2, pos.toTensor(), updated, false, why));
  EXPECT_EQ(why, "the kernel reads the buffer it would store into");
}

TEST(AnonymousSource, ProgramsDifferingOnlyInNamesShareOneModule) {
  // A layer's kernel traced twice (other tensor and program names) has one key, which is the
  // source emitted for the program under one name for all; another computation has another key.
  prims::registerPrims();
  auto program = [](const std::string& in, const std::string& kernel, double scale) {
    Trace t;
    Value x = addInput(t, in + "x", {4, 64}, DType::BFloat16, kCuda0);
    Value w = addInput(t, in + "w", {64}, DType::BFloat16, kCuda0);
    Value y;
    {
      TracingScope scope(t);
      Value xf = prims::convert_element_type(x, DType::Float32);
      Value wf = prims::broadcast_in_dim(prims::convert_element_type(w, DType::Float32), {4, 64}, {1});
      y = prims::convert_element_type(prims::mul(prims::mul(xf, wf), scale), DType::BFloat16);
    }
    KernelProgram p = lower(t, {y});
    p.name = kernel;
    return p;
  };
  KernelProgram a = program("layer0_", "nvFusion3", 2.0), b = program("layer7_", "nvFusion31", 2.0);
  KernelProgram c = program("layer0_", "nvFusion4", 3.0);
  std::string ka = anonymousSource(emitCuda(a), a.name);
  EXPECT_EQ(ka, anonymousSource(emitCuda(b), b.name));
  EXPECT_NE(ka, anonymousSource(emitCuda(c), c.name));
  KernelProgram anonymous = b;
  anonymous.name = "thunder_kernel";
  std::string unnamed = emitCuda(anonymous);
  for (int line = 0; line < 3; ++line) unnamed.erase(0, unnamed.find('\n') + 1);
  EXPECT_EQ(ka, unnamed);
  EXPECT_EQ(ka.find("nvFusion"), std::string::npos);
  // The C++ kernels alike, with the one entry point the runtime looks up.
  std::string pattern(a.inputs.size(), '1');
  std::string ca = anonymousSource(emitCpp(a, pattern), a.name);
  EXPECT_EQ(ca, anonymousSource(emitCpp(b, pattern), b.name));
  EXPECT_NE(ca, anonymousSource(emitCpp(c, pattern), c.name));
  EXPECT_NE(ca.find(std::string("void ") + kAnonymousEntry + "("), std::string::npos);
}

TEST(RowLaunch, NarrowRowsTakeSeveralChunksPerLane) {
  // 49 single elements (Swin's attention rows in bf16): 16 lanes of 4 chunks, two rows per warp.
  RowLaunch n = chooseRowLaunch(49, 1);
  EXPECT_TRUE(n.warp);
  EXPECT_EQ(n.tpr, 16);
  EXPECT_EQ(n.items, 4);
  // Wide accesses keep a chunk per lane (ConvNeXt's 96 bf16 channels: 12 chunks of 8, 16 lanes).
  RowLaunch w = chooseRowLaunch(96, 8);
  EXPECT_EQ(w.tpr, 16);
  EXPECT_EQ(w.items, 1);
  // Kernels that gather keep a warp per row.
  EXPECT_EQ(chooseRowLaunch(49, 1, 0, false, -1, /*packed=*/false).tpr, 32);
  for (int64_t L : {1, 3, 31, 49, 97, 255, 1000})
    for (int vec : {1, 2, 4}) {
      RowLaunch r = chooseRowLaunch(L, vec);
      if (r.warp) EXPECT_GE(int64_t(r.items) * r.tpr, (L + vec - 1) / vec) << L << " " << vec;
    }
}

TEST(RowKernel, RowsSplitForAReshape) {
  // A sum of rows over [2, 12, 16] and the same values stored as [2, 4, 3, 16] (a residual sum and
  // its [B, H, W, C] view): one row kernel over the finer rows, the reduced value stored as [2, 12].
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2, 12, 16}, DType::Float32, kCpu);
  Value y = addInput(t, "y", {2, 12, 16}, DType::Float32, kCpu);
  Value view, rowSum;
  {
    TracingScope scope(t);
    Value s = prims::add(x, y);
    view = prims::reshape(s, {2, 4, 3, 16});
    rowSum = prims::sum(s, {2});
  }
  KernelProgram p = lower(t, {view, rowSum});
  EXPECT_EQ(p.iterShape, (Shape{2, 4, 3, 16}));
  ASSERT_EQ(p.outputs.size(), 2u);
  EXPECT_FALSE(p.outputs[0].reduced);
  EXPECT_TRUE(p.outputs[1].reduced);
  EXPECT_EQ(p.numPhases, 1);
  EXPECT_FALSE(emitCpp(p, std::string(p.inputs.size(), '1')).empty());
  EXPECT_FALSE(emitCuda(p).empty());
  // A reshape that splits the reduced dim itself cannot be a row kernel.
  Trace u;
  Value a = addInput(u, "a", {2, 12, 16}, DType::Float32, kCpu);
  Value split, sum;
  {
    TracingScope scope(u);
    Value e = prims::exp(a);
    split = prims::reshape(e, {2, 12, 4, 4});
    sum = prims::sum(e, {2});
  }
  KernelProgram q;
  std::string why;
  EXPECT_FALSE(lowerRegion("k", u.bsyms, u.inputs, {split.toTensor(), sum.toTensor()}, q, why));
  EXPECT_FALSE(why.empty());
}
