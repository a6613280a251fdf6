// Passes and the verifier: dce, del_last_used, and the invariants verify() enforces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/verifier.h"
#include "ops/prims.h"
#include "test_util.h"
#include "transforms/dce.h"
#include "transforms/del_last_used.h"

namespace thunder {
namespace {

using testing::addInput;
using testing::expectInternalError;
using testing::tensor;

/// The ids of a trace's top-level calls, for compact comparisons.
std::vector<std::string> ids(const Trace& t) {
  std::vector<std::string> out;
  for (const BoundSymbol& b : t.bsyms) out.push_back(b.sym->id());
  return out;
}

/// Names deleted by each `del` in order, as "del a, b".
std::vector<std::string> statements(const Trace& t) {
  std::vector<std::string> out;
  for (const BoundSymbol& b : t.bsyms) {
    if (!b.sym->hasTag(kDel)) {
      std::vector<TensorPtr> outs = b.outputTensors();
      out.push_back(outs.empty() ? b.sym->id() : outs[0]->name + " = " + b.sym->id());
      continue;
    }
    std::string s = "del ";
    std::vector<TensorPtr> ts = b.inputTensors();
    for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i]->name;
    out.push_back(s);
  }
  return out;
}

/// A symbol with two outputs (a + b, a * b), like an executor's fused operator.
const Symbol& twoOutputs() {
  static const Symbol* sym = [] {
    auto s = std::make_unique<Symbol>();
    s->module = "test";
    s->name = "add_and_mul";
    s->params = parseSignature("a, b");
    s->impl = [](const std::vector<Value>& a) {
      return Value::tuple({prims::add(a[0], a[1]), prims::mul(a[0], a[1])});
    };
    return SymbolRegistry::get().put(std::move(s));
  }();
  return *sym;
}

/// A side-effecting call with no output that dce must keep (tagged kDontDce).
const Symbol& sideEffect() {
  static const Symbol* sym = [] {
    auto s = std::make_unique<Symbol>();
    s->module = "test";
    s->name = "record";
    s->params = parseSignature("a");
    s->tags = kDontDce;
    s->meta = [](const std::vector<Value>&) { return Value(); };
    return SymbolRegistry::get().put(std::move(s));
  }();
  return *sym;
}

TEST(Dce, RemovesCallsWhoseOutputsAreUnused) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  {
    TracingScope scope(t);
    Value dead = prims::exp(prims::neg(x));  // a dead chain: both calls go
    (void)dead;
    Value live = prims::abs(x);
    prims::sin(live);  // reads a live value but is itself dead
    t.output = prims::cos(live);
  }
  Trace out = dce(t);
  verify(out);
  EXPECT_EQ(ids(out), (std::vector<std::string>{"prims.abs", "prims.cos"}));
  EXPECT_EQ(out.provenance, "Dead Code Elimination");
  EXPECT_EQ(out.inputs, t.inputs);
  EXPECT_EQ(out.output, t.output);
  // Passes return a new trace: the input trace is unchanged.
  EXPECT_EQ(t.bsyms.size(), 5u);
}

TEST(Dce, KeepsDontDceCallsAndWhatTheyRead) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  {
    TracingScope scope(t);
    call(sideEffect(), {prims::neg(x)});
    prims::exp(x);
    t.output = x;
  }
  Trace out = dce(t);
  verify(out);
  EXPECT_EQ(ids(out), (std::vector<std::string>{"prims.neg", "test.record"}));
}

TEST(Dce, EmptyWhenNothingIsReturned) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  {
    TracingScope scope(t);
    prims::neg(x);
  }
  EXPECT_TRUE(dce(t).bsyms.empty());
}

TEST(Dce, PrunesUnusedOutputsOfAKeptCallToNone) {
  prims::registerPrims();
  Trace t;
  Value a = addInput(t, "a", {2}), b = addInput(t, "b", {2});
  Value both;
  {
    TracingScope scope(t);
    both = call(twoOutputs(), {a, b});
    t.output = both.items()[1];
  }
  Trace out = dce(t);
  verify(out);
  ASSERT_EQ(out.bsyms.size(), 1u);
  const Value& o = out.bsyms[0].output;
  ASSERT_TRUE(o.isTuple());
  ASSERT_EQ(o.items().size(), 2u);
  EXPECT_TRUE(o.items()[0].isNone());
  EXPECT_EQ(o.items()[1], both.items()[1]);
  // Both outputs used: nothing pruned.
  Trace t2 = t;
  t2.output = both;
  EXPECT_EQ(dce(t2).bsyms[0].output, both);
}

