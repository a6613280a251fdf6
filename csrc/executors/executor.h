// Executors: who runs each bound symbol. An executor holds implementations keyed by the id of
// the symbol they implement; claiming walks a trace and hands each bound symbol to the first
// executor (in priority order) whose implementation accepts it.
#pragma once

#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/trace.h"
#include "transforms/reinplace.h"

namespace thunder {

/// How an executor runs one symbol.
struct Implementation {
  /// The symbol the claimed call becomes; it prints the call ("torch.mul", "multimul"). When it
  /// is the call's own symbol (an executor's operator), the call is kept as traced.
  const Symbol* execSymbol = nullptr;
  /// Accepts or declines a bound symbol; empty accepts all.
  std::function<bool(const BoundSymbol&)> checker;
  /// Replaces the call by a traced program (with its own calls claimed again); empty means the
  /// call becomes execSymbol with the same arguments.
  std::function<Value(const std::vector<Value>& args)> executionTransform;
};

/// An executor: a name and its implementations.
class Executor {
 public:
  explicit Executor(std::string name, std::string version = "") : name_(std::move(name)), version_(std::move(version)) {}
  virtual ~Executor() = default;
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  /// Adds an implementation of `symbolId`; later ones are tried first.
  void addImplementation(const std::string& symbolId, Implementation impl);
  /// Removes every implementation of `symbolId`.
  void removeImplementations(const std::string& symbolId);
  /// The first implementation of b's symbol whose checker accepts b, or nullptr.
  const Implementation* find(const BoundSymbol& b) const;
  /// True when any implementation of symbolId exists.
  bool implements(const std::string& symbolId) const { return impls_.count(symbolId) > 0; }
  /// Fusion executors rewrite regions of a trace instead of claiming single calls.
  virtual bool isFusion() const { return false; }
  /// A fusion executor's pass over the calls not claimed by earlier executors.
  virtual Trace fusionPass(const Trace& trace) const { return trace; }
  /// A fusion executor's pass after reinplacing: in-place updates (calls for which `inplace`
  /// says true) that its kernels can store themselves join the kernel computing their values.
  /// Nothing where no call changes.
  virtual std::optional<Trace> fuseInplaceUpdates(const Trace&, const std::function<bool(const BoundSymbol&)>&) const {
    return std::nullopt;
  }
  /// Whether `sym` is the in-place form of one of this executor's calls.
  bool isInplaceVariant(const Symbol* sym) const {
    for (const auto& [exec, in] : inplace_)
      if (in == sym) return true;
    return false;
  }
  /// Makes `inplace` the in-place form of this executor's call symbol `exec` (same arguments;
  /// writes its first argument and returns it), for the reinplace pass.
  void addInplaceVariant(const Symbol* exec, const Symbol* inplace) { inplace_[exec] = inplace; }
  /// Makes `form` the updating form of this executor's call symbol `exec` (several outputs, some
  /// written into its arguments), for the reinplace pass.
  void addUpdatingVariant(const Symbol* exec, UpdatingVariant form) { updating_[exec] = std::move(form); }
  /// The updating form of `exec`, or nullptr.
  const UpdatingVariant* updatingVariant(const Symbol* exec) const {
    auto it = updating_.find(exec);
    return it == updating_.end() ? nullptr : &it->second;
  }
  /// Whether `sym` is the updating form of one of this executor's calls.
  bool isUpdatingVariant(const Symbol* sym) const {
    for (const auto& [exec, form] : updating_)
      if (form.sym == sym) return true;
    return false;
  }
  /// The in-place form of `exec`, or nullptr.
  const Symbol* inplaceVariant(const Symbol* exec) const {
    auto it = inplace_.find(exec);
    return it == inplace_.end() ? nullptr : it->second;
  }
  /// Makes `asLaidOut` the form of this executor's call symbol `exec` that computes on its
  /// tensors in the layouts they come in, where `exec` converts them to channels-last (CUDA
  /// convolutions of half types): claiming calls it in traces whose convolutions keep their
  /// layouts (transforms/conv_layout.h).
  void addAsLaidOutVariant(const Symbol* exec, const Symbol* asLaidOut) { asLaidOut_[exec] = asLaidOut; }
  /// The as-laid-out form of `exec`, or nullptr.
  const Symbol* asLaidOutVariant(const Symbol* exec) const {
    auto it = asLaidOut_.find(exec);
    return it == asLaidOut_.end() ? nullptr : it->second;
  }

 private:
  std::string name_, version_;
  std::unordered_map<std::string, std::vector<Implementation>> impls_;
  std::unordered_map<const Symbol*, const Symbol*> inplace_;
  std::unordered_map<const Symbol*, const Symbol*> asLaidOut_;
  std::unordered_map<const Symbol*, UpdatingVariant> updating_;
};

/// Every executor by name, and the default list.
class ExecutorRegistry {
 public:
  static ExecutorRegistry& get();
  /// Adds an executor; a name registered twice is a user error.
  Executor* add(std::shared_ptr<Executor> ex);
  void remove(const std::string& name);
  Executor* find(const std::string& name) const;
  std::vector<Executor*> all() const;
  /// The executors with these names, in order; an unknown name is a ValueError.
  std::vector<Executor*> resolve(const std::vector<std::string>& names) const;

 private:
  std::vector<std::shared_ptr<Executor>> executors_;
};

/// Claims every bound symbol for an executor, in priority order (the torch executor, which must be
/// the last, takes what the others leave). A call no executor accepts is replaced by its
/// subsymbols, claimed in turn; a prim nobody implements is a user error naming it.
Trace transformForExecution(const Trace& trace, const std::vector<Executor*>& executors);

/// The reinplace pass's rules for an execution trace claimed by these executors: the in-place
/// forms they registered; fresh outputs for fused calls and for the torch executor's calls that
/// always allocate (arithmetic, reductions, matmuls, attention, gathers), never for views,
/// conversions (which return their input when there is nothing to convert) or unknown calls.
ReinplaceRules reinplaceRules(const std::vector<Executor*>& executors);

}  // namespace thunder
