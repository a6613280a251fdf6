// Broadcasting (clang): shapes against torch.broadcast_shapes, and the broadcast_in_dim calls that
// expanding records.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/clang.h"
#include "test_util.h"

namespace thunder {
namespace {

using testing::expectError;
using testing::tensor;

struct BroadcastCase {
  std::vector<Shape> shapes;
  Shape expected;
};

TEST(Broadcast, ShapesMatchPyTorch) {
  // Each row was read off torch.broadcast_shapes with the same shapes.
  const BroadcastCase cases[] = {
      {{{2, 3}, {3}}, {2, 3}},
      {{{2, 1}, {1, 3}}, {2, 3}},
      {{{}, {4}}, {4}},
      {{{5, 1, 4}, {3, 1}}, {5, 3, 4}},
      {{{0}, {1}}, {0}},
      {{{2, 0, 3}, {1, 3}}, {2, 0, 3}},
      {{{1}, {1}}, {1}},
      {{{8, 1, 6, 1}, {7, 1, 5}}, {8, 7, 6, 5}},
      {{{3}, {}, {2, 1}}, {2, 3}},
      {{{}, {}}, {}},
      {{{1, 0}, {5, 1}}, {5, 0}},
      {{{4, 5}}, {4, 5}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(clang::broadcastShapes(c.shapes, "op"), c.expected);
    // Broadcasting is symmetric.
    std::vector<Shape> reversed(c.shapes.rbegin(), c.shapes.rend());
    EXPECT_EQ(clang::broadcastShapes(reversed, "op"), c.expected);
  }
}

TEST(Broadcast, IncompatibleShapesRaiseRuntimeError) {
  // torch.broadcast_shapes raises a RuntimeError for each of these.
  expectError([] { clang::broadcastShapes({{2, 3}, {4}}, "ltorch.add"); }, ErrorKind::Runtime,
              "ltorch.add: shapes (2, 3) and (4,) cannot be broadcast together (3 != 4 at "
              "dimension 1)");
  expectError([] { clang::broadcastShapes({{0}, {2}}, "op"); }, ErrorKind::Runtime,
              "op: shapes (0,) and (2,) cannot be broadcast together (0 != 2 at dimension 0)");
  expectError([] { clang::broadcastShapes({{2, 3}, {3, 2}}, "op"); }, ErrorKind::Runtime,
              "cannot be broadcast together");
  expectError([] { clang::broadcastShapes({{3}, {4}, {3}}, "op"); }, ErrorKind::Runtime,
              "op: shapes (3,) and (4,) and (3,) cannot be broadcast together");
}

/// The shape and broadcast dimensions of a recorded prims.broadcast_in_dim.
void expectBroadcastInDim(const BoundSymbol& b, const Shape& shape, const std::vector<int64_t>& bdims) {
  ASSERT_EQ(b.sym->id(), "prims.broadcast_in_dim");
  EXPECT_EQ(b.args[1].toInts(), shape);
  EXPECT_EQ(b.args[2].toInts(), bdims);
  EXPECT_EQ(b.output.tensor().shape, shape);
}

TEST(Broadcast, ExpandToRecordsBroadcastInDim) {
  Trace t;
  TracingScope scope(t);
  Value a = tensor({3}), b = tensor({2, 1, 3});
  Value x = clang::expandTo(a, {4, 2, 3}, "op");
  Value y = clang::expandTo(b, {4, 2, 5, 3}, "op");
  ASSERT_EQ(t.bsyms.size(), 2u);
  expectBroadcastInDim(t.bsyms[0], {4, 2, 3}, {2});
  expectBroadcastInDim(t.bsyms[1], {4, 2, 5, 3}, {1, 2, 3});
  // Expanding to the same shape is not a call.
  EXPECT_EQ(clang::expandTo(a, {3}, "op"), a);
  EXPECT_EQ(t.bsyms.size(), 2u);
}

TEST(Broadcast, ExpandToErrors) {
  Trace t;
  TracingScope scope(t);
  expectError([] { clang::expandTo(tensor({2, 3}), {3}, "ltorch.expand"); }, ErrorKind::Runtime,
              "ltorch.expand: cannot expand shape (2, 3) to (3,)");
  expectError([] { clang::expandTo(tensor({2, 3}), {4, 3}, "ltorch.expand"); },
              ErrorKind::Runtime, "ltorch.expand: cannot expand shape (2, 3) to (4, 3)");
  EXPECT_TRUE(t.bsyms.empty());
}

TEST(Broadcast, MaybeBroadcastExpandsOnlyWhatDiffers) {
  Trace t;
  TracingScope scope(t);
  Value a = tensor({2, 1}), b = tensor({3}), c = tensor({2, 3});
  std::vector<Value> out = clang::maybeBroadcast({a, Value(1.5), b, c}, "op");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].tensor().shape, (Shape{2, 3}));
  EXPECT_EQ(out[1], Value(1.5));  // numbers pass through
  EXPECT_EQ(out[2].tensor().shape, (Shape{2, 3}));
  EXPECT_EQ(out[3], c);  // already of the common shape: the same proxy
  ASSERT_EQ(t.bsyms.size(), 2u);
  expectBroadcastInDim(t.bsyms[0], {2, 3}, {0, 1});
  expectBroadcastInDim(t.bsyms[1], {2, 3}, {1});

  // One tensor has nothing to broadcast against.
  std::vector<Value> single = clang::maybeBroadcast({tensor({2}), Value(int64_t{1})}, "op");
  EXPECT_EQ(single[0].tensor().shape, Shape{2});
  EXPECT_EQ(t.bsyms.size(), 2u);
}

TEST(Broadcast, BinaryBroadcastsThenCallsThePrim) {
  prims::registerPrims();
  Trace t;
  TracingScope scope(t);
  Value out = clang::binary(prims::add, tensor({4, 1}), tensor({}), PromotionKind::Default, "op");
  EXPECT_EQ(out.tensor().shape, (Shape{4, 1}));
  ASSERT_EQ(t.bsyms.size(), 2u);
  expectBroadcastInDim(t.bsyms[0], {4, 1}, {});
  EXPECT_EQ(t.bsyms[1].sym->id(), "prims.add");
  expectError(
      [] { clang::binary(prims::mul, tensor({2}), tensor({3}), PromotionKind::Default, "ltorch.mul"); },
      ErrorKind::Runtime, "ltorch.mul: shapes (2,) and (3,) cannot be broadcast together");
}

TEST(Broadcast, WhereBroadcastsAllThree) {
  prims::registerPrims();
  Trace t;
  TracingScope scope(t);
  // torch.where(cond[3, 1], a[1, 4], 0.0).shape == (3, 4)
  Value out = clang::where(tensor({3, 1}, DType::Bool), tensor({1, 4}), Value(0.0), "ltorch.where");
  EXPECT_EQ(out.tensor().shape, (Shape{3, 4}));
  EXPECT_EQ(out.tensor().dtype, DType::Float32);
  EXPECT_EQ(t.bsyms.back().sym->id(), "prims.where");
}

TEST(Broadcast, KeepDimsReinsertsReducedDims) {
  prims::registerPrims();
  Trace t;
  TracingScope scope(t);
  Value r = tensor({3});
  Value k = clang::keepDims(r, {2, 3, 4}, {0, 2});
  EXPECT_EQ(k.tensor().shape, (Shape{1, 3, 1}));
  expectBroadcastInDim(t.bsyms.back(), {1, 3, 1}, {1});
  EXPECT_EQ(clang::keepDims(r, {3}, {}), r);
}

}  // namespace
}  // namespace thunder
