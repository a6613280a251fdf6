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
    // As torch.device: the index is all decimal digits ("cuda:1abc" and "cuda:-1" are invalid).
    std::string digits = s.substr(5);
    bool valid = !digits.empty() && digits.size() <= 9 &&
                 digits.find_first_not_of("0123456789") == std::string::npos;
    if (valid) return {DeviceType::CUDA, std::stoi(digits)};
  }
  throw Error(ErrorKind::Value, "unknown device string '" + s + "'");
}

}  // namespace thunder
