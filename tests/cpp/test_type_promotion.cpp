// Type promotion against a table of PyTorch's results (torch.promote_types / torch.result_type).
#include <gtest/gtest.h>

#include "ir/error.h"
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

// ---- full tables, generated from torch 2.13 --------------------------------------------------------

constexpr DType b8 = DType::Bool, u8 = DType::UInt8, i8 = DType::Int8, i16 = DType::Int16,
                i32 = DType::Int32, i64 = DType::Int64, bf16 = DType::BFloat16,
                f16 = DType::Float16, f32 = DType::Float32, f64 = DType::Float64,
                c64 = DType::Complex64, c128 = DType::Complex128;
// PyTorch answers complex32 (ComplexHalf) where float16 meets a complex value; thunder has no
// complex32 dtype, so those cells are skipped.
constexpr DType c32 = static_cast<DType>(255);

// Rows and columns follow dtypes.def: b8 u8 i8 i16 i32 i64 bf16 f16 f32 f64 c64 c128; the float8
// dtypes after them promote with nothing (TypePromotion.Float8PromotesWithNothing).
constexpr int kPromoting = 12;
const DType kAll[kPromoting] = {b8, u8, i8, i16, i32, i64, bf16, f16, f32, f64, c64, c128};

// torch.promote_types(row, column).
const DType kPromoteTable[kPromoting][kPromoting] = {
    {b8, u8, i8, i16, i32, i64, bf16, f16, f32, f64, c64, c128},
    {u8, u8, i16, i16, i32, i64, bf16, f16, f32, f64, c64, c128},
    {i8, i16, i8, i16, i32, i64, bf16, f16, f32, f64, c64, c128},
    {i16, i16, i16, i16, i32, i64, bf16, f16, f32, f64, c64, c128},
    {i32, i32, i32, i32, i32, i64, bf16, f16, f32, f64, c64, c128},
    {i64, i64, i64, i64, i64, i64, bf16, f16, f32, f64, c64, c128},
    {bf16, bf16, bf16, bf16, bf16, bf16, bf16, f32, f32, f64, c64, c128},
    {f16, f16, f16, f16, f16, f16, f32, f16, f32, f64, c64, c128},
    {f32, f32, f32, f32, f32, f32, f32, f32, f32, f64, c64, c128},
    {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, c128, c128},
    {c64, c64, c64, c64, c64, c64, c64, c64, c64, c128, c64, c128},
    {c128, c128, c128, c128, c128, c128, c128, c128, c128, c128, c128, c128},
};

// torch.result_type(zeros(2, dtype=row), zeros((), dtype=column)).
const DType kDimVsZeroDimTable[kPromoting][kPromoting] = {
    {b8, u8, i8, i16, i32, i64, bf16, f16, f32, f64, c64, c128},
    {u8, u8, u8, u8, u8, u8, bf16, f16, f32, f64, c64, c128},
    {i8, i8, i8, i8, i8, i8, bf16, f16, f32, f64, c64, c128},
    {i16, i16, i16, i16, i16, i16, bf16, f16, f32, f64, c64, c128},
    {i32, i32, i32, i32, i32, i32, bf16, f16, f32, f64, c64, c128},
    {i64, i64, i64, i64, i64, i64, bf16, f16, f32, f64, c64, c128},
    {bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16, c64, c64},
    {f16, f16, f16, f16, f16, f16, f16, f16, f16, f16, c32, c32},
    {f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, c64, c64},
    {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, c128, c128},
    {c64, c64, c64, c64, c64, c64, c64, c64, c64, c64, c64, c64},
    {c128, c128, c128, c128, c128, c128, c128, c128, c128, c128, c128, c128},
};

