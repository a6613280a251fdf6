#include "runtime/program.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "codegen/python_printer.h"
#include "ir/error.h"

namespace thunder::runtime {

int Program::regOf(const TensorProxy& t, const std::string& where) {
  auto it = regs_.find(t.name);
  THUNDER_INTERNAL(it != regs_.end(), "runtime: ", t.name, " is used before it is defined in ", where);
  return it->second;
}

Operand Program::lower(const Value& v) {
  Operand op;
  if (!symbols_.empty() && v.hasSymbolic()) {
    if (v.isInt()) {
      op.kind = Operand::Kind::SymInt;
      op.expr = v.symExpr();
      return op;
    }
    THUNDER_INTERNAL(v.isSequence() || v.isSlice(), "runtime: a ", kindName(v.kind()), " with symbolic ints");
    bool allInts = !v.isSlice();
    for (const Value& x : v.items()) {
      allInts &= x.isInt();
      op.items.push_back(lower(x));
    }
    op.kind = v.isSlice() ? Operand::Kind::SliceTuple : allInts ? Operand::Kind::IntList : Operand::Kind::AnyList;
    return op;
  }
  switch (v.kind()) {
    case Value::Kind::Tensor:
      op.kind = Operand::Kind::Reg;
      op.reg = regOf(v.tensor(), "a call");
      return op;
    case Value::Kind::Slice: {
      // A tuple (start, stop, step): kernels tell it from a list (Tensor.__getitem__'s key).
      std::vector<c10::IValue> parts;
      for (const Value& x : v.items()) parts.push_back(lower(x).constant);
      op.constant = c10::ivalue::Tuple::create(std::move(parts));
      return op;
    }
    case Value::Kind::Ellipsis: op.constant = std::string("..."); return op;
    case Value::Kind::Tuple:
    case Value::Kind::List: {
      bool allInts = true, anyTensor = false;
      for (const Value& x : v.items()) {
        allInts &= x.isInt();
        anyTensor |= x.isTensor();
      }
      if (allInts) {
        op.constant = c10::IValue(v.toInts());
        return op;
      }
      if (anyTensor) {
        op.kind = Operand::Kind::List;
        op.tensorList = true;
        for (const Value& x : v.items()) op.items.push_back(lower(x));
        return op;
      }
      c10::impl::GenericList list(c10::AnyType::get());
      for (const Value& x : v.items()) list.push_back(lower(x).constant);
      op.constant = c10::IValue(list);
      return op;
    }
    case Value::Kind::None: return op;
    case Value::Kind::Bool: op.constant = v.toBool(); return op;
    case Value::Kind::Int: op.constant = v.toInt(); return op;
    case Value::Kind::Float: op.constant = v.toDouble(); return op;
    case Value::Kind::Complex: op.constant = c10::complex<double>(v.toComplex()); return op;
    case Value::Kind::String: op.constant = v.toString(); return op;
    case Value::Kind::DType: op.constant = static_cast<int64_t>(toScalarType(v.toDType())); return op;
    case Value::Kind::Device: {
      Device d = v.toDevice();
      op.constant = c10::Device(d.type == DeviceType::CUDA ? c10::kCUDA
                                : d.type == DeviceType::Meta ? c10::kMeta
                                                             : c10::kCPU,
                                d.type == DeviceType::CUDA ? d.index : -1);
      return op;
    }
    default:
      throw InternalError("runtime: cannot pass a " + kindName(v.kind()) + " to a kernel");
  }
}

Program::Program(std::shared_ptr<const Trace> trace, std::vector<SizeSymbol> symbols)
    : trace_(std::move(trace)), symbols_(std::move(symbols)) {
  for (const TensorPtr& t : trace_->inputs) regs_[t->name] = numRegs_++;
  for (const BoundSymbol& b : trace_->bsyms) {
    if (b.sym->hasTag(kDel)) {
      THUNDER_INTERNAL(!code_.empty(), "runtime: del before any call");
      for (const TensorPtr& t : b.inputTensors()) code_.back().frees.push_back(regOf(*t, "del"));
      continue;
    }
    Instruction ins;
    ins.bsym = &b;
    ins.kernel = findKernel(b.sym);
    ins.profileName = "thunder::" + b.sym->printName();
    THUNDER_CHECK_KIND(ins.kernel != nullptr, ErrorKind::NotImplemented, "no kernel runs ",
                       b.sym->printName(), " (in `", printCall(b), "`)");
    for (const Value& a : b.args) ins.args.push_back(lower(a));
    auto defineOut = [&](const Value& o) {
      if (!o.isTensor()) return -1;
      auto it = regs_.find(o.tensor().name);
      if (it != regs_.end()) return it->second;
      return regs_[o.tensor().name] = numRegs_++;
    };
    if (b.output.isSequence()) {
      ins.tuple = true;
      for (const Value& o : b.output.items()) ins.outRegs.push_back(defineOut(o));
    } else {
      ins.outRegs.push_back(defineOut(b.output));
    }
    std::vector<TensorPtr> outs = b.outputTensors();
    if (!outs.empty()) {
      ins.outDType = toScalarType(outs[0]->dtype);
      const Device& d = outs[0]->device;
      ins.outDevice = d.type == DeviceType::CUDA ? c10::Device(c10::kCUDA, d.index)
                      : d.type == DeviceType::Meta ? c10::Device(c10::kMeta)
                                                   : c10::Device(c10::kCPU);
    }
    code_.push_back(std::move(ins));
  }
  std::vector<TensorPtr> outs;
  trace_->output.collectTensors(outs);
  for (const TensorPtr& t : outs) outputRegs_.push_back(regOf(*t, "return"));
  // Donation: tensor arguments (not returned) whose register this call frees and no other
  // argument of the call reads.
  const int numInputs = static_cast<int>(trace_->inputs.size());
  std::function<int(const Operand&, int)> reads = [&](const Operand& op, int r) {
    if (op.kind == Operand::Kind::Reg) return op.reg == r ? 1 : 0;
    int n = 0;
    for (const Operand& x : op.items) n += reads(x, r);
    return n;
  };
  for (Instruction& ins : code_) {
    for (size_t k = 0; k < ins.args.size() && k < 64; ++k) {
      if (ins.args[k].kind != Operand::Kind::Reg) continue;
      int r = ins.args[k].reg;
      if (std::find(ins.frees.begin(), ins.frees.end(), r) == ins.frees.end()) continue;
      if (std::find(outputRegs_.begin(), outputRegs_.end(), r) != outputRegs_.end()) continue;
      int n = 0;
      for (const Operand& op : ins.args) n += reads(op, r);
      if (n == 1) ins.donate.push_back({static_cast<int>(k), r, r < numInputs});
    }
  }
}

namespace {

c10::IValue materialize(const Operand& op, const std::vector<c10::IValue>& regs, const std::vector<int64_t>& syms) {
  switch (op.kind) {
    case Operand::Kind::Const: return op.constant;
    case Operand::Kind::Reg: return regs[op.reg];
    case Operand::Kind::List: {
      c10::List<at::Tensor> list;
      for (const Operand& x : op.items) list.push_back(materialize(x, regs, syms).toTensor());
      return c10::IValue(list);
    }
    case Operand::Kind::SymInt: return c10::IValue(op.expr->eval(syms));
    case Operand::Kind::IntList: {
      std::vector<int64_t> xs;
      xs.reserve(op.items.size());
      for (const Operand& x : op.items) xs.push_back(materialize(x, regs, syms).toInt());
      return c10::IValue(xs);
    }
    case Operand::Kind::SliceTuple: {
      std::vector<c10::IValue> parts;
      for (const Operand& x : op.items) parts.push_back(materialize(x, regs, syms));
      return c10::ivalue::Tuple::create(std::move(parts));
    }
    case Operand::Kind::AnyList: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const Operand& x : op.items) list.push_back(materialize(x, regs, syms));
      return c10::IValue(list);
    }
  }
  return {};
}

}  // namespace

