#include "executors/cross_entropy.h"

#include "ir/error.h"

namespace thunder::xent {
namespace {

// Loads of each logits dtype as float, and the store back; bf16 and f16 as raw 16-bit words so
// that the source needs no CUDA header (NVRTC compiles it as is).
const char* kConversions = R"(
__device__ __forceinline__ float thunder_load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float thunder_load(const thunder_bf16* p) {
  return __uint_as_float(static_cast<unsigned>(__ldg(&p->bits)) << 16);
}
__device__ __forceinline__ float thunder_load(const thunder_f16* p) {
  float f;
  unsigned short h = __ldg(&p->bits);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// Plain (coherent) loads, for a kernel that may write where it reads (the backward in place).
__device__ __forceinline__ float thunder_load_rw(const float* p) { return *p; }
__device__ __forceinline__ float thunder_load_rw(const thunder_bf16* p) {
  return __uint_as_float(static_cast<unsigned>(p->bits) << 16);
}
__device__ __forceinline__ float thunder_load_rw(const thunder_f16* p) {
  float f;
  unsigned short h = p->bits;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ void thunder_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void thunder_store(thunder_bf16* p, float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) { p->bits = 0x7fc0; return; }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  p->bits = static_cast<unsigned short>(u >> 16);
}
__device__ __forceinline__ void thunder_store(thunder_f16* p, float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  p->bits = h;
}
)";

// 16-byte loads and stores of VEC consecutive elements (4 floats or 8 16-bit values), for rows
// whose length is a multiple of VEC on 16-byte aligned tensors. `rw` loads are coherent (the
// backward may write where it reads).
const char* kVectorConversions = R"(
__device__ __forceinline__ uint4 thunder_raw16(const void* p, bool rw) {
  return rw ? *static_cast<const uint4*>(p) : __ldg(static_cast<const uint4*>(p));
}
__device__ __forceinline__ float thunder_lo16(unsigned w, const thunder_bf16*) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float thunder_hi16(unsigned w, const thunder_bf16*) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float thunder_lo16(unsigned w, const thunder_f16*) {
  float f;
  unsigned short h = static_cast<unsigned short>(w & 0xffffu);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float thunder_hi16(unsigned w, const thunder_f16*) {
  float f;
  unsigned short h = static_cast<unsigned short>(w >> 16);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ void thunder_load_vec(const float* p, float* v, bool rw) {
  uint4 r = thunder_raw16(p, rw);
  v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y);
  v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
}
template <typename H>
__device__ __forceinline__ void thunder_load_vec(const H* p, float* v, bool rw) {
  uint4 r = thunder_raw16(p, rw);
  const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = thunder_lo16(w[k], p);
    v[2 * k + 1] = thunder_hi16(w[k], p);
  }
}
__device__ __forceinline__ void thunder_store_vec(float* p, const float* v) {
  *reinterpret_cast<uint4*>(p) = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]),
                                            __float_as_uint(v[2]), __float_as_uint(v[3]));
}
template <typename H>
__device__ __forceinline__ void thunder_store_vec(H* p, const float* v) {
  H h[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) thunder_store(&h[k], v[k]);
  unsigned w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = static_cast<unsigned>(h[2 * k].bits) | (static_cast<unsigned>(h[2 * k + 1].bits) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}
)";

const char* kKernels = R"(
#define THUNDER_NEG_INF (-__int_as_float(0x7f800000))

