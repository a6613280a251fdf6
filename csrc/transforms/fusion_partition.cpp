#include "transforms/fusion_partition.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace thunder {
namespace {

/// Appends the prims of b's decomposition; false if any is not fusible.
bool leafPrims(const BoundSymbol& b, const std::function<bool(const BoundSymbol&)>& fusible,
               std::vector<BoundSymbol>& out) {
  if (b.sym->isPrim()) {
    if (!fusible(b)) return false;
    out.push_back(b);
    return true;
  }
  if (b.subsymbols.empty()) return false;
  for (const BoundSymbol& s : b.subsymbols)
    if (!leafPrims(s, fusible, out)) return false;
  return true;
}

struct Unit {
  const BoundSymbol* bsym;
  bool fusible;
  std::vector<BoundSymbol> prims;
  bool terminal = false;  // computes a terminal prim's value
};

/// Whether the values of the unit's terminal prims are only converted within the unit (else the
/// unit cannot be fused: a terminal value cannot feed other ops in a kernel).
bool terminalsOnlyConverted(const Unit& u, const std::function<bool(const BoundSymbol&)>& terminal) {
  std::unordered_set<const TensorProxy*> ends;
  for (const BoundSymbol& p : u.prims) {
    bool reads = false;
    for (const TensorPtr& t : p.inputTensors()) reads |= ends.count(t.get()) > 0;
    if (reads && p.sym->name != "convert_element_type") return false;
    if (reads || terminal(p))
      for (const TensorPtr& t : p.outputTensors()) ends.insert(t.get());
  }
  return true;
}

}  // namespace

Trace fusionPartition(const Trace& trace, const std::function<bool(const BoundSymbol&)>& fusible,
                      const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                      const std::function<bool(const BoundSymbol&)>& terminal) {
  std::vector<Unit> units;
  for (const BoundSymbol& b : trace.bsyms) {
    Unit u{&b, false, {}};
    if (!b.sym->hasTag(kDel) && b.sym->executor.empty()) u.fusible = leafPrims(b, fusible, u.prims);
    if (u.fusible && terminal) {
      for (const BoundSymbol& p : u.prims) u.terminal |= terminal(p);
      if (u.terminal) u.fusible = terminalsOnlyConverted(u, terminal);
    }
    if (!u.fusible) u.prims.clear();
    units.push_back(std::move(u));
  }
  // Readers of each tensor (unit indices), and the trace's outputs.
  std::unordered_map<const TensorProxy*, std::vector<size_t>> readers;
  for (size_t i = 0; i < units.size(); ++i)
    for (const TensorPtr& t : units[i].bsym->inputTensors()) readers[t.get()].push_back(i);
  std::unordered_set<const TensorProxy*> returned;
  {
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned.insert(t.get());
  }

  Trace out = trace.emptyCopy();
  std::vector<size_t> group, deferred;
  std::unordered_set<const TensorProxy*> groupOut, deferredOut, terminalOut;

  auto flush = [&] {
    if (!group.empty()) {
      FusionRegion r;
      std::unordered_set<const TensorProxy*> produced, seenIn;
      std::unordered_set<size_t> members(group.begin(), group.end());
      for (size_t i : group) {
        r.originals.push_back(*units[i].bsym);
        for (const BoundSymbol& p : units[i].prims) {
          for (const TensorPtr& t : p.inputTensors())
            if (!produced.count(t.get()) && seenIn.insert(t.get()).second) r.inputs.push_back(t);
          for (const TensorPtr& t : p.outputTensors()) produced.insert(t.get());
          // Broadcasts and reshapes only relabel dims: a region of shape ops alone is no fusion.
          if (!p.sym->hasTag(kShapeOp)) ++r.computeOps;
          r.prims.push_back(p);
        }
      }
      for (size_t i : group) {
        for (const TensorPtr& t : units[i].bsym->outputTensors()) {
          bool usedOutside = returned.count(t.get()) > 0;
          for (size_t reader : readers[t.get()]) usedOutside |= !members.count(reader);
          if (usedOutside) r.outputs.push_back(t);
        }
      }
      std::optional<BoundSymbol> fused = r.outputs.empty() ? std::nullopt : fuse(r);
      if (fused) {
        out.bsyms.push_back(std::move(*fused));
      } else {
        for (const BoundSymbol& b : r.originals) out.bsyms.push_back(b);
      }
    }
    for (size_t i : deferred) out.bsyms.push_back(*units[i].bsym);
    group.clear();
    deferred.clear();
    groupOut.clear();
    deferredOut.clear();
    terminalOut.clear();
  };

  auto reads = [](const Unit& u, const std::unordered_set<const TensorProxy*>& set) {
    for (const TensorPtr& t : u.bsym->inputTensors())
      if (set.count(t.get())) return true;
    return false;
  };

  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    if (u.fusible) {
      if (reads(u, deferredOut) || reads(u, terminalOut)) flush();
      group.push_back(i);
      for (const TensorPtr& t : u.bsym->outputTensors()) {
        groupOut.insert(t.get());
        if (u.terminal) terminalOut.insert(t.get());
      }
    } else if (reads(u, groupOut) || u.bsym->sym->hasTag(kDontDce) || u.bsym->sym->hasTag(kRandomOp)) {
      flush();
      out.bsyms.push_back(*u.bsym);
    } else {
      deferred.push_back(i);
      for (const TensorPtr& t : u.bsym->outputTensors()) deferredOut.insert(t.get());
    }
  }
  flush();
  return out;
}

}  // namespace thunder
