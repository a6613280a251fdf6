// Helpers shared by the GoogleTest units: making tensor proxies and traces, and checking that a
// call fails with a given error kind and message.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "ir/error.h"
#include "ir/trace.h"
#include "ir/value.h"

namespace thunder {

/// GoogleTest prints devices and dtypes by name in failure messages.
inline void PrintTo(const Device& d, std::ostream* os) { *os << d.str(); }
inline void PrintTo(DType d, std::ostream* os) { *os << dtypeName(d); }

}  // namespace thunder

namespace thunder::testing {

inline const Device kCpu{DeviceType::CPU, 0};
inline const Device kCuda0{DeviceType::CUDA, 0};
inline const Device kCuda1{DeviceType::CUDA, 1};

/// A free-standing tensor proxy (not a trace input), enough for meta functions.
inline Value tensor(Shape shape, DType dtype = DType::Float32, Device device = kCpu,
                    std::string name = "x") {
  auto t = std::make_shared<TensorProxy>();
  t->name = std::move(name);
  t->shape = std::move(shape);
  t->dtype = dtype;
  t->device = device;
  return Value(t);
}

/// Adds a named input of the given type to `trace`, as the Python front end does.
inline Value addInput(Trace& trace, const std::string& name, Shape shape,
                      DType dtype = DType::Float32, Device device = kCpu) {
  trace.reserveName(name);
  Value v = tensor(std::move(shape), dtype, device, name);
  trace.inputs.push_back(v.toTensor());
  return v;
}

/// The text of the error `fn` throws, with its kind; nullopt (and a test failure) if it does not
/// throw a thunder::Error.
template <typename Fn>
std::optional<std::pair<ErrorKind, std::string>> errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return std::make_pair(e.kind(), std::string(e.what()));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a thunder::Error, but got another exception: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "expected a thunder::Error, but nothing was thrown";
  return std::nullopt;
}

/// Checks that `fn` throws a thunder::Error of `kind` whose message contains `substr`.
template <typename Fn>
void expectError(Fn&& fn, ErrorKind kind, const std::string& substr, const std::string& what = "") {
  auto err = errorOf(std::forward<Fn>(fn));
  if (!err) {
    ADD_FAILURE() << "  while checking: " << what;
    return;
  }
  EXPECT_EQ(static_cast<int>(err->first), static_cast<int>(kind)) << what << ": " << err->second;
  EXPECT_NE(err->second.find(substr), std::string::npos)
      << what << ": message '" << err->second << "' lacks '" << substr << "'";
}

/// Checks that `fn` throws a thunder::InternalError whose message contains `substr`.
template <typename Fn>
void expectInternalError(Fn&& fn, const std::string& substr) {
  try {
    fn();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("internal error, please report"), std::string::npos);
    return;
  }
  ADD_FAILURE() << "expected an internal error containing '" << substr << "'";
}

}  // namespace thunder::testing
