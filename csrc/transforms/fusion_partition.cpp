#include "transforms/fusion_partition.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "transforms/dce.h"

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

/// A shape op that ATen makes by copying: a reshape that is no view of its source's eager layout
/// (a merge of permuted or expanded dims), element by element, or a `contiguous`
/// (prims.stride_order, row-major) of a source not in that layout. Inside a fused kernel it is an
/// index remapping.
bool copyingView(const BoundSymbol& p) {
  if ((p.sym->name != "reshape" && p.sym->name != "stride_order") || p.args.empty() || !p.args[0].isTensor())
    return false;
  const TensorProxy& src = p.args[0].tensor();
  std::vector<TensorPtr> outs = p.outputTensors();
  if (outs.empty() || src.numel() == 0) return false;
  if (p.sym->name == "stride_order") {
    std::vector<int64_t> order = p.args[1].toInts();
    for (size_t d = 0; d < order.size(); ++d)
      if (order[d] != static_cast<int64_t>(order.size() - 1 - d)) return false;
    return !isContiguousLayout(src.shape, src.stridesOrContiguous());
  }
  std::vector<int64_t> strides;
  return !viewStrides(src.shape, src.stridesOrContiguous(), outs[0]->shape, strides);
}

/// What a prim counts toward a kernel being worth its launch (FusionRegion::computeOps): a shape op
/// nothing, a copy made by ATen two, any other op one.
int computeCost(const BoundSymbol& p) { return !p.sym->hasTag(kShapeOp) ? 1 : copyingView(p) ? 2 : 0; }

struct Unit {
  const BoundSymbol* bsym;
  bool fusible;
  std::vector<BoundSymbol> prims;
  bool terminal = false;  // computes a terminal prim's value
};

/// Which of `calls` (unit indices in program order) feed what `read` holds: walking back, a call
/// is marked when `always(call)` or when something read takes one of its outputs, and then what
/// it reads is read too.
std::vector<bool> feeding(const std::vector<Unit>& units, const std::vector<size_t>& calls,
                          std::unordered_set<const TensorProxy*> read,
                          const std::function<bool(size_t)>& always) {
  std::vector<bool> marked(calls.size(), false);
  for (size_t k = calls.size(); k-- > 0;) {
    const BoundSymbol& b = *units[calls[k]].bsym;
    marked[k] = always(calls[k]);
    for (const TensorPtr& t : b.outputTensors()) marked[k] = marked[k] || read.count(t.get()) > 0;
    if (marked[k])
      for (const TensorPtr& t : b.inputTensors()) read.insert(t.get());
  }
  return marked;
}

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
/// outputs and their (not pointwise) reductions' inputs.
/// The iteration shape of a unit's prims: the largest output, or reduced input (see unitShape).
Shape primsShape(const std::vector<BoundSymbol>& prims, const std::function<bool(const BoundSymbol&)>& pointwise) {
  Shape best;
  bool any = false;
  auto consider = [&](const Shape& s) {
    int64_t n = 1, m = 1;
    for (int64_t x : s) n *= x;
    for (int64_t x : best) m *= x;
    if (!any || s.size() > best.size() || (s.size() == best.size() && n > m)) best = s;
    any = true;
  };
  for (const BoundSymbol& p : prims) {
    for (const TensorPtr& t : p.outputTensors()) consider(t->shape);
    if (p.sym->hasTag(kReductionOp) && !(pointwise && pointwise(p)) && !p.args.empty() && p.args[0].isTensor())
      consider(p.args[0].tensor().shape);
  }
  return best;
}

