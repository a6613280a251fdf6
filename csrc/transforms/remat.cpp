#include "transforms/remat.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace thunder {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

/// Dinic's maximum flow; after run(), sourceSideNearSink() gives a minimum cut.
class MaxFlow {
 public:
  explicit MaxFlow(int n) : adj_(n), level_(n), iter_(n) {}

  void addEdge(int u, int v, int64_t cap) {
    adj_[u].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({v, cap});
    adj_[v].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({u, 0});
  }

  int64_t run(int s, int t) {
    int64_t flow = 0;
    while (bfs(s, t)) {
      std::fill(iter_.begin(), iter_.end(), 0);
      while (int64_t f = dfs(s, t, kInf)) flow += f;
    }
    return flow;
  }

  /// The source side of the minimum cut nearest the sink: the nodes that cannot reach t in the
  /// residual graph. Of the cuts of least weight, it leaves the fewest nodes on the sink's side.
  std::vector<bool> sourceSideNearSink(int t) const {
    std::vector<bool> reaches(adj_.size(), false);
    std::vector<int> stack{t};
    reaches[t] = true;
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      for (int e : adj_[v]) {
        // edges_[e] leaves v; its pair (e ^ 1) enters v from edges_[e].to.
        int u = edges_[e].to;
        if (edges_[e ^ 1].cap > 0 && !reaches[u]) {
          reaches[u] = true;
          stack.push_back(u);
        }
      }
    }
    reaches.flip();
    return reaches;
  }

 private:
  struct Edge {
    int to;
    int64_t cap;
  };

  bool bfs(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[s] = 0;
    q.push(s);
    while (!q.empty()) {
      int u = q.front();
      q.pop();
      for (int e : adj_[u])
        if (edges_[e].cap > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[u] + 1;
          q.push(edges_[e].to);
        }
    }
    return level_[t] >= 0;
  }

  int64_t dfs(int u, int t, int64_t f) {
    if (u == t) return f;
    for (size_t& i = iter_[u]; i < adj_[u].size(); ++i) {
      Edge& e = edges_[adj_[u][i]];
      if (e.cap <= 0 || level_[e.to] != level_[u] + 1) continue;
      int64_t d = dfs(e.to, t, std::min(f, e.cap));
      if (d > 0) {
        e.cap -= d;
        edges_[adj_[u][i] ^ 1].cap += d;
        return d;
      }
    }
    return 0;
  }

  std::vector<std::vector<int>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> iter_;
};

std::unordered_set<std::string>& markedRecomputable() {
  static std::unordered_set<std::string> ids;
  return ids;
}

bool recomputablePrim(const Symbol& s) {
  if (s.hasTag(kRandomOp) || s.hasTag(kDontDce)) return false;
  return s.hasTag(kElementwise) || s.hasTag(kShapeOp) || s.hasTag(kCreation) ||
         markedRecomputable().count(s.id()) > 0;
}

bool drawsRandom(const BoundSymbol& b) {
  return b.sym->hasTag(kRandomOp) || std::any_of(b.subsymbols.begin(), b.subsymbols.end(), drawsRandom);
}

}  // namespace

int64_t tensorBytes(const TensorProxy& t) { return t.numel() * dtypeItemSize(t.dtype); }

void markRecomputable(const std::string& symbolId) { markedRecomputable().insert(symbolId); }

bool isRecomputable(const BoundSymbol& b) {
  if (b.sym->hasTag(kRandomOp) || b.sym->hasTag(kDontDce)) return false;
  // A checkpointed call (its random draws aside: those are saved, so a rerun sees the same ones).
  if (b.checkpointRegion) return std::none_of(b.subsymbols.begin(), b.subsymbols.end(), drawsRandom);
  if (b.subsymbols.empty()) return recomputablePrim(*b.sym);
  return std::all_of(b.subsymbols.begin(), b.subsymbols.end(), isRecomputable);
}

