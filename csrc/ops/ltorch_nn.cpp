// The torch language's neural-network ops: convolution, normalization, pooling, resampling,
// padding modes, dropout variants, activations, distances and losses. Heavy ops call the nn prims
// (prims.def, "nn ops"); the rest decompose into other ltorch symbols, so they fuse and
// differentiate through their decompositions.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/clang.h"
#include "ops/ltorch.h"
#include "ops/prims.h"
#include "ops/utils.h"

namespace thunder::ltorch {
namespace {

using Args = std::vector<Value>;
using prims::PrimId;

std::string opn(const std::string& name) { return "ltorch." + name; }

const TensorProxy& T(const Value& v, const std::string& name, const char* arg = "a") {
  return expectTensor(v, opn(name), arg);
}

Value ints(const std::vector<int64_t>& xs) { return Value::ints(xs); }

/// An int or a sequence of ints as one entry per spatial dim (PyTorch's _single/_pair/_triple).
std::vector<int64_t> expandArg(const Value& v, size_t k, const std::string& name, const char* arg) {
  std::vector<int64_t> xs = v.toInts();
  if (xs.size() == 1 && k > 1) xs.assign(k, xs[0]);
  THUNDER_CHECK(xs.size() == k, opn(name), ": expected ", arg, " to be an int or ", k,
                " ints, but got ", shapeStr(xs));
  return xs;
}

/// Prepends a batch dim to an unbatched input (ndim == spatial + 1); `batched` says whether the
/// input had one.
Value batchedInput(const Value& a, size_t k, const std::string& name, bool& batched) {
  const TensorProxy& t = T(a, name, "input");
  int64_t n = static_cast<int64_t>(k);
  THUNDER_CHECK(t.ndim() == n + 1 || t.ndim() == n + 2, opn(name), ": expected a ", n + 1, "- or ",
                n + 2, "-dimensional input, but got shape ", shapeStr(t.shape));
  batched = t.ndim() == n + 2;
  return batched ? a : clang::unsqueeze(a, 0, opn(name));
}

Value unbatch(const Value& y, bool batched) { return batched ? y : prims::squeeze(y, {0}); }

Value reduce(const Value& losses, const std::string& reduction, const std::string& name) {
  if (reduction == "none") return losses;
  if (reduction == "sum") return op("sum", {losses});
  THUNDER_CHECK_KIND(reduction == "mean", ErrorKind::Value, opn(name),
                     ": reduction must be 'none', 'mean' or 'sum', but got '", reduction, "'");
  return op("mean", {losses});
}

void checkFloating(const TensorProxy& t, const std::string& name, const char* arg = "input") {
  THUNDER_CHECK_KIND(isFloating(t.dtype), ErrorKind::Type, opn(name),
                     ": expected a floating point ", arg, ", but got ", dtypeName(t.dtype));
}

/// Runs `f` in float32 for low precision inputs and rounds once, as PyTorch's CPU kernels do.
Value inFloat32(const Value& a, const std::function<Value(const Value&)>& f) {
  DType dt = a.tensor().dtype;
  if (!isLowPrecision(dt)) return f(a);
  return clang::maybeConvert(f(clang::maybeConvert(a, DType::Float32)), dt);
}

/// Shape (1, C, 1, ...) of a per-channel vector against an input of `ndim` dims.
Value perChannel(const Value& v, int64_t ndim, int64_t channels) {
  Shape s(ndim, 1);
  s[1] = channels;
  return op("reshape", {v, ints(s)});
}

// ---- convolution ------------------------------------------------------------------------------

Value convImpl(const Args& a, size_t k, bool transposed, const std::string& name) {
  // conv: a, weight, bias, stride, padding, dilation, groups
  // conv_transpose: a, weight, bias, stride, padding, output_padding, groups, dilation
  bool batched;
  Value x = batchedInput(a[0], k, name, batched);
  const TensorProxy& w = T(a[1], name, "weight");
  auto stride = expandArg(a[3], k, name, "stride");
  auto dilation = expandArg(transposed ? a[7] : a[5], k, name, "dilation");
  int64_t groups = transposed ? a[6].toInt() : a[6].toInt();
  std::vector<int64_t> outPad(k, 0);
  if (transposed) outPad = expandArg(a[5], k, name, "output_padding");
  std::vector<int64_t> padding;
  if (a[4].isString()) {
    THUNDER_CHECK_KIND(!transposed, ErrorKind::Value, opn(name),
                       ": padding must be an int or a tuple of ints, but got '", a[4].toString(),
                       "'");
    const std::string& mode = a[4].toString();
    THUNDER_CHECK(mode == "same" || mode == "valid", opn(name),
                       ": padding must be 'same', 'valid' or ints, but got '", mode, "'");
    padding.assign(k, 0);
    if (mode == "same") {
      for (int64_t s : stride)
        THUNDER_CHECK(s == 1, opn(name),
                           ": padding='same' is not supported for strided convolutions");
      THUNDER_CHECK(w.ndim() == static_cast<int64_t>(k) + 2, opn(name), ": expected a ", k + 2,
                    "-dimensional weight, but got shape ", shapeStr(w.shape));
      // Total padding d * (k - 1) split evenly; an odd total pads one more on the right.
      std::vector<std::array<int64_t, 3>> extra(k + 2, {0, 0, 0});
      bool asymmetric = false;
      for (size_t i = 0; i < k; ++i) {
        int64_t total = dilation[i] * (w.shape[2 + i] - 1);
        padding[i] = total / 2;
        if (total % 2) {
          extra[2 + i] = {0, 1, 0};
          asymmetric = true;
        }
      }
      if (asymmetric) x = prims::pad(x, clang::maybeConvert(Value(0), x.tensor().dtype), extra);
    }
  } else {
    padding = expandArg(a[4], k, name, "padding");
  }
  Value y =
      prims::convolution(x, a[1], a[2], stride, padding, dilation, transposed, outPad, groups);
  return unbatch(y, batched);
}

void registerConvolution() {
  for (size_t k = 1; k <= 3; ++k) {
    std::string n = "conv" + std::to_string(k) + "d";
    define(n, "a, weight, bias=None, stride=1, padding=0, dilation=1, groups=1",
           {"torch." + n, "torch.nn.functional." + n},
           [k, n](const Args& a) { return convImpl(a, k, false, n); });
    std::string t = "conv_transpose" + std::to_string(k) + "d";
    define(t, "a, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
           {"torch." + t, "torch.nn.functional." + t},
           [k, t](const Args& a) { return convImpl(a, k, true, t); });
  }
}

// ---- normalization ----------------------------------------------------------------------------

/// A running statistic's update (1 - m) * old + m * batch, in the running tensor's dtype; m is a
/// number or a 0-dim tensor.
Value runningUpdate(const Value& running, const Value& batch, const Value& momentum) {
  const TensorProxy& r = running.tensor();
  Value b = clang::maybeConvert(batch, r.dtype);
  Value keep = momentum.isTensor() ? op("add", {op("neg", {momentum}), 1.0})
                                   : Value(1.0 - momentum.toDouble());
  Value updated = op("add", {op("mul", {running, keep}), op("mul", {b, momentum})});
  return clang::maybeConvert(updated, r.dtype);
}

/// Writes a running statistic's update (runningUpdate) into the running tensor.
void updateRunning(const Value& running, const Value& batch, const Value& momentum) {
  prims::copy_(runningUpdate(running, batch, momentum), running);
}

/// Whether training-mode batch_norm runs as the batch_norm prim (ATen's kernels): float types,
/// parameters and running statistics of the input's dtype (or float32 for a half-type input, the
/// mixed types ATen takes) on the input's device. Other calls take the decomposition.
bool atenBatchNorm(const Args& a, const TensorProxy& t) {
  if (!isFloating(t.dtype)) return false;
  for (int i = 1; i <= 4; ++i) {
    if (a[i].isNone()) continue;
    const TensorProxy& p = a[i].tensor();
    bool ok = p.dtype == t.dtype || (isLowPrecision(t.dtype) && p.dtype == DType::Float32);
    if (!ok || p.device != t.device) return false;
  }
  return true;
}

Value batchNorm(const Args& a) {
  // a, running_mean, running_var, weight, bias, training, momentum, eps
  const std::string name = "batch_norm";
  const TensorProxy& t = T(a[0], name, "input");
  THUNDER_CHECK(t.ndim() >= 2, opn(name),
                ": expected an input with at least 2 dimensions, but got shape ",
                shapeStr(t.shape));
  checkFloating(t, name);
  int64_t c = t.shape[1];
  auto checkVec = [&](const Value& v, const char* arg) {
    if (v.isNone()) return;
    const TensorProxy& p = T(v, name, arg);
    THUNDER_CHECK(p.ndim() == 1 && p.shape[0] == c, opn(name), ": expected ", arg, " of shape (", c,
                  ",) for input of shape ", shapeStr(t.shape), ", but got ", shapeStr(p.shape));
  };
  checkVec(a[1], "running_mean");
  checkVec(a[2], "running_var");
  checkVec(a[3], "weight");
  checkVec(a[4], "bias");
  THUNDER_CHECK(a[1].isNone() == a[2].isNone(), opn(name),
                ": running_mean and running_var must both be given or both be None");
  bool training = a[5].toBool();
  THUNDER_CHECK(training || !a[1].isNone(), opn(name),
                ": running_mean and running_var must be given when training=False");
  double eps = a[7].toDouble();
  // momentum: a number, or a 0-dim floating tensor (BatchNorm's cumulative moving average, with
  // momentum=None: 1 / num_batches_tracked, a value the program computes).
  if (a[6].isTensor()) {
    const TensorProxy& m = a[6].tensor();
    THUNDER_CHECK_KIND(m.ndim() == 0 && isFloating(m.dtype), ErrorKind::Type, opn(name),
                       ": expected momentum to be a number or a 0-dim floating tensor, but got ",
                       describe(a[6]));
  }
  if (training && atenBatchNorm(a, t)) {
    // One prim that runs as ATen's kernels, forward and backward; the running statistics are
    // updated from its new values, as eager updates them.
    // A tensor momentum: the prim's new statistics are the batch's (momentum 1), mixed in here.
    double momentum = a[6].isNone() ? 0.0 : a[6].isTensor() ? 1.0 : a[6].toDouble();
    THUNDER_CHECK_KIND(a[1].isNone() || !a[6].isNone(), ErrorKind::Value, opn(name),
                       ": momentum=None must be resolved by the module (a cumulative average)");
    int64_t n = t.numel() / std::max<int64_t>(c, 1);
    THUNDER_CHECK_KIND(n > 1, ErrorKind::Value, opn(name),
                       ": expected more than 1 value per channel when training, but got input of "
                       "shape ", shapeStr(t.shape));
    Value r = call(prims::symbol(PrimId::batch_norm), {a[0], a[3], a[4], a[1], a[2], momentum, eps});
    for (int i = 1; i <= 2 && !a[1].isNone(); ++i) {
      Value updated = r.items()[2 + i];
      prims::copy_(a[6].isTensor() ? runningUpdate(a[i], updated, a[6])
                                   : clang::maybeConvert(updated, a[i].tensor().dtype),
                   a[i]);
    }
    return r.items()[0];
  }
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < t.ndim(); ++d) dims.push_back(d);
  int64_t n = t.numel() / std::max<int64_t>(c, 1);
  DType comp = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  Value x = clang::maybeConvert(a[0], comp);
  Value mean, var;
  if (training || a[1].isNone()) {
    THUNDER_CHECK_KIND(!training || n > 1, ErrorKind::Value, opn(name),
                  ": expected more than 1 value per channel when training, but got input of shape ",
                  shapeStr(t.shape));
    mean = op("div", {prims::sum(x, dims), static_cast<double>(n)});
    var = prims::var(x, dims, 0.0);
    if (training && !a[1].isNone()) {
      THUNDER_CHECK_KIND(!a[6].isNone(), ErrorKind::Value, opn(name),
                         ": momentum=None must be resolved by the module (a cumulative average)");
      updateRunning(a[1], mean, a[6]);
      updateRunning(a[2], op("mul", {var, static_cast<double>(n) / static_cast<double>(n - 1)}), a[6]);
    }
  } else {
    mean = clang::maybeConvert(a[1], comp);
    var = clang::maybeConvert(a[2], comp);
  }
  Value y = op("mul", {op("sub", {x, perChannel(mean, t.ndim(), c)}),
                       perChannel(op("rsqrt", {op("add", {var, eps})}), t.ndim(), c)});
  if (!a[3].isNone()) y = op("mul", {y, perChannel(a[3], t.ndim(), c)});
  if (!a[4].isNone()) y = op("add", {y, perChannel(a[4], t.ndim(), c)});
  return clang::maybeConvert(y, t.dtype);
}

Value groupNorm(const Args& a) {
  // a, num_groups, weight, bias, eps
  const std::string name = "group_norm";
  const TensorProxy& t = T(a[0], name, "input");
  THUNDER_CHECK(t.ndim() >= 2, opn(name),
                ": expected an input with at least 2 dimensions, but got shape ",
                shapeStr(t.shape));
  checkFloating(t, name);
  int64_t g = a[1].toInt(), c = t.shape[1];
  THUNDER_CHECK(
      g > 0 && c % g == 0, opn(name),
      ": expected the number of channels to be divisible by num_groups, but got input of shape ",
      shapeStr(t.shape), " and num_groups=", g);
  for (int i = 2; i <= 3; ++i) {
    if (a[i].isNone()) continue;
    const TensorProxy& p = T(a[i], name, i == 2 ? "weight" : "bias");
    THUNDER_CHECK(p.ndim() == 1 && p.shape[0] == c, opn(name), ": expected ",
                  i == 2 ? "weight" : "bias", " of shape (", c, ",), but got ", shapeStr(p.shape));
  }
  DType comp = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  int64_t per = c / g;
  for (int64_t d = 2; d < t.ndim(); ++d) per *= t.shape[d];
  // Grouped in the input's dtype, then widened: the widening joins the kernel of the statistics
  // (a kernel reads its inputs through reshapes, not its own values), where widening first stored
  // a float32 copy of the activation for that kernel to read; in the backward the gradient is
  // narrowed inside the kernel that computes it, before the reshape back.
  Value grouped = clang::maybeConvert(op("reshape", {a[0], ints({t.shape[0], g, per})}), comp);
  Value mean = op("mean", {grouped, ints({2}), true});
  Value var = clang::keepDims(prims::var(grouped, {2}, 0.0), {t.shape[0], g, per}, {2});
  Value y = op("mul", {op("sub", {grouped, mean}), op("rsqrt", {op("add", {var, a[4]})})});
  y = op("reshape", {y, ints(t.shape)});
  if (!a[2].isNone()) y = op("mul", {y, perChannel(a[2], t.ndim(), c)});
  if (!a[3].isNone()) y = op("add", {y, perChannel(a[3], t.ndim(), c)});
  return clang::maybeConvert(y, t.dtype);
}

Value instanceNorm(const Args& a) {
  // a, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
  const std::string name = "instance_norm";
  const TensorProxy& t = T(a[0], name, "input");
  THUNDER_CHECK(t.ndim() >= 3, opn(name),
                ": expected an input with at least 3 dimensions (N, C, *spatial), but got shape ",
                shapeStr(t.shape));
  checkFloating(t, name);
  int64_t nb = t.shape[0], c = t.shape[1];
  DType comp = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  Value x = clang::maybeConvert(a[0], comp);
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d = 2; d < t.ndim(); ++d) {
    dims.push_back(d);
    n *= t.shape[d];
  }
  Value mean, var;
  Shape statShape = {nb, c};
  if (a[5].toBool()) {
    THUNDER_CHECK_KIND(n > 1, ErrorKind::Value, opn(name),
                  ": expected more than 1 spatial element when training, but got input of shape ",
                  shapeStr(t.shape));
    mean = op("mean", {x, ints(dims)});
    var = prims::var(x, dims, 0.0);
    if (!a[1].isNone()) {
      double m = a[6].toDouble();
      // The running stats average the instances' statistics over the batch.
      updateRunning(a[1], op("mean", {mean, ints({0})}), m);
      Value unbiased = op("mul", {var, static_cast<double>(n) / static_cast<double>(n - 1)});
      updateRunning(a[2], op("mean", {unbiased, ints({0})}), m);
    }
  } else {
    THUNDER_CHECK(!a[1].isNone() && !a[2].isNone(), opn(name),
                  ": expected running_mean and running_var when use_input_stats=False");
    mean = op("expand", {op("unsqueeze", {clang::maybeConvert(a[1], comp), 0}), ints(statShape)});
    var = op("expand", {op("unsqueeze", {clang::maybeConvert(a[2], comp), 0}), ints(statShape)});
  }
  Shape bshape(t.ndim(), 1);
  bshape[0] = nb;
  bshape[1] = c;
  Value y = op("mul", {op("sub", {x, op("reshape", {mean, ints(bshape)})}),
                       op("reshape", {op("rsqrt", {op("add", {var, a[7]})}), ints(bshape)})});
  if (!a[3].isNone()) y = op("mul", {y, perChannel(a[3], t.ndim(), c)});
  if (!a[4].isNone()) y = op("add", {y, perChannel(a[4], t.ndim(), c)});
  return clang::maybeConvert(y, t.dtype);
}

