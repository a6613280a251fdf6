#include "runtime/fusion_runtime.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>

#include "codegen/fusion_codegen.h"
#include "executors/cross_entropy.h"
#include "executors/fusion_executor.h"
#include "ir/error.h"
#include "runtime/cpu_memory.h"
#include "runtime/kernels.h"

namespace thunder::runtime {
namespace {

using codegen::KernelProgram;

std::atomic<int> gCompiled{0}, gDiskHits{0};

std::string cacheDir(const std::string& sub) {
  // An empty THUNDER_CACHE_DIR is unset (it made the cache "/cpu", at the file system's root).
  const char* env = std::getenv("THUNDER_CACHE_DIR");
  const char* home = std::getenv("HOME");
  std::string dir = env && *env ? env : std::string(home && *home ? home : "/tmp") + "/.cache/thunder";
  dir += "/" + sub;
  std::string partial;
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') mkdir(dir.substr(0, i).c_str(), 0755);
  return dir;
}

std::string hashHex(const std::string& s) {
  // A 128-bit name for the cache: two 64-bit lanes in the manner of MurmurHash3 (x64), each word
  // mixed into both with different constants, then each lane finalized. Eight bytes a step: the
  // runtime hashes every kernel's source when a trace is made (FNV-1a byte by byte, twice, was
  // 4% of a decoding loop that traced each new length).
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  auto fmix = [](uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
  };
  constexpr uint64_t c1 = 0x87c37b91114253d5ull, c2 = 0x4cf5ad432745937full;
  const size_t n = s.size();
  uint64_t h1 = 0x9e3779b97f4a7c15ull ^ n, h2 = 0x6a09e667f3bcc909ull ^ (n * c1);
  auto mixIn = [&](uint64_t w) {
    h1 ^= rotl(w * c1, 31) * c2;
    h1 = rotl(h1, 27) * 5 + 0x52dce729;
    h2 ^= rotl(w * c2, 33) * c1;
    h2 = rotl(h2, 31) * 5 + 0x38495ab5;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    mixIn(w);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, n - i);
    mixIn(w ^ (uint64_t(n - i) << 56));
  }
  h1 = fmix(h1);
  h2 = fmix(h2 + h1);
  h1 += h2;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h1),
                static_cast<unsigned long long>(h2));
  return buf;
}

bool fileExists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

/// A temporary name next to `path`, unique across processes and threads: writers of the same
/// cache file never share one, and each renames its own complete file into place.
std::string uniqueTemp(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp" + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
}

/// Drops the expired entries of a table of weak pointers once it has doubled since the last
/// sweep: the table stays within twice its live entries, at an amortized constant cost.
template <typename Map>
void sweepExpired(Map& m, size_t& mark) {
  if (m.size() < 2 * mark) return;
  for (auto it = m.begin(); it != m.end();)
    it = it->second.expired() ? m.erase(it) : std::next(it);
  mark = std::max<size_t>(m.size(), 64);
}

// ---- fork safety ------------------------------------------------------------------------------
// A fork copies only the thread that calls it (a DataLoader starting its workers, a
// multiprocessing pool): a compile another thread has under way never finishes in the child, and
// a lock such a thread holds is never released there. A child that called a function whose
// kernel the parent was compiling waited forever for that kernel's key lock. The locks held only
// briefly are taken around a fork, so the child finds them free; for the long-held ones (a key
// lock is held for a whole compile) the child starts afresh: new key locks, and a compile (Job)
// that a thread of the parent had under way is run again by the child's thread that needs it.

/// The short-held locks taken around a fork, and the state the child resets.
struct ForkSafe {
  std::mutex jobs;  // every Job's state
  std::condition_variable* jobDone = new std::condition_variable;
  uint64_t generation = 0;  // forks into this process: a Job started in an earlier one has no thread here
  std::mutex keys;          // keyLocks
  std::unordered_map<std::string, std::weak_ptr<std::mutex>> keyLocks;
  size_t keyMark = 64;
  std::mutex libraries;  // compileCpu's table of loaded libraries
  std::mutex patterns;   // the CPU regions' tables of compiled inner-stride patterns

  static ForkSafe& get() {
    // Never destroyed (as the tables below): a compile-pool worker may still use it at exit.
    static ForkSafe* s = [] {
      auto* f = new ForkSafe;
      pthread_atfork(
          [] {
            ForkSafe& f = get();
            f.jobs.lock();
            f.keys.lock();
            f.libraries.lock();
            f.patterns.lock();
          },
          [] { get().unlockAll(); },
          [] {
            ForkSafe& f = get();
            ++f.generation;
            f.jobDone = new std::condition_variable;  // the parent's waiters are not here
            f.keyLocks.clear();  // a key lock a thread of the parent holds is never released here
            f.unlockAll();
          });
      return f;
    }();
    return *s;
  }

 private:
  void unlockAll() {
    patterns.unlock();
    libraries.unlock();
    keys.unlock();
    jobs.unlock();
  }
};

/// The mutex of one cache key: threads compiling the same kernel wait for the first one. Held
/// by the threads using it; the table keeps only keys in use (and at most as many expired ones).
std::shared_ptr<std::mutex> keyMutex(const std::string& key) {
  ForkSafe& f = ForkSafe::get();
  std::lock_guard<std::mutex> lock(f.keys);
  std::shared_ptr<std::mutex> m = f.keyLocks[key].lock();
  if (!m) {
    m = std::make_shared<std::mutex>();
    f.keyLocks[key] = m;
    sweepExpired(f.keyLocks, f.keyMark);
  }
  return m;
}

/// A compile that runs once: on a worker of the compile pool if one reaches it first, else on
/// the thread that first needs its result (which then does not wait behind the queue). Errors
/// are kept and rethrown to every caller. One that a thread of the parent process had under way
/// at a fork is run again by the child (ForkSafe).
template <class T>
class Job {
 public:
  explicit Job(std::function<T()> fn) : fn_(std::move(fn)) {}
  T get() {
    if (!done_.load(std::memory_order_acquire)) run();
    if (error_) std::rethrow_exception(error_);
    return value_;
  }

 private:
  void run() {
    ForkSafe& f = ForkSafe::get();
    std::unique_lock<std::mutex> lock(f.jobs);
    while (!done_.load(std::memory_order_relaxed)) {
      if (running_ && runningIn_ == f.generation) {
        f.jobDone->wait(lock);
        continue;
      }
      running_ = true;
      runningIn_ = f.generation;
      lock.unlock();
      T value{};
      std::exception_ptr error;
      try {
        value = fn_();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      value_ = std::move(value);
      error_ = error;
      fn_ = nullptr;
      done_.store(true, std::memory_order_release);
      f.jobDone->notify_all();
    }
  }

  std::function<T()> fn_;
  std::atomic<bool> done_{false};
  bool running_ = false;  // these two under ForkSafe::jobs
  uint64_t runningIn_ = 0;
  T value_{};
  std::exception_ptr error_;
};

/// The threads that compile kernels ahead of their first call, oldest request first: as many as
/// the machine has cores less one (at least two; THUNDER_COMPILE_THREADS overrides), so a cold
/// start of a model with a hundred kernels neither starts a hundred compilers at once nor starves
/// the thread tracing the model (and the libraries, cuDNN among them, that compile their own
/// kernels on it). Never destroyed. At exit the queue is dropped and the compiles under way are
/// waited for: a worker inside NVRTC, the CUDA driver or dlopen while exit() runs the libraries'
/// destructors could crash the exiting process. After a fork the child starts its own workers
/// when it first submits; the parent's queue is dropped there.
class CompilePool {
 public:
  static CompilePool& get() {
    static CompilePool* pool = [] {
      auto* p = new CompilePool();
      // Registered after the compilers' libraries are loaded (the first submit follows them), so
      // it runs before their destructors.
      std::atexit([] { get().drain(); });
      pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); },
                     [] {
                       CompilePool& c = get();
                       c.mu_.unlock();
                       // The parent's threads do not exist here, nor do their waits.
                       new (&c.cv_) std::condition_variable();
                       new (&c.drained_) std::condition_variable();
                       c.started_ = 0;
                       c.idle_ = 0;
                       c.running_ = 0;
                       // nor its compiles ahead of time: a child (a DataLoader's worker) compiles
                       // what it calls, when it calls it (Job), not every kernel the parent queued
                       c.queue_.clear();
                     });
      return p;
    }();
    return *pool;
  }

  template <class T>
  std::shared_ptr<Job<T>> submit(std::function<T()> fn) {
    auto job = std::make_shared<Job<T>>(std::move(fn));
    std::weak_ptr<Job<T>> weak = job;  // a job nobody needs any more is skipped
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([weak] {
        if (auto j = weak.lock()) try {
            j->get();
          } catch (...) {
          }
      });
      // A worker for each job no idle one will take, up to the limit.
      if (queue_.size() > static_cast<size_t>(idle_) && started_ < limit_) {
        ++started_;
        std::thread([this] { work(); }).detach();
      }
    }
    cv_.notify_one();
    return job;
  }

 private:
  CompilePool() {
    unsigned hw = std::thread::hardware_concurrency();
    limit_ = std::max(2, static_cast<int>(hw) - 1);
    if (const char* e = std::getenv("THUNDER_COMPILE_THREADS")) limit_ = std::max(1, std::atoi(e));
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return !queue_.empty() || closing_; });
      --idle_;
      if (closing_) return;
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      lock.unlock();
      task();
      task = nullptr;  // what the task holds goes before the count says it is done
      lock.lock();
      if (--running_ == 0 && closing_) drained_.notify_all();
    }
  }

  /// At exit: no new compiles start, and the ones under way finish (a compile stuck behind a
  /// lock of a thread that exit stopped is not waited for beyond a minute).
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    closing_ = true;
    std::deque<std::function<void()>> dropped;
    dropped.swap(queue_);
    cv_.notify_all();
    drained_.wait_for(lock, std::chrono::seconds(60), [this] { return running_ == 0; });
  }

  std::mutex mu_;
  std::condition_variable cv_, drained_;
  std::deque<std::function<void()>> queue_;
  int limit_ = 2, started_ = 0, idle_ = 0, running_ = 0;
  bool closing_ = false;
};

