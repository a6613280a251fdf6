// A compiled final trace: the bound symbols lowered to kernel calls over a register file.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/trace.h"
#include "runtime/kernels.h"

namespace thunder::runtime {

/// An argument of a kernel call: a constant, a register, a list of tensor operands, an int
/// computed from the size symbols at each run, or a list of ints or of other values with such
/// ints among them.
struct Operand {
  enum class Kind : uint8_t { Const, Reg, List, SymInt, IntList, AnyList, SliceTuple } kind = Kind::Const;
  c10::IValue constant;
  int reg = -1;
  std::vector<Operand> items;
  bool tensorList = false;
  SymPtr expr;  // Kind::SymInt
};

/// One kernel call.
struct Instruction {
  const Kernel* kernel = nullptr;
  const BoundSymbol* bsym = nullptr;  // for error messages
  std::vector<Operand> args;
  /// Registers receiving the output: one per output tensor (-1 drops it); `tuple` when the
  /// kernel returns a tuple.
  std::vector<int> outRegs;
  bool tuple = false;
  /// Registers released after the call (`del`).
  std::vector<int> frees;
  /// Arguments (index, register) whose register this call is the last reader of, read by no
  /// other argument of the call: they are moved into the call (KernelArgs::donated). Registers
  /// of the program's inputs are donated only when the caller hands its inputs over.
  struct Donation {
    int arg = 0, reg = 0;
    bool input = false;
  };
  std::vector<Donation> donate;
  at::ScalarType outDType = at::kFloat;
  c10::Device outDevice = c10::Device(c10::kCPU);
  /// The name the call has in torch.profiler's host timeline: "thunder::" + the symbol's name.
  std::string profileName;
};

/// The executable form of a final trace.
class Program {
 public:
  /// Lowers a final trace; every bound symbol must be claimed by an executor with a kernel.
  /// `symbols`: the size symbols the program takes from its inputs at each run (s<k> is
  /// symbols[k]); empty: every int is the constant the trace holds (its hint).
  explicit Program(std::shared_ptr<const Trace> trace, std::vector<SizeSymbol> symbols = {});
  /// Runs the program on the trace's inputs, in order; returns the output tensors in the order
  /// of Trace::output.collectTensors().
  /// `inputsHandedOver`: the caller keeps no reference it relies on to the inputs, so the
  /// program may donate dead input registers to the calls that read them last.
  /// `symbolValues`: the values of the size symbols, where the inputs do not hold them (a
  /// backward's: the forward's); null: read from the inputs as `symbols` says.
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs, bool inputsHandedOver = false,
                              const std::vector<int64_t>* symbolValues = nullptr) const;
  /// The values of the size symbols in `inputs` (the program's inputs, in order).
  std::vector<int64_t> symbolValues(const std::vector<at::Tensor>& inputs) const;
  bool symbolic() const { return !symbols_.empty(); }
  const Trace& trace() const { return *trace_; }

 private:
  Operand lower(const Value& v);
  int regOf(const TensorProxy& t, const std::string& where);

  std::shared_ptr<const Trace> trace_;
  std::unordered_map<std::string, int> regs_;
  std::vector<Instruction> code_;
  std::vector<int> outputRegs_;
  int numRegs_ = 0;
  std::vector<SizeSymbol> symbols_;
};

}  // namespace thunder::runtime
