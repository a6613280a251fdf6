#include "ir/symbolic.h"

#include <algorithm>

namespace thunder {

int64_t SymExpr::eval(const std::vector<int64_t>& values) const {
  int64_t v = constant;
  for (const auto& [k, c] : terms) v += c * values.at(static_cast<size_t>(k));
  return v;
}

std::string SymExpr::str() const {
  std::string s;
  for (const auto& [k, c] : terms) {
    int64_t a = c < 0 ? -c : c;
    if (s.empty()) s += c < 0 ? "-" : "";
    else s += c < 0 ? " - " : " + ";
    if (a != 1) s += std::to_string(a) + "*";
    s += "s" + std::to_string(k);
  }
  if (s.empty()) return std::to_string(constant);
  if (constant > 0) s += " + " + std::to_string(constant);
  if (constant < 0) s += " - " + std::to_string(-constant);
  return s;
}

SymExpr SymInt::expr() const {
  if (e) return *e;
  SymExpr c;
  c.constant = hint;
  return c;
}

SymPtr normalized(SymExpr e) {
  if (e.terms.empty()) return nullptr;
  return std::make_shared<const SymExpr>(std::move(e));
}

SymPtr symbolExpr(int k) {
  SymExpr e;
  e.terms.emplace_back(k, 1);
  return std::make_shared<const SymExpr>(std::move(e));
}

namespace {

SymExpr combine(const SymExpr& a, const SymExpr& b, int64_t sign) {
  SymExpr r;
  r.constant = a.constant + sign * b.constant;
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    if (j == b.terms.size() || (i < a.terms.size() && a.terms[i].first < b.terms[j].first)) {
      r.terms.push_back(a.terms[i++]);
    } else if (i == a.terms.size() || b.terms[j].first < a.terms[i].first) {
      r.terms.emplace_back(b.terms[j].first, sign * b.terms[j].second);
      ++j;
    } else {
      int64_t c = a.terms[i].second + sign * b.terms[j].second;
      if (c != 0) r.terms.emplace_back(a.terms[i].first, c);
      ++i, ++j;
    }
  }
  return r;
}

}  // namespace

SymInt operator+(const SymInt& a, const SymInt& b) {
  if (!a.e && !b.e) return {a.hint + b.hint, nullptr};
  return {a.hint + b.hint, normalized(combine(a.expr(), b.expr(), 1))};
}

SymInt operator-(const SymInt& a, const SymInt& b) {
  if (!a.e && !b.e) return {a.hint - b.hint, nullptr};
  return {a.hint - b.hint, normalized(combine(a.expr(), b.expr(), -1))};
}

SymInt operator-(const SymInt& a) { return SymInt{0, nullptr} - a; }

SymInt mulSym(const SymInt& a, const SymInt& b, bool& ok) {
  ok = true;
  if (!a.e && !b.e) return {a.hint * b.hint, nullptr};
  if (a.e && b.e) {
    ok = false;
    return {a.hint * b.hint, nullptr};
  }
  const SymInt& s = a.e ? a : b;
  int64_t k = a.e ? b.hint : a.hint;
  if (k == 0) return {0, nullptr};
  SymExpr r = *s.e;
  r.constant *= k;
  for (auto& t : r.terms) t.second *= k;
  return {a.hint * b.hint, normalized(std::move(r))};
}

bool sameSym(const SymInt& a, const SymInt& b) {
  if (!a.e && !b.e) return a.hint == b.hint;
  if (!a.e || !b.e) return false;
  return *a.e == *b.e;
}

bool SymGuard::holds(const std::vector<int64_t>& values) const {
  int64_t v = e.eval(values);
  return (rel == Rel::Eq ? v == 0 : v < 0) == outcome;
}

std::string SymGuard::str() const {
  // e rel 0, the constant moved to the right and the first coefficient made positive:
  // "s0 + 1 == 8", "s0 >= 2".
  SymExpr lhs = e;
  int64_t rhs = -lhs.constant;
  lhs.constant = 0;
  bool flip = !lhs.terms.empty() && lhs.terms[0].second < 0;
  if (flip) {
    for (auto& t : lhs.terms) t.second = -t.second;
    rhs = -rhs;
  }
  const char* op;
  if (rel == Rel::Eq) {
    op = outcome ? " == " : " != ";
  } else if (!flip) {
    op = outcome ? " < " : " >= ";
  } else if (outcome) {  // -x < -r  <=>  x > r  <=>  x >= r + 1
    op = " >= ";
    rhs += 1;
  } else {  // -x >= -r  <=>  x <= r
    op = " <= ";
  }
  return lhs.str() + op + std::to_string(rhs);
}

SymGuard guardEqual(const SymInt& a, const SymInt& b) {
  SymGuard g;
  g.rel = SymGuard::Rel::Eq;
  g.e = (a - b).expr();
  g.outcome = a.hint == b.hint;
  return g;
}

SymGuard guardLessEqual(const SymInt& a, const SymInt& b) {
  // a <= b  <=>  a - b - 1 < 0
  SymGuard g;
  g.rel = SymGuard::Rel::Lt;
  g.e = (a - b - SymInt{1, nullptr}).expr();
  g.outcome = a.hint <= b.hint;
  return g;
}

}  // namespace thunder
