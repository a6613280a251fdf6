#include "transforms/conv_bias.h"

#include <cstdlib>
#include <cstring>

#include "ops/ltorch.h"

namespace thunder {
namespace {

/// The spatial rank of a call of ltorch.conv1d/2d/3d (0 for any other call).
size_t convRank(const BoundSymbol& b) {
  static const Symbol* convs[3] = {SymbolRegistry::get().find("ltorch.conv1d"), SymbolRegistry::get().find("ltorch.conv2d"),
                                   SymbolRegistry::get().find("ltorch.conv3d")};
  for (size_t k = 0; k < 3; ++k)
    if (b.sym == convs[k] && b.sym != nullptr) return k + 1;
  return 0;
}

bool splits(const BoundSymbol& b, bool anyDevice) {
  if (convRank(b) == 0 || b.args.size() < 3 || !b.args[0].isTensor() || !b.args[2].isTensor() || !b.output.isTensor())
    return false;
  const TensorProxy& x = b.args[0].tensor();
  const TensorProxy& bias = b.args[2].tensor();
  const TensorProxy& y = b.output.tensor();
  return (anyDevice || x.device.type == DeviceType::CUDA) && isFloating(x.dtype) && bias.ndim() == 1 && bias.dtype == y.dtype &&
         y.numel() > 0;
}

}  // namespace

std::optional<Trace> convBiasToAdd(const Trace& trace) {
  const char* env = std::getenv("THUNDER_CONV_BIAS_ADD");
  if (env != nullptr && std::strcmp(env, "0") == 0) return std::nullopt;
  const bool all = env != nullptr && std::strcmp(env, "all") == 0;
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || splits(b, all);
  if (!any) return std::nullopt;
  Trace out = trace.emptyCopy();
  for (const BoundSymbol& b : trace.bsyms) {
    if (!splits(b, all)) {
      out.bsyms.push_back(b);
      continue;
    }
    const TensorPtr& y = b.output.toTensor();
    const size_t k = convRank(b);
    appendTraced(out, [&] {
      std::vector<Value> args = b.args;
      args[2] = Value();
      Value c = call(*b.sym, args);
      // (1, C, 1, ...) against a batched output, (C, 1, ...) against an unbatched one.
      Shape s(y->ndim(), 1);
      s[y->ndim() - k - 1] = b.args[2].tensor().shape[0];
      return ltorch::op("add", {c, ltorch::op("reshape", {b.args[2], Value::ints(s)})});
    }, y, "convolution bias to add");
  }
  return out;
}

}  // namespace thunder
