#include "transforms/reinplace.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace thunder {
namespace {

using TensorSet = std::unordered_set<const TensorProxy*>;

bool isCopyBack(const BoundSymbol& b) {
  // prims.copy_ itself, or an executor's call of it (torchex.copy_).
  if (b.sym->id() == "prims.copy_") return true;
  return b.subsymbols.size() == 1 && b.subsymbols[0].sym->id() == "prims.copy_" &&
         b.args.size() == 2 && b.args[0].isTensor() && b.args[1].isTensor();
}

class Reinplacer {
 public:
  Reinplacer(const Trace& trace, const ReinplaceRules& rules, bool training)
      : trace_(trace), rules_(rules), training_(training) {
    for (size_t i = 0; i < trace.bsyms.size(); ++i) {
      for (const TensorPtr& t : trace.bsyms[i].outputTensors()) producer_[t.get()] = i;
      for (const TensorPtr& t : trace.bsyms[i].inputTensors()) readers_[t.get()].push_back(i);
    }
    std::vector<TensorPtr> outs;
    trace.output.collectTensors(outs);
    for (const TensorPtr& t : outs) returned_.insert(t.get());
    for (const TensorPtr& t : trace.inputs) inputs_.insert(t.get());
    for (const BoundSymbol& b : trace.bsyms)
      if (isCopyBack(b)) ++writeBacks_[b.args[1].toTensor().get()];
  }

  Trace run() {
    std::unordered_set<size_t> drop;
    std::unordered_map<size_t, const Symbol*> inplace;
    std::unordered_map<size_t, std::vector<size_t>> movedAfter;  // position -> chain calls
    std::unordered_map<const TensorProxy*, TensorPtr> rename;      // copy_ outputs -> x
    for (size_t c = 0; c < trace_.bsyms.size(); ++c) {
      const BoundSymbol& cp = trace_.bsyms[c];
      if (!isCopyBack(cp)) continue;
      std::vector<size_t> chain;
      size_t lastOldRead = 0;
      if (!chainFor(c, chain, lastOldRead)) continue;
      for (size_t k : chain) inplace[k] = rules_.inplaceVariant(trace_.bsyms[k]);
      if (lastOldRead > chain.front()) {
        for (size_t k : chain) drop.insert(k);
        std::vector<size_t>& at = movedAfter[lastOldRead];
        at.insert(at.end(), chain.begin(), chain.end());
      }
      drop.insert(c);
      for (const TensorPtr& t : cp.outputTensors()) rename[t.get()] = cp.args[0].toTensor();
    }
    std::unordered_map<size_t, const Symbol*> updating;
    for (size_t i = 0; rules_.updatingVariant && i < trace_.bsyms.size(); ++i) {
      if (inplace.count(i) || drop.count(i)) continue;
      const UpdatingVariant* form = rules_.updatingVariant(trace_.bsyms[i]);
      std::vector<size_t> copies;
      if (form == nullptr || !updatesFor(i, *form, copies)) continue;
      updating[i] = form->sym;
      for (size_t c : copies) {
        drop.insert(c);
        const BoundSymbol& cp = trace_.bsyms[c];
        for (const TensorPtr& t : cp.outputTensors()) rename[t.get()] = cp.args[0].toTensor();
      }
    }
    Trace out = trace_.emptyCopy();
    auto emit = [&](size_t i) {
      BoundSymbol b = trace_.bsyms[i];
      if (!rename.empty())
        for (Value& a : b.args) a = substitute(a, rename);
      auto it = inplace.find(i);
      if (it != inplace.end()) {
        // The in-place call keeps the decomposition of the call it replaces.
        BoundSymbol semantic = b.subsymbols.empty() ? b : b.subsymbols.front();
        b.subsymbols = {semantic};
        b.sym = it->second;
      }
      auto up = updating.find(i);
      if (up != updating.end()) {
        BoundSymbol semantic = b.subsymbols.empty() ? b : b.subsymbols.front();
        b.subsymbols = {semantic};
        b.sym = up->second;
      }
      out.bsyms.push_back(std::move(b));
    };
    for (size_t i = 0; i < trace_.bsyms.size(); ++i) {
      if (!drop.count(i)) emit(i);
      auto moved = movedAfter.find(i);
      if (moved == movedAfter.end()) continue;
      std::vector<size_t> calls = moved->second;
      std::sort(calls.begin(), calls.end());
      for (size_t k : calls) emit(k);
    }
    if (!rename.empty()) out.output = substitute(trace_.output, rename);
    return out;
  }