Shape unitShape(const Unit& u, const std::function<bool(const BoundSymbol&)>& pointwise) {
  return primsShape(u.prims, pointwise);
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

/// Who reads the fused calls' outputs: the producing region of each output, the region at each
/// position of `out`, and per output the regions reading it and whether anything else does.
struct RegionReads {
  std::unordered_map<const TensorProxy*, size_t> producerRegion;  // output -> index in regions
  std::unordered_map<size_t, size_t> regionAt;                    // position in out -> index in regions
  std::unordered_map<const TensorProxy*, std::vector<size_t>> regionReaders;
  std::unordered_set<const TensorProxy*> otherReaders;

  RegionReads(const Trace& out, const std::vector<std::pair<size_t, FusionRegion>>& regions) {
    for (size_t k = 0; k < regions.size(); ++k) {
      for (const TensorPtr& t : regions[k].second.outputs) producerRegion[t.get()] = k;
      regionAt[regions[k].first] = k;
    }
    for (size_t i = 0; i < out.bsyms.size(); ++i) {
      auto at = regionAt.find(i);
      for (const TensorPtr& t : out.bsyms[i].inputTensors()) {
        if (!producerRegion.count(t.get())) continue;
        if (at != regionAt.end()) regionReaders[t.get()].push_back(at->second);
        else otherReaders.insert(t.get());
      }
    }
  }
};

/// `list` without `from`, with `to` appended unless it is there already.
void replaceTensor(std::vector<TensorPtr>& list, const TensorProxy* from, const TensorPtr& to) {
  bool has = false;
  for (const TensorPtr& t : list) has |= t.get() == to.get();
  list.erase(std::remove_if(list.begin(), list.end(), [&](const TensorPtr& t) { return t.get() == from; }), list.end());
  if (!has) list.push_back(to);
}

/// Where a fused call's output feeds only later fused calls, and is computed from the first
/// call's inputs by pointwise prims alone, the later calls compute it again from those inputs
/// instead of reading it, when that reads no more bytes than the value itself: the value is not
/// written to memory. (A backward often reads float32 values of the forward, recomputed from
/// bf16 tensors it reads anyway: sigmoid(x.float()) costs nothing next to 4 bytes per element.)
void recomputeAcrossRegions(Trace& out, std::vector<std::pair<size_t, FusionRegion>>& regions,
                            const std::unordered_set<const TensorProxy*>& returned,
                            const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                            const std::function<bool(const BoundSymbol&)>& terminal) {
  constexpr size_t kMaxChain = 48;
  const RegionReads reads(out, regions);
  const auto& producerRegion = reads.producerRegion;
  const auto& regionAt = reads.regionAt;
  const auto& regionReaders = reads.regionReaders;
  const auto& otherReaders = reads.otherReaders;
  // The prims of region A computing t, in A's order; empty if t needs a reduction or is too long.
  auto chainOf = [&](const FusionRegion& a, const TensorProxy* t) {
    std::unordered_map<const TensorProxy*, size_t> producer;
    for (size_t i = 0; i < a.prims.size(); ++i)
      for (const TensorPtr& o : a.prims[i].outputTensors()) producer[o.get()] = i;
    std::vector<bool> need(a.prims.size(), false);
    std::vector<const TensorProxy*> stack{t};
    bool ok = true;
    while (!stack.empty() && ok) {
      const TensorProxy* cur = stack.back();
      stack.pop_back();
      auto it = producer.find(cur);
      if (it == producer.end() || need[it->second]) continue;
      const BoundSymbol& p = a.prims[it->second];
      if (p.sym->hasTag(kReductionOp) || (terminal && terminal(p))) ok = false;
      need[it->second] = true;
      for (const TensorPtr& in : p.inputTensors()) stack.push_back(in.get());
    }
    std::vector<BoundSymbol> chain;
    for (size_t i = 0; ok && i < a.prims.size(); ++i)
      if (need[i]) chain.push_back(a.prims[i]);
    if (!ok || chain.size() > kMaxChain) chain.clear();
    return chain;
  };
  // Candidates: every reader of t is a region, t is not returned, and each reader can recompute it
  // reading at most t's bytes of tensors it did not read already. Each chain is found once, with
  // its leaves (the tensors it reads that it does not compute).
  struct Chain {
    std::vector<BoundSymbol> prims;
    std::vector<const TensorProxy*> leaves;
  };
  std::unordered_map<const TensorProxy*, Chain> chains;  // the values recomputed downstream
  // The chain of prims with its leaves, if every reader can recompute it reading at most t's bytes
  // of tensors it did not read already.
  auto evaluate = [&](const TensorProxy* t, std::vector<BoundSymbol> prims) -> std::optional<Chain> {
    Chain c{std::move(prims), {}};
    if (c.prims.empty() || c.prims.size() > kMaxChain) return std::nullopt;
    std::unordered_set<const TensorProxy*> made, seen;
    for (const BoundSymbol& p : c.prims)
      for (const TensorPtr& o : p.outputTensors()) made.insert(o.get());
    for (const BoundSymbol& p : c.prims)
      for (const TensorPtr& in : p.inputTensors())
        if (!made.count(in.get()) && seen.insert(in.get()).second) c.leaves.push_back(in.get());
    // What reading a leaf costs: its bytes, or for a table only gathered from (take, embedding),
    // the rows gathered.
    std::unordered_map<const TensorProxy*, int64_t> cost;
    for (const TensorProxy* in : c.leaves) cost[in] = 0;
    std::unordered_set<const TensorProxy*> whole;
    for (const BoundSymbol& p : c.prims) {
      const bool gather = p.sym->name == "take" || p.sym->name == "embedding";
      const size_t src = p.sym->name == "take" ? 0 : 1;
      for (size_t k = 0; k < p.args.size(); ++k) {
        if (!p.args[k].isTensor() || !cost.count(p.args[k].toTensor().get())) continue;
        const TensorProxy* in = p.args[k].toTensor().get();
        if (gather && k == src) {
          const TensorProxy& o = *p.outputTensors().front();
          cost[in] += o.numel() * dtypeItemSize(o.dtype);
        } else {
          whole.insert(in);
        }
      }
    }
    for (const TensorProxy* in : whole) cost[in] = in->numel() * dtypeItemSize(in->dtype);
    for (size_t b : regionReaders.at(t)) {
      std::unordered_set<const TensorProxy*> has;
      for (const TensorPtr& in : regions[b].second.inputs) has.insert(in.get());
      int64_t extra = 0;
      for (const TensorProxy* in : c.leaves)
        if (!has.count(in)) extra += cost[in];
      if (extra > t->numel() * dtypeItemSize(t->dtype)) return std::nullopt;
    }
    return c;
  };
  // A chain whose leaves other regions compute (by pointwise prims from what they read) takes
  // those computations in too: a LayerNorm backward's weight-gradient kernel made g * w from the
  // matmul's output and the weight, itself recomputed from the saved input and statistics, and
  // each of these was a float32 value stored for the next kernel.
  auto expanded = [&](std::vector<BoundSymbol> prims) {
    for (bool grew = true; grew && prims.size() <= kMaxChain;) {
      grew = false;
      std::unordered_set<const TensorProxy*> made;
      for (const BoundSymbol& p : prims)
        for (const TensorPtr& o : p.outputTensors()) made.insert(o.get());
      std::vector<BoundSymbol> before;
      for (const BoundSymbol& p : prims)
        for (const TensorPtr& in : p.inputTensors()) {
          if (made.count(in.get())) continue;
          auto pr = producerRegion.find(in.get());
          if (pr == producerRegion.end() || returned.count(in.get())) continue;
          std::vector<BoundSymbol> more = chainOf(regions[pr->second].second, in.get());
          if (more.empty()) continue;
          for (BoundSymbol& q : more) {
            bool dup = false;
            for (const TensorPtr& o : q.outputTensors()) dup |= made.count(o.get()) > 0;
            if (dup) continue;
            for (const TensorPtr& o : q.outputTensors()) made.insert(o.get());
            before.push_back(std::move(q));
          }
          grew = true;
        }
      if (!grew) break;
      for (BoundSymbol& p : prims) before.push_back(std::move(p));
      prims = std::move(before);
    }
    return prims;
  };
  for (auto& [t, readers] : regionReaders) {
    if (otherReaders.count(t) || returned.count(t)) continue;
    std::vector<BoundSymbol> base = chainOf(regions[producerRegion.at(t)].second, t);
    if (base.empty()) continue;
    std::optional<Chain> c = evaluate(t, expanded(base));
    if (!c) c = evaluate(t, std::move(base));
    if (c) chains.emplace(t, std::move(*c));
  }
  // A chain may not start from another dropped value (it would no longer be computed anywhere).
  for (bool again = true; again;) {
    again = false;
    for (auto it = chains.begin(); it != chains.end();) {
      bool bad = false;
      for (const TensorProxy* in : it->second.leaves) bad |= chains.count(in) > 0;
      if (bad) {
        it = chains.erase(it);
        again = true;
      } else {
        ++it;
      }
    }
  }
  // Reader b with the chains of `ts` ahead of its prims, reading their leaves instead of them.
  auto readerRegion = [&](size_t b, std::vector<const TensorProxy*> ts) {
    FusionRegion r = regions[b].second;
    std::vector<BoundSymbol> prims;
    std::unordered_set<const TensorProxy*> made, removed(ts.begin(), ts.end());
    // Chains in producer order (regions come in program order), each prim once.
    std::sort(ts.begin(), ts.end(), [&](const TensorProxy* x, const TensorProxy* y) {
      size_t rx = producerRegion.at(x), ry = producerRegion.at(y);
      return rx != ry ? rx < ry : x->name < y->name;  // a deterministic kernel source
    });
    for (const TensorProxy* t : ts) {
      for (const BoundSymbol& p : chains.at(t).prims) {
        bool dup = false;
        for (const TensorPtr& o : p.outputTensors()) dup |= made.count(o.get()) > 0;
        if (dup) continue;
        for (const TensorPtr& o : p.outputTensors()) made.insert(o.get());
        prims.push_back(p);
      }
    }
    std::vector<TensorPtr> inputs;
    std::unordered_set<const TensorProxy*> seen;
    for (const TensorPtr& in : r.inputs)
      if (!removed.count(in.get()) && seen.insert(in.get()).second) inputs.push_back(in);
    for (const BoundSymbol& p : prims)
      for (const TensorPtr& in : p.inputTensors())
        if (!made.count(in.get()) && seen.insert(in.get()).second) inputs.push_back(in);
    for (BoundSymbol& p : r.prims) prims.push_back(std::move(p));
    r.prims = std::move(prims);
    r.inputs = std::move(inputs);
    return r;
  };
  for (bool retry = true; retry;) {
    retry = false;
    if (chains.empty()) return;
    std::unordered_set<const TensorProxy*> dropped;
    std::vector<std::vector<const TensorProxy*>> recomputes(regions.size());
    for (const auto& [t, c] : chains) {
      dropped.insert(t);
      for (size_t b : regionReaders.at(t))
        if (std::find(recomputes[b].begin(), recomputes[b].end(), t) == recomputes[b].end()) recomputes[b].push_back(t);
    }

    // The new regions: readers get the chains ahead of their prims, producers lose the outputs.
    std::vector<std::optional<FusionRegion>> changed(regions.size());
    for (size_t b = 0; b < regions.size(); ++b)
      if (!recomputes[b].empty()) changed[b] = readerRegion(b, recomputes[b]);
    for (size_t a = 0; a < regions.size(); ++a) {
      const FusionRegion& base = changed[a] ? *changed[a] : regions[a].second;
      bool loses = false;
      for (const TensorPtr& t : base.outputs) loses |= dropped.count(t.get()) > 0;
      if (!loses) continue;
      FusionRegion r = base;
      r.outputs.clear();
      for (const TensorPtr& t : base.outputs)
        if (!dropped.count(t.get())) r.outputs.push_back(t);
      changed[a] = std::move(r);
    }
    // Fuse them all again. A region declined keeps what it had: the chains it was to recompute
    // stay values its producers store (one region that could not take a chain undid all of them:
    // Swin-T's backward stored 109 float32 values, its norms' recomputed statistics and broadcast
    // weights among them).
    std::vector<std::optional<BoundSymbol>> fused(regions.size());
    for (size_t k = 0; k < regions.size(); ++k) {
      if (!changed[k] || changed[k]->outputs.empty()) continue;
      fused[k] = fuse(*changed[k]);
      if (fused[k]) continue;
      size_t before = chains.size();
      // A reader keeps the chains it can take one at a time, if it takes them together.
      std::vector<const TensorProxy*> keep;
      for (const TensorProxy* t : recomputes[k])
        if (recomputes[k].size() > 1 && fuse(readerRegion(k, {t}))) keep.push_back(t);
      if (!keep.empty() && !fuse(readerRegion(k, keep))) keep.clear();
      for (const TensorProxy* t : recomputes[k])
        if (std::find(keep.begin(), keep.end(), t) == keep.end()) chains.erase(t);
      for (auto it = chains.begin(); it != chains.end();)
        it = producerRegion.at(it->first) == k ? chains.erase(it) : std::next(it);
      if (chains.size() == before) return;  // (cannot happen: a declined region is a reader or a producer)
      retry = true;
      break;
    }
    if (retry) continue;
    std::vector<BoundSymbol> bsyms;
    std::vector<std::pair<size_t, FusionRegion>> kept;  // the regions at their new positions
    for (size_t i = 0; i < out.bsyms.size(); ++i) {
      auto at = regionAt.find(i);
      if (at != regionAt.end() && changed[at->second]) {
        if (fused[at->second]) {  // else: nothing left to compute
          kept.emplace_back(bsyms.size(), std::move(*changed[at->second]));
          bsyms.push_back(std::move(*fused[at->second]));
        }
        continue;
      }
      if (at != regionAt.end()) kept.emplace_back(bsyms.size(), std::move(regions[at->second].second));
      bsyms.push_back(std::move(out.bsyms[i]));
    }
    out.bsyms = std::move(bsyms);
    regions = std::move(kept);
  }
}

/// Where a fused call stores a widened value (a float32 conversion of a bf16 one it computes) that
/// only later fused calls read, it stores the narrow value and they widen it as they load it: half
/// the bytes written and read. (Swin's backward rolls the gradient back and widens it in one
/// kernel, whose roll the LayerNorm-backward kernel cannot read through: the float32 copy was a
/// [64, 56, 56, 128] tensor stored and read again per block.)
void narrowStoredWidenings(Trace& out, std::vector<std::pair<size_t, FusionRegion>>& regions,
                           const std::unordered_set<const TensorProxy*>& returned,
                           const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse) {
  const RegionReads reads(out, regions);
  const auto& producerRegion = reads.producerRegion;
  const auto& regionAt = reads.regionAt;
  const auto& regionReaders = reads.regionReaders;
  const auto& otherReaders = reads.otherReaders;
  // Candidates: t = convert_element_type(n) inside its region, n computed there, narrower than t.
  struct Narrowing {
    const BoundSymbol* convert;
    TensorPtr narrow;
  };
  std::map<std::string, std::pair<const TensorProxy*, Narrowing>> byName;  // (a deterministic order)
  for (auto& [t, readers] : regionReaders) {
    if (otherReaders.count(t) || returned.count(t)) continue;
    const FusionRegion& a = regions[producerRegion.at(t)].second;
    const BoundSymbol* conv = nullptr;
    std::unordered_set<const TensorProxy*> made;
    for (const BoundSymbol& p : a.prims) {
      for (const TensorPtr& o : p.outputTensors()) {
        made.insert(o.get());
        if (o.get() == t) conv = &p;
      }
      if (conv) break;
    }
    if (!conv || conv->sym->name != "convert_element_type" || !conv->args[0].isTensor()) continue;
    TensorPtr n = conv->args[0].toTensor();
    if (!made.count(n.get()) || returned.count(n.get()) || n->shape != t->shape ||
        dtypeItemSize(n->dtype) >= dtypeItemSize(t->dtype))
      continue;
    byName.emplace(t->name, std::make_pair(t, Narrowing{conv, n}));
  }
  std::unordered_map<const TensorProxy*, Narrowing> cands;
  for (auto& [_, v] : byName) cands.emplace(v.first, v.second);
  while (!cands.empty()) {
    std::vector<std::optional<FusionRegion>> changed(regions.size());
    auto edit = [&](size_t k) -> FusionRegion& {
      if (!changed[k]) changed[k] = regions[k].second;
      return *changed[k];
    };
    for (auto& [_, v] : byName) {
      const TensorProxy* t = v.first;
      if (!cands.count(t)) continue;
      const Narrowing& c = cands.at(t);
      replaceTensor(edit(producerRegion.at(t)).outputs, t, c.narrow);
      std::vector<size_t> rs = regionReaders.at(t);
      std::sort(rs.begin(), rs.end());
      rs.erase(std::unique(rs.begin(), rs.end()), rs.end());
      for (size_t b : rs) {
        FusionRegion& r = edit(b);
        r.prims.insert(r.prims.begin(), *c.convert);
        replaceTensor(r.inputs, t, c.narrow);
      }
    }
    std::vector<std::optional<BoundSymbol>> fused(regions.size());
    bool declined = false;
    for (size_t k = 0; k < regions.size() && !declined; ++k) {
      if (!changed[k]) continue;
      fused[k] = fuse(*changed[k]);
      if (fused[k]) continue;
      declined = true;  // drop what region k took part in, and try the rest again
      for (auto it = cands.begin(); it != cands.end();) {
        const std::vector<size_t>& rs = regionReaders.at(it->first);
        bool involved = producerRegion.at(it->first) == k || std::find(rs.begin(), rs.end(), k) != rs.end();
        it = involved ? cands.erase(it) : std::next(it);
      }
    }
    if (declined) continue;
    for (size_t k = 0; k < regions.size(); ++k) {
      if (!changed[k]) continue;
      out.bsyms[regions[k].first] = std::move(*fused[k]);
      regions[k].second = std::move(*changed[k]);
    }
    return;
  }
}

/// Where a fused call and a later one iterate over the same shape, read a common input, and the
/// later one needs nothing computed from the first (in between or by it), the two become one
/// kernel at the later one's place; the calls between that read the first one's results move
/// after it. The common inputs are read once, and one launch goes. (A backward recomputes the
/// SwiGLU product for the weight gradient's matmul from the two activations, while the gradient
/// of those activations, after another matmul, reads them again: one kernel reads them once.)
void mergeIndependentRegions(Trace& out, std::vector<std::pair<size_t, FusionRegion>>& regions,
                             const std::unordered_set<const TensorProxy*>& returned,
                             const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                             const std::function<bool(const BoundSymbol&)>& pointwise) {
  constexpr size_t kWindow = 24;  // calls looked across
  // The iteration space, up to reshapes that keep the rows: the element count and the last dim.
  auto shapeOf = [&](const FusionRegion& r) {
    Shape s = primsShape(r.prims, pointwise);
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    return Shape{n, s.empty() ? 1 : s.back()};
  };
  // Per region (kept in step with `regions`): its iteration space.
  std::vector<Shape> shapes;
  shapes.reserve(regions.size());
  for (const auto& r : regions) shapes.push_back(shapeOf(r.second));
  // How many calls read each tensor (each call once): whether something but the merged partner
  // reads an output of A, without scanning the rest of the program per candidate pair (that
  // scan, and restarting from the first region after each merge, made this quadratic: 50-80 ms
  // of a 16-layer Llama backward's partition).
  std::unordered_map<const TensorProxy*, size_t> readerCount;
  auto distinctInputs = [](const BoundSymbol& b) {
    std::vector<TensorPtr> ins = b.inputTensors();
    std::unordered_set<const TensorProxy*> seen;
    std::vector<const TensorProxy*> out;
    for (const TensorPtr& t : ins)
      if (seen.insert(t.get()).second) out.push_back(t.get());
    return out;
  };
  for (const BoundSymbol& b : out.bsyms)
    for (const TensorProxy* t : distinctInputs(b)) ++readerCount[t];
  auto regionAt = [&](size_t pos) {
    auto it = std::lower_bound(regions.begin(), regions.end(), pos,
                               [](const auto& r, size_t p) { return r.first < p; });
    return it != regions.end() && it->first == pos ? it : regions.end();
  };
  // The pairs tried, each region known by its last output and its size.
  std::set<std::tuple<const TensorProxy*, size_t, const TensorProxy*, size_t>> declined;
  for (size_t a = 0; a < regions.size(); ++a) {
    const size_t posA = regions[a].first;
    const Shape& shapeA = shapes[a];
    std::unordered_set<const TensorProxy*> inputsA, outputsA;
    for (const TensorPtr& t : regions[a].second.inputs) inputsA.insert(t.get());
    for (const TensorPtr& t : regions[a].second.outputs) outputsA.insert(t.get());
    // Values computed from A's results by the calls after it (A's own outputs included).
    std::unordered_set<const TensorProxy*> tainted = outputsA;
    std::vector<bool> moves(kWindow + 1, false);  // by distance from A
    for (size_t i = posA + 1; i < out.bsyms.size() && i <= posA + kWindow; ++i) {
      const BoundSymbol& b = out.bsyms[i];
      if (b.sym->hasTag(kDontDce) || b.sym->hasTag(kRandomOp)) break;
      bool readsTainted = false, readsOther = false;  // (other: not A's own outputs)
      for (const TensorPtr& t : b.inputTensors()) {
        readsTainted |= tainted.count(t.get()) > 0;
        readsOther |= tainted.count(t.get()) > 0 && !outputsA.count(t.get());
      }
      auto reg = regionAt(i);
      if (!readsOther && reg != regions.end() && shapes[static_cast<size_t>(reg - regions.begin())] == shapeA) {
        const FusionRegion &ra = regions[a].second, &rb = reg->second;
        bool shares = false;
        for (const TensorPtr& t : rb.inputs) shares |= inputsA.count(t.get()) > 0;
        const std::tuple<const TensorProxy*, size_t, const TensorProxy*, size_t> key{
            ra.outputs.back().get(), ra.prims.size(), rb.outputs.back().get(), rb.prims.size()};
        if (shares && declined.insert(key).second) {
          FusionRegion r;
          r.prims = ra.prims;
          r.prims.insert(r.prims.end(), rb.prims.begin(), rb.prims.end());
          r.originals = ra.originals;
          r.originals.insert(r.originals.end(), rb.originals.begin(), rb.originals.end());
          r.inputs = ra.inputs;
          for (const TensorPtr& t : rb.inputs)
            if (!inputsA.count(t.get()) && !outputsA.count(t.get())) r.inputs.push_back(t);
          // A's outputs stay outputs where something but B reads them (every reader of an output
          // of A comes after A).
          const std::vector<const TensorProxy*> readByB = distinctInputs(b);
          for (const TensorPtr& t : ra.outputs) {
            auto c = readerCount.find(t.get());
            size_t readers = c == readerCount.end() ? 0 : c->second;
            if (std::find(readByB.begin(), readByB.end(), t.get()) != readByB.end()) --readers;
            if (returned.count(t.get()) > 0 || readers > 0) r.outputs.push_back(t);
          }
          r.outputs.insert(r.outputs.end(), rb.outputs.begin(), rb.outputs.end());
          r.computeOps = ra.computeOps + rb.computeOps;
          if (std::optional<BoundSymbol> fused = fuse(r)) {
            for (const TensorProxy* t : distinctInputs(out.bsyms[posA])) --readerCount[t];
            for (const TensorProxy* t : readByB) --readerCount[t];
            for (const TensorProxy* t : distinctInputs(*fused)) ++readerCount[t];
            // New order: the calls between that do not need A, the merged kernel, those that do.
            std::vector<BoundSymbol> bsyms(std::make_move_iterator(out.bsyms.begin()),
                                           std::make_move_iterator(out.bsyms.begin() + posA));
            std::vector<size_t> newPos(out.bsyms.size());
            for (size_t k = 0; k < posA; ++k) newPos[k] = k;
            for (size_t k = posA + 1; k < i; ++k)
              if (!moves[k - posA]) newPos[k] = bsyms.size(), bsyms.push_back(std::move(out.bsyms[k]));
            const size_t merged = bsyms.size();
            bsyms.push_back(std::move(*fused));
            for (size_t k = posA + 1; k < i; ++k)
              if (moves[k - posA]) newPos[k] = bsyms.size(), bsyms.push_back(std::move(out.bsyms[k]));
            for (size_t k = i + 1; k < out.bsyms.size(); ++k) newPos[k] = bsyms.size(), bsyms.push_back(std::move(out.bsyms[k]));
            out.bsyms = std::move(bsyms);
            const size_t bIndex = static_cast<size_t>(reg - regions.begin());
            regions[a] = {merged, std::move(r)};
            shapes[a] = shapeOf(regions[a].second);
            regions.erase(regions.begin() + static_cast<std::ptrdiff_t>(bIndex));
            shapes.erase(shapes.begin() + static_cast<std::ptrdiff_t>(bIndex));
            for (size_t k = 0; k < regions.size(); ++k)
              if (k != a) regions[k].first = newPos[regions[k].first];
            std::vector<size_t> byPos(regions.size());
            for (size_t k = 0; k < byPos.size(); ++k) byPos[k] = k;
            std::sort(byPos.begin(), byPos.end(), [&](size_t x, size_t y) { return regions[x].first < regions[y].first; });
            std::vector<std::pair<size_t, FusionRegion>> sortedRegions;
            std::vector<Shape> sortedShapes;
            for (size_t k : byPos) sortedRegions.push_back(std::move(regions[k])), sortedShapes.push_back(std::move(shapes[k]));
            regions = std::move(sortedRegions);
            shapes = std::move(sortedShapes);
            // Start over from the first region whose window reaches A's old place: the calls
            // before it did not move, so a region looking only at them finds what it found.
            size_t restart = 0;
            while (restart < regions.size() && regions[restart].first + kWindow < posA) ++restart;
            a = restart - 1;  // (wraps to the loop's ++ when restart is 0)
            break;
          }
        }
      }
      if (readsTainted) {
        moves[i - posA] = true;
        for (const TensorPtr& t : b.outputTensors()) tainted.insert(t.get());
      }
    }
  }
}

}  // namespace

