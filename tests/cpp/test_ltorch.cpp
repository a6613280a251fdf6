// A few torch-language decompositions: type promotion and broadcasting produce the expected prims,
// reductions honor keepdim, and getitem handles ints, slices, None and Ellipsis. Expected dtypes
// and shapes were read off PyTorch for the same calls.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/ltorch.h"
#include "ops/prims.h"
#include "test_util.h"

namespace thunder {
namespace {

using testing::addInput;
using testing::expectError;
using Kw = std::vector<std::pair<std::string, Value>>;

/// The prims a call decomposed into, depth first, as "prims.add" etc.
void collectPrims(const BoundSymbol& b, std::vector<std::string>& out) {
  if (b.sym->isPrim()) {
    out.push_back(b.sym->name);
    return;
  }
  for (const BoundSymbol& s : b.subsymbols) collectPrims(s, out);
}

/// Traces one ltorch call on fresh inputs and keeps the trace for inspection.
class LTorchTest : public ::testing::Test {
 protected:
  void SetUp() override { ltorch::registerLTorch(); }

  Value input(Shape shape, DType dtype = DType::Float32) {
    return addInput(trace_, "in" + std::to_string(trace_.inputs.size()), std::move(shape), dtype);
  }

  /// Calls the op; returns its output. The bound symbol it recorded is last().
  Value run(const std::string& name, std::vector<Value> args, const Kw& kwargs = {}) {
    TracingScope scope(trace_);
    return ltorch::op(name, std::move(args), kwargs);
  }

  const BoundSymbol& last() const { return trace_.bsyms.back(); }

  std::vector<std::string> prims() const {
    std::vector<std::string> out;
    collectPrims(last(), out);
    return out;
  }

