// Reverse-mode autodiff: a table of grad rules keyed by symbol id, the grad() transform, and the
// split of a training call into a forward and a backward trace.
//
// A grad rule is traced like a decomposition on a call's bound arguments. It computes the
// forward (and returns the call's output), then reads each output's cotangent with getGrad and
// gives each input's gradient with putGrad. Everything it traces after the first getGrad belongs
// to the backward. Walking a trace, a call uses the rule of its symbol (an active executor's rule
// first, then the table), else its subsymbols are walked; a call with neither has no gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executors/executor.h"
#include "ir/trace.h"

namespace thunder {

/// A grad rule: called while tracing with a call's bound arguments; returns the call's output.
using GradRule = std::function<Value(const std::vector<Value>& args)>;

/// Whether a conditional rule applies to a call; `differentiable` says whether a tensor of the
/// call needs a gradient.
using GradRuleCondition = std::function<bool(
    const BoundSymbol& call, const std::function<bool(const TensorProxy&)>& differentiable)>;

/// Registers the rule of a symbol (by id) in the default table, replacing an earlier one.
void registerGradRule(const std::string& symbolId, GradRule rule);
/// Registers a rule used only for the calls `applies` accepts; the others are differentiated as
/// if the symbol had no rule (through their decomposition).
void registerGradRule(const std::string& symbolId, GradRule rule, GradRuleCondition applies);
/// Registers a rule that takes precedence for `symbolId` while `executor` is active, for the calls
/// `applies` accepts; without `applies`, for the calls its checker accepts where it implements the
/// symbol, else for every call. Either sees each tensor argument's requires_grad as whether that
/// argument is on the gradient path.
void registerExecutorGradRule(const std::string& executor, const std::string& symbolId,
                              GradRule rule, GradRuleCondition applies = nullptr);
/// Marks the default rule of a symbol as correct for complex values (PyTorch's convention: the
/// gradient of a real loss with respect to z is dL/d(re z) + i dL/d(im z)). Gradients flow
/// through complex tensors only across such rules and executors' rules (which run PyTorch's).
void markComplexSafe(const std::string& symbolId);
/// Whether markComplexSafe was called for the symbol.
bool isComplexSafe(const std::string& symbolId);
/// Marks a symbol (by id) as differentiable at symbolic sizes (docs/symbolic_sizes.md): its
/// default grad rule, and its decomposition where it has no rule, read the sizes of tensors only
/// as shapes given to calls (whose symbolic rules then check them) or through pinsOf-style
/// helpers that specialize what they read; never as numbers baked into the backward (a mean's
/// 1/N). A call on symbolic sizes whose symbol is not marked specializes those sizes in a
/// training trace (a guard that each equals its traced value).
void markSymbolicGrad(const std::string& symbolId);
bool isSymbolicGrad(const std::string& symbolId);
/// Registers a rule for the calls of a symbol that read symbolic sizes the trace does not pin (a
/// training trace with size symbols), for the calls `applies` accepts: written in ops whose
/// symbolic rules follow the sizes (the torch language), so the backward serves every size the
/// forward does. It takes precedence over the default and executors' rules for those calls only.
void registerSymbolicGradRule(const std::string& symbolId, GradRule rule, GradRuleCondition applies = nullptr);
/// Registers the default grad rules (idempotent; lookups call it).
void registerGradRules();
/// The default table's rule of a symbol, or nullptr.
const GradRule* findGradRule(const std::string& symbolId);

/// Inside a grad rule: the cotangent of a forward output (a proxy of its metadata).
Value getGrad(const Value& forwardOutput);
/// Inside a grad rule: the gradient of a forward input. Numbers, None inputs and None gradients
/// are ignored; a gradient of another shape is summed to the input's (unbroadcast), and one of
/// another dtype converted.
void putGrad(const Value& forwardInput, const Value& grad);
/// Inside a grad rule: whether a forward input is on the gradient path (a gradient put for it is
/// used); false for numbers and None.
bool needsGrad(const Value& forwardInput);

/// The trace of thunder.core.transforms.grad: same inputs as `computation`, the gradients of
/// every floating-point tensor among its first `numArgs` inputs as a list, with every tensor
/// output's cotangent a tensor of ones. Backward parts are ordered like their forward calls
/// where dependencies allow. ValueError when no input or no output is differentiable.
Trace gradTransform(const Trace& computation, size_t numArgs,
                    const std::vector<Executor*>& executors);

/// A training call split in two.
struct ForwardBackward {
  /// Inputs: the computation's. Output: (the computation's output, (saved tensors...)).
  Trace forward;
  /// Inputs: saved tensors, then one cotangent per differentiable output. Output: a tuple with
  /// one entry per forward input, its gradient or None.
  Trace backward;
  /// The computation's output (what the user gets).
  Value userOutput;
  /// Per tensor of userOutput (collectTensors order): whether it gets a cotangent.
  std::vector<bool> differentiableOutputs;
  /// Per forward input: the index of its gradient among the backward's output tensors, or -1.
  std::vector<int> gradIndex;
  /// Saved tensors (after rematerialization), and what saving every needed tensor would cost.
  std::vector<TensorPtr> saved;
  int64_t savedBytes = 0;
  size_t numSavedWithoutRemat = 0;
  int64_t savedBytesWithoutRemat = 0;
};

/// Differentiates `computation` with respect to its floating inputs that require grad and splits
/// the joint trace: the forward saves only what the backward needs, with cheap ops recomputed in
/// the backward where that saves memory (remat.h).
/// `overwritten`: the names of inputs the program updates in place (their values before the
/// update are gone when the backward runs): the backward recomputes nothing from them.
ForwardBackward forwardBackward(const Trace& computation, const std::vector<Executor*>& executors,
                                const std::vector<std::string>& overwritten = {});

/// The backward trace (ForwardBackward::backward, before lowering) for a call whose cotangent
/// inputs marked in `undefined` (one flag per cotangent, the trace's last inputs) were not given:
/// outputs the caller's backward does not reach, as in `autograd.grad(outs[0], x)`. Eager runs
/// no backward formula that only such outputs reach, so a NaN or infinite local derivative there
/// never meets their gradient; with zeros in their place it did (0 * NaN). Here the values that
/// only undefined cotangents flow into are zero and are left out: a product or quotient of one and
/// a value is zero, a sum with one is the other term, shape ops and reductions of one are zero,
/// and so are all outputs of a call linear in its cotangents (a fallback's `vjp_*`, fused
/// attention's backward) whose cotangent-derived arguments are all zero. Any other use reads
/// zeros. The inputs stay (their tensors are not read).
/// `zeroOutputs`, when given, receives one flag per tensor the result returns (in order): set
/// where that gradient is zero because only undefined cotangents reach it, which eager leaves
/// undefined (a parameter only an unused output reads keeps `.grad` None).
Trace withUndefinedCotangents(const Trace& backward, const std::vector<bool>& undefined,
                              std::vector<bool>* zeroOutputs = nullptr);

}  // namespace thunder