namespace {

void renameOutput(BoundSymbol& b, const TensorProxy* from, const TensorPtr& to) {
  if (b.output.isTensor() && b.output.toTensor().get() == from) b.output = Value(to);
  for (BoundSymbol& s : b.subsymbols) renameOutput(s, from, to);
}

/// A gather (an index_select, an embedding: rows of a table read at indices) read by several
/// fusible calls is taken again right before each of them, under a new name: each kernel then
/// loads the rows at the index itself, where one gather at the top would join whatever kernel was
/// open there and be stored for the others (a decoder's rotary rows, taken once and read by every
/// layer's RoPE; its embedding, read by the first norm and the first residual add). The gather
/// stays where it was for its other readers. Only calls whose decomposition is the one gather.
/// `kept` receives the results of the gathers that stay for other readers: no kernel computes them
/// (a kernel would store them at another shape than its own), an ATen call does.
std::optional<Trace> gathersPerReader(const Trace& trace, const std::function<bool(const BoundSymbol&)>& fusible,
                                      std::unordered_set<const TensorProxy*>& kept) {
  std::unordered_set<const TensorProxy*> returned;
  {
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned.insert(t.get());
  }
  auto fusibleCall = [&](const BoundSymbol& b) {
    std::vector<BoundSymbol> prims;
    return !b.sym->hasTag(kDel) && b.sym->executor.empty() && leafPrims(b, fusible, prims);
  };
  auto isGather = [&](const BoundSymbol& b) {
    std::vector<BoundSymbol> prims;
    if (b.sym->hasTag(kDel) || !b.sym->executor.empty() || !leafPrims(b, fusible, prims) || prims.size() != 1) return false;
    const std::string& n = prims[0].sym->name;
    return (n == "take" || n == "embedding") && b.output.isTensor() && b.outputTensors().size() == 1;
  };
  std::unordered_map<const TensorProxy*, size_t> gatherAt;  // output -> the gather computing it
  std::vector<bool> gatherCall(trace.bsyms.size(), false);
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    if (!isGather(trace.bsyms[i])) continue;
    gatherCall[i] = true;
    gatherAt[trace.bsyms[i].output.toTensor().get()] = i;
  }
  if (gatherAt.empty()) return std::nullopt;
  // Per gather, its fusible readers and whether anything else reads it.
  std::unordered_map<size_t, std::vector<size_t>> fusibleReaders;
  std::unordered_set<size_t> otherReaders;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    std::unordered_set<size_t> seen;
    std::optional<bool> fusibleReader;  // (asked once, of a call that reads a gather)
    for (const TensorPtr& t : trace.bsyms[i].inputTensors()) {
      auto g = gatherAt.find(t.get());
      if (g == gatherAt.end() || !seen.insert(g->second).second) continue;
      // (a gather reading another's result keeps reading the one it read)
      if (!fusibleReader) fusibleReader = !gatherCall[i] && fusibleCall(trace.bsyms[i]);
      if (*fusibleReader) fusibleReaders[g->second].push_back(i);
      else otherReaders.insert(g->second);
    }
  }
  Trace work = trace.emptyCopy();
  // (a trace made by a pass may not list every name its calls use)
  std::function<void(const BoundSymbol&)> reserve = [&](const BoundSymbol& b) {
    for (const TensorPtr& t : b.outputTensors()) work.names.insert(t->name);
    for (const BoundSymbol& sub : b.subsymbols) reserve(sub);
  };
  for (const TensorPtr& t : trace.inputs) work.names.insert(t->name);
  for (const BoundSymbol& b : trace.bsyms) reserve(b);
  std::unordered_map<size_t, std::vector<size_t>> readsOf;  // reader -> gathers taken again for it
  std::unordered_set<size_t> taken;                          // gathers taken again for their readers
  for (auto& [g, rs] : fusibleReaders) {
    if (rs.size() < 2 && (rs.empty() || rs[0] == g + 1)) continue;  // one reader, right after it
    taken.insert(g);
    for (size_t r : rs) readsOf[r].push_back(g);
  }
  for (auto& [r, gs] : readsOf) std::sort(gs.begin(), gs.end());  // (a deterministic order)
  if (readsOf.empty()) return std::nullopt;
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (taken.count(i)) {
      const TensorProxy* out = b.output.toTensor().get();
      if (!otherReaders.count(i) && !returned.count(out)) continue;  // each reader takes its own
      kept.insert(out);
    }
    auto rd = readsOf.find(i);
    if (rd == readsOf.end()) {
      work.bsyms.push_back(b);
      continue;
    }
    TensorRenames to;
    for (size_t g : rd->second) {
      BoundSymbol copy = trace.bsyms[g];
      const TensorPtr orig = copy.output.toTensor();  // (a copy: renameOutput replaces it)
      auto t = std::make_shared<TensorProxy>(*orig);
      t->name = work.newName();
      renameOutput(copy, orig.get(), t);
      to[orig.get()] = t;
      work.bsyms.push_back(std::move(copy));
    }
    BoundSymbol reader = b;
    substituteReads(reader, to);
    work.bsyms.push_back(std::move(reader));
  }
  return work;
}

