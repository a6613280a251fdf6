#include "transforms/cat_reshapes.h"

#include <unordered_map>

#include "ops/ltorch.h"
#include "transforms/dce.h"
#include "transforms/rewrites.h"

namespace thunder {
namespace {

/// The sources of a concatenation along the last dim of flattened [..., H_i, D] pieces, or
/// nothing.
std::optional<std::vector<TensorPtr>> flattenedPieces(
    const BoundSymbol& b, const std::unordered_map<const TensorProxy*, const BoundSymbol*>& reshapeOf) {
  if (b.sym->module != "ltorch" || b.sym->name != "cat" || b.args.size() < 2 || !b.args[0].isSequence() ||
      !b.args[1].isInt() || !b.output.isTensor())
    return std::nullopt;
  const TensorProxy& out = b.output.tensor();
  const int64_t r = out.ndim();
  const std::vector<Value>& pieces = b.args[0].items();
  if (r < 1 || pieces.size() < 2 || (b.args[1].toInt() + r) % r != r - 1 || out.numel() == 0) return std::nullopt;
  std::vector<TensorPtr> xs;
  for (const Value& p : pieces) {
    if (!p.isTensor()) return std::nullopt;
    auto it = reshapeOf.find(p.toTensor().get());
    if (it == reshapeOf.end()) return std::nullopt;
    const TensorPtr& x = it->second->args[0].toTensor();
    const TensorProxy& piece = p.tensor();
    if (x->ndim() != r + 1 || piece.ndim() != r || x->dtype != out.dtype || piece.symbolic() || x->symbolic())
      return std::nullopt;
    for (int64_t d = 0; d + 1 < r; ++d)
      if (x->shape[d] != piece.shape[d]) return std::nullopt;
    if (x->shape[r - 1] * x->shape[r] != piece.shape[r - 1]) return std::nullopt;
    if (!xs.empty() && x->shape[r] != xs.front()->shape[r]) return std::nullopt;
    xs.push_back(x);
  }
  return xs;
}

}  // namespace

std::optional<Trace> catOfFlattenedPieces(const Trace& trace) {
  std::unordered_map<const TensorProxy*, const BoundSymbol*> reshapeOf;
  std::unordered_map<size_t, std::vector<TensorPtr>> rewrite;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (isReshapeCall(b)) reshapeOf[b.output.toTensor().get()] = &b;
    if (auto xs = flattenedPieces(b, reshapeOf)) rewrite[i] = std::move(*xs);
  }
  if (rewrite.empty()) return std::nullopt;
  std::unordered_map<size_t, std::function<Value()>> replace;
  for (const auto& [i, xs] : rewrite) {
    const TensorPtr& y = trace.bsyms[i].output.toTensor();
    replace[i] = [&xs = xs, y] {
      std::vector<Value> pieces;
      for (const TensorPtr& x : xs) pieces.push_back(Value(x));
      Value whole = ltorch::op("cat", {Value::list(pieces), Value(y->ndim() - 1)});
      return ltorch::op("reshape", {whole, Value::ints(y->shape)});
    };
  }
  return dce(replaceCalls(trace, replace, "concatenation of flattened pieces"));
}

}  // namespace thunder
