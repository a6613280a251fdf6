// thunder._C: the bindings. The only code that sees both Python and the C++ core.
#include <ATen/ATen.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_dtypes.h>

#include <chrono>
#include <optional>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "codegen/fusion_codegen.h"
#include "codegen/python_printer.h"
#include "executors/executor.h"
#include "ir/error.h"
#include "ir/verifier.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "ops/symbolic_rules.h"
#include "ops/type_promotion.h"
#include "runtime/fusion_runtime.h"
#include "runtime/program.h"
#include "transforms/grouped_casts.h"
#include "transforms/conv_bias.h"
#include "transforms/cse.h"
#include "transforms/del_last_used.h"
#include "transforms/cat_reshapes.h"
#include "transforms/matmul_operands.h"
#include "transforms/column_sums.h"
#include "transforms/pad_sums.h"
#include "transforms/pipeline.h"
#include "transforms/prefetch.h"
#include "python/autodiff_bindings.h"
#include "python/module.h"

namespace py = pybind11;

namespace thunder::python {

// ---- Python <-> Value ------------------------------------------------------------------------

/// Python-side hooks set by thunder/__init__.py.
struct Hooks {
  py::object makeDevice;  // (str) -> thunder.core.devices.Device
  py::object proxyType;   // thunder.core.proxies.TensorProxy, the Python view of TensorPtr
};
namespace {
Hooks& hooks() {
  static Hooks* h = new Hooks();  // leaked: must outlive the interpreter's teardown
  return *h;
}

/// Real tensors met while tracing become extra trace inputs ("closures").
struct Capture {
  Trace* trace = nullptr;
  std::vector<at::Tensor> tensors;
  std::unordered_map<const void*, TensorPtr> byImpl;
  /// Dimensions to make size symbols where the tensor is captured (TracingContext.mark_dynamic).
  std::unordered_map<const void*, std::vector<int64_t>> dynamic;
};

/// Makes the dimensions `dynamic` of the trace's last input `p` size symbols; sizes 0 and 1 stay
/// static (broadcasting and squeezing treat them apart), and every symbol is assumed at least 2.
void addSizeSymbols(Trace& t, TensorProxy& p, std::vector<int64_t> dynamic) {
  std::vector<SymInt> dims = p.symShape();
  for (int64_t d : dynamic) {
    if (d < 0) d += p.ndim();
    if (d < 0 || d >= p.ndim() || dims[d].symbolic() || p.shape[d] < 2) continue;
    int k = static_cast<int>(t.symbols.size());
    t.symbols.push_back({static_cast<int>(t.inputs.size()) - 1, static_cast<int>(d), p.shape[d]});
    dims[d].e = symbolExpr(k);
    t.addGuard(guardLessEqual(SymInt{2, nullptr}, dims[d]));
  }
  p.setSymShape(dims);
}
thread_local std::vector<Capture*> tlsCaptures;
}  // namespace

Device fromAtenDevice(const c10::Device& d) {
  if (d.is_cuda()) return {DeviceType::CUDA, d.has_index() ? d.index() : 0};
  if (d.is_meta()) return {DeviceType::Meta, 0};
  THUNDER_CHECK_KIND(d.is_cpu(), ErrorKind::NotImplemented, "thunder supports the cpu, cuda and meta devices, not '",
                     d.str(), "'");
  return {DeviceType::CPU, 0};
}

TensorPtr proxyFor(const at::Tensor& t, const std::string& name) {
  auto p = std::make_shared<TensorProxy>();
  p->name = name;
  p->shape = t.sizes().vec();
  p->dtype = runtime::fromScalarType(t.scalar_type());
  p->device = fromAtenDevice(t.device());
  p->requiresGrad = t.requires_grad();
  if (!t.is_contiguous()) p->setStrides(t.strides().vec());
  return p;
}

namespace {
TensorPtr captureTensor(const at::Tensor& t) {
  THUNDER_CHECK_KIND(!tlsCaptures.empty(), ErrorKind::Type,
                     "a torch.Tensor was passed to a thunder symbol outside of tracing");
  Capture& c = *tlsCaptures.back();
  auto it = c.byImpl.find(t.unsafeGetTensorImpl());
  if (it != c.byImpl.end()) return it->second;
  TensorPtr p = proxyFor(t, c.trace->newName("c"));
  c.trace->inputs.push_back(p);
  auto dyn = c.dynamic.find(t.unsafeGetTensorImpl());
  if (dyn != c.dynamic.end()) addSizeSymbols(*c.trace, *p, dyn->second);
  c.tensors.push_back(t);
  c.byImpl[t.unsafeGetTensorImpl()] = p;
  return p;
}
}  // namespace

/// An expression as Python holds it (thunder/core/symbolic.py): a constant and ((symbol,
/// coefficient), ...), in any order, zero coefficients allowed.
SymExpr exprOf(int64_t constant, py::handle terms) {
  SymExpr e;
  e.constant = constant;
  for (py::handle term : terms) {
    py::tuple kc = py::reinterpret_borrow<py::tuple>(term);
    if (kc[1].cast<int64_t>() != 0) e.terms.emplace_back(kc[0].cast<int>(), kc[1].cast<int64_t>());
  }
  std::sort(e.terms.begin(), e.terms.end());
  return e;
}

/// An expression's terms for Python: ((symbol, coefficient), ...).
py::tuple termsOf(const SymExpr& e) {
  py::list terms;
  for (const auto& [k, c] : e.terms) terms.append(py::make_tuple(k, c));
  return py::tuple(terms);
}

/// A Python SymInt's hint and expression: `_thunder_sym` is (hint, constant, terms).
SymInt symIntOf(py::handle obj) {
  py::tuple t = obj.attr("_thunder_sym");
  return {t[0].cast<int64_t>(), normalized(exprOf(t[1].cast<int64_t>(), t[2]))};
}

/// The Python SymInt of an int with an expression.
py::object pySymInt(const SymInt& v) {
  static py::object cls = py::module_::import("thunder.core.symbolic").attr("SymInt");
  return cls(v.hint, v.e->constant, termsOf(*v.e));
}

/// The expressions of a proxy's dimensions as Python values: () where all are static, else per
/// dimension None or (constant, ((symbol, coefficient), ...)).
py::tuple symDims(const TensorProxy& t) {
  if (!t.symbolic()) return py::tuple();
  py::list out;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const SymPtr& e = d < t.sym.size() ? t.sym[d] : nullptr;
    if (!e) {
      out.append(py::none());
      continue;
    }
    out.append(py::make_tuple(e->constant, termsOf(*e)));
  }
  return py::tuple(out);
}

Value toValue(py::handle obj) {
  if (obj.is_none()) return Value();
  if (py::isinstance<TensorProxy>(obj)) return Value(obj.cast<TensorPtr>());
  if (PyBool_Check(obj.ptr())) return Value(obj.ptr() == Py_True);
  if (PyLong_Check(obj.ptr())) return Value(static_cast<int64_t>(PyLong_AsLongLong(obj.ptr())));
  if (PyFloat_Check(obj.ptr())) return Value(PyFloat_AsDouble(obj.ptr()));
  if (PyComplex_Check(obj.ptr()))
    return Value(std::complex<double>(PyComplex_RealAsDouble(obj.ptr()), PyComplex_ImagAsDouble(obj.ptr())));
  if (PyUnicode_Check(obj.ptr())) return Value(obj.cast<std::string>());
  if (THPVariable_Check(obj.ptr())) return Value(captureTensor(THPVariable_Unpack(obj.ptr())));
  if (THPDtype_Check(obj.ptr()))
    return Value(runtime::fromScalarType(reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type));
  if (THPDevice_Check(obj.ptr())) return Value(fromAtenDevice(reinterpret_cast<THPDevice*>(obj.ptr())->device));
  if (PyTuple_Check(obj.ptr()) || PyList_Check(obj.ptr())) {
    std::vector<Value> items;
    for (py::handle x : obj) items.push_back(toValue(x));
    return PyList_Check(obj.ptr()) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (PyDict_Check(obj.ptr())) {
    std::vector<std::string> keys;
    std::vector<Value> items;
    for (auto kv : py::reinterpret_borrow<py::dict>(obj)) {
      keys.push_back(py::str(kv.first));
      items.push_back(toValue(kv.second));
    }
    return Value::dict(std::move(keys), std::move(items));
  }
  if (PySlice_Check(obj.ptr())) {
    py::object s = py::reinterpret_borrow<py::object>(obj);
    return Value::slice(toValue(s.attr("start")), toValue(s.attr("stop")), toValue(s.attr("step")));
  }
  if (obj.ptr() == Py_Ellipsis) return Value::ellipsis();
  // A size or an int computed from sizes while a trace has size symbols (thunder/core/symbolic.py).
  if (py::hasattr(obj, "_thunder_sym")) return Value(symIntOf(obj));
  // thunder's own dtype and device objects.
  if (py::hasattr(obj, "_thunder_dtype"))
    return Value(static_cast<DType>(obj.attr("_thunder_dtype").cast<int>()));
  if (py::hasattr(obj, "_thunder_device")) return Value(Device::parse(obj.attr("_thunder_device").cast<std::string>()));
  if (PyIndex_Check(obj.ptr())) return Value(static_cast<int64_t>(PyNumber_AsSsize_t(obj.ptr(), nullptr)));
  if (py::hasattr(obj, "__float__") && !py::hasattr(obj, "__len__")) return Value(obj.attr("__float__")().cast<double>());
  throw Error(ErrorKind::Type, "thunder cannot use a value of type " +
                                   std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
}

py::object fromValue(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None: return py::none();
    case Value::Kind::Bool: return py::bool_(v.toBool());
    case Value::Kind::Int: return v.symExpr() ? pySymInt(v.toSymInt()) : py::object(py::int_(v.toInt()));
    case Value::Kind::Float: return py::float_(v.toDouble());
    case Value::Kind::Complex: {
      auto c = v.toComplex();
      return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(c.real(), c.imag()));
    }
    case Value::Kind::String: return py::str(v.toString());
    case Value::Kind::DType:
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(runtime::toScalarType(v.toDType()))));
    case Value::Kind::Device: return hooks().makeDevice(v.toDevice().str());
    case Value::Kind::Tensor: return py::cast(v.toTensor());
    case Value::Kind::Tuple:
    case Value::Kind::List: {
      py::list l;
      for (const Value& x : v.items()) l.append(fromValue(x));
      return v.isTuple() ? py::object(py::tuple(l)) : py::object(l);
    }
    case Value::Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < v.items().size(); ++i) d[py::str(v.keys()[i])] = fromValue(v.items()[i]);
      return d;
    }
    case Value::Kind::Slice:
      return py::reinterpret_steal<py::object>(PySlice_New(fromValue(v.items()[0]).ptr(),
                                                           fromValue(v.items()[1]).ptr(),
                                                           fromValue(v.items()[2]).ptr()));
    case Value::Kind::Ellipsis: return py::reinterpret_borrow<py::object>(Py_Ellipsis);
  }
  return py::none();
}

