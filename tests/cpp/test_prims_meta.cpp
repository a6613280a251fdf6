// Meta functions of every prim: output shape, dtype and device for valid inputs, and each error
// check with its ErrorKind and message. The elementwise prims are iterated from prims.def; every
// other prim needs rows in kValid and kErrors, which PrimTablesCoverEveryPrim enforces.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ops/prims.h"
#include "test_util.h"

namespace thunder {
namespace {

using testing::expectError;
using testing::kCpu;
using testing::kCuda0;
using testing::kCuda1;
using testing::tensor;
using Kw = std::vector<std::pair<std::string, Value>>;

const DType kAllDTypes[] = {
#define X(E, N, S, T, SZ, K) DType::E,
#include "ir/dtypes.def"
#undef X
};

/// Runs a prim by name on Python-style arguments inside a scratch trace; returns its output.
Value runPrim(const std::string& name, std::vector<Value> args, const Kw& kwargs = {}) {
  prims::registerPrims();
  const Symbol& sym = SymbolRegistry::get().at("prims." + name);
  Trace t;
  TracingScope scope(t);
  return call(sym, sym.bind(std::move(args), kwargs));
}

// ---- elementwise prims, iterated from prims.def -------------------------------------------------

struct ElementwisePrim {
  const char* name;
  const char* kinds;  // accepted dtype kinds, "BIFC"
  const char* rule;   // Same, Bool or Real
  int arity;
};

const ElementwisePrim kElementwise[] = {
#define UNARY(n, k, o) {#n, #k, #o, 1},
#define BINARY(n, k, o) {#n, #k, #o, 2},
#define PRIM(n, s, t)
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM
};

bool accepts(const ElementwisePrim& p, DType d) {
  char k = "BIFC"[static_cast<int>(dtypeKind(d))];
  return std::string(p.kinds).find(k) != std::string::npos;
}

DType expectedOut(const ElementwisePrim& p, DType in) {
  std::string r = p.rule;
  if (r == "Bool") return DType::Bool;
  if (r == "Real") return in == DType::Complex64 ? DType::Float32
                          : in == DType::Complex128 ? DType::Float64
                                                    : in;
  return in;
}

/// A dtype the prim accepts, preferring float32.
DType someAccepted(const ElementwisePrim& p) {
  for (DType d : {DType::Float32, DType::Int32, DType::Complex64, DType::Bool})
    if (accepts(p, d)) return d;
  return DType::Float32;
}

/// A Python number of dtype d's category.
Value numberOf(DType d) {
  switch (dtypeKind(d)) {
    case DTypeKind::Bool: return Value(true);
    case DTypeKind::Integer: return Value(int64_t{2});
    case DTypeKind::Float: return Value(2.0);
    case DTypeKind::Complex: return Value(std::complex<double>(1, 2));
  }
  return Value();
}

std::vector<Value> sameArgs(const ElementwisePrim& p, const Value& t) {
  return p.arity == 1 ? std::vector<Value>{t} : std::vector<Value>{t, t};
}

TEST(PrimsMeta, ElementwiseEveryDType) {
  prims::registerPrims();
  for (const ElementwisePrim& p : kElementwise) {
    for (DType d : kAllDTypes) {
      Value a = tensor({2, 0, 3}, d, kCuda1);
      std::string what = std::string(p.name) + " on " + std::string(dtypeName(d));
      if (accepts(p, d)) {
        Value out = runPrim(p.name, sameArgs(p, a));
        ASSERT_TRUE(out.isTensor()) << what;
        EXPECT_EQ(out.tensor().shape, (Shape{2, 0, 3})) << what;
        EXPECT_EQ(out.tensor().dtype, expectedOut(p, d)) << what;
        EXPECT_EQ(out.tensor().device, kCuda1) << what;
      } else {
        expectError([&] { runPrim(p.name, sameArgs(p, a)); }, ErrorKind::NotImplemented,
                    "prims." + std::string(p.name) + ": argument 'a' has dtype " +
                        std::string(dtypeName(d)) + ", which this prim does not support",
                    what);
      }
    }
  }
}

TEST(PrimsMeta, ElementwiseZeroDimAndScalars) {
  prims::registerPrims();
  for (const ElementwisePrim& p : kElementwise) {
    DType d = someAccepted(p);
    Value a = tensor({}, d);
    Value out = runPrim(p.name, sameArgs(p, a));
    EXPECT_EQ(out.tensor().shape, Shape{}) << p.name;
    if (p.arity != 2) continue;
    // A tensor and a Python number of an accepted kind: the tensor decides the output.
    Value num = numberOf(d);
    Value t = tensor({4}, d, kCuda0);
    for (auto args : {std::vector<Value>{t, num}, std::vector<Value>{num, t}}) {
      Value o = runPrim(p.name, args);
      EXPECT_EQ(o.tensor().shape, Shape{4}) << p.name;
      EXPECT_EQ(o.tensor().dtype, expectedOut(p, d)) << p.name;
      EXPECT_EQ(o.tensor().device, kCuda0) << p.name;
    }
  }
}

TEST(PrimsMeta, ElementwiseErrors) {
  prims::registerPrims();
  for (const ElementwisePrim& p : kElementwise) {
    const std::string op = "prims." + std::string(p.name);
    DType d = someAccepted(p);
    DType other = d == DType::Float32 ? DType::Float64 : d == DType::Int32 ? DType::Int64
                                                                          : DType::Complex128;
    if (p.arity == 1) {
      expectError([&] { runPrim(p.name, {numberOf(d)}); }, ErrorKind::Type,
                  op + ": expected argument 'a' to be a tensor, but got ", op);
      continue;
    }
    Value num = numberOf(d);
    expectError([&] { runPrim(p.name, {num, num}); }, ErrorKind::Type,
                op + ": expected at least one tensor argument", op);
    expectError([&] { runPrim(p.name, {tensor({2}, d), Value("s")}); }, ErrorKind::Type,
                op + ": expected argument 'b' to be a tensor or a number, but got 's'", op);
    expectError([&] { runPrim(p.name, {Value(), tensor({2}, d)}); }, ErrorKind::Type,
                op + ": expected argument 'a' to be a tensor or a number, but got None", op);
    // No broadcasting and no type promotion at the prim level.
    expectError([&] { runPrim(p.name, {tensor({2, 3}, d), tensor({3}, d)}); }, ErrorKind::Runtime,
                op + ": expected tensors of the same shape, but a is (2, 3) and b is (3,)", op);
    expectError([&] { runPrim(p.name, {tensor({3}, d), tensor({3}, other)}); }, ErrorKind::Type,
                op + ": expected tensors of the same dtype, but a is " + std::string(dtypeName(d)) +
                    " and b is " + std::string(dtypeName(other)),
                op);
    expectError(
        [&] {
          runPrim(p.name, {tensor({3}, d, kCpu, "u"), tensor({3}, d, kCuda0, "v")});
        },
        ErrorKind::Runtime, op + ": expected all tensors on one device, but found u on cpu and v on cuda:0",
        op);
  }
}

TEST(PrimsMeta, ElementwiseNumberKindIsChecked) {
  // bitwise_and accepts bool and integer operands; a Python float is neither.
  expectError([] { runPrim("bitwise_and", {tensor({2}, DType::Int32), Value(1.5)}); },
              ErrorKind::NotImplemented, "prims.bitwise_and: argument 'b' has dtype float64");
}

TEST(PrimsMeta, ElementwiseCpuScalarTensorMixesWithOtherDevices) {
  // As PyTorch: a 0-dim CPU tensor may meet a tensor on another device, and the result lives
  // there (torch.add(torch.tensor(1.), torch.tensor(2., device='meta')).device == meta).
  for (bool cpuFirst : {true, false}) {
    Value cpu = tensor({}, DType::Float32, kCpu), cuda = tensor({}, DType::Float32, kCuda1);
    Value out = cpuFirst ? runPrim("add", {cpu, cuda}) : runPrim("add", {cuda, cpu});
    EXPECT_EQ(out.tensor().device, kCuda1) << (cpuFirst ? "cpu first" : "cuda first");
  }
}

// PyTorch's output dtypes for the torch analogs of a few elementwise prims (read off torch).
struct TorchDTypeFact {
  const char* prim;
  DType in, out;
};

TEST(PrimsMeta, ElementwiseOutputDTypesMatchPyTorch) {
  const TorchDTypeFact facts[] = {
      {"abs", DType::Complex64, DType::Float32},      // torch.abs(c64) -> float32
      {"abs", DType::Complex128, DType::Float64},     // torch.abs(c128) -> float64
      {"abs", DType::Int16, DType::Int16},            // torch.abs(i16) -> int16
      {"real", DType::Complex128, DType::Float64},    // torch.real(c128) -> float64
      {"imag", DType::Complex64, DType::Float32},     // torch.imag(c64) -> float32
      {"isfinite", DType::BFloat16, DType::Bool},     // torch.isfinite -> bool
      {"signbit", DType::Int32, DType::Bool},         // torch.signbit -> bool
      {"eq", DType::Complex64, DType::Bool},          // torch.eq -> bool
      {"logical_and", DType::Float16, DType::Bool},   // torch.logical_and -> bool
      {"maximum", DType::Bool, DType::Bool},          // torch.maximum(bool, bool) -> bool
      {"bitwise_xor", DType::UInt8, DType::UInt8},    // torch.bitwise_xor(u8, u8) -> uint8
  };
  prims::registerPrims();
  for (const auto& f : facts) {
    const Symbol& sym = SymbolRegistry::get().at(std::string("prims.") + f.prim);
    Value a = tensor({3}, f.in);
    std::vector<Value> args(sym.params.size(), a);
    EXPECT_EQ(runPrim(f.prim, args).tensor().dtype, f.out) << f.prim;
  }
}

// ---- every other prim: tables of valid calls and of error checks ------------------------------

struct ValidCase {
  const char* prim;
  std::function<std::vector<Value>()> args;
  Kw kwargs;
  Shape shape;
  DType dtype;
  Device device = kCpu;
};

Value i64(int64_t v) { return Value(v); }
Value ints(std::vector<int64_t> xs) { return Value::ints(xs); }
Value f32(Shape s, Device d = kCpu) { return tensor(std::move(s), DType::Float32, d); }
Value idx(Shape s, Device d = kCpu) { return tensor(std::move(s), DType::Int64, d); }
Value pads(std::vector<std::array<int64_t, 3>> cfg) {
  std::vector<Value> items;
  for (auto& c : cfg) items.push_back(ints({c[0], c[1], c[2]}));
  return Value::list(items);
}
Kw devDtype(Device d, DType t) { return {{"device", d}, {"dtype", t}}; }

#define ARGS(...) [] { return std::vector<Value>{__VA_ARGS__}; }

// Expected shapes follow PyTorch's analog of each prim (torch.where, torch.full, torch.arange,
// Tensor.expand, reshape, x[a:b:c], squeeze, permute, flip, cat, index_select, gather,
// scatter_add, sum/amax/var/argmax, matmul, linear, embedding); pad follows lax.pad
// (low + n + (n - 1) * interior + high).
const std::vector<ValidCase>& validCases() {
  static const std::vector<ValidCase> cases = {
      {"where", ARGS(tensor({2, 3}, DType::Bool), f32({2, 3}), f32({2, 3})), {}, {2, 3},
       DType::Float32},
      {"where", ARGS(Value(true), tensor({4}, DType::Int32, kCuda0), Value(int64_t{1})), {}, {4},
       DType::Int32, kCuda0},
      {"where", ARGS(tensor({}, DType::Bool), Value(1.0), f32({}, kCuda1)), {}, {}, DType::Float32,
       kCuda1},
      {"convert_element_type", ARGS(f32({2, 3}, kCuda0), DType::BFloat16), {}, {2, 3},
       DType::BFloat16, kCuda0},
      {"convert_element_types", ARGS(Value::list({f32({2, 3}, kCuda0), f32({4}, kCuda0), f32({}, kCuda0)}), DType::BFloat16),
       {}, {2, 3}, DType::BFloat16, kCuda0},
      {"convert_element_types", ARGS(Value::list({tensor({0, 5}, DType::BFloat16)}), DType::Float32), {}, {0, 5},
       DType::Float32},
      {"polygamma", ARGS(i64(2), f32({2, 3}, kCuda0)), {}, {2, 3}, DType::Float32, kCuda0},
      {"polygamma", ARGS(i64(0), tensor({0, 4}, DType::BFloat16)), {}, {0, 4}, DType::BFloat16},
      {"device_put", ARGS(f32({2, 3}), kCuda0), {}, {2, 3}, DType::Float32, kCuda0},
      {"device_put", ARGS(tensor({0, 4}, DType::Int64, kCuda1), kCpu), {}, {0, 4}, DType::Int64},
      {"full", ARGS(ints({2, 3}), Value(1.0)), devDtype(kCuda1, DType::BFloat16), {2, 3},
       DType::BFloat16, kCuda1},
      {"full", ARGS(ints({}), Value(int64_t{7})), devDtype(kCpu, DType::Int64), {}, DType::Int64},
      {"iota", ARGS(i64(5)), {{"start", i64(0)}, {"step", i64(1)}, {"device", kCpu}, {"dtype", DType::Int64}},
       {5}, DType::Int64},
      {"iota", ARGS(i64(0)), {{"start", i64(3)}, {"step", i64(-1)}, {"device", kCuda0}, {"dtype", DType::Float32}},
       {0}, DType::Float32, kCuda0},
      {"uniform", ARGS(ints({3, 1}), Value(0.0), Value(1.0)), devDtype(kCpu, DType::Float16),
       {3, 1}, DType::Float16},
      {"broadcast_in_dim", ARGS(f32({3}), ints({2, 3}), ints({1})), {}, {2, 3}, DType::Float32},
      {"broadcast_in_dim", ARGS(f32({1, 3}), ints({4, 2, 3}), ints({1, 2})), {}, {4, 2, 3},
       DType::Float32},
      {"broadcast_in_dim", ARGS(f32({}), ints({2, 2}), ints({})), {}, {2, 2}, DType::Float32},
      {"reshape", ARGS(f32({2, 3}), ints({3, 2})), {}, {3, 2}, DType::Float32},
      {"reshape", ARGS(f32({2, 3}), ints({6})), {}, {6}, DType::Float32},
      {"reshape", ARGS(f32({0, 3}), ints({0, 5})), {}, {0, 5}, DType::Float32},
      {"reshape", ARGS(f32({1, 1}), ints({})), {}, {}, DType::Float32},
      // x[1:5:2, :] of a (5, 4) tensor has rows 1 and 3; x[0:5:2] of (5,) has 0, 2, 4.
      {"slice", ARGS(f32({5, 4}), ints({1, 0}), ints({5, 4}), ints({2, 1})), {}, {2, 4},
       DType::Float32},
      {"slice", ARGS(f32({5}), ints({0}), ints({5}), ints({2})), {}, {3}, DType::Float32},
      {"slice", ARGS(f32({5, 4}), ints({2, 1}), ints({2, 3})), {}, {0, 2}, DType::Float32},
      {"squeeze", ARGS(f32({1, 3, 1}), ints({0, 2})), {}, {3}, DType::Float32},
      {"squeeze", ARGS(f32({1, 3, 1}), ints({-1})), {}, {1, 3}, DType::Float32},
      {"transpose", ARGS(f32({2, 3, 4}), ints({2, 0, 1})), {}, {4, 2, 3}, DType::Float32},
      {"flip", ARGS(f32({2, 3}), ints({0, -1})), {}, {2, 3}, DType::Float32},
      {"stride_order", ARGS(f32({2, 3}), ints({1, 0})), {}, {2, 3}, DType::Float32},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({4, 3})}), i64(0)), {}, {6, 3}, DType::Float32},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({2, 5}), f32({2, 0})}), i64(-1)), {}, {2, 8},
       DType::Float32},
      {"pad", ARGS(f32({3}), Value(0.0), pads({{1, 2, 1}})), {}, {8}, DType::Float32},
      {"pad", ARGS(f32({2, 3}), Value(0.0), pads({{0, 0, 0}, {-1, 0, 0}})), {}, {2, 2},
       DType::Float32},
      {"pad", ARGS(f32({0}), Value(0.0), pads({{1, 1, 5}})), {}, {2}, DType::Float32},
      {"take", ARGS(f32({5, 3}), idx({4}), i64(0)), {}, {4, 3}, DType::Float32},
      {"take", ARGS(f32({5, 3}), idx({2}), i64(-1)), {}, {5, 2}, DType::Float32},
      {"take", ARGS(f32({5, 3}), idx({}), i64(0)), {}, {1, 3}, DType::Float32},
      {"gather", ARGS(f32({3, 4}), idx({2, 4}), i64(0)), {}, {2, 4}, DType::Float32},
      {"gather", ARGS(f32({3, 4}), idx({3, 7}), i64(1)), {}, {3, 7}, DType::Float32},
      {"scatter_add", ARGS(f32({3, 4}), idx({2, 4}), f32({2, 4}), i64(0)), {}, {3, 4},
       DType::Float32},
      {"scatter_add", ARGS(f32({3, 4}), idx({4, 4}), f32({4, 4}), i64(0)), {}, {3, 4},
       DType::Float32},
      {"sum", ARGS(f32({2, 3, 4}), ints({0, 2})), {}, {3}, DType::Float32},
      {"sum", ARGS(tensor({2, 3}, DType::Int32), ints({})), {}, {2, 3}, DType::Int32},
      {"sum", ARGS(f32({}), ints({0})), {}, {}, DType::Float32},
      {"prod", ARGS(f32({2, 3}, kCuda0), ints({-1})), {}, {2}, DType::Float32, kCuda0},
      {"amax", ARGS(f32({2, 0}), ints({0})), {}, {0}, DType::Float32},
      {"amin", ARGS(tensor({2, 3}, DType::Bool), ints({0, 1})), {}, {}, DType::Bool},
      {"var", ARGS(f32({2, 3}), ints({1})), {{"correction", Value(1.0)}}, {2}, DType::Float32},
      {"var", ARGS(tensor({2, 3}, DType::Complex64), ints({0, 1})), {{"correction", Value(0.0)}},
       {}, DType::Float32},
      {"argmax", ARGS(f32({2, 3}), i64(1)), {}, {2}, DType::Int64},
      {"argmax", ARGS(tensor({2, 3}, DType::Float16), Value()), {}, {}, DType::Int64},
      {"argmin", ARGS(tensor({2, 3}, DType::Int8, kCuda0), i64(0)), {}, {3}, DType::Int64, kCuda0},
      {"matmul", ARGS(f32({2, 3}), f32({3, 4})), {}, {2, 4}, DType::Float32},
      {"matmul", ARGS(f32({3}), f32({3})), {}, {}, DType::Float32},
      {"matmul", ARGS(f32({3}), f32({3, 4})), {}, {4}, DType::Float32},
      {"matmul", ARGS(f32({2, 3}), f32({3})), {}, {2}, DType::Float32},
      {"matmul", ARGS(f32({5, 1, 2, 3}), f32({4, 3, 6})), {}, {5, 4, 2, 6}, DType::Float32},
      {"matmul", ARGS(f32({7, 2, 3}), f32({3})), {}, {7, 2}, DType::Float32},
      {"linear", ARGS(f32({5, 3}), f32({4, 3}), f32({4})), {}, {5, 4}, DType::Float32},
      {"linear", ARGS(f32({2, 5, 3}), f32({4, 3}), Value()), {}, {2, 5, 4}, DType::Float32},
      {"linear", ARGS(f32({5, 3}), f32({3}), f32({})), {}, {5}, DType::Float32},
      {"embedding", ARGS(idx({2, 3}), f32({10, 4})), {}, {2, 3, 4}, DType::Float32},
      {"embedding", ARGS(tensor({}, DType::Int32), f32({10, 4}, kCuda0)),
       {{"padding_idx", i64(0)}}, {4}, DType::Float32, kCuda0},
      {"embedding_backward", ARGS(f32({2, 3, 4}), idx({2, 3}), i64(10)), {}, {10, 4}, DType::Float32},
      {"embedding_backward", ARGS(tensor({5, 8}, DType::BFloat16, kCuda0), tensor({5}, DType::Int32, kCuda0),
                                  i64(7), i64(0)), {}, {7, 8}, DType::BFloat16, kCuda0},
      // ---- nn ops (tuple outputs: the first item is checked) ----
      // torch.nn.functional.conv2d(x[2, 4, 7, 6], w[6, 2, 3, 3], stride=(2, 1), padding=1, groups=2)
      {"convolution", ARGS(f32({2, 4, 7, 6}), f32({6, 2, 3, 3}), f32({6}), ints({2, 1}), ints({1, 1}),
                           ints({1, 1}), Value(false), ints({0, 0}), i64(2)), {}, {2, 6, 4, 6}, DType::Float32},
      // conv_transpose1d(x[1, 4, 5], w[4, 3, 3], stride=2, output_padding=1, dilation=2)
      {"convolution", ARGS(f32({1, 4, 5}), f32({4, 3, 3}), Value(), ints({2}), ints({0}), ints({2}),
                           Value(true), ints({1}), i64(1)), {}, {1, 3, 14}, DType::Float32},
      {"convolution_backward", ARGS(f32({2, 6, 4, 6}), f32({2, 4, 7, 6}), f32({6, 2, 3, 3}), ints({2, 1}),
                                    ints({1, 1}), ints({1, 1}), Value(false), ints({0, 0}), i64(2)),
       {}, {2, 4, 7, 6}, DType::Float32},
      // max_pool2d(x[2, 3, 7, 6], 3, 2, 1, ceil_mode=True)
      {"max_pool", ARGS(f32({2, 3, 7, 6}), ints({3, 3}), ints({2, 2}), ints({1, 1}), ints({1, 1}), Value(true)),
       {}, {2, 3, 4, 4}, DType::Float32},
      {"max_pool_backward", ARGS(f32({2, 3, 4, 4}), f32({2, 3, 7, 6}), idx({2, 3, 4, 4}), ints({3, 3}),
                                 ints({2, 2}), ints({1, 1}), ints({1, 1}), Value(true)),
       {}, {2, 3, 7, 6}, DType::Float32},
      // avg_pool3d(x[1, 2, 5, 4, 4], 2, 1)
      {"avg_pool", ARGS(f32({1, 2, 5, 4, 4}), ints({2, 2, 2}), ints({1, 1, 1}), ints({0, 0, 0}), Value(false),
                        Value(true), Value()), {}, {1, 2, 4, 3, 3}, DType::Float32},
      {"avg_pool_backward", ARGS(f32({1, 2, 4, 3, 3}), f32({1, 2, 5, 4, 4}), ints({2, 2, 2}), ints({1, 1, 1}),
                                 ints({0, 0, 0}), Value(false), Value(true), Value()),
       {}, {1, 2, 5, 4, 4}, DType::Float32},
      {"adaptive_avg_pool", ARGS(f32({2, 3, 7, 5}), ints({3, 2})), {}, {2, 3, 3, 2}, DType::Float32},
      {"adaptive_avg_pool_backward", ARGS(f32({2, 3, 3, 2}), f32({2, 3, 7, 5})), {}, {2, 3, 7, 5},
       DType::Float32},
      {"adaptive_max_pool", ARGS(f32({2, 3, 4, 7, 5}), ints({1, 3, 2})), {}, {2, 3, 1, 3, 2}, DType::Float32},
      {"adaptive_max_pool_backward", ARGS(f32({2, 3, 1, 3, 2}), f32({2, 3, 4, 7, 5}), idx({2, 3, 1, 3, 2})),
       {}, {2, 3, 4, 7, 5}, DType::Float32},
      {"upsample", ARGS(f32({1, 2, 3, 4}), ints({6, 8}), Value(std::string("bilinear")), Value(true), Value()),
       {}, {1, 2, 6, 8}, DType::Float32},
      {"upsample_backward", ARGS(f32({1, 2, 6, 8}), ints({1, 2, 3, 4}), ints({6, 8}),
                                 Value(std::string("nearest")), Value(false), Value()),
       {}, {1, 2, 3, 4}, DType::Float32},
      // batch_norm(x[4, 3, 5], weight, bias, running stats, momentum 0.1, eps 1e-5) in training
      {"batch_norm", ARGS(f32({4, 3, 5}), f32({3}), f32({3}), f32({3}), f32({3}), Value(0.1), Value(1e-5)),
       {}, {4, 3, 5}, DType::Float32},
      {"batch_norm", ARGS(tensor({4, 3, 2, 2}, DType::BFloat16, kCuda0), Value(), Value(), Value(), Value(),
                          Value(0.1), Value(1e-5)), {}, {4, 3, 2, 2}, DType::BFloat16, kCuda0},
      {"batch_norm_backward", ARGS(f32({4, 3, 5}), f32({4, 3, 5}), f32({3}), f32({3}), f32({3}), Value(1e-5)),
       {}, {4, 3, 5}, DType::Float32},
      {"copy_", ARGS(f32({2, 3}), f32({2, 3})), {}, {2, 3}, DType::Float32},
      {"cumsum", ARGS(f32({2, 3}), i64(-1)), {}, {2, 3}, DType::Float32},
      {"cumprod", ARGS(idx({4}), i64(0)), {}, {4}, DType::Int64},
      // Multi-output prims: the row checks the first output (the values).
      {"sort", ARGS(f32({2, 5}), i64(1), Value(true), Value(false)), {}, {2, 5}, DType::Float32},
      {"topk", ARGS(f32({2, 5}), i64(3), i64(1), Value(true)), {}, {2, 3}, DType::Float32},
      {"scatter", ARGS(f32({3, 4}), idx({2, 4}), f32({2, 4}), i64(0)), {}, {3, 4}, DType::Float32},
  };
  return cases;
}

