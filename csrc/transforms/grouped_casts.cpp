#include "transforms/grouped_casts.h"

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/symbol.h"

namespace thunder {
namespace {

/// The bytes a run may hold longer than its conversions would (THUNDER_GROUP_CASTS_BYTES, else 64 MiB).
int64_t runBytes() {
  const char* env = std::getenv("THUNDER_GROUP_CASTS_BYTES");
  if (env && *env) {
    char* end = nullptr;
    long long v = std::strtoll(env, &end, 10);
    if (end && *end == '\0' && v >= 0) return v;
  }
  return int64_t{64} << 20;
}

/// A lone conversion: the call, its input and output, and the dtype argument of its prim.
struct Cast {
  TensorPtr in, out;
  Value dtype;
};

/// Whether b is a call of the torch executor that only converts one tensor's dtype (floating to
/// floating), and what it converts.
std::optional<Cast> loneCast(const BoundSymbol& b, bool anyDevice) {
  if (!b.sym || b.sym->executor != "torch" || !b.output.isTensor()) return std::nullopt;
  const BoundSymbol* leaf = &b;
  while (!leaf->sym->isPrim() && leaf->subsymbols.size() == 1) leaf = &leaf->subsymbols[0];
  if (leaf->sym->id() != "prims.convert_element_type" || leaf->args.size() != 2 || !leaf->args[0].isTensor() ||
      !leaf->output.isTensor())
    return std::nullopt;
  const TensorPtr& in = leaf->args[0].toTensor();
  const TensorPtr& out = b.output.toTensor();
  if (leaf->output.toTensor() != out) return std::nullopt;
  std::vector<TensorPtr> reads = b.inputTensors();
  if (reads.size() != 1 || reads[0] != in) return std::nullopt;
  if (!isFloating(in->dtype) || !isFloating(out->dtype) || in->dtype == out->dtype || in->device != out->device)
    return std::nullopt;
  if (!anyDevice && in->device.type != DeviceType::CUDA) return std::nullopt;
  return Cast{in, out, leaf->args[1]};
}

bool mayWrite(const BoundSymbol& b, const std::vector<Executor*>& exs) {
  if (b.sym->hasTag(kDontDce)) return true;
  for (const Executor* ex : exs)
    if (ex->isInplaceVariant(b.sym) || ex->isUpdatingVariant(b.sym)) return true;
  for (const BoundSymbol& s : b.subsymbols)
    if (mayWrite(s, exs)) return true;
  return false;
}

int64_t bytes(const TensorProxy& t) { return t.numel() * dtypeItemSize(t.dtype); }

/// A run being gathered: its conversions (the original calls, in order) and where it goes.
struct Run {
  std::vector<BoundSymbol> calls;
  std::vector<Cast> casts;
  size_t slot = 0;  // hoisted: the index of its placeholder in the output
  int64_t bytes = 0;
  bool open() const { return !calls.empty(); }
  int64_t limit = 0;
  bool fits(const Cast& c, int64_t more) const {
    const Cast& f = casts.front();
    return f.in->dtype == c.in->dtype && f.out->dtype == c.out->dtype && f.in->device == c.in->device &&
           bytes + more <= limit;
  }
};

}  // namespace

std::optional<Trace> groupCasts(const Trace& trace, const std::vector<Executor*>& executors) {
  const char* env = std::getenv("THUNDER_GROUP_CASTS");
  std::string mode = env ? env : "";
  if (mode == "0") return std::nullopt;
  const bool anyDevice = mode == "1";
  Executor* torch = ExecutorRegistry::get().find("torch");
  if (!torch) return std::nullopt;
  const Symbol& prim = SymbolRegistry::get().at("prims.convert_element_types");

  // Tensors some call reads (a sunk conversion's result may be read by the trace's output only).
  std::unordered_set<const TensorProxy*> read;
  for (const BoundSymbol& b : trace.bsyms)
    for (const TensorPtr& t : b.inputTensors()) read.insert(t.get());

  Trace out = trace;
  out.bsyms.clear();
  // Where each tensor is made: the index in out.bsyms of its call, -1 for the trace's inputs.
  std::unordered_map<const TensorProxy*, long> madeAt;
  for (const TensorPtr& t : trace.inputs) madeAt[t.get()] = -1;
  auto note = [&](const BoundSymbol& b) {
    for (const TensorPtr& t : b.outputTensors()) madeAt[t.get()] = static_cast<long>(out.bsyms.size()) - 1;
  };
  bool changed = false;
  // One call for a run of two or more; a run of one keeps its call.
  auto build = [&](Run& r) -> BoundSymbol {
    if (r.calls.size() == 1) return r.calls[0];
    std::vector<Value> ins, outs;
    for (const Cast& c : r.casts) {
      ins.emplace_back(c.in);
      outs.emplace_back(c.out);
    }
    BoundSymbol semantic;
    semantic.sym = &prim;
    semantic.args = {Value::list(ins), r.casts.front().dtype};
    semantic.output = Value::tuple(outs);
    const Implementation* impl = torch->find(semantic);
    if (!impl) return BoundSymbol{};
    BoundSymbol call;
    call.sym = impl->execSymbol;
    call.args = semantic.args;
    call.output = semantic.output;
    call.subsymbols = {std::move(semantic)};
    changed = true;
    return call;
  };
  const int64_t limit = runBytes();
  Run up, down;
  up.limit = down.limit = limit;
  auto closeUp = [&]() {
    if (!up.open()) return;
    BoundSymbol call = build(up);
    if (!call.sym) {  // (no implementation: the calls stay where they were hoisted, in order)
      out.bsyms[up.slot] = up.calls[0];
      out.bsyms.insert(out.bsyms.begin() + static_cast<long>(up.slot) + 1, up.calls.begin() + 1, up.calls.end());
    } else {
      out.bsyms[up.slot] = std::move(call);
    }
    up = Run{};
    up.limit = limit;
  };
  auto flushDown = [&]() {
    if (!down.open()) return;
    BoundSymbol call = build(down);
    if (!call.sym) {
      for (BoundSymbol& b : down.calls) out.bsyms.push_back(std::move(b));
    } else {
      out.bsyms.push_back(std::move(call));
    }
    down = Run{};
    down.limit = limit;
  };

  for (const BoundSymbol& b : trace.bsyms) {
    if (mayWrite(b, executors)) {
      closeUp();
      flushDown();
      out.bsyms.push_back(b);
      note(b);
      continue;
    }
    std::optional<Cast> c = loneCast(b, anyDevice);
    if (!c) {
      out.bsyms.push_back(b);
      note(b);
      continue;
    }
    auto made = madeAt.find(c->in.get());
    long inAt = made == madeAt.end() ? -1 : made->second;
    const bool early = up.open() && inAt < static_cast<long>(up.slot);
    if (early && up.fits(*c, bytes(*c->out))) {
      up.calls.push_back(b);
      up.casts.push_back(*c);
      up.bytes += bytes(*c->out);
      madeAt[c->out.get()] = static_cast<long>(up.slot);
      continue;  // (its output is made at the run's slot, before any reader)
    }
    if (!read.count(c->out.get())) {
      if (down.open() && !down.fits(*c, bytes(*c->in))) flushDown();
      down.calls.push_back(b);
      down.casts.push_back(*c);
      down.bytes += bytes(*c->in);
      continue;
    }
    if (up.open() && !early) {
      // (a value made after the open run's slot: it stays where it is, and the run stays open
      // for the parameters' conversions after it)
      out.bsyms.push_back(b);
      note(b);
      continue;
    }
    closeUp();
    up.slot = out.bsyms.size();
    up.calls.push_back(b);
    up.casts.push_back(*c);
    up.bytes = bytes(*c->out);
    out.bsyms.push_back(BoundSymbol{});  // (the run's placeholder)
    madeAt[c->out.get()] = static_cast<long>(up.slot);
  }
  closeUp();
  flushDown();
  if (!changed) return std::nullopt;
  return out;
}

}  // namespace thunder