void registerNormalization() {
  define("batch_norm",
         "a, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, "
         "eps=1e-05",
         {"torch.nn.functional.batch_norm"}, batchNorm);
  define("group_norm", "a, num_groups, weight=None, bias=None, eps=1e-05",
         {"torch.nn.functional.group_norm"}, groupNorm);
  define("instance_norm",
         "a, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True, "
         "momentum=0.1, eps=1e-05",
         {"torch.nn.functional.instance_norm"}, instanceNorm);
}

// ---- pooling ----------------------------------------------------------------------------------

/// Pools 1-d inputs as 2-d ones with a leading spatial dim of length 1.
struct PoolInput {
  Value x;
  bool batched = true;
  bool oneD = false;
};

PoolInput poolInput(const Value& a, size_t k, const std::string& name) {
  PoolInput p;
  p.x = batchedInput(a, k, name, p.batched);
  p.oneD = k == 1;
  if (p.oneD) p.x = clang::unsqueeze(p.x, 2, opn(name));
  return p;
}

Value poolOutput(const Value& y, const PoolInput& p) {
  Value r = p.oneD ? prims::squeeze(y, {2}) : y;
  return unbatch(r, p.batched);
}

/// A 1-d window parameter as the 2-d one: `lead` for the added spatial dim.
std::vector<int64_t> as2d(std::vector<int64_t> xs, bool oneD, int64_t lead) {
  if (oneD) xs.insert(xs.begin(), lead);
  return xs;
}

