// Training calls: a forward and a backward program joined to PyTorch's autograd by one custom
// autograd function. Used by the compiled function's cache (bindings.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "ir/trace.h"

namespace thunder::python {

namespace py = pybind11;

/// A compiled training call: its plan (traces, how outputs and gradients connect) and programs.
struct TrainingEntry;

/// The entry of a compile result's training plan (a thunder._C.TrainingPlan).
/// `symbols`: the size symbols (of the forward's inputs) of an entry that serves every size its
/// `guards` allow (trainingSymbolicCheck's); empty for one that serves the traced sizes.
std::shared_ptr<TrainingEntry> makeTrainingEntry(py::handle plan, const std::vector<SizeSymbol>& symbols = {},
                                                 const std::vector<SymGuard>& guards = {});
/// Why a training plan of a program with size symbols serves only its traced sizes ("" where it
/// serves every size its guards allow: symbolicCheck of its forward and backward); adds the
/// guards autodiff and the passes added to `guards`.
std::string trainingSymbolicCheck(py::handle plan, std::vector<SymGuard>& guards);
/// Runs the forward program inside one autograd node whose backward runs the backward program;
/// returns the user-visible output tensors in the order of trainingOutput's tensors.
std::vector<at::Tensor> runTraining(const std::shared_ptr<TrainingEntry>& entry,
                                    std::vector<at::Tensor> inputs);
/// The values of the entry's size symbols at a call with these forward inputs (empty where the
/// entry serves only its traced sizes).
std::vector<int64_t> trainingSymbolValues(const TrainingEntry& entry, const std::vector<at::Tensor>& inputs);
/// The structure of the user-visible output.
const Value& trainingOutput(const TrainingEntry& entry);
/// The plan as a Python object (thunder._C.TrainingPlan).
py::object trainingPlan(const TrainingEntry& entry);

}  // namespace thunder::python
