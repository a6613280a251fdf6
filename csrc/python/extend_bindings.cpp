// Bindings for thunder.extend: executors written in Python. An operator executor registers
// operators (symbols whose meta function or decomposition is a Python function and whose kernel
// calls Python) and implementations of existing symbols (Python checkers and execution
// transforms); a fusion executor's pass is a Python function over a trace. The Python side
// (python/thunder/extend/__init__.py) wraps every user callable so that its errors name the
// executor and the operator; this file only calls those wrappers.
#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codegen/python_printer.h"
#include "executors/executor.h"
#include "executors/region_executor.h"
#include "ir/error.h"
#include "python/module.h"
#include "runtime/kernels.h"

namespace thunder::python {
namespace {

/// A Python object held by C++ state that may outlive the interpreter (the executor and kernel
/// registries are static): it is released under the GIL, or leaked once Python has finalized.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(py::object o) : obj_(new py::object(std::move(o)), &release) {}
  const py::object& get() const { return *obj_; }

 private:
  static void release(py::object* o) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete o;
    } else {
      o->release();
      delete o;
    }
  }
  std::shared_ptr<py::object> obj_;
};

/// What the traced calls of an operator returned: whether the output is a tuple and how long it
/// is (when every call agreed), and which items were tensors in every call. The kernel checks
/// what the Python fn returns against it.
struct OutputSpec {
  bool seen = false;
  bool consistent = true;
  bool sequence = false;
  std::vector<bool> tensorAt;

  void record(const Value& out) {
    std::vector<bool> at;
    if (out.isSequence()) {
      for (const Value& x : out.items()) at.push_back(x.isTensor());
    } else {
      at.push_back(out.isTensor());
    }
    if (!seen) {
      seen = true;
      sequence = out.isSequence();
      tensorAt = std::move(at);
      return;
    }
    if (sequence != out.isSequence() || tensorAt.size() != at.size()) {
      consistent = false;
      return;
    }
    for (size_t i = 0; i < at.size(); ++i) tensorAt[i] = tensorAt[i] && at[i];
  }
};

/// Splits one value per parameter into Python positional and keyword arguments: keyword-only
/// parameters are passed by name, a varargs parameter is spread.
template <typename T, typename Convert>
std::pair<py::tuple, py::dict> splitArgs(const std::vector<Param>& params, const std::vector<T>& args,
                                         Convert convert) {
  py::list pos;
  py::dict kw;
  for (size_t i = 0; i < args.size(); ++i) {
    const Param* p = i < params.size() ? &params[i] : nullptr;
    if (p && p->kwOnly) {
      kw[py::str(p->name)] = convert(args[i]);
    } else if (p && p->varargs) {
      for (py::handle x : convert(args[i])) pos.append(x);
    } else {
      pos.append(convert(args[i]));
    }
  }
  return {py::tuple(pos), kw};
}

py::object valueToPython(const Value& v) { return fromValue(v); }

/// A kernel argument as Python: tensors stay tensors, int lists become tuples.
py::object ivalueToPython(const c10::IValue& v) {
  if (v.isTensor()) return py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor()));
  if (v.isNone()) return py::none();
  if (v.isBool()) return py::bool_(v.toBool());
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isComplexDouble()) {
    c10::complex<double> c = v.toComplexDouble();
    return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(c.real(), c.imag()));
  }
  if (v.isString()) return py::str(v.toStringRef());
  if (v.isDevice()) return py::reinterpret_steal<py::object>(THPDevice_New(v.toDevice()));
  if (v.isIntList()) return py::tuple(py::cast(v.toIntVector()));
  if (v.isTensorList()) {
    py::list l;
    for (const at::Tensor& t : v.toTensorVector())
      l.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(t)));
    return l;
  }
  if (v.isList()) {
    py::list l;
    for (const c10::IValue& x : v.toListRef()) l.append(ivalueToPython(x));
    return l;
  }
  if (v.isTuple() && v.toTupleRef().elements().size() == 3) {  // a slice (runtime/program.cpp)
    const auto& e = v.toTupleRef().elements();
    return py::reinterpret_steal<py::object>(
        PySlice_New(ivalueToPython(e[0]).ptr(), ivalueToPython(e[1]).ptr(), ivalueToPython(e[2]).ptr()));
  }
  throw InternalError("extend: cannot pass a " + v.tagKind() + " to a Python kernel");
}