// Merges the running (max, sum of exp(x - max)) pair (m2, s2) into (m, s).
__device__ __forceinline__ void thunder_merge(float& m, float& s, float m2, float s2) {
  float mx = fmaxf(m, m2);
  if (mx == THUNDER_NEG_INF) return;  // both empty
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
thunder_xent_fwd(const T* __restrict__ logits, const L* __restrict__ labels, float* __restrict__ loss,
                 float* __restrict__ mlse, long long classes, long long stride, float smoothing,
                 long long ignoreIndex) {
  const long long row = blockIdx.x;
  const T* x = logits + row * stride;
  float m = THUNDER_NEG_INF, s = 0.f, total = 0.f;
  long long j = threadIdx.x;
#if VEC > 1
  // Two 16-byte loads in flight per thread; one rescale per 2 * VEC elements. Rows start 16-byte
  // aligned (stride % VEC == 0); the scalar loops below take the last classes % VEC.
  for (long long jv = threadIdx.x; jv < classes / VEC; jv += 2 * BLOCK) {
    float v[2 * VEC];
    const int n = jv + BLOCK < classes / VEC ? 2 : 1;
    thunder_load_vec(x + jv * VEC, v, false);
    if (n == 2) thunder_load_vec(x + (jv + BLOCK) * VEC, v + VEC, false);
    float mx = m;
#pragma unroll
    for (int k = 0; k < 2 * VEC; ++k)
      if (k < n * VEC) mx = fmaxf(mx, v[k]);
    if (mx != THUNDER_NEG_INF) {
      float e = 0.f;
#pragma unroll
      for (int k = 0; k < 2 * VEC; ++k)
        if (k < n * VEC) e += __expf(v[k] - mx);
      s = s * __expf(m - mx) + e;
    }
    m = mx;
#pragma unroll
    for (int k = 0; k < 2 * VEC; ++k)
      if (k < n * VEC) total += v[k];
  }
  j = classes / VEC * VEC + threadIdx.x;
#endif
  // Four loads in flight per thread; one rescale per four elements.
  for (; j + 3 * BLOCK < classes; j += 4 * BLOCK) {
    float a = thunder_load(x + j), b = thunder_load(x + j + BLOCK);
    float c = thunder_load(x + j + 2 * BLOCK), d = thunder_load(x + j + 3 * BLOCK);
    float mx = fmaxf(fmaxf(m, fmaxf(a, b)), fmaxf(c, d));
    if (mx != THUNDER_NEG_INF)
      s = s * __expf(m - mx) + __expf(a - mx) + __expf(b - mx) + __expf(c - mx) + __expf(d - mx);
    m = mx;
    total += (a + b) + (c + d);
  }
  for (; j < classes; j += BLOCK) {
    float a = thunder_load(x + j);
    float mx = fmaxf(m, a);
    if (mx != THUNDER_NEG_INF) s = s * __expf(m - mx) + __expf(a - mx);
    m = mx;
    total += a;
  }
  // Warp, then block reduction of (m, s, total).
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    total += __shfl_xor_sync(0xffffffffu, total, o);
    thunder_merge(m, s, m2, s2);
  }
  __shared__ float sm[BLOCK / 32], ss[BLOCK / 32], st[BLOCK / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (BLOCK > 32) {
    if (lane == 0) { sm[warp] = m; ss[warp] = s; st[warp] = total; }
    __syncthreads();
    if (warp == 0) {
      m = lane < BLOCK / 32 ? sm[lane] : THUNDER_NEG_INF;
      s = lane < BLOCK / 32 ? ss[lane] : 0.f;
      total = lane < BLOCK / 32 ? st[lane] : 0.f;
      for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        total += __shfl_xor_sync(0xffffffffu, total, o);
        thunder_merge(m, s, m2, s2);
      }
    }
  }
  if (threadIdx.x == 0) {
    // An all -inf row has lse -inf, as log_softmax gives; +inf entries give NaN through m - mx.
    const float lse = m + __logf(s);
    mlse[row] = lse;
    const long long y = static_cast<long long>(labels[row]);
    float l;
    if (y == ignoreIndex || y < 0) {
      l = 0.f;
    } else if (y >= classes) {
      l = __int_as_float(0x7fc00000);  // a label out of range: NaN, never a silent value
    } else {
      const float nll = lse - thunder_load(x + y);
      l = smoothing == 0.f ? nll : (1.f - smoothing) * nll + smoothing * (lse - total / classes);
    }
    loss[row] = l;
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
thunder_xent_bwd(const float* __restrict__ grad, const T* logits, const L* __restrict__ labels,
                 const float* __restrict__ mlse, T* out, long long classes, long long stride,
                 long long outStride, float smoothing) {
  // `out` may be `logits` (the gradient written over dead logits): each element is read, then
  // written, by one thread.
  const long long row = blockIdx.x;
  const T* x = logits + row * stride;
  T* o = out + row * outStride;
  const long long y = static_cast<long long>(labels[row]);
  const float g = y < 0 ? 0.f : grad[row], lse = mlse[row];  // negative labels are ignored rows
  const float hit = g * (1.f - smoothing), base = g * smoothing / classes;
  long long j = threadIdx.x;
#if VEC > 1
  // Two 16-byte loads in flight per thread; rows 16-byte aligned, the last classes % VEC below.
  for (long long jv = threadIdx.x; jv < classes / VEC; jv += 2 * BLOCK) {
    float v[2][VEC];
    const int n = jv + BLOCK < classes / VEC ? 2 : 1;
    thunder_load_vec(x + jv * VEC, v[0], true);
    if (n == 2) thunder_load_vec(x + (jv + BLOCK) * VEC, v[1], true);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u >= n) break;
      const long long c0 = (jv + u * BLOCK) * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        v[u][k] = g * __expf(v[u][k] - lse) - base - (c0 + k == y ? hit : 0.f);
      thunder_store_vec(o + c0, v[u]);
    }
  }
  j = classes / VEC * VEC + threadIdx.x;
#endif
  for (; j + 3 * BLOCK < classes; j += 4 * BLOCK) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = thunder_load_rw(x + j + k * BLOCK);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const long long c = j + k * BLOCK;
      thunder_store(o + c, g * __expf(v[k] - lse) - base - (c == y ? hit : 0.f));
    }
  }
  for (; j < classes; j += BLOCK) {
    thunder_store(o + j, g * __expf(thunder_load_rw(x + j) - lse) - base - (j == y ? hit : 0.f));
  }
}
)";

}  // namespace