/// Runs a shell command with its output (stdout and stderr) appended to `log` (dropped where
/// null); returns its exit status, -1 where it could not run or did not exit. posix_spawn, not
/// popen or system: popen keeps its open pipes in a list under a lock that glibc does not reset
/// in a forked child, so a fork while a thread of the parent compiled left the child blocked at
/// its first compile (the compile pool's workers compile while the program goes on).
int runCommand(const std::string& cmd, std::string* log) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;  // other threads' compilers do not inherit it
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  char buf[512];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (log) log->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void writeAtomically(const std::string& path, const std::string& data) {
  std::string tmp = uniqueTemp(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  THUNDER_CHECK(f != nullptr, "fuser: cannot write ", tmp);
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

// ---- CPU: C++ compiled by the system compiler, loaded with dlopen --------------------------

using CpuFn = void (*)(void* const*, void* const*, const int64_t*);

std::atomic<int64_t> gCpuLibraries{0};
/// Outputs of CPU kernels written into a dead input (outputsIntoInputs), in this process.
std::atomic<int64_t> gOutputsIntoInputs{0};

/// A loaded kernel library and its entry point, closed when the last region using it goes.
/// (Each loaded library takes about 5 memory maps: kept forever, a process compiling many
/// distinct kernels reached vm.max_map_count, and then every new thread failed with EAGAIN.)
struct CpuLibrary {
  void* handle = nullptr;
  CpuFn fn = nullptr;
  CpuLibrary(void* h, CpuFn f) : handle(h), fn(f) { ++gCpuLibraries; }
  CpuLibrary(const CpuLibrary&) = delete;
  CpuLibrary& operator=(const CpuLibrary&) = delete;
  ~CpuLibrary() {
    dlclose(handle);
    --gCpuLibraries;
  }
};
using CpuKernel = std::shared_ptr<const CpuLibrary>;

/// The kernels' instruction set: -march=$THUNDER_CPU_MARCH, native where unset (x86-64-v3 builds
/// for AVX2 CPUs on a machine with AVX-512, so that a test runs what those CPUs run). Read once
/// per process.
const std::string& cpuMarch() {
  static const std::string march = [] {
    const char* env = std::getenv("THUNDER_CPU_MARCH");
    return std::string(env && *env ? env : "native");
  }();
  return march;
}

// -ffp-contract=off: no fused multiply-adds the source does not ask for, as eager's CPU kernels
// (a contracted g / b - g * q keeps the rounding error of g * q where eager's gradient of a / a
// is exactly 0: fuzzer seed 11357). -fwrapv: signed integer arithmetic wraps around as eager's
// (undefined in C++ otherwise: GCC folded (a + 1) > a to true at a = INT32_MAX).
// The flags are part of every kernel's cache key (compileCpu).
const std::string& cpuFlags() {
  static const std::string flags = " -O3 -march=" + cpuMarch() +
                                   " -fopenmp -fno-math-errno -fno-trapping-math -ffp-contract=off -fwrapv -std=c++17 -fPIC";
  return flags;
}

/// What the kernels' -march resolves to: the compiler's predefined macros with it (the instruction
/// set extensions such as __AVX512F__, the tuning, the compiler's version), computed once per
/// process; "" where the compiler does not run. Part of every kernel's cache key: -march=native
/// names another instruction set on each machine, and a cache shared between machines (a home
/// directory on NFS, a container image) handed a library built for AVX-512 to a CPU without it.
std::string cpuTarget(const std::string& cxx) {
  static Job<std::string>& target = *new Job<std::string>([cxx]() -> std::string {
    const std::string& march = cpuMarch();
    auto plain = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._+-", c); };
    THUNDER_CHECK_KIND(std::all_of(march.begin(), march.end(), plain), ErrorKind::Value, "THUNDER_CPU_MARCH: '",
                       march, "' is not a value of -march= (letters, digits and . _ + - only)");
    std::string macros;
    if (runCommand(cxx + " -march=" + march + " -dM -E -x c++ /dev/null", &macros) == 0) return macros;
    // A compiler that runs but rejects the value: say so (the kernels would silently not compile).
    THUNDER_CHECK_KIND(runCommand(cxx + " --version", nullptr) != 0, ErrorKind::Value,
                       "THUNDER_CPU_MARCH: the C++ compiler (", cxx, ") rejects -march=", march, ":\n", macros);
    return "";
  });
  return target.get();
}

/// A header of the kernels' standard includes (codegen::kCppIncludes), precompiled once per
/// compiler and flags into the cache (a kernel then parses no system header: its compile takes
/// about a third of the time; the kernel's code is the same). "" where it cannot be built: the
/// kernels then parse their includes themselves.
std::string cpuPrelude(const std::string& cxx, const std::string& dir) {
  // A Job, not a function-local static or call_once: a fork while another thread builds it
  // would leave the child waiting for that thread.
  static Job<std::string>& prelude = *new Job<std::string>([cxx, dir]() -> std::string {
    std::string h = dir + "/prelude-" + hashHex(cxx + cpuFlags() + cpuTarget(cxx) + codegen::kCppIncludes) + ".h";
    try {
      if (!fileExists(h)) writeAtomically(h, codegen::kCppIncludes);
      if (!fileExists(h + ".gch")) {
        std::string tmp = uniqueTemp(h + ".gch");
        std::string cmd = cxx + cpuFlags() + " -x c++-header -o " + tmp + " " + h;
        if (runCommand(cmd, nullptr) != 0) {
          std::remove(tmp.c_str());
          return "";
        }
        std::rename(tmp.c_str(), (h + ".gch").c_str());
      }
      return h;
    } catch (const std::exception&) {
      return "";
    }
  });
  return prelude.get();
}

/// The loaded library of a kernel's source: shared while any region uses it (the in-memory table
/// holds weak pointers), else loaded from the disk cache, else compiled.
CpuKernel compileCpu(const std::string& source, const std::string& entry) {
  std::mutex& mu = ForkSafe::get().libraries;
  static auto& memory = *new std::unordered_map<std::string, std::weak_ptr<const CpuLibrary>>;
  static size_t mark = 64;
  // The compiler, its flags and the instruction set they resolve to are part of the key: a library
  // built with others is not reused.
  const char* cxxEnv = std::getenv("CXX");
  std::string cxx = cxxEnv ? cxxEnv : "c++";
  std::string h = hashHex(cxx + cpuFlags() + cpuTarget(cxx) + "\n" + source);
  auto loaded = [&]() -> CpuKernel {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memory.find(h);
    return it != memory.end() ? it->second.lock() : nullptr;
  };
  if (CpuKernel k = loaded()) return k;
  std::shared_ptr<std::mutex> keyMu = keyMutex(h);
  std::lock_guard<std::mutex> keyLock(*keyMu);
  if (CpuKernel k = loaded()) return k;  // another thread loaded it meanwhile
  std::string dir = cacheDir("cpu");
  std::string so = dir + "/" + h + ".so";
  void* lib = nullptr;
  if (fileExists(so)) {
    // A cached library that does not load (a truncated file from an older version, a full disk)
    // is compiled again rather than failing this kernel forever.
    lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) ++gDiskHits;
    else std::remove(so.c_str());
  }
  if (!lib) {
    std::string src = dir + "/" + h + ".cpp";
    writeAtomically(src, source);
    std::string prelude = cpuPrelude(cxx, dir);
    std::string tmpSo = uniqueTemp(so);
    std::string cmd = cxx + cpuFlags() + (prelude.empty() ? "" : " -include " + prelude) + " -shared -o " +
                      tmpSo + " " + src;
    std::string log;
    int rc = runCommand(cmd, &log);
    if (rc != 0) std::remove(tmpSo.c_str());
    THUNDER_CHECK(rc == 0, "fuser: compiling ", src, " failed:\n", log);
    std::rename(tmpSo.c_str(), so.c_str());
    ++gCompiled;
    lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    THUNDER_CHECK(lib != nullptr, "fuser: could not load ", so, ": ", dlerror());
  }
  auto fn = reinterpret_cast<CpuFn>(dlsym(lib, entry.c_str()));
  if (fn == nullptr) dlclose(lib);
  THUNDER_CHECK(fn != nullptr, "fuser: ", so, " has no entry point ", entry);
  auto k = std::make_shared<const CpuLibrary>(lib, fn);
  std::lock_guard<std::mutex> lock(mu);
  memory[h] = k;
  sweepExpired(memory, mark);
  return k;
}

/// Whether the system C++ compiler builds a kernel: a probe library is compiled with the kernels'
/// flags the first time a process needs one (then loaded from the disk cache on later runs).
/// Without a compiler, CPU regions are left to the other executors.
bool cpuCompiler() {
  // A Job, not a function-local static: a fork while another thread runs the probe would leave
  // the child waiting for that thread.
  static Job<bool>& probe = *new Job<bool>([] {
    const char* cxxEnv = std::getenv("CXX");
    cpuTarget(cxxEnv ? cxxEnv : "c++");  // a THUNDER_CPU_MARCH the compiler rejects raises
    try {
      return compileCpu("extern \"C\" void thunder_probe(void* const*, void* const*, const long*) {}\n",
                        "thunder_probe") != nullptr;
    } catch (const std::exception&) {
      return false;
    }
  });
  return probe.get();
}

// ---- CUDA: NVRTC and the driver API, both loaded at run time --------------------------------

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using nvrtcResult = int;
using nvrtcProgram = void*;

struct Nvrtc {
  void* lib = nullptr;
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*logSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*cubinSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*destroy)(nvrtcProgram*) = nullptr;
};

