// Memory for large CPU tensors that kernels write: 2 MiB-aligned and advised to be backed by
// transparent huge pages.
#pragma once

#include <ATen/ATen.h>

namespace thunder::runtime {

/// A new tensor of `shape` and `dtype` on `dev`, as at::empty; on the CPU from 4 MiB its memory
/// is 2 MiB-aligned and advised to be backed by transparent huge pages (MADV_HUGEPAGE; the kernel
/// setting "madvise" is the common default, "never" leaves an aligned allocation). A fresh tensor
/// of the default allocator is mapped 4 KiB page by page as it is first written: filling a fresh
/// 64 MiB buffer on 2 threads took 40 ms that way and 8 ms on 2 MiB pages (the kernel of
/// benchmarks/run.py's cpu_chain computes its 64 MiB in about 16 ms). THUNDER_FUSER_NO_HUGEPAGES
/// turns it off, for A/B timings.
at::Tensor newOutputTensor(at::IntArrayRef shape, at::ScalarType dtype, at::Device dev);

/// Whether newOutputTensor gives a tensor of `bytes` huge-page memory.
bool hugePageSized(int64_t bytes, at::Device dev);

}  // namespace thunder::runtime
