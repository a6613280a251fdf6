// The torch language (ltorch): symbols that mirror PyTorch's API and decompose into clang and
// prims. Their signatures follow PyTorch's Python signatures, so a call prints as valid Python.
#pragma once

#include <string>
#include <vector>

#include "ir/symbol.h"

namespace thunder::ltorch {

/// A PyTorch callable that maps to an ltorch symbol: its qualified name ("torch.Tensor.add")
/// and the symbol's id. `swapped` marks reflected operators (__rsub__) whose first two
/// arguments are exchanged.
struct TorchName {
  std::string qualname;
  std::string symbolId;
  bool swapped = false;
};

/// Registers the prims and every ltorch symbol (idempotent).
void registerLTorch();
/// Defines an ltorch symbol: its signature (as PyTorch's), the PyTorch callables that map to it
/// ("~" marks a reflected operator) and its decomposition. For the register functions below.
void define(const std::string& name, const std::string& sig, std::vector<std::string> torch,
            SymbolFn fn, uint32_t tags = kNoTags);
/// Registers the neural-network ops of ltorch_nn.cpp (convolution, pooling, norms, losses, ...).
void registerNNOps();
/// F.pad's reflect, replicate and circular modes: `pad` lists (low, high) from the last dim.
Value padModes(const Value& a, const std::vector<int64_t>& pad, const std::string& mode);
/// Registers the tensor ops of ltorch_tensor.cpp (cumsum, sort, scatter, einsum, ...).
void registerTensorOps();
/// Every PyTorch callable that maps to an ltorch symbol.
const std::vector<TorchName>& torchNames();
/// An ltorch symbol by name ("add").
const Symbol& symbol(const std::string& name);
/// Calls an ltorch symbol with positional arguments, filling defaults.
Value op(const std::string& name, std::vector<Value> args,
         const std::vector<std::pair<std::string, Value>>& kwargs = {});

}  // namespace thunder::ltorch
