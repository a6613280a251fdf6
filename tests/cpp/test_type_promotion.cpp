// Type promotion against a table of PyTorch's results (torch.promote_types / torch.result_type).
#include <gtest/gtest.h>

#include "ir/trace.h"
#include "ops/prims.h"
#include "ops/type_promotion.h"

using namespace thunder;

namespace {

struct PromoteCase {
  DType a, b, expected;
};

// Each row was read off torch.promote_types.
const PromoteCase kPromote[] = {
    {DType::Bool, DType::Bool, DType::Bool},
    {DType::Bool, DType::UInt8, DType::UInt8},
    {DType::UInt8, DType::Int8, DType::Int16},
    {DType::UInt8, DType::Int16, DType::Int16},
    {DType::Int8, DType::Int32, DType::Int32},
    {DType::Int32, DType::Int64, DType::Int64},
    {DType::Int64, DType::Float16, DType::Float16},
    {DType::Int64, DType::BFloat16, DType::BFloat16},
    {DType::BFloat16, DType::Float16, DType::Float32},
    {DType::Float16, DType::Float32, DType::Float32},
    {DType::Float32, DType::Float64, DType::Float64},
    {DType::Float64, DType::Complex64, DType::Complex128},
    {DType::Float32, DType::Complex64, DType::Complex64},
    {DType::Float16, DType::Complex64, DType::Complex64},
    {DType::Complex64, DType::Complex128, DType::Complex128},
    {DType::Bool, DType::Complex64, DType::Complex64},
    {DType::UInt8, DType::Float64, DType::Float64},
};

TEST(TypePromotion, PromoteTypesMatchesPyTorch) {
  for (const auto& c : kPromote) {
    EXPECT_EQ(promoteTypes(c.a, c.b), c.expected) << dtypeName(c.a) << " + " << dtypeName(c.b);
    EXPECT_EQ(promoteTypes(c.b, c.a), c.expected) << dtypeName(c.b) << " + " << dtypeName(c.a);
  }
}

Value tensor(DType d, Shape shape) {
  auto t = std::make_shared<TensorProxy>();
  t->name = "x";
  t->shape = std::move(shape);
  t->dtype = d;
  return Value(t);
}

struct ResultCase {
  std::vector<Value> args;
  DType expected;
  const char* what;
};

TEST(TypePromotion, ResultTypeMatchesPyTorch) {
  // Each row was read off torch.result_type with the same arguments.
  const ResultCase cases[] = {
      {{tensor(DType::Int32, {2}), Value(2.5)}, DType::Float32, "int tensor + float scalar"},
      {{tensor(DType::Float16, {2}), Value(2.5)}, DType::Float16, "half tensor + float scalar"},
      {{tensor(DType::UInt8, {2}), Value(int64_t{300})}, DType::UInt8, "uint8 tensor + int scalar"},
      {{tensor(DType::Int32, {2}), tensor(DType::Int64, {})}, DType::Int32, "dim tensor beats 0-dim"},
      {{tensor(DType::Int32, {2}), tensor(DType::Float64, {})}, DType::Float64, "0-dim float beats int"},
      {{tensor(DType::Float16, {2}), tensor(DType::Float64, {})}, DType::Float16, "same category"},
      {{tensor(DType::Bool, {2}), Value(true)}, DType::Bool, "bool + bool"},
      {{tensor(DType::Bool, {2}), Value(int64_t{1})}, DType::Int64, "bool tensor + int"},
      {{tensor(DType::Float32, {2}), Value(std::complex<double>(1, 1))}, DType::Complex64, "float + complex"},
      {{tensor(DType::Float64, {2}), Value(std::complex<double>(1, 1))}, DType::Complex128, "double + complex"},
      {{Value(int64_t{1}), tensor(DType::BFloat16, {3})}, DType::BFloat16, "int + bf16"},
  };
  for (const auto& c : cases) EXPECT_EQ(resultType(c.args), c.expected) << c.what;
}

TEST(TypePromotion, ComputationDTypes) {
  auto [comp, res] = elementwiseTypePromotion({tensor(DType::BFloat16, {2})}, PromotionKind::IntToFloat);
  EXPECT_EQ(comp, DType::Float32);
  EXPECT_EQ(res, DType::BFloat16);
  std::tie(comp, res) = elementwiseTypePromotion({tensor(DType::Int32, {2})}, PromotionKind::IntToFloat);
  EXPECT_EQ(res, DType::Float32);
  std::tie(comp, res) = elementwiseTypePromotion({tensor(DType::Float16, {2}), Value(1.0)}, PromotionKind::AlwaysBool);
  EXPECT_EQ(res, DType::Bool);
  EXPECT_EQ(comp, DType::Float32);
  std::tie(comp, res) = elementwiseTypePromotion({tensor(DType::Complex64, {2})}, PromotionKind::ComplexToFloat);
  EXPECT_EQ(res, DType::Float32);
  EXPECT_EQ(comp, DType::Complex64);
}

}  // namespace