const Nvrtc* nvrtc() {
  static Nvrtc n = [] {
    Nvrtc r;
    std::vector<std::string> names;
    if (const char* p = std::getenv("THUNDER_NVRTC")) names.push_back(p);
    for (const char* n : {"libnvrtc.so.13", "libnvrtc.so", "libnvrtc.so.12"}) names.push_back(n);
    for (const char* home : {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"})
      if (home) names.push_back(std::string(home) + "/lib64/libnvrtc.so");
    for (const std::string& name : names) {
      size_t slash = name.rfind('/');
      if (slash != std::string::npos) {
        // NVRTC loads its builtins library by name: preload it from the same folder.
        std::string dir = name.substr(0, slash + 1);
        for (const char* b : {"libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.12.9", "libnvrtc-builtins.so"})
          if (dlopen((dir + b).c_str(), RTLD_NOW | RTLD_LOCAL)) break;
      }
      if ((r.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!r.lib) return r;
#define LOAD(field, sym) r.field = reinterpret_cast<decltype(r.field)>(dlsym(r.lib, sym))
    LOAD(create, "nvrtcCreateProgram");
    LOAD(compile, "nvrtcCompileProgram");
    LOAD(logSize, "nvrtcGetProgramLogSize");
    LOAD(log, "nvrtcGetProgramLog");
    LOAD(cubinSize, "nvrtcGetCUBINSize");
    LOAD(cubin, "nvrtcGetCUBIN");
    LOAD(destroy, "nvrtcDestroyProgram");
#undef LOAD
    return r;
  }();
  return n.lib && n.cubin ? &n : nullptr;
}

std::string nvrtcCubin(const std::string& source, const std::string& arch) {
  const Nvrtc* n = nvrtc();
  THUNDER_CHECK_KIND(n != nullptr, ErrorKind::NotImplemented,
                     "fuser: libnvrtc could not be loaded (set THUNDER_NVRTC to its path)");
  nvrtcProgram prog = nullptr;
  THUNDER_CHECK(n->create(&prog, source.c_str(), "thunder_fusion.cu", 0, nullptr, nullptr) == 0,
                "fuser: nvrtcCreateProgram failed");
  std::string archOpt = "--gpu-architecture=" + arch;
  const char* opts[] = {archOpt.c_str(), "-std=c++17"};
  nvrtcResult rc = n->compile(prog, 2, opts);
  size_t logSize = 0;
  n->logSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize) n->log(prog, log.data());
  if (rc != 0) {
    n->destroy(&prog);
    throw Error(ErrorKind::Runtime, "fuser: NVRTC failed to compile a kernel for " + arch + ":\n" + log);
  }
  size_t size = 0;
  n->cubinSize(prog, &size);
  std::string cubin(size, '\0');
  n->cubin(prog, cubin.data());
  n->destroy(&prog);
  return cubin;
}

struct Driver {
  void* lib = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*attr)(int*, int, CUdevice) = nullptr;
  CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*primaryRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*moduleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     CUstream, void**, void**) = nullptr;
  /// cuMemcpyDtoDAsync (optional: cudaCopyAsync reports its absence).
  CUresult (*memcpyDtoDAsync)(unsigned long long, unsigned long long, size_t, CUstream) = nullptr;
  /// cuGraphLaunch (optional: cudaGraphLaunchAsync reports its absence).
  CUresult (*graphLaunch)(void*, CUstream) = nullptr;
};

const Driver& driver() {
  static Driver d = [] {
    Driver r;
    r.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    THUNDER_CHECK(r.lib != nullptr, "fuser: the CUDA driver (libcuda.so.1) could not be loaded");
#define LOAD(field, sym) r.field = reinterpret_cast<decltype(r.field)>(dlsym(r.lib, sym))
    LOAD(init, "cuInit");
    LOAD(deviceGet, "cuDeviceGet");
    LOAD(attr, "cuDeviceGetAttribute");
    LOAD(ctxGetCurrent, "cuCtxGetCurrent");
    LOAD(ctxSetCurrent, "cuCtxSetCurrent");
    LOAD(primaryRetain, "cuDevicePrimaryCtxRetain");
    LOAD(moduleLoadData, "cuModuleLoadData");
    LOAD(moduleGetFunction, "cuModuleGetFunction");
    LOAD(launch, "cuLaunchKernel");
    LOAD(memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    LOAD(graphLaunch, "cuGraphLaunch");
#undef LOAD
    THUNDER_CHECK(r.init && r.deviceGet && r.attr && r.ctxGetCurrent && r.ctxSetCurrent && r.primaryRetain &&
                      r.moduleLoadData && r.moduleGetFunction && r.launch,
                  "fuser: the CUDA driver lacks an entry point thunder needs");
    THUNDER_CHECK(r.init(0) == 0, "fuser: cuInit failed");
    return r;
  }();
  return d;
}

void ensureContext(int device) {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  d.ctxGetCurrent(&ctx);
  if (ctx) return;
  CUdevice dev;
  THUNDER_CHECK(d.deviceGet(&dev, device) == 0, "fuser: cuDeviceGet failed");
  THUNDER_CHECK(d.primaryRetain(&ctx, dev) == 0 && d.ctxSetCurrent(ctx) == 0,
                "fuser: could not make the device's primary context current");
}

struct DeviceInfo {
  std::string arch;
  int sms = 0;
};

DeviceInfo deviceInfo(int device) {
  static std::mutex& mu = *new std::mutex;
  static auto& cache = *new std::unordered_map<int, DeviceInfo>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  const Driver& d = driver();
  CUdevice dev;
  THUNDER_CHECK(d.deviceGet(&dev, device) == 0, "fuser: cuDeviceGet failed");
  int major = 0, minor = 0, sms = 0;
  d.attr(&major, 75, dev);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
  d.attr(&minor, 76, dev);  // ..._MINOR
  d.attr(&sms, 16, dev);    // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  DeviceInfo info{"sm_" + std::to_string(major) + std::to_string(minor), sms};
  cache[device] = info;
  return info;
}

/// Compiles (or loads from the disk cache) and returns the module's functions by name.
CUmodule loadCudaModule(const std::string& source, int device) {
  static std::mutex& mu = *new std::mutex;
  static auto& modules = *new std::unordered_map<std::string, CUmodule>;
  DeviceInfo info = deviceInfo(device);
  std::string key = hashHex(source) + "-" + info.arch + "-" + std::to_string(device);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = modules.find(key);
    if (it != modules.end()) return it->second;
  }
  std::string path = cacheDir("cuda") + "/" + hashHex(source) + "-" + info.arch + ".cubin";
  std::string cubin;
  if (fileExists(path)) {
    FILE* f = std::fopen(path.c_str(), "rb");
    THUNDER_CHECK(f != nullptr, "fuser: cannot read ", path);
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) cubin.append(buf, n);
    std::fclose(f);
    ++gDiskHits;
  } else {
    cubin = nvrtcCubin(source, info.arch);
    writeAtomically(path, cubin);
    ++gCompiled;
  }
  ensureContext(device);
  CUmodule mod = nullptr;
  THUNDER_CHECK(driver().moduleLoadData(&mod, cubin.data()) == 0, "fuser: cuModuleLoadData failed");
  std::lock_guard<std::mutex> lock(mu);
  modules[key] = mod;
  return mod;
}

/// A kernel of thunder's own (not a fusion: the cross-entropy and max-pooling kernels) by a short
/// key naming its variant: its source made, compiled and loaded once per device, then found
/// without building and hashing the source again at each call.
CUfunction ownKernel(const std::string& key, int device, const std::function<std::string()>& source,
                     const char* entry) {
  static std::mutex& mu = *new std::mutex;
  static auto& functions = *new std::map<std::pair<std::string, int>, CUfunction>;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = functions.find({key, device});
    if (it != functions.end()) return it->second;
  }
  CUmodule mod = loadCudaModule(source(), device);
  ensureContext(device);
  CUfunction fn = nullptr;
  THUNDER_CHECK(driver().moduleGetFunction(&fn, mod, entry) == 0, "no CUDA kernel ", entry, " (", key, ")");
  std::lock_guard<std::mutex> lock(mu);
  functions[{key, device}] = fn;
  return fn;
}

// ---- compiled regions -----------------------------------------------------------------------

/// A CUDA kernel shared by the regions whose programs differ only in names (the fusions of a
/// model's repeated layers): compiled once, named after the first region that needed it.
struct SharedModule {
  std::string entry;  // the kernel's name in the module
  std::shared_ptr<Job<CUmodule>> job;
};

/// The module of the variant `v` whose source is `src` (emitted for a program named `name`) on
/// `device`, compiled (on the compile pool) by the first region of the same program but for its
/// name and tensor names: a 12-layer transformer's first call compiled each of its layers'
/// kernels twelve times.
SharedModule sharedModule(const std::string& name, const codegen::CudaVariant& v, const std::string& src, int device) {
  static std::mutex& mu = *new std::mutex;
  static auto& shared = *new std::unordered_map<std::string, SharedModule>;
  std::string key = hashHex(codegen::anonymousSource(src, name)) + "-" + std::to_string(device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = shared.find(key);
  if (it != shared.end()) return it->second;
  SharedModule m{v.entry(name), CompilePool::get().submit<CUmodule>([src, device] { return loadCudaModule(src, device); })};
  shared.emplace(key, m);
  return m;
}

struct CudaLaunch;

/// One region: its program, the argument each kernel input reads, and its compiled code.
struct CompiledRegion {
  KernelProgram prog;
  Device device;
  std::vector<int> argOf;  // kernel input -> call argument
  std::vector<int> intoArg;  // output -> the call argument it is scattered into (-1: a new tensor)
  bool indexed = false;      // prog.indexed(), asked at every launch
  std::vector<int64_t> magic;  // the iteration sizes' division magic numbers (sizes are fixed)
  std::vector<int64_t> bounds;  // C++: the index ranges' bounds, after the geometry (rangeBounds)
  int vecWidth = 1;            // CUDA: elements per 16-byte access
  std::string cudaSource;      // the predicted variant's source
  std::unordered_map<std::string, SharedModule> modules;  // CUDA: by entry point of this region's name
  std::mutex mu;  // modules
  // inner-stride pattern -> library (under ForkSafe::patterns)
  std::unordered_map<std::string, std::shared_ptr<Job<CpuKernel>>> cpuFns;
  std::shared_ptr<Job<CpuKernel>> contiguousCpu;       // CPU: the '1...' pattern, compiled early
  std::string contiguousPattern;
  // CUDA: whether the program may iterate in its inputs' memory order (permutableIteration),
  // and the region of each order used so far (under mu), keyed by the order.
  bool permutable = false;
  std::map<std::vector<int>, std::shared_ptr<CompiledRegion>> permuted;
  // A permuted region: the order its outputs are stored in (outputs are views of that order).
  std::vector<int> order;
  // CUDA: the plan of the last launch (under mu), reused while the calls' geometry repeats.
  std::shared_ptr<const CudaLaunch> lastLaunch;
};

std::shared_ptr<CompiledRegion> makeRegion(const KernelProgram& prog, Device device, std::vector<int> argOf,
                                           std::vector<int> intoArg);

/// Whether the kernel reads input `in` element for element at the iteration index: not shifted,
/// each iteration dim at the input's own dim (at `order[d]` in a region iterating in that order,
/// whose iteration shape is the input's permuted) with unit coefficient.
bool readsElementForElement(const KernelProgram& p, const codegen::KInput& in, const std::vector<int>& order = {}) {
  const size_t R = p.iterShape.size();
  if (!in.unshifted() || in.dimMap.size() != R || in.tensor->shape.size() != R) return false;
  for (size_t d = 0; d < R; ++d) {
    const int own = order.empty() ? static_cast<int>(d) : order[d];
    if (in.dimMap[d] != own || in.tensor->shape[own] != p.iterShape[d] || (d < in.coef.size() && in.coef[d] != 1))
      return false;
  }
  return true;
}

/// Whether the kernel reads input `in` dim for dim in iteration order (each iteration dim at the
/// input's own dim, unit coefficients), at the iteration shape except along the dims where it is
/// one piece of a cat or a pad's source (shifted, guarded).
bool readsInIterationOrder(const KernelProgram& p, const codegen::KInput& in) {
  const size_t R = p.iterShape.size();
  if (in.dimMap.size() != R || in.tensor->shape.size() != R || in.gathers()) return false;
  for (size_t d = 0; d < R; ++d) {
    if (in.dimMap[d] != static_cast<int>(d) || (d < in.coef.size() && in.coef[d] != 1)) return false;
    const bool piece = in.guarded() && in.guard[d].second - in.guard[d].first == in.tensor->shape[d];
    if (in.tensor->shape[d] != p.iterShape[d] && !piece) return false;
  }
  return true;
}

/// The order (outermost first) to iterate a permutable CUDA program in: its first input read in
/// iteration order (the iteration shape element for element, or a piece of a cat), if that input
/// is dense in another order (a channels-last tensor); empty for the program's own order. Dims of
/// length 1 go first.
std::vector<int> memoryOrder(const CompiledRegion& r, const std::vector<at::Tensor>& ins) {
  const KernelProgram& p = r.prog;
  const int R = static_cast<int>(p.iterShape.size());
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!readsInIterationOrder(p, p.inputs[k])) continue;
    const at::Tensor& x = ins[k];
    if (x.is_contiguous() || !x.is_non_overlapping_and_dense()) return {};
    std::vector<int> order, big;
    for (int d = 0; d < R; ++d) (x.size(d) == 1 ? order : big).push_back(d);
    std::stable_sort(big.begin(), big.end(), [&](int a, int b) { return x.stride(a) > x.stride(b); });
    if (std::is_sorted(big.begin(), big.end())) return {};
    order.insert(order.end(), big.begin(), big.end());
    return order;
  }
  return {};
}

