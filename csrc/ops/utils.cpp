#include "ops/utils.h"

namespace thunder {

std::string shapeStr(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  if (s.size() == 1) out += ",";
  return out + ")";
}

int64_t canonicalizeDim(int64_t ndim, int64_t dim, const std::string& op) {
  int64_t n = ndim == 0 ? 1 : ndim;
  THUNDER_CHECK_KIND(dim >= -n && dim < n, ErrorKind::Index, op,
                     ": dimension out of range (expected to be in range of [", -n, ", ", n - 1,
                     "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> canonicalizeDims(int64_t ndim, const std::vector<int64_t>& dims,
                                      const std::string& op) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t c = canonicalizeDim(ndim, d, op);
    for (int64_t prev : out)
      THUNDER_CHECK(prev != c, op, ": dimension ", d, " appears more than once in the dims list");
    out.push_back(c);
  }
  return out;
}

const TensorProxy& expectTensor(const Value& v, const std::string& op, const std::string& arg) {
  THUNDER_CHECK_KIND(v.isTensor(), ErrorKind::Type, op, ": expected argument '", arg,
                     "' to be a tensor, but got ", describe(v));
  return v.tensor();
}

Device commonDevice(const std::vector<Value>& vs, const std::string& op) {
  const TensorProxy* first = nullptr;
  for (const Value& v : vs) {
    if (!v.isTensor()) continue;
    if (!first) {
      first = &v.tensor();
      continue;
    }
    // 0-dim CPU tensors may mix with tensors on another device, as in PyTorch.
    const TensorProxy& t = v.tensor();
    if (t.device != first->device) {
      bool scalarCpu = (t.ndim() == 0 && t.device.type == DeviceType::CPU) ||
                       (first->ndim() == 0 && first->device.type == DeviceType::CPU);
      THUNDER_CHECK(scalarCpu, op, ": expected all tensors on one device, but found ",
                    first->name, " on ", first->device.str(), " and ", t.name, " on ",
                    t.device.str());
      if (first->ndim() == 0 && first->device.type == DeviceType::CPU) first = &t;
    }
  }
  return first ? first->device : Device{};
}

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

void checkValidShape(const Shape& s, const std::string& op) {
  for (int64_t x : s)
    THUNDER_CHECK(x >= 0, op, ": invalid shape ", shapeStr(s), ", sizes must be non-negative");
}

}  // namespace thunder
