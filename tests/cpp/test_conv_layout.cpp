// The layout a trace's convolutions run in (transforms/conv_layout.h): which reshapes a
// channels-last tensor takes as views, and the per-trace decision.
#include <gtest/gtest.h>

#include <vector>

#include "ops/prims.h"
#include "test_util.h"
#include "transforms/conv_layout.h"

namespace thunder {
namespace {

using testing::addInput;
using testing::kCpu;
using testing::kCuda0;

TEST(ConvLayout, ReshapesThatAChannelsLastTensorTakesAsViews) {
  struct Case {
    Shape from, to;
    bool view;
  };
  const std::vector<Case> cases = {
      {{8, 128, 64, 64}, {8, 32, 16384}, false},     // GroupNorm's groups: channels with pixels
      {{8, 128, 64, 64}, {8, 128, 4096}, true},      // pixels merged (one group per channel)
      {{8, 768, 14, 14}, {8, 768, 196}, true},       // ViT's patches: flatten(2)
      {{8, 512, 1, 1}, {8, 512}, true},              // a pooled classifier head
      {{8, 512, 7, 7}, {8, 25088}, false},           // VGG's flatten of a 7x7 map
      {{8, 128, 64, 64}, {8, 32, 4, 64, 64}, true},  // channels split
      {{1, 128, 8, 8}, {128, 64}, true},             // batch of one: channels, then pixels
      {{8, 128, 64, 64}, {1024, 64, 64}, false},     // batch merged with channels
      {{8, 0, 64, 64}, {8, 0}, true},                // no elements
  };
  for (const Case& c : cases)
    EXPECT_EQ(channelsLastReshapeIsView(c.from, c.to), c.view)
        << "from " << ::testing::PrintToString(c.from) << " to " << ::testing::PrintToString(c.to);
}

/// A trace of `convs` convolutions on x (bf16 [2, 8, 16, 16] on `device`), each followed by a
/// sigmoid; after the first, `regroup` reshapes its output to GroupNorm's [2, 2, 1024] and back.
Trace convolutions(int convs, bool regroup, Device device = kCuda0, bool regroupOther = false) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2, 8, 16, 16}, DType::BFloat16, device);
  Value w = addInput(t, "w", {8, 8, 3, 3}, DType::BFloat16, device);
  Value other = addInput(t, "other", {2, 8, 16, 16}, DType::Float32, device);
  {
    TracingScope scope(t);
    Value y = x;
    for (int i = 0; i < convs; ++i) {
      y = prims::convolution(y, w, Value(), {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1);
      Value f = prims::convert_element_type(y, DType::Float32);
      if (i == 0 && regroup) f = prims::reshape(prims::reshape(f, {2, 2, 1024}), {2, 8, 16, 16});
      y = prims::convert_element_type(prims::sigmoid(f), DType::BFloat16);
    }
    if (regroupOther) {
      Value grouped = prims::reshape(prims::reshape(other, {2, 2, 1024}), {2, 8, 16, 16});
      y = prims::add(prims::convert_element_type(y, DType::Float32), grouped);
    }
    t.output = y;
  }
  return t;
}

TEST(ConvLayout, ChannelsLastUnlessReshapesRegroupTheConvolutionsOutputs) {
  EXPECT_EQ(convolutionLayout(convolutions(1, false)), ConvLayout::ChannelsLast);
  // GroupNorm after a convolution: a copy to row-major and one back to channels-last.
  EXPECT_EQ(convolutionLayout(convolutions(1, true)), ConvLayout::AsLaidOut);
  // One regrouping against four convolutions is enough to keep the layouts; against five, not.
  EXPECT_EQ(convolutionLayout(convolutions(4, true)), ConvLayout::AsLaidOut);
  EXPECT_EQ(convolutionLayout(convolutions(5, true)), ConvLayout::ChannelsLast);
  // A reshape of a tensor no convolution made does not count.
  EXPECT_EQ(convolutionLayout(convolutions(1, false, kCuda0, true)), ConvLayout::ChannelsLast);
  // Only CUDA convolutions run channels-last: nothing to decide on the CPU.
  EXPECT_EQ(convolutionLayout(convolutions(1, true, kCpu)), ConvLayout::None);
}

}  // namespace
}  // namespace thunder
