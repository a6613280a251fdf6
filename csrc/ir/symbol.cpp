#include "ir/symbol.h"

#include <algorithm>

#include "ir/error.h"

namespace thunder {

std::vector<Value> Symbol::bind(std::vector<Value> args,
                                const std::vector<std::pair<std::string, Value>>& kwargs) const {
  std::vector<Value> out(params.size());
  std::vector<bool> filled(params.size(), false);
  size_t nextArg = 0;
  for (size_t i = 0; i < params.size() && nextArg < args.size(); ++i) {
    const Param& p = params[i];
    if (p.kwOnly) break;
    if (p.varargs) {
      // x.view(2, 3) and x.view((2, 3)) both bind shape=(2, 3).
      size_t rest = args.size() - nextArg;
      if (rest == 1 && (args[nextArg].isSequence() || args[nextArg].isNone())) {
        out[i] = args[nextArg++];
      } else {
        std::vector<Value> packed(args.begin() + nextArg, args.end());
        out[i] = Value::tuple(std::move(packed));
        nextArg = args.size();
      }
    } else {
      out[i] = std::move(args[nextArg++]);
    }
    filled[i] = true;
  }
  if (nextArg != args.size()) {
    // Python's wording: "f() takes 2 positional arguments but 3 were given",
    // "f() takes from 1 to 3 positional arguments but 4 were given".
    size_t most = 0, required = 0;
    for (const Param& p : params) {
      if (p.kwOnly) continue;
      ++most;
      if (!p.hasDefault) ++required;
    }
    std::string takes = required == most ? std::to_string(most)
                                         : str("from ", required, " to ", most);
    throw Error(ErrorKind::Type, str(id(), "() takes ", takes, " positional argument",
                                     most == 1 ? "" : "s", " but ", args.size(),
                                     args.size() == 1 ? " was" : " were", " given"));
  }
  for (const auto& [key, v] : kwargs) {
    auto it = std::find_if(params.begin(), params.end(),
                           [&](const Param& p) { return p.name == key; });
    THUNDER_CHECK_KIND(it != params.end(), ErrorKind::Type, id(),
                       "() got an unexpected keyword argument '", key, "'");
    size_t i = it - params.begin();
    THUNDER_CHECK_KIND(!filled[i], ErrorKind::Type, id(), "() got multiple values for argument '",
                       key, "'");
    out[i] = v;
    filled[i] = true;
  }
  std::vector<std::string> missingPositional, missingKeyword;
  for (size_t i = 0; i < params.size(); ++i) {
    if (filled[i]) continue;
    if (params[i].hasDefault) {
      out[i] = params[i].defaultValue;
      continue;
    }
    (params[i].kwOnly ? missingKeyword : missingPositional).push_back("'" + params[i].name + "'");
  }
  // Python's wording: "f() missing 2 required positional arguments: 'a' and 'b'"; keyword-only
  // arguments are reported once no positional one is missing.
  bool positional = !missingPositional.empty();
  const std::vector<std::string>& missing = positional ? missingPositional : missingKeyword;
  if (!missing.empty()) {
    std::string names;
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i) names += missing.size() == 2 ? " and " : (i + 1 == missing.size() ? ", and " : ", ");
      names += missing[i];
    }
    throw Error(ErrorKind::Type,
                str(id(), "() missing ", missing.size(), " required ",
                    positional ? "positional" : "keyword-only", " argument",
                    missing.size() == 1 ? "" : "s", ": ", names));
  }
  return out;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Value parseDefault(const std::string& text) {
  if (text == "None") return Value();
  if (text == "True") return Value(true);
  if (text == "False") return Value(false);
  if (text == "()") return Value::tuple({});
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"'))
    return Value(text.substr(1, text.size() - 2));
  if (text.find_first_of(".eE") != std::string::npos && text.find("inf") == std::string::npos)
    return Value(std::stod(text));
  return Value(static_cast<int64_t>(std::stoll(text)));
}

}  // namespace

std::vector<Param> parseSignature(const std::string& sig) {
  std::vector<Param> params;
  bool kwOnly = false;
  size_t pos = 0;
  while (pos <= sig.size()) {
    size_t comma = sig.find(',', pos);
    if (comma == std::string::npos) comma = sig.size();
    std::string part = trim(sig.substr(pos, comma - pos));
    pos = comma + 1;
    if (part.empty() || part == "/") continue;
    if (part == "*") {
      kwOnly = true;
      continue;
    }
    Param p;
    p.kwOnly = kwOnly;
    size_t eq = part.find('=');
    std::string name = trim(part.substr(0, eq));
    if (!name.empty() && name[0] == '*') {
      p.varargs = true;
      name = name.substr(1);
      // As in Python, the parameters after `*name` can only be passed by keyword.
      kwOnly = true;
    }
    p.name = name;
    if (eq != std::string::npos) {
      p.hasDefault = true;
      p.defaultValue = parseDefault(trim(part.substr(eq + 1)));
    }
    params.push_back(std::move(p));
  }
  return params;
}

SymbolRegistry& SymbolRegistry::get() {
  static SymbolRegistry registry;
  return registry;
}

Symbol* SymbolRegistry::add(std::unique_ptr<Symbol> s) {
  THUNDER_CHECK_KIND(find(s->id()) == nullptr, ErrorKind::Value, "a symbol named '", s->id(),
                     "' is already registered");
  symbols_.push_back(std::move(s));
  Symbol* added = symbols_.back().get();
  byId_[added->id()] = added;
  return added;
}

Symbol* SymbolRegistry::put(std::unique_ptr<Symbol> s) {
  if (Symbol* existing = find(s->id())) {
    // Keep the old object alive: traces made earlier still point at it.
    *existing = std::move(*s);
    return existing;
  }
  return add(std::move(s));
}

Symbol* SymbolRegistry::find(const std::string& id) const {
  auto it = byId_.find(id);
  return it == byId_.end() ? nullptr : it->second;
}

Symbol& SymbolRegistry::at(const std::string& id) const {
  Symbol* s = find(id);
  THUNDER_INTERNAL(s != nullptr, "no symbol '", id, "'");
  return *s;
}

std::vector<Symbol*> SymbolRegistry::inModule(const std::string& module) const {
  std::vector<Symbol*> out;
  for (const auto& s : symbols_)
    if (s->module == module) out.push_back(s.get());
  return out;
}

}  // namespace thunder