int vectorWidth(DType logits) { return logits == DType::Float32 ? 4 : 8; }

int blockSize(int64_t classes) {
  if (classes <= 256) return 32;
  if (classes <= 2048) return 128;
  if (classes <= 8192) return 256;
  if (classes <= 32768) return 512;
  return 1024;
}

std::string cudaSource(DType logits, DType labels, int block, int vec) {
  const char* t = nullptr;
  switch (logits) {
    case DType::Float32:
      t = "float";
      break;
    case DType::BFloat16:
      t = "thunder_bf16";
      break;
    case DType::Float16:
      t = "thunder_f16";
      break;
    default:
      THUNDER_CHECK(false, "apex_cross_entropy: logits of dtype ", dtypeName(logits),
                    " are not supported (float32, bfloat16 or float16)");
  }
  THUNDER_CHECK(labels == DType::Int64 || labels == DType::Int32,
                "apex_cross_entropy: labels of dtype ", dtypeName(labels),
                " are not supported (int64 or int32)");
  THUNDER_CHECK(block >= 32 && block <= 1024 && (block & (block - 1)) == 0,
                "apex_cross_entropy: block size ", block, " is not a power of two in [32, 1024]");
  THUNDER_CHECK(vec == 1 || vec == vectorWidth(logits), "apex_cross_entropy: vector width ", vec,
                " for ", dtypeName(logits), " logits (1 or ", vectorWidth(logits), ")");
  std::string s = "// thunder apex cross-entropy kernels\n";
  s += "struct thunder_bf16 { unsigned short bits; };\n";
  s += "struct thunder_f16 { unsigned short bits; };\n";
  s += "typedef " + std::string(t) + " T;\n";
  s += std::string("typedef ") + (labels == DType::Int64 ? "long long" : "int") + " L;\n";
  s += "#define BLOCK " + std::to_string(block) + "\n";
  s += "#define VEC " + std::to_string(vec) + "\n";
  s += kConversions;
  if (vec > 1) s += kVectorConversions;
  return s + kKernels;
}

}  // namespace thunder::xent
