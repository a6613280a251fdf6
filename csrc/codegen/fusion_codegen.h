// Code generation for fusion regions: CUDA C++ (compiled at run time with NVRTC) and C++ with
// OpenMP (compiled by the system compiler), both from the kernel IR.
#pragma once

#include <string>

#include "codegen/kernel_ir.h"

namespace thunder::codegen {

/// The layout of the int64 geometry block both kinds of kernel receive (R = iteration rank,
/// I = number of inputs): sizes[R], strides[I][R] (in elements, 0 on broadcast dims), numel,
/// row length (the last size), number of rows, then per dim a 32-bit division magic number and
/// shift (sizes divide 32-bit indices with a multiply-high, see `divisionMagic`).
///
/// Indexed programs (KernelProgram::indexed) append per input its stride along the dim it gathers
/// (0 where it gathers none), then per output R + 1 strides: along the iteration dims, then along
/// the scattered dim, of the buffer a scattered output is stored into (0 for other outputs,
/// stored in iteration order).
struct Geometry {
  static size_t length(size_t rank, size_t inputs) { return rank + inputs * rank + 3 + 2 * rank; }
  static size_t magic(size_t rank, size_t inputs, size_t dim) { return rank + inputs * rank + 3 + 2 * dim; }
  static size_t gatherStride(size_t rank, size_t inputs, size_t input) { return length(rank, inputs) + input; }
  static size_t outputStride(size_t rank, size_t inputs, size_t output, size_t dim) {
    return length(rank, inputs) + inputs + output * (rank + 1) + dim;
  }
  static size_t length(size_t rank, size_t inputs, size_t outputs, bool indexed) {
    return length(rank, inputs) + (indexed ? inputs + outputs * (rank + 1) : 0);
  }
  static size_t length(const KernelProgram& p) {
    return length(p.iterShape.size(), p.inputs.size(), p.outputs.size(), p.indexed());
  }
};

/// For 1 <= d <= 2^31: (magic, shift) with n / d == (umulhi(n, magic) + n) >> shift for every
/// n < 2^31 (the round-up reciprocal method).
void divisionMagic(int64_t d, int64_t& magic, int64_t& shift);

/// How a CUDA kernel program is launched; each variant is its own entry point and module,
/// compiled when first needed (the one predicted from the traced shapes ahead of time).
struct CudaVariant {
  bool row = false;  // row reductions (else pointwise)
  int vec = 1;       // elements per wide access (1: element by element, any strides)
  bool idx32 = false;  // pointwise: 32-bit index arithmetic
  int unroll = 2;      // pointwise, vectorized: rows per thread and iteration
  /// Pointwise, vectorized: per input, how it is read along the row ('1' unit stride, 'g' other
  /// strides, '0' constant along the row).
  std::string pattern;
  int items = 0;       // row: chunks of VEC per thread kept in registers (0: re-read per phase)
  bool warp = false;   // row: one warp per row (else one block per row)
  int tpr = 32;        // row, warp: threads per row (fewer than 32: 32 / tpr rows per warp)
  int threads = 256;   // threads per block
  /// The entry point's name for a kernel: `<kernel>`, `<kernel>_t2_v4_110_32`, `<kernel>_r4_v4_b256`...
  std::string entry(const std::string& kernel) const;
};

/// The elements of one 16-byte access for the widest type a kernel reads along rows or writes.
int cudaVecWidth(const KernelProgram& prog);

/// The inner-stride pattern of contiguous inputs: per input '1' if it is read along the last
/// dim, else '0' (see CudaVariant::pattern and emitCpp).
std::string contiguousPattern(const KernelProgram& prog);

/// The least power of two >= x (1 for x <= 1).
int pow2ceil(int64_t x);

/// Threads and register chunks for rows of L elements read VEC at a time.
struct RowLaunch {
  int items = 0;
  int threads = 256;
  bool warp = false;
  int tpr = 32;  // warp: threads per row
};
/// `threads` forces the block size of a long-row launch (0: chosen from L); `columns`: the kernel
/// also sums columns (it reads two full inputs per row, and wants more threads per row); `rows`:
/// the number of rows (-1: many), fewer than kFewRows get a block per row even when short.
/// Rows of fewer than 32 chunks share a warp (tpr < 32) unless the kernel sums columns or
/// `packed` is false (kernels that gather: a lane past the last row would read an index).
constexpr int64_t kFewRows = 64;
RowLaunch chooseRowLaunch(int64_t L, int vec, int threads = 0, bool columns = false, int64_t rows = -1,
                          bool packed = true);

/// The variant a program gets for contiguous inputs of its traced shapes on a GPU of `sms`
/// multiprocessors (0: unknown, as for a large tensor).
CudaVariant predictCudaVariant(const KernelProgram& prog, int sms = 0, bool channelsLast = false);

/// The variants a region's first call may run, to compile ahead: the one its traced layouts give
/// and, where prog.channelsLastHint is set and it differs, the one it runs when its 4-D inputs
/// traced contiguous are channels-last.
std::vector<CudaVariant> predictCudaVariants(const KernelProgram& prog, int sms);

/// A pointwise launch of `numel` elements that fills less than a wave of threads (`sms` x 256)
/// takes one element per thread: several per thread would leave most of the GPU idle and make
/// each thread a long dependent chain (a [16, 16] chain of 20 sines took 56 us with 16 active
/// threads). `unrollForced`: an unroll set for experiments stays.
void fitSmallLaunch(CudaVariant& v, int64_t numel, int sms, bool unrollForced = false);

/// A vectorized pointwise kernel stages each row's loads in registers (VEC elements of every
/// input, ROWS rows at a time) before computing: the unroll, then the vector width, halve until
/// those staged bytes fit `budget`, so that a kernel reading many inputs (RoPE's backward reads
/// 25: the query, key and value gradients at two offsets each, the key and value ones for each
/// of four query heads, cos and sin) neither spills nor runs at one block per multiprocessor.
/// With VEC 8 of bfloat16, ROWS 4 took 255 registers and 672 bytes of spill for it (ROWS 1: 128
/// registers, VEC 4: 74), and 203 registers for RoPE's forward, 9 inputs (48 at ROWS 1).
constexpr int64_t kStagedBytes = 256;
/// Row kernels with column sums finish them in the kernel up to this many blocks (the counters
/// each module holds); the host adds the partial rows of larger grids.
constexpr int64_t kColumnFinishBlocks = 4096;
void fitRegisters(const KernelProgram& prog, CudaVariant& v, int64_t budget = kStagedBytes);

/// Whether a warp-per-row launch with column outputs adds its warps' column sums in shared
/// memory and writes one partial row per block (else one per warp): the block's sums must fit in
/// 32 KB. The host sizes the partial rows by it.
bool columnsPerBlock(const KernelProgram& prog, const CudaVariant& variant);

/// CUDA source of one variant of a kernel program (templates plus one `extern "C"` entry).
/// Whether a float8_e4m3fn conversion saturates out-of-range values at +-448 (torch 2.13's `.to()`)
/// or makes them NaN (torch 2.11's): the extension sets it from the torch it runs with, so that
/// kernels round as eager does. Default: saturating.
void setFloat8E4M3Saturates(bool saturates);

std::string emitCuda(const KernelProgram& prog, const CudaVariant& variant);
/// CUDA source of the predicted variant.
std::string emitCuda(const KernelProgram& prog);
/// The entry point of an anonymousSource.
inline constexpr const char* kAnonymousEntry = "thunder_kernel";
/// `src` (emitted by emitCuda or emitCpp for a program named `name`) as code of no program: the
/// source without its header (which names the tensors), `name` (its entry points) replaced by
/// kAnonymousEntry. Programs that differ only in names (a model's repeated layers) have the same
/// anonymous source, which the runtime compiles once for all of them.
std::string anonymousSource(const std::string& src, const std::string& name);

/// The bounds of a program's index ranges (the pieces of a cat, a pad's source, a guarded
/// input's range), lo and hi of each: C++ kernels read them at run time from the geometry block,
/// after its Geometry::length(prog) entries, so that programs that differ only in where a piece
/// ends (a KV cache one token longer) share one compiled kernel. Which comparisons a kernel makes
/// is decided by the values at emission (a range covering its whole dim is not tested), so equal
/// sources imply the same decisions. CUDA kernels print them as constants.
std::vector<int64_t> rangeBounds(const KernelProgram& prog);

/// C++ source of a kernel program with entry point `extern "C" void <name>(void* const* inputs,
/// void* const* outputs, const int64_t* geometry)`. `innerStrides` has one character per input:
/// '1' (unit stride along the last dimension), '0' (broadcast along it) or 'g' (general); it is
/// baked into the source so the inner loop vectorizes.
std::string emitCpp(const KernelProgram& prog, const std::string& innerStrides);

/// The standard headers every C++ kernel includes first (the runtime precompiles them once).
inline constexpr const char* kCppIncludes =
    "#include <cmath>\n#include <cstdint>\n#include <cstring>\n#include <vector>\n";

}  // namespace thunder::codegen
