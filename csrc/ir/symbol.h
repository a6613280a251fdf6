// Symbols (operations) and the registry that owns them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/value.h"

namespace thunder {

/// Tags group symbols for passes and executors.
enum Tag : uint32_t {
  kNoTags = 0,
  kShapeOp = 1u << 0,        // view / reshape / broadcast / slice...: moves no arithmetic
  kReductionOp = 1u << 1,    // reduces over dimensions
  kRandomOp = 1u << 2,       // draws random numbers
  kMatmulOp = 1u << 3,       // matmul / linear
  kDontDce = 1u << 4,        // kept even when its outputs are unused
  kElementwise = 1u << 5,    // elementwise unary / binary / ternary
  kDel = 1u << 6,            // the `del` statement inserted by del_last_used
  kCreation = 1u << 7,       // makes a tensor from no tensor inputs (full, iota, uniform)
};

/// How constants of dtype and device kind print in a call of this symbol.
enum class PrintStyle : uint8_t {
  Thunder,  // dtypes.float32, devices.Device("cpu")
  Torch,    // torch.float32, torch.device("cpu")
};

/// One parameter of a symbol's signature.
struct Param {
  std::string name;
  bool kwOnly = false;      // printed as name=value
  bool hasDefault = false;  // may be omitted by the caller
  Value defaultValue;
  /// Collects surplus positional arguments into a tuple, like `*shape` in x.view(2, 3).
  bool varargs = false;
};

class Symbol;
using SymbolFn = std::function<Value(const std::vector<Value>& args)>;

/// An operation: id, the language it belongs to, its signature, a meta function (prims) or a
/// decomposition (composites), and tags.
class Symbol {
 public:
  /// The language or executor printed before the name: "prims", "ltorch", "torch", "Tensor",
  /// "torch.nn.functional", an executor's name; empty for bare names.
  std::string module;
  std::string name;
  std::vector<Param> params;
  /// For prims: checks the inputs and makes the output proxies.
  SymbolFn meta;
  /// For composites: the decomposition; the calls it makes become subsymbols.
  SymbolFn impl;
  uint32_t tags = kNoTags;
  PrintStyle style = PrintStyle::Thunder;
  /// The executor that runs this symbol, empty for semantic symbols (prims, ltorch).
  std::string executor;
  /// Printed without the module prefix (executor operators: `multimul(...)`).
  bool bareName = false;
  /// When set, printed instead of the name: the PyTorch callable a fallback symbol runs
  /// ("torch.nn.functional.hardtanh"), while its id stays unique.
  std::string printAs;

  /// "prims.add".
  std::string id() const { return module.empty() ? name : module + "." + name; }
  /// How the symbol prints in a trace: "prims.add", "torch.mul", "multimul".
  std::string printName() const {
    if (!printAs.empty()) return printAs;
    return bareName || module.empty() ? name : id();
  }
  bool isPrim() const { return module == "prims"; }
  bool hasTag(Tag t) const { return (tags & t) != 0; }

  /// Binds Python-style positional and keyword arguments to the signature: returns one value per
  /// parameter. Throws a TypeError naming the symbol on a missing, surplus, duplicate or unknown
  /// argument, worded as Python's ("add() missing 1 required positional argument: 'b'").
  std::vector<Value> bind(std::vector<Value> args,
                          const std::vector<std::pair<std::string, Value>>& kwargs) const;
};

/// Parses a compact signature "a, b, /, dim=None, *, keepdim=False, dtype=None": defaults are
/// None, True/False, ints, floats or quoted strings; `*name` marks a varargs parameter, after
/// which parameters are keyword-only, as in Python.
std::vector<Param> parseSignature(const std::string& sig);

/// Owns every symbol, looked up by id.
class SymbolRegistry {
 public:
  static SymbolRegistry& get();
  /// Adds a symbol; an id registered twice is a user error.
  Symbol* add(std::unique_ptr<Symbol> s);
  /// Replaces or adds a symbol (used for re-registration from Python).
  Symbol* put(std::unique_ptr<Symbol> s);
  Symbol* find(const std::string& id) const;
  /// Like find, but throws an internal error when absent.
  Symbol& at(const std::string& id) const;
  /// Every symbol whose module is `module`, in registration order.
  std::vector<Symbol*> inModule(const std::string& module) const;

 private:
  std::vector<std::unique_ptr<Symbol>> symbols_;
  std::unordered_map<std::string, Symbol*> byId_;
};

}  // namespace thunder