/// The trace-time half of an operator: calls the (wrapped) like or meta function on proxies.
SymbolFn tracedFn(PyRef f, std::vector<Param> params, std::shared_ptr<OutputSpec> spec) {
  return [f = std::move(f), params = std::move(params), spec](const std::vector<Value>& args) {
    py::gil_scoped_acquire gil;
    auto [pos, kw] = splitArgs(params, args, valueToPython);
    Value out = toValue(f.get()(*pos, **kw));
    spec->record(out);
    return out;
  };
}

/// The run-time half of an operator: calls the (wrapped) fn on real tensors and checks its
/// result against the outputs the traced calls had.
runtime::Kernel pythonKernel(std::string what, PyRef fn, std::vector<Param> params,
                             std::shared_ptr<OutputSpec> spec) {
  return [what = std::move(what), fn = std::move(fn), params = std::move(params),
          spec](runtime::KernelArgs& ka) -> c10::IValue {
    py::gil_scoped_acquire gil;
    auto [pos, kw] = splitArgs(params, ka.v, ivalueToPython);
    py::object r = fn.get()(*pos, **kw);
    auto item = [&](py::handle x, size_t i) -> c10::IValue {
      bool isTensor = THPVariable_Check(x.ptr());
      bool wantTensor = spec->seen && i < spec->tensorAt.size() && spec->tensorAt[i];
      THUNDER_CHECK_KIND(!wantTensor || isTensor, ErrorKind::Type, what, ": fn returned ",
                         std::string(py::str(py::type::handle_of(x).attr("__name__"))),
                         " for output ", i, ", but the traced call made a tensor there");
      return isTensor ? c10::IValue(THPVariable_Unpack(x.ptr())) : c10::IValue();
    };
    bool isSequence = py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r);
    if (spec->seen && spec->consistent) {
      THUNDER_CHECK_KIND(isSequence == spec->sequence, ErrorKind::Type, what, ": fn returned ",
                         isSequence ? "a sequence" : "a single value", ", but the operator ",
                         spec->sequence ? "returns a tuple" : "returns a single value");
      if (isSequence)
        THUNDER_CHECK_KIND(py::len(r) == spec->tensorAt.size(), ErrorKind::Type, what,
                           ": fn returned ", py::len(r), " values, but the operator has ",
                           spec->tensorAt.size(), " outputs");
    }
    if (!isSequence) return item(r, 0);
    std::vector<c10::IValue> items;
    size_t i = 0;
    for (py::handle x : r) items.push_back(item(x, i++));
    return c10::ivalue::Tuple::create(std::move(items));
  };
}

/// Parameters from Python: (name, kind, has_default, default) with kind "positional",
/// "keyword" or "varargs".
std::vector<Param> toParams(const py::list& spec) {
  std::vector<Param> params;
  for (py::handle h : spec) {
    auto t = h.cast<py::tuple>();
    Param p;
    p.name = t[0].cast<std::string>();
    std::string kind = t[1].cast<std::string>();
    p.kwOnly = kind == "keyword";
    p.varargs = kind == "varargs";
    p.hasDefault = t[2].cast<bool>();
    if (p.hasDefault) p.defaultValue = toValue(t[3]);
    params.push_back(std::move(p));
  }
  return params;
}

uint32_t toTags(const std::vector<std::string>& names) {
  static const std::pair<const char*, Tag> kTags[] = {
      {"SHAPE_OP", kShapeOp},   {"REDUCTION_OP", kReductionOp}, {"RANDOM_OP", kRandomOp},
      {"MATMUL_OP", kMatmulOp}, {"DONT_DCE", kDontDce},         {"ELEMENTWISE", kElementwise},
      {"CREATION", kCreation}};
  uint32_t tags = kNoTags;
  for (const std::string& n : names) {
    bool found = false;
    for (const auto& [name, tag] : kTags) {
      if (n == name) {
        tags |= tag;
        found = true;
      }
    }
    THUNDER_CHECK_KIND(found, ErrorKind::Value, "unknown tag '", n,
                       "' (expected one of SHAPE_OP, REDUCTION_OP, RANDOM_OP, MATMUL_OP, DONT_DCE, "
                       "ELEMENTWISE, CREATION)");
  }
  return tags;
}

