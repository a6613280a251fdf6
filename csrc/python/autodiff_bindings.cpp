// Bindings of autodiff: the grad() pipeline, training plans, grad rules written in Python, and the
// custom autograd function that joins a training call's forward and backward programs to
// PyTorch's autograd.
#include "python/autodiff_bindings.h"

#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/python_hook.h>
#include <torch/version.h>

#include <cstring>
#include <typeinfo>
#include <unordered_map>

#include <chrono>
#include <map>
#include <mutex>

#include "executors/executor.h"
#include "ir/error.h"
#include "ir/verifier.h"
#include "ops/symbolic_rules.h"
#include "python/module.h"
#include "runtime/program.h"
#include "transforms/autodiff.h"
#include "transforms/cse.h"
#include "transforms/del_last_used.h"
#include "transforms/live_bytes.h"
#include "transforms/cat_reshapes.h"
#include "transforms/column_sums.h"
#include "transforms/grad_layout.h"
#include "transforms/grouped_casts.h"
#include "transforms/matmul_operands.h"
#include "transforms/pad_sums.h"
#include "transforms/pipeline.h"
#include "transforms/prefetch.h"
#include "transforms/remat.h"

namespace thunder::python {

/// A training call's traces, and how its forward, backward and autograd connect.
struct TrainingPlan {
  ForwardBackward fb;
  std::vector<std::shared_ptr<Trace>> forwardTraces, backwardTraces;
  size_t numUserOutputs = 0;
  /// Per returned tensor: the other returned tensors computed from it (`return y, f(y)`, or one
  /// tensor returned twice). Such a tensor's gradient in eager holds what flows back from those;
  /// at this call's node it holds only what the caller adds (see OutputGradientReads).
  std::vector<std::vector<size_t>> feeds;
  bool feedsAny = false;
  /// The executors, to lower the backward of calls that leave some cotangents undefined.
  std::vector<Executor*> executors;
  bool verify = false;
};

struct TrainingEntry {
  std::shared_ptr<const TrainingPlan> plan;
  std::unique_ptr<runtime::Program> forward, backward;
  /// The size symbols where the entry serves every size its guards allow (else empty), their
  /// traced values, and the guards (for the backward programs made later).
  std::vector<SizeSymbol> symbols;
  std::vector<int64_t> hints;
  std::vector<SymGuard> guards;
  /// Backward programs for calls that leave some cotangents undefined, by which ones
  /// (withUndefinedCotangents), made when a backward first needs one.
  std::mutex mu;
  struct Partial {
    std::shared_ptr<const runtime::Program> program;
    /// Why it serves only the traced sizes, where the entry's symbols vary ("" where it does not).
    std::string fixedSizes;
    /// Per returned tensor: zero only because undefined cotangents reach it (left undefined).
    std::vector<bool> zeroOutputs;
  };
  std::map<std::vector<bool>, Partial> partial;
};

namespace {

using Clock = std::chrono::steady_clock;

/// Whether two traces run the same calls.
bool sameCalls(const Trace& a, const Trace& b) {
  if (a.bsyms.size() != b.bsyms.size()) return false;
  for (size_t i = 0; i < a.bsyms.size(); ++i)
    if (a.bsyms[i].sym != b.bsyms[i].sym) return false;
  return true;
}

/// Appends the claiming and delete-last-used passes of traces.back(); a training forward's
/// write-backs of inputs (BatchNorm's running statistics, its batch counter) run in place where
/// nothing can tell (transforms/reinplace.h).
void lowerForExecution(std::vector<std::shared_ptr<Trace>>& traces,
                       const std::vector<Executor*>& exs, bool verifyEach, bool forward = false) {
  PassLog log(traces, verifyEach);
  if (!forward) log.runIfChanged("Gradients in their layout", [](const Trace& t) { return gradientsInTheirLayout(t); });
  log.runIfChanged("Pad sums to cat", [](const Trace& t) { return padSumsToCat(t); });
  log.runIfChanged("Column sums through reshapes", [](const Trace& t) { return columnSumsThroughReshapes(t); });
  log.runIfChanged("Concatenation of flattened pieces", [](const Trace& t) { return catOfFlattenedPieces(t); });
  log.runIfChanged("Linears before permutes", [](const Trace& t) { return linearsBeforePermutes(t); });
  log.runIfChanged("Contiguous matmul operands", [](const Trace& t) { return contiguousMatmulOperands(t); });
  log.run("Common subexpression elimination", [](const Trace& t) { return cse(t); });
  // Again: CSE drops the conversions there and back (widened, narrowed) that stood between a sum
  // and the rows it reads (Swin's window partition's gradient).
  log.runIfChanged("Column sums through reshapes", [](const Trace& t) { return columnSumsThroughReshapes(t); });
  log.runIfChanged("Sums of widened values", [](const Trace& t) { return sumsOfWidenedValues(t); });
  log.run("Transform for execution", [&](const Trace& t) { return transformForExecution(t, exs); });
  if (forward) {
    log.runIfChanged("Reinplace", [&](const Trace& t) -> std::optional<Trace> {
      Trace in = reinplace(t, reinplaceRules(exs), /*training=*/true);
      if (sameCalls(in, t)) return std::nullopt;
      return in;
    });
  }
  log.runIfChanged("Grouped casts", [&](const Trace& t) { return groupCasts(t, exs); });
  if (hasPrefetchCalls(log.last())) log.run("Prefetch", [](const Trace& t) { return prefetch(t); });
  log.run("Delete Last Used", [](const Trace& t) { return delLastUsed(t); });
}

std::vector<std::vector<size_t>> outputsComputedFrom(const Trace& forward, const std::vector<TensorPtr>& outs);

std::vector<std::shared_ptr<Trace>> runGradPipeline(std::shared_ptr<Trace> computation,
                                                    const std::vector<std::string>& executors,
                                                    size_t numArgs, bool verifyEach) {
  std::vector<Executor*> exs = ExecutorRegistry::get().resolve(executors);
  std::vector<std::shared_ptr<Trace>> traces{computation};
  PassLog log(traces, verifyEach);
  beforeAutodiff(log, exs);
  log.run("Grad", [&](const Trace& t) { return gradTransform(t, numArgs, exs); });
  lowerForExecution(traces, exs, verifyEach);
  return traces;
}

std::shared_ptr<TrainingPlan> runTrainingPipeline(std::shared_ptr<Trace> computation,
                                                  const std::vector<std::string>& executors,
                                                  bool verifyEach,
                                                  const std::vector<std::string>& overwritten) {
  std::vector<Executor*> exs = ExecutorRegistry::get().resolve(executors);
  auto plan = std::make_shared<TrainingPlan>();
  plan->executors = exs;
  plan->verify = verifyEach;
  plan->forwardTraces = {computation};
  PassLog log(plan->forwardTraces, verifyEach);
  beforeAutodiff(log, exs);
  const Trace& pruned = *plan->forwardTraces.back();
  auto t0 = Clock::now();
  plan->fb = forwardBackward(pruned, exs, overwritten);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::string took = " (took " + std::to_string(ms) + " milliseconds)";
  auto forward = std::make_shared<Trace>(plan->fb.forward);
  forward->provenance = "Constructed by Forward (autodiff split)" + took;
  auto backward = std::make_shared<Trace>(plan->fb.backward);
  backward->provenance = "Constructed by Backward (autodiff split)" + took;
  if (verifyEach) {
    verify(*forward);
    verify(*backward);
  }
  plan->forwardTraces.push_back(forward);
  plan->backwardTraces.push_back(backward);
  lowerForExecution(plan->forwardTraces, exs, verifyEach, /*forward=*/true);
  lowerForExecution(plan->backwardTraces, exs, verifyEach);
  std::vector<TensorPtr> outs;
  plan->fb.userOutput.collectTensors(outs);
  plan->numUserOutputs = outs.size();
  plan->feeds = outputsComputedFrom(plan->fb.forward, outs);
  for (const auto& f : plan->feeds) plan->feedsAny = plan->feedsAny || !f.empty();
  return plan;
}

/// Keeps a training entry alive for as long as an autograd graph refers to it.
struct EntryRef : torch::CustomClassHolder {
  std::shared_ptr<TrainingEntry> entry;
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Access to the autograd context's saved variables, to free them when the backward starts
/// rather than when it ends (what PyTorch's CppNode::release_variables does afterwards). The
/// members are private; naming them in an explicit instantiation is the standard's one way to
/// take their addresses.
template <typename Tag, typename Tag::type M>
struct PrivateMember {
  friend typename Tag::type member(Tag) { return M; }
};
struct SavedVariablesTag {
  using type = std::vector<torch::autograd::SavedVariable> AutogradContext::*;
  friend type member(SavedVariablesTag);
};
struct FreedBuffersTag {
  using type = bool AutogradContext::*;
  friend type member(FreedBuffersTag);
};
template struct PrivateMember<SavedVariablesTag, &AutogradContext::saved_variables_>;
template struct PrivateMember<FreedBuffersTag, &AutogradContext::has_freed_buffers_>;

/// Per tensor of outs: the other tensors of outs that the forward computes from it (or that are
/// it: one tensor returned twice).
std::vector<std::vector<size_t>> outputsComputedFrom(const Trace& forward, const std::vector<TensorPtr>& outs) {
  size_t n = outs.size();
  std::vector<std::vector<size_t>> feeds(n);
  // from[t]: which of outs t is computed from.
  std::unordered_map<const TensorProxy*, std::vector<bool>> from;
  for (size_t i = 0; i < n; ++i) {
    auto& bits = from[outs[i].get()];
    bits.resize(n);
    bits[i] = true;
  }
  for (const BoundSymbol& b : forward.bsyms) {
    std::vector<bool> bits;
    for (const TensorPtr& in : b.inputTensors()) {
      auto it = from.find(in.get());
      if (it == from.end()) continue;
      bits.resize(n);
      for (size_t i = 0; i < n; ++i) bits[i] = bits[i] || it->second[i];
    }
    if (bits.empty()) continue;
    for (const TensorPtr& o : b.outputTensors()) {
      auto& ob = from[o.get()];
      ob.resize(n);
      for (size_t i = 0; i < n; ++i) ob[i] = ob[i] || bits[i];
    }
  }
  for (size_t j = 0; j < n; ++j) {
    const std::vector<bool>& bits = from[outs[j].get()];
    for (size_t i = 0; i < n; ++i)
      if (i != j && bits[i]) feeds[i].push_back(j);
  }
  return feeds;
}

/// Refuses a backward in which the caller reads the gradient of a returned tensor that other
/// returned tensors were computed from, while gradients of those flow back: a hook on it
/// (`y.register_hook`), `y.retain_grad()`, `torch.autograd.grad(loss, y)`. In eager that gradient
/// includes what flows back through the others (Grad-CAM's activations: `feats, logits = model(x)`);
/// at this call's one node it holds only what the caller adds to `y` directly, the rest being
/// computed inside the backward program, so the hook saw, and the caller got, a partial gradient.
/// A tensor pre-hook of the call's node, installed first: autograd runs the node's tensor hooks
/// (then the retain_grad hooks) on the gradients reaching it, also where it only captures them
/// for torch.autograd.grad and does not run the backward, before any of the caller's hooks.
struct OutputGradientReads : torch::autograd::FunctionPreHook {
  OutputGradientReads(torch::autograd::Node* node, std::shared_ptr<const TrainingPlan> plan)
      : node(node), plan(std::move(plan)) {}
  torch::autograd::Node* node;  // (the node owns this hook)
  std::shared_ptr<const TrainingPlan> plan;