namespace {

/// The caller's results in the layout eager gives them: a half-type CUDA convolution runs in
/// channels-last (torch_ops.cpp), and the kernels after it keep that layout, where eager's
/// results of NCHW inputs are contiguous (`out.view(n, -1)` on one works). A returned input is
/// left as it is.
void eagerLayouts(std::vector<at::Tensor>& outs, const std::function<std::vector<at::Tensor>()>& callInputs) {
  std::optional<std::vector<at::Tensor>> inputs;  // asked for only where an output may change
  for (at::Tensor& t : outs) {
    if (!t.defined() || t.dim() != 4 || !t.is_cuda() || !at::isReducedFloatingType(t.scalar_type()) ||
        t.is_contiguous() || !t.is_contiguous(at::MemoryFormat::ChannelsLast))
      continue;
    if (!inputs) {
      inputs = callInputs();
      // Eager keeps channels-last where its inputs are: their results stay as they are.
      for (const at::Tensor& x : *inputs)
        if (x.defined() && x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast))
          return;
    }
    bool returned = false;
    for (const at::Tensor& x : *inputs) returned = returned || (x.defined() && x.is_alias_of(t));
    if (!returned) t = t.contiguous();
  }
}

// ---- pytrees ---------------------------------------------------------------------------------

/// The structure of a flattened Python value: containers and leaf positions.
struct TreeSpec {
  enum class Kind : uint8_t { Leaf, Tuple, List, Dict } kind = Kind::Leaf;
  std::vector<TreeSpec> children;
  std::vector<py::object> keys;  // dict keys
  /// A dict or tuple subclass's type (transformers' ModelOutput, an OrderedDict, a namedtuple as
  /// PackedSequence), rebuilt as it; else null.
  py::object type;
};

/// Appends the leaves of a Python value; records its structure in `spec` (when given) and in
/// `key` (when given), which the per-call path uses alone, so it builds no spec.
void flatten(py::handle obj, std::vector<py::handle>& leaves, TreeSpec* spec, std::string* key) {
  PyObject* o = obj.ptr();
  TreeSpec::Kind kind;
  char open, close;
  if (PyTuple_Check(o) && !THPVariable_Check(o)) {
    kind = TreeSpec::Kind::Tuple, open = '(', close = ')';
  } else if (PyList_Check(o)) {
    kind = TreeSpec::Kind::List, open = '[', close = ']';
  } else if (PyDict_Check(o)) {
    kind = TreeSpec::Kind::Dict, open = '{', close = '}';
  } else {
    if (spec) spec->kind = TreeSpec::Kind::Leaf;
    leaves.push_back(obj);
    return;
  }
  if (spec) spec->kind = kind;
  if (key) key->push_back(open);
  if ((kind == TreeSpec::Kind::Dict && !PyDict_CheckExact(o)) || (kind == TreeSpec::Kind::Tuple && !PyTuple_CheckExact(o))) {
    // (the type joins the key: an entry rebuilds the container it was traced with)
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
    if (spec) spec->type = py::reinterpret_borrow<py::object>(type);
    if (key) key->append(reinterpret_cast<const char*>(&type), sizeof type);
  }
  if (kind == TreeSpec::Kind::Dict) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &v)) {
      if (spec) spec->keys.push_back(py::reinterpret_borrow<py::object>(k));
      if (key) {
        *key += py::str(k).cast<std::string>();
        key->push_back(':');
      }
      TreeSpec* child = nullptr;
      if (spec) child = &spec->children.emplace_back();
      flatten(v, leaves, child, key);
    }
  } else {
    Py_ssize_t n = kind == TreeSpec::Kind::Tuple ? PyTuple_GET_SIZE(o) : PyList_GET_SIZE(o);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = kind == TreeSpec::Kind::Tuple ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i);
      TreeSpec* child = nullptr;
      if (spec) child = &spec->children.emplace_back();
      flatten(item, leaves, child, key);
    }
  }
  if (key) key->push_back(close);
}

py::object unflatten(const TreeSpec& spec, const py::list& leaves, size_t& pos) {
  switch (spec.kind) {
    case TreeSpec::Kind::Leaf: return leaves[pos++];
    case TreeSpec::Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < spec.children.size(); ++i) d[spec.keys[i]] = unflatten(spec.children[i], leaves, pos);
      if (!spec.type) return d;
      // A dict subclass as it was: by keyword (a ModelOutput's fields), else from the mapping.
      bool strKeys = true;
      for (const py::object& k : spec.keys) strKeys = strKeys && PyUnicode_Check(k.ptr());
      try {
        return strKeys ? spec.type(**d) : spec.type(d);
      } catch (const py::error_already_set&) {
        return spec.type(d);
      }
    }
    default: {
      py::list l;
      for (const TreeSpec& c : spec.children) l.append(unflatten(c, leaves, pos));
      if (spec.kind != TreeSpec::Kind::Tuple) return py::object(l);
      if (!spec.type) return py::tuple(l);
      // A tuple subclass as it was: a namedtuple takes its fields one by one, others a sequence.
      if (py::hasattr(spec.type, "_fields")) return spec.type(*py::tuple(l));
      return spec.type(py::tuple(l));
    }
  }
}

