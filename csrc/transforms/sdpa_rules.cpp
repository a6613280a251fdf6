#include "transforms/sdpa_rules.h"

#include <cmath>
#include <map>

#include "ir/error.h"
#include "ops/ltorch.h"
#include "ops/sdpa.h"
#include "transforms/autodiff.h"

namespace thunder {
namespace {

using Args = std::vector<Value>;

/// (B, Hk, S, E) -> (B, Hk * rep, S, E), each key head repeated `rep` times in a row, as
/// torch.repeat_interleave(x, rep, dim=1) (what enable_gqa means).
Value repeatHeads(const Value& x, int64_t rep) {
  Shape s = x.tensor().shape;
  Shape expanded = {s[0], s[1], rep, s[2], s[3]};
  Value e = ltorch::op("expand", {ltorch::op("unsqueeze", {x, 2}), Value::ints(expanded)});
  return ltorch::op("reshape", {e, Value::ints({s[0], s[1] * rep, s[2], s[3]})});
}

/// The gradient of repeatHeads: the repeated heads summed.
Value sumRepeatedHeads(const Value& g, int64_t rep) {
  Shape s = g.tensor().shape;
  Value r = ltorch::op("reshape", {g, Value::ints({s[0], s[1] / rep, rep, s[2], s[3]})});
  return ltorch::op("sum", {r, Value::ints({2})});
}

Value fusedRule(const Args& a) {
  sdpa::Backend backend = sdpa::chooseBackend(a, false);
  THUNDER_INTERNAL(backend != sdpa::Backend::None,
                   "the fused grad rule of scaled_dot_product_attention got a call no fused "
                   "kernel applies to");
  const TensorProxy &q = a[0].tensor(), &k = a[1].tensor();
  int64_t rep = q.shape[1] / k.shape[1];
  Value key = a[1], value = a[2];
  if (rep != 1) {
    key = repeatHeads(key, rep);
    value = repeatHeads(value, rep);
  }
  Value mask = a[3];
  if (mask.isTensor() && mask.tensor().dtype == DType::Bool) {
    // A boolean mask (true: attend) becomes an additive one of the query's dtype, as in eager.
    const TensorProxy& m = mask.tensor();
    Value zeros = ltorch::op("full", {Value::ints(m.shape), 0.0},
                             {{"device", m.device}, {"dtype", q.dtype}});
    mask = ltorch::op("masked_fill", {zeros, ltorch::op("logical_not", {mask}), -INFINITY});
  }
  double scale = a[6].isNone() ? 1.0 / std::sqrt(static_cast<double>(q.shape[3])) : a[6].toDouble();
  Value causal = a[5].toBool();
  Value name = sdpa::backendName(backend);
  double dropout = a[4].toDouble();
  Value res = call(sdpa::forwardSymbol(), {a[0], key, value, mask, causal, scale, name, dropout});
  Value out = res.items()[0], lse = res.items()[1];
  Value seed, offset;
  if (dropout > 0.0) {
    seed = res.items()[2];
    offset = res.items()[3];
  }

  Value g = getGrad(out);
  Value grads = call(sdpa::backwardSymbol(), {g, a[0], key, value, out, lse, mask, causal, scale,
                                              name, dropout, seed, offset});
  Value dk = grads.items()[1], dv = grads.items()[2];
  if (rep != 1) {
    dk = sumRepeatedHeads(dk, rep);
    dv = sumRepeatedHeads(dv, rep);
  }
  putGrad(a[0], grads.items()[0]);
  putGrad(a[1], dk);
  putGrad(a[2], dv);
  return out;
}

}  // namespace

void registerSdpaGradRule() {
  sdpa::registerSdpaSymbols();
  registerGradRule(
      ltorch::symbol("scaled_dot_product_attention").id(), fusedRule,
      [](const BoundSymbol& b, const std::function<bool(const TensorProxy&)>& differentiable) {
        bool maskNeedsGrad = b.args.size() > 3 && b.args[3].isTensor() &&
                             differentiable(b.args[3].tensor());
        return sdpa::chooseBackend(b.args, maskNeedsGrad) != sdpa::Backend::None;
      });
}

std::optional<Trace> sdpaMasksToBias(const Trace& trace) {
  const Symbol* sdpa = SymbolRegistry::get().find("ltorch.scaled_dot_product_attention");
  if (sdpa == nullptr) return std::nullopt;
  auto boolMask = [&](const BoundSymbol& b) {
    return b.sym == sdpa && b.args.size() > 3 && b.args[3].isTensor() && b.args[3].tensor().dtype == DType::Bool &&
           b.args[0].isTensor() && b.output.isTensor();
  };
  bool any = false;
  for (const BoundSymbol& b : trace.bsyms) any = any || boolMask(b);
  if (!any) return std::nullopt;
  Trace out = trace.emptyCopy();
  std::map<std::pair<const TensorProxy*, DType>, TensorPtr> biases;
  for (const BoundSymbol& b : trace.bsyms) {
    if (!boolMask(b)) {
      out.bsyms.push_back(b);
      continue;
    }
    appendTraced(out, [&] {
      const TensorPtr& mask = b.args[3].toTensor();
      DType dt = b.args[0].tensor().dtype;
      TensorPtr& bias = biases[{mask.get(), dt}];
      if (!bias) {
        Value additive = ltorch::op("where", {b.args[3], Value(0.0), Value(-INFINITY)});
        bias = ltorch::op("to", {additive, Value(), Value(dt)}).toTensor();
      }
      std::vector<Value> args = b.args;
      args[3] = Value(bias);
      return call(*sdpa, std::move(args));
    }, b.output.toTensor(), "sdpa masks to bias");
  }
  return out;
}

}  // namespace thunder
