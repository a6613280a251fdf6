// The Python printer: float reprs against Python's repr, every Value kind in both print styles,
// and whole traces printed in the seeds' format (golden strings).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "codegen/python_printer.h"
#include "executors/executor.h"
#include "ir/verifier.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "test_util.h"
#include "transforms/dce.h"
#include "transforms/del_last_used.h"

namespace thunder {
namespace {

using testing::addInput;
using testing::kCpu;
using testing::tensor;

struct FloatCase {
  double value;
  const char* repr;
};

TEST(Printer, FloatReprMatchesPython) {
  // Each row was read off Python's repr(float) for the same double.
  const FloatCase cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {9999999999999998.0, "9999999999999998.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {2.5, "2.5"},
      {1.0 / 3.0, "0.3333333333333333"},
      {1e-4, "0.0001"},
      {0.0001234, "0.0001234"},
      {1e-7, "1e-07"},
      {1e22, "1e+22"},
      {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"},
      {-2.75, "-2.75"},
      {100.0, "100.0"},
      {0.00048828125, "0.00048828125"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {123.456, "123.456"},
  };
  for (const auto& c : cases) EXPECT_EQ(pythonFloatRepr(c.value), c.repr) << c.repr;
}

TEST(Printer, NonFiniteFloatsPrintAsPythonExpressions) {
  // repr(float('inf')) is 'inf', which is not a Python expression; the printer emits one.
  EXPECT_EQ(pythonFloatRepr(std::numeric_limits<double>::infinity()), "float('inf')");
  EXPECT_EQ(pythonFloatRepr(-std::numeric_limits<double>::infinity()), "-float('inf')");
  EXPECT_EQ(pythonFloatRepr(std::nan("")), "float('nan')");
}

struct ValueCase {
  Value value;
  const char* thunderStyle;
  const char* torchStyle;
};

TEST(Printer, PrintValueEveryKindBothStyles) {
  const Device cuda1{DeviceType::CUDA, 1};
  const ValueCase cases[] = {
      {Value(), "None", "None"},
      {Value(true), "True", "True"},
      {Value(false), "False", "False"},
      {Value(int64_t{-3}), "-3", "-3"},
      {Value(0.5), "0.5", "0.5"},
      {Value(std::complex<double>(1, -2)), "complex(1.0, -2.0)", "complex(1.0, -2.0)"},
      {Value("sum"), "'sum'", "'sum'"},
      {Value("it's\n"), "'it\\'s\\n'", "'it\\'s\\n'"},
      // repr('a\tb\rc\x01z\\e') escapes the same characters.
      {Value("a\tb\rc\x01z\\e"), "'a\\tb\\rc\\x01z\\\\e'", "'a\\tb\\rc\\x01z\\\\e'"},
      {Value(DType::Float32), "dtypes.float32", "torch.float32"},
      {Value(DType::Bool), "dtypes.bool8", "torch.bool"},
      {Value(DType::BFloat16), "dtypes.bfloat16", "torch.bfloat16"},
      {Value(kCpu), "devices.Device(\"cpu\")", "torch.device(\"cpu\")"},
      {Value(cuda1), "devices.Device(\"cuda:1\")", "torch.device(\"cuda:1\")"},
      {tensor({2}, DType::Float32, kCpu, "t_0"), "t_0", "t_0"},
      {Value::tuple({}), "()", "()"},
      {Value::ints({2}), "(2,)", "(2,)"},
      {Value::ints({2, 3}), "(2, 3)", "(2, 3)"},
      {Value::list({}), "[]", "[]"},
      {Value::list({Value(int64_t{1})}), "[1]", "[1]"},
      {Value::list({Value(DType::Int64), Value::ints({1})}), "[dtypes.int64, (1,)]",
       "[torch.int64, (1,)]"},
      {Value::slice(Value(), Value(int64_t{2}), Value()), "slice(None, 2, None)",
       "slice(None, 2, None)"},
      {Value::ellipsis(), "...", "..."},
      {Value::dict({"a", "b"}, {Value(int64_t{1}), Value(DType::Float16)}),
       "{'a': 1, 'b': dtypes.float16}", "{'a': 1, 'b': torch.float16}"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(printValue(c.value, PrintStyle::Thunder), c.thunderStyle);
    EXPECT_EQ(printValue(c.value, PrintStyle::Torch), c.torchStyle);
  }
}

TEST(Printer, EveryValueKindHasACase) {
  // PrintValueEveryKindBothStyles covers these kinds; a new kind must be added there.
  const Value::Kind kinds[] = {
      Value::Kind::None,   Value::Kind::Bool,   Value::Kind::Int,   Value::Kind::Float,
      Value::Kind::Complex, Value::Kind::String, Value::Kind::DType, Value::Kind::Device,
      Value::Kind::Tensor, Value::Kind::Tuple,  Value::Kind::List,  Value::Kind::Dict,
      Value::Kind::Slice,  Value::Kind::Ellipsis,
  };
  EXPECT_EQ(static_cast<int>(std::size(kinds)), static_cast<int>(Value::Kind::Ellipsis) + 1);
  for (Value::Kind k : kinds) EXPECT_NE(kindName(k), "?");
}

// ---- whole traces --------------------------------------------------------------------------------

/// An executor operator like seed 001's `multimul`: (a * b, c * d), printed by its bare name.
const Symbol& multimul() {
  static const Symbol* sym = [] {
    auto s = std::make_unique<Symbol>();
    s->module = "myex";
    s->name = "multimul";
    s->bareName = true;
    s->executor = "myex";
    s->params = parseSignature("a, b, c, d");
    s->impl = [](const std::vector<Value>& a) {
      return Value::tuple({ltorch::op("mul", {a[0], a[1]}), ltorch::op("mul", {a[2], a[3]})});
    };
    return SymbolRegistry::get().put(std::move(s));
  }();
  return *sym;
}

const char* kProvenance = "Constructed by Delete Last Used (took 0 milliseconds)";

TEST(Printer, ExecutorOperatorWithNestedSubsymbols) {
  // Seed 001, "The symbol is recorded, like other operations, into thunder's trace".
  ltorch::registerLTorch();
  Trace t;
  Value a = addInput(t, "t_0", {2, 2}), b = addInput(t, "t_1", {2, 2});
  Value c = addInput(t, "t_2", {2, 2}), d = addInput(t, "t_3", {2, 2});
  {
    TracingScope scope(t);
    t.output = call(multimul(), {a, b, c, d});
  }
  Trace final = delLastUsed(dce(t));
  verify(final);
  final.provenance = kProvenance;
  EXPECT_EQ(printTrace(final),
            R"(# Constructed by Delete Last Used (took 0 milliseconds)
import torch
from thunder.executors.torchex import no_autocast

def computation(t_0, t_1, t_2, t_3):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  # t_2: "cpu f32[2, 2]"
  # t_3: "cpu f32[2, 2]"
  (t0, t1) = multimul(t_0, t_1, t_2, t_3)
    # t0 = ltorch.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
      # t0 = prims.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
    # t1 = ltorch.mul(t_2, t_3)  # t1: "cpu f32[2, 2]"
      # t1 = prims.mul(t_2, t_3)  # t1: "cpu f32[2, 2]"
  del t_0, t_1, t_2, t_3
  return (t0, t1)
)");
}

TEST(Printer, UnusedOutputPrintsAsUnderscore) {
  // Seed 001: `(t0, _) = multimul(...)` once dce drops the unused second output.
  ltorch::registerLTorch();
  Trace t;
  Value a = addInput(t, "t_0", {2, 2}), b = addInput(t, "t_1", {2, 2});
  {
    TracingScope scope(t);
    t.output = call(multimul(), {a, b, a, b}).items()[0];
  }
  Trace final = delLastUsed(dce(t));
  verify(final);
  final.provenance = kProvenance;
  EXPECT_EQ(printTrace(final),
            R"(# Constructed by Delete Last Used (took 0 milliseconds)
import torch
from thunder.executors.torchex import no_autocast

def computation(t_0, t_1):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  (t0, _) = multimul(t_0, t_1, t_0, t_1)
    # t0 = ltorch.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
      # t0 = prims.mul(t_0, t_1)  # t0: "cpu f32[2, 2]"
    # t1 = ltorch.mul(t_0, t_1)  # t1: "cpu f32[2, 2]"
      # t1 = prims.mul(t_0, t_1)  # t1: "cpu f32[2, 2]"
  del t_0, t_1
  return t0
)");
}

/// An executor that runs ltorch.full and ltorch.mul as torch.full / torch.mul, like the torch
/// executor does.
class TorchLikeExecutor : public Executor {
 public:
  TorchLikeExecutor() : Executor("torch_like") {
    for (const char* name : {"full", "mul"}) {
      const Symbol& semantic = ltorch::symbol(name);
      auto s = std::make_unique<Symbol>();
      s->module = "torch";
      s->name = name;
      s->params = semantic.params;
      s->style = PrintStyle::Torch;
      s->executor = "torch_like";
      syms_.push_back(std::move(s));
      addImplementation(semantic.id(), Implementation{syms_.back().get(), {}, {}});
    }
  }

 private:
  std::vector<std::unique_ptr<Symbol>> syms_;
};

TEST(Printer, ExecutionTraceInSeedFormat) {
  // Seed 000/001 format: decorators, torch.* calls with both nested levels, del, list return.
  ltorch::registerLTorch();
  Trace t;
  addInput(t, "t_0", {2, 2});
  Value b = addInput(t, "t_1", {2, 2});
  {
    TracingScope scope(t);
    Value ones = ltorch::op("full", {Value::ints({2, 2}), Value(1.0)},
                            {{"device", kCpu}, {"dtype", DType::Float32}});
    t.output = Value::list({ltorch::op("mul", {b, ones})});
  }
  TorchLikeExecutor ex;
  Trace exec = transformForExecution(dce(t), {&ex});
  verify(exec);
  Trace final = delLastUsed(exec);
  verify(final);
  final.provenance = kProvenance;
  EXPECT_EQ(printTrace(final),
            R"(# Constructed by Delete Last Used (took 0 milliseconds)
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(t_0, t_1):
  # t_0: "cpu f32[2, 2]"
  # t_1: "cpu f32[2, 2]"
  t0 = torch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t0: "cpu f32[2, 2]"
    # t0 = ltorch.full((2, 2), 1.0, device=torch.device("cpu"), dtype=torch.float32)  # t0: "cpu f32[2, 2]"
      # t0 = prims.full((2, 2), 1.0, device=devices.Device("cpu"), dtype=dtypes.float32)  # t0: "cpu f32[2, 2]"
  t1 = torch.mul(t_1, t0)  # t1: "cpu f32[2, 2]"
    # t1 = ltorch.mul(t_1, t0)  # t1: "cpu f32[2, 2]"
      # t1 = prims.mul(t_1, t0)  # t1: "cpu f32[2, 2]"
  del t_1, t0
  return [t1]
)");
}

TEST(Printer, ComputationTraceImportsTheModulesItNames) {
  // A trace of prims and ltorch calls imports them, and thunder's dtypes/devices when a
  // Thunder-style call names one.
  ltorch::registerLTorch();
  Trace t;
  Value x = addInput(t, "x", {3}, DType::Int32);
  {
    TracingScope scope(t);
    Value y = prims::convert_element_type(x, DType::Float32);
    t.output = ltorch::op("neg", {y});
  }
  t.provenance = "Constructed by Trace acquisition (took 0 milliseconds)";
  EXPECT_EQ(printTrace(t),
            R"(# Constructed by Trace acquisition (took 0 milliseconds)
import torch
import thunder.core.dtypes as dtypes
import thunder.core.prims as prims
import thunder.torch as ltorch
from thunder.executors.torchex import no_autocast

def computation(x):
  # x: "cpu i32[3]"
  t0 = prims.convert_element_type(x, dtypes.float32)  # t0: "cpu f32[3]"
  t1 = ltorch.neg(t0)  # t1: "cpu f32[3]"
    # t1 = prims.neg(t0)  # t1: "cpu f32[3]"
  return t1
)");
}

TEST(Printer, PrintCallUsesKeywordsForKeywordOnlyParams) {
  ltorch::registerLTorch();
  Trace t;
  Value x = addInput(t, "x", {2, 3});
  {
    TracingScope scope(t);
    ltorch::op("sum", {x, Value(int64_t{1})}, {{"keepdim", Value(true)}});
    ltorch::op("var", {x, Value::ints({0})}, {{"correction", Value(int64_t{0})}});
  }
  ASSERT_EQ(t.bsyms.size(), 2u);
  // keepdim is positional-or-keyword in torch.sum; dtype and correction are keyword-only.
  EXPECT_EQ(printCall(t.bsyms[0]), "ltorch.sum(x, 1, True, dtype=None)");
  EXPECT_EQ(printCall(t.bsyms[1]), "ltorch.var(x, (0,), correction=0, keepdim=False)");
}

}  // namespace
}  // namespace thunder
