#include "transforms/pad_matmuls.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "ops/clang.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "transforms/xent_upcast.h"

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

/// A padded linear's result that only a cross-entropy reads: through `reshapes` (indices in the
/// trace, each keeping the last dim, the classes) to the call at `xent`.
struct CrossEntropyReader {
  std::vector<size_t> reshapes;
  size_t xent = 0;
};

/// Which calls read each tensor, by name; kReturned stands for the trace's output.
using Readers = std::unordered_map<std::string, std::vector<size_t>>;
constexpr size_t kReturned = static_cast<size_t>(-1);

/// Where the result `y` of a padded linear reaches a cross-entropy of class-index targets with
/// no class weights and no label smoothing (`ltorch.cross_entropy` or its upcast form) through
/// reshapes that keep its last dim, and nothing else reads it or the reshapes.
std::optional<CrossEntropyReader> crossEntropyReader(const Trace& trace, const TensorProxy& y,
                                                     const Readers& readers) {
  static const Symbol* xent = SymbolRegistry::get().find("ltorch.cross_entropy");
  static const Symbol* upcast = SymbolRegistry::get().find("ltorch.cross_entropy_upcast");
  const int64_t n = y.shape.back();
  CrossEntropyReader out;
  std::string cur = y.name;
  for (;;) {
    auto it = readers.find(cur);
    if (it == readers.end() || it->second.size() != 1 || it->second[0] == kReturned) return std::nullopt;
    const BoundSymbol& b = trace.bsyms[it->second[0]];
    if (b.sym == xent || b.sym == upcast) {
      if (b.args.size() < 8 || !b.args[0].isTensor() || b.args[0].tensor().name != cur) return std::nullopt;
      const TensorProxy& logits = b.args[0].tensor();
      bool classIndices = b.args[1].isTensor() && !isFloating(b.args[1].tensor().dtype) &&
                          b.args[1].tensor().name != cur;
      if (logits.ndim() != 2 || logits.shape[1] != n || !classIndices || !b.args[2].isNone() ||
          !b.args[3].isNone() || !b.args[5].isNone() || !b.args[7].isNumber() || b.args[7].toDouble() != 0.0)
        return std::nullopt;
      out.xent = it->second[0];
      return out;
    }
    if (!onlyReshapes(b) || !b.output.isTensor()) return std::nullopt;
    const TensorProxy& o = b.output.tensor();
    if (o.ndim() < 1 || o.shape.back() != n) return std::nullopt;
    out.reshapes.push_back(it->second[0]);
    cur = o.name;
  }
}

}  // namespace

std::optional<Trace> padMatmuls(const Trace& trace) {
  Mode m = mode();
  const Symbol* linear = SymbolRegistry::get().find("ltorch.linear");
  if (m == Mode::Off || linear == nullptr) return std::nullopt;
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || padded(b, linear, m);
  if (!any) return std::nullopt;

  Readers readers;
  for (size_t i = 0; i < trace.bsyms.size(); ++i)
    for (const TensorPtr& t : trace.bsyms[i].inputTensors()) {
      std::vector<size_t>& r = readers[t->name];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  {
    std::vector<TensorPtr> returned;
    trace.output.collectTensors(returned);
    for (const TensorPtr& t : returned) readers[t->name].push_back(kReturned);
  }
  // The calls on the way from a padded result to the cross-entropy that reads it, by index (true
  // for the cross-entropy, false for a reshape), and the padded tensors that stand for the
  // chain's tensors once rewritten.
  std::unordered_map<size_t, bool> chainCalls;
  std::unordered_map<const TensorProxy*, TensorPtr> paddedAs;

  Trace out = trace.emptyCopy();
  for (size_t i = 0; i < trace.bsyms.size(); ++i) {
    const BoundSymbol& b = trace.bsyms[i];
    if (auto c = chainCalls.find(i); c != chainCalls.end()) {
      // A reshape on the way to the cross-entropy: the same reshape of the padded rows. The
      // cross-entropy itself: the same call on the padded logits, whose -inf columns add
      // exp(-inf) = 0 to each row's sum and get a gradient of exactly 0.
      if (c->second) {
        appendTraced(out, [&] {
          std::vector<Value> args = b.args;
          args[0] = Value(paddedAs.at(&b.args[0].tensor()));
          return call(*b.sym, args);
        }, b.output.toTensor(), "pad matmuls");
      } else {
        const TensorProxy& o = b.output.tensor();
        const TensorPtr from = paddedAs.at(b.inputTensors().front().get());
        Shape shape = o.shape;
        shape.back() = from->shape.back();
        Value r = appendTraced(out, [&] { return ltorch::op("reshape", {Value(from), Value::ints(shape)}); });
        paddedAs[&o] = r.toTensor();
      }
      continue;
    }
    if (!padded(b, linear, m)) {
      out.bsyms.push_back(b);
      continue;
    }
    const TensorPtr& y = b.output.toTensor();
    int64_t n = b.args[1].tensor().shape[0], np = roundUp(n);
    if (std::optional<CrossEntropyReader> c = crossEntropyReader(trace, *y, readers)) {
      // Only a cross-entropy reads the result: it reads the padded rows, whose pad columns the
      // bias makes -inf, and no slice of the logits, nor a padded copy of their gradient, is made.
      for (size_t r : c->reshapes) chainCalls[r] = false;
      chainCalls[c->xent] = true;
      Value yp = appendTraced(out, [&] {
        const TensorProxy& w = b.args[1].tensor();
        Value bias = b.args[2].isNone() ? prims::full({n}, Value(0.0), w.device, w.dtype) : b.args[2];
        Value wp = ltorch::op("pad", {b.args[1], Value::ints({0, 0, 0, np - n})});
        Value bp = ltorch::op("pad", {bias, Value::ints({0, np - n}), Value("constant"),
                                      Value(-std::numeric_limits<double>::infinity())});
        return ltorch::op("linear", {b.args[0], wp, bp});
      });
      paddedAs[y.get()] = yp.toTensor();
      continue;
    }
    appendTraced(out, [&] {
      Value w = ltorch::op("pad", {b.args[1], Value::ints({0, 0, 0, np - n})});
      Value bias = b.args[2].isNone() ? b.args[2] : ltorch::op("pad", {b.args[2], Value::ints({0, np - n})});
      Value yp = ltorch::op("linear", {b.args[0], w, bias});
      return clang::sliceInDim(yp, y->ndim() - 1, 0, n, 1, "pad matmuls");
    }, y, "pad matmuls");
    // (Shape ops of y made later in the trace record contiguous strides; the runtime reads the
    // actual ones.)
    y->setStrides(rowPaddedStrides(y->shape, np));
  }

  // Returned results keep the padded rows (a view; torch.compile's kernels show no copy either):
  // a contiguous copy cost GPT-2's inference a pass over its 0.8 GB logits (the projection 2.0 ms
  // against 0.9), and computing the rows block by block into a contiguous result still copied
  // every block. The caller's views of them work (merging the leading dims, slicing, selecting),
  // as on any strided tensor.
  return out;
}

}  // namespace thunder
