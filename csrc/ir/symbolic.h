// Symbolic sizes: affine expressions over a trace's size symbols, and the guards a trace holds on
// them (docs/symbolic_sizes.md).
//
// A dimension of a trace input marked dynamic is a symbol s<k>: its value at trace time is the
// hint, and every size and int computed from it carries an expression over the symbols next to
// its hint. Meta functions compute with hints; the rules of ops/symbolic_rules.cpp give the
// expressions of their results. What a rule needs to hold (two lengths equal, a slice inside its
// dimension) and every comparison the program made of a symbolic int are guards: the trace serves
// exactly the sizes that satisfy them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace thunder {

/// c + sum of coefficient * s<symbol>: the terms sorted by symbol, coefficients nonzero.
struct SymExpr {
  int64_t constant = 0;
  std::vector<std::pair<int, int64_t>> terms;

  bool isConstant() const { return terms.empty(); }
  /// The value where symbol k has values[k].
  int64_t eval(const std::vector<int64_t>& values) const;
  /// "s0 + 1", "2*s1 - s0", "s0".
  std::string str() const;
  bool operator==(const SymExpr& o) const { return constant == o.constant && terms == o.terms; }
  bool operator!=(const SymExpr& o) const { return !(*this == o); }
};

/// An expression shared between values; nullptr stands for "no symbol": a static size or int.
using SymPtr = std::shared_ptr<const SymExpr>;

/// A size or int with its expression: `hint` is its value at trace time, `e` null when static.
struct SymInt {
  int64_t hint = 0;
  SymPtr e;

  bool symbolic() const { return e != nullptr; }
  /// The expression, a constant one for a static value.
  SymExpr expr() const;
};

/// The expression of `e` as a SymInt's (nullptr where it is constant).
SymPtr normalized(SymExpr e);
/// s<k>.
SymPtr symbolExpr(int k);

SymInt operator+(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a);
/// a * b where at most one is symbolic; nullopt-like failure (`ok` false) for a product of two.
SymInt mulSym(const SymInt& a, const SymInt& b, bool& ok);
/// Whether a and b are the same size for every value of the symbols: equal expressions (a static
/// size equals a symbolic one only through a guard).
bool sameSym(const SymInt& a, const SymInt& b);

/// A condition on the symbols a trace holds: (e == 0) == outcome, or (e < 0) == outcome.
struct SymGuard {
  enum class Rel : uint8_t { Eq, Lt } rel = SymGuard::Rel::Eq;
  SymExpr e;
  bool outcome = true;

  bool holds(const std::vector<int64_t>& values) const;
  bool operator==(const SymGuard& o) const { return rel == o.rel && e == o.e && outcome == o.outcome; }
  /// "s0 + 1 == 8", "s0 - s1 != 0", "s0 - 4 < 0".
  std::string str() const;
};

/// Guards for `a == b` (both known equal at their hints).
SymGuard guardEqual(const SymInt& a, const SymInt& b);
/// Guard that `a <= b` holds or fails as it does at the hints.
SymGuard guardLessEqual(const SymInt& a, const SymInt& b);

/// Where a trace's symbol comes from: dimension `dim` of its input `input` (an index into
/// Trace::inputs; -1 in a backward trace none of whose inputs holds it: the forward's call gives
/// it), and its value at trace time.
struct SizeSymbol {
  int input = 0;
  int dim = 0;
  int64_t hint = 0;
};

}  // namespace thunder