TEST(DelLastUsed, DeletesAfterLastUseButNeverOutputs) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2}), y = addInput(t, "y", {2});
  {
    TracingScope scope(t);
    Value t0 = prims::neg(x);          // last use of x
    Value t1 = prims::mul(t0, y);      // y is used again below; t0 is not
    Value t2 = prims::add(t1, t1);     // t1 read twice, deleted once
    Value t3 = prims::sub(t2, y);      // last use of y; t2 is returned
    t.output = Value::list({t2, Value::tuple({t3})});
  }
  Trace out = delLastUsed(t);
  verify(out);
  EXPECT_EQ(out.provenance, "Delete Last Used");
  EXPECT_EQ(statements(out), (std::vector<std::string>{
                                 "t0 = prims.neg", "del x",
                                 "t1 = prims.mul", "del t0",
                                 "t2 = prims.add", "del t1",
                                 "t3 = prims.sub", "del y",
                             }));
  // Running the pass again adds nothing: every tensor is already deleted after its last use.
  Trace again = delLastUsed(out);
  verify(again);
  EXPECT_EQ(statements(again), statements(out));
}

TEST(DelLastUsed, ReturnedInputIsNotDeleted) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  {
    TracingScope scope(t);
    Value y = prims::neg(x);
    t.output = Value::tuple({x, y});
  }
  Trace out = delLastUsed(t);
  verify(out);
  EXPECT_EQ(statements(out), (std::vector<std::string>{"t0 = prims.neg"}));
}

// ---- the verifier --------------------------------------------------------------------------------

BoundSymbol bound(prims::PrimId id, std::vector<Value> args, Value out) {
  BoundSymbol b;
  b.sym = &prims::symbol(id);
  b.args = std::move(args);
  b.output = std::move(out);
  return b;
}

BoundSymbol del(std::vector<Value> names) {
  BoundSymbol b;
  b.sym = &prims::delSymbol();
  b.args = std::move(names);
  return b;
}

TEST(Verifier, AcceptsWellFormedTraces) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  Value t0 = tensor({2}, DType::Float32, testing::kCpu, "t0");
  t.bsyms = {bound(prims::PrimId::neg, {x}, t0), del({x})};
  t.output = t0;
  EXPECT_NO_THROW(verify(t));
}

TEST(Verifier, CatchesUseBeforeDefinition) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  Value t0 = tensor({2}, DType::Float32, testing::kCpu, "t0");
  Value t1 = tensor({2}, DType::Float32, testing::kCpu, "t1");
  t.provenance = "my pass";
  t.bsyms = {bound(prims::PrimId::add, {x, t1}, t0), bound(prims::PrimId::neg, {x}, t1)};
  t.output = t0;
  expectInternalError([&] { verify(t); },
                      "verifier: t1 is used before it is defined (prims.add) in trace 'my pass'");
  // Returning a tensor that nothing defines.
  Trace r;
  addInput(r, "x", {2});
  r.output = t0;
  expectInternalError([&] { verify(r); }, "t0 is used before it is defined (return)");
}

TEST(Verifier, CatchesDoubleDefinition) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  Value t0 = tensor({2}, DType::Float32, testing::kCpu, "t0");
  t.bsyms = {bound(prims::PrimId::neg, {x}, t0), bound(prims::PrimId::exp, {x}, t0)};
  t.output = t0;
  expectInternalError([&] { verify(t); }, "verifier: t0 is defined twice (prims.exp)");
  // An output that reuses an input's name.
  Trace u;
  Value y = addInput(u, "y", {2});
  u.bsyms = {bound(prims::PrimId::neg, {y}, tensor({2}, DType::Float32, testing::kCpu, "y"))};
  expectInternalError([&] { verify(u); }, "y is defined twice");
}

TEST(Verifier, CatchesUseAfterDel) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {2});
  Value t0 = tensor({2}, DType::Float32, testing::kCpu, "t0");
  t.bsyms = {del({x}), bound(prims::PrimId::neg, {x}, t0)};
  t.output = t0;
  expectInternalError([&] { verify(t); }, "verifier: x is used after del (prims.neg)");
  // Returning a deleted tensor.
  Trace r;
  Value y = addInput(r, "y", {2});
  r.bsyms = {del({y})};
  r.output = y;
  expectInternalError([&] { verify(r); }, "y is used after del (return)");
}

TEST(Verifier, CatchesTwoProxiesWithOneName) {
  prims::registerPrims();
  Trace t;
  addInput(t, "x", {2});
  Value impostor = tensor({3}, DType::Float32, testing::kCpu, "x");
  Value t0 = tensor({3}, DType::Float32, testing::kCpu, "t0");
  t.bsyms = {bound(prims::PrimId::neg, {impostor}, t0)};
  t.output = t0;
  expectInternalError([&] { verify(t); }, "two different proxies are named x");
}

}  // namespace
}  // namespace thunder