std::vector<int64_t> geometry(const CompiledRegion& r, const std::vector<at::Tensor>& ins,
                              const std::vector<at::Tensor>& outs) {
  const KernelProgram& p = r.prog;
  size_t R = p.iterShape.size(), I = p.inputs.size();
  std::vector<int64_t> g(codegen::Geometry::length(R, I, p.outputs.size(), r.indexed), 0);
  if (r.indexed) {
    for (size_t k = 0; k < I; ++k)
      if (p.inputs[k].gathers()) g[codegen::Geometry::gatherStride(R, I, k)] = ins[k].stride(p.inputs[k].gatherDim);
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const codegen::KOutput& o = p.outputs[j];
      if (!o.scattered()) continue;
      for (size_t d = 0; d < R; ++d)
        if (o.dimMap[d] >= 0) g[codegen::Geometry::outputStride(R, I, j, d)] = outs[j].stride(o.dimMap[d]) * o.coef[d];
      g[codegen::Geometry::outputStride(R, I, j, R)] = outs[j].stride(o.scatterDim);
    }
  }
  int64_t numel = 1;
  for (size_t d = 0; d < R; ++d) {
    g[d] = p.iterShape[d];
    numel *= p.iterShape[d];
  }
  for (size_t k = 0; k < I; ++k)
    for (size_t d = 0; d < R; ++d) {
      int m = p.inputs[k].dimMap[d];
      g[R + k * R + d] = m >= 0 ? ins[k].stride(m) * p.inputs[k].coef[d] : 0;
    }
  int64_t L = R ? p.iterShape[R - 1] : 1;
  g[R + I * R] = numel;
  g[R + I * R + 1] = L;
  g[R + I * R + 2] = L ? numel / L : 0;
  std::copy(r.magic.begin(), r.magic.end(), g.begin() + codegen::Geometry::magic(R, I, 0));
  return g;
}

std::string innerPattern(const CompiledRegion& r, const std::vector<int64_t>& g) {
  const KernelProgram& p = r.prog;
  size_t R = p.iterShape.size(), I = p.inputs.size();
  std::string pat;
  for (size_t k = 0; k < I; ++k) {
    int64_t s = R ? g[R + k * R + R - 1] : 0;
    pat += (R == 0 || p.inputs[k].dimMap[R - 1] < 0 || s == 0) ? '0' : s == 1 ? '1' : 'g';
  }
  return pat;
}

/// THUNDER_DEBUG_FUSION: say why regions are not fused and which kernels compile late.
bool debugFusion() {
  static const bool on = std::getenv("THUNDER_DEBUG_FUSION") != nullptr;
  return on;
}

/// Whether x is dense in `order` (outermost dim first; empty: x's own order), as the outputs of a
/// region iterating in that order are laid out.
bool denseInOrder(const at::Tensor& x, const std::vector<int>& order) {
  if (order.empty()) return x.is_contiguous();
  if (static_cast<int64_t>(order.size()) != x.dim()) return false;
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const int64_t d = order[k];
    if (x.size(d) != 1 && x.stride(d) != expected) return false;
    expected *= x.size(d);
  }
  return true;
}

/// For each output of a pointwise kernel, the call argument it is written into, or -1 for a new
/// tensor: a donated input that nothing else holds (KernelArgs::owned), of the output's shape and
/// dtype, dense in the region's iteration order, and read element for element where the output is
/// written (no broadcast, offset, guard or merged dims). Each element is then read before it is
/// written, by the same loop iteration (CPU) or thread (CUDA), and by no other. Checked before the
/// call's tensors are copied, which would count as other holders; a channels-last input is checked
/// by the permuted region that iterates in its memory order. A view counts when `owned` says its
/// base is held by nothing else: a linear of a 3-D or 4-D input returns a view of addmm's result
/// (ConvNeXt's MLP: the GELU's output and the fc1 output it reads, 147 MiB each, were both alive
/// at the inference peak). Empty (no allocation on the no-donation path of every call) where no
/// output can be.
/// On the CPU a fresh 32 MB tensor's page faults cost more than the GELU kernel of
/// benchmarks/run.py's cpu_mlp that fills it. On CUDA the caching allocator makes a new output
/// cheap; what it saves there is memory: a CNN's fused BatchNorm-ReLU output and the convolution
/// output it reads were both alive at the inference peak (ResNet-50 on the H200: 0.34 GiB, 0.26
/// with this, torch.compile's 0.30). THUNDER_FUSER_CUDA_INPLACE=0 turns it off on CUDA.
std::vector<int> outputsIntoInputs(const CompiledRegion& r, const KernelArgs& a) {
  const KernelProgram& p = r.prog;
  static const bool off = std::getenv("THUNDER_FUSER_NO_INPLACE") != nullptr;  // for A/B timings
  static const bool cuda = [] {
    const char* e = std::getenv("THUNDER_FUSER_CUDA_INPLACE");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  const bool device = r.device.type == DeviceType::CPU || (cuda && r.device.type == DeviceType::CUDA);
  if (off || !device || p.rowKernel() || a.donated == 0) return {};
  std::vector<int> into(p.outputs.size(), -1);
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    const codegen::KInput& in = p.inputs[k];
    const int arg = r.argOf[k];
    if (std::count(r.argOf.begin(), r.argOf.end(), arg) != 1 || !a.owned(arg)) continue;
    const at::Tensor& x = a.t(arg);
    if (!denseInOrder(x, r.order) || x.numel() == 0 || in.guarded() ||
        !readsElementForElement(p, in, r.order) || !x.sizes().equals(in.tensor->shape))
      continue;
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const codegen::KOutput& o = p.outputs[j];
      if (into[j] < 0 && !o.reduced && !o.column && o.tensor->dtype == in.tensor->dtype &&
          o.tensor->shape == in.tensor->shape) {
        into[j] = arg;
        ++gOutputsIntoInputs;
        break;
      }
    }
  }
  return into;
}

/// The partial rows of a launch's column outputs that share an accumulation dtype: one tensor
/// [outputs, slots, L], row k of it for outputs[k].
struct ColumnBlock {
  at::Tensor parts;
  std::vector<size_t> outputs;
};

/// Adds up each block's partial rows into its outputs: one ATen sum per block, and one conversion
/// where its outputs convert alike, not a sum and a conversion per output (a ViT-B/16 training step
/// had 87 column outputs: 174 launches of a few microseconds each). Each output is then a row of
/// its block's [outputs, L] result.
void finishColumnSums(const codegen::KernelProgram& p, const std::map<int64_t, ColumnBlock>& blocks,
                      std::vector<at::Tensor>& outs) {
  for (const auto& [_, b] : blocks) {
    at::Tensor sums = b.parts.sum(1);
    const std::vector<DType>& first = p.outputs[b.outputs.front()].epilogue;
    bool alike = std::all_of(b.outputs.begin(), b.outputs.end(),
                             [&](size_t j) { return p.outputs[j].epilogue == first; });
    if (alike)
      for (DType d : first) sums = sums.to(toScalarType(d));
    for (size_t k = 0; k < b.outputs.size(); ++k) {
      size_t j = b.outputs[k];
      at::Tensor t = sums.select(0, static_cast<int64_t>(k));
      if (!alike)
        for (DType d : p.outputs[j].epilogue) t = t.to(toScalarType(d));
      outs[j] = t.reshape(p.outputs[j].tensor->shape);
    }
  }
}