struct ErrorCase {
  const char* prim;
  std::function<std::vector<Value>()> args;
  Kw kwargs;
  ErrorKind kind;
  const char* message;
};

Kw iotaKw(int64_t start, int64_t step) {
  return {{"start", i64(start)}, {"step", i64(step)}, {"device", kCpu}, {"dtype", DType::Int64}};
}

const std::vector<ErrorCase>& errorCases() {
  using EK = ErrorKind;
  static const std::vector<ErrorCase> cases = {
      {"where", ARGS(f32({2}), f32({2}), f32({2})), {}, EK::Runtime,
       "prims.where: expected 'pred' to have dtype bool8, but it has float32"},
      {"where", ARGS(Value(int64_t{1}), f32({2}), f32({2})), {}, EK::Type,
       "prims.where: expected 'pred' to be a bool tensor or a bool, but got int 1"},
      {"where", ARGS(tensor({2}, DType::Bool), f32({3}), f32({3})), {}, EK::Runtime,
       "prims.where: expected tensors of the same shape"},
      {"where", ARGS(tensor({2}, DType::Bool), f32({2}), idx({2})), {}, EK::Type,
       "prims.where: expected 'a' and 'b' of the same dtype, but got float32 and int64"},
      {"where", ARGS(Value(true), Value(1.0), Value(2.0)), {}, EK::Type,
       "prims.where: expected at least one tensor argument"},
      {"where", ARGS(tensor({2}, DType::Bool), Value(int64_t{1}), Value(2.0)), {}, EK::Type,
       "prims.where: expected 'a' and 'b' of the same dtype, but got int64 and float64"},
      {"where", ARGS(tensor({2}, DType::Bool), f32({2}, kCuda0), f32({2})), {}, EK::Runtime,
       "prims.where: expected all tensors on one device"},
      {"convert_element_type", ARGS(Value(1.0), DType::Float16), {}, EK::Type,
       "prims.convert_element_type: expected argument 'a' to be a tensor, but got float"},
      {"convert_element_types", ARGS(Value::list({f32({2}), Value(1.0)}), DType::Float16), {}, EK::Type,
       "prims.convert_element_types: expected argument 'tensors[1]' to be a tensor, but got float"},
      {"convert_element_types", ARGS(f32({2}), DType::Float16), {}, EK::Type,
       "prims.convert_element_types: expected 'tensors' to be a sequence of tensors, but got"},
      {"polygamma", ARGS(i64(-1), f32({2})), {}, EK::Runtime,
       "prims.polygamma: expected a non-negative n, but got -1"},
      {"polygamma", ARGS(Value(1.5), f32({2})), {}, EK::Type,
       "prims.polygamma: expected 'n' to be an int, but got float"},
      {"polygamma", ARGS(i64(1), Value(2.0)), {}, EK::Type,
       "prims.polygamma: expected argument 'a' to be a tensor, but got float"},
      {"polygamma", ARGS(i64(1), idx({2})), {}, EK::NotImplemented,
       "prims.polygamma: argument 'a' has dtype int64, which this prim does not support"},
      {"device_put", ARGS(Value(1.0), kCuda0), {}, EK::Type,
       "prims.device_put: expected argument 'a' to be a tensor, but got float"},
      {"device_put", ARGS(f32({2}), DType::Float16), {}, EK::Type,
       "prims.device_put: expected 'device' to be a device, but got dtype"},
      {"full", ARGS(ints({-1, 2}), Value(1.0)), devDtype(kCpu, DType::Float32), EK::Runtime,
       "prims.full: invalid shape (-1, 2), sizes must be non-negative"},
      {"full", ARGS(ints({2}), Value("one")), devDtype(kCpu, DType::Float32), EK::Type,
       "prims.full: expected 'fill_value' to be a number, but got 'one'"},
      {"iota", ARGS(i64(-1)), iotaKw(0, 1), EK::Runtime,
       "prims.iota: expected a non-negative length, but got -1"},
      {"iota", ARGS(i64(3)), iotaKw(0, 0), EK::Runtime, "prims.iota: step must be nonzero"},
      {"uniform", ARGS(ints({2}), Value(0.0), Value(1.0)), devDtype(kCpu, DType::Int32), EK::Type,
       "prims.uniform: expected a floating dtype, but got int32"},
      {"uniform", ARGS(ints({2, -3}), Value(0.0), Value(1.0)), devDtype(kCpu, DType::Float32),
       EK::Runtime, "prims.uniform: invalid shape (2, -3)"},
      {"broadcast_in_dim", ARGS(f32({3}), ints({2, 3}), ints({0, 1})), {}, EK::Runtime,
       "prims.broadcast_in_dim: expected 1 broadcast dimensions for a tensor of shape (3,), but got 2"},
      {"broadcast_in_dim", ARGS(f32({3}), ints({2, 3}), ints({2})), {}, EK::Index,
       "prims.broadcast_in_dim: broadcast dimension 2 is out of range for shape (2, 3)"},
      {"broadcast_in_dim", ARGS(f32({1, 1}), ints({2, 3}), ints({1, 0})), {}, EK::Runtime,
       "prims.broadcast_in_dim: broadcast dimensions must be strictly increasing"},
      {"broadcast_in_dim", ARGS(f32({2}), ints({2, 3}), ints({1})), {}, EK::Runtime,
       "prims.broadcast_in_dim: dimension 0 of the input (length 2) cannot be broadcast to length 3 in shape (2, 3)"},
      {"broadcast_in_dim", ARGS(Value(1.0), ints({2}), ints({})), {}, EK::Type,
       "prims.broadcast_in_dim: expected argument 'a' to be a tensor"},
      {"reshape", ARGS(f32({2, 3}), ints({4, 2})), {}, EK::Runtime,
       "prims.reshape: shape (4, 2) is invalid for a tensor of shape (2, 3) (6 elements)"},
      {"reshape", ARGS(f32({2, 3}), ints({-1, 6})), {}, EK::Runtime,
       "prims.reshape: invalid shape (-1, 6), sizes must be non-negative"},
      {"slice", ARGS(f32({5, 4}), ints({0}), ints({5})), {}, EK::Runtime,
       "prims.slice: expected start, end and strides of length 2 for shape (5, 4)"},
      {"slice", ARGS(f32({5}), ints({3}), ints({2})), {}, EK::Runtime,
       "prims.slice: invalid slice [3, 2) of dimension 0 with length 5"},
      {"slice", ARGS(f32({5}), ints({0}), ints({6})), {}, EK::Runtime,
       "prims.slice: invalid slice [0, 6) of dimension 0 with length 5"},
      {"slice", ARGS(f32({5}), ints({0}), ints({5}), ints({0})), {}, EK::Runtime,
       "prims.slice: stride 0 of dimension 0 must be positive"},
      {"squeeze", ARGS(f32({1, 3}), ints({1})), {}, EK::Runtime,
       "prims.squeeze: cannot squeeze dimension 1 of length 3"},
      {"squeeze", ARGS(f32({1, 3}), ints({2})), {}, EK::Index,
       "prims.squeeze: dimension out of range (expected to be in range of [-2, 1], but got 2)"},
      {"squeeze", ARGS(f32({1, 1}), ints({0, -2})), {}, EK::Runtime,
       "prims.squeeze: dimension -2 appears more than once in the dims list"},
      {"transpose", ARGS(f32({2, 3}), ints({0})), {}, EK::Runtime,
       "prims.transpose: expected a permutation of 2 dimensions, but got 1"},
      {"transpose", ARGS(f32({2, 3}), ints({0, 2})), {}, EK::Index,
       "prims.transpose: dimension 2 is out of range for 2 dimensions"},
      {"transpose", ARGS(f32({2, 3}), ints({1, 1})), {}, EK::Runtime,
       "prims.transpose: dimension 1 appears twice in the permutation"},
      {"flip", ARGS(f32({2, 3}), ints({3})), {}, EK::Index,
       "prims.flip: dimension out of range (expected to be in range of [-2, 1], but got 3)"},
      {"flip", ARGS(f32({2, 3}), ints({1, 1})), {}, EK::Runtime,
       "prims.flip: dimension 1 appears more than once"},
      {"stride_order", ARGS(f32({2, 3}), ints({0, 0})), {}, EK::Runtime,
       "prims.stride_order: dimension 0 appears twice in the permutation"},
      {"stride_order", ARGS(f32({2, 3}), ints({0, 1, 2})), {}, EK::Runtime,
       "prims.stride_order: expected a permutation of 2 dimensions, but got 3"},
      {"cat", ARGS(Value::list({}), i64(0)), {}, EK::Runtime,
       "prims.cat: expected a non-empty sequence of tensors"},
      {"cat", ARGS(Value::list({f32({})}), i64(0)), {}, EK::Runtime,
       "prims.cat: zero-dimensional tensor x cannot be concatenated"},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({2})}), i64(0)), {}, EK::Runtime,
       "prims.cat: tensors must have the same number of dimensions"},
      {"cat", ARGS(Value::list({f32({2, 3}), idx({2, 3})}), i64(0)), {}, EK::Type,
       "prims.cat: expected tensors of one dtype, but got float32 and int64"},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({2, 4})}), i64(0)), {}, EK::Runtime,
       "prims.cat: sizes of tensors must match except in dimension 0"},
      {"cat", ARGS(Value::list({f32({2, 3}), Value(1.0)}), i64(0)), {}, EK::Type,
       "prims.cat: expected argument 'tensors[1]' to be a tensor, but got float"},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({2, 3})}), i64(2)), {}, EK::Index,
       "prims.cat: dimension out of range (expected to be in range of [-2, 1], but got 2)"},
      {"cat", ARGS(Value::list({f32({2, 3}), f32({2, 3}, kCuda0)}), i64(0)), {}, EK::Runtime,
       "prims.cat: expected all tensors on one device"},
      {"pad", ARGS(f32({3}), Value("z"), pads({{0, 0, 0}})), {}, EK::Type,
       "prims.pad: expected 'padding_value' to be a number"},
      {"pad", ARGS(f32({3}), Value(0.0), pads({})), {}, EK::Runtime,
       "prims.pad: expected 1 padding configurations for shape (3,), but got 0"},
      {"pad", ARGS(f32({3}), Value(0.0), pads({{0, 0, -1}})), {}, EK::Runtime,
       "prims.pad: interior padding must be non-negative, got -1"},
      {"pad", ARGS(f32({3}), Value(0.0), pads({{-2, -2, 0}})), {}, EK::Runtime,
       "prims.pad: padding (-2, -2, 0) makes dimension 0 of length 3 negative"},
      {"take", ARGS(f32({5}), f32({2}), i64(0)), {}, EK::Runtime,
       "prims.take: expected integer indices, but got dtype float32"},
      {"take", ARGS(f32({5}), idx({2, 2}), i64(0)), {}, EK::Runtime,
       "prims.take: expected 0- or 1-dimensional indices, but got shape (2, 2)"},
      {"take", ARGS(f32({5}), idx({2}), i64(1)), {}, EK::Index,
       "prims.take: dimension out of range (expected to be in range of [-1, 0], but got 1)"},
      {"gather", ARGS(f32({3, 4}), idx({2}), i64(0)), {}, EK::Runtime,
       "prims.gather: expected indices with 2 dimensions, but got shape (2,)"},
      {"gather", ARGS(f32({3, 4}), idx({2, 5}), i64(0)), {}, EK::Runtime,
       "prims.gather: indices of shape (2, 5) exceed the input's shape (3, 4) in dimension 1"},
      {"gather", ARGS(f32({3, 4}), tensor({2, 4}, DType::Bool), i64(0)), {}, EK::Runtime,
       "prims.gather: expected integer indices, but got dtype bool8"},
      {"scatter_add", ARGS(f32({3, 4}), idx({2, 4}), f32({1, 4}), i64(0)), {}, EK::Runtime,
       "prims.scatter_add: indices of shape (2, 4) exceed value's shape (1, 4) in dimension 0"},
      // torch: "Expected index [2, 5] to be no larger than self [3, 4] apart from dimension 0".
      {"scatter_add", ARGS(f32({3, 4}), idx({2, 5}), f32({2, 5}), i64(0)), {}, EK::Runtime,
       "prims.scatter_add: indices of shape (2, 5) exceed the input's shape (3, 4) in dimension 1"},
      {"scatter_add", ARGS(f32({3, 4}), idx({2}), f32({2, 4}), i64(0)), {}, EK::Runtime,
       "prims.scatter_add: expected a, indices and value with the same number of dimensions"},
      {"scatter_add", ARGS(f32({3, 4}), idx({2, 4}), idx({2, 4}), i64(0)), {}, EK::Type,
       "prims.scatter_add: expected a and value of the same dtype, but got float32 and int64"},
      {"sum", ARGS(tensor({2}, DType::Bool), ints({0})), {}, EK::Type,
       "prims.sum: bool tensors are not supported"},
      {"sum", ARGS(f32({2}), ints({1})), {}, EK::Index,
       "prims.sum: dimension out of range (expected to be in range of [-1, 0], but got 1)"},
      {"prod", ARGS(f32({2, 2}), ints({0, 0})), {}, EK::Runtime,
       "prims.prod: dimension 0 appears more than once in the dims list"},
      {"amax", ARGS(f32({2, 0}), ints({1})), {}, EK::Index,
       "prims.amax: cannot reduce dimension 1 of length 0 of shape (2, 0)"},
      {"amin", ARGS(tensor({2}, DType::Complex64), ints({0})), {}, EK::Type,
       "prims.amin: complex tensors are not supported"},
      {"var", ARGS(idx({2}), ints({0})), {{"correction", Value(1.0)}}, EK::Type,
       "prims.var: expected a floating or complex tensor, but got int64"},
      {"var", ARGS(f32({2}), ints({-2})), {{"correction", Value(1.0)}}, EK::Index,
       "prims.var: dimension out of range"},
      {"argmax", ARGS(f32({0}), Value()), {}, EK::Index,
       "prims.argmax: cannot reduce an empty tensor of shape (0,)"},
      {"argmax", ARGS(tensor({2}, DType::Complex128), i64(0)), {}, EK::Type,
       "prims.argmax: complex tensors are not supported"},
      {"argmin", ARGS(f32({2, 0}), i64(1)), {}, EK::Index,
       "prims.argmin: cannot reduce dimension 1 of length 0 of shape (2, 0)"},
      {"matmul", ARGS(f32({2, 3}), idx({3, 4})), {}, EK::Type,
       "prims.matmul: expected tensors of the same dtype, but got float32 and int64"},
      {"matmul", ARGS(f32({}), f32({3})), {}, EK::Runtime,
       "prims.matmul: both arguments need at least one dimension, but got shapes () and (3,)"},
      {"matmul", ARGS(f32({2, 3}), f32({4, 5})), {}, EK::Runtime,
       "prims.matmul: shapes (2, 3) and (4, 5) cannot be multiplied (3 != 4)"},
      {"matmul", ARGS(f32({2, 2, 3}), f32({3, 3, 4})), {}, EK::Runtime,
       "prims.matmul: batch dimensions of (2, 2, 3) and (3, 3, 4) cannot be broadcast"},
      {"matmul", ARGS(f32({2, 3}), f32({3, 4}, kCuda0)), {}, EK::Runtime,
       "prims.matmul: expected all tensors on one device"},
      {"linear", ARGS(f32({5, 3}), f32({2, 4, 3}), Value()), {}, EK::Runtime,
       "prims.linear: expected a 1- or 2-dimensional weight, but got shape (2, 4, 3)"},
      {"linear", ARGS(f32({}), f32({4, 3}), Value()), {}, EK::Runtime,
       "prims.linear: expected an input with at least one dimension"},
      {"linear", ARGS(f32({5, 3}), f32({4, 2}), Value()), {}, EK::Runtime,
       "prims.linear: input of shape (5, 3) and weight of shape (4, 2) cannot be multiplied (3 != 2)"},
      {"linear", ARGS(f32({5, 3}), tensor({4, 3}, DType::Float64), Value()), {}, EK::Runtime,
       "prims.linear: expected input and weight of the same dtype, but got float32 and float64"},
      {"linear", ARGS(f32({5, 3}), f32({4, 3}), tensor({4}, DType::Float16)), {}, EK::Type,
       "prims.linear: expected bias of dtype float32, but got float16"},
      {"linear", ARGS(f32({5, 3}), f32({4, 3}), f32({3})), {}, EK::Runtime,
       "prims.linear: bias of shape (3,) does not match 4 output features"},
      {"linear", ARGS(f32({5, 3}), f32({4, 3}), f32({4}, kCuda0)), {}, EK::Runtime,
       "prims.linear: expected all tensors on one device"},
      {"embedding", ARGS(f32({2}), f32({10, 4})), {}, EK::Runtime,
       "prims.embedding: expected integer indices, but got dtype float32"},
      {"embedding", ARGS(idx({2}), f32({10})), {}, EK::Runtime,
       "prims.embedding: expected a 2-dimensional weight, but got shape (10,)"},
      {"embedding_backward", ARGS(f32({2, 4}), idx({2, 3}), i64(10)), {}, EK::Runtime,
       "prims.embedding_backward: expected grad to have one more dim than indices (2, 3), but got shape (2, 4)"},
      {"embedding_backward", ARGS(f32({2, 3, 4}), f32({2, 3}), i64(10)), {}, EK::Runtime,
       "prims.embedding_backward: expected integer indices, but got dtype float32"},
      {"embedding_backward", ARGS(f32({2, 3, 4}), idx({2, 3}), i64(10), i64(10)), {}, EK::Runtime,
       "prims.embedding_backward: expected padding_idx in [0, 10), but got 10"},
      {"batch_norm", ARGS(f32({4}), Value(), Value(), Value(), Value(), Value(0.1), Value(1e-5)), {}, EK::Runtime,
       "prims.batch_norm: expected an input with at least 2 dimensions, but got shape (4,)"},
      {"batch_norm", ARGS(f32({4, 3}), f32({4}), Value(), Value(), Value(), Value(0.1), Value(1e-5)), {},
       EK::Runtime, "prims.batch_norm: expected weight of shape (3,) for input of shape (4, 3), but got (4,)"},
      {"batch_norm", ARGS(f32({4, 3}), Value(), Value(), f32({3}), Value(), Value(0.1), Value(1e-5)), {},
       EK::Runtime, "prims.batch_norm: running_mean and running_var must both be given or both be None"},
      {"batch_norm", ARGS(idx({4, 3}), Value(), Value(), Value(), Value(), Value(0.1), Value(1e-5)), {},
       EK::Type, "prims.batch_norm: expected a floating point input, but got int64"},
      {"batch_norm_backward", ARGS(f32({4, 3, 2}), f32({4, 3, 5}), f32({3}), f32({3}), f32({3}), Value(1e-5)),
       {}, EK::Runtime, "prims.batch_norm_backward: expected grad of the input's shape (4, 3, 5), but got shape (4, 3, 2)"},
      // ---- nn ops ----
      {"convolution", ARGS(f32({2, 4, 7, 6}), f32({6, 3, 3, 3}), Value(), ints({1, 1}), ints({0, 0}),
                           ints({1, 1}), Value(false), ints({0, 0}), i64(2)), {}, EK::Runtime,
       "prims.convolution: weight of shape (6, 3, 3, 3) with groups=2 expects 6 input channels"},
      {"convolution", ARGS(idx({2, 4, 7}), idx({6, 4, 3}), Value(), ints({1}), ints({0}), ints({1}),
                           Value(false), ints({0}), i64(1)), {}, EK::Type,
       "prims.convolution: expected a floating point input, but got int64"},
      {"convolution", ARGS(f32({2, 4, 2}), f32({6, 4, 3}), Value(), ints({1}), ints({0}), ints({1}),
                           Value(false), ints({0}), i64(1)), {}, EK::Runtime,
       "prims.convolution: kernel of shape (6, 4, 3) with dilation (1,) does not fit"},
      {"convolution", ARGS(f32({2, 4, 7}), f32({6, 4, 3}), Value(), ints({0}), ints({0}), ints({1}),
                           Value(false), ints({0}), i64(1)), {}, EK::Runtime,
       "prims.convolution: expected every entry of stride to be at least 1"},
      {"convolution_backward", ARGS(f32({2, 6, 5}), f32({2, 4, 7, 6}), f32({6, 2, 3, 3}), ints({1, 1}),
                                    ints({0, 0}), ints({1, 1}), Value(false), ints({0, 0}), i64(2)),
       {}, EK::Runtime, "prims.convolution_backward: grad, input and weight must have the same number"},
      {"max_pool", ARGS(f32({2, 3, 7, 6}), ints({2, 2}), ints({2, 2}), ints({2, 2}), ints({1, 1}), Value(false)),
       {}, EK::Runtime, "prims.max_pool: padding should be at most half of the effective kernel size"},
      {"max_pool", ARGS(f32({3, 7, 6}), ints({2, 2}), ints({2, 2}), ints({0, 0}), ints({1, 1}), Value(false)),
       {}, EK::Runtime, "prims.max_pool: expected a 4-dimensional input for 2 spatial dimensions"},
      {"max_pool_backward", ARGS(f32({2, 3, 3, 3}), f32({2, 3, 7, 6}), idx({2, 3, 4, 3}), ints({3, 3}),
                                 ints({2, 2}), ints({1, 1}), ints({1, 1}), Value(true)),
       {}, EK::Runtime, "prims.max_pool_backward: grad of shape (2, 3, 3, 3) does not match indices"},
      {"avg_pool", ARGS(f32({2, 3, 1, 1}), ints({2, 2}), ints({2, 2}), ints({0, 0}), Value(false), Value(true),
                        Value()), {}, EK::Runtime, "prims.avg_pool: the output of input shape (2, 3, 1, 1)"},
      {"avg_pool_backward", ARGS(Value(1.0), f32({2, 3, 4, 4}), ints({2, 2}), ints({2, 2}), ints({0, 0}),
                                 Value(false), Value(true), Value()),
       {}, EK::Type, "prims.avg_pool_backward: expected argument 'grad' to be a tensor"},
      {"adaptive_avg_pool", ARGS(f32({2, 3, 7, 5}), ints({3, 2, 1, 1})), {}, EK::Runtime,
       "prims.adaptive_avg_pool: expected 2 or 3 output sizes"},
      {"adaptive_avg_pool_backward", ARGS(f32({2, 3, 3, 2}), Value(1.0)), {}, EK::Type,
       "prims.adaptive_avg_pool_backward: expected argument 'a' to be a tensor"},
      {"adaptive_max_pool", ARGS(tensor({2, 3, 7, 5}, DType::Int32), ints({3, 2})), {}, EK::Type,
       "prims.adaptive_max_pool: expected a floating point input, but got int32"},
      {"adaptive_max_pool_backward", ARGS(f32({2, 3, 3, 2}), f32({2, 3, 7, 5}), Value()), {}, EK::Type,
       "prims.adaptive_max_pool_backward: expected argument 'indices' to be a tensor"},
      {"upsample", ARGS(f32({1, 2, 3, 4}), ints({6, 8}), Value(std::string("cubic")), Value(false), Value()),
       {}, EK::NotImplemented, "prims.upsample: mode must be 'nearest'"},
      {"upsample", ARGS(f32({1, 2, 3, 4}), ints({6, 8}), Value(std::string("trilinear")), Value(false),
                        Value()), {}, EK::Runtime, "prims.upsample: mode 'trilinear' cannot produce output_size (6, 8)"},
      {"upsample_backward", ARGS(f32({1, 2, 6, 8}), ints({1, 2, 3}), ints({6, 8}), Value(std::string("nearest")),
                                 Value(false), Value()),
       {}, EK::Runtime, "prims.upsample_backward: input_size (1, 2, 3) does not match grad of shape (1, 2, 6, 8)"},
      {"copy_", ARGS(f32({2, 3}), f32({3})), {}, EK::Runtime,
       "prims.copy_: src of shape (2, 3) does not match dst of shape (3,)"},
      {"copy_", ARGS(f32({3}), tensor({3}, DType::Float64)), {}, EK::Type,
       "prims.copy_: src has dtype float32 but dst has dtype float64"},
      {"cumsum", ARGS(tensor({3}, DType::Bool), i64(0)), {}, EK::Type,
       "prims.cumsum: bool tensors are not supported"},
      {"cumprod", ARGS(tensor({3}, DType::Bool), i64(0)), {}, EK::Type,
       "prims.cumprod: bool tensors are not supported"},
      {"sort", ARGS(tensor({3}, DType::Complex64), i64(0), Value(false), Value(false)), {}, EK::Type,
       "prims.sort: complex tensors are not supported"},
      {"topk", ARGS(f32({2, 5}), i64(6), i64(1), Value(true)), {}, EK::Index,
       "prims.topk: k (6) is out of range for dimension 1 of length 5"},
      {"scatter", ARGS(f32({3, 4}), idx({2}), f32({2, 4}), i64(0)), {}, EK::Runtime,
       "prims.scatter: expected a, indices and value with the same number of dimensions"},
  };
  return cases;
}

