// ATen kernels of the fused attention symbols (ops/sdpa.h), run by the torch executor and printed
// as sdpaex.fused_attention_forward / sdpaex.fused_attention_backward. With dropout (CUDA kernels
// only) the forward returns the kernels' random state and the backward passes it back, so that
// the same elements are dropped; without, the backward gets an unused placeholder.
#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <numeric>
#include <vector>
#include <map>
#include <mutex>
#include <thread>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "executors/executor.h"
#include "ir/error.h"
#include "ops/sdpa.h"
#include "runtime/kernels.h"

namespace thunder::runtime {
namespace {

using K = KernelArgs;

std::optional<at::Tensor> optTensor(K& a, size_t i) {
  return a.none(i) ? std::nullopt : std::optional<at::Tensor>(a.t(i));
}

c10::IValue tuple(std::vector<c10::IValue> items) { return c10::ivalue::Tuple::create(std::move(items)); }

/// The philox seed and offset the CUDA kernels return when they use no dropout.
at::Tensor unusedRngState() { return at::empty({}, at::TensorOptions().dtype(at::kLong)); }

/// The fused kernels read the head dimension as contiguous (PyTorch's own sdpa makes it so);
/// a strided one (a sliced or transposed view) is copied first.
at::Tensor denseLastDim(const at::Tensor& t) {
  return t.dim() == 0 || t.stride(-1) == 1 ? t : t.contiguous();
}

/// `t` dense along its last dim, its broadcast dims (stride 0) kept broadcast: only the distinct
/// elements are copied (a bias written in a permuted order, T5's position bias, expanded over the
/// batch, copied whole was a [B, H, L, S] write per attention call).
at::Tensor denseLastDimKeepingBroadcast(const at::Tensor& t) {
  if (t.dim() == 0 || t.stride(-1) == 1) return t;
  at::Tensor base = t;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) base = base.narrow(d, 0, 1);
  return base.contiguous().expand(t.sizes());
}

/// The memory-efficient kernels read the bias as (B, H, L, S) with a dense last dim and the other
/// strides multiples of 16 elements: a bias that is not is padded along S (and sliced back, so
/// only its strides change), then expanded to the attention's shape (broadcast dims: stride 0).
std::optional<at::Tensor> efficientBias(K& a, size_t i, const at::Tensor& q, const at::Tensor& k) {
  if (a.none(i)) return std::nullopt;
  at::Tensor bias = denseLastDimKeepingBroadcast(a.t(i));
  constexpr int64_t kAlign = 16;
  bool aligned = bias.dim() > 0 && bias.stride(-1) == 1;
  for (int64_t d = 0; aligned && d + 1 < bias.dim(); ++d)
    aligned = bias.stride(d) % kAlign == 0;
  if (!aligned) {
    int64_t s = bias.size(-1);
    bias = at::constant_pad_nd(bias, {0, (kAlign - s % kAlign) % kAlign}).slice(-1, 0, s);
  }
  return bias.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// fused_attention_forward(query, key, value, attn_mask, is_causal, scale, backend)
c10::IValue forward(K& a) {
  const at::Tensor q = denseLastDim(a.t(0)), k = denseLastDim(a.t(1)), v = denseLastDim(a.t(2));
  bool causal = a.b(4);
  double scale = a.d(5);
  double dropout = a.v.size() > 7 ? a.d(7) : 0.0;
  switch (sdpa::parseBackend(a.str(6), "sdpaex.fused_attention_forward")) {
    case sdpa::Backend::FlashCpu: {
      auto [out, lse] =
          at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, optTensor(a, 3), scale);
      return tuple({out, lse});
    }
    case sdpa::Backend::Flash: {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, dropout, causal, false, scale);
      if (dropout == 0.0) return tuple({std::get<0>(r), std::get<1>(r)});
      return tuple({std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)});
    }
    case sdpa::Backend::Efficient: {
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, efficientBias(a, 3, q, k), true,
                                                           dropout, causal, scale);
      if (dropout == 0.0) return tuple({std::get<0>(r), std::get<1>(r)});
      return tuple({std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)});
    }
    case sdpa::Backend::None: break;
  }
  throw Error(ErrorKind::Value, "sdpaex.fused_attention_forward: no fused kernel named '" + a.str(6) + "'");
}