/// A sum over every dim but the last: the column sum of a bias gradient.
bool sumsLeadingDims(const BoundSymbol& p) {
  if (!p.sym->isPrim() || p.sym->name != "sum" || p.args.size() < 2 || !p.args[0].isTensor()) return false;
  std::vector<int64_t> dims = p.args[1].toInts();
  int64_t rank = p.args[0].tensor().ndim();
  if (rank < 2 || static_cast<int64_t>(dims.size()) != rank - 1) return false;
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] != static_cast<int64_t>(d)) return false;
  return true;
}

/// Each call's prims where the fuser can take all of them (a call not deleting, claimed by no
/// executor, whose decomposition is fusible prims); nothing for the others.
std::vector<std::optional<std::vector<BoundSymbol>>> fusiblePrims(const Trace& t,
                                                                  const std::function<bool(const BoundSymbol&)>& fusible) {
  std::vector<std::optional<std::vector<BoundSymbol>>> out(t.bsyms.size());
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    const BoundSymbol& b = t.bsyms[i];
    std::vector<BoundSymbol> prims;
    if (!b.sym->hasTag(kDel) && b.sym->executor.empty() && leafPrims(b, fusible, prims)) out[i] = std::move(prims);
  }
  return out;
}

/// The order of t's calls with each fusible call that sums one value over its leading dims moved
/// to right after that value's fusible producer. A backward computes a bias gradient after the
/// matmuls that read the same gradient, so the sum began a run of its own and ran as a kernel of
/// its own (an ATen reduction per linear layer); next to its producer it is a column output of
/// that kernel. Returns nothing when no call moves.
std::vector<size_t> columnSumsAfterProducers(const Trace& t,
                                             const std::vector<std::optional<std::vector<BoundSymbol>>>& prims,
                                             const std::function<bool(const BoundSymbol&)>& pointwise) {
  size_t n = t.bsyms.size();
  std::unordered_map<const TensorProxy*, size_t> producer;
  std::vector<bool> moved(n, false);
  // The shape each fusible call iterates over (unitShape): the sum joins a producer that
  // iterates over the summed value itself, not one that makes it by a reshape of other dims.
  std::vector<Shape> shapes(n);
  std::vector<std::vector<size_t>> after(n);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const BoundSymbol& b = t.bsyms[i];
    if (prims[i]) {
      shapes[i] = unitShape(Unit{&b, true, *prims[i]}, pointwise);
      std::vector<TensorPtr> ins = b.inputTensors();
      bool sums = false;
      for (const BoundSymbol& p : *prims[i]) sums |= sumsLeadingDims(p);
      auto it = sums && ins.size() == 1 ? producer.find(ins[0].get()) : producer.end();
      size_t p = it == producer.end() ? n : it->second;
      if (p < n && prims[p] && p + 1 < i && !t.bsyms[p].sym->hasTag(kShapeOp) &&
          withoutUnitDims(shapes[p]) == withoutUnitDims(ins[0]->shape)) {
        after[p].push_back(i);
        moved[i] = any = true;
      }
    }
    for (const TensorPtr& o : b.outputTensors()) producer[o.get()] = i;
  }
  std::vector<size_t> order;
  if (!any) return order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (moved[i]) continue;
    order.push_back(i);
    for (size_t j : after[i]) order.push_back(j);
  }
  return order;
}

}  // namespace