  variable_list operator()(const variable_list& grads) override {
    const auto& feeds = plan->feeds;
    size_t n = feeds.size();
    std::vector<const char*> how(n, nullptr);
    for (const auto& [idx, hook] : node->retains_grad_hooks())
      if (idx < n && hook) how[idx] = "retain_grad()";
    for (const auto& hook : node->tensor_pre_hooks()) {
      // (by name: libtorch_python does not export the type's typeinfo)
      if (!hook || std::strcmp(typeid(*hook).name(), "N5torch8autograd23PyFunctionTensorPreHookE") != 0) continue;
      auto* h = static_cast<const torch::autograd::PyFunctionTensorPreHook*>(hook.get());
      if (h->value_idx >= n || feeds[h->value_idx].empty()) continue;
      py::gil_scoped_acquire gil;
      if (h->dict && PyDict_Size(h->dict) > 0) how[h->value_idx] = "a hook (register_hook)";
    }
    if (const auto* info = torch::autograd::get_current_graph_task_exec_info()) {
      auto it = info->find(node);
      if (it != info->end() && it->second.captures_)
        for (const auto& c : *it->second.captures_)
          if (c.input_idx_ >= 0 && static_cast<size_t>(c.input_idx_) < n) how[c.input_idx_] = "torch.autograd.grad";
    }
    for (size_t i = 0; i < n; ++i) {
      if (!how[i]) continue;
      for (size_t j : feeds[i])
        TORCH_CHECK_NOT_IMPLEMENTED(
            !(j < grads.size() && grads[j].defined()), "thunder.jit: the gradient of returned tensor ", i,
            " of a jitted call is read by ", how[i], ", and returned tensor ", j,
            " was computed from it inside the call: its gradient in eager would include what flows back "
            "through that one, which the jitted call's backward computes inside its one program and cannot "
            "hand to ", how[i], ". Return the tensors computed from it from a separate jitted call (or "
            "compute them outside the jitted call), or run the model under thunder.dynamo.thunderfx.");
    }
    return grads;
  }
};

/// The one autograd node of a training call.
struct ThunderFunction : torch::autograd::Function<ThunderFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<EntryRef> ref) {
    const TrainingEntry& e = *ref->entry;
    const TrainingPlan& p = *e.plan;
    std::vector<at::Tensor> ins(inputs.begin(), inputs.end());
    if (e.forward->symbolic()) {
      // The backward runs at the sizes of this call.
      std::vector<int64_t> syms = e.forward->symbolValues(ins);
      ctx->saved_data["syms"] = c10::IValue(syms);
    }
    std::vector<at::Tensor> all = e.forward->run(std::move(ins));
    size_t n = p.numUserOutputs;
    variable_list outs(all.begin(), all.begin() + n);
    ctx->save_for_backward(variable_list(all.begin() + n, all.end()));
    ctx->saved_data["thunder"] = c10::IValue::make_capsule(ref);
    variable_list nondiff;
    for (size_t i = 0; i < n; ++i) {
      if (p.fb.differentiableOutputs[i]) continue;
      // The same tensor as an input or another output (`return a, a.detach()`: detach ran as
      // nothing): marked as it is, the other one would lose its gradient too. Eager's detach
      // returns a tensor of its own sharing the storage, as this alias does.
      const c10::TensorImpl* impl = outs[i].unsafeGetTensorImpl();
      bool shared = false;
      for (size_t j = 0; j < n && !shared; ++j) shared = j != i && outs[j].unsafeGetTensorImpl() == impl;
      for (const at::Tensor& x : inputs) shared |= x.unsafeGetTensorImpl() == impl;
      if (shared) outs[i] = outs[i].detach();
      nondiff.push_back(outs[i]);
    }
    if (!nondiff.empty()) ctx->mark_non_differentiable(nondiff);
    // Two differentiable outputs that are one tensor at run time (a conversion to the same
    // dtype runs as nothing) are two values of the trace with gradients of their own: returned
    // as one tensor twice, autograd gave both gradients to the second and none to the first
    // (fuzzer seed 111316). The later one becomes an alias of its own, sharing the storage as
    // eager's two tensors do.
    for (size_t i = 0; i < n; ++i) {
      if (!p.fb.differentiableOutputs[i]) continue;
      for (size_t j = 0; j < i; ++j)
        if (outs[j].unsafeGetTensorImpl() == outs[i].unsafeGetTensorImpl()) {
          outs[i] = at::alias(outs[i]);
          break;
        }
    }
    // An output the backward does not reach gets an undefined gradient, not zeros (see backward).
    ctx->set_materialize_grads(false);
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // create_graph=True (autograd runs this with grad mode on): the caller wants to differentiate
    // the gradients again (a gradient penalty, a Hessian-vector product). The program records no
    // autograd graph, so their derivatives would be zero, silently: a WGAN-GP step trained as if
    // the penalty were constant.
    TORCH_CHECK_NOT_IMPLEMENTED(
        !at::GradMode::is_enabled(),
        "thunder.jit: the backward of a jitted call was asked to build a graph (create_graph=True: a second "
        "derivative, as a gradient penalty or a Hessian-vector product takes), which it does not do: its backward "
        "is one compiled program, and the gradients it returns would have no derivative. Compute that part with "
        "eager PyTorch, or pass create_graph=False where no second derivative is taken.");
    // Throws PyTorch's "Trying to backward through the graph a second time" once freed.
    variable_list ins = ctx->get_saved_variables();
    auto ref = c10::static_intrusive_pointer_cast<EntryRef>(ctx->saved_data.at("thunder").toCapsule());
    TrainingEntry& e = *ref->entry;
    const ForwardBackward& fb = e.plan->fb;
    std::vector<bool> undefined;
    bool anyUndefined = false, anyDefined = false;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!fb.differentiableOutputs[i]) continue;
      ins.push_back(grads[i]);
      undefined.push_back(!grads[i].defined());
      anyUndefined |= undefined.back();
      anyDefined |= !undefined.back();
    }
    variable_list out(fb.gradIndex.size() + 1);  // + the EntryRef argument
    if (!anyDefined) return out;
    // Outputs the caller's backward does not reach: eager runs no backward formula that only they
    // reach (a NaN local derivative there times a zero gradient would be NaN), so neither does
    // this call. Their backward program is made once per such set of outputs.
    const runtime::Program* program = e.backward.get();
    std::shared_ptr<const runtime::Program> partial;
    std::vector<bool> zeroOutputs;
    std::string fixedSizes;
    if (anyUndefined) {
      std::lock_guard<std::mutex> lock(e.mu);
      TrainingEntry::Partial& p = e.partial[undefined];
      if (!p.program) {
        const TrainingPlan& plan = *e.plan;
        std::vector<std::shared_ptr<Trace>> traces{std::make_shared<Trace>(
            withUndefinedCotangents(*plan.backwardTraces.front(), undefined, &p.zeroOutputs))};
        if (plan.verify) verify(*traces.back());
        lowerForExecution(traces, plan.executors, plan.verify);
        if (!e.symbols.empty()) {
          std::vector<SymGuard> guards = e.guards;
          mergeGuards(guards, traces.back()->guards);
          p.fixedSizes = symbolicCheck(guards, *traces.back());
        }
        p.program = std::make_shared<const runtime::Program>(traces.back(), e.symbols);
      }
      partial = p.program;
      zeroOutputs = p.zeroOutputs;
      fixedSizes = p.fixedSizes;
      program = partial.get();
    }
    // Unless the graph is kept for another backward, the saved tensors are released now, as
    // PyTorch would after this call: a saved intermediate then has no owner but the program,
    // which may write over it once it is dead (the cross-entropy gradient over the logits).
    // Parameters and other tensors the caller still holds are never written (KernelArgs::owned).
    bool release = !torch::autograd::get_current_graph_task_keep_graph();
    if (release) {
      (ctx->*member(SavedVariablesTag{})).clear();
      ctx->*member(FreedBuffersTag{}) = true;
    }
    std::vector<int64_t> syms;
    if (!e.symbols.empty()) syms = ctx->saved_data.at("syms").toIntVector();
    if (!fixedSizes.empty() && syms != e.hints)
      throw std::runtime_error("thunder: the backward of this call, for outputs whose gradient is not given, "
                               "serves only the sizes the function was traced at (" + fixedSizes +
                               "); trace the function without size symbols for these sizes");
    std::vector<at::Tensor> res = program->run(std::move(ins), release, program->symbolic() ? &syms : nullptr);
    // A gradient only undefined cotangents reach stays undefined, as in eager: the input's
    // `.grad` stays None (an optimizer then skips it, where zeros would still decay it).
    for (size_t i = 0; i < fb.gradIndex.size(); ++i) {
      int k = fb.gradIndex[i];
      if (k >= 0 && !(static_cast<size_t>(k) < zeroOutputs.size() && zeroOutputs[k])) out[i] = res[k];
    }
    return out;
  }
};