/// How one launch of a CUDA region runs: the kernel, its grid and block, and the partial rows of
/// its column sums. It depends only on the call's geometry (sizes, strides) and the alignment of
/// its inputs, so a region keeps the last one and reuses it while they repeat (every step of a
/// training loop): choosing a variant, naming it and looking its kernel up cost more host time
/// than the launch.
struct CudaLaunch {
  std::vector<int64_t> key;  // the geometry, then each input's address modulo 16
  CUfunction fn = nullptr;
  std::string entry;
  unsigned grid[2] = {1, 1}, block[2] = {1, 1};
  int64_t slots = 0;          // partial rows per column output (row kernels with column sums)
  bool zeroPartials = false;  // the kernel adds into them with atomics
  std::atomic<void*>* finishStream = nullptr;  // column sums: see finishStreamOf
  // Column sums finished by the kernel itself (finishColumns), THUNDER_FUSER_KERNEL_COLUMN_SUMS=1
  // when the launch was planned. Off by default: on the H200 it took BERT's training step from
  // 20.97 to 20.41 ms (925 launches to 632) but GPT-2's from 26.08 to 27.12 and ViT-B/16's from
  // 21.47 to 22.59 (one run each, eager moving 5% between runs).
  bool kernelFinish = false;
};

/// Column sums: the one stream whose launches of a module's kernel finish the sums in the kernel
/// (the first it launched on). The counters are the module's and allow one launch at a time;
/// launches on other streams (a graph's capture, a user's second stream) leave the partial rows
/// to the host. Modules are shared by regions with the same source (loadCudaModule).
/// kNoStream marks a module no launch has claimed yet (the legacy default stream's handle is
/// null, so null cannot).
char noStream;
void* const kNoStream = &noStream;

std::atomic<void*>* finishStreamOf(CUmodule mod) {
  static std::mutex& mu = *new std::mutex;
  static auto& streams = *new std::unordered_map<CUmodule, std::unique_ptr<std::atomic<void*>>>;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<std::atomic<void*>>& slot = streams[mod];
  if (!slot) slot = std::make_unique<std::atomic<void*>>(kNoStream);
  return slot.get();
}

CudaLaunch planCudaLaunch(CompiledRegion& r, const std::vector<int64_t>& g, const std::vector<void*>& inPtrs,
                          const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs, int device) {
  const KernelProgram& p = r.prog;
  size_t R = p.iterShape.size(), I = p.inputs.size();
  int64_t numel = g[R + I * R];
  CudaLaunch plan;
  int64_t L = g[R + I * R + 1], rows = g[R + I * R + 2];
  // Wide accesses need rows a multiple of VEC long, and every input read with unit stride
  // along the row starting each row (and each group) on a VEC-aligned address.
  int w = r.vecWidth;
  // Knobs for experiments, read once: THUNDER_FUSER_NOVEC (no wide accesses),
  // THUNDER_FUSER_UNROLL (rows per thread of tiled pointwise kernels: 1, 2, 4 or 8),
  // THUNDER_FUSER_64BIT (64-bit pointwise indices), THUNDER_FUSER_ROW_THREADS (block size of
  // long-row kernels), THUNDER_FUSER_ROW_UNCACHED (re-read rows instead of holding them),
  // THUNDER_FUSER_COL_BLOCKS (blocks per SM of column-sum kernels).
  static const bool noVec = std::getenv("THUNDER_FUSER_NOVEC") != nullptr;
  bool vec = !noVec && R > 0 && w > 1 && L % w == 0;
  for (size_t k = 0; k < I && vec; ++k) {
    // A guarded input is read or not per group of VEC columns: its range along the row must
    // start and end on group boundaries.
    const codegen::KInput& in = p.inputs[k];
    if (in.guarded() && (in.guard[R - 1].first % w != 0 || (in.guard[R - 1].second % w != 0 && in.guard[R - 1].second < L)))
      vec = false;
    if (p.inputs[k].dimMap[R - 1] < 0) continue;
    int64_t inner = g[R + k * R + R - 1];
    if (inner != 1) {
      // Pointwise kernels read such inputs element by element; row kernels need all of them.
      if (p.rowKernel()) vec = false;
      continue;
    }
    int bytes = w * dtypeItemSize(p.inputs[k].tensor->dtype);
    vec = reinterpret_cast<uintptr_t>(inPtrs[k]) % bytes == 0;
    if (p.inputs[k].gathers()) vec = vec && ins[k].stride(p.inputs[k].gatherDim) % w == 0;
    for (size_t d = 0; d + 1 < R && vec; ++d) vec = g[R + k * R + d] % w == 0;
  }
  codegen::CudaVariant v;
  v.vec = vec && (p.rowKernel() || !r.indexed) ? w : 1;  // pointwise gathers, scatters: element-wise
  unsigned blockX = 1, blockY = 1, gridX = 1, gridY = 1;
  int sms = deviceInfo(device).sms;
  if (p.rowKernel()) {
    static const int rowThreads = [] {  // experiments: force the block size of long-row kernels
      const char* e = std::getenv("THUNDER_FUSER_ROW_THREADS");
      int t = e ? std::atoi(e) : 0;
      return t >= 32 && t <= 1024 ? t : 0;
    }();
    codegen::RowLaunch l = codegen::chooseRowLaunch(L, v.vec, rowThreads, p.hasColumns(), rows, !r.indexed);
    static const bool uncached = std::getenv("THUNDER_FUSER_ROW_UNCACHED") != nullptr;
    if (uncached && !l.warp) l.items = 0;
    if (l.items == 0 && !(uncached && rowThreads)) l.threads = 1024;
    v.row = true;
    v.items = l.items;
    v.warp = l.warp;
    v.tpr = l.tpr;
    v.threads = l.threads;
    blockX = static_cast<unsigned>(l.threads);
    int64_t rowsPerBlock = l.warp ? l.threads / l.tpr : 1;
    gridX = static_cast<unsigned>(std::min<int64_t>((rows + rowsPerBlock - 1) / rowsPerBlock, 1 << 20));
    if (p.hasColumns()) {
      // About one wave of blocks, each summing its rows' columns into one partial row per slot.
      static const int colBlocks = [] {  // experiments: blocks per SM of column-sum kernels
        const char* e = std::getenv("THUNDER_FUSER_COL_BLOCKS");
        return e ? std::atoi(e) : 0;
      }();
      int perSm = colBlocks > 0 ? colBlocks : std::max(1, 2048 / l.threads);
      gridX = static_cast<unsigned>(std::min<int64_t>(gridX, int64_t(sms) * perSm));
      plan.slots = l.items == 0 ? 1 : codegen::columnsPerBlock(p, v) ? int64_t(gridX) : int64_t(gridX) * rowsPerBlock;
      plan.zeroPartials = l.items == 0;
    }
  } else {
    // 32-bit index arithmetic when every offset fits.
    static const bool wide = std::getenv("THUNDER_FUSER_64BIT") != nullptr;
    static const int unroll = [] {
      const char* e = std::getenv("THUNDER_FUSER_UNROLL");
      int u = e ? std::atoi(e) : 0;
      return u == 1 || u == 2 || u == 4 || u == 8 ? u : 0;
    }();
    bool fits = !wide && numel < (int64_t(1) << 31);
    for (size_t k = 0; k < I && fits; ++k) {
      int64_t extent = 1;
      for (size_t d = 0; d < R; ++d) extent += (p.iterShape[d] - 1) * std::abs(g[R + k * R + d]);
      fits = extent < (int64_t(1) << 31);
    }
    // Gathered inputs and scattered buffers are read and written anywhere in them.
    auto within = [](const at::Tensor& t) {
      int64_t extent = 1;
      for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * std::abs(t.stride(d));
      return extent < (int64_t(1) << 31);
    };
    for (size_t k = 0; k < I && fits; ++k)
      if (p.inputs[k].gathers()) fits = within(ins[k]);
    for (size_t j = 0; j < p.outputs.size() && fits; ++j)
      if (p.outputs[j].scattered()) fits = within(outs[j]);
    v.idx32 = fits;
    if (unroll) v.unroll = unroll;
    codegen::fitSmallLaunch(v, numel, sms, unroll != 0);
    if (v.vec > 1) {
      // Tiles of TX column groups by TY rows, ROWS rows per thread (see emitCuda).
      v.pattern = innerPattern(r, g);
      static const int64_t staged = [] {  // experiments: the staged-bytes budget
        const char* e = std::getenv("THUNDER_FUSER_STAGED_BYTES");
        return e ? std::atoll(e) : codegen::kStagedBytes;
      }();
      if (!unroll) codegen::fitRegisters(p, v, staged);
      int64_t groups = L / v.vec, rowsPerBlock;
      blockX = static_cast<unsigned>(std::min<int64_t>(256, codegen::pow2ceil(groups)));
      blockY = 256 / blockX;
      rowsPerBlock = int64_t(blockY) * v.unroll;
      gridX = static_cast<unsigned>((groups + blockX - 1) / blockX);
      gridY = static_cast<unsigned>(std::min<int64_t>((rows + rowsPerBlock - 1) / rowsPerBlock, 65535));
    } else {
      blockX = 256;
      // One block per 256 elements: the hardware scheduler balances the blocks, so the
      // last wave is short.
      gridX = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((numel + blockX - 1) / blockX, int64_t(1) << 30)));
    }
  }
  std::string entry = v.entry(p.name);
  SharedModule module;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.modules.find(entry);
    if (it == r.modules.end()) {
      if (debugFusion()) {
        std::string had;
        for (const auto& [name, m] : r.modules) had += (had.empty() ? "" : ", ") + name;
        std::fprintf(stderr, "fuser: %s compiles variant %s at its first call (not predicted; has %s)\n",
                     p.name.c_str(), entry.c_str(), had.c_str());
      }
      it = r.modules.emplace(entry, sharedModule(p.name, v, codegen::emitCuda(p, v), device)).first;
    }
    module = it->second;
  }
  CUmodule mod = module.job->get();
  THUNDER_CHECK(driver().moduleGetFunction(&plan.fn, mod, module.entry.c_str()) == 0, "fuser: no kernel ", module.entry);
  if (p.hasColumns()) {
    plan.finishStream = finishStreamOf(mod);
    const char* e = std::getenv("THUNDER_FUSER_KERNEL_COLUMN_SUMS");
    plan.kernelFinish = e != nullptr && std::strcmp(e, "1") == 0;
  }
  plan.entry = entry;
  plan.grid[0] = gridX;
  plan.grid[1] = gridY;
  plan.block[0] = blockX;
  plan.block[1] = blockY;
  return plan;
}