namespace {

Trace partitionOnce(const Trace& traceIn, const std::function<bool(const BoundSymbol&)>& fusible,
                    const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                    const std::function<bool(const BoundSymbol&)>& terminal,
                    const std::function<bool(const BoundSymbol&)>& pointwise) {
  std::unordered_set<const TensorProxy*> keptGathers;
  const std::optional<Trace> cloned = gathersPerReader(traceIn, fusible, keptGathers);
  const Trace& trace = cloned ? *cloned : traceIn;
  std::vector<std::optional<std::vector<BoundSymbol>>> prims = fusiblePrims(trace, fusible);
  std::vector<size_t> order = columnSumsAfterProducers(trace, prims, pointwise);
  if (order.empty())
    for (size_t i = 0; i < trace.bsyms.size(); ++i) order.push_back(i);
  std::vector<Unit> units;
  for (size_t i : order) {
    const BoundSymbol& b = trace.bsyms[i];
    Unit u{&b, prims[i].has_value(), {}};
    if (u.fusible) u.prims = std::move(*prims[i]);
    if (u.fusible && b.output.isTensor() && keptGathers.count(b.output.toTensor().get())) u.fusible = false;
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
  std::vector<size_t> group, pending;
  std::unordered_set<const TensorProxy*> groupOut, terminalOut;

  std::vector<std::pair<size_t, FusionRegion>> regions;  // fused calls: position in out, region
  // Emits a group as one fused call; returns false (emitting nothing) when `fuse` declines it.
  auto emitFused = [&](const std::vector<size_t>& members_) -> bool {
    std::unordered_set<size_t> members(members_.begin(), members_.end());
    // Calls that only view the region's inputs (slices, permutes, broadcasts, reshapes of them):
    // where their result is used outside the region it stays a view computed outside (free),
    // never an output the kernel would write.
    std::unordered_set<const TensorProxy*> viewOut, memberOut;
    std::vector<size_t> viewsOutside;
    for (size_t i : members_)
      for (const TensorPtr& o : units[i].bsym->outputTensors()) memberOut.insert(o.get());
    for (size_t i : members_) {
      bool view = !units[i].prims.empty();
      std::unordered_set<const TensorProxy*> ownOut;
      for (const BoundSymbol& p : units[i].prims) {
        // (Broadcasts are stored: read as an input, an expanded view has stride 0 along the row,
        // which a row kernel cannot read with wide loads.)
        view &= p.sym->hasTag(kShapeOp) && !copyingView(p) && p.sym->name != "broadcast_in_dim";
        // A view of the region's inputs, of other views, or of the unit's own earlier prims.
        for (const TensorPtr& t : p.inputTensors())
          view &= ownOut.count(t.get()) || !memberOut.count(t.get()) || viewOut.count(t.get());
        for (const TensorPtr& o : p.outputTensors()) ownOut.insert(o.get());
      }
      if (!view) continue;
      for (const TensorPtr& t : units[i].bsym->outputTensors()) viewOut.insert(t.get());
    }
    // The views used outside, with the views they are made from, in program order.
    std::unordered_set<const TensorProxy*> neededOutside;
    for (size_t k = members_.size(); k-- > 0;) {
      size_t i = members_[k];
      const std::vector<TensorPtr> outs = units[i].bsym->outputTensors();
      if (outs.empty() || !viewOut.count(outs[0].get())) continue;
      bool outside = false;
      for (const TensorPtr& t : outs) {
        outside |= returned.count(t.get()) > 0 || neededOutside.count(t.get()) > 0;
        for (size_t reader : readers[t.get()]) outside |= !members.count(reader);
      }
      if (!outside) continue;
      viewsOutside.insert(viewsOutside.begin(), i);
      for (const TensorPtr& t : units[i].bsym->inputTensors()) neededOutside.insert(t.get());
    }
    auto isViewUnit = [&](size_t i) {
      std::vector<TensorPtr> outs = units[i].bsym->outputTensors();
      return !outs.empty() && viewOut.count(outs[0].get()) > 0;
    };
    // The views the kernel reads (directly or through other views). A view only used outside is
    // not part of the kernel: its input would become a kernel input the kernel never reads, and
    // that false dependency moves the kernel after the input's producer (a sharded parameter's
    // all-gather wait, which then no longer overlaps the kernel).
    const std::vector<bool> inKernel = feeding(units, members_, {}, [&](size_t i) { return !isViewUnit(i); });
    // Permutes of values the kernel computes that only calls outside read (a transpose of a copy
    // that a matmul reads transposed): made after the kernel, from the value it stores, for free.
    // Inside, the kernel would store the permuted layout (a transposing store), or fail to lower.
    // (Other views, which keep the order of the elements, are stored as they are.)
    std::unordered_set<size_t> after;
    for (size_t k = members_.size(); k-- > 0;) {
      size_t i = members_[k];
      if (isViewUnit(i) || units[i].prims.empty()) continue;
      bool pure = true, permutes = false;
      for (const BoundSymbol& p : units[i].prims) {
        pure &= p.sym->hasTag(kShapeOp) && !copyingView(p) && p.sym->name != "broadcast_in_dim";
        permutes |= p.sym->name == "transpose";
      }
      pure &= permutes;
      if (!pure) continue;
      for (const TensorPtr& t : units[i].bsym->outputTensors())
        for (size_t reader : readers[t.get()]) pure &= !members.count(reader) || after.count(reader) > 0;
      if (pure) after.insert(i);
    }
    // First with the views inside the kernel (a reshape that is no view in ATen becomes an index
    // remapping), then, if that cannot be lowered, with every view computed outside and read.
    for (bool inside : {true, false}) {
      if (!inside && viewOut.empty()) return false;
      FusionRegion r;
      std::unordered_set<const TensorProxy*> produced, seenIn;
      for (size_t m = 0; m < members_.size(); ++m) {
        size_t i = members_[m];
        r.originals.push_back(*units[i].bsym);
        if (after.count(i) || (isViewUnit(i) && (!inside || !inKernel[m]))) continue;
        for (const BoundSymbol& p : units[i].prims) {
          for (const TensorPtr& t : p.inputTensors())
            if (!produced.count(t.get()) && seenIn.insert(t.get()).second) r.inputs.push_back(t);
          for (const TensorPtr& t : p.outputTensors()) produced.insert(t.get());
          // Broadcasts and reshapes only relabel dims: a region of shape ops alone is no fusion.
          // A reshape that eager makes by copying is a kernel of its own: worth one fused copy.
          r.computeOps += computeCost(p);
          r.prims.push_back(p);
        }
      }
      for (size_t i : members_) {
        for (const TensorPtr& t : units[i].bsym->outputTensors()) {
          if (viewOut.count(t.get()) || after.count(i)) continue;
          bool usedOutside = returned.count(t.get()) > 0;
          for (size_t reader : readers[t.get()]) usedOutside |= !members.count(reader) || after.count(reader) > 0;
          if (usedOutside) r.outputs.push_back(t);
        }
      }
      std::optional<BoundSymbol> fused = r.outputs.empty() ? std::nullopt : fuse(r);
      if (!fused) continue;
      for (size_t i : members_) {
        bool isView = isViewUnit(i);
        bool before = inside ? std::find(viewsOutside.begin(), viewsOutside.end(), i) != viewsOutside.end() : isView;
        if (before) out.bsyms.push_back(*units[i].bsym);
      }
      out.bsyms.push_back(std::move(*fused));
      regions.emplace_back(out.bsyms.size() - 1, std::move(r));
      for (size_t i : members_)
        if (after.count(i)) out.bsyms.push_back(*units[i].bsym);
      return true;
    }
    return false;
  };

  // A group no kernel can take whole, as kernels of its longest fusible runs in program order
  // (members stay in program order, a valid order within a group, so a run reads only what the
  // runs before it made). A call no run takes runs as it is. GroupNorm was such a group: its
  // statistics are a row reduction over [N, G, C/G * H * W], its normalization and affine a
  // pointwise kernel over [N, C, H, W], and the row kernel cannot split its rows back into
  // channels; the whole norm ran as a dozen ATen calls (a diffusion UNet's 61 norms a step).
  // The longest run from each start is found by halving (fusing is not monotone in the length,
  // so a shorter fusible run may be taken where a longer one would also fuse: fewer lowerings).
  // Whether a run has too few compute ops to be worth a kernel of its own (see emitFused).
  auto tooSmall = [&](const std::vector<size_t>& run) {
    int ops = 0;
    for (size_t i : run)
      for (const BoundSymbol& p : units[i].prims) ops += computeCost(p);
    return ops < 2;  // (the executor's worthFusing)
  };
  auto emitPrefixes = [&](const std::vector<size_t>& members) {
    size_t start = 0;
    while (start < members.size()) {
      auto run = [&](size_t end) { return std::vector<size_t>(members.begin() + start, members.begin() + end); };
      size_t n = members.size();
      // (One call alone is a kernel when it is worth one, as it is outside a split: a roll
      // after the window reverse whose merged dims it cannot read through.)
      if ((n - start > 1 || !tooSmall(run(n))) && emitFused(run(n))) return;
      // Longest end in (start + 1, n) whose run fuses: lo fuses (or is start + 1), hi does not.
      size_t lo = start + 1, hi = n;
      while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        std::vector<size_t> r = run(mid);
        bool ok = false;
        {
          // A trial: emitFused appends on success; take it back, the final run is emitted below.
          size_t mark = out.bsyms.size(), marks = regions.size();
          ok = emitFused(r);
          out.bsyms.resize(mark);
          regions.resize(marks);
        }
        // (Too little to fuse alone is not a failure to lower: the residual add before a norm
        // fuses with the norm, not alone.)
        if (ok || tooSmall(r)) lo = mid;
        else hi = mid;
      }
      if ((lo > start + 1 || !tooSmall(run(lo))) && emitFused(run(lo))) {
        start = lo;
        continue;
      }
      out.bsyms.push_back(*units[members[start]].bsym);
      ++start;
    }
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
      /// Shapes of views of its values it holds (reshapes keeping the elements' order): a call
      /// over one of them joins it as a call over `shape` would.
      std::vector<Shape> views;
      bool holds(const Shape& s) const {
        if (covers(shape, s)) return true;
        for (const Shape& v : views)
          if (covers(v, s)) return true;
        return false;
      }
      bool iterates(const Shape& s) const {
        if (withoutUnitDims(s) == withoutUnitDims(shape)) return true;
        for (const Shape& v : views)
          if (withoutUnitDims(s) == withoutUnitDims(v)) return true;
        return false;
      }
    };
    std::vector<Sub> subs;
    std::vector<size_t> order;
    std::function<void(size_t)> close = [&](size_t k) {
      if (subs[k].closed) return;
      subs[k].closed = true;
      for (size_t d : subs[k].deps) close(d);
      order.push_back(k);
    };
    // Calls that only widen or broadcast values from outside the run (a drop-path mask, [B, 1, 1]
    // as float32, expanded over [B, N, C]) wait for their first reader and join its group: alone
    // they were an ATen conversion and an expanded view, read by the kernel with stride 0 along
    // its rows, which keeps a row kernel from wide loads.
    std::unordered_map<const TensorProxy*, size_t> deferred;  // output -> unit
    std::vector<size_t> deferredOrder;
    // (Also a broadcast of a group's value: the group stores the small value, the reader's kernel
    // broadcasts it.)
    auto feeder = [&](const Unit& u) {
      if (u.prims.empty()) return false;
      bool expands = false;
      for (const BoundSymbol& p : u.prims) {
        // (A reshape of a value from outside the run too: a norm's weight shaped [1, C, 1, 1]
        // before its widening, which alone stayed an ATen conversion of its own.)
        if (p.sym->name != "convert_element_type" && p.sym->name != "broadcast_in_dim" && p.sym->name != "reshape")
          return false;
        expands |= p.sym->name == "broadcast_in_dim" && p.args[0].isTensor() &&
                   p.outputTensors()[0]->numel() > p.args[0].tensor().numel();
      }
      if (expands) return true;
      for (const TensorPtr& t : u.bsym->inputTensors())
        for (const Sub& s : subs)
          if (s.produced.count(t.get())) return false;
      return true;
    };
    // The deferred units that u reads, and those they read, in program order.
    std::function<void(const Unit&, std::vector<size_t>&)> deferredReads = [&](const Unit& u, std::vector<size_t>& js) {
      for (const TensorPtr& t : u.bsym->inputTensors()) {
        auto it = deferred.find(t.get());
        if (it == deferred.end() || std::find(js.begin(), js.end(), it->second) != js.end()) continue;
        deferredReads(units[it->second], js);
        js.push_back(it->second);
      }
    };
    for (size_t i : run) {
      const Unit& u = units[i];
      if (feeder(u)) {
        for (const TensorPtr& o : u.bsym->outputTensors()) deferred[o.get()] = i;
        deferredOrder.push_back(i);
        continue;
      }
      Shape shape = unitShape(u, pointwise);
      std::vector<size_t> feeders;  // deferred units u reads: they join u's sub
      deferredReads(u, feeders);
      std::vector<TensorPtr> inputs = u.bsym->inputTensors();
      for (size_t j : feeders)
        for (const TensorPtr& t : units[j].bsym->inputTensors()) inputs.push_back(t);
      std::vector<size_t> readsFrom;
      for (size_t k = 0; k < subs.size(); ++k) {
        if (subs[k].closed) continue;
        for (const TensorPtr& t : inputs)
          if (subs[k].produced.count(t.get())) {
            readsFrom.push_back(k);
            break;
          }
      }
      // A reduction must iterate over its own input's shape: a sum of per-row values (a mean over
      // rows) cannot join the kernel of the rows.
      auto fits = [&](size_t k) {
        for (const BoundSymbol& p : u.prims)
          if (p.sym->hasTag(kReductionOp) && !(pointwise && pointwise(p)) && !p.args.empty() && p.args[0].isTensor() &&
              !subs[k].iterates(p.args[0].tensor().shape))
            return false;
        return true;
      };
      std::optional<size_t> target;
      for (size_t k : readsFrom)
        if (!target && subs[k].holds(shape) && fits(k)) target = k;
      // A view of a sub's value that keeps its elements' order (the [B, H, W, C] view of a
      // residual sum over [B, H * W, C]) stays with it: the kernel stores it as a merge or a split
      // of its rows. A sub of the view's shape would close the sub it reads, and leave the sum
      // alone, apart from the norm that reads it.
      if (!target && readsFrom.size() == 1 && !u.prims.empty()) {
        bool view = true;
        for (const BoundSymbol& p : u.prims) view &= p.sym->name == "reshape" && !copyingView(p);
        if (view) {
          target = readsFrom[0];
          subs[*target].views.push_back(shape);
        }
      }
      if (!target)
        for (size_t k = 0; k < subs.size(); ++k)
          if (!subs[k].closed && subs[k].shape == shape) {
            target = k;
            break;
          }
      // Else one whose shape covers its own (a norm weight's conversion, [N], next to [1, 1, N] rows).
      if (!target && readsFrom.empty())
        for (size_t k = 0; k < subs.size(); ++k)
          if (!subs[k].closed && covers(subs[k].shape, shape) && fits(k)) {
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
      for (size_t j : feeders) {
        sub.members.push_back(j);
        for (const TensorPtr& t : units[j].bsym->outputTensors()) {
          sub.produced.insert(t.get());
          deferred.erase(t.get());
        }
      }
      sub.members.push_back(i);
      for (const TensorPtr& t : u.bsym->outputTensors()) sub.produced.insert(t.get());
      // Every earlier sub it reads (open or closed) must come out before it.
      for (size_t k = 0; k < subs.size(); ++k) {
        if (k == *target) continue;
        for (const TensorPtr& t : inputs)
          if (subs[k].produced.count(t.get())) {
            sub.deps.push_back(k);
            break;
          }
      }
    }
    // Feeders no call of the run reads (their readers come after it): a group of their own, after
    // the groups they read.
    std::vector<size_t> unread;
    for (size_t j : deferredOrder)
      if (deferred.count(units[j].bsym->outputTensors()[0].get())) unread.push_back(j);
    if (!unread.empty()) {
      subs.push_back(Sub{unitShape(units[unread.front()], pointwise), unread, {}, {}, false, {}});
      for (size_t j : unread)
        for (const TensorPtr& t : units[j].bsym->inputTensors())
          for (size_t k = 0; k + 1 < subs.size(); ++k)
            if (subs[k].produced.count(t.get())) subs.back().deps.push_back(k);
    }
    for (size_t k = 0; k < subs.size(); ++k) close(k);
    for (size_t k : order) emitPrefixes(subs[k].members);
  };

  // The shapes the open group iterates over (each member's unitShape, without unit dims).
  std::vector<Shape> groupShapes;
  auto flush = [&] {
    // The calls passed over while the group was open: those its kernel reads (and what they
    // read) run before it, the others after it. A collective's wait then comes after a kernel
    // that needs nothing it completes, and the transfer goes on while that kernel runs (the
    // norm before a ZeRO-3 layer's gathered weights).
    std::unordered_set<const TensorProxy*> groupReads;
    for (size_t i : group)
      for (const TensorPtr& t : units[i].bsym->inputTensors()) groupReads.insert(t.get());
    const std::vector<bool> before = feeding(units, pending, std::move(groupReads), [](size_t) { return false; });
    // (A column sum passed over is a kernel of its own: ATen's reduction over leading dims ran a
    // bf16 [12544, 1152] sum, Swin's qkv bias gradient, at a third of the bandwidth.)
    auto emitPending = [&](size_t i) {
      bool sum = false;
      for (const BoundSymbol& p : units[i].prims) sum |= sumsLeadingDims(p);
      if (!(sum && !tooSmall({i}) && emitFused({i}))) out.bsyms.push_back(*units[i].bsym);
    };
    for (size_t k = 0; k < pending.size(); ++k)
      if (before[k]) emitPending(pending[k]);
    if (!group.empty() && !emitFused(group)) emitSplit(group);
    for (size_t k = 0; k < pending.size(); ++k)
      if (!before[k]) emitPending(pending[k]);
    pending.clear();
    group.clear();
    groupShapes.clear();
    groupOut.clear();
    terminalOut.clear();
  };

  auto reads = [](const Unit& u, const std::unordered_set<const TensorProxy*>& set) {
    for (const TensorPtr& t : u.bsym->inputTensors())
      if (set.count(t.get())) return true;
    return false;
  };

  // A unit whose prims only convert terminal values (the conversion of a column sum back to its
  // parameter's dtype, which the autodiff emits after the sum) is the sum's epilogue: it joins
  // the sum's group and its values are terminal too.
  auto onlyConvertsTerminals = [&](const Unit& u) {
    std::unordered_set<const TensorProxy*> own;
    for (const BoundSymbol& p : u.prims) {
      if (p.sym->name != "convert_element_type" || p.args.empty() || !p.args[0].isTensor()) return false;
      const TensorProxy* in = p.args[0].toTensor().get();
      if (!terminalOut.count(in) && !own.count(in)) return false;
      for (const TensorPtr& o : p.outputTensors()) own.insert(o.get());
    }
    return !u.prims.empty();
  };

  // The shape a unit sums over its leading dims (a bias gradient's column sum) when the unit
  // reads one value, which its group does not make; nothing for other units. (A sum of a few rows
  // is an unrolled sum, fused like an elementwise op over its result: not one of these.)
  auto columnSumShape = [&](const Unit& u) -> std::optional<Shape> {
    std::vector<TensorPtr> ins = u.bsym->inputTensors();
    if (ins.size() != 1 || groupOut.count(ins[0].get())) return std::nullopt;
    for (const BoundSymbol& p : u.prims)
      if (sumsLeadingDims(p) && !(pointwise && pointwise(p))) return withoutUnitDims(p.args[0].tensor().shape);
    return std::nullopt;
  };
  // A sum over the leading dims of a value the open group neither makes nor iterates over (a
  // bias gradient of a value computed before, which columnSumsAfterProducers could not place
  // next to its producer): it cannot be a column output of the group's kernel, and inside the
  // group it made the group unfusable as a whole (ViT's LayerNorm backward then ran as five
  // kernels and three ATen products). It is passed over like a call the group does not read.
  auto foreignColumnSum = [&](const Unit& u) {
    if (group.empty()) return false;
    std::optional<Shape> s = columnSumShape(u);
    if (!s) return false;
    for (const Shape& g : groupShapes)
      if (g == *s) return false;
    return true;
  };
  // Whether a kernel iterating over a summed shape could also compute values of `other`: the
  // same shape, its rows, or a trailing part of it (a per-column parameter).
  auto sharesIteration = [](const Shape& summed, const Shape& other) {
    if (other == summed || covers(summed, other)) return true;
    return other.size() <= summed.size() && std::equal(other.rbegin(), other.rend(), summed.rbegin());
  };
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    if (u.fusible) {
      if (foreignColumnSum(u)) {
        pending.push_back(i);
        continue;
      }
      const Shape shape = withoutUnitDims(unitShape(u, pointwise));
      // A group that a column sum began, which this call does not read from and could not share
      // a kernel with: the sum is passed over, the call begins the group.
      if (group.size() == 1 && !reads(u, groupOut) && !sharesIteration(groupShapes.front(), shape)) {
        std::optional<Shape> s = columnSumShape(units[group.front()]);
        if (s && *s == groupShapes.front()) {
          pending.push_back(group.front());
          group.clear();
          groupShapes.clear();
          groupOut.clear();
          terminalOut.clear();
        }
      }
      bool readsTerminal = reads(u, terminalOut), epilogue = readsTerminal && onlyConvertsTerminals(u);
      if (readsTerminal && !epilogue) flush();
      group.push_back(i);
      groupShapes.push_back(shape);
      if (epilogue)
        for (const TensorPtr& t : u.bsym->outputTensors()) terminalOut.insert(t.get());
      for (const TensorPtr& t : u.bsym->outputTensors()) {
        groupOut.insert(t.get());
        if (u.terminal) terminalOut.insert(t.get());
      }
    } else if (reads(u, groupOut) || u.bsym->sym->hasTag(kDontDce) || u.bsym->sym->hasTag(kRandomOp)) {
      flush();
      out.bsyms.push_back(*u.bsym);
    } else if (group.empty()) {
      out.bsyms.push_back(*u.bsym);
    } else {
      // Reads nothing of the open group: the group goes on past it, and its kernel may read the
      // call's results (an index tensor, a matmul's output) without being cut in two (flush
      // places it).
      pending.push_back(i);
    }
  }
  flush();
  mergeIndependentRegions(out, regions, returned, fuse, pointwise);
  recomputeAcrossRegions(out, regions, returned, fuse, terminal);
  narrowStoredWidenings(out, regions, returned, fuse);
  return out;
}

}  // namespace

