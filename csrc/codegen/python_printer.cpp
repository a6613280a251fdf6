#include "codegen/python_printer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "ir/error.h"

namespace thunder {

std::string pythonFloatRepr(double d) {
  if (std::isnan(d)) return "float('nan')";
  if (std::isinf(d)) return d > 0 ? "float('inf')" : "-float('inf')";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci is "[-]D[.DDD]e[+-]XX": split into sign, digits and exponent.
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant = mant.substr(1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp >= -4 && exp < 16) {
    // Positional notation, as Python's repr: at least one digit after the point.
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    }
    return sign + out;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  char expbuf[16];
  std::snprintf(expbuf, sizeof(expbuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + m + expbuf;
}

namespace {

/// A single-quoted Python string literal; control characters are escaped as repr() does.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    switch (c) {
      case '\'': out += "\\'"; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "'";
}

std::string printSeq(const std::vector<Value>& items, PrintStyle style, const char* open,
                     const char* close, bool trailingCommaForOne) {
  std::string s = open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += printValue(items[i], style);
  }
  if (trailingCommaForOne && items.size() == 1) s += ",";
  return s + close;
}

}  // namespace

std::string printValue(const Value& v, PrintStyle style) {
  switch (v.kind()) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.toBool() ? "True" : "False";
    case Value::Kind::Int: return v.symExpr() ? v.symExpr()->str() : std::to_string(v.toInt());
    case Value::Kind::Float: return pythonFloatRepr(v.toDouble());
    case Value::Kind::Complex: {
      auto c = v.toComplex();
      return "complex(" + pythonFloatRepr(c.real()) + ", " + pythonFloatRepr(c.imag()) + ")";
    }
    case Value::Kind::String: return quote(v.toString());
    case Value::Kind::DType:
      return style == PrintStyle::Torch ? "torch." + std::string(dtypeTorchName(v.toDType()))
                                        : "dtypes." + std::string(dtypeName(v.toDType()));
    case Value::Kind::Device:
      return (style == PrintStyle::Torch ? "torch.device(\"" : "devices.Device(\"") +
             v.toDevice().str() + "\")";
    case Value::Kind::Tensor: return v.tensor().name;
    case Value::Kind::Tuple: return printSeq(v.items(), style, "(", ")", true);
    case Value::Kind::List: return printSeq(v.items(), style, "[", "]", false);
    case Value::Kind::Slice: return printSeq(v.items(), style, "slice(", ")", false);
    case Value::Kind::Ellipsis: return "...";
    case Value::Kind::Dict: {
      std::string s = "{";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) s += ", ";
        s += quote(v.keys()[i]) + ": " + printValue(v.items()[i], style);
      }
      return s + "}";
    }
  }
  return "?";
}

std::string printCall(const BoundSymbol& b) {
  const Symbol& sym = *b.sym;
  std::string s = sym.printName() + "(";
  bool first = true;
  for (size_t i = 0; i < b.args.size(); ++i) {
    if (!first) s += ", ";
    first = false;
    const Param* p = i < sym.params.size() ? &sym.params[i] : nullptr;
    if (p && p->kwOnly) s += p->name + "=";
    s += printValue(b.args[i], sym.style);
  }
  return s + ")";
}

