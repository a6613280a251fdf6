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

/// The shape a unit's prims iterate over: the largest (by rank, then elements) among their
/// outputs and their reductions' inputs.
Shape unitShape(const Unit& u) {
  Shape best;
  bool any = false;
  auto consider = [&](const Shape& s) {
    int64_t n = 1, m = 1;
    for (int64_t x : s) n *= x;
    for (int64_t x : best) m *= x;
    if (!any || s.size() > best.size() || (s.size() == best.size() && n > m)) best = s;
    any = true;
  };
  for (const BoundSymbol& p : u.prims) {
    for (const TensorPtr& t : p.outputTensors()) consider(t->shape);
    if (p.sym->hasTag(kReductionOp) && !p.args.empty() && p.args[0].isTensor()) consider(p.args[0].tensor().shape);
  }
  return best;
}

Shape withoutUnitDims(const Shape& s) {
  Shape out;
  for (int64_t x : s)
    if (x != 1) out.push_back(x);
  return out;
}

/// Whether a kernel iterating over `outer` can also compute values of shape `inner`: the same
/// shape up to length-1 dims, or one value per row (the last dim reduced, kept or not).
bool covers(const Shape& outer, const Shape& inner) {
  Shape o = withoutUnitDims(outer), i = withoutUnitDims(inner);
  if (o == i) return true;
  if (outer.empty()) return false;
  Shape rows(outer.begin(), outer.end() - 1);
  return withoutUnitDims(rows) == i;
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

  // Emits a group as one fused call; returns false (emitting nothing) when `fuse` declines it.
  auto emitFused = [&](const std::vector<size_t>& members_) -> bool {
    FusionRegion r;
    std::unordered_set<const TensorProxy*> produced, seenIn;
    std::unordered_set<size_t> members(members_.begin(), members_.end());
    for (size_t i : members_) {
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
    for (size_t i : members_) {
      for (const TensorPtr& t : units[i].bsym->outputTensors()) {
        bool usedOutside = returned.count(t.get()) > 0;
        for (size_t reader : readers[t.get()]) usedOutside |= !members.count(reader);
        if (usedOutside) r.outputs.push_back(t);
      }
    }
    std::optional<BoundSymbol> fused = r.outputs.empty() ? std::nullopt : fuse(r);
    if (!fused) return false;
    out.bsyms.push_back(std::move(*fused));
    return true;
  };

  // A run of fusible calls that cannot be one kernel (most often: values of several iteration
  // shapes, as in a backward that starts by recomputing a whole forward) is split into groups of
  // one iteration shape each. A call joins the open group of a value it reads when that group's
  // shape covers its own (a per-row value next to its rows), else the open group of its shape;
  // a group it reads that cannot take it is closed first, with the groups that one depends on, so
  // the groups come out in an order where each reads only what is already computed.
  auto emitSplit = [&](const std::vector<size_t>& run) {
    struct Sub {
      Shape shape;
      std::vector<size_t> members;
      std::unordered_set<const TensorProxy*> produced;
      std::vector<size_t> deps;  // indices of subs read
      bool closed = false;
    };
    std::vector<Sub> subs;
    std::vector<size_t> order;
    std::function<void(size_t)> close = [&](size_t k) {
      if (subs[k].closed) return;
      subs[k].closed = true;
      for (size_t d : subs[k].deps) close(d);
      order.push_back(k);
    };
    for (size_t i : run) {
      const Unit& u = units[i];
      Shape shape = unitShape(u);
      std::vector<size_t> readsFrom;
      for (size_t k = 0; k < subs.size(); ++k) {
        if (subs[k].closed) continue;
        for (const TensorPtr& t : u.bsym->inputTensors())
          if (subs[k].produced.count(t.get())) {
            readsFrom.push_back(k);
            break;
          }
      }
      std::optional<size_t> target;
      for (size_t k : readsFrom)
        if (!target && covers(subs[k].shape, shape)) target = k;
      if (!target)
        for (size_t k = 0; k < subs.size(); ++k)
          if (!subs[k].closed && subs[k].shape == shape) {
            target = k;
            break;
          }
      for (size_t k : readsFrom)
        if (!target || k != *target) close(k);
      if (target && subs[*target].closed) target.reset();
      if (!target) {
        subs.push_back(Sub{shape, {}, {}, {}, false});
        target = subs.size() - 1;
      }
      Sub& sub = subs[*target];
      sub.members.push_back(i);
      for (const TensorPtr& t : u.bsym->outputTensors()) sub.produced.insert(t.get());
      // Every earlier sub it reads (open or closed) must come out before it.
      for (size_t k = 0; k < subs.size(); ++k) {
        if (k == *target) continue;
        for (const TensorPtr& t : u.bsym->inputTensors())
          if (subs[k].produced.count(t.get())) {
            sub.deps.push_back(k);
            break;
          }
      }
    }
    for (size_t k = 0; k < subs.size(); ++k) close(k);
    for (size_t k : order) {
      // Members stay in program order, which is a valid order within a group.
      if (subs[k].members.size() > 1 && emitFused(subs[k].members)) continue;
      for (size_t i : subs[k].members) out.bsyms.push_back(*units[i].bsym);
    }
  };

  auto flush = [&] {
    if (!group.empty() && !emitFused(group)) {
      if (group.size() > 1) {
        emitSplit(group);
      } else {
        out.bsyms.push_back(*units[group.front()].bsym);
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
