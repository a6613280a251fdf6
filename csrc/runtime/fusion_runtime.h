// The fusion executor's run-time half: compiles generated kernels (NVRTC for CUDA, the system
// C++ compiler for CPU), caches them in memory and on disk, and launches them on ATen tensors.
#pragma once

#include <cstdint>
#include <string>

#include "ir/symbol.h"

namespace thunder::runtime {

/// Registers the fuser in the executor registry (idempotent).
void registerFusionExecutor();
/// Whether a symbol is a compiled fusion.
bool isFusion(const Symbol* sym);
/// The generated source of a fusion symbol (CUDA, or C++ for the contiguous inner-stride case).
std::string fusionSource(const Symbol* fusion);
/// Compiles CUDA source with NVRTC for an architecture ("sm_90"); returns the CUBIN size, or
/// throws a user error with NVRTC's log. Needs libnvrtc, not a GPU.
size_t nvrtcCompile(const std::string& source, const std::string& arch);
/// Whether libnvrtc could be loaded.
bool nvrtcAvailable();
/// Copies `bytes` from src to dst, two buffers of CUDA device `device`, on that device's current
/// stream with the driver's cuMemcpyDtoDAsync (no ATen dispatch: the caller checks that the
/// layouts match). False when the driver lacks the entry point or the copy could not be queued.
bool cudaCopyAsync(void* dst, const void* src, size_t bytes, int device);

/// Launches an instantiated CUDA graph (a cudaGraphExec_t as an integer) on the current stream
/// of `device` through the driver (cuGraphLaunch), when that device is the current one; false
/// where it did not launch (no entry point, another current device, a failed launch).
bool cudaGraphLaunchAsync(uintptr_t exec, int device);
/// Whether the system C++ compiler ($CXX, else c++) builds the fuser's CPU kernels; probed once
/// per process.
bool cpuCompilerAvailable();
/// The flags the CPU kernels are compiled with: -march=$THUNDER_CPU_MARCH (native where unset)
/// and the rest, read once per process.
std::string cpuCompileFlags();
/// Kernel compile statistics: kernels compiled in this process and loaded from the disk cache;
/// and what is alive now: CPU kernel libraries loaded, compiled regions, and executor kernels
/// (of every executor: a released region's kernel leaves the table).
struct FusionStats {
  int compiled = 0;
  int diskHits = 0;
  int64_t cpuLibraries = 0;
  int64_t regions = 0;
  int64_t kernels = 0;
  /// CPU kernel outputs written into a dead input instead of a new tensor, in this process.
  int64_t outputsIntoInputs = 0;
};
FusionStats fusionStats();

}  // namespace thunder::runtime
