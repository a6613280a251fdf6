#include "transforms/prefetch.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <unordered_map>

#include "transforms/remat.h"

namespace thunder {
namespace {

std::unordered_map<std::string, int64_t>& windows() {
  static std::unordered_map<std::string, int64_t> w;
  return w;
}

bool readsAny(const BoundSymbol& b, const std::vector<TensorPtr>& ts) {
  for (const TensorPtr& in : b.inputTensors())
    if (std::find(ts.begin(), ts.end(), in) != ts.end()) return true;
  return false;
}

/// Moves each completion (the first reader of a marked call's output when that output is all it
/// reads: `wait`) down to just before the first call reading its result, with the transfers
/// issued right after it (marked calls and the recomputable producers of their inputs), which
/// must stay after it to keep the window. Calls between that read none of them (a kernel of the
/// previous layer's gradients that fusion placed after the wait) then run while the transfer
/// completes instead of after it.
void sinkCompletions(Trace& t) {
  const auto& marked = windows();
  auto isMarked = [&](const BoundSymbol& b) { return marked.count(b.sym->id()) > 0; };
  for (size_t i = 0; i < t.bsyms.size(); ++i) {
    if (!isMarked(t.bsyms[i])) continue;
    const std::vector<TensorPtr> started = t.bsyms[i].outputTensors();
    size_t j = i + 1;
    while (j < t.bsyms.size() && !readsAny(t.bsyms[j], started)) ++j;
    if (j >= t.bsyms.size() || isMarked(t.bsyms[j])) continue;
    const std::vector<TensorPtr> ins = t.bsyms[j].inputTensors();
    if (ins.empty() || !std::all_of(ins.begin(), ins.end(), [&](const TensorPtr& x) {
          return std::find(started.begin(), started.end(), x) != started.end();
        }))
      continue;
    // The block: the completion and the transfers issued right after it.
    size_t e = j + 1;
    while (e < t.bsyms.size()) {
      const BoundSymbol& b = t.bsyms[e];
      bool feedsNext = e + 1 < t.bsyms.size() && isMarked(t.bsyms[e + 1]) && isRecomputable(b) &&
                       readsAny(t.bsyms[e + 1], b.outputTensors());
      if (!isMarked(b) && !feedsNext) break;
      e += isMarked(b) ? 1 : 2;
    }
    std::vector<TensorPtr> blockOut;
    for (size_t b = j; b < e; ++b)
      for (const TensorPtr& o : t.bsyms[b].outputTensors()) blockOut.push_back(o);
    size_t k = e;
    while (k < t.bsyms.size() && !readsAny(t.bsyms[k], blockOut)) ++k;
    if (k == e || k >= t.bsyms.size()) continue;  // already there, or nothing reads it
    std::vector<BoundSymbol> block(std::make_move_iterator(t.bsyms.begin() + static_cast<long>(j)),
                                   std::make_move_iterator(t.bsyms.begin() + static_cast<long>(e)));
    t.bsyms.erase(t.bsyms.begin() + static_cast<long>(j), t.bsyms.begin() + static_cast<long>(e));
    t.bsyms.insert(t.bsyms.begin() + static_cast<long>(k - (e - j)), std::make_move_iterator(block.begin()),
                   std::make_move_iterator(block.end()));
  }
}

}  // namespace

void markPrefetch(const std::string& symbolId, int64_t windowBytes) {
  windows()[symbolId] = windowBytes;
}

bool hasPrefetchCalls(const Trace& trace) {
  return !windows().empty() &&
         std::any_of(trace.bsyms.begin(), trace.bsyms.end(),
                     [](const BoundSymbol& b) { return windows().count(b.sym->id()) > 0; });
}

Trace prefetch(const Trace& trace) {
  const auto& marked = windows();
  const size_t n = trace.bsyms.size();
  std::vector<size_t> starts;
  for (size_t i = 0; i < n; ++i)
    if (marked.count(trace.bsyms[i].sym->id())) starts.push_back(i);
  if (starts.empty()) return trace;

  std::unordered_map<const TensorProxy*, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const TensorPtr& t : trace.bsyms[i].outputTensors()) producer.emplace(t.get(), i);
  // The completion of each start: the first later call reading its output (none: the end).
  auto completion = [&](size_t s) {
    std::vector<TensorPtr> outs = trace.bsyms[s].outputTensors();
    for (size_t i = s + 1; i < n; ++i)
      for (const TensorPtr& t : trace.bsyms[i].inputTensors())
        if (std::any_of(outs.begin(), outs.end(), [&](const TensorPtr& o) { return o == t; }))
          return i;
    return n;
  };
  auto bytes = [&](size_t s) {
    int64_t b = 0;
    for (const TensorPtr& t : trace.bsyms[s].outputTensors()) b += tensorBytes(*t);
    return b;
  };

