// Signatures: parseSignature and Symbol::bind with Python's calling rules and TypeError wording
// (each expected message was read off the CPython error for a function of the same signature).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/symbol.h"
#include "test_util.h"

namespace thunder {
namespace {

using testing::expectError;
using Kw = std::vector<std::pair<std::string, Value>>;

Symbol makeSymbol(const std::string& name, const std::string& sig) {
  Symbol s;
  s.module = "ltorch";
  s.name = name;
  s.params = parseSignature(sig);
  return s;
}

Value i(int64_t v) { return Value(v); }

TEST(Signature, ParseSignature) {
  std::vector<Param> ps = parseSignature("a, b, /, dim=None, keepdim=False, *, dtype=None, "
                                         "eps=1e-05, mode='sum', n=-2, flag=True, shape=()");
  ASSERT_EQ(ps.size(), 10u);
  EXPECT_EQ(ps[0].name, "a");
  EXPECT_FALSE(ps[0].hasDefault);
  EXPECT_FALSE(ps[0].kwOnly);
  EXPECT_EQ(ps[2].name, "dim");
  EXPECT_TRUE(ps[2].hasDefault);
  EXPECT_TRUE(ps[2].defaultValue.isNone());
  EXPECT_EQ(ps[3].defaultValue, Value(false));
  EXPECT_FALSE(ps[3].kwOnly);
  EXPECT_TRUE(ps[4].kwOnly);
  EXPECT_EQ(ps[5].defaultValue, Value(1e-05));
  EXPECT_EQ(ps[6].defaultValue, Value("sum"));
  EXPECT_EQ(ps[7].defaultValue, Value(int64_t{-2}));
  EXPECT_EQ(ps[8].defaultValue, Value(true));
  EXPECT_EQ(ps[9].defaultValue, Value::tuple({}));
  for (size_t k = 4; k < ps.size(); ++k) EXPECT_TRUE(ps[k].kwOnly) << ps[k].name;
}

TEST(Signature, ParamsAfterVarargsAreKeywordOnly) {
  // def zeros(*shape, device=None, dtype=None): device can only be passed by keyword.
  std::vector<Param> ps = parseSignature("*shape, device=None, dtype=None");
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_TRUE(ps[0].varargs);
  EXPECT_FALSE(ps[0].kwOnly);
  EXPECT_EQ(ps[0].name, "shape");
  EXPECT_TRUE(ps[1].kwOnly);
  EXPECT_TRUE(ps[2].kwOnly);
}

TEST(Signature, BindPositionalKeywordAndDefaults) {
  Symbol sum = makeSymbol("sum", "a, dim=None, keepdim=False, *, dtype=None");
  Value x("x");
  EXPECT_EQ(sum.bind({x}, {}), (std::vector<Value>{x, Value(), Value(false), Value()}));
  EXPECT_EQ(sum.bind({x, i(1), Value(true)}, {}),
            (std::vector<Value>{x, i(1), Value(true), Value()}));
  EXPECT_EQ(sum.bind({x}, {{"keepdim", Value(true)}, {"dim", i(0)}}),
            (std::vector<Value>{x, i(0), Value(true), Value()}));
  EXPECT_EQ(sum.bind({}, {{"a", x}, {"dtype", Value(DType::Float64)}}),
            (std::vector<Value>{x, Value(), Value(false), Value(DType::Float64)}));
}

TEST(Signature, BindVarargsTakesSpreadOrPackedShape) {
  Symbol view = makeSymbol("view", "a, *shape");
  Value x("x");
  const Value packed = Value::ints({2, 3});
  // x.view(2, 3) and x.view((2, 3)) bind the same shape.
  EXPECT_EQ(view.bind({x, i(2), i(3)}, {}), (std::vector<Value>{x, packed}));
  EXPECT_EQ(view.bind({x, packed}, {}), (std::vector<Value>{x, packed}));
  // x.view([2, 3]) keeps the list; x.view(6) is the 1-tuple (6,).
  Value asList = Value::list({i(2), i(3)});
  EXPECT_EQ(view.bind({x, asList}, {}), (std::vector<Value>{x, asList}));
  EXPECT_EQ(view.bind({x, i(6)}, {}), (std::vector<Value>{x, Value::ints({6})}));
  // By keyword, as x.view(shape=(2, 3)).
  EXPECT_EQ(view.bind({x}, {{"shape", packed}}), (std::vector<Value>{x, packed}));

  Symbol zeros = makeSymbol("zeros", "*shape, device=None, dtype=None");
  EXPECT_EQ(zeros.bind({i(2), i(3)}, {{"dtype", Value(DType::Int32)}}),
            (std::vector<Value>{packed, Value(), Value(DType::Int32)}));
}

TEST(Signature, BindErrorsUsePythonsWording) {
  Symbol add = makeSymbol("add", "a, b");
  Symbol sum = makeSymbol("sum", "a, dim=None, keepdim=False, *, dtype=None");
  Symbol neg = makeSymbol("neg", "a");
  Symbol full = makeSymbol("full", "shape, fill_value, *, device, dtype");
  Symbol four = makeSymbol("four", "a, b, c, d");
  Value x("x");
  expectError([&] { add.bind({x, x, x}, {}); }, ErrorKind::Type,
              "ltorch.add() takes 2 positional arguments but 3 were given");
  expectError([&] { sum.bind({x, i(0), Value(true), Value(DType::Int32)}, {}); }, ErrorKind::Type,
              "ltorch.sum() takes from 1 to 3 positional arguments but 4 were given");
  expectError([&] { neg.bind({x, x}, {}); }, ErrorKind::Type,
              "ltorch.neg() takes 1 positional argument but 2 were given");
  expectError([&] { add.bind({x}, {}); }, ErrorKind::Type,
              "ltorch.add() missing 1 required positional argument: 'b'");
  expectError([&] { add.bind({}, {}); }, ErrorKind::Type,
              "ltorch.add() missing 2 required positional arguments: 'a' and 'b'");
  expectError([&] { four.bind({}, {}); }, ErrorKind::Type,
              "ltorch.four() missing 4 required positional arguments: 'a', 'b', 'c', and 'd'");
  expectError([&] { full.bind({Value::ints({2}), Value(1.0)}, {{"dtype", Value(DType::Int32)}}); },
              ErrorKind::Type, "ltorch.full() missing 1 required keyword-only argument: 'device'");
  expectError([&] { add.bind({x}, {{"c", x}}); }, ErrorKind::Type,
              "ltorch.add() got an unexpected keyword argument 'c'");
  expectError([&] { add.bind({x}, {{"a", x}}); }, ErrorKind::Type,
              "ltorch.add() got multiple values for argument 'a'");
  expectError([&] { add.bind({}, {{"b", x}, {"b", x}}); }, ErrorKind::Type,
              "ltorch.add() got multiple values for argument 'b'");
  // A keyword-only parameter cannot be filled positionally.
  expectError([&] { full.bind({Value::ints({2}), Value(1.0), Value("cpu")}, {}); },
              ErrorKind::Type, "ltorch.full() takes 2 positional arguments but 3 were given");
}

}  // namespace
}  // namespace thunder