/// Appends a leaf's cache-key bytes: tensor metadata, or a scalar's value.
void describeLeaf(py::handle obj, std::string& key) {
  auto put = [&key](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
  PyObject* o = obj.ptr();
  if (THPVariable_Check(o)) {
    const at::Tensor& t = THPVariable_Unpack(o);
    char tag[4] = {'T', static_cast<char>(t.scalar_type()), static_cast<char>(t.device().type()),
                   static_cast<char>(t.device().index())};
    put(tag, 4);
    char flags = static_cast<char>(t.requires_grad());
    put(&flags, 1);
    int64_t nd = t.dim();
    put(&nd, sizeof nd);
    put(t.sizes().data(), sizeof(int64_t) * nd);
    // A trace may depend on the layout (whether a view is legal): a non-contiguous input keys
    // its strides too.
    if (t.is_contiguous()) {
      key.push_back('c');
    } else {
      key.push_back('s');
      put(t.strides().data(), sizeof(int64_t) * nd);
    }
  } else if (o == Py_None) {
    key.push_back('n');
  } else if (PyBool_Check(o)) {
    key.push_back(o == Py_True ? 'B' : 'b');
  } else if (PyLong_Check(o)) {
    key.push_back('i');
    long long v = PyLong_AsLongLong(o);
    put(&v, sizeof v);
  } else if (PyFloat_Check(o)) {
    key.push_back('f');
    double v = PyFloat_AsDouble(o);
    put(&v, sizeof v);
  } else if (PyUnicode_Check(o)) {
    key.push_back('s');
    Py_ssize_t n;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    put(&n, sizeof n);
    put(s, n);
  } else {
    // Anything else (dtypes, devices, objects) is keyed by identity.
    key.push_back('o');
    put(&o, sizeof o);
  }
}

// ---- the compiled function -------------------------------------------------------------------

struct Entry {
  std::vector<std::shared_ptr<Trace>> traces;
  std::unique_ptr<runtime::Program> program;
  /// For each trace input: the leaf it comes from (>= 0), or closure tensor -(k + 1).
  std::vector<int> sources;
  std::vector<at::Tensor> closures;
  /// Set for training calls: forward and backward joined to autograd (autodiff_bindings.h).
  std::shared_ptr<TrainingEntry> training;
  /// The call counter's value at the entry's last use (least recently used goes first).
  uint64_t lastUse = 0;
  /// An entry whose trace has size symbols serves every call that differs from the one traced
  /// only in those sizes and satisfies its guards: per symbol, the leaf and dimension it is read
  /// from; the key with those sizes masked; the guards.
  std::vector<std::pair<int, int>> symbolLeaves;
  std::string maskedKey;
  std::vector<SymGuard> guards;
  /// Per trace input: the guard value it is read from (CompiledFunction::sourceFromGuard), or -1.
  std::vector<int> guardSources;
  /// The trace inputs the program updates in place (writtenInputs).
  std::vector<size_t> written;
};

/// The inputs of `t` its program updates in place: those it writes back with prims.copy_.
std::vector<size_t> writtenInputs(const Trace& t) {
  std::unordered_set<const TensorProxy*> copied;
  for (const BoundSymbol& b : t.bsyms)
    if (b.sym->id() == "prims.copy_" && b.args.size() == 2 && b.args[1].isTensor())
      copied.insert(b.args[1].toTensor().get());
  std::vector<size_t> written;
  for (size_t k = 0; k < t.inputs.size(); ++k)
    if (copied.count(t.inputs[k].get())) written.push_back(k);
  return written;
}

/// A program that updates an input in place assumes no other input shares its memory: each
/// input is a value of its own in the trace (f(x, x) with `a.add_(1); return b * 2` read b's old
/// value, where eager's b is a). Such calls are refused, naming the inputs.
void checkWrittenInputsUnaliased(const Entry& e, const std::vector<at::Tensor>& inputs) {
  if (e.written.empty()) return;
  const Trace& t = *e.traces.front();
  std::unordered_map<const void*, size_t> first;
  first.reserve(inputs.size());
  std::vector<const void*> storage(inputs.size(), nullptr);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined() || !inputs[k].has_storage()) continue;
    storage[k] = inputs[k].storage().unsafeGetStorageImpl();
    first.emplace(storage[k], k);
  }
  for (size_t w : e.written) {
    if (w >= inputs.size() || storage[w] == nullptr) continue;
    for (size_t k = first.at(storage[w]); k < inputs.size(); ++k) {
      if (k == w || storage[k] != storage[w]) continue;
      std::string msg = "thunder.jit: the program updates " + t.inputs[w]->name + " in place, and " +
                        t.inputs[k]->name + " shares its memory (the same tensor, or views of one, passed twice, "
                        "or passed and also read from a module or a global); thunder traces them as separate "
                        "values. Pass separate tensors (clone one of them).";
      PyErr_SetString(PyExc_NotImplementedError, msg.c_str());
      throw py::error_already_set();
    }
  }
}

/// Appends the cache-key bytes of `items` (the call's leaves, or its guard values), item i being
/// slot first + i: the sizes listed in `masked` as (slot, dim) are written as -1. With `aliases`,
/// a tensor that is an earlier item too is marked as that item: a trace reads one tensor there.
void describeItems(const std::vector<py::handle>& items, size_t first, const std::vector<std::pair<int, int>>& masked,
                   bool aliases, std::string& key) {
  for (size_t i = 0; i < items.size(); ++i) {
    size_t start = key.size();
    describeLeaf(items[i], key);
    if (key[start] != 'T') continue;
    for (const auto& [slot, dim] : masked) {
      if (slot != static_cast<int>(first + i)) continue;
      // 'T' dtype device index, requires_grad, ndim, then the sizes.
      size_t at = start + 5 + sizeof(int64_t) + sizeof(int64_t) * static_cast<size_t>(dim);
      if (at + sizeof(int64_t) > key.size()) continue;
      int64_t minus = -1;
      std::memcpy(&key[at], &minus, sizeof minus);
    }
    if (!aliases) continue;
    const void* impl = THPVariable_Unpack(items[i].ptr()).unsafeGetTensorImpl();
    for (size_t j = 0; j < i; ++j)
      if (THPVariable_Check(items[j].ptr()) && THPVariable_Unpack(items[j].ptr()).unsafeGetTensorImpl() == impl) {
        key.push_back('a');
        uint32_t jj = static_cast<uint32_t>(j);
        key.append(reinterpret_cast<const char*>(&jj), sizeof jj);
        break;
      }
  }
}

/// The key of a call (`key`, its leaves and guard values) with the sizes `masked` as -1.
std::string maskedKey(const std::string& key, const std::vector<py::handle>& leaves, const std::vector<py::handle>& values,
                      const std::vector<std::pair<int, int>>& masked, size_t structureEnd, size_t leavesEnd,
                      size_t unguarded) {
  std::string k = key.substr(0, structureEnd);
  describeItems(leaves, 0, masked, false, k);
  k.append(key, leavesEnd, unguarded - leavesEnd);
  if (key.size() > unguarded) {
    k.push_back('|');
    describeItems(values, leaves.size(), masked, true, k);
  }
  return k;
}