// torch.result_type(tensor of dtype row, Python scalar) for True, 2, 2.5 and 1+1j; the same table
// holds for a dimensioned and for a 0-dim tensor.
const DType kScalarTable[kPromoting][4] = {
    {b8, i64, f32, c64},   {u8, u8, f32, c64},     {i8, i8, f32, c64},   {i16, i16, f32, c64},
    {i32, i32, f32, c64},  {i64, i64, f32, c64},   {bf16, bf16, bf16, c64}, {f16, f16, f16, c32},
    {f32, f32, f32, c64},  {f64, f64, f64, c128},  {c64, c64, c64, c64}, {c128, c128, c128, c128},
};

TEST(TypePromotion, PromoteTypesFullTable) {
  for (int r = 0; r < kPromoting; ++r)
    for (int c = 0; c < kPromoting; ++c)
      EXPECT_EQ(promoteTypes(kAll[r], kAll[c]), kPromoteTable[r][c])
          << dtypeName(kAll[r]) << " + " << dtypeName(kAll[c]);
}

TEST(TypePromotion, ResultTypeDimVsZeroDimFullTable) {
  int checked = 0;
  for (int r = 0; r < kPromoting; ++r) {
    for (int c = 0; c < kPromoting; ++c) {
      if (kDimVsZeroDimTable[r][c] == c32) continue;
      Value dim = tensor(kAll[r], {2}), zero = tensor(kAll[c], {});
      EXPECT_EQ(resultType({dim, zero}), kDimVsZeroDimTable[r][c])
          << dtypeName(kAll[r]) << "[2] + " << dtypeName(kAll[c]) << "[]";
      EXPECT_EQ(resultType({zero, dim}), kDimVsZeroDimTable[r][c])
          << dtypeName(kAll[c]) << "[] + " << dtypeName(kAll[r]) << "[2]";
      // Two 0-dim tensors (and two dimensioned ones) promote like promote_types.
      EXPECT_EQ(resultType({tensor(kAll[r], {}), zero}), kPromoteTable[r][c]);
      ++checked;
    }
  }
  EXPECT_EQ(checked, kPromoting * kPromoting - 2);
}

TEST(TypePromotion, ResultTypeWithScalarsFullTable) {
  const Value scalars[4] = {Value(true), Value(int64_t{2}), Value(2.5),
                            Value(std::complex<double>(1, 1))};
  for (int r = 0; r < kPromoting; ++r) {
    for (int s = 0; s < 4; ++s) {
      if (kScalarTable[r][s] == c32) continue;
      for (const Shape& shape : {Shape{2}, Shape{}}) {
        EXPECT_EQ(resultType({tensor(kAll[r], shape), scalars[s]}), kScalarTable[r][s])
            << dtypeName(kAll[r]) << " (ndim " << shape.size() << ") + " << describe(scalars[s]);
        EXPECT_EQ(resultType({scalars[s], tensor(kAll[r], shape)}), kScalarTable[r][s]);
      }
    }
  }
}

TEST(TypePromotion, Float8PromotesWithNothing) {
  for (DType f8 : {DType::Float8E4M3FN, DType::Float8E5M2}) {
    EXPECT_EQ(promoteTypes(f8, f8), f8);
    EXPECT_EQ(resultType({tensor(f8, {2}), Value(2.5)}), f8);
    for (int i = 0; i < kNumDTypes; ++i) {
      DType other = static_cast<DType>(i);
      if (other == f8) continue;
      for (auto [a, b] : {std::pair{f8, other}, std::pair{other, f8}}) {
        try {
          promoteTypes(a, b);
          ADD_FAILURE() << dtypeName(a) << " + " << dtypeName(b) << ": expected an error";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Runtime);
          EXPECT_NE(std::string(e.what()).find("promotion of float8 dtypes is not supported"),
                    std::string::npos);
        }
      }
    }
  }
}

TEST(TypePromotion, NoArgumentsIsATypeError) {
  try {
    resultType({Value("a")});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Type);
    EXPECT_NE(std::string(e.what()).find("type promotion needs at least one tensor or number"),
              std::string::npos);
  }
}

}  // namespace
