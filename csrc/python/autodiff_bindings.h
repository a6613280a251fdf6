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
std::shared_ptr<TrainingEntry> makeTrainingEntry(py::handle plan);
/// Runs the forward program inside one autograd node whose backward runs the backward program;
/// returns the user-visible output tensors in the order of trainingOutput's tensors.
std::vector<at::Tensor> runTraining(const std::shared_ptr<TrainingEntry>& entry,
                                    std::vector<at::Tensor> inputs);
/// The structure of the user-visible output.
const Value& trainingOutput(const TrainingEntry& entry);
/// The plan as a Python object (thunder._C.TrainingPlan).
py::object trainingPlan(const TrainingEntry& entry);

}  // namespace thunder::python