BoundSymbol FusionRegion::asCall(const Symbol* sym) const {
  BoundSymbol b;
  b.sym = sym;
  for (const TensorPtr& t : inputs) b.args.push_back(Value(t));
  std::vector<Value> outs;
  for (const TensorPtr& t : outputs) outs.push_back(Value(t));
  b.output = Value::list(std::move(outs));
  b.subsymbols = prims;
  return b;
}

namespace {

/// A composite call of fusible prims that computes much: at least seven computing prims, one of
/// them a reduction (a norm; not a sum with its conversions, which the partition passes over on
/// purpose and ATen runs as one call). Left unfused, no kernel could take its decomposition whole.
bool computingComposite(const BoundSymbol& b, const std::function<bool(const BoundSymbol&)>& fusible) {
  if (b.sym->isPrim() || !b.sym->executor.empty() || b.sym->hasTag(kDel) || b.subsymbols.empty()) return false;
  std::vector<BoundSymbol> prims;
  if (!leafPrims(b, fusible, prims)) return false;
  int compute = 0;
  bool reduces = false;
  for (const BoundSymbol& p : prims) {
    compute += !p.sym->hasTag(kShapeOp);
    reduces |= p.sym->hasTag(kReductionOp);
  }
  return reduces && compute >= 7;
}

}  // namespace