#undef ARGS

TEST(PrimsMeta, ValidCalls) {
  prims::registerPrims();
  for (const ValidCase& c : validCases()) {
    Value out;
    try {
      out = runPrim(c.prim, c.args(), c.kwargs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.prim << " threw: " << e.what();
      continue;
    }
    if (out.isSequence() && !out.items().empty()) out = out.items()[0];
    ASSERT_TRUE(out.isTensor()) << c.prim;
    EXPECT_EQ(out.tensor().shape, c.shape) << c.prim;
    EXPECT_EQ(out.tensor().dtype, c.dtype) << c.prim;
    EXPECT_EQ(out.tensor().device, c.device) << c.prim;
  }
}

TEST(PrimsMeta, ErrorChecks) {
  prims::registerPrims();
  for (const ErrorCase& c : errorCases())
    expectError([&] { runPrim(c.prim, c.args(), c.kwargs); }, c.kind, c.message, c.prim);
}

TEST(PrimsMeta, FailedCallRecordsNothing) {
  prims::registerPrims();
  Trace t;
  TracingScope scope(t);
  EXPECT_THROW(prims::reshape(f32({2, 3}), {5}), Error);
  EXPECT_TRUE(t.bsyms.empty());
  prims::reshape(f32({2, 3}), {6});
  ASSERT_EQ(t.bsyms.size(), 1u);
  EXPECT_EQ(t.bsyms[0].sym->id(), "prims.reshape");
}

TEST(PrimsMeta, OutsideTracingIsAUserError) {
  prims::registerPrims();
  expectError([] { prims::neg(f32({2})); }, ErrorKind::Runtime,
              "prims.neg can only be called while tracing");
}

TEST(PrimsMeta, PrimTablesCoverEveryPrim) {
  prims::registerPrims();
  std::set<std::string> listed, valid, errors;
#define UNARY(n, k, o) listed.insert(#n);
#define BINARY(n, k, o) listed.insert(#n);
#define PRIM(n, s, t) listed.insert(#n);
#include "ops/prims.def"
#undef UNARY
#undef BINARY
#undef PRIM
  for (const auto& p : kElementwise) valid.insert(p.name), errors.insert(p.name);
  for (const auto& c : validCases()) valid.insert(c.prim);
  for (const auto& c : errorCases()) errors.insert(c.prim);
  for (const std::string& n : listed) {
    EXPECT_TRUE(valid.count(n)) << "prims." << n << " has no valid-input row in test_prims_meta";
    EXPECT_TRUE(errors.count(n)) << "prims." << n << " has no error row in test_prims_meta";
  }
  // Every registered prim comes from prims.def, and each has a PrimId.
  std::vector<Symbol*> registered = SymbolRegistry::get().inModule("prims");
  EXPECT_EQ(registered.size(), listed.size());
  EXPECT_EQ(static_cast<size_t>(prims::PrimId::NumPrims), listed.size());
  for (const Symbol* s : registered) EXPECT_TRUE(listed.count(s->name)) << s->id();
  for (size_t i = 0; i < static_cast<size_t>(prims::PrimId::NumPrims); ++i)
    EXPECT_TRUE(prims::symbol(static_cast<prims::PrimId>(i)).isPrim());
}

}  // namespace
}  // namespace thunder