  Trace trace_;
};

using Prims = std::vector<std::string>;

void expectTensor(const Value& v, const Shape& shape, DType dtype) {
  ASSERT_TRUE(v.isTensor());
  EXPECT_EQ(v.tensor().shape, shape);
  EXPECT_EQ(v.tensor().dtype, dtype) << dtypeName(v.tensor().dtype);
}

TEST_F(LTorchTest, AddPromotesAndBroadcasts) {
  // torch.add(int32[2, 1], float32[3]) -> float32[2, 3]
  Value out = run("add", {input({2, 1}, DType::Int32), input({3})});
  expectTensor(out, {2, 3}, DType::Float32);
  EXPECT_EQ(last().sym->id(), "ltorch.add");
  // Converted before broadcast: the int32 operand's gradient sum (if it had one) would run in
  // the computation dtype, as eager's autograd sums before it rounds.
  EXPECT_EQ(prims(),
            (Prims{"convert_element_type", "broadcast_in_dim", "broadcast_in_dim", "add"}));
}

TEST_F(LTorchTest, LowPrecisionIsComputedInFloat32) {
  // torch.add(float16, float16) -> float16, computed here in float32.
  Value out = run("add", {input({2}, DType::Float16), input({2}, DType::Float16)});
  expectTensor(out, {2}, DType::Float16);
  EXPECT_EQ(prims(), (Prims{"convert_element_type", "convert_element_type", "add",
                            "convert_element_type"}));
  // torch.mul(bfloat16, 2) -> bfloat16
  expectTensor(run("mul", {input({2}, DType::BFloat16), Value(int64_t{2})}), {2},
               DType::BFloat16);
  EXPECT_EQ(prims(), (Prims{"convert_element_type", "mul", "convert_element_type"}));
  // A 0-dim float64 tensor does not widen a float16 tensor: torch.add(f16[2], f64[]) -> f16.
  expectTensor(run("add", {input({2}, DType::Float16), input({}, DType::Float64)}), {2},
               DType::Float16);
}

TEST_F(LTorchTest, ScalarsPromoteByCategory) {
  // torch.add(int64 tensor, 2.5) -> float32: the Python float's category wins, at the default
  // float dtype.
  Value out = run("add", {input({2}, DType::Int64), Value(2.5)});
  expectTensor(out, {2}, DType::Float32);
  EXPECT_EQ(prims(), (Prims{"convert_element_type", "add"}));
  // The scalar stays an argument of the prim: no tensor is made for it.
  const BoundSymbol& add = last().subsymbols.back();
  EXPECT_EQ(add.args[1], Value(2.5));
}

TEST_F(LTorchTest, TrueDivisionAndComparisons) {
  // torch.div(int32, int32) -> float32; torch.eq(float16, float32) -> bool.
  expectTensor(run("div", {input({3}, DType::Int32), input({3}, DType::Int32)}), {3},
               DType::Float32);
  expectTensor(run("eq", {input({3}, DType::Float16), input({3})}), {3}, DType::Bool);
  EXPECT_EQ(prims().back(), "eq");
}

TEST_F(LTorchTest, TruncDivisionByANumberOnCudaMultipliesByTheReciprocal) {
  // PyTorch's CUDA kernel computes trunc(a * (1 / b)) in its math type for a number b (on the
  // CPU, trunc(a / b)): 1 / 0.1 in float64, 1.0f / 0.1f for float16 (computed in float32).
  auto cuda = [this](DType d) {
    return testing::addInput(trace_, "c" + std::to_string(trace_.inputs.size()), {4}, d,
                             testing::kCuda0);
  };
  const Kw trunc = {{"rounding_mode", Value(std::string("trunc"))}};
  expectTensor(run("div", {cuda(DType::Float64), 0.1}, trunc), {4}, DType::Float64);
  EXPECT_EQ(prims(), (Prims{"mul", "trunc"}));
  std::function<const BoundSymbol*(const BoundSymbol&)> findMul = [&](const BoundSymbol& b) {
    if (b.sym->isPrim()) return b.sym->name == "mul" ? &b : nullptr;
    for (const BoundSymbol& s : b.subsymbols)
      if (const BoundSymbol* m = findMul(s)) return m;
    return static_cast<const BoundSymbol*>(nullptr);
  };
  const BoundSymbol* mul = findMul(last());
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->args[1], Value(1.0 / 0.1));
  expectTensor(run("div", {cuda(DType::Float16), 0.1}, trunc), {4}, DType::Float16);
  EXPECT_EQ(prims(), (Prims{"convert_element_type", "mul", "trunc", "convert_element_type"}));
  // A tensor divisor, and the CPU: the quotient.
  run("div", {cuda(DType::Float64), cuda(DType::Float64)}, trunc);
  EXPECT_EQ(prims(), (Prims{"div", "trunc"}));
  run("div", {input({4}, DType::Float64), 0.1}, trunc);
  EXPECT_EQ(prims(), (Prims{"div", "trunc"}));
}

TEST_F(LTorchTest, BroadcastErrorNamesTheOp) {
  expectError([&] { run("mul", {input({2, 3}), input({4})}); }, ErrorKind::Runtime,
              "ltorch.mul: shapes (2, 3) and (4,) cannot be broadcast together");
}

struct ReductionCase {
  const char* op;
  Shape in;
  DType inDType;
  std::vector<Value> args;  // after the tensor
  Kw kwargs;
  Shape shape;
  DType dtype;
};

TEST_F(LTorchTest, ReductionsKeepdimAndDtypes) {
  // Each row: torch.<op>(zeros(in), *args, **kwargs) has this shape and dtype.
  const ReductionCase cases[] = {
      {"sum", {2, 3, 4}, DType::Float32, {Value(int64_t{1})}, {{"keepdim", Value(true)}},
       {2, 1, 4}, DType::Float32},
      {"sum", {2, 3, 4}, DType::Float32, {Value::ints({0, -1})}, {}, {3}, DType::Float32},
      {"sum", {2, 3}, DType::Int32, {}, {}, {}, DType::Int64},
      {"sum", {2, 3}, DType::Bool, {Value(int64_t{0})}, {}, {3}, DType::Int64},
      {"sum", {2}, DType::Float16, {}, {}, {}, DType::Float16},
      {"sum", {2, 3}, DType::Float32, {}, {{"keepdim", Value(true)}}, {1, 1}, DType::Float32},
      {"amax", {2, 3, 4}, DType::Float32, {Value::ints({0, 2})}, {{"keepdim", Value(true)}},
       {1, 3, 1}, DType::Float32},
      {"mean", {2, 3, 4}, DType::Float32, {Value(int64_t{-1})}, {{"keepdim", Value(true)}},
       {2, 3, 1}, DType::Float32},
      {"argmax", {2, 3, 4}, DType::Float32, {Value(int64_t{1})}, {{"keepdim", Value(true)}},
       {2, 1, 4}, DType::Int64},
      {"var", {2, 3}, DType::Float32, {Value(int64_t{1})}, {{"keepdim", Value(true)}}, {2, 1},
       DType::Float32},
  };
  for (const auto& c : cases) {
    std::vector<Value> args = {input(c.in, c.inDType)};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Value out = run(c.op, args, c.kwargs);
    SCOPED_TRACE(c.op);
    expectTensor(out, c.shape, c.dtype);
  }
}

TEST_F(LTorchTest, KeepdimReinsertsDimsWithBroadcastInDim) {
  Value out = run("sum", {input({2, 3, 4}), Value(int64_t{1})}, {{"keepdim", Value(true)}});
  expectTensor(out, {2, 1, 4}, DType::Float32);
  EXPECT_EQ(prims(), (Prims{"sum", "broadcast_in_dim"}));
  const BoundSymbol& bid = last().subsymbols.back();
  EXPECT_EQ(bid.args[1].toInts(), (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(bid.args[2].toInts(), (std::vector<int64_t>{0, 2}));
  run("sum", {input({2, 3, 4}), Value(int64_t{1})});
  EXPECT_EQ(prims(), (Prims{"sum"}));
}

struct GetitemCase {
  const char* what;
  Value key;
  Shape shape;
};

TEST_F(LTorchTest, GetitemShapesMatchPyTorch) {
  const Value all = Value::slice(Value(), Value(), Value());
  const Value e = Value::ellipsis();
  auto i = [](int64_t v) { return Value(v); };
  auto sl = [](Value a, Value b, Value c) { return Value::slice(a, b, c); };
  // Each row: torch.zeros(2, 3, 4)[key].shape
  const GetitemCase cases[] = {
      {"x[0]", i(0), {3, 4}},
      {"x[:, 1:3]", Value::tuple({all, sl(i(1), i(3), Value())}), {2, 2, 4}},
      {"x[None, ..., 0]", Value::tuple({Value(), e, i(0)}), {1, 2, 3}},
      {"x[..., None]", Value::tuple({e, Value()}), {2, 3, 4, 1}},
      {"x[-1, ::2]", Value::tuple({i(-1), sl(Value(), Value(), i(2))}), {2, 4}},
      {"x[0, 0, 0]", Value::tuple({i(0), i(0), i(0)}), {}},
      {"x[1:100]", sl(i(1), i(100), Value()), {1, 3, 4}},
      {"x[..., 1, None, 1:]", Value::tuple({e, i(1), Value(), sl(i(1), Value(), Value())}),
       {2, 1, 3}},
      {"x[1, None]", Value::tuple({i(1), Value()}), {1, 3, 4}},
      {"x[..., 0, ...]", Value::tuple({e, i(0), e}), {2, 3}},
  };
  for (const auto& c : cases) {
    Value out = run("getitem", {input({2, 3, 4}), c.key});
    SCOPED_TRACE(c.what);
    expectTensor(out, c.shape, DType::Float32);
  }
}

TEST_F(LTorchTest, GetitemDecomposesIntoSliceAndSqueeze) {
  // x[1] is a slice of length 1 then a squeeze of that dim.
  run("getitem", {input({2, 3}), Value(int64_t{1})});
  EXPECT_EQ(prims(), (Prims{"slice", "squeeze"}));
  const BoundSymbol& s = last().subsymbols[0];
  EXPECT_EQ(s.args[1].toInts(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(s.args[2].toInts(), (std::vector<int64_t>{2, 3}));
  // x[...] is x itself: nothing is recorded.
  size_t before = trace_.bsyms.size();
  Value x = input({2, 3});
  EXPECT_EQ(run("getitem", {x, Value::ellipsis()}), x);
  EXPECT_EQ(trace_.bsyms.size(), before);
}

TEST_F(LTorchTest, GetitemErrors) {
  // torch raises IndexError for the bounds and too many indices, ValueError for a negative step.
  expectError([&] { run("getitem", {input({2, 3, 4}), Value(int64_t{5})}); }, ErrorKind::Index,
              "index 5 is out of bounds for dimension 0 with size 2");
  expectError([&] { run("getitem", {input({2, 3, 4}), Value(int64_t{-3})}); }, ErrorKind::Index,
              "index -3 is out of bounds for dimension 0 with size 2");
  Value four = Value::tuple({Value(int64_t{0}), Value(int64_t{0}), Value(int64_t{0}),
                             Value(int64_t{0})});
  expectError([&] { run("getitem", {input({2, 3, 4}), four}); }, ErrorKind::Index,
              "too many indices for tensor");
  expectError(
      [&] {
        run("getitem",
            {input({2, 3, 4}), Value::slice(Value(), Value(), Value(int64_t{-1}))});
      },
      ErrorKind::Value, "step must be positive");
}

}  // namespace
}  // namespace thunder