/// Appends whether autocast is on for CUDA and for CPU, and each one's dtype, to a cache key: a
/// trace applies the autocast policy that was in force while it was traced (thunder/core/autocast.py).
/// Then torch's default dtype and device: a trace's factories (torch.ones(3), torch.tensor(0.1))
/// made tensors of the dtype and on the device that were the defaults while it was traced. The
/// default device (torch.set_default_device, `with torch.device(...)`) is a torch function mode:
/// with no mode active (the usual call) it is the CPU and nothing is asked of Python.
void appendAutocastState(std::string& key) {
  for (at::DeviceType d : {at::kCUDA, at::kCPU}) {
    key.push_back(static_cast<char>(at::autocast::is_autocast_enabled(d)));
    key.push_back(static_cast<char>(at::autocast::get_autocast_dtype(d)));
  }
  key.push_back(static_cast<char>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  if (at::impl::PythonTorchFunctionTLS::stack_len() > 0) {
    static PyObject* getDefaultDevice = py::object(py::module_::import("torch").attr("get_default_device")).release().ptr();
    std::string device = py::str(py::handle(getDefaultDevice)());
    key.push_back('@');
    key.append(device);
    key.push_back('\0');
  }
}

/// The default bound on a compiled function's cache entries: THUNDER_CACHE_SIZE, else 256.
size_t defaultCacheSize() {
  const char* env = std::getenv("THUNDER_CACHE_SIZE");
  if (env == nullptr || *env == '\0') return 256;
  char* end = nullptr;
  long long n = std::strtoll(env, &end, 10);
  THUNDER_CHECK_KIND(end != nullptr && *end == '\0' && n > 0, ErrorKind::Value,
                     "THUNDER_CACHE_SIZE: expected a positive integer, but got '", env, "'");
  return static_cast<size_t>(n);
}

/// A jitted module's state, read before every call: the tensors in its (module, "_parameters" or
/// "_buffers", name) slots, as a tuple. The generated Python tuple of `m._parameters[name]` reads
/// it replaces took 48 us a call for 400 slots (0.12 us a slot), as long as the rest of the call's
/// host work; this takes about a tenth of that.
class StateReader {
 public:
  explicit StateReader(const py::list& slots) {
    for (py::handle h : slots) {
      auto t = h.cast<py::tuple>();
      py::object mod = py::reinterpret_borrow<py::object>(t[0]);
      py::str kind = t[1].cast<py::str>();
      size_t m = 0;
      while (m < modules_.size() && !(modules_[m].is(mod) && kinds_[m].equal(kind))) ++m;
      if (m == modules_.size()) {
        modules_.push_back(mod);
        kinds_.push_back(kind);
      }
      slots_.emplace_back(m, t[2].cast<py::str>());
    }
  }
  py::tuple read() const {
    // Each module's dict is looked up once per call: a module whose `_parameters` was replaced is
    // read from the new one, as the generated code read it.
    std::vector<py::object> dicts;
    dicts.reserve(modules_.size());
    for (size_t m = 0; m < modules_.size(); ++m) dicts.push_back(modules_[m].attr(kinds_[m]));
    py::tuple out(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) {
      const auto& [m, name] = slots_[i];
      PyObject* d = dicts[m].ptr();
      PyObject* v = PyDict_Check(d) ? PyDict_GetItemWithError(d, name.ptr()) : nullptr;
      if (v == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        py::object item = dicts[m][name];  // a mapping that is not a dict, or a KeyError as Python's
        PyTuple_SET_ITEM(out.ptr(), i, item.release().ptr());
        continue;
      }
      Py_INCREF(v);
      PyTuple_SET_ITEM(out.ptr(), i, v);
    }
    return out;
  }

 private:
  std::vector<py::object> modules_;
  std::vector<py::str> kinds_;
  std::vector<std::pair<size_t, py::str>> slots_;
};

class CompiledFunction {
 public:
  explicit CompiledFunction(py::object compile) : compile_(std::move(compile)) {}

  py::object call(py::args args, py::kwargs kwargs) {
    // Per thread: a call on another thread (while this one runs its program without the GIL, or
    // traces in Python) must not overwrite this call's key and leaves.
    thread_local std::string key_;
    thread_local std::vector<py::handle> leaves_;
    key_.clear();
    leaves_.clear();
    // (args, kwargs) flattened as the tuple `(args, kwargs)` would be, without building it.
    key_.push_back('(');
    flatten(args, leaves_, nullptr, &key_);
    flatten(kwargs, leaves_, nullptr, &key_);
    key_.push_back(')');
    const size_t structureEnd = key_.size();
    describeItems(leaves_, 0, {}, false, key_);
    const size_t leavesEnd = key_.size();
    key_.push_back(static_cast<char>(at::GradMode::is_enabled()));
    appendAutocastState(key_);
    const size_t unguarded = key_.size();
    // The Python values the trace read (closure scalars, globals, module flags, the tensors it
    // read from its arguments' attributes): a changed one is another entry, never a stale result.
    std::vector<py::handle> values;
    py::object held;  // (owns `values`)
    auto appendGuard = [&](std::string& key) {
      held = guard_();
      values.clear();
      for (py::handle v : held) values.push_back(v);
      key.push_back('|');
      describeItems(values, leaves_.size(), {}, true, key);
    };
    if (guard_) appendGuard(key_);
    auto it = cache_.find(key_);
    std::shared_ptr<Entry> entry;
    if (it == cache_.end() && !symbolic_.empty()) {
      // An entry with size symbols that serves these sizes: the same key with its symbolic sizes
      // masked, and its guards hold. The exact key then finds it directly.
      if (std::shared_ptr<Entry> e = matchSymbolic(key_, leaves_, values, structureEnd, leavesEnd, unguarded)) {
        e->lastUse = ++clock_;
        cache_.emplace(key_, e);
        evict();
        it = cache_.find(key_);
      }
    }
    if (it != cache_.end()) {
      ++hits_;
      entry = it->second;
    } else {
      ++misses_;
      std::string key = key_;  // compile_ may re-enter and reuse key_
      py::object guardBefore = guard_;
      py::tuple r = compile_(args, kwargs);
      // (compile_ may have re-entered and reused leaves_)
      leaves_.clear();
      flatten(args, leaves_, nullptr, nullptr);
      flatten(kwargs, leaves_, nullptr, nullptr);
      // The Python state the guard reads, changed by the traced program itself (`self.count += 1`,
      // a decoding position kept in an int): tracing ran that change once, a cached call would
      // not run it again. Such an entry serves only this call: every call traces, and makes the
      // change, as eager's does.
      bool changesItsState = false;
      if (guardBefore && !guardBefore.is_none()) {
        std::string again = "|";
        py::tuple now = guardBefore();
        std::vector<py::handle> nowValues(now.begin(), now.end());
        describeItems(nowValues, leaves_.size(), {}, true, again);
        changesItsState = key.compare(unguarded, std::string::npos, again) != 0;
      }
      if (r.size() > 4 && r[4].cast<bool>()) changesItsState = true;  // (an argument's attribute)
      key.resize(unguarded);
      // The trace may have extended the guard (it read a tensor from an argument's attribute):
      // the entry is keyed as the next call with these arguments will be.
      if (guard_) appendGuard(key);
      auto e = std::make_shared<Entry>();
      e->traces = r[0].cast<std::vector<std::shared_ptr<Trace>>>();
      e->written = writtenInputs(*e->traces.front());
      e->sources = r[1].cast<std::vector<int>>();
      for (py::handle t : r[2]) e->closures.push_back(THPVariable_Unpack(t.ptr()));
      sourceFromGuard(*e, values);
      const Trace& acquired = *e->traces.front();
      py::handle plan = r.size() > 3 && !r[3].is_none() ? r[3] : py::handle();
      std::vector<SizeSymbol> symbols;
      if (!acquired.symbols.empty()) {
        // The guards: the program's, and those autodiff and the passes added.
        std::vector<SymGuard> guards = acquired.guards;
        std::string why;
        if (plan) {
          why = trainingSymbolicCheck(plan, guards);
        } else {
          mergeGuards(guards, e->traces.back()->guards);
          why = symbolicCheck(guards, *e->traces.back());
        }
        for (const SizeSymbol& s : acquired.symbols) {
          int slot = slotOf(*e, s.input, leaves_.size());
          if (slot < 0 && why.empty())
            why = "a size symbol of " + acquired.inputs.at(s.input)->name + ", which the trace holds as a constant (" +
                  std::to_string(values.size()) + " guard values)";
          e->symbolLeaves.emplace_back(slot, s.dim);
        }
        if (why.empty()) {
          symbols = acquired.symbols;
          e->guards = guards;
          e->maskedKey = maskedKey(key, leaves_, values, e->symbolLeaves, structureEnd, leavesEnd, unguarded);
        } else {
          e->symbolLeaves.clear();
        }
        lastSymbolic_ = why;
        if (!why.empty() && std::getenv("THUNDER_DEBUG_SYMBOLIC"))
          std::fprintf(stderr, "thunder: the trace serves only the sizes it was traced at: %s\n", why.c_str());
      }
      if (plan) e->training = makeTrainingEntry(plan, symbols, e->guards);
      else e->program = std::make_unique<runtime::Program>(e->traces.back(), symbols);
      // Another thread may have compiled the same key while this one traced (tracing runs
      // Python, which lets other threads in): the first entry stays, so running calls keep it.
      e->lastUse = ++clock_;
      if (changesItsState) {
        entry = e;
        // (from the second such call: a first call may set up state it then leaves alone)
        if (++stateChanges_ == 2) {
          py::module_::import("warnings").attr("warn")(
              "thunder.jit: the program changes Python state that it reads (an attribute or a global "
              "variable, such as a counter it increments, or the state of Python's or NumPy's random "
              "generator it draws from): each call is traced again, to make that change as eager does. "
              "Keep such state in a tensor (a buffer), and draw with torch.rand, to compile the program once.");
        }
      } else {
        auto [pos, inserted] = cache_.emplace(key, e);
        entry = inserted ? e : pos->second;
        if (inserted && !e->symbolLeaves.empty()) symbolic_.push_back(e);
        if (inserted) evict();
      }
    }
    entry->lastUse = ++clock_;
    last_ = entry;
    auto gather = [&] {
      std::vector<at::Tensor> xs;
      xs.reserve(entry->sources.size());
      for (size_t k = 0; k < entry->sources.size(); ++k) {
        int s = entry->sources[k];
        int g = k < entry->guardSources.size() ? entry->guardSources[k] : -1;
        xs.push_back(g >= 0 ? THPVariable_Unpack(values.at(g).ptr())
                     : s >= 0 ? THPVariable_Unpack(leaves_[s].ptr())
                              : entry->closures[-s - 1]);
      }
      return xs;
    };
    std::vector<at::Tensor> inputs = gather();
    checkWrittenInputsUnaliased(*entry, inputs);
    // The symbols' values at this call: ints the program returns (`x.shape[1]`, `n * 3 + 1`)
    // are evaluated with them.
    std::vector<int64_t> syms = entry->training ? trainingSymbolValues(*entry->training, inputs)
                                : entry->program->symbolic() ? entry->program->symbolValues(inputs)
                                                             : std::vector<int64_t>();
    // The program drops its references to the inputs without the GIL. Where a tensor's last C++
    // reference beside its Python object's goes, PyTorch releases the Python object (it holds it
    // while C++ shares the tensor), which takes the GIL: once per input, each time waiting for
    // this thread's own lock (15% of a 400-parameter call's host time). These references go
    // after the GIL is back instead; they keep nothing alive that the caller does not.
    std::vector<at::Tensor> kept = inputs;
    std::vector<at::Tensor> outs;
    {
      py::gil_scoped_release release;
      outs = entry->training ? runTraining(entry->training, std::move(inputs))
                             : entry->program->run(std::move(inputs));
    }
    eagerLayouts(outs, gather);
    size_t pos = 0;
    Built built;
    return buildOutput(entry->training ? trainingOutput(*entry->training)
                                       : entry->traces.back()->output,
                       outs, pos, built, syms);
  }
  /// The leaves (positions in the flattened (args, kwargs)) that the last call's program
  /// updates in place: the inputs its computation trace writes back with prims.copy_.
  std::vector<int> lastWrittenLeaves() const {
    std::vector<int> leaves;
    if (!last_) return leaves;
    for (size_t k : last_->written)
      if (k < last_->sources.size() && last_->sources[k] >= 0) leaves.push_back(last_->sources[k]);
    return leaves;
  }
  /// The devices ("cpu", "cuda:0", ...) of the tensors the last call's program reads and makes,
  /// sorted: a program on one CUDA device can be recorded into a CUDA graph; one that moves
  /// tensors to the host or computes there cannot.
  std::vector<std::string> lastDevices() const {
    std::set<std::string> devices;
    if (!last_) return {};
    const Trace& t = *last_->traces.front();
    for (const TensorPtr& in : t.inputs) devices.insert(in->device.str());
    for (const BoundSymbol& b : t.bsyms)
      for (const TensorPtr& o : b.outputTensors()) devices.insert(o->device.str());
    return {devices.begin(), devices.end()};
  }
  /// The training plan of the last call (thunder._C.TrainingPlan), or None.
  py::object lastTrainingPlan() const {
    return last_ && last_->training ? trainingPlan(*last_->training) : py::none();
  }

  int hits() const { return hits_; }
  const std::string& lastSymbolic() const { return lastSymbolic_; }
  int misses() const { return misses_; }
  std::vector<std::shared_ptr<Trace>> lastTraces() const {
    return last_ ? last_->traces : std::vector<std::shared_ptr<Trace>>{};
  }
  size_t cacheSize() const { return cache_.size(); }
  size_t cacheLimit() const { return limit_; }
  void setCacheLimit(size_t n) {
    THUNDER_CHECK_KIND(n > 0, ErrorKind::Value, "thunder.jit: cache_size must be positive, but got ", n);
    limit_ = n;
    evict();
  }
  void setGuard(py::object guard) { guard_ = guard.is_none() ? py::object() : std::move(guard); }

 private:
  /// The entry with size symbols that serves a call whose exact key failed to match, or null: one
  /// whose masked key is the call's with the same sizes masked and whose guards hold at the
  /// call's sizes.
  std::shared_ptr<Entry> matchSymbolic(const std::string& key, const std::vector<py::handle>& leaves,
                                       const std::vector<py::handle>& values, size_t structureEnd, size_t leavesEnd,
                                       size_t unguarded) {
    std::vector<int64_t> sizes;
    for (auto w = symbolic_.begin(); w != symbolic_.end();) {
      std::shared_ptr<Entry> e = w->lock();
      if (!e) {
        w = symbolic_.erase(w);
        continue;
      }
      ++w;
      static const bool debug = std::getenv("THUNDER_DEBUG_SYMBOLIC") != nullptr;
      if (maskedKey(key, leaves, values, e->symbolLeaves, structureEnd, leavesEnd, unguarded) != e->maskedKey) {
        if (debug) {
          std::string k = maskedKey(key, leaves, values, e->symbolLeaves, structureEnd, leavesEnd, unguarded);
          size_t i = 0;
          while (i < k.size() && i < e->maskedKey.size() && k[i] == e->maskedKey[i]) ++i;
          std::fprintf(stderr, "thunder: a trace with size symbols: the key differs at byte %zu of %zu/%zu (leaves end %zu, guard at %zu)\n",
                       i, k.size(), e->maskedKey.size(), leavesEnd, unguarded);
        }
        continue;
      }
      sizes.clear();
      for (const auto& [slot, dim] : e->symbolLeaves) {
        size_t n = leaves.size();
        py::handle t = static_cast<size_t>(slot) < n ? leaves[slot] : values.at(slot - n);
        sizes.push_back(THPVariable_Unpack(t.ptr()).size(dim));
      }
      bool holds = true;
      for (const SymGuard& g : e->guards) {
        if (g.holds(sizes)) continue;
        if (debug) std::fprintf(stderr, "thunder: a trace with size symbols: guard %s fails\n", g.str().c_str());
        holds = false;
        break;
      }
      if (holds) return e;
    }
    return nullptr;
  }

  /// Trace inputs captured as constants that are tensors the guard reads (a tensor the program
  /// read from an attribute of an argument: a cache's keys) come from the guard's values at each
  /// call: the key holds their metadata, and a call with another tensor there of the same kind
  /// runs the same trace on it.
  static void sourceFromGuard(Entry& e, const std::vector<py::handle>& values) {
    e.guardSources.assign(e.sources.size(), -1);
    for (size_t k = 0; k < e.sources.size(); ++k) {
      int s = e.sources[k];
      if (s >= 0) continue;
      at::Tensor& c = e.closures.at(-s - 1);
      if (!c.defined()) continue;
      for (size_t g = 0; g < values.size(); ++g) {
        if (!THPVariable_Check(values[g].ptr()) ||
            THPVariable_Unpack(values[g].ptr()).unsafeGetTensorImpl() != c.unsafeGetTensorImpl())
          continue;
        e.guardSources[k] = static_cast<int>(g);
        break;
      }
    }
    for (size_t k = 0; k < e.sources.size(); ++k)
      if (e.guardSources[k] >= 0) e.closures.at(-e.sources[k] - 1) = at::Tensor();  // (not held)
  }

  /// The slot (leaf, or number of leaves + guard value) trace input k is read from; -1 for a
  /// constant.
  static int slotOf(const Entry& e, int k, size_t numLeaves) {
    int s = e.sources.at(k);
    if (s >= 0) return s;
    int g = e.guardSources.at(k);
    return g >= 0 ? static_cast<int>(numLeaves) + g : -1;
  }

  /// Drops least recently used entries beyond the limit; a call running one keeps it alive.
  void evict() {
    while (cache_.size() > limit_) {
      auto victim = cache_.begin();
      for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->second->lastUse < victim->second->lastUse) victim = it;
      cache_.erase(victim);
      ++evictions_;
    }
  }

 public:
  int evictions() const { return evictions_; }

 private:
  /// The returned tensors already built, by proxy: one value returned twice (`return y, y`, a
  /// ModelOutput holding a tensor under two names) is one tensor, as in eager. (A training call's
  /// node returns the second as an alias of the first, with a gradient of its own: an in-place
  /// update of one then made PyTorch refuse the other, "a view ... of a function that returns
  /// multiple views", and the two were not one object.)
  using Built = std::vector<std::pair<const TensorProxy*, std::pair<size_t, py::object>>>;

  /// The caller's value of the trace's output `v`. `syms`: the size symbols' values at this call
  /// (empty where the entry serves only its traced sizes), which the returned ints with an
  /// expression take: the caller gets a Python int, never a SymInt holding the traced size.
  py::object buildOutput(const Value& v, const std::vector<at::Tensor>& outs, size_t& pos, Built& built,
                         const std::vector<int64_t>& syms) {
    switch (v.kind()) {
      case Value::Kind::Int:
        if (!v.symExpr()) return py::int_(v.toInt());
        return py::int_(syms.empty() ? v.toSymInt().hint : v.symExpr()->eval(syms));
      case Value::Kind::Tensor: {
        const at::Tensor& t = outs[pos++];
        const TensorProxy* proxy = &v.tensor();
        for (const auto& [p, first] : built) {
          const at::Tensor& u = outs[first.first];
          if (p == proxy && u.is_alias_of(t) && u.sizes() == t.sizes() && u.strides() == t.strides() &&
              u.storage_offset() == t.storage_offset() && u.requires_grad() == t.requires_grad())
            return first.second;
        }
        py::object o = py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
        built.push_back({proxy, {pos - 1, o}});
        return o;
      }
      case Value::Kind::Tuple:
      case Value::Kind::List: {
        py::list l;
        for (const Value& x : v.items()) l.append(buildOutput(x, outs, pos, built, syms));
        return v.isTuple() ? py::object(py::tuple(l)) : py::object(l);
      }
      case Value::Kind::Dict: {
        py::dict d;
        for (size_t i = 0; i < v.items().size(); ++i)
          d[py::str(v.keys()[i])] = buildOutput(v.items()[i], outs, pos, built, syms);
        return d;
      }
      default: return fromValue(v);
    }
  }

  py::object compile_;
  py::object guard_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> cache_;
  /// The entries with size symbols, for calls whose exact key is not in cache_.
  std::vector<std::weak_ptr<Entry>> symbolic_;
  /// Why the last trace with size symbols serves only its own sizes ("" where it serves all).
  std::string lastSymbolic_;
  std::shared_ptr<Entry> last_;
  size_t limit_ = defaultCacheSize();
  uint64_t clock_ = 0;
  int hits_ = 0, misses_ = 0, evictions_ = 0;
  int stateChanges_ = 0;  // calls whose trace changed Python state the guard reads
};