Value maxPool(const Args& a, size_t k, bool alwaysIndices, const std::string& name) {
  // a, kernel_size, stride, padding, dilation, ceil_mode, return_indices
  PoolInput p = poolInput(a[0], k, name);
  auto kernel = expandArg(a[1], k, name, "kernel_size");
  bool noStride = a[2].isNone() || (a[2].isSequence() && a[2].items().empty());
  auto stride = noStride ? kernel : expandArg(a[2], k, name, "stride");
  auto padding = expandArg(a[3], k, name, "padding");
  auto dilation = expandArg(a[4], k, name, "dilation");
  Value r = call(prims::symbol(PrimId::max_pool),
                 {p.x, ints(as2d(kernel, p.oneD, 1)), ints(as2d(stride, p.oneD, 1)),
                  ints(as2d(padding, p.oneD, 0)), ints(as2d(dilation, p.oneD, 1)), a[5].toBool()});
  Value values = poolOutput(r.items()[0], p);
  if (!alwaysIndices && !a[6].toBool()) return values;
  return Value::tuple({values, poolOutput(r.items()[1], p)});
}

Value avgPool(const Args& a, size_t k, const std::string& name) {
  // a, kernel_size, stride, padding, ceil_mode, count_include_pad[, divisor_override]
  PoolInput p = poolInput(a[0], k, name);
  auto kernel = expandArg(a[1], k, name, "kernel_size");
  bool noStride = a[2].isNone() || (a[2].isSequence() && a[2].items().empty());
  auto stride = noStride ? kernel : expandArg(a[2], k, name, "stride");
  auto padding = expandArg(a[3], k, name, "padding");
  Value divisor = a.size() > 6 ? a[6] : Value();
  Value y = call(prims::symbol(PrimId::avg_pool),
                 {p.x, ints(as2d(kernel, p.oneD, 1)), ints(as2d(stride, p.oneD, 1)),
                  ints(as2d(padding, p.oneD, 0)), a[4].toBool(), a[5].toBool(), divisor});
  return poolOutput(y, p);
}

/// An adaptive pool's output size: an int or one entry per spatial dim, None keeping the input's.
std::vector<int64_t> adaptiveSize(const Value& v, const TensorProxy& t, size_t k,
                                  const std::string& name) {
  std::vector<int64_t> out;
  std::vector<Value> items = v.isSequence() ? v.items() : std::vector<Value>(k, v);
  if (items.size() == 1 && k > 1) items.assign(k, items[0]);
  THUNDER_CHECK(items.size() == k, opn(name), ": expected output_size to be an int or ", k,
                " values, but got ", items.size());
  for (size_t i = 0; i < k; ++i)
    out.push_back(items[i].isNone() ? t.shape[t.ndim() - k + i] : items[i].toInt());
  return out;
}

