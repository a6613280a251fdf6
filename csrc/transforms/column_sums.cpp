#include "transforms/column_sums.h"

#include <unordered_map>

#include "ops/ltorch.h"
#include "transforms/dce.h"
#include "transforms/rewrites.h"

namespace thunder {
namespace {

/// Whether `b` sums every dim of its input but the last, with no kept dims.
bool sumsAllButLast(const BoundSymbol& b) {
  if (b.sym->module != "ltorch" || b.sym->name != "sum" || b.args.size() < 2 || !b.args[0].isTensor() ||
      !b.output.isTensor())
    return false;
  if (b.args.size() > 2 && !(b.args[2].isNone() || (b.args[2].isBool() && !b.args[2].toBool()))) return false;
  if (!b.args[1].isSequence() && !b.args[1].isInt()) return false;
  for (const Value& d : b.args[1].isSequence() ? b.args[1].items() : std::vector<Value>{})
    if (!d.isInt()) return false;
  const int64_t rank = b.args[0].tensor().ndim();
  std::vector<int64_t> dims = b.args[1].toInts();
  if (rank < 2 || static_cast<int64_t>(dims.size()) != rank - 1) return false;
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != static_cast<int64_t>(d) && dims[d] != static_cast<int64_t>(d) - rank) return false;
  return true;
}

}  // namespace

std::optional<Trace> columnSumsThroughReshapes(const Trace& trace) {
  // Each value that only moves whole rows of another (a reshape keeping the last dim, a window
  // partition's permute), to that other.
  std::unordered_map<const TensorProxy*, TensorPtr> movedFrom;
  // The sums to rewrite, by position, with the value they sum the rows of.
  std::unordered_map<size_t, TensorPtr> source;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    TensorPtr from = rowsMovedFrom(b);
    if (!from && isReshapeCall(b)) {
      const TensorPtr& x = b.args[0].toTensor();
      const TensorProxy& r = b.output.tensor();
      // (Sizes that vary between calls are compared at one call's values only: those stay.)
      if (x->ndim() > 0 && r.ndim() > 0 && x->shape.back() == r.shape.back() && x->dtype == r.dtype &&
          !x->symbolic() && !r.symbolic())
        from = x;
    }
    if (from) movedFrom[b.output.toTensor().get()] = from;
    if (!sumsAllButLast(b)) continue;
    // The earliest of the chain: the value a kernel computes, in the shape it iterates.
    TensorPtr x;
    for (auto it = movedFrom.find(b.args[0].toTensor().get()); it != movedFrom.end();
         it = movedFrom.find(it->second.get()))
      if (it->second->ndim() >= 2 && it->second->numel() > 0) x = it->second;
    if (x) source[i] = x;
  }
  if (source.empty()) return std::nullopt;
  std::unordered_map<size_t, std::function<Value()>> replace;
  for (const auto& [i, x] : source) {
    const BoundSymbol& b = trace.bsyms[i];
    std::vector<int64_t> dims;
    for (int64_t d = 0; d + 1 < x->ndim(); ++d) dims.push_back(d);
    replace[i] = [&b, x = x, dims] {
      std::vector<Value> args = b.args;
      args[0] = Value(x);
      args[1] = Value::ints(dims);
      return call(*b.sym, args);
    };
  }
  // (The reshapes only those sums read go.)
  return dce(replaceCalls(trace, replace, "column sums through reshapes"));
}

std::optional<Trace> sumsOfWidenedValues(const Trace& trace) {
  std::unordered_map<const TensorProxy*, TensorPtr> widened;  // float32 value -> its 16-bit source
  std::unordered_map<size_t, TensorPtr> source;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (TensorPtr from = widenedFrom(b)) {
      if (isLowPrecision(from->dtype) && b.output.tensor().dtype == DType::Float32)
        widened[b.output.toTensor().get()] = from;
      continue;
    }
    if (b.sym->module != "ltorch" || b.sym->name != "sum" || b.args.size() < 2 || !b.args[0].isTensor() ||
        !b.output.isTensor())
      continue;
    if (b.args.size() > 3 && !b.args[3].isNone()) continue;  // a dtype of its own
    auto it = widened.find(b.args[0].toTensor().get());
    if (it == widened.end() || it->second->symbolic()) continue;
    source[i] = it->second;
  }
  // Only where the sums are all that read the widening (which then goes): a widening that stays
  // is read by a kernel, where the sum of it is a column output at no cost, and alone it would
  // be a conversion kernel of its own (a LayerNorm's bias gradient).
  std::unordered_map<const TensorProxy*, size_t> readers = readCounts(trace), summed;
  for (const auto& [i, x] : source) ++summed[trace.bsyms[i].args[0].toTensor().get()];
  for (auto it = source.begin(); it != source.end();) {
    const TensorProxy* w = trace.bsyms[it->first].args[0].toTensor().get();
    it = summed[w] == readers[w] ? std::next(it) : source.erase(it);
  }
  if (source.empty()) return std::nullopt;
  std::unordered_map<size_t, std::function<Value()>> replace;
  for (const auto& [i, x] : source) {
    const BoundSymbol& b = trace.bsyms[i];
    replace[i] = [&b, x = x] {
      std::vector<Value> args = b.args;
      args[0] = Value(x);
      while (args.size() < 4) args.push_back(args.size() == 2 ? Value(false) : Value());
      args[3] = Value(DType::Float32);
      return call(*b.sym, args);
    };
  }
  return dce(replaceCalls(trace, replace, "sums of widened values"));
}

}  // namespace thunder