Executor& executorNamed(const std::string& name) {
  Executor* ex = ExecutorRegistry::get().find(name);
  THUNDER_CHECK_KIND(ex != nullptr, ErrorKind::Value, "unknown executor '", name, "'");
  return *ex;
}

/// A fusion executor whose pass is a Python function from trace to trace.
class PyFusionExecutor : public Executor {
 public:
  PyFusionExecutor(std::string name, std::string version, PyRef pass)
      : Executor(std::move(name), std::move(version)), pass_(std::move(pass)) {}
  bool isFusion() const override { return true; }
  Trace fusionPass(const Trace& trace) const override {
    py::gil_scoped_acquire gil;
    py::object r = pass_.get()(std::make_shared<Trace>(trace));
    return *r.cast<std::shared_ptr<Trace>>();
  }

 private:
  PyRef pass_;
};

/// A region executor's compiler: prints the region's program as Python, hands (name, source) to
/// the Python `compile_region` with the device it runs on ("cuda:0"), which returns a callable of
/// the program's inputs (or None), and makes the executor symbol whose kernel calls it.
RegionCompiler pythonRegionCompiler(std::string executor, PyRef compileRegion) {
  return [executor = std::move(executor), compileRegion](const Trace& program,
                                                          const Device& device) -> std::shared_ptr<const Symbol> {
    py::gil_scoped_acquire gil;
    py::object fn = compileRegion.get()(program.fnName, printTrace(program), device.str());
    if (fn.is_none()) return nullptr;
    std::vector<TensorPtr> outs;
    program.output.collectTensors(outs);
    const size_t numOutputs = outs.size();
    const std::string what = "executor '" + executor + "', region " + program.fnName;
    std::shared_ptr<const Symbol> sym = runtime::makeOwnedExecSymbol(executor, program.fnName);
    auto kernel = [what, numOutputs, fn = PyRef(fn)](runtime::KernelArgs& ka) -> c10::IValue {
      py::gil_scoped_acquire gil;
      py::tuple args(ka.v.size());
      for (size_t i = 0; i < ka.v.size(); ++i) args[i] = ivalueToPython(ka.v[i]);
      py::object r = fn.get()(*args);
      THUNDER_CHECK(py::isinstance<py::tuple>(r) || py::isinstance<py::list>(r), what,
                    ": expected a tuple of ", numOutputs, " tensors, but got ",
                    std::string(py::str(py::type::handle_of(r).attr("__name__"))));
      THUNDER_CHECK(py::len(r) == numOutputs, what, ": expected ", numOutputs,
                    " tensors, but got ", py::len(r));
      std::vector<c10::IValue> items;
      for (py::handle x : r) {
        THUNDER_CHECK(THPVariable_Check(x.ptr()), what, ": returned a non-tensor output");
        items.emplace_back(THPVariable_Unpack(x.ptr()));
      }
      return c10::ivalue::Tuple::create(std::move(items));
    };
    runtime::setKernel(sym.get(), std::move(kernel));
    return sym;
  };
}