std::vector<int64_t> Program::symbolValues(const std::vector<at::Tensor>& inputs) const {
  std::vector<int64_t> syms;
  syms.reserve(symbols_.size());
  for (const SizeSymbol& s : symbols_) syms.push_back(inputs.at(s.input).size(s.dim));
  return syms;
}

std::vector<at::Tensor> Program::run(std::vector<at::Tensor> inputs, bool inputsHandedOver,
                                     const std::vector<int64_t>* symbolValues) const {
  THUNDER_INTERNAL(inputs.size() == trace_->inputs.size(), "runtime: expected ",
                   trace_->inputs.size(), " inputs, got ", inputs.size());
  // A trace holds its own casts (the autocast policy was applied while it was traced): ATen must
  // not apply autocast again, whether the call or its backward runs inside an autocast region.
  c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::autocast_dispatch_keyset);
  std::vector<int64_t> syms = symbolValues ? *symbolValues : this->symbolValues(inputs);
  THUNDER_INTERNAL(syms.size() == symbols_.size(), "runtime: expected ", symbols_.size(), " symbol values, got ",
                   syms.size());
  std::vector<c10::IValue> regs(numRegs_);
  for (size_t i = 0; i < inputs.size(); ++i) regs[i] = std::move(inputs[i]);
  std::vector<c10::IValue> args;
  for (const Instruction& ins : code_) {
    args.clear();
    for (const Operand& op : ins.args) args.push_back(materialize(op, regs, syms));
    KernelArgs ka{args, ins.outDType, ins.outDevice};
    for (const Instruction::Donation& d : ins.donate) {
      if (d.input && !inputsHandedOver) continue;
      regs[d.reg] = c10::IValue();
      ka.donated |= uint64_t(1) << d.arg;
      static const bool debug = std::getenv("THUNDER_DEBUG_DONATION") != nullptr;
      if (debug && args[d.arg].isTensor()) {  // which donations a kernel may write into
        const at::Tensor& x = args[d.arg].toTensor();
        fprintf(stderr, "donate %s arg %d: use_count %zu storage %zu owned %d\n",
                ins.bsym->sym->printName().c_str(), d.arg, (size_t)x.use_count(),
                x.has_storage() ? (size_t)x.storage().use_count() : 0, (int)ka.owned(d.arg));
      }
    }
    c10::IValue out;
    // Each call is a range of torch.profiler's host timeline (benchmarks/profile_step.py's host
    // time by symbol); without a profiler this is one check for callbacks, as RECORD_FUNCTION does.
    std::optional<at::RecordFunction> range;
    if (auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE)) {
      range.emplace(std::move(*callbacks));
      if (range->isActive()) range->before(ins.profileName.c_str(), static_cast<const std::vector<c10::IValue>*>(&args));
    }
    try {
      out = (*ins.kernel)(ka);
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      // The Python exception eager raises: c10's subclasses map to IndexError, ValueError, ...
      ErrorKind kind = dynamic_cast<const c10::IndexError*>(&e)            ? ErrorKind::Index
                       : dynamic_cast<const c10::ValueError*>(&e)          ? ErrorKind::Value
                       : dynamic_cast<const c10::TypeError*>(&e)           ? ErrorKind::Type
                       : dynamic_cast<const c10::NotImplementedError*>(&e) ? ErrorKind::NotImplemented
                                                                           : ErrorKind::Runtime;
      throw Error(kind, "thunder: " + ins.bsym->sym->printName() + " failed in `" +
                            printCall(*ins.bsym) + "`: " + e.what_without_backtrace());
    }
    if (ins.tuple) {
      const auto& elems = out.toTupleRef().elements();
      THUNDER_INTERNAL(elems.size() == ins.outRegs.size(), "runtime: ", ins.bsym->sym->printName(),
                       " returned ", elems.size(), " outputs, the trace expects ", ins.outRegs.size());
      for (size_t i = 0; i < elems.size(); ++i)
        if (ins.outRegs[i] >= 0) regs[ins.outRegs[i]] = elems[i];
    } else if (ins.outRegs[0] >= 0) {
      regs[ins.outRegs[0]] = std::move(out);
    }
    for (int r : ins.frees) regs[r] = c10::IValue();
  }
  std::vector<at::Tensor> result;
  result.reserve(outputRegs_.size());
  for (int r : outputRegs_) result.push_back(regs[r].toTensor());
  return result;
}

}  // namespace thunder::runtime