Value adaptivePool(const Args& a, size_t k, bool isMax, const std::string& name) {
  PoolInput p = poolInput(a[0], k, name);
  const TensorProxy& t = a[0].tensor();
  auto size = adaptiveSize(a[1], t, k, name);
  bool toOne = std::all_of(size.begin(), size.end(), [](int64_t s) { return s == 1; });
  bool spatial = true;
  for (size_t i = 0; i < k; ++i) spatial = spatial && t.shape[t.ndim() - k + i] > 0;
  if (!isMax && toOne && spatial && isFloating(t.dtype)) {
    // A global average (a classifier's pooling) is a mean, as eager computes it: ATen's adaptive
    // pool kernels would scatter its gradient back with atomic adds.
    std::vector<int64_t> dims;
    for (size_t i = 0; i < k; ++i) dims.push_back(t.ndim() - k + i);
    return op("mean", {a[0], ints(dims), true});
  }
  Value r = call(prims::symbol(isMax ? PrimId::adaptive_max_pool : PrimId::adaptive_avg_pool),
                 {p.x, ints(as2d(size, p.oneD, 1))});
  if (!isMax) return poolOutput(r, p);
  Value values = poolOutput(r.items()[0], p);
  if (!a[2].toBool()) return values;
  return Value::tuple({values, poolOutput(r.items()[1], p)});
}

void registerPooling() {
  for (size_t k = 1; k <= 3; ++k) {
    std::string d = std::to_string(k) + "d";
    std::string mp = "max_pool" + d;
    define(
        mp,
        "a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False",
        {"torch.nn.functional." + mp, "torch." + mp},
        [k, mp](const Args& a) { return maxPool(a, k, false, mp); });
    std::string mpi = mp + "_with_indices";
    define(
        mpi,
        "a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=True",
        {"torch.nn.functional." + mpi},
        [k, mpi](const Args& a) { return maxPool(a, k, true, mpi); });
    std::string ap = "avg_pool" + d;
    if (k == 1)
      define(ap, "a, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True",
             {"torch.nn.functional." + ap, "torch." + ap},
             [k, ap](const Args& a) { return avgPool(a, k, ap); });
    else
      define(ap,
             "a, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
             "divisor_override=None",
             {"torch.nn.functional." + ap}, [k, ap](const Args& a) { return avgPool(a, k, ap); });
    std::string aap = "adaptive_avg_pool" + d;
    define(aap, "a, output_size", {"torch.nn.functional." + aap},
           [k, aap](const Args& a) { return adaptivePool(a, k, false, aap); });
    std::string amp = "adaptive_max_pool" + d;
    define(amp, "a, output_size, return_indices=False", {"torch.nn.functional." + amp},
           [k, amp](const Args& a) { return adaptivePool(a, k, true, amp); });
    std::string ampi = amp + "_with_indices";
    define(ampi, "a, output_size, return_indices=True", {"torch.nn.functional." + ampi},
           [k, ampi](const Args& a) {
             Args b = a;
             b[2] = true;
             return adaptivePool(b, k, true, ampi);
           });
  }
}

// ---- interpolate ------------------------------------------------------------------------------

Value interpolate(const Args& a) {
  // a, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias
  const std::string name = "interpolate";
  const TensorProxy& t = T(a[0], name, "input");
  THUNDER_CHECK(t.ndim() >= 3 && t.ndim() <= 5, opn(name),
                ": expected a 3-, 4- or 5-dimensional input, but got shape ", shapeStr(t.shape));
  size_t k = static_cast<size_t>(t.ndim() - 2);
  const std::string& mode = a[3].toString();
  THUNDER_CHECK_KIND(!a[6].toBool(), ErrorKind::NotImplemented, opn(name),
                     ": antialias=True is not supported");
  THUNDER_CHECK_KIND(a[1].isNone() != a[2].isNone(), ErrorKind::Value, opn(name),
                     ": exactly one of size or scale_factor must be given");
  bool interpolating =
      mode == "linear" || mode == "bilinear" || mode == "bicubic" || mode == "trilinear";
  THUNDER_CHECK_KIND(
      interpolating || a[4].isNone(), ErrorKind::Value, opn(name),
      ": align_corners can only be set with the interpolating modes linear, bilinear, "
      "bicubic and trilinear, but mode is '",
      mode, "'");
  std::vector<int64_t> size;
  Value scales;
  if (!a[1].isNone()) {
    size = expandArg(a[1], k, name, "size");
  } else {
    std::vector<Value> items = a[2].isSequence() ? a[2].items() : std::vector<Value>(k, a[2]);
    if (items.size() == 1 && k > 1) items.assign(k, items[0]);
    THUNDER_CHECK(items.size() == k, opn(name), ": expected scale_factor to be a number or ", k,
                  " numbers, but got ", items.size());
    std::vector<Value> sv;
    for (size_t i = 0; i < k; ++i) {
      double s = items[i].toDouble();
      THUNDER_CHECK_KIND(s > 0, ErrorKind::Value, opn(name),
                         ": scale_factor must be positive, but got ", s);
      size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(t.shape[2 + i]) * s)));
      sv.push_back(s);
    }
    bool recompute = !a[5].isNone() && a[5].toBool();
    if (!recompute) scales = Value::list(sv);
  }
  if (mode == "area") {
    std::string pool = "adaptive_avg_pool" + std::to_string(k) + "d";
    return op(pool, {a[0], ints(size)});
  }
  std::string needed = mode == "linear"                            ? "3"
                       : (mode == "bilinear" || mode == "bicubic") ? "4"
                       : mode == "trilinear"                       ? "5"
                                                                   : "";
  THUNDER_CHECK_KIND(needed.empty() || std::to_string(t.ndim()) == needed,
                     ErrorKind::NotImplemented, opn(name), ": got ", t.ndim(), "D input, but ",
                     mode, " mode needs ", needed, "D input");
  bool align = !a[4].isNone() && a[4].toBool();
  return call(prims::symbol(PrimId::upsample), {a[0], ints(size), mode, align, scales});
}

// ---- padding modes ----------------------------------------------------------------------------

/// Pads one dim by gathering the input at computed indices (reflect, replicate, circular).
Value padDim(const Value& x, int64_t dim, int64_t lo, int64_t hi, const std::string& mode) {
  const TensorProxy& t = x.tensor();
  int64_t n = t.shape[dim];
  const std::string name = "pad";
  THUNDER_CHECK(lo >= 0 && hi >= 0, opn(name), ": negative padding (", lo, ", ", hi,
                ") is not supported in mode '", mode, "'");
  if (mode == "reflect")
    THUNDER_CHECK(lo < n && hi < n, opn(name), ": padding (", lo, ", ", hi,
                  ") should be less than the size ", n, " of dimension ", dim,
                  " of input of shape ", shapeStr(t.shape), " in reflect mode");
  if (mode == "circular")
    THUNDER_CHECK(lo <= n && hi <= n, opn(name), ": padding (", lo, ", ", hi,
                  ") should be at most the size ", n, " of dimension ", dim, " of input of shape ",
                  shapeStr(t.shape), " in circular mode");
  THUNDER_CHECK(n > 0, opn(name), ": cannot pad an empty dimension ", dim, " of input of shape ",
                shapeStr(t.shape), " in mode '", mode, "'");
  Value i = prims::iota(n + lo + hi, -lo, 1, t.device, DType::Int64);
  Value idx;
  if (mode == "replicate") {
    idx = op("clamp", {i, 0, n - 1});
  } else if (mode == "reflect") {
    idx = op("sub", {n - 1, op("abs", {op("sub", {n - 1, op("abs", {i})})})});
  } else {
    idx = op("remainder", {i, n});
  }
  return prims::take(x, idx, dim);
}

}  // namespace