// fused_attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask, is_causal,
//                          scale, backend, dropout_p, rng_seed, rng_offset, mask_grad)
c10::IValue backward(K& a) {
  const at::Tensor g = denseLastDim(a.t(0)), q = denseLastDim(a.t(1)), k = denseLastDim(a.t(2)),
                   v = denseLastDim(a.t(3)), out = denseLastDim(a.t(4)), &lse = a.t(5);
  bool causal = a.b(7);
  double scale = a.d(8);
  double dropout = a.v.size() > 10 ? a.d(10) : 0.0;
  at::Tensor seed = dropout > 0.0 ? a.t(11) : unusedRngState();
  at::Tensor offset = dropout > 0.0 ? a.t(12) : unusedRngState();
  switch (sdpa::parseBackend(a.str(9), "sdpaex.fused_attention_backward")) {
    case sdpa::Backend::FlashCpu: {
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          g, q, k, v, out, lse, 0.0, causal, optTensor(a, 6), scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Flash: {
      // Dense inputs: no cumulative sequence lengths; the maximal lengths are L and S.
      auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward(
          g, q, k, v, out, lse, at::Tensor(), at::Tensor(), q.size(2), k.size(2), dropout, causal,
          seed, offset, scale);
      return tuple({dq, dk, dv});
    }
    case sdpa::Backend::Efficient: {
      at::Tensor bias = efficientBias(a, 6, q, k).value_or(at::Tensor());
      bool maskGrad = a.v.size() > 13 && a.b(13);
      auto r = at::_scaled_dot_product_efficient_attention_backward(
          g, q, k, v, bias, out, lse, seed, offset, dropout, {true, true, true, maskGrad}, causal,
          scale);
      if (maskGrad) return tuple({std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)});
      return tuple({std::get<0>(r), std::get<1>(r), std::get<2>(r)});
    }
    case sdpa::Backend::None: break;
  }
  throw Error(ErrorKind::Value, "sdpaex.fused_attention_backward: no fused kernel named '" + a.str(9) + "'");
}

// ---- the cudnn executor's operators (python/thunder/executors/cudnnex.py) ---------------------
// Their Python functions call the same ATen ops; these run them without a trip through Python.

/// cuDNN's bias: (B, H, L, S) with broadcast dims of stride 0, dense along S (a bias a kernel
/// wrote in a permuted order, as T5's position bias, has another stride there).
std::optional<at::Tensor> cudnnBias(K& a, size_t i, const at::Tensor& q, const at::Tensor& k) {
  if (a.v.size() <= i || a.none(i)) return std::nullopt;
  return denseLastDimKeepingBroadcast(a.t(i)).expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

std::optional<double> optScale(K& a, size_t i) {
  return a.none(i) ? std::nullopt : std::optional<double>(a.d(i));
}

/// A thread that runs one task at a time for its callers, each caller waiting for its task.
///
/// Why cuDNN's attention backward runs on one: ATen caches cuDNN's backward graphs per thread,
/// keyed on q, k and v's sizes and strides (and the mask's, causality, dropout). A graph also fixes
/// the strides of the output and of the output gradient, which the key leaves out. A call whose
/// q, k and v are laid out as an earlier call's, but whose output gradient is not, runs the earlier
/// call's graph, which reads the gradient with the wrong strides: gradients 140% off, silently
/// (H200, torch 2.11, cuDNN 9). Eager's backward and thunder's both run in autograd's thread and
/// hand cuDNN the gradient in different layouts (eager as autograd made it, often a transposed
/// view; thunder in the output's), so each could poison the other's graphs: it happened inside
/// Whisper, SD3, Flux and DeepSeek-V3 after an eager step. On this thread only thunder's calls
/// build graphs, each with the gradient in the output's layout, which ATen allocates after q's,
/// which is in the key: every graph in this thread's cache fits every call that finds it.
class OwnThread {
 public:
  using Clock = std::chrono::steady_clock;

  OwnThread() { std::thread([this] { loop(); }).detach(); }

  /// Runs `task` on the thread (the caller's thread-local ATen state, device and stream with it)
  /// and returns when it is done, rethrowing what it threw.
  void run(const c10::Device& device, const std::function<void()>& task) {
    at::ThreadLocalState state;
    c10::Stream stream = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
    std::function<void()> wrapped = [&] {
      at::ThreadLocalStateGuard stateGuard(state);
      c10::StreamGuard streamGuard(stream);
      task();
    };
    std::lock_guard<std::mutex> one(callers_);
    error_ = nullptr;
    done_.store(false);
    {
      std::lock_guard<std::mutex> lock(mutex_);  // (a sleeping thread sees it)
      task_.store(&wrapped);
    }
    changed_.notify_all();
    if (!spinUntil(Clock::now() + kSpin, [this] { return done_.load(std::memory_order_acquire); })) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return done_.load(); });
    }
    if (error_) std::rethrow_exception(error_);
  }

  /// Keeps the thread awake (spinning, not sleeping) for `d` from now, so that a task coming
  /// within that time starts at once: the forward calls this for the backward to come.
  void wake(Clock::duration d) {
    const int64_t until = (Clock::now() + d).time_since_epoch().count();
    if (awakeUntil_.load(std::memory_order_relaxed) >= until) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (awakeUntil_.load() < until) awakeUntil_.store(until);
    }
    changed_.notify_all();
  }

 private:
  /// Waking a sleeping thread took 180 us per round trip on a 2-core VM (and added 4 ms of host
  /// time to BERT's training step on the H200, 12 attention backwards). Both sides spin a while
  /// first: the caller for its task (tens of microseconds once cuDNN's graph is built), the thread
  /// for the next task (the next layer's, a millisecond or so later) and, after `wake`, for the
  /// backward's first.
  static constexpr auto kSpin = std::chrono::milliseconds(2);

  template <typename Ready>
  static bool spinUntil(Clock::time_point until, Ready ready) {
    while (!ready()) {
      if (Clock::now() > until) return false;
      std::this_thread::yield();
    }
    return true;
  }

  Clock::time_point awakeUntil() const { return Clock::time_point(Clock::duration(awakeUntil_.load())); }

  void loop() {
    for (;;) {
      auto hasTask = [this] { return task_.load(std::memory_order_acquire) != nullptr; };
      while (!spinUntil(awakeUntil(), hasTask)) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return hasTask() || awakeUntil() > Clock::now(); });
      }
      try {
        (*task_.load())();
      } catch (...) {
        error_ = std::current_exception();
      }
      task_.store(nullptr);
      {
        std::lock_guard<std::mutex> lock(mutex_);  // (a sleeping caller sees it)
        done_.store(true, std::memory_order_release);
        const int64_t until = (Clock::now() + kSpin).time_since_epoch().count();
        if (awakeUntil_.load() < until) awakeUntil_.store(until);
      }
      changed_.notify_all();
    }
  }

  std::mutex callers_;  // one task at a time
  std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<const std::function<void()>*> task_{nullptr};
  std::atomic<bool> done_{false};
  std::atomic<int64_t> awakeUntil_{0};  // Clock ticks: spin, not sleep, until then
  std::exception_ptr error_;  // written by the thread before done_, read by the caller after
};

