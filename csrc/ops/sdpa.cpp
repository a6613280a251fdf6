#include "ops/sdpa.h"

#include <mutex>

#include "ir/error.h"
#include "ir/trace.h"
#include "ops/ltorch.h"
#include "ops/utils.h"

namespace thunder::sdpa {
namespace {

const char* kForward = "sdpaex.fused_attention_forward";
const char* kBackward = "sdpaex.fused_attention_backward";

/// Checks q (B, H, L, E), k (B, H, S, E), v (B, H, S, E) and the mask; returns the backend.
Backend checkAttention(const std::vector<Value>& a, size_t qi, size_t maskIdx, size_t backendIdx,
                       const std::string& op) {
  const TensorProxy& q = expectTensor(a[qi], op, "query");
  const TensorProxy& k = expectTensor(a[qi + 1], op, "key");
  const TensorProxy& v = expectTensor(a[qi + 2], op, "value");
  THUNDER_CHECK_KIND(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, ErrorKind::Value, op,
                     ": query, key and value must be 4-D (batch, heads, sequence, head dim), but "
                     "got query ", shapeStr(q.shape), ", key ", shapeStr(k.shape), ", value ",
                     shapeStr(v.shape));
  THUNDER_CHECK_KIND(q.dtype == k.dtype && q.dtype == v.dtype && isFloating(q.dtype),
                     ErrorKind::Type, op,
                     ": query, key and value must have one floating dtype, but got query ",
                     q.typeString(), ", key ", k.typeString(), ", value ", v.typeString());
  commonDevice({a[qi], a[qi + 1], a[qi + 2]}, op);
  THUNDER_CHECK_KIND(q.shape[0] == k.shape[0] && q.shape[0] == v.shape[0] &&
                         q.shape[1] == k.shape[1] && q.shape[1] == v.shape[1],
                     ErrorKind::Value, op,
                     ": query, key and value must have the same batch size and number of heads, "
                     "but got query ", shapeStr(q.shape), ", key ", shapeStr(k.shape), ", value ",
                     shapeStr(v.shape));
  THUNDER_CHECK_KIND(k.shape[2] == v.shape[2], ErrorKind::Value, op,
                     ": key and value must have the same sequence length, but got key ",
                     shapeStr(k.shape), " and value ", shapeStr(v.shape));
  THUNDER_CHECK_KIND(q.shape[3] == k.shape[3] && q.shape[3] == v.shape[3], ErrorKind::Value, op,
                     ": query, key and value must have the same head dim, but got query ",
                     shapeStr(q.shape), ", key ", shapeStr(k.shape), ", value ", shapeStr(v.shape));
  THUNDER_CHECK_KIND(a[backendIdx].isString(), ErrorKind::Type, op,
                     ": argument 'backend' must be a string, but got ", describe(a[backendIdx]));
  THUNDER_CHECK_KIND(a[backendIdx - 1].isFloat() || a[backendIdx - 1].isInt(), ErrorKind::Type, op,
                     ": argument 'scale' must be a number, but got ", describe(a[backendIdx - 1]));
  THUNDER_CHECK_KIND(a[backendIdx - 2].isBool(), ErrorKind::Type, op,
                     ": argument 'is_causal' must be a bool, but got ", describe(a[backendIdx - 2]));
  Backend b = parseBackend(a[backendIdx].toString(), op);
  THUNDER_CHECK_KIND(b != Backend::None, ErrorKind::Value, op, ": argument 'backend' must be "
                     "'flash_cpu', 'flash' or 'efficient', but got 'none'");
  bool cuda = q.device.type == DeviceType::CUDA;
  THUNDER_CHECK_KIND((b == Backend::FlashCpu) != cuda, ErrorKind::Value, op, ": the '",
                     backendName(b), "' kernel does not run on ", q.device.str());
  const Value& mask = a[maskIdx];
  if (!mask.isNone()) {
    const TensorProxy& m = expectTensor(mask, op, "attn_mask");
    THUNDER_CHECK_KIND(b != Backend::Flash, ErrorKind::Value, op, ": the '", backendName(b),
                       "' kernel takes no attn_mask, but got ", m.typeString());
    THUNDER_CHECK_KIND(m.dtype == q.dtype, ErrorKind::Type, op, ": attn_mask must have the "
                       "query's dtype ", dtypeName(q.dtype), ", but got ", m.typeString());
    THUNDER_CHECK_KIND(m.device == q.device, ErrorKind::Value, op, ": attn_mask is on ",
                       m.device.str(), " but query is on ", q.device.str());
    Shape full = {q.shape[0], q.shape[1], q.shape[2], k.shape[2]};
    bool ok = m.ndim() >= 2 && m.ndim() <= 4;
    for (int64_t i = 0; ok && i < m.ndim(); ++i) {
      int64_t s = m.shape[m.ndim() - 1 - i], f = full[3 - i];
      ok = s == f || s == 1;
    }
    THUNDER_CHECK_KIND(ok, ErrorKind::Value, op, ": attn_mask of shape ", shapeStr(m.shape),
                       " is not broadcastable to the attention's shape ", shapeStr(full));
  }
  return b;
}

double dropoutArg(const Value& v, const std::string& op) {
  if (v.isNone()) return 0.0;
  THUNDER_CHECK_KIND(v.isFloat() || v.isInt(), ErrorKind::Type, op,
                     ": argument 'dropout_p' must be a number, but got ", describe(v));
  double p = v.toDouble();
  THUNDER_CHECK_KIND(p >= 0.0 && p < 1.0, ErrorKind::Value, op,
                     ": argument 'dropout_p' must be in [0, 1), but got ", p);
  return p;
}

Value forwardMeta(const std::vector<Value>& a) {
  Backend b = checkAttention(a, 0, 3, 6, kForward);
  const TensorProxy& q = a[0].tensor();
  TraceContext& ctx = requireContext(kForward);
  TensorPtr out = ctx.newTensor(q.shape, q.dtype, q.device);
  TensorPtr lse = ctx.newTensor({q.shape[0], q.shape[1], logsumexpLength(b, q.shape[2])},
                                DType::Float32, q.device);
  double p = dropoutArg(a[7], kForward);
  THUNDER_CHECK_KIND(p == 0.0 || b != Backend::FlashCpu, ErrorKind::Value, kForward,
                     ": the 'flash_cpu' kernel takes no dropout, but got dropout_p=", p);
  if (p == 0.0) return Value::tuple({Value(out), Value(lse)});
  // With dropout the kernel returns its random state (philox seed and offset), which the backward
  // reads to drop the same elements.
  Value seed(ctx.newTensor({}, DType::Int64, Device{}));
  Value offset(ctx.newTensor({}, DType::Int64, Device{}));
  return Value::tuple({Value(out), Value(lse), seed, offset});
}

Value backwardMeta(const std::vector<Value>& a) {
  const std::string op = kBackward;
  Backend b = checkAttention(a, 1, 6, 9, op);
  const TensorProxy& q = a[1].tensor();
  const TensorProxy& g = expectTensor(a[0], op, "grad_out");
  const TensorProxy& out = expectTensor(a[4], op, "out");
  const TensorProxy& lse = expectTensor(a[5], op, "logsumexp");
  THUNDER_CHECK_KIND(g.shape == q.shape && out.shape == q.shape, ErrorKind::Value, op,
                     ": grad_out and out must have the query's shape ", shapeStr(q.shape),
                     ", but got grad_out ", shapeStr(g.shape), " and out ", shapeStr(out.shape));
  THUNDER_CHECK_KIND(g.dtype == q.dtype && out.dtype == q.dtype, ErrorKind::Type, op,
                     ": grad_out and out must have the query's dtype ", dtypeName(q.dtype),
                     ", but got grad_out ", g.typeString(), " and out ", out.typeString());
  Shape lseShape = {q.shape[0], q.shape[1], logsumexpLength(b, q.shape[2])};
  THUNDER_CHECK_KIND(lse.shape == lseShape && lse.dtype == DType::Float32, ErrorKind::Value, op,
                     ": logsumexp must be float32 of shape ", shapeStr(lseShape), " for the '", backendName(b),
                     "' kernel, but got ", lse.typeString());
  commonDevice({a[0], a[1], a[4], a[5]}, op);
  double p = dropoutArg(a[10], op);
  THUNDER_CHECK_KIND(p == 0.0 || (a[11].isTensor() && a[12].isTensor()), ErrorKind::Value, op,
                     ": dropout_p=", p, " needs the forward's rng_seed and rng_offset");
  const Value& maskGradArg = a.size() > 13 ? a[13] : Value();
  THUNDER_CHECK_KIND(maskGradArg.isNone() || maskGradArg.isBool(), ErrorKind::Type, op,
                     ": argument 'mask_grad' must be a bool, but got ", describe(maskGradArg));
  bool maskGrad = maskGradArg.isBool() && maskGradArg.toBool();
  THUNDER_CHECK_KIND(!maskGrad || (b == Backend::Efficient && a[6].isTensor()), ErrorKind::Value, op,
                     ": mask_grad=True needs an attn_mask and the 'efficient' kernel, but got the '", backendName(b),
                     "' kernel and attn_mask ", describe(a[6]));
  TraceContext& ctx = requireContext(op);
  std::vector<Value> grads;
  for (size_t i = 1; i <= 3; ++i) {
    const TensorProxy& t = a[i].tensor();
    grads.push_back(Value(ctx.newTensor(t.shape, t.dtype, t.device)));
  }
  // The mask's gradient at the attention's shape (B, H, L, S): the rule sums it to the mask's.
  if (maskGrad)
    grads.push_back(Value(ctx.newTensor({q.shape[0], q.shape[1], q.shape[2], a[2].tensor().shape[2]},
                                        a[6].tensor().dtype, q.device)));
  return Value::tuple(std::move(grads));
}

void add(const char* name, const char* sig, SymbolFn meta) {
  auto s = std::make_unique<Symbol>();
  s->module = "sdpaex";
  s->name = name;
  s->params = parseSignature(sig);
  s->meta = std::move(meta);
  s->style = PrintStyle::Torch;
  SymbolRegistry::get().add(std::move(s));
}

}  // namespace

std::string backendName(Backend b) {
  switch (b) {
    case Backend::None: return "none";
    case Backend::FlashCpu: return "flash_cpu";
    case Backend::Flash: return "flash";
    case Backend::Efficient: return "efficient";
  }
  return "none";
}

Backend parseBackend(const std::string& name, const std::string& op) {
  for (Backend b : {Backend::None, Backend::FlashCpu, Backend::Flash, Backend::Efficient})
    if (backendName(b) == name) return b;
  throw Error(ErrorKind::Value, op + ": argument 'backend' must be 'flash_cpu', 'flash' or "
                                     "'efficient', but got '" + name + "'");
}

Backend chooseBackend(const std::vector<Value>& a, bool maskIsDifferentiable) {
  if (a.size() < 8 || !a[0].isTensor() || !a[1].isTensor() || !a[2].isTensor()) return Backend::None;
  const TensorProxy &q = a[0].tensor(), &k = a[1].tensor(), &v = a[2].tensor();
  const Value& mask = a[3];
  bool causal = a[5].isBool() && a[5].toBool();
  if (!(a[4].isInt() || a[4].isFloat())) return Backend::None;
  double dropout = a[4].toDouble();
  if (dropout < 0.0 || dropout >= 1.0) return Backend::None;
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) return Backend::None;
  DType dt = q.dtype;
  if (k.dtype != dt || v.dtype != dt) return Backend::None;
  if (dt != DType::Float32 && dt != DType::BFloat16 && dt != DType::Float16) return Backend::None;
  if (k.device != q.device || v.device != q.device) return Backend::None;
  int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], E = q.shape[3];
  int64_t Hk = k.shape[1], S = k.shape[2];
  if (k.shape[0] != B || v.shape[0] != B || v.shape[1] != Hk || v.shape[2] != S) return Backend::None;
  if (k.shape[3] != E || v.shape[3] != E || E == 0 || L == 0 || S == 0 || B == 0) return Backend::None;
  bool gqa = a[7].isBool() && a[7].toBool();
  if (Hk != H && !(gqa && Hk > 0 && H % Hk == 0)) return Backend::None;
  if (!(a[6].isNone() || a[6].isInt() || a[6].isFloat())) return Backend::None;
  if (!mask.isNone()) {
    // A mask that needs a gradient: the memory-efficient kernel's backward gives it (CUDA).
    if (!mask.isTensor() || causal || (maskIsDifferentiable && q.device.type != DeviceType::CUDA))
      return Backend::None;
    const TensorProxy& m = mask.tensor();
    if (m.dtype != DType::Bool && m.dtype != dt) return Backend::None;
    if (m.device != q.device || m.ndim() < 2 || m.ndim() > 4) return Backend::None;
    Shape full = {B, H, L, S};
    for (int64_t i = 0; i < m.ndim(); ++i) {
      int64_t s = m.shape[m.ndim() - 1 - i];
      if (s != 1 && s != full[3 - i]) return Backend::None;
    }
  }
  switch (q.device.type) {
    case DeviceType::CPU: return dropout == 0.0 ? Backend::FlashCpu : Backend::None;
    case DeviceType::CUDA: {
      bool aligned = E % 8 == 0 && E <= 256;
      if (!aligned) return Backend::None;
      // With a mask (an additive bias; BERT's padding mask, T5's position bias) half types take the
      // memory-efficient kernel, as eager's sdpa does; flash takes no mask.
      if (!mask.isNone()) return dt != DType::Float32 && E <= 128 ? Backend::Efficient : Backend::None;
      if (dt != DType::Float32 && (!causal || L == S)) return Backend::Flash;
      // The memory-efficient kernel's gradients disagreed with eager on an H200 (float32, L != S);
      // until that is understood, those calls are differentiated through the decomposition.
      return Backend::None;
    }
    default: return Backend::None;
  }
}

int64_t logsumexpLength(Backend b, int64_t queryLength) {
  return b == Backend::Efficient ? (queryLength + 31) / 32 * 32 : queryLength;
}

const Symbol& forwardSymbol() {
  registerSdpaSymbols();
  return SymbolRegistry::get().at(kForward);
}

const Symbol& backwardSymbol() {
  registerSdpaSymbols();
  return SymbolRegistry::get().at(kBackward);
}

void registerSdpaSymbols() {
  static std::once_flag once;
  std::call_once(once, [] {
    ltorch::registerLTorch();
    add("fused_attention_forward",
        "query, key, value, attn_mask, is_causal, scale, backend, dropout_p=0.0", forwardMeta);
    add("fused_attention_backward",
        "grad_out, query, key, value, out, logsumexp, attn_mask, is_causal, scale, backend, "
        "dropout_p=0.0, rng_seed=None, rng_offset=None, mask_grad=False",
        backwardMeta);
  });
}

}  // namespace thunder::sdpa