/// Non-constant modes of F.pad, called by ltorch.pad.
Value padModes(const Value& a, const std::vector<int64_t>& pad, const std::string& mode) {
  const TensorProxy& t = a.tensor();
  THUNDER_CHECK_KIND(mode == "reflect" || mode == "replicate" || mode == "circular",
                     ErrorKind::NotImplemented,
                     "ltorch.pad: mode must be 'constant', 'reflect', "
                     "'replicate' or 'circular', but got '",
                     mode, "'");
  THUNDER_CHECK_KIND(mode == "circular" || t.dtype != DType::Bool, ErrorKind::Type,
                     "ltorch.pad: mode '", mode, "' does not support bool inputs");
  int64_t k = static_cast<int64_t>(pad.size() / 2);
  THUNDER_CHECK(pad.size() % 2 == 0 && k >= 1 && k <= 3 && (t.ndim() == k + 1 || t.ndim() == k + 2),
                "ltorch.pad: padding of length ", pad.size(), " in mode '", mode, "' needs a ",
                k + 1, "- or ", k + 2, "-dimensional input, but got shape ", shapeStr(t.shape));
  Value x = a;
  for (int64_t i = 0; i < k; ++i) x = padDim(x, t.ndim() - 1 - i, pad[2 * i], pad[2 * i + 1], mode);
  return x;
}

