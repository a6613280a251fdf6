// Helpers shared by meta functions and decompositions: argument checks with messages that name
// the op, the argument and the shapes; dimension canonicalization; shape printing.
#pragma once

#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/value.h"

namespace thunder {

/// "(2, 3)".
std::string shapeStr(const Shape& s);
/// Wraps a possibly negative dim into [0, ndim); a 0-dim tensor accepts -1 and 0.
/// IndexError: "op: dimension out of range (expected to be in range of [-2, 1], but got 2)".
int64_t canonicalizeDim(int64_t ndim, int64_t dim, const std::string& op);
std::vector<int64_t> canonicalizeDims(int64_t ndim, const std::vector<int64_t>& dims,
                                      const std::string& op);
/// The tensor in `v`, or a TypeError naming op and argument.
const TensorProxy& expectTensor(const Value& v, const std::string& op, const std::string& arg);
/// Checks that all tensors among `vs` are on one device; returns it.
Device commonDevice(const std::vector<Value>& vs, const std::string& op);
/// Product of a shape.
int64_t numelOf(const Shape& s);
/// Checks every size is >= 0.
void checkValidShape(const Shape& s, const std::string& op);

}  // namespace thunder