namespace {

/// A call whose decomposition draws random numbers and then computes on them (bernoulli: a uniform
/// draw, a comparison, a conversion) as its calls: the draw stays a call of its own, the rest joins
/// kernels (timm's DropPath made three launches of its [B, 1, 1] mask per block, and the
/// `new_empty` whose shape it filled a fourth, which nothing reads once the call is split).
Trace splitRandomComposites(const Trace& trace, const std::function<bool(const BoundSymbol&)>& fusible) {
  auto split = [&](const BoundSymbol& b) {
    if (b.sym->isPrim() || !b.sym->executor.empty() || b.sym->hasTag(kDel) || b.subsymbols.empty()) return false;
    std::vector<BoundSymbol> prims;
    if (leafPrims(b, fusible, prims)) return false;
    bool draws = false, computes = false;
    for (const BoundSymbol& s : b.subsymbols) {
      draws |= s.sym->hasTag(kRandomOp);
      computes |= !s.sym->hasTag(kRandomOp) && !s.sym->hasTag(kShapeOp);
    }
    return draws && computes;
  };
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any |= split(b);
  if (!any) return trace;
  Trace flat = trace.emptyCopy();
  for (const BoundSymbol& b : trace.bsyms) {
    if (!split(b)) {
      flat.bsyms.push_back(b);
      continue;
    }
    for (const BoundSymbol& s : b.subsymbols) flat.bsyms.push_back(s);
  }
  return dce(flat);
}

}  // namespace