namespace {

// ---- dropout ----------------------------------------------------------------------------------

double dropoutP(const Value& v, const std::string& name) {
  double p = v.toDouble();
  THUNDER_CHECK_KIND(p >= 0 && p <= 1, ErrorKind::Value, opn(name),
                     ": dropout probability has to be between 0 and 1, but got ", p);
  return p;
}

/// A keep mask (1 with probability 1 - p) of `shape` in the computation dtype of `t`.
Value keepMask(const TensorProxy& t, const Shape& shape, double p) {
  DType comp = isLowPrecision(t.dtype) ? DType::Float32 : t.dtype;
  Value u = prims::uniform(shape, 0.0, 1.0, t.device, comp);
  return clang::maybeConvert(op("ge", {u, p}), comp);
}

/// The mask shape of channel-wise dropout: (N, C, 1, ...) or, unbatched, (C, 1, ...).
Shape featureShape(const TensorProxy& t, size_t k, const std::string& name) {
  int64_t n = static_cast<int64_t>(k);
  THUNDER_CHECK(t.ndim() >= 2, opn(name),
                ": expected an input with at least 2 dimensions, but got shape ",
                shapeStr(t.shape));
  // dropout2d takes a 3-d input as (N, C, L), as PyTorch does.
  int64_t keep = (t.ndim() == n + 1 && k != 2) ? 1 : 2;
  Shape s(t.ndim(), 1);
  for (int64_t d = 0; d < keep; ++d) s[d] = t.shape[d];
  return s;
}

Value dropoutWith(const Args& a, const std::optional<size_t>& featureDims, bool alpha,
                  const std::string& name) {
  const TensorProxy& t = T(a[0], name);
  double p = dropoutP(a[1], name);
  Shape maskShape = featureDims ? featureShape(t, *featureDims, name) : t.shape;
  if (!a[2].toBool() || p == 0) return a[0];
  checkFloating(t, name);
  if (!alpha) {
    if (p == 1) return op("mul", {a[0], 0});
    return inFloat32(a[0], [&](const Value& x) {
      return op("mul", {x, op("mul", {keepMask(t, maskShape, p), 1.0 / (1.0 - p)})});
    });
  }
  // Alpha dropout keeps SELU's mean and variance: dropped values go to -alpha' and the result is
  // rescaled by a and shifted by b (PyTorch's _dropout_impl).
  if (p == 1) return op("mul", {a[0], 0});
  const double alphaP = 1.7580993408473766;
  double scale = 1.0 / std::sqrt((alphaP * alphaP * p + 1) * (1 - p));
  return inFloat32(a[0], [&](const Value& x) {
    Value keep = keepMask(t, maskShape, p);
    Value shift =
        op("add", {op("mul", {op("sub", {keep, 1.0}), alphaP * scale}), alphaP * scale * p});
    return op("add", {op("mul", {x, op("mul", {keep, scale})}), shift});
  });
}

void registerDropout() {
  for (size_t k = 1; k <= 3; ++k) {
    std::string n = "dropout" + std::to_string(k) + "d";
    define(
        n, "a, p=0.5, training=True, inplace=False", {"torch.nn.functional." + n},
        [k, n](const Args& a) { return dropoutWith(a, k, false, n); }, kRandomOp);
  }
  define(
      "alpha_dropout", "a, p=0.5, training=False, inplace=False",
      {"torch.nn.functional.alpha_dropout", "torch.alpha_dropout"},
      [](const Args& a) { return dropoutWith(a, std::nullopt, true, "alpha_dropout"); }, kRandomOp);
  define(
      "feature_alpha_dropout", "a, p=0.5, training=False, inplace=False",
      {"torch.nn.functional.feature_alpha_dropout", "torch.feature_alpha_dropout"},
      [](const Args& a) { return dropoutWith(a, 2, true, "feature_alpha_dropout"); }, kRandomOp);
}

// ---- activations ------------------------------------------------------------------------------

void checkNotInplace(const Value& v, const std::string& name) {
  THUNDER_CHECK_KIND(!v.toBool(), ErrorKind::NotImplemented, opn(name),
                     ": inplace=True is not supported");
}

void registerActivations() {
  define(
      "hardtanh", "a, min_val=-1.0, max_val=1.0, inplace=False", {"torch.nn.functional.hardtanh"},
      [](const Args& a) {
        checkNotInplace(a[3], "hardtanh");
        const TensorProxy& t = T(a[0], "hardtanh");
        THUNDER_CHECK(t.dtype != DType::Bool && t.dtype != DType::UInt8,  // eager: RuntimeError
                           "ltorch.hardtanh: ", dtypeName(t.dtype), " inputs are not supported");
        THUNDER_CHECK(a[1].toDouble() <= a[2].toDouble(),
                      "ltorch.hardtanh: min_val cannot be greater than max_val");
        // Gradient 0 at the bounds, as PyTorch's hardtanh_backward.
        Value lo = clang::maybeConvert(a[1], t.dtype), hi = clang::maybeConvert(a[2], t.dtype);
        Value r = op("where",
                     {op("le", {a[0], a[1]}), lo, op("where", {op("ge", {a[0], a[2]}), hi, a[0]})});
        return clang::maybeConvert(r, t.dtype);
      },
      kElementwise);
  define(
      "hardsigmoid", "a, inplace=False", {"torch.nn.functional.hardsigmoid"},
      [](const Args& a) {
        checkNotInplace(a[1], "hardsigmoid");
        checkFloating(T(a[0], "hardsigmoid"), "hardsigmoid");
        return inFloat32(a[0], [](const Value& x) {
          return op(
              "where",
              {op("le", {x, -3.0}), 0.0,
               op("where", {op("ge", {x, 3.0}), 1.0, op("add", {op("div", {x, 6.0}), 0.5})})});
        });
      },
      kElementwise);
  define(
      "hardshrink", "a, lambd=0.5",
      {"torch.nn.functional.hardshrink", "torch.hardshrink", "torch.Tensor.hardshrink"},
      [](const Args& a) {
        checkFloating(T(a[0], "hardshrink"), "hardshrink");
        return op("where", {op("gt", {op("abs", {a[0]}), a[1]}), a[0], 0});
      },
      kElementwise);
  define(
      "softshrink", "a, lambd=0.5", {"torch.nn.functional.softshrink"},
      [](const Args& a) {
        checkFloating(T(a[0], "softshrink"), "softshrink");
        THUNDER_CHECK_KIND(a[1].toDouble() >= 0, ErrorKind::Value,
                           "ltorch.softshrink: lambd must be at least 0, but got ",
                           a[1].toDouble());
        return inFloat32(a[0], [&](const Value& x) {
          return op("where",
                    {op("gt", {x, a[1]}), op("sub", {x, a[1]}),
                     op("where", {op("lt", {x, -a[1].toDouble()}), op("add", {x, a[1]}), 0.0})});
        });
      },
      kElementwise);
  define(
      "tanhshrink", "a", {"torch.nn.functional.tanhshrink"},
      [](const Args& a) {
        T(a[0], "tanhshrink");
        return op("sub", {a[0], op("tanh", {a[0]})});
      },
      kElementwise);
  define(
      "logsigmoid", "a", {"torch.nn.functional.logsigmoid"},
      [](const Args& a) {
        checkFloating(T(a[0], "logsigmoid"), "logsigmoid");
        // log sigmoid(x) = min(x, 0) - log1p(exp(-|x|)), stable for large |x| and exact at
        // +-inf (0 and -inf). The gradient is eager's: 1 - sigmoid(x), 1/2 at 0 (minimum's tie).
        return inFloat32(a[0], [](const Value& x) {
          return op("sub", {op("minimum", {x, 0.0}),
                            op("log1p", {op("exp", {op("neg", {op("abs", {x})})})})});
        });
      },
      kElementwise);
  define(
      "softsign", "a", {"torch.nn.functional.softsign"},
      [](const Args& a) {
        T(a[0], "softsign");
        return op("div", {a[0], op("add", {op("abs", {a[0]}), 1})});
      },
      kElementwise);
  define(
      "selu", "a, inplace=False", {"torch.nn.functional.selu", "torch.selu"},
      [](const Args& a) {
        checkNotInplace(a[1], "selu");
        checkFloating(T(a[0], "selu"), "selu");
        const double alpha = 1.6732632423543772848170429916717,
                     scale = 1.0507009873554804934193349852946;
        return inFloat32(a[0], [&](const Value& x) {
          return op("where", {op("gt", {x, 0}), op("mul", {x, scale}),
                              op("mul", {op("expm1", {x}), alpha * scale})});
        });
      },
      kElementwise);
  define(
      "celu", "a, alpha=1.0, inplace=False", {"torch.nn.functional.celu", "torch.celu"},
      [](const Args& a) {
        checkNotInplace(a[2], "celu");
        checkFloating(T(a[0], "celu"), "celu");
        THUNDER_CHECK_KIND(a[1].toDouble() != 0, ErrorKind::Value,
                           "ltorch.celu: alpha must not be 0");
        return inFloat32(a[0], [&](const Value& x) {
          return op("where",
                    {op("gt", {x, 0}), x, op("mul", {op("expm1", {op("div", {x, a[1]})}), a[1]})});
        });
      },
      kElementwise);
  define("prelu", "a, weight", {"torch.nn.functional.prelu", "torch.prelu"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "prelu");
    const TensorProxy& w = T(a[1], "prelu", "weight");
    checkFloating(t, "prelu");
    int64_t c = t.ndim() >= 2 ? t.shape[1] : 1;
    THUNDER_CHECK(t.ndim() >= 1, "ltorch.prelu: expected an input with at least one dimension");
    THUNDER_CHECK(w.ndim() <= 1 && (w.numel() == 1 || w.numel() == c),
                  "ltorch.prelu: weight of shape ", shapeStr(w.shape), " must have 1 or ", c,
                  " (the input's channels) elements");
    Value wb = a[1];
    if (w.numel() == c && t.ndim() >= 2 && c != 1)
      wb = perChannel(a[1], t.ndim(), c);
    else if (w.ndim() == 1)
      wb = op("reshape", {a[1], ints({})});
    return op("where", {op("gt", {a[0], 0}), a[0], op("mul", {wb, a[0]})});
  });
  define(
      "rrelu", "a, lower=0.125, upper=0.3333333333333333, training=False, inplace=False",
      {"torch.nn.functional.rrelu", "torch.rrelu"},
      [](const Args& a) {
        checkNotInplace(a[4], "rrelu");
        const TensorProxy& t = T(a[0], "rrelu");
        checkFloating(t, "rrelu");
        double lo = a[1].toDouble(), hi = a[2].toDouble();
        THUNDER_CHECK_KIND(lo <= hi, ErrorKind::Value, "ltorch.rrelu: lower bound ", lo,
                           " must not exceed upper bound ", hi);
        if (!a[3].toBool()) return op("leaky_relu", {a[0], (lo + hi) / 2});
        THUNDER_CHECK_KIND(
            t.dtype != DType::Float16, ErrorKind::Type,
            "ltorch.rrelu: training=True is not supported for float16 inputs (as in PyTorch)");
        // Training: a slope drawn uniformly from [lower, upper) for each negative element.
        Value slope = prims::uniform(t.shape, lo, hi, t.device, t.dtype);
        return op("where", {op("ge", {a[0], 0}), a[0], op("mul", {a[0], slope})});
      },
      kRandomOp);
  define("glu", "a, dim=-1", {"torch.nn.functional.glu"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "glu");
    checkFloating(t, "glu");
    THUNDER_CHECK(t.ndim() >= 1, "ltorch.glu: glu does not support 0-dimensional tensors");
    int64_t d = canonicalizeDim(t.ndim(), a[1].toInt(), "ltorch.glu");
    THUNDER_CHECK(t.shape[d] % 2 == 0, "ltorch.glu: halving dimension must be even, but dimension ",
                  d, " is size ", t.shape[d]);
    int64_t h = t.shape[d] / 2;
    Value first = clang::sliceInDim(a[0], d, 0, h, 1, "ltorch.glu");
    Value second = clang::sliceInDim(a[0], d, h, t.shape[d], 1, "ltorch.glu");
    return op("mul", {first, op("sigmoid", {second})});
  });
  define(
      "threshold", "a, threshold, value, inplace=False",
      {"torch.nn.functional.threshold", "torch.nn.functional._threshold", "torch.threshold"},
      [](const Args& a) {
        checkNotInplace(a[3], "threshold");
        const TensorProxy& t = T(a[0], "threshold");
        THUNDER_CHECK_KIND(t.dtype != DType::Bool && t.dtype != DType::UInt8 && !isComplex(t.dtype),
                           ErrorKind::Type, "ltorch.threshold: ", dtypeName(t.dtype),
                           " inputs are not supported");
        Value r = op("where", {op("gt", {a[0], a[1]}), a[0], clang::maybeConvert(a[2], t.dtype)});
        return clang::maybeConvert(r, t.dtype);
      },
      kElementwise);
}

