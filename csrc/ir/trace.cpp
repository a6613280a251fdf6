#include "ir/trace.h"

#include "ops/symbolic_rules.h"

#include <algorithm>

#include "ir/error.h"

namespace thunder {

std::vector<TensorPtr> BoundSymbol::inputTensors() const {
  std::vector<TensorPtr> out;
  for (const Value& a : args) a.collectTensors(out);
  return out;
}

Value substitute(const Value& v, const TensorRenames& to) {
  if (v.isTensor()) {
    auto it = to.find(v.toTensor().get());
    return it == to.end() ? v : Value(it->second);
  }
  if (!v.isSequence() && !v.isDict()) return v;
  std::vector<Value> items;
  items.reserve(v.items().size());
  for (const Value& x : v.items()) items.push_back(substitute(x, to));
  if (v.isTuple()) return Value::tuple(std::move(items));
  if (v.isList()) return Value::list(std::move(items));
  return Value::dict(v.keys(), std::move(items));
}

void substituteReads(BoundSymbol& b, const TensorRenames& to) {
  for (Value& a : b.args) a = substitute(a, to);
  for (BoundSymbol& s : b.subsymbols) substituteReads(s, to);
}

std::vector<TensorPtr> BoundSymbol::outputTensors() const {
  std::vector<TensorPtr> out;
  output.collectTensors(out);
  return out;
}

std::string Trace::newName(const std::string& prefix) {
  std::string name;
  do {
    name = prefix + std::to_string(nextId++);
  } while (names.count(name));
  names.insert(name);
  return name;
}

void Trace::reserveName(const std::string& name) {
  THUNDER_INTERNAL(names.insert(name).second, "name '", name, "' is already in use");
}

void Trace::addGuard(const SymGuard& g) {
  if (g.e.isConstant()) return;  // (true of every value of the symbols)
  for (const SymGuard& h : guards)
    if (h == g) return;
  guards.push_back(g);
}

Trace Trace::emptyCopy() const {
  Trace t;
  t.fnName = fnName;
  t.inputs = inputs;
  t.output = output;
  t.isExecution = isExecution;
  t.symbols = symbols;
  t.guards = guards;
  t.names = names;
  t.nextId = nextId;
  return t;
}

TraceContext::TraceContext(Trace& trace) : trace_(trace) { scopes_.push_back(&trace.bsyms); }

TensorPtr TraceContext::newTensor(Shape shape, DType dtype, Device device, bool requiresGrad) {
  auto t = std::make_shared<TensorProxy>();
  t->name = trace_.newName();
  t->shape = std::move(shape);
  t->dtype = dtype;
  t->device = device;
  t->requiresGrad = requiresGrad;
  return t;
}

namespace {
thread_local TraceContext* tlsContext = nullptr;
}

TraceContext* currentContext() { return tlsContext; }

TraceContext& requireContext(const std::string& what) {
  THUNDER_CHECK(tlsContext != nullptr, what,
                " can only be called while tracing, inside a function given to thunder.jit");
  return *tlsContext;
}

TracingScope::TracingScope(Trace& trace) : ctx_(trace), prev_(tlsContext) { tlsContext = &ctx_; }
TracingScope::~TracingScope() { tlsContext = prev_; }

namespace {
/// Inside the meta function or decomposition of a call that reads symbolic sizes: its inner calls
/// are traced at the hints only (the call runs whole where its sizes vary).
thread_local int tlsInsideSymbolic = 0;
}  // namespace

Value call(const Symbol& sym, std::vector<Value> args) {
  TraceContext& ctx = requireContext(sym.id());
  BoundSymbol bsym;
  bsym.sym = &sym;
  bsym.args = std::move(args);
  const bool symbolic = !ctx.trace().symbols.empty() && tlsInsideSymbolic == 0 && readsSymbolic(bsym.args);
  struct Inside {
    bool on;
    explicit Inside(bool o) : on(o) { tlsInsideSymbolic += on; }
    ~Inside() { tlsInsideSymbolic -= on; }
  };
  ctx.pushScope(&bsym.subsymbols);
  try {
    Inside inside(symbolic);
    if (sym.meta) {
      bsym.output = sym.meta(bsym.args);
    } else if (sym.impl) {
      bsym.output = sym.impl(bsym.args);
    } else {
      throw InternalError("symbol " + sym.id() + " has neither a meta function nor an impl");
    }
  } catch (...) {
    ctx.popScope();
    throw;
  }
  ctx.popScope();
  if (symbolic) recordSymbolic(ctx.trace(), bsym);
  Value out = bsym.output;
  if (!sym.meta && bsym.subsymbols.empty()) {
    // A decomposition that returned its input unchanged (x.to(x.dtype), a no-op reshape) is
    // not a call: recording it would print as `t_0 = ltorch.to(t_0, ...)`.
    bool passthrough = true;
    std::vector<TensorPtr> ins = bsym.inputTensors();
    for (const TensorPtr& o : bsym.outputTensors())
      passthrough &= std::find(ins.begin(), ins.end(), o) != ins.end();
    if (passthrough) {
      if (symbolic) recordPassthrough(ctx.trace(), bsym);
      return out;
    }
  }
  ctx.scope().push_back(std::move(bsym));
  return out;
}

namespace {

Value replaced(const Value& v, const TensorProxy* from, const TensorPtr& to) {
  if (v.isTensor()) return v.toTensor().get() == from ? Value(to) : v;
  if (!v.isSequence()) return v;
  std::vector<Value> items;
  for (const Value& x : v.items()) items.push_back(replaced(x, from, to));
  return v.isTuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

}  // namespace

void replaceTensor(BoundSymbol& b, const TensorProxy* from, const TensorPtr& to) {
  for (Value& a : b.args) a = replaced(a, from, to);
  b.output = replaced(b.output, from, to);
  for (BoundSymbol& s : b.subsymbols) replaceTensor(s, from, to);
}

Value traceScratch(Trace& out, const std::function<Value()>& build, std::vector<BoundSymbol>& calls) {
  Trace scratch = out.emptyCopy();
  Value made;
  {
    TracingScope scope(scratch);
    made = build();
  }
  out.names = std::move(scratch.names);
  out.nextId = scratch.nextId;
  calls = std::move(scratch.bsyms);
  return made;
}

std::unordered_map<const TensorProxy*, size_t> readCounts(const Trace& trace) {
  std::unordered_map<const TensorProxy*, size_t> readers;
  for (const BoundSymbol& b : trace.bsyms)
    for (const TensorPtr& t : b.inputTensors()) ++readers[t.get()];
  std::vector<TensorPtr> returned;
  trace.output.collectTensors(returned);
  for (const TensorPtr& t : returned) ++readers[t.get()];
  return readers;
}

Value appendTraced(Trace& out, const std::function<Value()>& build) {
  std::vector<BoundSymbol> calls;
  Value made = traceScratch(out, build, calls);
  for (BoundSymbol& s : calls) out.bsyms.push_back(std::move(s));
  return made;
}

void appendTraced(Trace& out, const std::function<Value()>& build, const TensorPtr& result,
                  const std::string& pass) {
  std::vector<BoundSymbol> calls;
  Value made = traceScratch(out, build, calls);
  THUNDER_INTERNAL(made.isTensor() && made.tensor().shape == result->shape &&
                       made.tensor().dtype == result->dtype,
                   pass, ": the rewrite makes ", made.isTensor() ? made.tensor().typeString() : "no tensor",
                   " where the trace has ", result->typeString());
  for (BoundSymbol& s : calls) {
    replaceTensor(s, made.toTensor().get(), result);
    out.bsyms.push_back(std::move(s));
  }
}

}  // namespace thunder