/// A Python object held from C++ rules, which outlive nothing Python needs at exit: dropped
/// without the GIL (and without Python) then.
std::shared_ptr<py::object> heldPython(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
}

std::string symbolId(py::handle symbol) {
  if (py::isinstance<py::str>(symbol)) return symbol.cast<std::string>();
  return symbol.attr("id").cast<std::string>();
}

void init(py::module_& m) {
  registerGradRules();

  py::class_<TrainingPlan, std::shared_ptr<TrainingPlan>>(m, "TrainingPlan")
      .def_readonly("forward_traces", &TrainingPlan::forwardTraces)
      .def_readonly("backward_traces", &TrainingPlan::backwardTraces)
      .def_property_readonly("num_saved", [](const TrainingPlan& p) { return p.fb.saved.size(); })
      .def_property_readonly("saved_bytes", [](const TrainingPlan& p) { return p.fb.savedBytes; })
      .def_property_readonly("saved_names",
                             [](const TrainingPlan& p) {
                               std::vector<std::string> n;
                               for (const TensorPtr& t : p.fb.saved) n.push_back(t->name);
                               return n;
                             })
      .def_property_readonly("num_saved_without_remat",
                             [](const TrainingPlan& p) { return p.fb.numSavedWithoutRemat; })
      .def_property_readonly("saved_bytes_without_remat",
                             [](const TrainingPlan& p) { return p.fb.savedBytesWithoutRemat; })
      .def_property_readonly("differentiable_outputs",
                             [](const TrainingPlan& p) { return p.fb.differentiableOutputs; });

  m.def("run_grad_pipeline", &runGradPipeline, py::arg("trace"), py::arg("executors"),
        py::arg("num_args"), py::arg("verify") = false);
  m.def("run_training_pipeline", &runTrainingPipeline, py::arg("trace"), py::arg("executors"),
        py::arg("verify") = false, py::arg("overwritten") = std::vector<std::string>{});
  m.def("has_grad_rule", [](const std::string& id) { return findGradRule(id) != nullptr; },
        py::arg("symbol_id"), "Whether the default table holds a grad rule for the symbol (by id).");
  m.def("mark_recomputable", &markRecomputable, py::arg("symbol_id"),
        "Lets the backward run calls of the symbol (by id) again instead of saving their outputs.");
  m.def("mark_prefetch", &markPrefetch, py::arg("symbol_id"), py::arg("window_bytes"),
        "Lets the Prefetch pass issue calls of the symbol (by id), asynchronous transfers completed "
        "by their first reader, earlier: at most window_bytes of their outputs in flight.");
  m.def(
      "live_bytes",
      [](const std::shared_ptr<Trace>& t, const std::string& producedBy) {
        LiveBytes lb = liveBytes(*t, producedBy);
        py::dict d;
        d["after"] = lb.after;
        d["peak"] = lb.peak;
        d["peak_index"] = lb.peakIndex;
        return d;
      },
      py::arg("trace"), py::arg("produced_by") = "",
      "Bytes of live tensors after each statement of an execution trace, and their peak.");
  m.def("get_grad", [](py::handle x) { return fromValue(getGrad(toValue(x))); });
  m.def("put_grad", [](py::handle x, py::handle g) { putGrad(toValue(x), toValue(g)); });
  m.def("register_executor_grad_transform",
        [](const std::string& executor, py::handle symbol, py::function fn, py::object checker) {
          std::string id = symbolId(symbol);
          const Symbol* s = SymbolRegistry::get().find(id);
          auto holder = heldPython(fn);
          auto call = [s](const py::object& f, const std::vector<Value>& args) {
            py::list pos;
            py::dict kw;
            for (size_t i = 0; i < args.size(); ++i) {
              if (s && i < s->params.size() && s->params[i].kwOnly)
                kw[py::str(s->params[i].name)] = fromValue(args[i]);
              else
                pos.append(fromValue(args[i]));
            }
            return f(*py::tuple(pos), **kw);
          };
          GradRuleCondition applies;
          if (!checker.is_none()) {
            auto held = heldPython(checker);
            applies = [held, call](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>&) {
              py::gil_scoped_acquire gil;
              return call(*held, b.args).cast<bool>();
            };
          }
          registerExecutorGradRule(executor, id, [holder, call](const std::vector<Value>& args) {
            py::gil_scoped_acquire gil;
            return toValue(call(*holder, args));
          }, std::move(applies));
        },
        py::arg("executor"), py::arg("symbol"), py::arg("fn"), py::arg("checker") = py::none());
}

