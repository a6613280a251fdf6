#include "transforms/live_bytes.h"

#include <unordered_map>

#include "ir/error.h"
#include "transforms/remat.h"

namespace thunder {
namespace {

/// One storage: its bytes, whether it counts, and how many live tensors share it.
struct Storage {
  int64_t bytes = 0;
  bool counted = true;
  int users = 0;
};

}  // namespace

LiveBytes liveBytes(const Trace& trace, const std::string& producedBy) {
  std::vector<Storage> storages;
  std::unordered_map<const TensorProxy*, size_t> storageOf;
  int64_t live = 0;
  auto addUser = [&](const TensorProxy* t, size_t s) {
    if (!storageOf.emplace(t, s).second) return;
    if (storages[s].users++ == 0 && storages[s].counted) live += storages[s].bytes;
  };
  auto newStorage = [&](const TensorPtr& t, bool counted) {
    storages.push_back({tensorBytes(*t), counted, 0});
    addUser(t.get(), storages.size() - 1);
  };
  auto release = [&](const TensorProxy* t) {
    auto it = storageOf.find(t);
    if (it == storageOf.end()) return;
    Storage& s = storages[it->second];
    storageOf.erase(it);
    if (--s.users == 0 && s.counted) live -= s.bytes;
  };

  // Outputs nothing reads (a multi-output call's "_", freed as the call returns) die at once.
  std::unordered_map<const TensorProxy*, bool> read;
  for (const BoundSymbol& b : trace.bsyms)
    if (!b.sym->hasTag(kDel))
      for (const TensorPtr& t : b.inputTensors()) read[t.get()] = true;
  std::vector<TensorPtr> results;
  trace.output.collectTensors(results);
  for (const TensorPtr& t : results) read[t.get()] = true;

  for (const TensorPtr& t : trace.inputs) newStorage(t, producedBy.empty());
  std::vector<const TensorProxy*> unread;
  LiveBytes out;
  out.peak = live;
  out.after.reserve(trace.bsyms.size());
  for (const BoundSymbol& b : trace.bsyms) {
    if (b.sym->hasTag(kDel)) {
      for (const TensorPtr& t : b.inputTensors()) release(t.get());
    } else {
      std::vector<TensorPtr> ins = b.inputTensors();
      bool view = b.sym->hasTag(kShapeOp) && !ins.empty() && storageOf.count(ins.front().get());
      bool counted = producedBy.empty() || b.sym->name == producedBy;
      for (const TensorPtr& t : b.outputTensors()) {
        if (storageOf.count(t.get())) continue;  // an input returned as is
        if (view)
          addUser(t.get(), storageOf.at(ins.front().get()));
        else
          newStorage(t, counted);
        if (!read.count(t.get())) unread.push_back(t.get());
      }
    }
    THUNDER_INTERNAL(live >= 0, "live_bytes: negative live bytes after ", b.sym->name);
    if (live > out.peak) {
      out.peak = live;
      out.peakIndex = out.after.size();
    }
    for (const TensorProxy* t : unread) release(t);
    unread.clear();
    out.after.push_back(live);
  }
  return out;
}

}  // namespace thunder
