// Errors raised by the compiler. Two kinds, as in nvFuser: a user error (bad input, unsupported
// op) that becomes a Python exception with a clear message, and an internal error (a broken
// invariant) that asks to be reported. Neither aborts the process.
#pragma once

#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace thunder {

/// The Python exception class a user error maps to.
enum class ErrorKind { Runtime, Value, Type, Index, NotImplemented };

/// An error the user can fix: the message names the op, the argument and the shapes.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  /// Which Python exception this becomes.
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// A broken internal invariant.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg)
      : std::logic_error("thunder internal error, please report: " + msg) {}
};

namespace detail {
// Strings are built without iostreams: a locale-free append is all messages need, and iostreams
// compiled against one libstdc++ can crash when another is loaded at run time.
inline void appendOne(std::string& out, std::string_view v) { out.append(v); }
inline void appendOne(std::string& out, const char* v) { out.append(v); }
inline void appendOne(std::string& out, const std::string& v) { out.append(v); }
inline void appendOne(std::string& out, char c) { out.push_back(c); }
inline void appendOne(std::string& out, bool b) { out.append(b ? "true" : "false"); }
template <typename T>
std::enable_if_t<std::is_arithmetic_v<T>> appendOne(std::string& out, T v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}
}  // namespace detail

/// Concatenates strings and numbers into one string.
template <typename... Args>
std::string str(const Args&... args) {
  std::string out;
  (detail::appendOne(out, args), ...);
  return out;
}

}  // namespace thunder

/// User-facing check: throws thunder::Error of the given kind with the streamed message.
#define THUNDER_CHECK_KIND(cond, kind, ...)                             \
  do {                                                                  \
    if (!(cond)) throw ::thunder::Error((kind), ::thunder::str(__VA_ARGS__)); \
  } while (0)
#define THUNDER_CHECK(cond, ...) THUNDER_CHECK_KIND(cond, ::thunder::ErrorKind::Runtime, __VA_ARGS__)
/// Internal invariant: throws thunder::InternalError.
#define THUNDER_INTERNAL(cond, ...)                                        \
  do {                                                                     \
    if (!(cond)) throw ::thunder::InternalError(::thunder::str(__VA_ARGS__)); \
  } while (0)
