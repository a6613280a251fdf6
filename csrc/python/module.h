// Shared by the translation units of thunder._C: value conversion and module registration.
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executors/executor.h"
#include "ir/trace.h"

namespace thunder::python {

namespace py = pybind11;

/// Converts a Python object (proxy, number, string, dtype, device, container, slice, real tensor
/// captured as a closure input while tracing) to a trace value; TypeError otherwise.
Value toValue(py::handle obj);
/// Converts a trace value to Python (proxies stay proxies, dtypes become torch dtypes).
py::object fromValue(const Value& v);
/// A proxy with a real tensor's metadata.
TensorPtr proxyFor(const at::Tensor& t, const std::string& name);

/// The passes after acquisition (dce, claiming, del_last_used), each trace kept in order.
std::vector<std::shared_ptr<Trace>> runPipeline(std::shared_ptr<Trace> computation,
                                                const std::vector<std::string>& executors,
                                                bool verifyEach);

/// Functions that add bindings to thunder._C; a translation unit registers its own with a static
/// initializer: `static const bool registered = (moduleInits().push_back(init), true);`.
std::vector<std::function<void(py::module_&)>>& moduleInits();

}  // namespace thunder::python
