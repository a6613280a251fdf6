// Default grad rules: the backward calls a rule traces. broadcast_in_dim's rule sums only over the
// dims that really broadcast; a length-1 output dim is dropped by the reshape alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/ltorch.h"
#include "ops/prims.h"
#include "test_util.h"
#include "transforms/autodiff.h"

namespace thunder {
namespace {

using testing::addInput;

/// The prims a call decomposed into, depth first.
void collectPrims(const BoundSymbol& b, std::vector<const BoundSymbol*>& out) {
  if (b.sym->isPrim()) {
    out.push_back(&b);
    return;
  }
  for (const BoundSymbol& s : b.subsymbols) collectPrims(s, out);
}

/// The dims of every prims.sum in the gradient trace of exp(broadcast_in_dim(x, shape, bdims)),
/// in order.
std::vector<std::vector<int64_t>> gradSums(const Shape& in, const Shape& shape,
                                           const std::vector<int64_t>& bdims) {
  ltorch::registerLTorch();
  registerGradRules();
  Trace t;
  Value x = addInput(t, "x", in);
  {
    TracingScope scope(t);
    t.output = prims::exp(prims::broadcast_in_dim(x, shape, bdims));
  }
  Trace g = gradTransform(t, 1, {});
  std::vector<const BoundSymbol*> ps;
  for (const BoundSymbol& b : g.bsyms) collectPrims(b, ps);
  std::vector<std::vector<int64_t>> sums;
  for (const BoundSymbol* p : ps)
    if (p->sym->name == "sum") sums.push_back(p->args[1].toInts());
  return sums;
}

using Sums = std::vector<std::vector<int64_t>>;

TEST(GradRules, BroadcastInDimDoesNotSumOverLengthOneDims) {
  // [4] -> [4, 1]: the new dim has length 1, so the gradient is a reshape, not a sum.
  EXPECT_EQ(gradSums({4}, {4, 1}, {0}), Sums{});
  // Length-1 dims everywhere, new or kept.
  EXPECT_EQ(gradSums({1}, {1, 1, 1}, {1}), Sums{});
  EXPECT_EQ(gradSums({4, 1}, {1, 4, 1}, {1, 2}), Sums{});
}

TEST(GradRules, BroadcastInDimSumsOverBroadcastDims) {
  // A length-1 input dim broadcast to 3, and a new dim of length 2; the new length-1 dim is not
  // summed.
  EXPECT_EQ(gradSums({4, 1}, {4, 3}, {0, 1}), (Sums{{1}}));
  EXPECT_EQ(gradSums({3}, {2, 1, 3}, {2}), (Sums{{0}}));
  EXPECT_EQ(gradSums({1, 3}, {2, 1, 5, 3}, {1, 3}), (Sums{{0, 2}}));
}

}  // namespace
}  // namespace thunder
