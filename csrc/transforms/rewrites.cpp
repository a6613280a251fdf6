#include "transforms/rewrites.h"

namespace thunder {

bool isReshapeCall(const BoundSymbol& b) {
  const std::string& m = b.sym->module;
  const std::string& n = b.sym->name;
  return ((m == "ltorch" && (n == "reshape" || n == "view")) || (m == "prims" && n == "reshape")) && !b.args.empty() &&
         b.args[0].isTensor() && b.output.isTensor();
}

namespace {

bool movesRowsOnly(const BoundSymbol& b) {
  if (!b.sym->isPrim()) {
    for (const BoundSymbol& s : b.subsymbols)
      if (!movesRowsOnly(s)) return false;
    return !b.subsymbols.empty();
  }
  const std::string& n = b.sym->name;
  if (b.args.empty() || !b.args[0].isTensor() || !b.output.isTensor()) return false;
  const TensorProxy& in = b.args[0].tensor();
  const TensorProxy& out = b.output.tensor();
  if (in.ndim() == 0 || out.ndim() == 0 || in.shape.back() != out.shape.back()) return false;
  if (n == "reshape" || n == "stride_order") return true;
  if (n == "transpose" && b.args.size() > 1 && b.args[1].isSequence()) {
    std::vector<int64_t> perm = b.args[1].toInts();
    return !perm.empty() && perm.back() == static_cast<int64_t>(perm.size()) - 1;
  }
  return false;
}

}  // namespace

TensorPtr rowsMovedFrom(const BoundSymbol& b) {
  if (!b.output.isTensor()) return nullptr;
  std::vector<TensorPtr> ins = b.inputTensors();
  const TensorPtr& out = b.output.toTensor();
  if (ins.size() != 1 || ins[0]->dtype != out->dtype || ins[0]->ndim() == 0 || out->ndim() == 0 ||
      ins[0]->shape.back() != out->shape.back() || ins[0]->numel() != out->numel() || ins[0]->symbolic() ||
      out->symbolic())
    return nullptr;
  return movesRowsOnly(b) ? ins[0] : nullptr;
}

bool convertsOnly(const BoundSymbol& b) {
  if (b.sym->isPrim()) return b.sym->name == "convert_element_type";
  return b.subsymbols.size() == 1 && convertsOnly(b.subsymbols[0]);
}

TensorPtr widenedFrom(const BoundSymbol& b) {
  if (!b.output.isTensor() || !convertsOnly(b)) return nullptr;
  std::vector<TensorPtr> ins = b.inputTensors();
  const TensorPtr& out = b.output.toTensor();
  if (ins.size() != 1 || ins[0]->shape != out->shape || ins[0]->dtype == out->dtype) return nullptr;
  const DType from = ins[0]->dtype;
  const bool exact = out->dtype == DType::Float64 ? from == DType::Float32 || isLowPrecision(from)
                     : out->dtype == DType::Float32 ? isLowPrecision(from)
                                                    : false;
  return exact ? ins[0] : nullptr;
}

Trace replaceCalls(const Trace& trace, const std::unordered_map<size_t, std::function<Value()>>& replace,
                   const std::string& pass) {
  Trace out = trace.emptyCopy();
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    auto it = replace.find(i);
    if (it == replace.end())
      out.bsyms.push_back(b);
    else
      appendTraced(out, it->second, b.output.toTensor(), pass);
  }
  return out;
}

}  // namespace thunder