/// The process's thread for cuDNN's attention backward. A child process after fork has none of
/// its parent's threads, and starts its own. Never destroyed: the thread waits for tasks until
/// the process exits.
OwnThread& cudnnBackwardThread() {
  static std::mutex mutex;
  static OwnThread* thread = nullptr;
  static long owner = 0;
#if defined(__unix__) || defined(__APPLE__)
  long pid = static_cast<long>(::getpid());
#else
  long pid = 0;
#endif
  std::lock_guard<std::mutex> lock(mutex);
  if (thread == nullptr || owner != pid) {
    thread = new OwnThread();
    owner = pid;
  }
  return *thread;
}

auto cudnnAttention(K& a, bool logsumexp) {
  const at::Tensor q = denseLastDim(a.t(0)), k = denseLastDim(a.t(1)), v = denseLastDim(a.t(2));
  double dropout = a.v.size() > 6 ? a.d(6) : 0.0;
  return at::_scaled_dot_product_cudnn_attention(q, k, v, cudnnBias(a, 5, q, k), logsumexp, dropout, a.b(3), false,
                                                 optScale(a, 4));
}

// cudnn_sdpa_fwd(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0)
//   -> (out, logsumexp) or, with dropout, (out, logsumexp, seed, offset)
c10::IValue cudnnForward(K& a) {
  cudnnBackwardThread().wake(std::chrono::milliseconds(5));  // (for the backward's first call)
  auto r = cudnnAttention(a, true);
  if (a.v.size() <= 6 || a.d(6) == 0.0) return tuple({std::get<0>(r), std::get<1>(r)});
  return tuple({std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)});
}

// cudnn_sdpa(query, key, value, is_causal, scale, attn_mask=None, dropout_p=0.0) -> out: the
// forward without the logsumexp a backward would read (no gradient is taken).
c10::IValue cudnnInference(K& a) { return std::get<0>(cudnnAttention(a, false)); }

bool sameLayout(const at::Tensor& a, const at::Tensor& b) {
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

/// The output gradient in the output's layout (the one cuDNN reads fastest, and the one every
/// backward graph in thunder's cache was built for: see OwnThread): it usually arrives as the transpose of the output projection's [B, T, H*D]
/// gradient while the output is [B, H, T, D]. 16-bit values move four at a time, as 8-byte words
/// (ATen's copy of a permuted bfloat16 tensor moves one element per load).
at::Tensor gradLikeOut(const at::Tensor& grad, const at::Tensor& out) {
  if (sameLayout(grad, out)) return grad;
  at::Tensor dst = at::empty_like(out);
  if (grad.element_size() == 2 && grad.stride(-1) == 1 && grad.size(-1) % 4 == 0 && out.stride(-1) == 1) {
    try {
      dst.view(at::kDouble).copy_(grad.view(at::kDouble));
      return dst;
    } catch (const c10::Error&) {  // strides or offset not in whole words
    }
  }
  return dst.copy_(grad);
}

/// No dropout: the kernel reads no random state, but takes a seed and an offset (made once per
/// device, and never freed: they outlive every program).
const std::pair<at::Tensor, at::Tensor>& noDropoutState(const c10::Device& device) {
  static std::mutex mutex;
  static auto* states = new std::map<std::pair<int, int>, std::pair<at::Tensor, at::Tensor>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<int>(device.type()), static_cast<int>(device.index()));
  auto it = states->find(key);
  if (it == states->end()) {
    auto opts = at::TensorOptions().dtype(at::kLong).device(device);
    it = states->emplace(key, std::make_pair(at::zeros({}, opts), at::zeros({}, opts))).first;
  }
  return it->second;
}

