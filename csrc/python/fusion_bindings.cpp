// Bindings of the fusion executor: generated sources, NVRTC compilation, compile statistics.
#include <cstdio>
#include <cstdlib>
#include <pybind11/stl.h>

#include <set>

#include "codegen/fusion_codegen.h"
#include "executors/cross_entropy.h"
#include "executors/fusion_executor.h"
#include "ir/error.h"
#include "python/module.h"
#include "runtime/fusion_runtime.h"
#include "runtime/kernels.h"

#include <torch/csrc/autograd/python_variable.h>

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
  m.def("generate_fusion_sources", [](const std::shared_ptr<Trace>& trace, const std::string& target, bool variants) {
    // Partitions a trace as the fuser does and emits each region's source for `target` ("cuda"
    // or "cpp"), whatever device the trace is on: for golden files and NVRTC checks without a GPU.
    THUNDER_CHECK_KIND(target == "cuda" || target == "cpp", ErrorKind::Value,
                       "generate_fusion_sources: target must be 'cuda' or 'cpp', got '", target, "'");
    std::vector<std::pair<std::string, std::string>> out;
    int counter = 0;
    const std::unordered_set<const TensorProxy*> casts = codegen::castOutputs(*trace);
    // An accepted region as the fuser makes it: one call of a fusion symbol (the partitioned
    // trace itself is not used; the partition tells a fused call from the calls it left).
    static Symbol fusionSym = [] {
      Symbol s;
      s.name = "fusion";
      s.executor = "generate_fusion_sources";
      return s;
    }();
    auto accepted = [](const FusionRegion& r) { return std::optional<BoundSymbol>(r.asCall(&fusionSym)); };
    // CUDA sources of a trace on another device include the gathers the fuser fuses on CUDA.
    auto fusible = [&](const BoundSymbol& b) {
      return codegen::isFusiblePrim(b) || (target == "cuda" && codegen::isFusibleGather(b));
    };
    fusionPartition(*trace, fusible, [&](const FusionRegion& r) -> std::optional<BoundSymbol> {
      if (!worthFusing(r)) return std::nullopt;
      std::string name = (target == "cuda" ? "cudaFusion" : "cpuFusion") + std::to_string(counter);
      codegen::KernelProgram prog;
      std::string why;
      if (!codegen::lowerRegion(name, r.prims, r.inputs, r.outputs, prog, why, &casts)) {
        static const bool debug = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
        if (debug) std::fprintf(stderr, "fuser: a region of %zu prims is not fused: %s\n", r.prims.size(), why.c_str());
        return std::nullopt;
      }
      ++counter;
      if (target != "cuda" || !variants) {
        out.emplace_back(name, target == "cuda" ? codegen::emitCuda(prog)
                                                : codegen::emitCpp(prog, codegen::contiguousPattern(prog)));
        return accepted(r);
      }
      // Every kind of launch variant the runtime may pick for other strides and row lengths.
      codegen::CudaVariant predicted = codegen::predictCudaVariant(prog);
      std::vector<codegen::CudaVariant> vs{predicted};
      codegen::CudaVariant scalar;
      scalar.row = predicted.row;
      scalar.threads = predicted.row ? 1024 : 256;
      scalar.idx32 = true;
      vs.push_back(scalar);
      scalar.idx32 = false;
      vs.push_back(scalar);
      if (predicted.row) {
        for (int64_t L : {int64_t(100), int64_t(2048), int64_t(8192), int64_t(1) << 20}) {
          // 2048: one row of it (decoding) takes a block
          codegen::RowLaunch l = codegen::chooseRowLaunch(L, predicted.vec, 0, false, L == 2048 ? 1 : -1, !prog.indexed());
          codegen::CudaVariant v = predicted;
          v.items = l.items;
          v.warp = l.warp;
          v.tpr = l.tpr;
          v.threads = l.items ? l.threads : 1024;
          vs.push_back(v);
        }
      } else if (predicted.vec > 1) {
        codegen::CudaVariant v = predicted;
        for (char& c : v.pattern) c = c == '1' ? 'g' : c;  // strided along the row
        v.idx32 = false;
        vs.push_back(v);
        v = predicted;
        for (char& c : v.pattern) c = '0';  // expanded along the row
        vs.push_back(v);
      }
      std::set<std::string> seen;
      for (const codegen::CudaVariant& v : vs)
        if (seen.insert(v.entry(name)).second) out.emplace_back(v.entry(name), codegen::emitCuda(prog, v));
      return accepted(r);
    }, codegen::isTerminalSum);
    return out;
  }, py::arg("trace"), py::arg("target"), py::arg("variants") = false,
     "Partitions a trace as the fuser does and returns (name, source) per region for 'cuda' or "
     "'cpp'; with variants=True (CUDA), one entry per kind of launch variant.");
  m.def("fusion_callables", [](const std::shared_ptr<Trace>& trace) {
    // Python callables that launch each fusion's kernel, so a printed execution trace with
    // fusions runs as Python: {"cudaFusion0": fn(*tensors) -> list of tensors}.
    py::dict out;
    for (const BoundSymbol& b : trace->bsyms) {
      if (!runtime::isFusion(b.sym)) continue;
      const Symbol* sym = b.sym;
      std::vector<TensorPtr> outs = b.outputTensors();
      at::ScalarType dt = outs.empty() ? at::kFloat : runtime::toScalarType(outs[0]->dtype);
      out[py::str(sym->name)] = py::cpp_function([sym, dt](py::args args) {
        std::vector<c10::IValue> ivalues;
        for (py::handle a : args) ivalues.push_back(THPVariable_Unpack(a.ptr()));
        runtime::KernelArgs ka{ivalues, dt, ivalues.empty() ? c10::Device(c10::kCPU) : ivalues[0].toTensor().device()};
        c10::IValue result = (*runtime::findKernel(sym))(ka);
        py::list l;
        for (const c10::IValue& v : result.toTupleRef().elements())
          l.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor())));
        return l;
      });
    }
    return out;
  });
  m.def("nvrtc_available", &runtime::nvrtcAvailable);
  m.def("cpu_compiler_available", &runtime::cpuCompilerAvailable,
        "Whether the system C++ compiler builds the fuser's CPU kernels (probed once per process).");
  m.def("cpu_compile_flags", &runtime::cpuCompileFlags,
        "The flags the fuser's CPU kernels are compiled with (-march=$THUNDER_CPU_MARCH, native where unset).");
  m.def("nvrtc_compile", &runtime::nvrtcCompile, py::arg("source"), py::arg("arch"),
        "Compiles CUDA source with NVRTC; returns the CUBIN's size. Needs no GPU.");
  m.def(
      "cross_entropy_cuda_source",
      [](const std::string& logitsDType, const std::string& labelsDType, int block, int vec) {
        auto parse = [](const std::string& n) {
          std::optional<DType> d = dtypeFromName(n);
          THUNDER_CHECK_KIND(d.has_value(), ErrorKind::Value,
                             "cross_entropy_cuda_source: unknown dtype '", n, "'");
          return *d;
        };
        return xent::cudaSource(parse(logitsDType), parse(labelsDType), block, vec);
      },
      py::arg("logits_dtype"), py::arg("labels_dtype"), py::arg("block"), py::arg("vec") = 1,
      "The CUDA source of the apex executor's cross-entropy kernels (dtypes by name: 'float32').");
  m.def("cross_entropy_block_size", &xent::blockSize, py::arg("classes"));
  m.def(
      "max_pool2d_cuda_source",
      [](const std::string& dtype) {
        std::optional<DType> d = dtypeFromName(dtype);
        THUNDER_CHECK_KIND(d && (*d == DType::Float32 || *d == DType::BFloat16 || *d == DType::Float16),
                           ErrorKind::Value, "max_pool2d_cuda_source: expected float32, bfloat16 or float16, but got '",
                           dtype, "'");
        return runtime::maxPool2dCudaSource(*d);
      },
      py::arg("dtype"), "The CUDA source of the max-pooling kernel that inference runs (no indices).");
  m.def("apex_cross_entropy_forward",
        [](py::handle logits, py::handle labels, const std::string& reduction, double smoothing,
           int64_t ignoreIndex) {
          auto [loss, mlse] = runtime::crossEntropyForward(THPVariable_Unpack(logits.ptr()),
                                                           THPVariable_Unpack(labels.ptr()),
                                                           reduction, smoothing, ignoreIndex);
          return py::make_tuple(py::reinterpret_steal<py::object>(THPVariable_Wrap(loss)),
                                py::reinterpret_steal<py::object>(THPVariable_Wrap(mlse)));
        });
  m.def("apex_cross_entropy_backward", [](py::handle grad, py::handle logits, py::handle labels,
                                          py::handle mlse, double smoothing) {
    at::Tensor out = runtime::crossEntropyBackward(
        THPVariable_Unpack(grad.ptr()), THPVariable_Unpack(logits.ptr()),
        THPVariable_Unpack(labels.ptr()), THPVariable_Unpack(mlse.ptr()), smoothing);
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(out));
  });
  m.def(
      "apex_native_kernels",
      [](const Symbol* forward, const Symbol* upcast, const Symbol* backward) {
        // The apex operators' kernels in C++: no Python call per step, and the tensors they
        // read get no Python objects (which would hold references past their last use). The
        // backward writes the gradient over the logits when the program hands it logits
        // nothing else reads.
        auto fwd = [](bool roundLoss) {
          return [roundLoss](runtime::KernelArgs& a) -> c10::IValue {
            auto [loss, mlse] = runtime::crossEntropyForward(a.t(0), a.t(1), a.str(2), a.d(3), -1);
            if (roundLoss) loss = loss.to(a.t(0).scalar_type());
            return c10::ivalue::Tuple::create({loss, mlse});
          };
        };
        runtime::setKernel(forward, fwd(true));
        runtime::setKernel(upcast, fwd(false));
        runtime::setKernel(backward, [](runtime::KernelArgs& a) -> c10::IValue {
          return runtime::crossEntropyBackward(a.t(0), a.t(1), a.t(2), a.t(3), a.d(4), a.owned(1));
        });
      },
      py::arg("forward"), py::arg("upcast"), py::arg("backward"),
      "Runs apex_cross_entropy, apex_cross_entropy_upcast and apex_cross_entropy_backward with C++ "
      "kernels.");
  m.def("fusion_stats", [] {
    runtime::FusionStats s = runtime::fusionStats();
    py::dict d;
    d["compiled"] = s.compiled;
    d["disk_hits"] = s.diskHits;
    d["cpu_libraries"] = s.cpuLibraries;
    d["regions"] = s.regions;
    d["kernels"] = s.kernels;
    d["outputs_into_inputs"] = s.outputsIntoInputs;
    return d;
  }, "Kernels compiled in this process and loaded from the disk cache; CPU kernel libraries, "
     "compiled fusion regions and executor kernels alive now; CPU kernel outputs written into a "
     "dead input.");
}

const bool registered = (moduleInits().push_back(init), true);

}  // namespace
}  // namespace thunder::python
