// Devices a tensor can live on.
#pragma once

#include <cstdint>
#include <string>

namespace thunder {

/// Kind of device.
enum class DeviceType : uint8_t { CPU, CUDA, Meta };

/// A device: its type and, for CUDA, its index.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu", "cuda:0", "meta".
  std::string str() const;
  /// Parses "cpu", "cuda", "cuda:1", "meta"; throws a user error otherwise.
  static Device parse(const std::string& s);
};

}  // namespace thunder