/// `out` in the layout ATen's cuDNN forward gives an output for this `q` (its dims in q's order
/// of strides, packed). ATen's backward graphs, cached per thread by q, k and v's layouts, also
/// fix the output's and its gradient's strides; eager's backward always has the forward's q with
/// its output. thunder's backward may get q in another layout than the forward had (recomputed by
/// a fused kernel), and with it an output laid out for the other q. After DiT, HunyuanDiT's q and
/// k gradients came out 100% off float64 (H200, torch 2.11; each alone, and HunyuanDiT after the
/// other diffusers models but DiT, were right). Each call now gives both in the layout the key's q
/// implies, and HunyuanDiT after DiT matches float64 as eager does.
at::Tensor outLayoutOf(const at::Tensor& q, const at::Tensor& out) {
  const int64_t n = out.dim();
  if (q.dim() != n) return out;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return q.stride(x) < q.stride(y); });
  std::vector<int64_t> strides(n);
  int64_t next = 1;
  for (int64_t d : order) {
    strides[d] = next;
    next *= out.size(d);
  }
  bool same = true;
  for (int64_t d = 0; d < n; ++d) same = same && (out.size(d) <= 1 || out.stride(d) == strides[d]);
  if (same) return out;
  at::Tensor laid = at::empty_strided(out.sizes(), strides, out.options());
  laid.copy_(out);
  return laid;
}

// cudnn_sdpa_bwd(grad, query, key, value, out, logsumexp, is_causal, scale, attn_mask=None,
//                dropout_p=0.0, rng_seed=None, rng_offset=None) -> (dq, dk, dv)
c10::IValue cudnnBackward(K& a) {
  const at::Tensor q = denseLastDim(a.t(1)), k = denseLastDim(a.t(2)), v = denseLastDim(a.t(3));
  const at::Tensor out = outLayoutOf(q, a.t(4)), lse = a.t(5).contiguous();
  double dropout = a.v.size() > 9 ? a.d(9) : 0.0;
  at::Tensor seed, offset;
  if (dropout != 0.0) {
    seed = a.t(10);
    offset = a.t(11);
  } else {
    std::tie(seed, offset) = noDropoutState(q.device());
  }
  const at::Tensor grad = gradLikeOut(a.t(0), out), bias = cudnnBias(a, 8, q, k).value_or(at::Tensor());
  const bool causal = a.b(6);
  const auto scale = optScale(a, 7);
  at::Tensor dq, dk, dv;
  auto call = [&] {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_cudnn_attention_backward(
        grad, q, k, v, out, lse, seed, offset, bias, at::Tensor(), at::Tensor(), q.size(2), k.size(2), dropout, causal,
        scale);
  };
  // Under a Python dispatch mode or with tensor subclasses the call may need the GIL, which the
  // caller holds: those run here (their graphs are not cuDNN's anyway).
  bool python = c10::impl::dispatch_mode_enabled();
  for (const at::Tensor* t : {&grad, &q, &k, &v, &out, &lse})
    python = python || t->key_set().has(c10::DispatchKey::Python);
  if (python)
    call();
  else
    cudnnBackwardThread().run(q.device(), call);
  return tuple({dq, dk, dv});
}

}  // namespace

void registerSdpaKernels(Executor& torch) {
  sdpa::registerSdpaSymbols();
  registerNativeKernel("cudnn_sdpa_fwd", cudnnForward);
  registerNativeKernel("cudnn_sdpa", cudnnInference);
  registerNativeKernel("cudnn_sdpa_bwd", cudnnBackward);
  for (auto [semantic, kernel] : {std::pair<const Symbol*, Kernel>{&sdpa::forwardSymbol(), forward},
                                  std::pair<const Symbol*, Kernel>{&sdpa::backwardSymbol(), backward}}) {
    const Symbol* exec = makeExecSymbol("torch", "sdpaex", semantic->name, *semantic);
    setKernel(exec, std::move(kernel));
    torch.addImplementation(semantic->id(), Implementation{exec, {}, {}});
  }
}

}  // namespace thunder::runtime