c10::IValue runRegion(CompiledRegion& r, KernelArgs& a) {
  const KernelProgram& p = r.prog;
  const std::vector<int> into = outputsIntoInputs(r, a);
  std::vector<at::Tensor> ins;
  for (int arg : r.argOf) ins.push_back(a.t(arg));
  if (r.permutable) {
    std::vector<int> order = memoryOrder(r, ins);
    if (!order.empty()) {
      std::shared_ptr<CompiledRegion> variant;
      {
        std::lock_guard<std::mutex> lock(r.mu);
        std::shared_ptr<CompiledRegion>& v = r.permuted[order];
        if (!v) {
          if (debugFusion())
            std::fprintf(stderr, "fuser: %s compiles an iteration in its inputs' memory order at its first call\n",
                         p.name.c_str());
          v = makeRegion(codegen::permuteIteration(p, order), r.device, r.argOf, r.intoArg);
          v->order = order;
        }
        variant = v;
      }
      // The variant decides its own outputs into inputs: these copies would count as holders.
      ins.clear();
      return runRegion(*variant, a);
    }
  }
  // The kernel reads each input as the trace typed it: a tensor of another dtype or shape (an
  // op whose meta function disagrees with the kernel that made it) would be read out of bounds.
  for (size_t k = 0; k < ins.size(); ++k) {
    const TensorProxy& t = *p.inputs[k].tensor;
    THUNDER_INTERNAL(ins[k].scalar_type() == toScalarType(t.dtype) && ins[k].sizes().equals(t.shape),
                     p.name, ": input ", t.name, " is ", c10::toString(ins[k].scalar_type()),
                     c10::str(ins[k].sizes()), " at run time, the trace says ", t.typeString());
  }
  at::Device dev = ins.empty() ? a.outDevice : ins[0].device();
  for (const auto& in : ins)
    if (in.dim() > 0 || !in.device().is_cpu()) dev = in.device();
  std::vector<at::Tensor> outs;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const codegen::KOutput& o = p.outputs[j];
    if (o.scattered()) {
      // Stored into the buffer, in place, which the call returns.
      const at::Tensor& buf = a.t(r.intoArg[j]);
      THUNDER_INTERNAL(buf.scalar_type() == toScalarType(o.into->dtype) && buf.sizes().equals(o.into->shape) &&
                           buf.device() == dev,
                       p.name, ": buffer ", o.into->name, " is ", c10::toString(buf.scalar_type()), c10::str(buf.sizes()),
                       " at run time, the trace says ", o.into->typeString());
      outs.push_back(buf);
      continue;
    }
    bool reuse = !into.empty() && into[j] >= 0;
    if (reuse) {
      outs.push_back(a.t(into[j]));  // (dense in the region's order: laid out as a new output)
      continue;
    }
    if (!r.order.empty() && !o.column && !o.reduced) {
      // Stored in iteration order: the tensor is that order's contiguous buffer, seen in the
      // trace's dim order.
      std::vector<int64_t> shape, back(r.order.size());
      for (size_t k = 0; k < r.order.size(); ++k) {
        shape.push_back(o.tensor->shape[r.order[k]]);
        back[r.order[k]] = static_cast<int64_t>(k);
      }
      outs.push_back(newOutputTensor(shape, toScalarType(o.tensor->dtype), dev).permute(back));
      continue;
    }
    outs.push_back(newOutputTensor(o.tensor->shape, toScalarType(o.tensor->dtype), dev));
  }
  std::vector<int64_t> g = geometry(r, ins, outs);
  size_t R = p.iterShape.size(), I = p.inputs.size();
  int64_t numel = g[R + I * R];
  if (numel > 0) {
    std::vector<void*> inPtrs, outPtrs;
    for (size_t k = 0; k < ins.size(); ++k) {
      // An input read at an offset (a slice, a cat's piece) starts there; a guarded one may start
      // outside the tensor, where it is never read.
      int64_t off = 0;
      const codegen::KInput& in = p.inputs[k];
      for (size_t j = 0; j < in.offset.size(); ++j) off += in.offset[j] * ins[k].stride(j);
      inPtrs.push_back(static_cast<char*>(ins[k].data_ptr()) + off * static_cast<int64_t>(ins[k].element_size()));
    }
    for (auto& t : outs) outPtrs.push_back(t.data_ptr());
    if (r.device.type == DeviceType::CPU) {
      std::string pat = innerPattern(r, g);
      CpuFn fn = nullptr;
      if (pat == r.contiguousPattern) {
        fn = r.contiguousCpu->get()->fn;
      } else {
        // Compiled outside the lock (a Job per pattern): other patterns' calls do not wait for
        // it, and a fork while it compiles leaves no held lock in the child.
        std::shared_ptr<Job<CpuKernel>> job;
        {
          std::lock_guard<std::mutex> lock(ForkSafe::get().patterns);
          auto it = r.cpuFns.find(pat);
          if (it != r.cpuFns.end()) job = it->second;
        }
        if (!job) {
          if (debugFusion())
            std::fprintf(stderr, "fuser: %s compiles inner-stride pattern %s at its first call (predicted %s)\n",
                         p.name.c_str(), pat.c_str(), r.contiguousPattern.c_str());
          std::string src = codegen::anonymousSource(codegen::emitCpp(p, pat), p.name);
          auto made = std::make_shared<Job<CpuKernel>>([src] { return compileCpu(src, codegen::kAnonymousEntry); });
          std::lock_guard<std::mutex> lock(ForkSafe::get().patterns);
          job = r.cpuFns.emplace(pat, made).first->second;  // another thread's, if it came first
        }
        fn = job->get()->fn;
      }
      g.insert(g.end(), r.bounds.begin(), r.bounds.end());
      fn(inPtrs.data(), outPtrs.data(), g.data());
    } else {
      int device = dev.index();
      ensureContext(device);
      std::vector<int64_t> key = g;
      for (void* ptr : inPtrs) key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(ptr) % 16));
      key.push_back(device);
      // Gathers and scatters also read the extents of their tensors: planned at every call.
      static const bool noCache = std::getenv("THUNDER_FUSER_NO_LAUNCH_CACHE") != nullptr;  // for A/B timings
      const bool cached = !r.indexed && !noCache;
      std::shared_ptr<const CudaLaunch> plan;
      if (cached) {
        std::lock_guard<std::mutex> lock(r.mu);
        if (r.lastLaunch && r.lastLaunch->key == key) plan = r.lastLaunch;
      }
      if (!plan) {
        auto made = std::make_shared<CudaLaunch>(planCudaLaunch(r, g, inPtrs, ins, outs, device));
        made->key = std::move(key);
        plan = made;
        if (cached) {
          std::lock_guard<std::mutex> lock(r.mu);
          r.lastLaunch = plan;
        }
      }
      void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
      // Column outputs: the kernel's partial sums per row slot, added up by ATen after it or,
      // where the plan says so (kernelFinish), by the kernel itself (finishColumns) unless it
      // cannot (atomics into one zeroed row, a grid beyond its counters, a second stream).
      int finish = 0;
      std::map<int64_t, ColumnBlock> columnBlocks;  // (held until the launch is queued)
      std::vector<void*> finPtrs;
      if (plan->slots > 0) {
        if (plan->kernelFinish && !plan->zeroPartials && plan->grid[0] <= codegen::kColumnFinishBlocks) {
          void* first = kNoStream;
          plan->finishStream->compare_exchange_strong(first, stream);
          finish = plan->finishStream->load() == stream;
        }
        int64_t L = g[R + I * R + 1];
        // The partial rows of all column outputs of one accumulation dtype lie in one tensor
        // [outputs, slots, L]: one ATen sum adds them all up after the launch.
        // THUNDER_FUSER_COLUMNS_APART=1: a tensor (a sum, a conversion) per output (A/B timings).
        static const bool apart = std::getenv("THUNDER_FUSER_COLUMNS_APART") != nullptr;
        std::vector<std::pair<int64_t, int64_t>> rowOf(p.outputs.size());  // output -> (block, row)
        for (size_t j = 0; j < p.outputs.size(); ++j) {
          if (!p.outputs[j].column) continue;
          int64_t key = apart ? int64_t(j) : -1 - int64_t(p.outputs[j].accDtype);
          std::vector<size_t>& members = columnBlocks[key].outputs;
          rowOf[j] = {key, static_cast<int64_t>(members.size())};
          members.push_back(j);
        }
        for (auto& [_, b] : columnBlocks) {
          auto opts = at::TensorOptions().dtype(toScalarType(p.outputs[b.outputs.front()].accDtype)).device(dev);
          int64_t n = static_cast<int64_t>(b.outputs.size());
          b.parts = plan->zeroPartials ? at::zeros({n, plan->slots, L}, opts) : at::empty({n, plan->slots, L}, opts);
        }
        for (size_t j = 0; j < p.outputs.size(); ++j) {
          const codegen::KOutput& o = p.outputs[j];
          if (!o.column) continue;
          at::Tensor part = columnBlocks[rowOf[j].first].parts.select(0, rowOf[j].second);
          outPtrs[j] = part.data_ptr();
          if (finish) {
            outs[j] = newOutputTensor(o.tensor->shape, toScalarType(o.tensor->dtype), dev);
            THUNDER_INTERNAL(outs[j].numel() == L, p.name, ": column output ", o.tensor->name, " has ", outs[j].numel(),
                             " elements for rows of ", L);
            finPtrs.push_back(outs[j].data_ptr());
          } else {
            finPtrs.push_back(nullptr);
          }
        }
      }
      std::vector<void*> params;
      for (auto& ptr : inPtrs) params.push_back(&ptr);
      for (auto& ptr : outPtrs) params.push_back(&ptr);
      params.push_back(g.data());
      if (p.hasColumns()) {
        THUNDER_INTERNAL(plan->slots > 0, p.name, ": a kernel with column sums planned without partial rows");
        for (auto& ptr : finPtrs) params.push_back(&ptr);
        params.push_back(&finish);
      }
      THUNDER_CHECK(driver().launch(plan->fn, plan->grid[0], plan->grid[1], 1, plan->block[0], plan->block[1], 1, 0, stream,
                                    params.data(), nullptr) == 0,
                    "fuser: launching ", plan->entry, " failed");
      if (!finish) finishColumnSums(p, columnBlocks, outs);
    }
  } else {
    for (size_t j = 0; j < p.outputs.size(); ++j)
      if (p.outputs[j].column) outs[j].zero_();  // a sum over no rows
  }
  std::vector<c10::IValue> elems(outs.begin(), outs.end());
  return c10::ivalue::Tuple::create(std::move(elems));
}

