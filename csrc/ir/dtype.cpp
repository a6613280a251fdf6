#include "ir/dtype.h"

#include <array>

#include "ir/error.h"

namespace thunder {
namespace {

struct DTypeInfo {
  std::string_view name, shortName, torchName;
  int itemSize;
  DTypeKind kind;
};

constexpr DTypeKind kindOf(char k) {
  return k == 'B' ? DTypeKind::Bool
         : k == 'I' ? DTypeKind::Integer
         : k == 'F' ? DTypeKind::Float
                    : DTypeKind::Complex;
}

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
#define X(E, N, S, T, SZ, K) {#N, #S, #T, SZ, kindOf(#K[0])},
#include "ir/dtypes.def"
#undef X
}};

const DTypeInfo& info(DType d) { return kInfo[static_cast<size_t>(d)]; }

}  // namespace

std::string_view dtypeName(DType d) { return info(d).name; }
std::string_view dtypeShortName(DType d) { return info(d).shortName; }
std::string_view dtypeTorchName(DType d) { return info(d).torchName; }
int dtypeItemSize(DType d) { return info(d).itemSize; }
DTypeKind dtypeKind(DType d) { return info(d).kind; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (kInfo[i].name == name || kInfo[i].torchName == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

DType complexToReal(DType d) {
  if (d == DType::Complex64) return DType::Float32;
  if (d == DType::Complex128) return DType::Float64;
  return d;
}

DType realToComplex(DType d) {
  if (d == DType::Float64) return DType::Complex128;
  if (isComplex(d)) return d;
  return DType::Complex64;
}

}  // namespace thunder