// ---- CUDA graphs: the per-call path -----------------------------------------------------------

/// The replay path of thunder/core/cudagraphs.py, which keeps the warm-up and capture in Python.
/// A call is keyed by its argument structure, the values of its scalars, dtypes and devices, its
/// tensors' metadata (sizes, strides, dtype, device) and, for stable tensors (a module's
/// parameters and buffers: the leaves of the first argument), their addresses; then grad and
/// autocast modes and the guard's values.
/// A key with an installed graph copies the other tensors into the graph's input buffers, calls
/// the graph's replay and returns its outputs; any other call goes to Python.
class GraphCache {
 public:
  /// fn: the call without graphs; slow(key or None, args, kwargs): Python's path for calls
  /// without an installed graph (key None: leaves other than tensors and scalars); stableFirst:
  /// the first argument's tensors stay in place between calls; device: "cuda", or "cpu" for the
  /// CPU tests of this logic.
  GraphCache(py::object fn, py::object slow, bool stableFirst, const std::string& device)
      : fn_(std::move(fn)), slow_(std::move(slow)), stableFirst_(stableFirst) {
    THUNDER_CHECK_KIND(device == "cuda" || device == "cpu", ErrorKind::Value,
                       "GraphCache: device must be 'cuda' or 'cpu', but got '", device, "'");
    device_ = device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  }