// ---- distances --------------------------------------------------------------------------------

/// The p-norm of x over `dim` (p = inf: the largest magnitude).
/// linalg.vector_norm over one dim (its gradient at a zero norm is 0, as eager's: fuzzer seed 12503)
Value vectorNorm(const Value& x, double p, int64_t dim, bool keepdim) {
  return op("vector_norm", {x, p, ints({dim}), keepdim});
}

void registerDistances() {
  define("normalize", "a, p=2.0, dim=1, eps=1e-12, out=None", {"torch.nn.functional.normalize"},
         [](const Args& a) {
           const TensorProxy& t = T(a[0], "normalize");
           // A RuntimeError, as eager's (its norm, linalg.vector_norm, rejects integers: fuzzer
           // seed 26640); complex inputs, which eager takes, are unsupported here (TypeError)
           THUNDER_CHECK(isFloating(t.dtype) || isComplex(t.dtype),
                         "ltorch.normalize: expected a floating point or complex input, but got ", dtypeName(t.dtype));
           checkFloating(t, "normalize");
           THUNDER_CHECK_KIND(a[4].isNone(), ErrorKind::NotImplemented,
                              "ltorch.normalize: out= is not supported");
           int64_t d = canonicalizeDim(t.ndim(), a[2].toInt(), "ltorch.normalize");
           return inFloat32(a[0], [&](const Value& x) {
             Value n = vectorNorm(x, a[1].toDouble(), d, true);
             return op("div", {x, op("clamp", {n, a[3]})});
           });
         });
  define("cosine_similarity", "x1, x2, dim=1, eps=1e-08",
         {"torch.nn.functional.cosine_similarity", "torch.cosine_similarity"}, [](const Args& a) {
           const TensorProxy& t1 = T(a[0], "cosine_similarity", "x1");
           T(a[1], "cosine_similarity", "x2");
           checkFloating(t1, "cosine_similarity", "x1");
           std::vector<Value> xs = clang::maybeBroadcast({a[0], a[1]}, "ltorch.cosine_similarity");
           const TensorProxy& b = xs[0].tensor();
           int64_t d = canonicalizeDim(b.ndim(), a[2].toInt(), "ltorch.cosine_similarity");
           // As PyTorch: each vector divided by its norm clamped to eps, then the dot product.
           Value n1 = op("clamp", {vectorNorm(xs[0], 2, d, true), a[3]});
           Value n2 = op("clamp", {vectorNorm(xs[1], 2, d, true), a[3]});
           return op("sum",
                     {op("mul", {op("div", {xs[0], n1}), op("div", {xs[1], n2})}), ints({d})});
         });
  define("pairwise_distance", "x1, x2, p=2.0, eps=1e-06, keepdim=False",
         {"torch.nn.functional.pairwise_distance", "torch.pairwise_distance"}, [](const Args& a) {
           const TensorProxy& t1 = T(a[0], "pairwise_distance", "x1");
           const TensorProxy& t2 = T(a[1], "pairwise_distance", "x2");
           checkFloating(t1, "pairwise_distance", "x1");
           int64_t nd = std::max(t1.ndim(), t2.ndim());
           Value diff = op("add", {op("sub", {a[0], a[1]}), a[3]});
           if (nd == 0) diff = op("reshape", {diff, ints({1})});
           Value r = vectorNorm(diff, a[2].toDouble(), -1 + (nd == 0 ? 1 : nd), a[4].toBool());
           return r;
         });
  define(
      "pixel_shuffle", "a, upscale_factor",
      {"torch.nn.functional.pixel_shuffle", "torch.pixel_shuffle"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "pixel_shuffle");
        int64_t r = a[1].toInt();
        THUNDER_CHECK(
            t.ndim() >= 3,
            "ltorch.pixel_shuffle: expected an input with at least 3 dimensions, but got shape ",
            shapeStr(t.shape));
        THUNDER_CHECK(r > 0, "ltorch.pixel_shuffle: upscale_factor must be positive, but got ", r);
        int64_t n = t.ndim(), c = t.shape[n - 3], h = t.shape[n - 2], w = t.shape[n - 1];
        THUNDER_CHECK(c % (r * r) == 0, "ltorch.pixel_shuffle: channels ", c,
                      " are not divisible by upscale_factor squared (", r * r, ")");
        Shape lead(t.shape.begin(), t.shape.end() - 3);
        Shape s1 = lead;
        for (int64_t x : {c / (r * r), r, r, h, w}) s1.push_back(x);
        Value y = op("reshape", {a[0], ints(s1)});
        int64_t b = static_cast<int64_t>(lead.size());
        std::vector<int64_t> perm;
        for (int64_t i = 0; i < b; ++i) perm.push_back(i);
        for (int64_t i : {0, 3, 1, 4, 2}) perm.push_back(b + i);
        y = op("permute", {y, ints(perm)});
        Shape s2 = lead;
        for (int64_t x : {c / (r * r), h * r, w * r}) s2.push_back(x);
        return op("reshape", {y, ints(s2)});
      },
      kShapeOp);
  define(
      "pixel_unshuffle", "a, downscale_factor",
      {"torch.nn.functional.pixel_unshuffle", "torch.pixel_unshuffle"},
      [](const Args& a) {
        const TensorProxy& t = T(a[0], "pixel_unshuffle");
        int64_t r = a[1].toInt();
        THUNDER_CHECK(
            t.ndim() >= 3,
            "ltorch.pixel_unshuffle: expected an input with at least 3 dimensions, but got shape ",
            shapeStr(t.shape));
        THUNDER_CHECK(r > 0, "ltorch.pixel_unshuffle: downscale_factor must be positive, but got ",
                      r);
        int64_t n = t.ndim(), c = t.shape[n - 3], h = t.shape[n - 2], w = t.shape[n - 1];
        THUNDER_CHECK(h % r == 0 && w % r == 0, "ltorch.pixel_unshuffle: height ", h, " and width ",
                      w, " must be divisible by downscale_factor ", r);
        Shape lead(t.shape.begin(), t.shape.end() - 3);
        Shape s1 = lead;
        for (int64_t x : {c, h / r, r, w / r, r}) s1.push_back(x);
        Value y = op("reshape", {a[0], ints(s1)});
        int64_t b = static_cast<int64_t>(lead.size());
        std::vector<int64_t> perm;
        for (int64_t i = 0; i < b; ++i) perm.push_back(i);
        for (int64_t i : {0, 2, 4, 1, 3}) perm.push_back(b + i);
        y = op("permute", {y, ints(perm)});
        Shape s2 = lead;
        for (int64_t x : {c * r * r, h / r, w / r}) s2.push_back(x);
        return op("reshape", {y, ints(s2)});
      },
      kShapeOp);
  define("one_hot", "a, num_classes=-1", {"torch.nn.functional.one_hot"}, [](const Args& a) {
    const TensorProxy& t = T(a[0], "one_hot");
    THUNDER_CHECK(t.dtype == DType::Int64,
                       "ltorch.one_hot: expected an int64 index tensor, but got ",
                       dtypeName(t.dtype));
    int64_t c = a[1].toInt();
    THUNDER_CHECK_KIND(
        c >= 0, ErrorKind::NotImplemented,
        "ltorch.one_hot: num_classes=-1 (the number of classes read from the data) is not "
        "supported; pass num_classes");
    Value classes = prims::iota(c, 0, 1, t.device, DType::Int64);
    return clang::maybeConvert(op("eq", {op("unsqueeze", {a[0], -1}), classes}), DType::Int64);
  });
}