namespace {

/// The left-hand side of a statement: "t0", "(t0, _)", or empty when there is no output. Tensors
/// of a multi-output call named in `unused` print as "_".
std::string printTargets(const Value& out, const std::set<std::string>* unused = nullptr) {
  switch (out.kind()) {
    case Value::Kind::None: return "";
    case Value::Kind::Tuple:
    case Value::Kind::List: {
      std::string s = out.isTuple() ? "(" : "[";
      for (size_t i = 0; i < out.items().size(); ++i) {
        if (i) s += ", ";
        const Value& item = out.items()[i];
        bool dropped = item.isTensor() && unused && unused->count(item.tensor().name);
        s += !dropped && (item.isTensor() || item.isSequence()) ? printTargets(item, unused) : "_";
      }
      if (out.isTuple() && out.items().size() == 1) s += ",";
      return s + (out.isTuple() ? ")" : "]");
    }
    case Value::Kind::Tensor: return out.tensor().name;
    default: return "_";
  }
}

std::string typeComment(const Value& out) {
  if (!out.isTensor()) return "";
  return "  # " + out.tensor().name + ": \"" + out.tensor().typeString() + "\"";
}

/// A call with several tensor outputs comments each output it names (not those printed as "_")
/// where nothing else describes them: a prim (sort, topk) or a call without subsymbols (an
/// executor's operator registered with a meta function: apex_cross_entropy, cudnn_sdpa_fwd).
/// A decomposed call (multimul, a fusion) leaves that to its subsymbols' comments, as seed 001
/// prints it.
std::string typeComment(const BoundSymbol& b, const std::set<std::string>* unused) {
  bool prim = b.sym->module == "prims" || b.sym->module == "torchex";
  if (!b.output.isSequence() || (!prim && !b.subsymbols.empty())) return typeComment(b.output);
  std::string s;
  for (const Value& v : b.output.items())
    if (!(v.isTensor() && unused && unused->count(v.tensor().name))) s += typeComment(v);
  return s;
}

void printStatement(const BoundSymbol& b, const std::string& indent, bool commented,
                    std::string& out, const std::set<std::string>* unused = nullptr) {
  std::string line = indent + (commented ? "# " : "");
  if (b.sym->hasTag(kDel)) {
    line += "del ";
    std::vector<TensorPtr> ts = b.inputTensors();
    for (size_t i = 0; i < ts.size(); ++i) line += (i ? ", " : "") + ts[i]->name;
    out += line + "\n";
    return;
  }
  std::string targets = printTargets(b.output, unused);
  if (!targets.empty()) line += targets + " = ";
  line += printCall(b) + typeComment(b, unused);
  out += line + "\n";
  for (const BoundSymbol& sub : b.subsymbols) printStatement(sub, indent + "  ", true, out);
}

void collectImports(const BoundSymbol& b, std::set<std::string>& imports) {
  const std::string& m = b.sym->module;
  if (b.sym->bareName || b.sym->hasTag(kDel)) return;
  if (m == "ltorch") imports.insert("import thunder.torch as ltorch");
  if (m == "prims") imports.insert("import thunder.core.prims as prims");
  if (m == "Tensor") imports.insert("from torch import Tensor");
  if (m == "torchex") imports.insert("from thunder.executors import torchex");
  if (m == "sdpaex") imports.insert("from thunder.executors import sdpaex");
  if (b.sym->style == PrintStyle::Thunder) {
    std::vector<const Value*> stack;
    for (const Value& a : b.args) stack.push_back(&a);
    while (!stack.empty()) {
      const Value* v = stack.back();
      stack.pop_back();
      if (v->isDType()) imports.insert("import thunder.core.dtypes as dtypes");
      if (v->isDevice()) imports.insert("import thunder.core.devices as devices");
      if (v->isSequence() || v->isDict())
        for (const Value& item : v->items()) stack.push_back(&item);
    }
  }
}

void collectTensorNames(const Value& v, std::set<std::string>& names) {
  if (v.isTensor()) names.insert(v.tensor().name);
  if (v.isSequence() || v.isDict())
    for (const Value& item : v.items()) collectTensorNames(item, names);
}

}  // namespace

std::string printTrace(const Trace& trace) {
  std::string out;
  if (!trace.provenance.empty()) out += "# " + trace.provenance + "\n";
  std::set<std::string> imports;
  for (const BoundSymbol& b : trace.bsyms) collectImports(b, imports);
  // `from torch import Tensor` first, as the seeds print it; then torch, then thunder's modules.
  if (imports.count("from torch import Tensor")) out += "from torch import Tensor\n";
  out += "import torch\n";
  for (const std::string& imp : imports)
    if (imp.rfind("import thunder", 0) == 0) out += imp + "\n";
  if (imports.count("from thunder.executors import sdpaex"))
    out += "from thunder.executors import sdpaex\n";
  if (imports.count("from thunder.executors import torchex"))
    out += "from thunder.executors import torchex\n";
  out += "from thunder.executors.torchex import no_autocast\n\n";
  if (trace.isExecution) out += "@torch.no_grad()\n@no_autocast\n";
  out += "def " + trace.fnName + "(";
  for (size_t i = 0; i < trace.inputs.size(); ++i)
    out += (i ? ", " : "") + trace.inputs[i]->name;
  out += "):\n";
  for (const TensorPtr& t : trace.inputs)
    out += "  # " + t->name + ": \"" + t->typeString() + "\"\n";
  // The size symbols, read from the inputs, and what the trace assumes of them.
  for (size_t k = 0; k < trace.symbols.size(); ++k) {
    const SizeSymbol& s = trace.symbols[k];
    if (s.input < 0)
      out += "  # s" + std::to_string(k) + ": a size of the forward's call (" + std::to_string(s.hint) + " when traced)\n";
    else
      out += "  s" + std::to_string(k) + " = " + trace.inputs.at(s.input)->name + ".shape[" + std::to_string(s.dim) +
             "]  # " + std::to_string(s.hint) + " when traced\n";
  }
  for (const SymGuard& g : trace.guards) out += "  # guard: " + g.str() + "\n";
  // In an execution trace, outputs of multi-output calls that nothing reads print as "_":
  // `(t18, _) = apex_cross_entropy(...)`, as the seeds show.
  std::set<std::string> unused;
  if (trace.isExecution) {
    std::set<std::string> read;
    collectTensorNames(trace.output, read);
    for (const BoundSymbol& b : trace.bsyms)
      if (!b.sym->hasTag(kDel))
        for (const Value& a : b.args) collectTensorNames(a, read);
    for (const BoundSymbol& b : trace.bsyms)
      if (b.output.isSequence())
        for (const Value& item : b.output.items())
          if (item.isTensor() && !read.count(item.tensor().name)) unused.insert(item.tensor().name);
  }
  for (const BoundSymbol& b : trace.bsyms) printStatement(b, "  ", false, out, &unused);
  out += "  return " + printValue(trace.output, PrintStyle::Thunder) + "\n";
  return out;
}

}  // namespace thunder
