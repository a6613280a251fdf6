// The kernel IR of a fusion region: a scalar SSA program evaluated at each element of the
// region's iteration space, with loads from inputs (through stride maps), optional row
// reductions over the last dimension, and stores to outputs. Both code generators (CUDA, C++)
// emit from this one form.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "ir/trace.h"

namespace thunder::codegen {

/// One scalar operation.
struct KNode {
  enum class Kind : uint8_t { Load, Const, Op, Reduce, InRange };
  Kind kind = Kind::Op;
  /// The prim name for Op ("add", "exp", "where", "convert_element_type") or the reduction
  /// ("sum", "amax", "amin") for Reduce.
  std::string op;
  /// The value's dtype (low-precision floats are held in float registers).
  DType dtype = DType::Float32;
  std::vector<int> operands;
  /// Load: the index of the kernel input.
  int input = -1;
  /// Const: the literal, printed exactly.
  std::string literal;
  /// InRange: whether iteration index `dim` lies in [lo, hi) (which piece of a cat, inside a pad).
  int dim = -1;
  int64_t lo = 0, hi = 0;
  /// How many row reductions this value depends on (0: computable in the first pass).
  int phase = 0;
  /// A conversion the program asked for (an explicit cast, castOutputs): a value rounded to 16
  /// bits here is read rounded even where a kernel computes its chains in float32.
  bool asked = false;
};

/// A kernel input: a region input tensor as seen at the iteration shape. Strides are runtime
/// arguments (zero on broadcast dimensions), so one compiled kernel serves every shape of the
/// same rank.
///
/// Index remapping (slices, pads, cats, permutes and merged dims read inside a kernel): the input's
/// index along its dim j is sum of coef[d] * i_d over the iteration dims d with dimMap[d] == j, plus
/// offset[j]. The runtime folds the offsets into the input's address and multiplies strides by the
/// coefficients. Where an iteration dim can reach outside the input (a cat's piece, a pad's
/// source), `guard` gives the range [lo, hi) of that dim the input is read at; elsewhere the load
/// gives 0 and reads nothing.
struct KInput {
  TensorPtr tensor;
  /// For each iteration dimension, the input dimension it reads (-1 for a broadcast dimension).
  std::vector<int> dimMap;
  /// For each iteration dimension, its coefficient in the input's index (1 unless dims merged).
  std::vector<int64_t> coef;
  /// For each input dimension, the constant added to its index.
  std::vector<int64_t> offset;
  /// For each iteration dimension, [lo, hi): empty when the input is read everywhere.
  std::vector<std::pair<int64_t, int64_t>> guard;
  bool guarded() const { return !guard.empty(); }
  /// Whether the input's offsets are all zero.
  bool unshifted() const {
    for (int64_t o : offset)
      if (o != 0) return false;
    return true;
  }
  /// A gather (an index_select or embedding of a region input): input dim `gatherDim` is read at
  /// the index held by node `gatherNode` (an integer Load, checked against the dim's length: out
  /// of range stops the kernel, as eager's device-side assert does); no iteration dim reads it
  /// through dimMap. -1: none.
  int gatherDim = -1;
  int gatherNode = -1;
  bool gathers() const { return gatherDim >= 0; }
};

/// A kernel output: the node whose value is stored, and whether it has the reduced shape (one
/// value per row). A column output is a sum over every iteration dim but the last (a bias
/// gradient): `node` is the full-size value summed, accumulated in `accDtype`, then converted
/// through the `epilogue` dtypes in order.
///
/// A scattered output is stored into an existing tensor `into` (a region input: a KV cache that
/// `buf.index_copy_(dim, pos, x)` updates in place), not a new one: iteration dim d indexes dim
/// dimMap[d] of `into` (-1: none) with coefficient coef[d] (dims merged, as in KInput), except that
/// `into`'s dim `scatterDim` is indexed by the value of node `scatterNode` (checked like a
/// gather's). `tensor` is then the updated buffer's value, which the call returns (the buffer).
struct KOutput {
  TensorPtr tensor;
  int node = -1;
  bool reduced = false;
  bool column = false;
  DType accDtype = DType::Float32;
  std::vector<DType> epilogue;
  TensorPtr into;
  std::vector<int> dimMap;
  std::vector<int64_t> coef;
  int scatterDim = -1;
  int scatterNode = -1;
  /// A `contiguous` result (prims.stride_order): stored row-major whatever order the kernel
  /// iterates in, so the program keeps its own iteration order (permutableIteration).
  bool rowMajor = false;
  bool scattered() const { return scatterDim >= 0; }
};

/// A whole fused region lowered to scalar code.
struct KernelProgram {
  std::string name;
  /// The iteration shape: every full-size value has it (up to length-1 dims); reduced values
  /// drop the last dim.
  Shape iterShape;
  std::vector<KInput> inputs;
  std::vector<KNode> nodes;
  std::vector<KOutput> outputs;
  /// Empty, or the order the program iterates its values' dims in: iteration dim d is dim
  /// order[d] of every full-size value (a channel sum's region: {0, 2, 3, 1}, C last). Full-
  /// size outputs are stored contiguously in iteration order (the runtime returns them as views
  /// in their own dim order).
  std::vector<int> order;
  /// A hint for the variant compiled ahead of the first call (predictCudaVariants): the trace's
  /// 4-D activations are channels-last at run time (convolutions make them so), though traced
  /// contiguous. Set by the fusion executor; the code does not depend on it.
  bool channelsLastHint = false;
  /// Number of row reductions chained in sequence (0 for a pointwise kernel).
  int numPhases = 0;
  bool hasReduction() const { return numPhases > 0; }
  bool hasColumns() const {
    for (const KOutput& o : outputs)
      if (o.column) return true;
    return false;
  }
  /// Row reductions or column outputs: the kernel walks rows (else it is pointwise).
  bool rowKernel() const { return hasReduction() || hasColumns(); }
  /// Loads or stores at indices the kernel reads (gathers, scattered outputs): pointwise
  /// kernels then take the element-per-thread form, whatever the strides.
  bool indexed() const {
    for (const KInput& in : inputs)
      if (in.gathers()) return true;
    for (const KOutput& o : outputs)
      if (o.scattered()) return true;
    return false;
  }
};

/// Adds to `prog` (pointwise, element by element) an output that stores the values of its output
/// `from` into `buffer` (a tensor of `from`'s shape except along `dim`), along `dim` at the
/// positions `index` (an int64 vector, one per element of that dim) holds, as
/// `buffer.index_copy_(dim, index, from)`: `index` becomes a kernel input where it is not one,
/// and `result` names the updated buffer. `from` stays an output when `keepFrom`. False (with a
/// reason) where the program cannot: a row kernel, or `from` not of the iteration shape.
bool addScatteredOutput(KernelProgram& prog, const TensorPtr& from, const TensorPtr& buffer, int64_t dim,
                        const TensorPtr& index, const TensorPtr& result, bool keepFrom, std::string& whyNot);

/// Whether `prog` can iterate its dims in another order (permuteIteration): a pointwise program
/// without gathers or scatters, whose outputs all have the iteration shape (index ranges of cats
/// and pads permute with the dims they test). Its outputs are then stored in the new order: a
/// kernel whose inputs are channels-last (a convolution's output, the pieces of Inception's and
/// DenseNet's channel cats) writes channels-last outputs, at unit stride.
bool permutableIteration(const KernelProgram& prog);

/// `prog` iterating its dims in the order `perm` (its dim k is prog's dim perm[k]): the same
/// values, the outputs stored contiguously in that order.
KernelProgram permuteIteration(const KernelProgram& prog, const std::vector<int>& perm);

/// A float sum over every dimension but the last (a bias gradient): fusible, but its value can
/// only leave the region (through dtype conversions), not feed other ops in it.
bool isColumnSum(const BoundSymbol& b);

/// A float sum of an [N, C, H, W] value over (0, 2, 3) (a channel gradient: a conv's bias, a layer
/// scale, a norm's affine): a column sum of the values iterated with C last (KernelProgram::order).
/// Fused on CUDA only, and by the fuser only in traces whose activations are channels-last (see
/// FusionExecutor): there the permuted iteration reads them at unit stride.
bool isPermutedColumnSum(const BoundSymbol& b);

/// A column sum, plain or permuted: its value can only leave the region (the partition's terminal
/// prims).
bool isTerminalSum(const BoundSymbol& b);

/// A float sum over at most kUnrolledSum elements per result, over dims other than the last (the
/// gradient of an expand, as grouped-query attention's key and value heads): kernels compute it
/// pointwise over its result's shape, as additions of loads at fixed offsets, not as a
/// reduction phase; it fuses like an elementwise op.
constexpr int64_t kUnrolledSum = 8;
bool isUnrolledSum(const BoundSymbol& b);

/// Whether the code generators can compute a prim on a dtype.
bool isFusiblePrim(const BoundSymbol& b);
/// Whether a prim is a gather (take, embedding) that CUDA kernels compute, on any device (the
/// fuser fuses them on CUDA devices only: isFusiblePrim).
bool isFusibleGather(const BoundSymbol& b);

/// The tensors that calls of the torch language made by casting alone (their prims all
/// conversions: `x.to(dtype)`, `x.bfloat16()`, `type_as`), as opposed to the conversions inside
/// another op's decomposition (a bfloat16 op upcasts, computes and rounds) and conversion prims a
/// transform wrote at the top level. None in a backward trace, which writes its 16-bit ops'
/// conversions as calls of their own.
std::unordered_set<const TensorProxy*> castOutputs(const Trace& trace);

/// Lowers the prims of a region to a kernel program; returns false (with a reason) when the
/// region's shapes do not form one iteration space (then it is not fused).
///
/// With `casts` (castOutputs of the trace the region comes from), a CUDA kernel computes chains
/// of bfloat16/float16 ops in float32 (see readUnrounded in kernel_ir.cpp): the roundings inside
/// ops are skipped, those of `casts` kept. Without it, or on CPU, every rounding is eager's.
/// THUNDER_FUSER_FLOAT32_CHAINS=0 keeps eager's roundings everywhere, =1 computes in float32 on
/// every device (CPU tests of the CUDA rule).
bool lowerRegion(const std::string& name, const std::vector<BoundSymbol>& prims,
                 const std::vector<TensorPtr>& inputs, const std::vector<TensorPtr>& outputs,
                 KernelProgram& out, std::string& whyNot,
                 const std::unordered_set<const TensorProxy*>* casts = nullptr);

/// The C type a dtype is held in registers ("float" for bf16/f16).
std::string registerType(DType d, bool cuda);
/// The C type a dtype is stored in memory.
std::string storageType(DType d, bool cuda);

}  // namespace thunder::codegen
