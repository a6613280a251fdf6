#include "transforms/cse.h"

#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "transforms/dce.h"
#include "transforms/rewrites.h"

namespace thunder {
namespace {

/// A value as text that tells apart what computes differently: tensors by identity, numbers by
/// kind and bits (0.0 and -0.0 differ, a NaN equals itself).
void keyOf(const Value& v, std::string& out) {
  auto bits = [&](double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    out += std::to_string(u);
  };
  out += std::to_string(static_cast<int>(v.kind()));
  out += ':';
  switch (v.kind()) {
    case Value::Kind::None:
    case Value::Kind::Ellipsis: break;
    case Value::Kind::Bool: out += v.toBool() ? '1' : '0'; break;
    case Value::Kind::Int: out += std::to_string(v.toInt()); break;
    case Value::Kind::Float: bits(v.toDouble()); break;
    case Value::Kind::Complex:
      bits(v.toComplex().real());
      out += ',';
      bits(v.toComplex().imag());
      break;
    case Value::Kind::String: out += std::to_string(v.toString().size()) + '"' + v.toString(); break;
    case Value::Kind::DType: out += std::to_string(static_cast<int>(v.toDType())); break;
    case Value::Kind::Device: out += v.toDevice().str(); break;
    case Value::Kind::Tensor: out += std::to_string(reinterpret_cast<uintptr_t>(v.toTensor().get())); break;
    case Value::Kind::Dict:
      for (const std::string& k : v.keys()) out += std::to_string(k.size()) + '"' + k;
      [[fallthrough]];
    case Value::Kind::Tuple:
    case Value::Kind::List:
    case Value::Kind::Slice:
      out += '(';
      for (const Value& x : v.items()) {
        keyOf(x, out);
        out += ',';
      }
      out += ')';
      break;
  }
}

/// A call that only slices, broadcasts or converts: a view or a cheap copy.
bool movesOnly(const BoundSymbol& b) {
  if (b.sym->isPrim()) return b.sym->hasTag(kShapeOp) || b.sym->name == "convert_element_type";
  if (b.subsymbols.empty()) return false;
  for (const BoundSymbol& s : b.subsymbols)
    if (!movesOnly(s)) return false;
  return true;
}

/// The outputs of a call by position: a tensor, or null where dce pruned an unused output (or
/// the output is not a tensor). Two calls' outputs correspond position by position; their
/// tensors alone do not (the first split's unused second part and the second's unused first
/// part pruned, each had one tensor, and the second's second part was renamed to the first's
/// first part).
void slotsOf(const Value& v, std::vector<TensorPtr>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isSequence()) {
    for (const Value& x : v.items()) slotsOf(x, out);
  } else {
    out.push_back(nullptr);
  }
}

}  // namespace

Trace cse(const Trace& trace) {
  Trace out = trace.emptyCopy();
  TensorRenames renames;
  // Values the trace reads, and what only slices, broadcasts or conversions make of them (a
  // rotary table's slice in float32): each use keeps its own copy, which the kernel reading it
  // computes for itself. Shared, they would be read as kernel inputs, made once for every layer.
  std::unordered_set<const TensorProxy*> tables;
  for (const TensorPtr& t : trace.inputs) tables.insert(t.get());
  std::unordered_map<std::string, std::vector<TensorPtr>> seen;  // key -> the first call's outputs (slotsOf)
  // A widening conversion's output -> its input. The autodiff makes round trips: the gradient of
  // a bfloat16 softmax's input is rounded to bfloat16 and widened (x.to(float32)) for the add
  // that fed it, whose gradient of its bfloat16 operand narrows it again (to(bfloat16)); the
  // narrowing is the bfloat16 value itself, which a kernel then need not widen and store.
  std::unordered_map<const TensorProxy*, TensorPtr> widened;
  // (A returned narrowing of an input (or of a view of one: `tables`), or of another result,
  // stays: in eager it is a new tensor, which the caller may write without changing the input or
  // the other result.)
  std::unordered_set<const TensorProxy*> returned;
  {
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned.insert(t.get());
  }
  bool roundTrips = false;
  for (const BoundSymbol& call : trace.bsyms) {
    BoundSymbol b = call;
    if (!renames.empty()) substituteReads(b, renames);
    const Symbol& s = *b.sym;
    std::vector<TensorPtr> outs = b.outputTensors();
    if (outs.size() == 1 && convertsOnly(b)) {
      std::vector<TensorPtr> ins = b.inputTensors();
      auto w = ins.size() == 1 ? widened.find(ins[0].get()) : widened.end();
      if (w != widened.end() && w->second->dtype == outs[0]->dtype) {
        const TensorPtr& x = w->second;
        // A returned narrowing becomes x only where x is a tensor of this trace's own that the
        // caller gets nowhere else (then x is returned, once).
        bool ownTensor = !tables.count(x.get()) && !returned.count(x.get());
        if (!returned.count(outs[0].get()) || ownTensor) {
          if (returned.count(outs[0].get())) returned.insert(x.get());
          renames.emplace(outs[0].get(), x);
          roundTrips = true;
          continue;
        }
      }
      if (TensorPtr from = widenedFrom(b)) widened.emplace(outs[0].get(), from);
    }
    if (movesOnly(b)) {
      std::vector<TensorPtr> ins = b.inputTensors();
      bool fromTables = !ins.empty();
      for (const TensorPtr& t : ins) fromTables &= tables.count(t.get()) > 0;
      if (fromTables) {
        for (const TensorPtr& t : outs) tables.insert(t.get());
        out.bsyms.push_back(std::move(b));
        continue;
      }
    }
    if (outs.empty() || !s.executor.empty() || s.hasTag(kRandomOp) || s.hasTag(kDontDce) || s.hasTag(kCreation) ||
        s.hasTag(kDel)) {
      out.bsyms.push_back(std::move(b));
      continue;
    }
    std::string key = s.id();
    key += '(';
    for (const Value& a : b.args) {
      keyOf(a, key);
      key += ';';
    }
    std::vector<TensorPtr> slots;
    slotsOf(b.output, slots);
    auto [it, first] = seen.emplace(std::move(key), slots);
    // The same call again: each output the later call uses is read from the first's, which must
    // have kept that output (not pruned) with the same shape and dtype.
    bool same = !first && it->second.size() == slots.size();
    for (size_t k = 0; same && k < slots.size(); ++k) {
      if (slots[k] == nullptr) continue;
      const TensorPtr& was = it->second[k];
      same = was != nullptr && was->shape == slots[k]->shape && was->dtype == slots[k]->dtype;
      // Two results the caller gets are two tensors, as in eager (one written must not change
      // the other; two gradients must not be one tensor that autograd accumulates into).
      same = same && !(returned.count(was.get()) && returned.count(slots[k].get()));
    }
    if (!same) {
      out.bsyms.push_back(std::move(b));
      continue;
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      if (slots[k] == nullptr) continue;
      if (returned.count(slots[k].get())) returned.insert(it->second[k].get());  // (returned once)
      renames.emplace(slots[k].get(), it->second[k]);
    }
  }
  out.output = substitute(trace.output, renames);
  // A widening that only round trips read is dead now (a full-size float32 copy of a bfloat16
  // gradient that nothing reads, computed by a kernel of its own).
  return roundTrips ? dce(out) : out;
}

}  // namespace thunder