  /// What a call is: a graph key (bytes), "bypass" (run without graphs: no tensors, a tensor on
  /// another device, or an input that needs autograd) or "general" (Python keys it).
  enum class Kind { Graph, Bypass, General };

  py::object call(py::args args, py::kwargs kwargs) {
    if (!fast) return slow_(py::none(), args, kwargs);
    thread_local std::string key;
    thread_local std::vector<py::handle> leaves;
    size_t nStable = 0;
    Kind kind = classify(args, kwargs, key, leaves, nStable);
    if (kind == Kind::Bypass) return fn_(*args, **kwargs);
    if (kind == Kind::General) return slow_(py::none(), args, kwargs);
    auto it = entries_.find(key);
    if (it == entries_.end()) return slow_(py::bytes(key), args, kwargs);
    std::shared_ptr<Installed> e = it->second;  // kept alive even if a replay installs another
    for (size_t i : e->copyAt) copyInto(e->inputs[i], THPVariable_Unpack(leaves[i].ptr()));
    if (e->exec != 0 && runtime::cudaGraphLaunchAsync(e->exec, e->device)) ++directLaunches_;
    else e->replay();
    // The program updated these inputs in place: in the graph's buffers, which the caller's
    // tensors take back, as eager updates them.
    for (size_t i : e->writeBack) copyInto(THPVariable_Unpack(leaves[i].ptr()), e->inputs[i]);
    ++replays_;
    return e->output;
  }

  /// The classification and key of a call, as `call` makes them: (kind, key bytes or None).
  py::tuple describe(py::args args, py::kwargs kwargs) {
    std::string key;
    std::vector<py::handle> leaves;
    size_t nStable = 0;
    Kind kind = fast ? classify(args, kwargs, key, leaves, nStable) : Kind::General;
    if (kind == Kind::Graph) return py::make_tuple("graph", py::bytes(key));
    return py::make_tuple(kind == Kind::Bypass ? "bypass" : "general", py::none());
  }

  /// Installs a captured graph under `key`: `inputs` holds, for each leaf of the call (in the
  /// order of thunder._C.tree_flatten((args, kwargs))), the tensor buffer it is copied into, or
  /// None; replay() launches the graph; `output` is returned by every replay; `keep` is held;
  /// `writeBack`: the leaves the program updates in place, copied back from their buffers.
  /// `exec` (a cudaGraphExec_t as an integer, or 0) and `device`: a graph that draws no random
  /// numbers is launched straight through the driver on that device instead of replay(), whose
  /// prologue refills the CUDA generator's seed and offset tensors (two fills per replay) for
  /// graphs that read them.
  void install(const py::bytes& key, const py::list& inputs, py::object replay, py::object output,
               py::object keep, const std::vector<size_t>& writeBack, uintptr_t exec, int device) {
    auto e = std::make_shared<Installed>();
    e->exec = exec;
    e->device = device;
    for (size_t i : writeBack)
      THUNDER_CHECK_KIND(i < inputs.size() && !inputs[i].is_none(), ErrorKind::Value,
                         "GraphCache.install: leaf ", i, " is written back but has no buffer");
    e->writeBack = writeBack;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].is_none()) {
        e->inputs.emplace_back();
        continue;
      }
      THUNDER_CHECK_KIND(THPVariable_Check(inputs[i].ptr()), ErrorKind::Type,
                         "GraphCache.install: input buffer ", i, " must be a tensor or None");
      e->inputs.push_back(THPVariable_Unpack(inputs[i].ptr()));
      e->copyAt.push_back(i);
    }
    e->replay = std::move(replay);
    e->output = std::move(output);
    e->keep = std::move(keep);
    entries_[std::string(key)] = std::move(e);
  }

  void setGuard(py::object guard) { guard_ = guard.is_none() ? py::object() : std::move(guard); }
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }
  int replays() const { return replays_; }
  int directLaunches() const { return directLaunches_; }

  /// False sends every call to Python's general path (the path before this class; benchmarks).
  bool fast = true;
  /// Copies between CUDA tensors of one layout go through the driver (cudaCopyAsync), not
  /// ATen's copy_, whose dispatch costs more than the copy; false: always copy_ (benchmarks).
  bool driverCopy = true;

 private:
  /// dst.copy_(src) for a dst and src of the same sizes and dtype (the key guarantees it): one
  /// driver copy of their bytes when both are dense CUDA tensors of the same strides on one
  /// device, without conjugate or negative bits; else ATen's copy_.
  void copyInto(const at::Tensor& dst, const at::Tensor& src) const {
    if (driverCopy && src.is_cuda() && dst.device() == src.device() &&
        dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes() &&
        dst.strides() == src.strides() &&
        src.is_non_overlapping_and_dense() && dst.is_non_overlapping_and_dense() && !src.is_conj() &&
        !dst.is_conj() && !src.is_neg() && !dst.is_neg()) {
      size_t bytes = static_cast<size_t>(src.numel()) * src.element_size();
      if (bytes == 0 ||
          runtime::cudaCopyAsync(dst.data_ptr(), src.data_ptr(), bytes, src.device().index()))
        return;
    }
    dst.copy_(src);
  }

  struct Installed {
    std::vector<at::Tensor> inputs;  // undefined where the leaf is not copied
    std::vector<size_t> copyAt, writeBack;
    py::object replay, output, keep;
    uintptr_t exec = 0;  // launched directly where nonzero (see install)
    int device = -1;
  };

  Kind classify(const py::args& args, const py::kwargs& kwargs, std::string& key,
                std::vector<py::handle>& leaves, size_t& nStable) {
    key.clear();
    leaves.clear();
    key.push_back('(');
    size_t nArgs = args.size();
    for (size_t i = 0; i < nArgs; ++i) {
      flatten(args[i], leaves, nullptr, &key);
      if (i == 0 && stableFirst_) nStable = leaves.size();
    }
    key.push_back(')');
    flatten(kwargs, leaves, nullptr, &key);
    bool anyTensor = false, needsGrad = false;
    const bool grad = at::GradMode::is_enabled();
    for (size_t i = 0; i < leaves.size(); ++i) {
      PyObject* o = leaves[i].ptr();
      if (THPVariable_Check(o)) {
        const at::Tensor& t = THPVariable_Unpack(o);
        if (t.device().type() != device_) return Kind::Bypass;
        anyTensor = true;
        needsGrad = needsGrad || (grad && t.requires_grad());
        describeTensor(t, i < nStable, key);
      } else if (o == Py_None || PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o) ||
                 PyUnicode_Check(o)) {
        describeLeaf(leaves[i], key);
      } else if (THPDtype_Check(o)) {
        key.push_back('d');
        key.push_back(static_cast<char>(reinterpret_cast<THPDtype*>(o)->scalar_type));
      } else if (THPDevice_Check(o)) {
        const c10::Device& d = reinterpret_cast<THPDevice*>(o)->device;
        char tag[3] = {'v', static_cast<char>(d.type()), static_cast<char>(d.index())};
        key.append(tag, 3);
      } else {
        // Other objects (custom containers, modules, ...): Python's pytree and keys.
        return Kind::General;
      }
    }
    if (!anyTensor || needsGrad) return Kind::Bypass;
    key.push_back('|');
    key.push_back(static_cast<char>(grad));
    appendAutocastState(key);
    if (guard_) {
      py::object values = guard_();
      for (py::handle v : values) {
        if (THPVariable_Check(v.ptr())) {
          // A graph reads the tensor it was captured with: keyed by identity.
          key.push_back('o');
          PyObject* o = v.ptr();
          key.append(reinterpret_cast<const char*>(&o), sizeof o);
        } else {
          describeLeaf(v, key);
        }
      }
    }
    return Kind::Graph;
  }

  /// A tensor's key bytes: stable or copied, dtype, device, sizes and strides (the graph reads
  /// its buffers with the captured layout), and a stable tensor's address.
  static void describeTensor(const at::Tensor& t, bool stable, std::string& key) {
    auto put = [&key](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
    char tag[4] = {stable ? 'S' : 'C', static_cast<char>(t.scalar_type()),
                   static_cast<char>(t.device().type()), static_cast<char>(t.device().index())};
    put(tag, 4);
    int64_t nd = t.dim();
    put(&nd, sizeof nd);
    put(t.sizes().data(), sizeof(int64_t) * nd);
    put(t.strides().data(), sizeof(int64_t) * nd);
    if (stable) {
      const void* p = t.data_ptr();
      put(&p, sizeof p);
    }
  }

  py::object fn_, slow_, guard_;
  bool stableFirst_;
  c10::DeviceType device_;
  std::unordered_map<std::string, std::shared_ptr<Installed>> entries_;
  int replays_ = 0, directLaunches_ = 0;
};