/// The live regions by symbol (for isFusion and fusionSource): a region leaves with its symbol.
std::mutex gSourcesMu;
std::unordered_map<const Symbol*, std::shared_ptr<CompiledRegion>> gRegions;

std::shared_ptr<CompiledRegion> makeRegion(const KernelProgram& prog, Device device, std::vector<int> argOf,
                                           std::vector<int> intoArg) {
  auto r = std::make_shared<CompiledRegion>();
  r->prog = prog;
  r->device = device;
  r->argOf = std::move(argOf);
  r->intoArg = std::move(intoArg);
  for (int64_t size : prog.iterShape) {
    int64_t magic, shift;
    codegen::divisionMagic(std::max<int64_t>(1, std::min<int64_t>(size, int64_t(1) << 31)), magic, shift);
    r->magic.push_back(magic);
    r->magic.push_back(shift);
  }
  r->vecWidth = codegen::cudaVecWidth(prog);
  r->indexed = prog.indexed();
  if (device.type == DeviceType::CUDA) {
    // The variant predicted from the traced shapes compiles on the compile pool, so a cold start
    // compiles many kernels at once; other variants compile when a call first needs them.
    // (Two where the trace's activations are channels-last and that changes the variant.)
    for (const codegen::CudaVariant& v : codegen::predictCudaVariants(prog, deviceInfo(device.index).sms)) {
      std::string src = codegen::emitCuda(prog, v);
      if (r->cudaSource.empty()) r->cudaSource = src;
      r->modules[v.entry(prog.name)] = sharedModule(prog.name, v, src, device.index);
    }
  } else {
    r->contiguousPattern = codegen::contiguousPattern(prog);
    r->bounds = codegen::rangeBounds(prog);
    // Compiled as code of no program: the regions of a model's repeated layers share one library
    // (compileCpu's key is the source), in memory and in the disk cache.
    std::string src = codegen::anonymousSource(codegen::emitCpp(prog, r->contiguousPattern), prog.name);
    r->contiguousCpu = CompilePool::get().submit<CpuKernel>([src] { return compileCpu(src, codegen::kAnonymousEntry); });
  }
  return r;
}

std::shared_ptr<const Symbol> compileRegion(const KernelProgram& prog, Device device, const std::vector<TensorPtr>& inputs,
                            const std::string& executor) {
  std::vector<int> argOf, intoArg;
  for (const codegen::KInput& in : prog.inputs) {
    int idx = -1;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == in.tensor) idx = static_cast<int>(i);
    THUNDER_INTERNAL(idx >= 0, "fuser: kernel input ", in.tensor->name, " is not an argument of the fusion");
    argOf.push_back(idx);
  }
  for (const codegen::KOutput& o : prog.outputs) {
    int idx = -1;
    for (size_t i = 0; o.scattered() && i < inputs.size(); ++i)
      if (inputs[i] == o.into) idx = static_cast<int>(i);
    THUNDER_INTERNAL(!o.scattered() || idx >= 0, "fuser: buffer ", o.into ? o.into->name : "", " is not an argument of the fusion");
    intoArg.push_back(idx);
  }
  if (device.type == DeviceType::CUDA && !nvrtc()) return nullptr;  // no NVRTC: left to the other executors
  if (device.type != DeviceType::CUDA && !cpuCompiler()) return nullptr;  // no C++ compiler: likewise
  const bool permutable = device.type == DeviceType::CUDA && codegen::permutableIteration(prog);
  const bool twin = permutable && prog.iterShape.size() == 4 &&
                    std::find(prog.iterShape.begin(), prog.iterShape.end(), 1) == prog.iterShape.end();
  // A region with a channels-last twin (below) runs the twin on channels-last inputs: its own
  // channels-last variant would never run.
  KernelProgram base = prog;
  if (twin) base.channelsLastHint = false;
  std::shared_ptr<CompiledRegion> r = makeRegion(base, device, std::move(argOf), std::move(intoArg));
  r->order = prog.order;  // (a permuted column sum's region: its outputs are views of that order)
  r->permutable = permutable;
  if (twin) {
    // Channels-last (what half-type convolutions produce): compiled ahead on the pool as well,
    // or a CNN's first call compiles each such kernel on its critical path (ResNet-50: 11 s).
    const std::vector<int> nhwc = {0, 2, 3, 1};
    std::shared_ptr<CompiledRegion> v = makeRegion(codegen::permuteIteration(prog, nhwc), device, r->argOf, r->intoArg);
    v->order = nhwc;
    r->permuted[nhwc] = v;
  }
  std::shared_ptr<const Symbol> sym = makeOwnedExecSymbol(executor, prog.name, [](const Symbol* s) {
    std::shared_ptr<CompiledRegion> region;  // released outside the lock
    std::lock_guard<std::mutex> lock(gSourcesMu);
    auto it = gRegions.find(s);
    if (it == gRegions.end()) return;
    region = std::move(it->second);
    gRegions.erase(it);
  });
  setKernel(sym.get(), [r](KernelArgs& a) { return runRegion(*r, a); });
  std::lock_guard<std::mutex> lock(gSourcesMu);
  gRegions[sym.get()] = r;
  return sym;
}

}  // namespace

void registerFusionExecutor() {
  static std::once_flag once;
  std::call_once(once, [] {
    ExecutorRegistry::get().add(std::make_shared<FusionExecutor>("fuser", compileRegion, true));
    ExecutorRegistry::get().add(std::make_shared<FusionExecutor>("cudafuser", compileRegion, false));
  });
}

bool isFusion(const Symbol* sym) {
  std::lock_guard<std::mutex> lock(gSourcesMu);
  return gRegions.count(sym) > 0;
}

std::string fusionSource(const Symbol* fusion) {
  std::lock_guard<std::mutex> lock(gSourcesMu);
  auto it = gRegions.find(fusion);
  THUNDER_CHECK_KIND(it != gRegions.end(), ErrorKind::Value, fusion->name, " is not a fusion");
  const CompiledRegion& r = *it->second;
  return r.device.type == DeviceType::CUDA ? r.cudaSource : codegen::emitCpp(r.prog, r.contiguousPattern);
}

size_t nvrtcCompile(const std::string& source, const std::string& arch) { return nvrtcCubin(source, arch).size(); }

bool nvrtcAvailable() { return nvrtc() != nullptr; }

bool cudaCopyAsync(void* dst, const void* src, size_t bytes, int device) {
  const Driver& d = driver();
  if (d.memcpyDtoDAsync == nullptr) return false;
  ensureContext(device);
  c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
  return d.memcpyDtoDAsync(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes,
                           stream) == 0;
}

bool cudaGraphLaunchAsync(uintptr_t exec, int device) {
  const Driver& d = driver();
  if (d.graphLaunch == nullptr || exec == 0) return false;
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  if (impl->getDevice().index() != device) return false;
  c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  return d.graphLaunch(reinterpret_cast<void*>(exec), impl->getStream(dev).native_handle()) == 0;
}

bool cpuCompilerAvailable() { return cpuCompiler(); }

std::string cpuCompileFlags() { return cpuFlags().substr(1); }

FusionStats fusionStats() {
  FusionStats s{gCompiled.load(), gDiskHits.load()};
  s.cpuLibraries = gCpuLibraries.load();
  s.outputsIntoInputs = gOutputsIntoInputs.load();
  {
    std::lock_guard<std::mutex> lock(gSourcesMu);
    s.regions = static_cast<int64_t>(gRegions.size());
  }
  s.kernels = static_cast<int64_t>(kernelCount());
  return s;
}

// ---- max pooling without indices (CUDA) -------------------------------------------------------

std::string maxPool2dCudaSource(DType dtype) {
  // One thread per output element, in the output's memory order (channels fastest for a
  // channels-last output: a warp reads 32 neighbouring channels). A NaN in the window wins, as in
  // ATen's kernels; the output is an element of the window, bit for bit (no conversion back).
  std::string storage, toFloat, negInf;
  switch (dtype) {
    case DType::Float32:
      storage = "float", toFloat = "v", negInf = "__int_as_float(0xff800000)";
      break;
    case DType::BFloat16:
      storage = "unsigned short", toFloat = "__uint_as_float((unsigned)v << 16)", negInf = "(unsigned short)0xff80";
      break;
    case DType::Float16:
      storage = "unsigned short", negInf = "(unsigned short)0xfc00";
      toFloat = "thunder_h2f(v)";
      break;
    default:
      THUNDER_INTERNAL(false, "max_pool2d: no CUDA kernel for ", dtypeName(dtype));
  }
  std::string s = "// thunder max_pool2d without indices (CUDA), " + std::string(dtypeName(dtype)) + "\n";
  s += "typedef " + storage + " T;\n";
  s += R"(__device__ __forceinline__ float thunder_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
struct Params {
  long long v[19];
};
template <typename I>
__device__ __forceinline__ void thunder_max_pool2d(const T* __restrict__ x, T* __restrict__ y, const long long* p) {
  const I N = (I)p[0], C = (I)p[1], H = (I)p[2], W = (I)p[3], Ho = (I)p[4], Wo = (I)p[5];
  const I sN = (I)p[6], sC = (I)p[7], sH = (I)p[8], sW = (I)p[9];
  const int kh = (int)p[10], kw = (int)p[11], sh = (int)p[12], sw = (int)p[13], ph = (int)p[14], pw = (int)p[15],
            dh = (int)p[16], dw = (int)p[17];
  const bool cl = p[18] != 0;
  const I total = N * C * Ho * Wo;
  for (I idx = (I)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (I)gridDim.x * blockDim.x) {
    I t = idx, n, c, ho, wo;
    if (cl) {
      c = t % C; t /= C; wo = t % Wo; t /= Wo; ho = t % Ho; n = t / Ho;
    } else {
      wo = t % Wo; t /= Wo; ho = t % Ho; t /= Ho; c = t % C; n = t / C;
    }
    const T* base = x + n * sN + c * sC;
    const int h0 = (int)ho * sh - ph, w0 = (int)wo * sw - pw;
    float m = __int_as_float(0xff800000);
    T best = )" + negInf + R"(;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      if (h < 0 || h >= (int)H) continue;
      for (int j = 0; j < kw; ++j) {
        const int w = w0 + j * dw;
        if (w < 0 || w >= (int)W) continue;
        const T v = base[(I)h * sH + (I)w * sW];
        const float f = )" + toFloat + R"(;
        if (f > m || f != f) {
          m = f;
          best = v;
        }
      }
    }
    y[idx] = best;
  }
}
extern "C" __global__ void __launch_bounds__(256) thunder_max_pool2d_i32(const T* x, T* y, const Params p) {
  thunder_max_pool2d<unsigned>(x, y, p.v);
}
extern "C" __global__ void __launch_bounds__(256) thunder_max_pool2d_i64(const T* x, T* y, const Params p) {
  thunder_max_pool2d<long long>(x, y, p.v);
}
)";
  return s;
}

