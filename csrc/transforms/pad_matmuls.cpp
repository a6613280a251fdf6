#include "transforms/pad_matmuls.h"

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "ops/clang.h"
#include "ops/ltorch.h"

namespace thunder {
namespace {

enum class Mode { Off, Cuda, All };

Mode mode() {
  const char* v = std::getenv("THUNDER_PAD_MATMULS");
  if (v == nullptr || *v == '\0') return Mode::Cuda;
  if (std::strcmp(v, "0") == 0) return Mode::Off;
  if (std::strcmp(v, "all") == 0) return Mode::All;
  return Mode::Cuda;
}

constexpr int64_t kAlign = 8;  // elements of 2 bytes in cuBLAS's 16-byte alignment

int64_t roundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Whether `b` is a linear call to pad: see padMatmuls.
bool padded(const BoundSymbol& b, const Symbol* linear, Mode m) {
  if (b.sym != linear || b.args.size() < 3 || !b.args[0].isTensor() || !b.args[1].isTensor() ||
      !b.output.isTensor())
    return false;
  const TensorProxy &x = b.args[0].tensor(), &w = b.args[1].tensor();
  if (w.ndim() != 2 || x.ndim() < 1 || x.dtype != w.dtype) return false;
  int64_t n = w.shape[0], k = w.shape[1];
  if (n % kAlign == 0 || k % kAlign != 0 || x.shape.back() != k) return false;
  const Value& bias = b.args[2];
  if (!bias.isNone() && !(bias.isTensor() && bias.tensor().ndim() == 1 && bias.tensor().shape[0] == n)) return false;
  // Rows of x contiguous: each row starts where the last ends, so its leading dimension is K.
  std::vector<int64_t> st = x.stridesOrContiguous();
  if (x.numel() == 0 || st.back() != 1 || (x.ndim() > 1 && !isContiguousLayout(x.shape, st))) return false;
  if (m == Mode::All) return isFloating(x.dtype);
  bool half = x.dtype == DType::BFloat16 || x.dtype == DType::Float16;
  double flops = static_cast<double>(x.numel() / k) * static_cast<double>(n) * static_cast<double>(k);
  return half && x.device.type == DeviceType::CUDA && flops >= static_cast<double>(int64_t{1} << 30);
}

/// The strides of `shape` cut from a contiguous tensor whose last dim is `rowLength` long.
std::vector<int64_t> rowPaddedStrides(const Shape& shape, int64_t rowLength) {
  Shape full = shape;
  full.back() = rowLength;
  return contiguousStrides(full);
}

}  // namespace

std::optional<Trace> padMatmuls(const Trace& trace) {
  Mode m = mode();
  const Symbol* linear = SymbolRegistry::get().find("ltorch.linear");
  if (m == Mode::Off || linear == nullptr) return std::nullopt;
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || padded(b, linear, m);
  if (!any) return std::nullopt;

  Trace out = trace.emptyCopy();
  // Tensors laid out with padded rows: the slices, and what shape ops make of them (views
  // whose strides are not what the trace recorded; the runtime reads the actual ones).
  std::unordered_set<const TensorProxy*> rowPadded;
  for (const BoundSymbol& b : trace.bsyms) {
    if (!padded(b, linear, m)) {
      if (b.sym->hasTag(kShapeOp))
        for (const TensorPtr& in : b.inputTensors())
          if (rowPadded.count(in.get())) {
            for (const TensorPtr& o : b.outputTensors()) rowPadded.insert(o.get());
            break;
          }
      out.bsyms.push_back(b);
      continue;
    }
    const TensorPtr& y = b.output.toTensor();
    int64_t n = b.args[1].tensor().shape[0], np = roundUp(n);
    appendTraced(out, [&] {
      Value w = ltorch::op("pad", {b.args[1], Value::ints({0, 0, 0, np - n})});
      Value bias = b.args[2].isNone() ? b.args[2] : ltorch::op("pad", {b.args[2], Value::ints({0, np - n})});
      Value yp = ltorch::op("linear", {b.args[0], w, bias});
      return clang::sliceInDim(yp, y->ndim() - 1, 0, n, 1, "pad matmuls");
    }, y, "pad matmuls");
    y->setStrides(rowPaddedStrides(y->shape, np));
    rowPadded.insert(y.get());
  }

  // Returned tensors keep eager's contiguous layout: the caller may view them.
  std::vector<TensorPtr> returned;
  out.output.collectTensors(returned);
  TensorRenames copies;
  for (const TensorPtr& t : returned) {
    if (!rowPadded.count(t.get()) || copies.count(t.get())) continue;
    Trace scratch = out.emptyCopy();
    Value c;
    {
      TracingScope scope(scratch);
      c = ltorch::op("contiguous", {Value(t)});
    }
    out.names = scratch.names;
    out.nextId = scratch.nextId;
    for (BoundSymbol& s : scratch.bsyms) out.bsyms.push_back(std::move(s));
    copies[t.get()] = c.toTensor();
  }
  if (!copies.empty()) out.output = substitute(out.output, copies);
  return out;
}

}  // namespace thunder