/// Enters tracing into a trace and captures closure tensors; a Python context manager.
class TracingContext {
 public:
  explicit TracingContext(std::shared_ptr<Trace> trace) : trace_(std::move(trace)) {}
  void enter() {
    scope_ = std::make_unique<TracingScope>(*trace_);
    capture_.trace = trace_.get();
    tlsCaptures.push_back(&capture_);
  }
  void exit() {
    tlsCaptures.pop_back();
    scope_.reset();
  }
  /// Makes dimensions `dims` of `tensor` size symbols where the program reads it as a closure.
  void markDynamic(py::handle tensor, std::vector<int64_t> dims) {
    capture_.dynamic[THPVariable_Unpack(tensor.ptr()).unsafeGetTensorImpl()] = std::move(dims);
  }
  py::list closures() const {
    py::list l;
    for (const at::Tensor& t : capture_.tensors) l.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(t)));
    return l;
  }

 private:
  std::shared_ptr<Trace> trace_;
  std::unique_ptr<TracingScope> scope_;
  Capture capture_;
};

}  // namespace

/// The inference pipeline after acquisition: the rewrites before autodiff (transforms/pipeline.h),
/// cse, claiming, in-place updates, del_last_used. Returns every trace, in order.
std::vector<std::shared_ptr<Trace>> runPipeline(std::shared_ptr<Trace> computation,
                                                const std::vector<std::string>& executors,
                                                bool verifyEach) {
  std::vector<std::shared_ptr<Trace>> traces{computation};
  PassLog log(traces, verifyEach);
  std::vector<Executor*> exs = ExecutorRegistry::get().resolve(executors);
  beforeAutodiff(log, exs);
  log.run("Common subexpression elimination", [](const Trace& t) { return cse(t); });
  log.runIfChanged("Sums of widened values", [](const Trace& t) { return sumsOfWidenedValues(t); });
  log.runIfChanged("Pad sums to cat", [](const Trace& t) { return padSumsToCat(t); });
  log.runIfChanged("Column sums through reshapes", [](const Trace& t) { return columnSumsThroughReshapes(t); });
  log.runIfChanged("Concatenation of flattened pieces", [](const Trace& t) { return catOfFlattenedPieces(t); });
  log.runIfChanged("Convolution bias to add", [](const Trace& t) { return convBiasToAdd(t); });
  log.runIfChanged("Linears before permutes", [](const Trace& t) { return linearsBeforePermutes(t); });
  log.runIfChanged("Contiguous matmul operands", [](const Trace& t) { return contiguousMatmulOperands(t); });
  log.run("Transform for execution", [&](const Trace& t) { return transformForExecution(t, exs); });
  // Inference only: a training forward's saved tensors must not become the caller's buffers,
  // which the next call writes before this call's backward runs.
  log.run("Reinplace", [&](const Trace& t) { return reinplace(t, reinplaceRules(exs)); });
  auto inplace = [&exs](const BoundSymbol& b) {
    for (const Executor* ex : exs)
      if (ex->isInplaceVariant(b.sym)) return true;
    return false;
  };
  for (const Executor* ex : exs)
    if (ex->isFusion())
      log.runIfChanged("Fuse in-place updates", [&](const Trace& t) { return ex->fuseInplaceUpdates(t, inplace); });
  log.runIfChanged("Grouped casts", [&](const Trace& t) { return groupCasts(t, exs); });
  if (hasPrefetchCalls(log.last())) log.run("Prefetch", [](const Trace& t) { return prefetch(t); });
  log.run("Delete Last Used", [](const Trace& t) { return delLastUsed(t); });
  return traces;
}

