// Bindings of the fusion executor: generated sources, NVRTC compilation, compile statistics.
#include <pybind11/stl.h>

#include "python/module.h"
#include "runtime/fusion_runtime.h"

namespace thunder::python {
namespace {

void init(py::module_& m) {
  runtime::registerFusionExecutor();
  m.def("fusion_sources", [](const std::shared_ptr<Trace>& trace) {
    py::dict out;
    for (const BoundSymbol& b : trace->bsyms)
      if (b.sym->executor == "fuser") out[py::str(b.sym->name)] = runtime::fusionSource(b.sym);
    return out;
  }, "The generated source of every fusion in an execution trace, by name.");
  m.def("nvrtc_available", &runtime::nvrtcAvailable);
  m.def("nvrtc_compile", &runtime::nvrtcCompile, py::arg("source"), py::arg("arch"),
        "Compiles CUDA source with NVRTC; returns the CUBIN's size. Needs no GPU.");
  m.def("fusion_stats", [] {
    runtime::FusionStats s = runtime::fusionStats();
    py::dict d;
    d["compiled"] = s.compiled;
    d["disk_hits"] = s.diskHits;
    return d;
  });
}

const bool registered = (moduleInits().push_back(init), true);

}  // namespace
}  // namespace thunder::python