 private:
  /// The calls (positions, first to last) to run in place for the copy_ at position c, or false.
  /// When the old value of b is still read after the chain's first call, but only before
  /// anything reads the chain's results, `lastOldRead` is the last such read: the chain moves
  /// after it (its arguments are all computed before its first call).
  bool chainFor(size_t c, std::vector<size_t>& chain, size_t& lastOldRead) {
    const BoundSymbol& cp = trace_.bsyms[c];
    const TensorProxy* base = cp.args[1].toTensor().get();
    const TensorProxy* x = cp.args[0].toTensor().get();
    if (!inputs_.count(base) || writeBacks_[base] != 1 || returned_.count(x)) return false;
    // Walk back from x along first arguments to a call that reads the input itself.
    const TensorProxy* cur = x;
    while (true) {
      auto p = producer_.find(cur);
      if (p == producer_.end() || p->second > c) return false;
      const BoundSymbol& b = trace_.bsyms[p->second];
      if (b.outputTensors().size() != 1 || b.args.empty() || !b.args[0].isTensor()) return false;
      if (!rules_.inplaceVariant || !rules_.inplaceVariant(b)) return false;
      const TensorProxy* first = b.args[0].toTensor().get();
      if (first->shape != cur->shape || first->dtype != cur->dtype) return false;
      chain.insert(chain.begin(), p->second);
      if (first == base) break;
      // An intermediate: read by the next call of the chain only, as its first argument.
      if (inputs_.count(first) || returned_.count(first)) return false;
      const std::vector<size_t>& rs = readers_[first];
      if (rs.size() != 1 || rs[0] != p->second) return false;
      cur = first;
    }
    if (training_ && readers_[x] != std::vector<size_t>{c}) return false;
    // Everything that may share b's storage: b, and what reads it (or such a tensor) through a
    // call whose outputs may be views. The chain's own outputs become b and are checked above.
    TensorSet chainOut;
    for (size_t k : chain)
      for (const TensorPtr& t : trace_.bsyms[k].outputTensors()) chainOut.insert(t.get());
    std::unordered_set<size_t> inChain(chain.begin(), chain.end());
    TensorSet alias{base};
    for (size_t i = 0; i < trace_.bsyms.size(); ++i) {
      const BoundSymbol& b = trace_.bsyms[i];
      if (inChain.count(i) || i == c) continue;
      bool readsAlias = false;
      for (const TensorPtr& t : b.inputTensors()) readsAlias |= alias.count(t.get()) > 0;
      if (!readsAlias) continue;
      lastOldRead = std::max(lastOldRead, i);
      if (!rules_.freshOutputs || !rules_.freshOutputs(b))
        for (const TensorPtr& t : b.outputTensors()) alias.insert(t.get());
    }
    for (const TensorProxy* t : alias)
      if (returned_.count(t)) return false;
    if (lastOldRead > chain.front()) {
      // The chain can move down past the last read of the old value only if nothing reads
      // its results (the copy_ included) before that read.
      for (size_t k : chain)
        for (const TensorPtr& t : trace_.bsyms[k].outputTensors())
          for (size_t r : readers_[t.get()])
            if (!inChain.count(r) && r <= lastOldRead) return false;
      if (c <= lastOldRead) return false;
    }
    // The chain's other arguments must not overlap what it writes.
    for (size_t k : chain) {
      const BoundSymbol& b = trace_.bsyms[k];
      for (size_t a = 1; a < b.args.size(); ++a) {
        std::vector<TensorPtr> ts;
        b.args[a].collectTensors(ts);
        for (const TensorPtr& t : ts)
          if (alias.count(t.get()) || chainOut.count(t.get())) return false;
      }
    }
    return true;
  }

  /// Whether call i can run as its updating form: each written output o_k read only by its
  /// write-back copy_(o_k, b_k) (their positions into `copies`), b_k an input of the trace with
  /// that one write-back, read by call i in that argument only, and neither b_k nor anything that
  /// may alias it returned or read after call i.
  bool updatesFor(size_t i, const UpdatingVariant& form, std::vector<size_t>& copies) {
    const BoundSymbol& b = trace_.bsyms[i];
    std::vector<TensorPtr> outs = b.outputTensors();
    TensorSet written;
    for (auto [o, a] : form.outputToArg) {
      if (o >= outs.size() || a >= b.args.size() || !b.args[a].isTensor()) return false;
      const TensorProxy* out = outs[o].get();
      const TensorProxy* base = b.args[a].toTensor().get();
      if (!inputs_.count(base) || writeBacks_[base] != 1 || returned_.count(out) || returned_.count(base))
        return false;
      if (out->shape != base->shape || out->dtype != base->dtype) return false;
      const std::vector<size_t>& rs = readers_[out];
      if (rs.size() != 1) return false;
      const BoundSymbol& cp = trace_.bsyms[rs[0]];
      if (!isCopyBack(cp) || cp.args[0].toTensor().get() != out || cp.args[1].toTensor().get() != base)
        return false;
      for (size_t k = 0; k < b.args.size(); ++k) {
        if (k == a) continue;
        std::vector<TensorPtr> ts;
        b.args[k].collectTensors(ts);
        for (const TensorPtr& t : ts)
          if (t.get() == base) return false;
      }
      copies.push_back(rs[0]);
      written.insert(base);
    }
    // Nothing reads a written buffer (or what may alias it) after the call but its write-back.
    std::unordered_set<size_t> skip(copies.begin(), copies.end());
    TensorSet alias = written;
    for (size_t k = 0; k < trace_.bsyms.size(); ++k) {
      const BoundSymbol& r = trace_.bsyms[k];
      if (k == i || skip.count(k)) continue;
      bool readsAlias = false;
      for (const TensorPtr& t : r.inputTensors()) readsAlias |= alias.count(t.get()) > 0;
      if (!readsAlias) continue;
      if (k > i) return false;
      if (!rules_.freshOutputs || !rules_.freshOutputs(r))
        for (const TensorPtr& t : r.outputTensors()) alias.insert(t.get());
    }
    for (const TensorProxy* t : alias)
      if (returned_.count(t)) return false;
    return !copies.empty();
  }

  const Trace& trace_;
  const ReinplaceRules& rules_;
  bool training_;
  std::unordered_map<const TensorProxy*, size_t> producer_;
  std::unordered_map<const TensorProxy*, std::vector<size_t>> readers_;
  std::unordered_map<const TensorProxy*, int> writeBacks_;
  TensorSet returned_, inputs_;
};

}  // namespace

Trace reinplace(const Trace& trace, const ReinplaceRules& rules, bool training) {
  return Reinplacer(trace, rules, training).run();
}

}  // namespace thunder