namespace {

/// ATen's pooling output length (pooling_output_shape): -1 where it has none.
int64_t poolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  if (num < 0 || stride <= 0) return -1;
  int64_t out = num / stride + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

std::optional<at::Tensor> maxPool2dCuda(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef strideIn,
                                        at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil) {
  static const bool off = std::getenv("THUNDER_ATEN_MAX_POOL") != nullptr;  // for A/B timings
  auto two = [](at::IntArrayRef v, int64_t dflt) -> std::optional<std::pair<int64_t, int64_t>> {
    if (v.empty()) return std::make_pair(dflt, dflt);
    if (v.size() == 1) return std::make_pair(v[0], v[0]);
    if (v.size() == 2) return std::make_pair(v[0], v[1]);
    return std::nullopt;
  };
  auto k = two(kernel, 0), p = two(padding, 0), d = two(dilation, 1);
  if (off || !x.is_cuda() || x.dim() != 4 || !k || !p || !d) return std::nullopt;
  auto st = strideIn.empty() ? k : two(strideIn, 0);
  at::ScalarType dt = x.scalar_type();
  if (!st || (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf)) return std::nullopt;
  // ATen's own checks (and messages) for anything unusual.
  if (k->first <= 0 || k->second <= 0 || st->first <= 0 || st->second <= 0 || d->first <= 0 || d->second <= 0 ||
      p->first < 0 || p->second < 0 || p->first > k->first / 2 || p->second > k->second / 2)
    return std::nullopt;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Ho = poolOutputSize(H, k->first, p->first, st->first, d->first, ceil);
  const int64_t Wo = poolOutputSize(W, k->second, p->second, st->second, d->second, ceil);
  if (Ho <= 0 || Wo <= 0 || H <= 0 || W <= 0 || H >= (1 << 30) || W >= (1 << 30)) return std::nullopt;
  // The output in the input's memory format, as ATen's.
  const bool cl = x.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  at::Tensor y = at::empty({N, C, Ho, Wo}, x.options().memory_format(cl ? at::MemoryFormat::ChannelsLast
                                                                         : at::MemoryFormat::Contiguous));
  const int64_t total = y.numel();
  if (total == 0) return y;
  int64_t extent = 1;
  for (int64_t i = 0; i < 4; ++i) extent += (x.size(i) - 1) * std::abs(x.stride(i));
  const bool i32 = total < (int64_t(1) << 31) && extent < (int64_t(1) << 31);
  const int device = x.get_device();
  const DType dtype = fromScalarType(dt);
  const char* entry = i32 ? "thunder_max_pool2d_i32" : "thunder_max_pool2d_i64";
  CUfunction fn = ownKernel(std::string(entry) + ":" + std::string(dtypeName(dtype)), device, [&] { return maxPool2dCudaSource(dtype); },
                            entry);
  ensureContext(device);
  // The sizes, strides and window, by value (the kernel's Params).
  std::vector<int64_t> host = {N, C, H, W, Ho, Wo, x.stride(0), x.stride(1), x.stride(2), x.stride(3),
                               k->first, k->second, st->first, st->second, p->first, p->second, d->first, d->second,
                               cl ? 1 : 0};
  void* px = x.data_ptr();
  void* py = y.data_ptr();
  void* args[] = {&px, &py, host.data()};
  const int sms = deviceInfo(device).sms;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, int64_t(sms) * 16));
  c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
  THUNDER_CHECK(driver().launch(fn, grid, 1, 1, 256, 1, 1, 0, stream, args, nullptr) == 0,
                "max_pool2d: launching ", entry, " failed");
  return y;
}

// ---- the apex executor's cross-entropy kernels (executors/cross_entropy.h) -------------------

namespace {

/// Launches one of the cross-entropy kernels: one block per row, on the tensors' current stream.
void launchXent(const char* entry, const at::Tensor& logits, const at::Tensor& labels,
                void** params, const at::Tensor* out = nullptr) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  if (rows == 0) return;
  const int block = xent::blockSize(classes);
  const DType dt = fromScalarType(logits.scalar_type());
  // 16-byte loads and stores when every row starts 16-byte aligned.
  const int vw = xent::vectorWidth(dt);
  auto aligned = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  const int vec = logits.stride(0) % vw == 0 && aligned(logits) && (!out || (out->stride(0) % vw == 0 && aligned(*out)))
                      ? vw
                      : 1;
  const DType labelsType = fromScalarType(labels.scalar_type());
  const int device = logits.get_device();
  const std::string key = std::string(entry) + ":" + std::string(dtypeName(dt)) + ":" +
                          std::string(dtypeName(labelsType)) + ":" + std::to_string(block) + ":" + std::to_string(vec);
  CUfunction fn = ownKernel(key, device, [&] { return xent::cudaSource(dt, labelsType, block, vec); }, entry);
  // The backward may run on an autograd thread with no current context (a cached kernel is not
  // loaded again, so ownKernel does not set one).
  ensureContext(device);
  c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  void* stream =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle();
  THUNDER_CHECK(rows < (int64_t(1) << 31), "apex_cross_entropy: ", rows,
                " rows are more than one launch holds");
  THUNDER_CHECK(driver().launch(fn, static_cast<unsigned>(rows), 1, 1, static_cast<unsigned>(block),
                                1, 1, 0, stream, params, nullptr) == 0,
                "apex_cross_entropy: launching ", entry, " failed");
}

/// The logits as the kernels read them: rows of contiguous classes, each `stride(0)` apart (a
/// padded matmul's rows are wider than its classes); other layouts are copied.
at::Tensor rowsOf(const at::Tensor& logits) {
  if (logits.size(1) <= 1 || (logits.stride(1) == 1 && logits.stride(0) >= logits.size(1))) return logits;
  return logits.contiguous();
}

void checkXentArgs(const char* op, const at::Tensor& logits, const at::Tensor& labels) {
  THUNDER_CHECK(logits.is_cuda() && labels.is_cuda() && logits.get_device() == labels.get_device(),
                op, ": expected logits and labels on one CUDA device, but got ",
                logits.device().str(), " and ", labels.device().str());
  THUNDER_CHECK(logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == logits.size(0), op,
                ": expected logits [rows, classes] and labels [rows], but got ",
                c10::str(logits.sizes()), " and ", c10::str(labels.sizes()));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> crossEntropyForward(const at::Tensor& logitsIn,
                                                       const at::Tensor& labelsIn,
                                                       const std::string& reduction,
                                                       double smoothing, int64_t ignoreIndex) {
  checkXentArgs("apex_cross_entropy", logitsIn, labelsIn);
  THUNDER_CHECK_KIND(
      reduction == "none" || reduction == "mean" || reduction == "sum", ErrorKind::Value,
      "apex_cross_entropy: reduction must be 'none', 'mean' or 'sum', but got '", reduction, "'");
  at::Tensor logits = rowsOf(logitsIn), labels = labelsIn.contiguous();
  const int64_t rows = logits.size(0);
  at::Tensor loss = at::empty({rows}, logits.options().dtype(at::kFloat));
  at::Tensor mlse = at::empty({rows}, logits.options().dtype(at::kFloat));
  void* pLogits = logits.data_ptr();
  void* pLabels = labels.data_ptr();
  void* pLoss = loss.data_ptr();
  void* pMlse = mlse.data_ptr();
  long long classes = logits.size(1), stride = logits.stride(0), ii = ignoreIndex;
  float s = static_cast<float>(smoothing);
  void* params[] = {&pLogits, &pLabels, &pLoss, &pMlse, &classes, &stride, &s, &ii};
  launchXent("thunder_xent_fwd", logits, labels, params);
  at::Tensor out;
  if (reduction == "none") {
    out = loss;
  } else if (reduction == "sum") {
    out = loss.sum();
  } else {
    // The mean over the rows that count (ignored rows add 0 to the sum); NaN when none does.
    at::Tensor counted = labels.ge(0).logical_and(labels.ne(ignoreIndex)).sum().to(at::kFloat);
    out = loss.sum().div(counted);
  }
  return {out, mlse};
}

at::Tensor crossEntropyBackward(const at::Tensor& gradIn, const at::Tensor& logitsIn,
                                const at::Tensor& labelsIn, const at::Tensor& mlseIn,
                                double smoothing, bool inPlace) {
  checkXentArgs("apex_cross_entropy_backward", logitsIn, labelsIn);
  const int64_t rows = logitsIn.size(0);
  THUNDER_CHECK(gradIn.numel() == rows && mlseIn.numel() == rows,
                "apex_cross_entropy_backward: expected grad and max_log_sum_exp of ", rows,
                " elements, but got ", c10::str(gradIn.sizes()), " and ", c10::str(mlseIn.sizes()));
  at::Tensor logits = rowsOf(logitsIn), labels = labelsIn.contiguous();
  at::Tensor grad = gradIn.to(at::kFloat).contiguous(), mlse = mlseIn.to(at::kFloat).contiguous();
  at::Tensor out = inPlace && logitsIn.is_contiguous() ? logits
                                                       : at::empty_like(logits, at::MemoryFormat::Contiguous);
  void* pGrad = grad.data_ptr();
  void* pLogits = logits.data_ptr();
  void* pLabels = labels.data_ptr();
  void* pMlse = mlse.data_ptr();
  void* pOut = out.data_ptr();
  long long classes = logits.size(1), stride = logits.stride(0), outStride = out.stride(0);
  float s = static_cast<float>(smoothing);
  void* params[] = {&pGrad, &pLogits, &pLabels, &pMlse, &pOut, &classes, &stride, &outStride, &s};
  launchXent("thunder_xent_bwd", logits, labels, params, &out);
  return out;
}

}  // namespace thunder::runtime