Trace fusionPartition(const Trace& traceIn0, const std::function<bool(const BoundSymbol&)>& fusible,
                      const std::function<std::optional<BoundSymbol>(const FusionRegion&)>& fuse,
                      const std::function<bool(const BoundSymbol&)>& terminal,
                      const std::function<bool(const BoundSymbol&)>& pointwise) {
  const Trace traceIn = splitRandomComposites(traceIn0, fusible);
  Trace out = partitionOnce(traceIn, fusible, fuse, terminal, pointwise);
  // A composite whose decomposition no kernel could take whole (GroupNorm: statistics over
  // [N, G, C/G * H * W] rows, the normalization over [N, C, H, W], which one row kernel cannot
  // read back into channels) ran as its torch-language calls, each an ATen call (a dozen per norm:
  // a diffusion UNet's inference ran 1510 launches against torch.compile's 700). Partitioned again
  // with those composites one level flatter, their calls form kernels of their own shapes.
  std::unordered_map<const TensorProxy*, const Symbol*> composites;  // output -> the call's symbol
  for (const BoundSymbol& b : traceIn.bsyms)
    if (computingComposite(b, fusible))
      for (const TensorPtr& o : b.outputTensors()) composites[o.get()] = b.sym;
  std::unordered_set<const TensorProxy*> unfused;
  for (const BoundSymbol& b : out.bsyms) {
    std::vector<TensorPtr> outs = b.outputTensors();
    auto it = outs.empty() ? composites.end() : composites.find(outs[0].get());
    if (it != composites.end() && it->second == b.sym)  // the call itself, not a kernel making its value
      for (const TensorPtr& o : outs) unfused.insert(o.get());
  }
  if (unfused.empty()) return out;
  Trace flat = traceIn.emptyCopy();
  for (const BoundSymbol& b : traceIn.bsyms) {
    bool hit = false;  // (only computing composites' outputs are in `unfused`)
    for (const TensorPtr& o : b.outputTensors()) hit |= unfused.count(o.get()) > 0;
    if (!hit) {
      flat.bsyms.push_back(b);
      continue;
    }
    for (const BoundSymbol& s : b.subsymbols) flat.bsyms.push_back(s);
  }
  return partitionOnce(flat, fusible, fuse, terminal, pointwise);
}

}  // namespace thunder
