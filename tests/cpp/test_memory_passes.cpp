// Memory passes: live bytes along a trace, and prefetch of asynchronous transfers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/verifier.h"
#include "ops/prims.h"
#include "test_util.h"
#include "transforms/del_last_used.h"
#include "transforms/live_bytes.h"
#include "transforms/prefetch.h"
#include "transforms/remat.h"

namespace thunder {
namespace {

using testing::addInput;

/// "out = name" per call, for compact comparisons.
std::vector<std::string> order(const Trace& t) {
  std::vector<std::string> out;
  for (const BoundSymbol& b : t.bsyms)
    out.push_back(b.outputTensors()[0]->name + " = " + b.sym->name);
  return out;
}

/// A test symbol of one tensor argument (and an optional second) whose output is like the first.
const Symbol& like(const std::string& name, const std::string& signature = "a") {
  auto s = std::make_unique<Symbol>();
  s->module = "test";
  s->name = name;
  s->params = parseSignature(signature);
  s->meta = [](const std::vector<Value>& a) {
    const TensorProxy& t = a[0].tensor();
    return Value(requireContext("test").newTensor(t.shape, t.dtype, t.device));
  };
  return *SymbolRegistry::get().put(std::move(s));
}

TEST(LiveBytes, CountsViewsOnceAndFreesAtDel) {
  prims::registerPrims();
  Trace t;
  Value x = addInput(t, "x", {4});  // 16 bytes
  {
    TracingScope scope(t);
    Value a = prims::neg(x);             // 32 live
    Value v = prims::reshape(a, {2, 2});  // a view of a: still 32
    Value b = prims::add(v, prims::reshape(x, {2, 2}));  // 48; then x, a and the views die: 16
    t.output = b;
  }
  Trace d = delLastUsed(t);
  verify(d);
  LiveBytes all = liveBytes(d);
  EXPECT_EQ(all.peak, 48);
  EXPECT_EQ(all.after.back(), 16);
  EXPECT_EQ(d.bsyms[all.peakIndex].sym->name, "add");
  // Only what neg made (and its view) counts: alive from neg to the del after add.
  LiveBytes negs = liveBytes(d, "neg");
  EXPECT_EQ(negs.peak, 16);
  EXPECT_EQ(negs.after.back(), 0);
  EXPECT_EQ(d.bsyms[negs.peakIndex].sym->name, "neg");
}

TEST(Prefetch, IssuesTransfersAheadWithinTheWindow) {
  prims::registerPrims();
  static const Symbol& fetch = like("fetch", "a, *, token");
  static const Symbol& done = like("done");
  static const Symbol& token = like("token");
  markRecomputable(token.id());
  // fetch(s, token=token(s)): a transfer with its token, as fsdp traces a gather.
  auto start = [](const Value& s) {
    return call(fetch, fetch.bind({s}, {{"token", call(token, token.bind({s}, {}))}}));
  };
  // The trace prefetched with a window of `bytes`, as "out = name" per call.
  auto prefetched = [](const Trace& t, int64_t bytes) {
    markPrefetch(fetch.id(), bytes);
    Trace out = prefetch(t);
    verify(out);
    return order(out);
  };
  auto build = [&](Trace& t) {
    std::vector<Value> shards;
    for (const char* n : {"a", "b", "c"}) shards.push_back(addInput(t, n, {4}));  // 16 bytes each
    Value y = addInput(t, "x", {4});
    TracingScope scope(t);
    for (const Value& s : shards) y = prims::mul(y, call(done, done.bind({start(s)}, {})));
    t.output = y;
  };
  Trace t;
  build(t);
  ASSERT_EQ(order(t), (std::vector<std::string>{
                          "t0 = token", "t1 = fetch", "t2 = done", "t3 = mul",
                          "t4 = token", "t5 = fetch", "t6 = done", "t7 = mul",
                          "t8 = token", "t9 = fetch", "t10 = done", "t11 = mul"}));
  // A window of one transfer: each goes just after the previous one completes, with its token,
  // so that it overlaps the previous one's consumer.
  markPrefetch(fetch.id(), 16);
  ASSERT_TRUE(hasPrefetchCalls(t));
  EXPECT_EQ(prefetched(t, 16), (std::vector<std::string>{
                            "t0 = token", "t1 = fetch", "t2 = done", "t4 = token", "t5 = fetch",
                            "t3 = mul", "t6 = done", "t8 = token", "t9 = fetch", "t7 = mul",
                            "t10 = done", "t11 = mul"}));
  // Two in flight: the second starts with the first, the third once the first completes.
  EXPECT_EQ(prefetched(t, 32), (std::vector<std::string>{
                            "t0 = token", "t1 = fetch", "t4 = token", "t5 = fetch", "t2 = done",
                            "t8 = token", "t9 = fetch", "t3 = mul", "t6 = done", "t7 = mul",
                            "t10 = done", "t11 = mul"}));
  // A completion waits no earlier than its result is needed: compute that reads nothing it
  // completes (neg) runs while the transfer goes on, and a transfer issued right after the
  // completion (window) moves with it.
  Trace late;
  {
    Value a = addInput(late, "a", {4}), b = addInput(late, "b", {4}), x = addInput(late, "x", {4});
    TracingScope scope(late);
    Value d1 = call(done, done.bind({start(a)}, {}));
    Value f2 = start(b);
    Value n = prims::neg(x);
    Value m = prims::mul(n, d1);
    late.output = prims::mul(m, call(done, done.bind({f2}, {})));
  }
  EXPECT_EQ(prefetched(late, 16), (std::vector<std::string>{"t0 = token", "t1 = fetch", "t5 = neg", "t2 = done",
                                                   "t3 = token", "t4 = fetch", "t6 = mul", "t7 = done",
                                                   "t8 = mul"}));
  // A transfer larger than the window on its own is queued right behind the previous one (here
  // the first, issued at the start), not after its completion.
  Trace big;
  {
    Value a = addInput(big, "a", {4}), b = addInput(big, "b", {4});
    Value c = addInput(big, "c", {4}, DType::Float64);  // 32 bytes
    Value y = addInput(big, "x", {4});
    TracingScope scope(big);
    for (const Value& s : {a, b}) y = prims::mul(y, call(done, done.bind({start(s)}, {})));
    big.output = Value::tuple({call(done, done.bind({start(c)}, {})), y});
  }
  EXPECT_EQ(prefetched(big, 16), (std::vector<std::string>{
                               "t0 = token", "t1 = fetch", "t2 = done", "t4 = token", "t5 = fetch",
                               "t8 = token", "t9 = fetch", "t3 = mul", "t6 = done", "t7 = mul",
                               "t10 = done"}));
  // A trace without marked calls is not prefetched.
  Trace plain;
  Value x = addInput(plain, "x", {4});
  {
    TracingScope scope(plain);
    plain.output = prims::neg(x);
  }
  EXPECT_FALSE(hasPrefetchCalls(plain));
  EXPECT_EQ(order(prefetch(plain)), order(plain));
}

}  // namespace
}  // namespace thunder