const bool registered = (moduleInits().push_back(init), true);

}  // namespace

std::shared_ptr<TrainingEntry> makeTrainingEntry(py::handle plan, const std::vector<SizeSymbol>& symbols,
                                                 const std::vector<SymGuard>& guards) {
  auto e = std::make_shared<TrainingEntry>();
  auto p = plan.cast<std::shared_ptr<TrainingPlan>>();
  e->forward = std::make_unique<runtime::Program>(p->forwardTraces.back(), symbols);
  e->backward = std::make_unique<runtime::Program>(p->backwardTraces.back(), symbols);
  e->symbols = symbols;
  for (const SizeSymbol& s : symbols) e->hints.push_back(s.hint);
  if (!symbols.empty()) e->guards = guards;
  e->plan = std::move(p);
  return e;
}

std::string trainingSymbolicCheck(py::handle plan, std::vector<SymGuard>& guards) {
  auto p = plan.cast<std::shared_ptr<TrainingPlan>>();
  mergeGuards(guards, p->fb.backward.guards);
  mergeGuards(guards, p->forwardTraces.back()->guards);
  mergeGuards(guards, p->backwardTraces.back()->guards);
  std::string why = symbolicCheck(guards, *p->forwardTraces.back());
  if (why.empty()) {
    why = symbolicCheck(guards, *p->backwardTraces.back());
    if (!why.empty()) why = "in the backward, " + why;
  }
  return why;
}

