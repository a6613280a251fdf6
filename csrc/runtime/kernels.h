// Kernels: the run-time halves of executors. A kernel takes the arguments of one claimed call as
// IValues (tensors from the register file, constants from the trace) and returns its output.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ir/symbol.h"

namespace thunder {
class Executor;
}

namespace thunder::runtime {

/// Typed access to a call's arguments, one per parameter of the symbol's signature.
struct KernelArgs {
  std::vector<c10::IValue>& v;
  /// dtype and device of the call's (first) tensor output, from the trace.
  at::ScalarType outDType = at::ScalarType::Float;
  c10::Device outDevice = c10::Device(c10::kCPU);
  /// Arguments whose registers are dead after this call, moved into `v`: a kernel that would
  /// write a new tensor of the same shape may write into one when `owned(i)` says nothing else
  /// holds it.
  uint64_t donated = 0;  // bit i: argument i

  const at::Tensor& t(size_t i) const { return v[i].toTensor(); }
  /// Whether argument `i` is a donated tensor that no other tensor, view or register shares, and
  /// whose elements do not overlap: writing into it is invisible to everything else.
  bool owned(size_t i) const {
    if (i >= 64 || !((donated >> i) & 1) || !v[i].isTensor()) return false;
    const at::Tensor& x = v[i].toTensor();
    if (x.use_count() != 1 || !x.has_storage() || !x.is_non_overlapping_and_dense() || x.is_inference())
      return false;
    if (x.storage().use_count() == 1) return true;
    // A view (a reshape the runtime made) whose base only the view itself keeps alive, and
    // which covers all of it: writing into the view writes nothing anyone else can read.
    if (!x.is_view()) return false;
    const at::TensorBase& base = x._base();
    return base.use_count() == 1 && !base.is_view() && x.storage().use_count() == 2 &&
           x.storage_offset() == 0 && x.numel() == base.numel() && base.is_non_overlapping_and_dense();
  }
  bool isTensor(size_t i) const { return v[i].isTensor(); }
  bool none(size_t i) const { return v[i].isNone(); }
  int64_t i(size_t k) const { return v[k].toInt(); }
  double d(size_t k) const { return v[k].isDouble() ? v[k].toDouble() : static_cast<double>(v[k].toInt()); }
  bool b(size_t k) const { return v[k].toBool(); }
  std::string str(size_t k) const { return v[k].toStringRef(); }
  /// A number argument as a Scalar.
  at::Scalar s(size_t k) const;
  /// A tensor, or a number wrapped as a 0-dim tensor on the call's device that promotes like a
  /// Python number (converted to the computation dtype before the kernel reads it).
  at::Tensor tw(size_t k) const;
  /// A tensor, or a number as PyTorch's Tensor-Scalar overloads pass it (`torch.mul(t, 0.7)`): a
  /// wrapped 0-dim CPU tensor, which CUDA kernels read in their math type (0.7 as a float for a
  /// half tensor, not rounded to half) and which CUDA division turns into a reciprocal.
  at::Tensor tn(size_t k) const;
  /// An int or a list of ints.
  std::vector<int64_t> ints(size_t k) const;
  std::optional<std::vector<int64_t>> optInts(size_t k) const {
    return none(k) ? std::nullopt : std::optional(ints(k));
  }
  std::optional<at::ScalarType> dtype(size_t k) const {
    return none(k) ? std::nullopt : std::optional(static_cast<at::ScalarType>(v[k].toInt()));
  }
  std::vector<at::Tensor> tensors(size_t k) const;
  at::TensorOptions outOptions() const { return at::TensorOptions().dtype(outDType).device(outDevice); }
};

using Kernel = std::function<c10::IValue(KernelArgs&)>;

/// Registers the torch executor's implementations and kernels (idempotent).
void registerTorchExecutor();
/// Adds the kernels of the fused attention symbols (ops/sdpa.h) to the torch executor.
void registerSdpaKernels(Executor& torch);
/// Makes an executor symbol that prints as `module.name` with `semantic`'s signature.
const Symbol* makeExecSymbol(const std::string& executor, const std::string& module,
                             const std::string& name, const Symbol& semantic, bool bareName = false);
/// An executor symbol made for one compiled program (a fusion region), as makeExecSymbol, owned
/// by the returned pointer (BoundSymbol::owner holds it in the traces that call it). When the
/// last copy goes, its kernel is removed from the table (releasing what the kernel holds: the
/// compiled region and its loaded libraries), then `onRelease` runs and the symbol is deleted.
std::shared_ptr<const Symbol> makeOwnedExecSymbol(const std::string& executor, const std::string& name,
                                                  std::function<void(const Symbol*)> onRelease = {});
/// The number of kernels in the table (kernels of released symbols are gone).
size_t kernelCount();
/// Attaches the kernel that runs an executor symbol.
void setKernel(const Symbol* execSymbol, Kernel kernel);
/// The kernel of an executor symbol, or nullptr.
const Kernel* findKernel(const Symbol* execSymbol);
/// A C++ kernel that an operator registered from Python (thunder.extend, the fallback) runs instead
/// of its Python function, by name, or nullptr: the cudnn executor's attention ("cudnn_sdpa_fwd",
/// "cudnn_sdpa", "cudnn_sdpa_bwd"), whose per-call host time through Python was 30-80 us, and
/// "Tensor.__getitem__" (a tensor and its key, as the torch executor's getitem kernel takes them).
const Kernel* nativeKernel(const std::string& name);
/// Adds a kernel to nativeKernel's table (at registration, before any lookup).
void registerNativeKernel(const std::string& name, Kernel kernel);
/// The apex executor's fused cross-entropy forward on CUDA (executors/cross_entropy.h): the loss
/// reduced as `reduction` says ("none", "mean" over the rows not ignored, "sum"), in float32 (the
/// kernels' math; apex_cross_entropy rounds it to the logits' dtype, apex_cross_entropy_upcast
/// keeps it), and each row's max-log-sum-exp (float32). Rows whose label is `ignoreIndex` or negative
/// are ignored.
std::tuple<at::Tensor, at::Tensor> crossEntropyForward(const at::Tensor& logits,
                                                       const at::Tensor& labels,
                                                       const std::string& reduction,
                                                       double smoothing, int64_t ignoreIndex);
/// The gradient of the per-row losses with respect to the logits, given each row's cotangent
/// `grad` (0 for ignored rows) and the forward's max-log-sum-exp.
/// `inPlace`: the caller owns `logits` (nothing else reads it): the gradient is written over it.
at::Tensor crossEntropyBackward(const at::Tensor& grad, const at::Tensor& logits,
                                const at::Tensor& labels, const at::Tensor& maxLogSumExp,
                                double smoothing, bool inPlace = false);
/// 2-D max pooling on CUDA without the indices (inference: ATen's kernel also writes an int64
/// index per output, as many bytes as its bf16 input). nullopt where it does not apply (another
/// device, dtype or rank, a window ATen would refuse): the caller runs ATen's. The kernel's source
/// for a dtype (float32, bfloat16, float16) is maxPool2dCudaSource's.
std::optional<at::Tensor> maxPool2dCuda(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation, bool ceilMode);
std::string maxPool2dCudaSource(DType dtype);
/// thunder dtype -> ATen scalar type, and back.
at::ScalarType toScalarType(DType d);
DType fromScalarType(at::ScalarType s);

}  // namespace thunder::runtime