/// The constant evaluator of the pipelines (transforms/pipeline.h): the trace through the inference
/// pipeline with the non-fusion executors (a few ATen calls; no kernel compiled for them), run
/// once. Any failure is "cannot": the rewrite that asked leaves its call as it is.
std::optional<double> evaluateConstant(const Trace& trace, const std::vector<Executor*>& executors) {
  try {
    std::vector<std::string> names;
    for (const Executor* ex : executors)
      if (!ex->isFusion()) names.push_back(ex->name());
    std::vector<std::shared_ptr<Trace>> traces = runPipeline(std::make_shared<Trace>(trace), names, false);
    runtime::Program program(traces.back());
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> out = program.run({});
    if (out.size() != 1 || out[0].numel() != 1) return std::nullopt;
    return out[0].item<double>();
  } catch (py::error_already_set& e) {
    e.restore();
    PyErr_Clear();
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::function<void(py::module_&)>>& moduleInits() {
  static std::vector<std::function<void(py::module_&)>> inits;
  return inits;
}

}  // namespace thunder::python

using namespace thunder;
using namespace thunder::python;

PYBIND11_MODULE(_C, m) {
  // Kernels convert to float8_e4m3fn as this torch does: saturating (torch 2.13) or to NaN (2.11).
  thunder::codegen::setFloat8E4M3Saturates(
      at::full({1}, 1000.0f).to(at::kFloat8_e4m3fn).view(at::kByte).item<uint8_t>() == 0x7e);
  m.doc() = "thunder's C++ core";
  runtime::registerTorchExecutor();
  setConstantEvaluator(&evaluateConstant);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.kind()) {
        case ErrorKind::Value: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case ErrorKind::Type: PyErr_SetString(PyExc_TypeError, e.what()); return;
        case ErrorKind::Index: PyErr_SetString(PyExc_IndexError, e.what()); return;
        case ErrorKind::NotImplemented: PyErr_SetString(PyExc_NotImplementedError, e.what()); return;
        case ErrorKind::Runtime: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
    } catch (const InternalError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<TensorProxy, TensorPtr>(m, "TensorProxy", py::dynamic_attr())
      .def_property_readonly("name", [](const TensorProxy& t) { return t.name; })
      .def_property_readonly("_shape", [](const TensorProxy& t) { return py::tuple(py::cast(t.shape)); })
      .def_property_readonly("_sym", &symDims)
      .def_property_readonly("ndim", [](const TensorProxy& t) { return t.ndim(); })
      .def_property_readonly("dtype", [](const TensorProxy& t) { return fromValue(Value(t.dtype)); })
      .def_property_readonly("_device_str", [](const TensorProxy& t) { return t.device.str(); })
      // Settable as on a tensor (wav2vec2's feature encoder sets it on a view of its input in
      // training): it marks the proxy; the gradients thunder computes are those of the trace's
      // inputs that require grad at the call.
      .def_property("requires_grad", [](const TensorProxy& t) { return t.requiresGrad; },
                    [](TensorProxy& t, bool v) { t.requiresGrad = v; })
      .def_property_readonly("_strides", [](const TensorProxy& t) { return py::tuple(py::cast(t.stridesOrContiguous())); })
      .def("numel", [](const TensorProxy& t) { return t.numel(); })
      .def("type_string", &TensorProxy::typeString)
      .def("__repr__", [](const TensorProxy& t) { return "<TensorProxy " + t.name + ": " + t.typeString() + ">"; });

  py::class_<Symbol, std::unique_ptr<Symbol, py::nodelete>>(m, "Symbol")
      .def_property_readonly("name", [](const Symbol& s) { return s.name; })
      .def_property_readonly("module", [](const Symbol& s) { return s.module; })
      .def_property_readonly("id", &Symbol::id)
      .def_property_readonly("is_prim", &Symbol::isPrim)
      .def_property_readonly("param_names", [](const Symbol& s) {
        std::vector<std::string> n;
        for (const Param& p : s.params) n.push_back(p.name);
        return n;
      })
      .def("__call__", [](const Symbol& s, py::args args, py::kwargs kwargs) {
        std::vector<Value> a;
        for (py::handle x : args) a.push_back(toValue(x));
        std::vector<std::pair<std::string, Value>> kw;
        for (auto kv : kwargs) kw.emplace_back(py::str(kv.first), toValue(kv.second));
        return fromValue(call(s, s.bind(std::move(a), kw)));
      })
      .def("__repr__", [](const Symbol& s) { return "<Symbol " + s.id() + ">"; });

  py::class_<Trace, std::shared_ptr<Trace>>(m, "Trace")
      .def(py::init<>())
      .def("add_input", [](Trace& t, py::handle tensor, const std::string& name, std::vector<int64_t> dynamic) {
        TensorPtr p = proxyFor(THPVariable_Unpack(tensor.ptr()), name);
        t.reserveName(name);
        t.inputs.push_back(p);
        addSizeSymbols(t, *p, std::move(dynamic));
        return p;
      }, py::arg("tensor"), py::arg("name"), py::arg("dynamic") = std::vector<int64_t>{})
      .def_property("records_guards", [](const Trace& t) { return t.recordsGuards; },
                    [](Trace& t, bool v) { t.recordsGuards = v; })
      .def_property_readonly("symbols", [](const Trace& t) {
        std::vector<std::tuple<std::string, int, int64_t>> out;
        // (input "" for a backward's symbol that the forward's call gives)
        for (const SizeSymbol& s : t.symbols)
          out.emplace_back(s.input < 0 ? std::string() : t.inputs.at(s.input)->name, s.dim, s.hint);
        return out;
      })
      .def_property_readonly("guards", [](const Trace& t) {
        std::vector<std::string> out;
        for (const SymGuard& g : t.guards) out.push_back(g.str());
        return out;
      })
      .def("set_output", [](Trace& t, py::handle out) { t.output = toValue(out); })
      .def_property_readonly("provenance", [](const Trace& t) { return t.provenance; })
      .def("set_provenance", [](Trace& t, const std::string& p) { t.provenance = p; })
      .def_property_readonly("inputs", [](const Trace& t) { return t.inputs; })
      .def_property_readonly("num_bound_symbols", [](const Trace& t) { return t.bsyms.size(); })
      .def("mark_checkpointed", [](Trace& t, size_t first, size_t end) {
        // The calls [first, end): one call of torch.utils.checkpoint (BoundSymbol::checkpointRegion;
        // an enclosing checkpoint's region takes in the calls of those inside it).
        for (size_t i = first; i < std::min(end, t.bsyms.size()); ++i)
          t.bsyms[i].checkpointRegion = static_cast<int>(first) + 1;
      }, py::arg("first"), py::arg("end"))
      .def_property_readonly("bound_symbol_names", [](const Trace& t) {
        std::vector<std::string> n;
        for (const BoundSymbol& b : t.bsyms) n.push_back(b.sym->printName());
        return n;
      })
      .def_property_readonly("bound_symbol_ids", [](const Trace& t) {
        std::vector<std::string> n;
        for (const BoundSymbol& b : t.bsyms) n.push_back(b.sym->id());
        return n;
      })
      .def("python", [](const Trace& t) { return printTrace(t); })
      .def("verify", [](const Trace& t) { verify(t); })
      .def("__str__", [](const Trace& t) { return printTrace(t); })
      .def("__repr__", [](const Trace& t) { return printTrace(t); });

  m.def("add_size_guard", [](int64_t constant, py::tuple terms, bool lessThan, bool outcome) {
    // A comparison the traced program made of symbolic ints (thunder/core/symbolic.py):
    // (constant + terms == 0) == outcome, or (... < 0) == outcome. Nothing outside tracing.
    TraceContext* ctx = currentContext();
    if (ctx == nullptr || !ctx->trace().recordsGuards) return;
    SymGuard g;
    g.rel = lessThan ? SymGuard::Rel::Lt : SymGuard::Rel::Eq;
    g.e = exprOf(constant, terms);
    g.outcome = outcome;
    ctx->trace().addGuard(g);
  });
  m.def("symbolic_check", [](const Trace& symbolic, const Trace& execution) {
    std::vector<SymGuard> guards = symbolic.guards;
    mergeGuards(guards, execution.guards);
    return symbolicCheck(guards, execution);
  });
  py::class_<TracingContext>(m, "TracingContext")
      .def(py::init<std::shared_ptr<Trace>>())
      .def("__enter__", [](TracingContext& c) { c.enter(); return &c; }, py::return_value_policy::reference)
      .def("__exit__", [](TracingContext& c, py::args) { c.exit(); })
      .def("closures", &TracingContext::closures)
      .def("mark_dynamic", &TracingContext::markDynamic);

  py::class_<StateReader>(m, "StateReader")
      .def(py::init<const py::list&>(), py::arg("slots"),
           "slots: (module, '_parameters' or '_buffers', name) each; calling the reader returns their "
           "tensors as a tuple.")
      .def("__call__", &StateReader::read);
  py::class_<CompiledFunction>(m, "CompiledFunction", py::dynamic_attr())
      .def(py::init<py::object>())
      .def("__call__", &CompiledFunction::call)
      .def_property_readonly("cache_hits", &CompiledFunction::hits)
      .def_property_readonly("cache_misses", &CompiledFunction::misses)
      .def_property_readonly("last_symbolic_fallback", &CompiledFunction::lastSymbolic)
      .def("last_traces", &CompiledFunction::lastTraces)
      .def("last_training_plan", &CompiledFunction::lastTrainingPlan)
      .def("last_written_leaves", &CompiledFunction::lastWrittenLeaves,
           "Positions of the (args, kwargs) leaves the last call's program updates in place.")
      .def("last_devices", &CompiledFunction::lastDevices,
           "The devices of the tensors the last call's program reads and makes, sorted.")
      .def_property_readonly("cache_size", &CompiledFunction::cacheSize)
      .def_property_readonly("cache_evictions", &CompiledFunction::evictions)
      .def_property("cache_limit", &CompiledFunction::cacheLimit, &CompiledFunction::setCacheLimit)
      .def("set_guard", &CompiledFunction::setGuard,
           "A callable returning the Python values a trace depends on; they join the cache key.");

  py::class_<GraphCache>(m, "GraphCache", py::dynamic_attr())
      .def(py::init<py::object, py::object, bool, const std::string&>(), py::arg("fn"),
           py::arg("slow"), py::arg("stable_first"), py::arg("device") = "cuda")
      .def("__call__", &GraphCache::call)
      .def("describe", &GraphCache::describe,
           "(kind, key) of a call: 'graph' and its key, 'bypass' or 'general' and None.")
      .def("install", &GraphCache::install, py::arg("key"), py::arg("inputs"), py::arg("replay"),
           py::arg("output"), py::arg("keep"), py::arg("write_back") = std::vector<size_t>{},
           py::arg("exec") = uintptr_t(0), py::arg("device") = -1)
      .def_property_readonly("direct_launches", &GraphCache::directLaunches)
      .def("set_guard", &GraphCache::setGuard)
      .def("clear", &GraphCache::clear)
      .def("__len__", &GraphCache::size)
      .def_property_readonly("replays", &GraphCache::replays)
      .def_readwrite("fast", &GraphCache::fast)
      .def_readwrite("driver_copy", &GraphCache::driverCopy);

  m.def("set_hooks", [](py::object makeDevice) { hooks().makeDevice = makeDevice; });
  m.def("tree_flatten", [](py::object obj) {
    std::vector<py::handle> leaves;
    auto spec = std::make_shared<TreeSpec>();
    flatten(obj, leaves, spec.get(), nullptr);
    py::list l;
    for (py::handle h : leaves) l.append(h);
    return py::make_tuple(l, py::cast(spec));
  });
  py::class_<TreeSpec, std::shared_ptr<TreeSpec>>(m, "TreeSpec");
  m.def("tree_unflatten", [](const std::shared_ptr<TreeSpec>& spec, py::list leaves) {
    size_t pos = 0;
    return unflatten(*spec, leaves, pos);
  });
  m.def("capture_tensor", [](py::handle t) {
    THUNDER_CHECK_KIND(THPVariable_Check(t.ptr()), ErrorKind::Type, "capture_tensor: expected a torch.Tensor");
    return captureTensor(THPVariable_Unpack(t.ptr()));
  }, "The proxy of a real tensor met while tracing (it becomes an input of the trace).");
  m.def("torch_names", [] {
    py::list l;
    for (const ltorch::TorchName& n : ltorch::torchNames())
      l.append(py::make_tuple(n.qualname, n.symbolId, n.swapped));
    return l;
  });
  m.def("get_symbol", [](const std::string& id) {
    Symbol* s = SymbolRegistry::get().find(id);
    THUNDER_CHECK_KIND(s != nullptr, ErrorKind::Value, "no symbol named '", id, "'");
    return s;
  }, py::return_value_policy::reference);
  m.def("symbols", [](const std::string& module) {
    return SymbolRegistry::get().inModule(module);
  }, py::return_value_policy::reference);
  m.def("run_pipeline", &runPipeline, py::arg("trace"), py::arg("executors"), py::arg("verify") = false);
  m.def(
      "set_default_float",
      [](const std::string& name) {
        std::optional<DType> d = dtypeFromName(name);
        THUNDER_CHECK_KIND(d.has_value(), ErrorKind::Type, "set_default_float: unknown dtype ", name);
        setDefaultFloat(*d);
      },
      py::arg("dtype"), "The dtype of Python floats and of integers promoted to floats in the traces made next "
                        "(torch.get_default_dtype(), set by the tracer).");
  m.def("executor_names", [] {
    std::vector<std::string> n;
    for (Executor* e : ExecutorRegistry::get().all()) n.push_back(e->name());
    return n;
  });
  m.def("execution_python", [](const std::shared_ptr<Trace>& t) { return printTrace(*t); });
  // Last, so that other translation units can extend the classes bound above.
  for (auto& init : moduleInits()) init(m);
}
