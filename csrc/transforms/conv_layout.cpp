#include "transforms/conv_layout.h"

#include <cstdlib>
#include <unordered_set>

namespace thunder {

bool channelsLastReshapeIsView(const Shape& shape, const Shape& to) {
  if (shape.size() < 3) return true;
  for (int64_t s : shape)
    if (s == 0) return true;
  // Channels-last is dims (0, 2, 3, ..., 1) in memory: the spatial dims merge with each other
  // and nothing else, the batch and channel dims stand alone. A reshape is a view exactly when
  // every boundary between such blocks (the element count of the dims after it) is also a
  // boundary between dims of the new shape. Dims of length 1 make no boundary.
  int64_t spatial = 1;
  for (size_t d = 2; d < shape.size(); ++d) spatial *= shape[d];
  std::vector<int64_t> needed;
  if (spatial > 1 && shape[1] > 1) needed.push_back(spatial);   // channel | spatial
  if (shape[0] > 1 && shape[1] * spatial > 1) needed.push_back(shape[1] * spatial);  // batch | rest
  std::unordered_set<int64_t> boundaries;
  int64_t suffix = 1;
  for (size_t d = to.size(); d-- > 0;) {
    suffix *= to[d];
    boundaries.insert(suffix);
  }
  for (int64_t n : needed)
    if (!boundaries.count(n)) return false;
  return true;
}

namespace {

bool halfConvolution(const BoundSymbol& b) {
  for (const TensorPtr& x : b.inputTensors())
    if (x->ndim() == 4 && x->device.type == DeviceType::CUDA &&
        (x->dtype == DType::BFloat16 || x->dtype == DType::Float16))
      return true;
  return false;
}

/// Walks the prims in program order, following the values a convolution's layout reaches.
struct LayoutScan {
  int convolutions = 0;
  int regroupings = 0;
  std::unordered_set<const TensorProxy*> reached;

  bool reads(const BoundSymbol& b) const {
    for (const TensorPtr& x : b.inputTensors())
      if (x->ndim() == 4 && reached.count(x.get())) return true;
    return false;
  }
  void reach(const BoundSymbol& b) {
    for (const TensorPtr& y : b.outputTensors())
      if (y->ndim() == 4) reached.insert(y.get());
  }
  void scan(const BoundSymbol& b) {
    if (!b.sym->isPrim()) {
      for (const BoundSymbol& s : b.subsymbols) scan(s);
      return;
    }
    const std::string& name = b.sym->name;
    if (name.rfind("convolution", 0) == 0) {
      if (halfConvolution(b)) {
        ++convolutions;
        reach(b);
      }
      return;
    }
    if (!reads(b)) return;
    if (name == "reshape") {
      const TensorPtr& x = b.args[0].toTensor();
      if (!channelsLastReshapeIsView(x->shape, b.output.toTensor()->shape)) ++regroupings;
      return;
    }
    // Elementwise math keeps its input's layout (the fuser iterates in memory order), and so do
    // ATen's normalizations, poolings and resizes; permutes, slices and the rest make other
    // tensors.
    if (!b.sym->hasTag(kShapeOp)) reach(b);
  }
};

}  // namespace

ConvLayout convolutionLayout(const Trace& trace) {
  LayoutScan s;
  for (const BoundSymbol& b : trace.bsyms) s.scan(b);
  if (s.convolutions == 0) return ConvLayout::None;
  static const bool nchw = std::getenv("THUNDER_CONV_NCHW") != nullptr;
  return nchw || s.regroupings * 4 >= s.convolutions ? ConvLayout::AsLaidOut : ConvLayout::ChannelsLast;
}

}  // namespace thunder