  // anchor[i]: the call after which call i now runs (-1: first). Calls not moved keep their place.
  std::vector<long> anchor(n, -2);
  std::vector<bool> moved(n, false);
  // Moves call i (and the recomputable producers of its inputs) to just after `at`, if its inputs
  // are ready there; returns whether it did.
  std::function<bool(size_t, long)> hoist = [&](size_t i, long at) {
    std::vector<size_t> deps;
    for (const TensorPtr& t : trace.bsyms[i].inputTensors()) {
      auto p = producer.find(t.get());
      if (p == producer.end()) continue;  // a trace input
      size_t q = p->second;
      long placed = moved[q] ? anchor[q] : static_cast<long>(q);
      if (placed <= at) continue;
      if (!isRecomputable(trace.bsyms[q]) || marked.count(trace.bsyms[q].sym->id())) return false;
      deps.push_back(q);
    }
    std::vector<std::pair<size_t, long>> undo;
    for (size_t q : deps) {
      if (moved[q] && anchor[q] <= at) continue;
      undo.push_back({q, moved[q] ? anchor[q] : -2});
      if (!hoist(q, at)) {
        for (auto [u, a] : undo) {
          moved[u] = a != -2;
          anchor[u] = a;
        }
        return false;
      }
    }
    moved[i] = true;
    anchor[i] = at;
    return true;
  };

  std::vector<size_t> done(starts.size());
  for (size_t k = 0; k < starts.size(); ++k) done[k] = completion(starts[k]);
  long previous = -1;
  for (size_t k = 0; k < starts.size(); ++k) {
    size_t s = starts[k];
    int64_t window = marked.at(trace.bsyms[s].sym->id());
    // The earliest j such that s_j+1..s_k fit the window: s_k goes after s_j's completion
    // (j = -1: at the start).
    int64_t inFlight = bytes(s);
    long at = k == 0 ? -1 : static_cast<long>(done[k - 1]);
    for (long j = static_cast<long>(k) - 2; j >= -1; --j) {
      inFlight += bytes(starts[j + 1]);
      if (inFlight > window) break;
      at = j >= 0 ? static_cast<long>(done[j]) : -1;
    }
    // A transfer larger than the window on its own (a head or embedding table beside the blocks'
    // parameters) is queued right behind the previous one instead of after its completion: it
    // then runs while the previous one's consumers compute, where waiting for the window would
    // leave it all but unoverlapped. It completes after the previous one either way (one stream).
    if (bytes(s) > window) at = previous;
    at = std::max(at, previous);
    if (at >= static_cast<long>(s) - 1 || !hoist(s, at)) {
      previous = static_cast<long>(s);
      continue;
    }
    previous = at;
  }

  // Emit: each unmoved call in place, followed by the calls anchored after it (in trace order).
  std::vector<std::vector<size_t>> after(n + 1);
  for (size_t i = 0; i < n; ++i)
    if (moved[i]) after[anchor[i] + 1].push_back(i);
  Trace out = trace.emptyCopy();
  std::function<void(size_t)> emitAfter = [&](size_t slot) {
    for (size_t i : after[slot]) {
      out.bsyms.push_back(trace.bsyms[i]);
      emitAfter(i + 1);
    }
  };
  emitAfter(0);
  for (size_t i = 0; i < n; ++i) {
    if (moved[i]) continue;
    out.bsyms.push_back(trace.bsyms[i]);
    emitAfter(i + 1);
  }
  sinkCompletions(out);
  return out;
}

}  // namespace thunder
