#include "executors/fusion_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ops/symbolic_rules.h"
#include "transforms/conv_layout.h"

namespace thunder {

bool worthFusing(const FusionRegion& region) {
  if (region.computeOps < 2) return false;
  const Device* dev = nullptr;
  for (const BoundSymbol& p : region.prims) {
    for (const TensorPtr& t : p.outputTensors()) {
      if (t->device.type == DeviceType::Meta) return false;
      if (dev && *dev != t->device) return false;
      dev = &t->device;
    }
  }
  for (const TensorPtr& t : region.inputs)
    if (dev && t->device != *dev && t->ndim() > 0) return false;
  return dev != nullptr;
}

Trace FusionExecutor::fusionPass(const Trace& trace) const {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  auto start = Clock::now();
  double lowering = 0, compiling = 0;
  // Regions are lowered while the partition is chosen (a region that cannot be lowered is not
  // fused) and compiled once it is final: the partition tries merges and recomputations whose
  // regions it may drop. A placeholder symbol stands for each lowered region until then.
  struct Lowered {
    codegen::KernelProgram prog;
    Device dev;
  };
  std::unordered_map<const Symbol*, Lowered> lowered;
  // Roundings the program asked for, which kernels computing in float32 keep (lowerRegion).
  const std::unordered_set<const TensorProxy*> casts = codegen::castOutputs(trace);
  std::unordered_set<int> noCompiler;  // device types whose compiler is missing (NVRTC, a C++ compiler)
  auto fuse = [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
    if (!worthFusing(r)) return std::nullopt;
    Device dev = r.prims.front().outputTensors().front()->device;
    if (dev.type == DeviceType::CPU && !cpu_) return std::nullopt;
    if (noCompiler.count(static_cast<int>(dev.type))) return std::nullopt;
    codegen::KernelProgram prog;
    std::string whyNot;
    auto t0 = Clock::now();
    bool ok = codegen::lowerRegion("fusion", r.prims, r.inputs, r.outputs, prog, whyNot, &casts);
    lowering += since(t0);
    if (!ok) {
      static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
      if (debug) std::fprintf(stderr, "fuser: a region of %zu prims is not fused: %s\n", r.prims.size(), whyNot.c_str());
      // THUNDER_DEBUG_FUSION=2: and the region's prims, with their inputs and output shapes.
      if (debug && std::getenv("THUNDER_DEBUG_FUSION")[0] == '2')
        for (const BoundSymbol& p : r.prims) {
          std::fprintf(stderr, "    %s = %s(", p.outputTensors().empty() ? "?" : p.outputTensors()[0]->name.c_str(), p.sym->name.c_str());
          for (const TensorPtr& t : p.inputTensors()) std::fprintf(stderr, "%s ", t->name.c_str());
          std::fprintf(stderr, ") [");
          if (!p.outputTensors().empty()) for (int64_t x : p.outputTensors()[0]->shape) std::fprintf(stderr, "%ld,", (long)x);
          std::fprintf(stderr, "]\n");
        }
      return std::nullopt;
    }
    auto placeholder = std::make_shared<Symbol>();
    placeholder->name = "fusion";
    placeholder->executor = Executor::name();
    // (a dropped placeholder's address may come back: the newest program wins)
    lowered.insert_or_assign(placeholder.get(), Lowered{std::move(prog), dev});
    BoundSymbol b = r.asCall(placeholder.get());
    b.owner = std::move(placeholder);
    return b;
  };
  // Whether convolutions make the activations channels-last at run time (traced contiguous).
  const bool channelsLast = convolutionLayout(trace) == ConvLayout::ChannelsLast;
  // Compiles the final regions, numbered in program order; false if a device has no compiler.
  int counter = 0;
  auto compileAll = [&](Trace& out) {
    counter = 0;
    std::vector<BoundSymbol> bsyms;
    bsyms.reserve(out.bsyms.size());
    for (BoundSymbol& b : out.bsyms) {
      auto it = lowered.find(b.sym);
      if (it == lowered.end()) {
        bsyms.push_back(std::move(b));
        continue;
      }
      Lowered& l = it->second;
      l.prog.name = std::string(l.dev.type == DeviceType::CUDA ? "cudaFusion" : "cpuFusion") + std::to_string(counter);
      l.prog.channelsLastHint = channelsLast;
      std::vector<TensorPtr> inputs;
      for (const Value& v : b.args) inputs.push_back(v.toTensor());
      auto t0 = Clock::now();
      std::shared_ptr<const Symbol> sym = compiler_(l.prog, l.dev, inputs, Executor::name());
      compiling += since(t0);
      if (!sym) {
        noCompiler.insert(static_cast<int>(l.dev.type));
        return false;
      }
      ++counter;
      b.sym = sym.get();
      b.owner = std::move(sym);
      bsyms.push_back(std::move(b));
    }
    out.bsyms = std::move(bsyms);
    return true;
  };
  // Kernels are generated for static sizes: a call on sizes that vary with the trace's symbols
  // (not pinned to one value by a guard) runs whole in ATen instead.
  std::function<bool(const BoundSymbol&)> fusible = codegen::isFusiblePrim;
  if (!trace.symbols.empty()) {
    std::set<int> pinned;
    for (const auto& [k, v] : pinnedSymbols(trace.guards)) pinned.insert(k);
    auto varies = [pinned](const BoundSymbol& b) {
      for (int k : symbolsOf(b))
        if (!pinned.count(k)) return true;
      return false;
    };
    // A call that reads a varying size as a number (`x.sum() * 2 - x.size(1)`) decomposes into
    // prims that hold the number's value at the hints (prims.sub(t, 24.0)) on tensors of static
    // sizes: fused, the kernel would compute with 24 at every size. Such a call runs whole.
    auto made = std::make_shared<std::unordered_set<const TensorProxy*>>();
    std::function<void(const BoundSymbol&)> taint = [&](const BoundSymbol& b) {
      for (const TensorPtr& o : b.outputTensors()) made->insert(o.get());
      for (const BoundSymbol& s : b.subsymbols) taint(s);
    };
    for (const BoundSymbol& b : trace.bsyms)
      if (!b.sym->isPrim() && varies(b)) taint(b);
    fusible = [varies, made](const BoundSymbol& b) {
      if (varies(b)) return false;
      for (const TensorPtr& o : b.outputTensors())
        if (made->count(o.get())) return false;
      return codegen::isFusiblePrim(b);
    };
  }
  // Channel sums (sums over (0, 2, 3)) iterate their regions channels-last: only in traces whose
  // activations are channels-last at run time, so that the kernels read them at unit stride and
  // leave the layout as it was (the next convolution's algorithm, and its rounding, depend on it).
  if (!channelsLast) {
    fusible = [inner = fusible](const BoundSymbol& b) { return !codegen::isPermutedColumnSum(b) && inner(b); };
  }
  Trace out = fusionPartition(trace, fusible, fuse, codegen::isTerminalSum, codegen::isUnrolledSum);
  // A device without a compiler: partition again, leaving its regions to the other executors.
  while (!compileAll(out)) out = fusionPartition(trace, fusible, fuse, codegen::isTerminalSum, codegen::isUnrolledSum);
  static const bool timing = std::getenv("THUNDER_DEBUG_TIMING") != nullptr;
  if (timing)
    std::fprintf(stderr, "timing: %s fusion pass %.1f ms: %d kernels, lowering %.1f ms, compile requests %.1f ms\n",
                 Executor::name().c_str(), since(start), counter, lowering, compiling);
  return out;
}

std::optional<Trace> FusionExecutor::fuseInplaceUpdates(
    const Trace& trace, const std::function<bool(const BoundSymbol&)>& inplace) const {
  const std::vector<BoundSymbol>& calls = trace.bsyms;
  std::unordered_map<const TensorProxy*, size_t> producer;  // tensor -> call computing it
  for (size_t i = 0; i < calls.size(); ++i)
    for (const TensorPtr& t : calls[i].outputTensors()) producer.emplace(t.get(), i);
  // How many calls read each tensor, the trace's output counting as one.
  std::unordered_map<const TensorProxy*, size_t> readers = readCounts(trace);
  // Per fused call that takes updates: its program (lowered again from its prims) and arguments.
  struct Pending {
    codegen::KernelProgram prog;
    std::vector<TensorPtr> args, outputs;
  };
  std::unordered_map<size_t, Pending> pending;
  std::unordered_set<size_t> dropped;
  // Calls computing an index after the kernel that stores at it, from what exists before the
  // kernel (the wrap of negative positions of `x[:, :, pos] = v`): they move up to run before it.
  std::unordered_map<size_t, std::set<size_t>> hoisted;
  std::unordered_set<size_t> moved;
  for (size_t i = 0; i < calls.size(); ++i) {
    const BoundSymbol& u = calls[i];
    if (!inplace(u) || u.subsymbols.size() != 1 || u.subsymbols[0].sym->id() != "ltorch.index_copy" ||
        u.args.size() != 4 || !u.args[0].isTensor() || !u.args[2].isTensor() || !u.args[3].isTensor() ||
        !u.output.isTensor())
      continue;
    const TensorPtr buf = u.args[0].toTensor(), index = u.args[2].toTensor(), x = u.args[3].toTensor();
    const TensorPtr result = u.output.toTensor();
    auto pr = producer.find(x.get());
    if (pr == producer.end()) continue;
    const size_t f = pr->second;
    const BoundSymbol& fused = calls[f];
    if (fused.sym->executor != Executor::name() || fused.subsymbols.empty() || x->device.type != DeviceType::CUDA ||
        buf->device != x->device)
      continue;
    // The index exists when the kernel runs; nothing between the kernel and the update reads or
    // writes the buffer (the kernel now writes it earlier), nor reads the update's result.
    std::optional<size_t> hoist;
    auto ix = producer.find(index.get());
    if (ix != producer.end() && ix->second >= f) {
      const size_t q = ix->second;
      const BoundSymbol& p = calls[q];
      bool ok = q != f && q < i && !p.sym->hasTag(kDontDce) && !p.sym->hasTag(kRandomOp);
      for (const TensorPtr& t : p.inputTensors()) {
        auto pp = producer.find(t.get());
        ok = ok && t != buf && (pp == producer.end() || pp->second < f);
      }
      if (!ok) continue;
      hoist = q;
    }
    if (producer.count(buf.get())) continue;  // a buffer the trace computed: not an input the caller holds
    bool touched = false;
    for (size_t k = f; k < i && !touched; ++k)
      for (const TensorPtr& a : calls[k].inputTensors()) touched |= a == buf;
    if (touched) continue;
    auto it = pending.find(f);
    if (it == pending.end()) {
      Pending p;
      for (const Value& a : fused.args) p.args.push_back(a.toTensor());
      p.outputs = fused.outputTensors();
      std::string whyNot;
      // (Lowered again from its prims, which do not say which roundings the program asked for:
      // every rounding is eager's in a kernel that takes updates.)
      if (!codegen::lowerRegion("fusion", fused.subsymbols, p.args, p.outputs, p.prog, whyNot)) continue;
      it = pending.emplace(f, std::move(p)).first;
    }
    Pending& p = it->second;
    const bool keep = readers[x.get()] > 1;  // read by more than this update
    codegen::KernelProgram prog = p.prog;
    std::string whyNot;
    int64_t dim = u.args[1].toInt();
    if (dim < 0) dim += static_cast<int64_t>(buf->shape.size());
    if (!codegen::addScatteredOutput(prog, x, buf, dim, index, result, keep, whyNot)) {
      static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
      if (debug) std::fprintf(stderr, "fuser: %s stays a call: %s\n", u.sym->id().c_str(), whyNot.c_str());
      continue;
    }
    p.prog = std::move(prog);
    if (std::find(p.args.begin(), p.args.end(), index) == p.args.end()) p.args.push_back(index);
    p.args.push_back(buf);
    if (!keep) p.outputs.erase(std::find(p.outputs.begin(), p.outputs.end(), x));
    p.outputs.push_back(result);
    dropped.insert(i);
    if (hoist) {
      hoisted[f].insert(*hoist);
      moved.insert(*hoist);
    }
  }
  if (dropped.empty()) return std::nullopt;
  Trace out = trace.emptyCopy();
  std::function<bool(size_t)> emit = [&](size_t i) {
    auto h = hoisted.find(i);
    if (h != hoisted.end())
      for (size_t q : h->second)
        if (!emit(q)) return false;
    auto it = pending.find(i);
    if (it == pending.end()) {
      out.bsyms.push_back(calls[i]);
      return true;
    }
    Pending& p = it->second;
    BoundSymbol b = calls[i];
    p.prog.name = b.sym->name;
    std::shared_ptr<const Symbol> sym = compiler_(p.prog, p.outputs.front()->device, p.args, Executor::name());
    if (!sym) return false;
    b.sym = sym.get();
    b.owner = std::move(sym);
    b.args.clear();
    for (const TensorPtr& t : p.args) b.args.push_back(Value(t));
    std::vector<Value> outs;
    for (const TensorPtr& t : p.outputs) outs.push_back(Value(t));
    b.output = Value::list(std::move(outs));
    out.bsyms.push_back(std::move(b));
    return true;
  };
  for (size_t i = 0; i < calls.size(); ++i)
    if (!dropped.count(i) && !moved.count(i) && !emit(i)) return std::nullopt;
  return out;
}

}  // namespace thunder