RematPlan rematerialize(const std::vector<BoundSymbol>& forward,
                        const std::vector<TensorPtr>& inputs,
                        const std::vector<TensorPtr>& needed,
                        const std::vector<std::string>& overwritten) {
  RematPlan baseline{needed, {}};
  if (needed.empty()) return baseline;

  // Nodes: source, sink, then (in, out) per tensor. Cutting in -> out saves the tensor.
  std::unordered_map<const TensorProxy*, int> id;
  std::vector<TensorPtr> tensors;
  auto node = [&](const TensorPtr& t) {
    auto [it, added] = id.emplace(t.get(), static_cast<int>(tensors.size()));
    if (added) tensors.push_back(t);
    return it->second;
  };
  for (const TensorPtr& t : inputs) node(t);
  std::unordered_map<const TensorProxy*, size_t> producer;
  for (size_t i = 0; i < forward.size(); ++i) {
    for (const TensorPtr& t : forward[i].inputTensors()) node(t);
    for (const TensorPtr& t : forward[i].outputTensors()) {
      node(t);
      producer.emplace(t.get(), i);
    }
  }
  for (const TensorPtr& t : needed) node(t);
  const int src = 0, sink = 1;
  auto in = [](int k) { return 2 + 2 * k; };
  auto out = [](int k) { return 3 + 2 * k; };
  MaxFlow g(2 + 2 * static_cast<int>(tensors.size()));

  std::unordered_set<const TensorProxy*> neededSet, inputSet;
  for (const TensorPtr& t : needed) neededSet.insert(t.get());
  for (const TensorPtr& t : inputs) inputSet.insert(t.get());
  // Weights: twice the bytes, plus one for tensors the backward does not read itself, so that
  // among equal cuts the one saving what the backward reads (recomputing nothing) wins. Inputs
  // live anyway: saving them costs almost nothing.
  std::unordered_set<std::string> gone(overwritten.begin(), overwritten.end());
  auto weight = [&](const TensorPtr& t) -> int64_t {
    // (an overwritten input: a cut through it only where the backward reads it itself, which
    // the caller refuses)
    if (inputSet.count(t.get())) return gone.count(t->name) ? kInf / (4 * (needed.size() + 1)) : 1;
    return 2 * tensorBytes(*t) + (neededSet.count(t.get()) ? 0 : 1);
  };
  // What leaves a checkpointed region (read by a call outside it) is saved, as eager's checkpoint
  // saves each call's inputs: a region is recomputed from its own inputs, when its backward runs,
  // not from the program's start through every region before it.
  std::unordered_set<const TensorProxy*> leavesRegion;
  for (const BoundSymbol& b : forward)
    for (const TensorPtr& u : b.inputTensors()) {
      auto p = producer.find(u.get());
      if (p != producer.end() && forward[p->second].checkpointRegion != 0 &&
          forward[p->second].checkpointRegion != b.checkpointRegion)
        leavesRegion.insert(u.get());
    }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorPtr& t = tensors[k];
    int kk = static_cast<int>(k);
    g.addEdge(in(kk), out(kk), weight(t));
    auto p = producer.find(t.get());
    bool forwardOnly = inputSet.count(t.get()) || p == producer.end() || leavesRegion.count(t.get()) ||
                       !isRecomputable(forward[p->second]);
    if (forwardOnly) {
      g.addEdge(src, in(kk), kInf);
    } else {
      for (const TensorPtr& u : forward[p->second].inputTensors())
        g.addEdge(out(id.at(u.get())), in(kk), kInf);
    }
    if (neededSet.count(t.get())) g.addEdge(out(kk), sink, kInf);
  }
  int64_t cut = g.run(src, sink);
  int64_t base = 0;
  for (const TensorPtr& t : needed) base += weight(t);
  if (cut >= base) return baseline;

  // Of the cheapest cuts, the one that saves the tensors nearest their use in the backward, so
  // that it recomputes the least: where saving a residual stream's sums costs what saving their
  // summands does, the sums are saved, not recomputed as a chain at the backward's start.
  std::vector<bool> side = g.sourceSideNearSink(sink);
  RematPlan plan;
  std::unordered_set<const TensorProxy*> saved;
  for (size_t k = 0; k < tensors.size(); ++k) {
    int kk = static_cast<int>(k);
    if (side[in(kk)] && !side[out(kk)]) {
      saved.insert(tensors[k].get());
      plan.saved.push_back(tensors[k]);
    }
  }
  // The calls to run again: producers of needed tensors that are not saved, transitively.
  std::vector<bool> rerun(forward.size(), false);
  std::vector<const TensorProxy*> work;
  std::unordered_set<const TensorProxy*> visited;
  for (const TensorPtr& t : needed) work.push_back(t.get());
  while (!work.empty()) {
    const TensorProxy* t = work.back();
    work.pop_back();
    if (!visited.insert(t).second || saved.count(t)) continue;
    auto p = producer.find(t);
    if (p == producer.end()) return baseline;  // an input on the wrong side: keep it simple
    if (rerun[p->second]) continue;
    rerun[p->second] = true;
    for (const TensorPtr& u : forward[p->second].inputTensors()) work.push_back(u.get());
  }
  for (size_t i = 0; i < forward.size(); ++i)
    if (rerun[i]) plan.recompute.push_back(forward[i]);
  return plan;
}

}  // namespace thunder