std::vector<at::Tensor> runTraining(const std::shared_ptr<TrainingEntry>& entry,
                                    std::vector<at::Tensor> inputs) {
  auto ref = c10::make_intrusive<EntryRef>();
  ref->entry = entry;
  std::vector<at::Tensor> outs = ThunderFunction::apply(at::TensorList(inputs), ref);
  // OutputGradientReads reads autograd's internals (its hooks, the graph task's captures): on
  // torch 2.11 (the GPU machine's) the refusal's test crashed the process in backward, cause not
  // found; it runs where it was verified, torch 2.13 and later.
  constexpr bool kOutputGradientReads = TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13);
  if (kOutputGradientReads && entry->plan->feedsAny) {
    for (const at::Tensor& o : outs) {
      if (!o.defined() || !o.grad_fn()) continue;
      auto node = o.grad_fn();
      node->add_tensor_pre_hook(std::make_unique<OutputGradientReads>(node.get(), entry->plan));
      break;
    }
  }
  return outs;
}

const Value& trainingOutput(const TrainingEntry& entry) { return entry.plan->fb.userOutput; }

std::vector<int64_t> trainingSymbolValues(const TrainingEntry& entry, const std::vector<at::Tensor>& inputs) {
  return entry.forward->symbolic() ? entry.forward->symbolValues(inputs) : std::vector<int64_t>();
}

py::object trainingPlan(const TrainingEntry& entry) {
  return py::cast(std::const_pointer_cast<TrainingPlan>(entry.plan));
}

}  // namespace thunder::python
