// The cross-entropy upcast fold (transforms/xent_upcast.h) on traces built in C++.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/verifier.h"
#include "ops/ltorch.h"
#include "test_util.h"
#include "transforms/xent_upcast.h"

namespace thunder {
namespace {

using testing::addInput;

std::vector<std::string> ids(const Trace& t) {
  std::vector<std::string> out;
  for (const BoundSymbol& b : t.bsyms) out.push_back(b.sym->id());
  return out;
}

/// cross_entropy(x.float().reshape(6, 11), y) with x of `dtype`; `alsoReturnFloat` returns the
/// float32 logits too.
Trace program(DType dtype, bool alsoReturnFloat = false) {
  ltorch::registerLTorch();
  Trace t;
  Value x = addInput(t, "x", {2, 3, 11}, dtype);
  Value y = addInput(t, "y", {6}, DType::Int64);
  TracingScope scope(t);
  Value f = ltorch::op("float", {x});
  Value v = ltorch::op("reshape", {f, Value::ints({6, 11})});
  Value loss = ltorch::op("cross_entropy", {v, y});
  t.output = alsoReturnFloat ? Value::tuple({loss, f}) : loss;
  return t;
}

TEST(XentUpcast, FoldsTheConversionIntoTheCrossEntropy) {
  for (DType d : {DType::BFloat16, DType::Float16}) {
    Trace t = program(d);
    std::optional<Trace> out = foldCrossEntropyUpcast(t);
    ASSERT_TRUE(out.has_value());
    verify(*out);
    EXPECT_EQ(ids(*out),
              (std::vector<std::string>{"ltorch.reshape", "ltorch.cross_entropy_upcast"}));
    // The reshape reads the low-precision input; the call's output is the old call's proxy.
    const BoundSymbol& r = out->bsyms[0];
    EXPECT_EQ(r.args[0].tensor().name, "x");
    EXPECT_EQ(r.output.tensor().dtype, d);
    EXPECT_EQ(out->bsyms[1].output.toTensor(), t.output.toTensor());
    EXPECT_EQ(out->bsyms[1].output.tensor().dtype, DType::Float32);
    // Its decomposition is the conversion and the cross-entropy, ending in the same proxy.
    const BoundSymbol& ce = out->bsyms[1];
    ASSERT_EQ(ce.subsymbols.size(), 2u);
    EXPECT_EQ(ce.subsymbols[0].sym->id(), "ltorch.to");  // (a torch-language call: it serves symbolic sizes)
    EXPECT_EQ(ce.subsymbols[1].sym->id(), "ltorch.cross_entropy");
    EXPECT_EQ(ce.subsymbols[1].output.toTensor(), t.output.toTensor());
  }
}

TEST(XentUpcast, LeavesOtherProgramsAlone) {
  EXPECT_FALSE(foldCrossEntropyUpcast(program(DType::Float32)).has_value());   // nothing to upcast
  EXPECT_FALSE(foldCrossEntropyUpcast(program(DType::Float64)).has_value());   // a downcast
  EXPECT_FALSE(foldCrossEntropyUpcast(program(DType::BFloat16, true)).has_value());  // f32 returned
}

}  // namespace
}  // namespace thunder