/// TensorProxy(name=None, *, like=None, shape=None, device=None, dtype=None, requires_grad=None):
/// a new proxy in the trace being recorded, with like's metadata where not given.
TensorPtr newTensorProxy(py::object name, py::object like, py::object shape, py::object device,
                         py::object dtype, py::object requiresGrad) {
  TraceContext& ctx = requireContext("TensorProxy()");
  auto t = std::make_shared<TensorProxy>();
  if (!like.is_none()) {
    THUNDER_CHECK_KIND(py::isinstance<TensorProxy>(like), ErrorKind::Type,
                       "TensorProxy(): like= must be a TensorProxy, not ",
                       std::string(py::str(py::type::handle_of(like).attr("__name__"))));
    *t = *like.cast<TensorPtr>();
    t->requiresGrad = false;
  } else {
    THUNDER_CHECK_KIND(!shape.is_none() && !dtype.is_none(), ErrorKind::Type,
                       "TensorProxy(): give like= or both shape= and dtype=");
  }
  if (!shape.is_none()) {
    Value s = toValue(shape);
    THUNDER_CHECK_KIND(s.isSequence(), ErrorKind::Type,
                       "TensorProxy(): shape= must be a sequence of ints, not ", describe(s));
    for (const Value& x : s.items())
      THUNDER_CHECK_KIND(x.isInt() && x.toInt() >= 0, ErrorKind::Value,
                         "TensorProxy(): shape= must hold non-negative ints, got ", describe(s));
    t->shape = s.toInts();
  }
  if (!dtype.is_none()) {
    Value d = toValue(dtype);
    THUNDER_CHECK_KIND(d.isDType(), ErrorKind::Type, "TensorProxy(): dtype= must be a dtype, not ",
                       describe(d));
    t->dtype = d.toDType();
  }
  if (!device.is_none()) {
    Value d = toValue(device);
    THUNDER_CHECK_KIND(d.isDevice() || d.isString(), ErrorKind::Type,
                       "TensorProxy(): device= must be a device, not ", describe(d));
    t->device = d.isDevice() ? d.toDevice() : Device::parse(d.toString());
  }
  if (!requiresGrad.is_none()) t->requiresGrad = requiresGrad.cast<bool>();
  Trace& trace = ctx.trace();
  if (name.is_none()) {
    t->name = trace.newName();
  } else {
    t->name = name.cast<std::string>();
    THUNDER_CHECK_KIND(!trace.names.count(t->name), ErrorKind::Value, "TensorProxy(): the name '",
                       t->name, "' is already used in this trace");
    trace.reserveName(t->name);
  }
  return t;
}

