#include "ir/device.h"

#include "ir/error.h"

namespace thunder {

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda:" + std::to_string(index);
    case DeviceType::Meta:
      return "meta";
  }
  return "?";
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return {DeviceType::CPU, 0};
  if (s == "meta") return {DeviceType::Meta, 0};
  if (s == "cuda") return {DeviceType::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return {DeviceType::CUDA, std::stoi(s.substr(5))};
    } catch (const std::exception&) {
    }
  }
  throw Error(ErrorKind::Value, "unknown device string '" + s + "'");
}

}  // namespace thunder
