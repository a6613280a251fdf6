#include "runtime/cpu_memory.h"

#include <ATen/EmptyTensor.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ir/error.h"

namespace thunder::runtime {
namespace {

struct HugePageAllocator final : c10::Allocator {
  static constexpr size_t kHugePage = size_t(2) << 20, kPage = 4096;
  c10::DataPtr allocate(size_t n) override {
    // Rounded to small pages only: the huge pages are those inside the range, the tail of it
    // (under 2 MiB) is mapped with small ones, and no more than 4 KiB is wasted.
    const size_t bytes = (std::max<size_t>(n, 1) + kPage - 1) / kPage * kPage;
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, bytes) != 0 || p == nullptr)
      throw Error(ErrorKind::Runtime, "out of memory allocating a CPU tensor of " + std::to_string(n) + " bytes");
    madvise(p, bytes, MADV_HUGEPAGE);  // advice: without huge pages the memory is still usable
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  static void release(void* p) { std::free(p); }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

bool hugePageSized(int64_t bytes, at::Device dev) {
  static const bool off = std::getenv("THUNDER_FUSER_NO_HUGEPAGES") != nullptr;
  return !off && dev.is_cpu() && bytes >= (int64_t(4) << 20);
}

at::Tensor newOutputTensor(at::IntArrayRef shape, at::ScalarType dtype, at::Device dev) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (!hugePageSized(numel * static_cast<int64_t>(c10::elementSize(dtype)), dev))
    return at::empty(shape, at::TensorOptions().dtype(dtype).device(dev));
  static HugePageAllocator* allocator = new HugePageAllocator;  // outlives every tensor
  return at::Tensor(at::detail::empty_generic(shape, allocator, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                              std::nullopt));
}

}  // namespace thunder::runtime