void init(py::module_& m) {
  auto proxy = py::reinterpret_borrow<py::class_<TensorProxy, TensorPtr>>(m.attr("TensorProxy"));
  proxy.def(py::init(&newTensorProxy), py::arg("name") = py::none(), py::kw_only(),
            py::arg("like") = py::none(), py::arg("shape") = py::none(),
            py::arg("device") = py::none(), py::arg("dtype") = py::none(),
            py::arg("requires_grad") = py::none());

  m.def("extend_add_executor",
        [](const std::string& name, const std::string& version, py::object fusionPass) {
          std::shared_ptr<Executor> ex;
          if (fusionPass.is_none()) {
            ex = std::make_shared<Executor>(name, version);
          } else {
            ex = std::make_shared<PyFusionExecutor>(name, version, PyRef(fusionPass));
          }
          ExecutorRegistry::get().add(std::move(ex));
        },
        "Adds an executor defined in Python (a fusion executor when fusion_pass is given).");
  m.def("extend_add_region_executor",
        [](const std::string& name, const std::string& version, const std::string& prefix,
           py::object compileRegion) {
          ExecutorRegistry::get().add(std::make_shared<RegionExecutor>(
              name, version, prefix, pythonRegionCompiler(name, PyRef(compileRegion))));
        },
        py::arg("name"), py::arg("version"), py::arg("prefix"), py::arg("compile_region"),
        "Adds a fusion executor over the fuser's regions of torch-executor calls: "
        "compile_region(name, source, device) returns a callable running one region's Python "
        "program (or None to decline it).");
  m.def("extend_remove_executor", [](const std::string& name) {
    ExecutorRegistry::get().remove(name);
  });
  m.def("extend_executor_info", [](const std::string& name) {
    Executor& ex = executorNamed(name);
    return py::make_tuple(ex.version(), ex.isFusion());
  });
  m.def(
      "extend_register_operator",
      [](const std::string& executor, const std::string& name, const py::list& paramSpec,
         py::object like, py::object meta, py::object fn, const std::vector<std::string>& tags,
         const std::string& printAs) {
        Executor& ex = executorNamed(executor);
        std::vector<Param> params = toParams(paramSpec);
        auto spec = std::make_shared<OutputSpec>();
        auto sym = std::make_unique<Symbol>();
        sym->module = executor;
        sym->name = name;
        sym->params = params;
        sym->tags = toTags(tags);
        sym->style = PrintStyle::Torch;
        sym->executor = executor;
        sym->bareName = true;
        sym->printAs = printAs;
        if (!like.is_none()) {
          sym->impl = tracedFn(PyRef(like), params, spec);
        } else {
          sym->meta = tracedFn(PyRef(meta), params, spec);
        }
        // put: an executor of the same name deregistered earlier may have left this id behind.
        const Symbol* s = SymbolRegistry::get().put(std::move(sym));
        runtime::setKernel(s, pythonKernel("executor '" + executor + "', operator '" + name + "'",
                                           PyRef(fn), params, spec));
        ex.removeImplementations(s->id());
        ex.addImplementation(s->id(), Implementation{s, {}, {}});
        return s;
      },
      py::arg("executor"), py::arg("name"), py::arg("params"), py::arg("like"), py::arg("meta"),
      py::arg("fn"), py::arg("tags"), py::arg("print_as") = std::string(),
      py::return_value_policy::reference,
      "Registers an operator of an executor: a symbol printed by its bare name whose "
      "decomposition (like) or meta function and kernel (fn) are Python functions.");
  m.def(
      "extend_use_native_kernel",
      [](const Symbol* op, const std::string& name) {
        const runtime::Kernel* kernel = runtime::nativeKernel(name);
        if (kernel == nullptr) return false;
        runtime::setKernel(op, *kernel);
        return true;
      },
      py::arg("op"), py::arg("name"),
      "Runs an operator (from extend_register_operator) with the C++ kernel of that name instead "
      "of its Python fn; False (and the fn stays) where there is none.");
  m.def(
      "extend_register_implementation",
      [](const std::string& executor, const std::string& symbolId, const Symbol* op,
         py::object checker, py::object transform) {
        Executor& ex = executorNamed(executor);
        const Symbol* semantic = SymbolRegistry::get().find(symbolId);
        THUNDER_CHECK_KIND(semantic != nullptr, ErrorKind::Value, "executor '", executor,
                           "': no symbol named '", symbolId, "' to implement");
        Implementation impl;
        impl.execSymbol = op;
        if (op && transform.is_none()) {
          THUNDER_CHECK_KIND(runtime::findKernel(op) != nullptr, ErrorKind::Value, "executor '",
                             executor, "': ", op->id(), " has no kernel, so it cannot implement ",
                             symbolId);
          THUNDER_CHECK_KIND(op->params.size() == semantic->params.size(), ErrorKind::Type,
                             "executor '", executor, "': ", op->id(), " takes ",
                             op->params.size(), " arguments but ", symbolId, " has ",
                             semantic->params.size(), "; use execution_transform= to adapt them");
        }
        std::vector<Param> params = semantic->params;
        if (!checker.is_none()) {
          impl.checker = [c = PyRef(checker), params](const BoundSymbol& b) {
            py::gil_scoped_acquire gil;
            auto [pos, kw] = splitArgs(params, b.args, valueToPython);
            return c.get()(*pos, **kw).cast<bool>();
          };
        }
        if (!transform.is_none()) {
          impl.executionTransform = [t = PyRef(transform), params](const std::vector<Value>& args) {
            py::gil_scoped_acquire gil;
            auto [pos, kw] = splitArgs(params, args, valueToPython);
            return toValue(t.get()(*pos, **kw));
          };
        }
        ex.removeImplementations(symbolId);
        ex.addImplementation(symbolId, std::move(impl));
      },
      "Replaces an executor's implementation of a symbol: an operator to run it with (op), a "
      "checker and an execution transform, each a Python function of the call's arguments.");
}

const bool registered = (moduleInits().push_back(init), true);

}  // namespace
}  // namespace thunder::python
