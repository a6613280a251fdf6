// Bindings of the fusion executor: generated sources, NVRTC compilation, compile statistics.
#include <pybind11/stl.h>

#include "codegen/fusion_codegen.h"
#include "executors/fusion_executor.h"
#include "ir/error.h"
#include "python/module.h"
#include "runtime/fusion_runtime.h"

namespace thunder::python {
namespace {

void init(py::module_& m) {
  runtime::registerFusionExecutor();
  m.def("fusion_sources", [](const std::shared_ptr<Trace>& trace) {
    py::dict out;
    for (const BoundSymbol& b : trace->bsyms)
      if (runtime::isFusion(b.sym)) out[py::str(b.sym->name)] = runtime::fusionSource(b.sym);
    return out;
  }, "The generated source of every fusion in an execution trace, by name.");
  m.def("generate_fusion_sources", [](const std::shared_ptr<Trace>& trace, const std::string& target) {
    // Partitions a trace as the fuser does and emits each region's source for `target` ("cuda"
    // or "cpp"), whatever device the trace is on: for golden files and NVRTC checks without a GPU.
    THUNDER_CHECK_KIND(target == "cuda" || target == "cpp", ErrorKind::Value,
                       "generate_fusion_sources: target must be 'cuda' or 'cpp', got '", target, "'");
    std::vector<std::pair<std::string, std::string>> out;
    int counter = 0;
    fusionPartition(*trace, codegen::isFusiblePrim, [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
      if (!worthFusing(r)) return std::nullopt;
      std::string name = (target == "cuda" ? "cudaFusion" : "cpuFusion") + std::to_string(counter);
      codegen::KernelProgram prog;
      std::string why;
      if (!codegen::lowerRegion(name, r.prims, r.inputs, r.outputs, prog, why)) return std::nullopt;
      ++counter;
      std::string pattern;
      for (const codegen::KInput& in : prog.inputs)
        pattern += !prog.iterShape.empty() && in.dimMap.back() >= 0 ? '1' : '0';
      out.emplace_back(name, target == "cuda" ? codegen::emitCuda(prog) : codegen::emitCpp(prog, pattern));
      return std::nullopt;
    });
    return out;
  });
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
