// The symbolic rules of ops: the expressions of a call's result sizes from its arguments' and what
// must hold of the symbols for them to be right (ir/symbolic.h, docs/symbolic_sizes.md).
#pragma once

#include <vector>

#include "ir/trace.h"

namespace thunder {

/// For a call `b` of `rule` (a symbol with a symbolic rule, traced or claimed as `b`): the size
/// of each of its tensor outputs (in outputTensors() order), dimension by dimension, and the
/// guards the sizes assume, each true at the hints. False where the symbol has no rule, or the
/// rule does not cover these arguments (a product of two symbols, an advanced index): the call
/// is then right only at the hints.
bool symbolicRule(const Symbol& rule, const BoundSymbol& b, std::vector<std::vector<SymInt>>& outs,
                  std::vector<SymGuard>& needs);

/// Whether the arguments hold a tensor with a symbolic dimension or an int with an expression.
bool readsSymbolic(const std::vector<Value>& args);

/// The symbols (indices) the call reads or makes: in its arguments' and outputs' sizes and ints.
std::vector<int> symbolsOf(const BoundSymbol& b);

/// Records symbolic sizes on a call just traced (trace.cpp's call): the rule's sizes on its new
/// outputs and `symbolicRule` on the call where the rule applies; where it does not, a trace
/// that records guards specializes the symbols the call reads (guards that they equal their
/// hints). In a trace that records no guards, a rule whose guards the trace lacks does not apply.
void recordSymbolic(Trace& trace, BoundSymbol& b);

/// Checks an execution trace against the guards a trace of the program holds (its own, and those
/// autodiff and the passes added): every call that reads or makes a symbol not guarded to one value is a call whose
/// rule gives the sizes its outputs have, run whole by the torch executor (no fusion, no
/// decomposition baked at the hints), and each guard its rule needs is in `symbolic`. Returns
/// the first offending call's description, or an empty string where the trace serves every size
/// the guards allow.
std::string symbolicCheck(const std::vector<SymGuard>& guards, const Trace& execution);

/// Adds the guards of `more` that `into` lacks.
void mergeGuards(std::vector<SymGuard>& into, const std::vector<SymGuard>& more);

/// A call reading symbolic sizes that returned its input unchanged (trace.cpp's call drops it
/// from the trace): where that holds at every size the rule allows (an op of sizes and dimensions
/// whose rule gives the output the input's sizes) nothing is recorded; otherwise the symbols it
/// reads are specialized (x.roll(T - 3) traced at T = 3).
void recordPassthrough(Trace& trace, const BoundSymbol& b);

/// Specializes symbol k of `trace` to its traced value (a guard s<k> == hint).
void pinSymbol(Trace& trace, int k);

/// Size `d` of `t` read as a plain number while tracing (a decomposition or a grad rule that
/// computes with it): where it is symbolic, each of its symbols is specialized in the current
/// trace (a guard that it equals its traced value).
int64_t staticSize(const TensorProxy& t, int64_t d);

/// The symbols that a guard pins to one value (s_k == c), with that value.
std::vector<std::pair<int, int64_t>> pinnedSymbols(const std::vector<SymGuard>& guards);

}  // namespace thunder
