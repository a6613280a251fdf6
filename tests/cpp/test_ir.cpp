// The IR's small pieces: dtypes against torch's, devices against torch.device, Values, names.
#include <gtest/gtest.h>

#include <string>

#include "ir/device.h"
#include "ir/dtype.h"
#include "test_util.h"

namespace thunder {
namespace {

using testing::expectError;

struct DTypeFact {
  DType dtype;
  const char* torchName;  // str(torch.<name>) without "torch."
  int itemSize;           // torch.<name>.itemsize
  bool isFloatingPoint;   // torch.<name>.is_floating_point
  bool isComplex;         // torch.<name>.is_complex
};

TEST(IR, DTypesMatchTorch) {
  const DTypeFact facts[] = {
      {DType::Bool, "bool", 1, false, false},         {DType::UInt8, "uint8", 1, false, false},
      {DType::Int8, "int8", 1, false, false},         {DType::Int16, "int16", 2, false, false},
      {DType::Int32, "int32", 4, false, false},       {DType::Int64, "int64", 8, false, false},
      {DType::BFloat16, "bfloat16", 2, true, false},  {DType::Float16, "float16", 2, true, false},
      {DType::Float32, "float32", 4, true, false},    {DType::Float64, "float64", 8, true, false},
      {DType::Complex64, "complex64", 8, false, true}, {DType::Complex128, "complex128", 16, false, true},
      {DType::Float8E4M3FN, "float8_e4m3fn", 1, true, false},
      {DType::Float8E5M2, "float8_e5m2", 1, true, false},
  };
  ASSERT_EQ(static_cast<int>(std::size(facts)), kNumDTypes);
  for (const auto& f : facts) {
    EXPECT_EQ(dtypeTorchName(f.dtype), f.torchName);
    EXPECT_EQ(dtypeItemSize(f.dtype), f.itemSize) << f.torchName;
    EXPECT_EQ(isFloating(f.dtype), f.isFloatingPoint) << f.torchName;
    EXPECT_EQ(isComplex(f.dtype), f.isComplex) << f.torchName;
    EXPECT_EQ(dtypeFromName(f.torchName), f.dtype) << f.torchName;
    EXPECT_EQ(dtypeFromName(dtypeName(f.dtype)), f.dtype) << f.torchName;
  }
  EXPECT_EQ(dtypeFromName("float"), std::nullopt);
  EXPECT_EQ(complexToReal(DType::Complex128), DType::Float64);
  EXPECT_EQ(realToComplex(DType::Float32), DType::Complex64);
  EXPECT_EQ(realToComplex(DType::Float64), DType::Complex128);
}

TEST(IR, DeviceParseMatchesTorchDevice) {
  // str(torch.device(s)) for the valid strings.
  const std::pair<const char*, const char*> valid[] = {
      {"cpu", "cpu"}, {"cuda", "cuda:0"}, {"cuda:0", "cuda:0"}, {"cuda:3", "cuda:3"}, {"meta", "meta"}};
  for (const auto& [in, out] : valid) EXPECT_EQ(Device::parse(in).str(), out) << in;
  // torch.device raises for each of these.
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1abc", "cpu:0x", ""}) {
    expectError([&] { Device::parse(bad); }, ErrorKind::Value,
                std::string("unknown device string '") + bad + "'", bad);
  }
}

TEST(IR, TensorTypeString) {
  Value t = testing::tensor({2048, 50257}, DType::Float32, testing::kCuda0);
  EXPECT_EQ(t.tensor().typeString(), "cuda:0 f32[2048, 50257]");
  EXPECT_EQ(testing::tensor({}, DType::Int64).tensor().typeString(), "cpu i64[]");
  EXPECT_EQ(testing::tensor({0, 3}).tensor().numel(), 0);
}

TEST(IR, ValueAccessorsRejectOtherKinds) {
  expectError([] { Value(1.5).toInt(); }, ErrorKind::Type, "expected an int but got float 1.5");
  // Floats are described by their shortest round-trip text.
  auto err = testing::errorOf([] { Value(0.1).toInt(); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->second, "expected an int but got float 0.1");
  expectError([] { Value("cpu").toDType(); }, ErrorKind::Type, "expected a dtype but got 'cpu'");
  expectError([] { Value().toTensor(); }, ErrorKind::Type, "expected a tensor but got None");
  expectError([] { Value(int64_t{1}).items(); }, ErrorKind::Type, "expected a sequence");
  EXPECT_EQ(Value(true).toInt(), 1);
  EXPECT_EQ(Value(int64_t{3}).toDouble(), 3.0);
  EXPECT_EQ(Value("cuda:1").toDevice().str(), "cuda:1");
  EXPECT_EQ(Value::ints({1, 2}).toInts(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Value(int64_t{4}).toInts(), (std::vector<int64_t>{4}));
}

TEST(IR, ValueEquality) {
  Value a = testing::tensor({2}), b = testing::tensor({2});
  EXPECT_EQ(a, a);
  EXPECT_FALSE(a == b);  // tensors compare by identity
  EXPECT_EQ(Value::ints({1, 2}), Value::ints({1, 2}));
  EXPECT_FALSE(Value::ints({1, 2}) == Value::list({Value(int64_t{1}), Value(int64_t{2})}));
  EXPECT_FALSE(Value(int64_t{1}) == Value(1.0));
  EXPECT_FALSE(Value::dict({"a"}, {Value(int64_t{1})}) == Value::dict({"b"}, {Value(int64_t{1})}));
  EXPECT_EQ(Value::ellipsis(), Value::ellipsis());
}

TEST(IR, TraceNamesAreFresh) {
  Trace t;
  t.reserveName("t0");
  EXPECT_EQ(t.newName(), "t1");
  EXPECT_EQ(t.newName(), "t2");
  testing::expectInternalError([&] { t.reserveName("t1"); }, "name 't1' is already in use");
}

}  // namespace
}  // namespace thunder