// ---- losses -----------------------------------------------------------------------------------

void checkSameShape(const TensorProxy& x, const TensorProxy& y, const std::string& name) {
  THUNDER_CHECK_KIND(x.shape == y.shape, ErrorKind::Value, opn(name), ": target of shape ",
                     shapeStr(y.shape), " must have the input's shape ", shapeStr(x.shape));
}

void registerLosses() {
  define("binary_cross_entropy",
         "a, target, weight=None, size_average=None, reduce=None, reduction='mean'",
         {"torch.nn.functional.binary_cross_entropy"}, [](const Args& a) {
           const std::string name = "binary_cross_entropy";
           const TensorProxy& x = T(a[0], name);
           checkFloating(x, name);
           checkSameShape(x, T(a[1], name, "target"), name);
           // Logs are clamped at -100, as PyTorch does, so the loss stays finite at 0 and 1.
           Value lx = op("clamp", {op("log", {a[0]}), -100.0});
           Value l1x = op("clamp", {op("log1p", {op("neg", {a[0]})}), -100.0});
           Value loss =
               op("neg",
                  {op("add", {op("mul", {a[1], lx}), op("mul", {op("sub", {1.0, a[1]}), l1x})})});
           if (!a[2].isNone()) loss = op("mul", {loss, a[2]});
           return reduce(loss, a[5].toString(), name);
         });
  define(
      "binary_cross_entropy_with_logits",
      "a, target, weight=None, size_average=None, reduce=None, reduction='mean', pos_weight=None",
      {"torch.nn.functional.binary_cross_entropy_with_logits"}, [](const Args& a) {
        const std::string name = "binary_cross_entropy_with_logits";
        const TensorProxy& x = T(a[0], name);
        checkFloating(x, name);
        const TensorProxy& target = T(a[1], name, "target");
        checkSameShape(x, target, name);
        // ATen computes the loss into `1 - target` in place, so it has the target's dtype (float32
        // for a float64 input and a float32 target) and is reduced in it; an integer or bool
        // target cannot hold it there.
        THUNDER_CHECK(isFloating(target.dtype), opn(name),
                      ": expected a floating-point target (the loss is computed in its dtype), but got ",
                      dtypeName(target.dtype), " of shape ", shapeStr(target.shape));
        // (1 - t) x + w_pos (log1p(exp(-|x|)) + max(-x, 0)), w_pos = 1 + (pos_weight - 1) t.
        Value softplusNeg = op("add", {op("log1p", {op("exp", {op("neg", {op("abs", {a[0]})})})}),
                                       op("relu", {op("neg", {a[0]})})});
        Value lw = a[6].isNone() ? Value(1.0)
                                 : op("add", {op("mul", {op("sub", {a[6], 1.0}), a[1]}), 1.0});
        Value loss = op("add", {op("mul", {op("sub", {1.0, a[1]}), a[0]}),
                                a[6].isNone() ? softplusNeg : op("mul", {lw, softplusNeg})});
        if (!a[2].isNone()) loss = op("mul", {loss, a[2]});
        return reduce(clang::maybeConvert(loss, target.dtype), a[5].toString(), name);
      });
  define("l1_loss", "a, target, size_average=None, reduce=None, reduction='mean'",
         {"torch.nn.functional.l1_loss"}, [](const Args& a) {
           T(a[0], "l1_loss");
           return reduce(op("abs", {op("sub", {a[0], a[1]})}), a[4].toString(), "l1_loss");
         });
  define("smooth_l1_loss", "a, target, size_average=None, reduce=None, reduction='mean', beta=1.0",
         {"torch.nn.functional.smooth_l1_loss"}, [](const Args& a) {
           checkFloating(T(a[0], "smooth_l1_loss"), "smooth_l1_loss");
           double beta = a[5].toDouble();
           THUNDER_CHECK_KIND(beta >= 0, ErrorKind::Value,
                              "ltorch.smooth_l1_loss: beta must be at least 0, but got ", beta);
           Value d = op("abs", {op("sub", {a[0], a[1]})});
           Value loss = beta == 0
                            ? d
                            : op("where", {op("lt", {d, beta}),
                                           op("div", {op("mul", {op("mul", {d, d}), 0.5}), beta}),
                                           op("sub", {d, 0.5 * beta})});
           return reduce(loss, a[4].toString(), "smooth_l1_loss");
         });
  define("huber_loss", "a, target, reduction='mean', delta=1.0, weight=None",
         {"torch.nn.functional.huber_loss"}, [](const Args& a) {
           checkFloating(T(a[0], "huber_loss"), "huber_loss");
           double delta = a[3].toDouble();
           THUNDER_CHECK_KIND(delta > 0, ErrorKind::Value,
                              "ltorch.huber_loss: delta must be positive, but got ", delta);
           Value d = op("abs", {op("sub", {a[0], a[1]})});
           Value loss = op("where", {op("lt", {d, delta}), op("mul", {op("mul", {d, d}), 0.5}),
                                     op("mul", {op("sub", {d, 0.5 * delta}), delta})});
           // ATen's huber_loss has the input's dtype (a float32 input and a float64 target: float32);
           // a weight multiplies it afterwards, in Python, with type promotion.
           loss = clang::maybeConvert(loss, T(a[0], "huber_loss").dtype);
           if (!a[4].isNone()) loss = op("mul", {loss, a[4]});
           return reduce(loss, a[2].toString(), "huber_loss");
         });
  define("kl_div", "a, target, size_average=None, reduce=None, reduction='mean', log_target=False",
         {"torch.nn.functional.kl_div"}, [](const Args& a) {
           const TensorProxy& x = T(a[0], "kl_div");
           checkFloating(x, "kl_div");
           Value loss;
           if (a[5].toBool()) {
             loss = op("mul", {op("exp", {a[1]}), op("sub", {a[1], a[0]})});
           } else {
             // xlogy(t, t) - t x, with 0 log 0 = 0.
             Value positive = op("gt", {a[1], 0});
             Value safe = op("where", {positive, a[1], 1.0});
             loss = op("sub", {op("mul", {a[1], op("log", {safe})}), op("mul", {a[1], a[0]})});
           }
           const std::string& r = a[4].toString();
           if (r == "batchmean") {
             Value total = op("sum", {loss});
             return x.ndim() == 0 ? total : op("div", {total, static_cast<double>(x.shape[0])});
           }
           return reduce(loss, r, "kl_div");
         });
}

}  // namespace

void registerNNOps() {
  registerConvolution();
  registerNormalization();
  registerPooling();
  define("interpolate",
         "a, size=None, scale_factor=None, mode='nearest', align_corners=None, "
         "recompute_scale_factor=None, antialias=False",
         {"torch.nn.functional.interpolate"}, interpolate);
  registerDropout();
  registerActivations();
  registerDistances();
  registerLosses();
}

}  // namespace thunder::ltorch
