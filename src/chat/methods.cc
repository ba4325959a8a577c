// Python methods templates call on values: str (strip, split, startswith, replace, ...),
// dict (get, items, keys, values) and list/tuple (index, count). Mutating methods are refused,
// as transformers' immutable sandbox refuses them.
#include <algorithm>
#include <string_view>

#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

constexpr std::string_view kStrMethods[] = {
    "strip",     "lstrip",     "rstrip",     "upper",      "lower",      "title",   "capitalize", "swapcase",
    "startswith", "endswith",  "split",      "rsplit",     "splitlines", "replace", "find",       "rfind",
    "index",     "rindex",     "count",      "join",       "isdigit",    "isalpha", "isalnum",    "isspace",
    "islower",   "isupper",    "isnumeric",  "isdecimal",  "zfill",      "center",  "ljust",      "rjust",
    "partition", "rpartition", "removeprefix", "removesuffix"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"index", "count"};
constexpr std::string_view kListMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
constexpr std::string_view kDictMutators[] = {"update", "pop", "popitem", "setdefault", "clear"};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

bool AllOf(std::string_view s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : DecodeUtf8(s))
    if (!pred(c)) return false;
  return true;
}
bool IsDigitCp(char32_t c) { return c >= '0' && c <= '9'; }
// ASCII letters and cased letters elsewhere (uncased scripts' letters are missed).
bool IsAlphaCp(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  std::string one;
  AppendUtf8(c, &one);
  return PyUpper(one) != one || PyLower(one) != one;
}
bool IsAlnumCp(char32_t c) { return IsDigitCp(c) || IsAlphaCp(c); }

// A (sub)string argument, or an error naming the method.
StatusOr<std::string> StrArg(Renderer& r, const std::string& method, const Value& v) {
  if (!v.is_string()) return r.Fail(method + "() argument must be str, not " + TypeName(v));
  return v.str();
}

// Code point index of `sub` in `s` (first or last), or -1.
int64_t FindCp(const std::string& s, const std::string& sub, bool last) {
  const size_t at = last ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, at)));
}

StatusOr<Value> StartsEnds(Renderer& r, const std::string& s, const std::string& name, const std::vector<Value>& a) {
  std::vector<Value> candidates;
  if (a[0].is_list() && a[0].list().is_tuple) {
    candidates = a[0].list().items;
  } else {
    candidates.push_back(a[0]);
  }
  std::string text = s;
  if (!a[1].is_undefined() || !a[2].is_undefined()) {
    Value sliced;
    CHAT_ASSIGN_OR_RETURN(sliced, SliceValue(r, Value::Str(s), a[1], a[2], Value()));
    text = sliced.str();
  }
  for (const Value& c : candidates) {
    std::string p;
    CHAT_ASSIGN_OR_RETURN(p, StrArg(r, name, c));
    const bool hit = name == "startswith" ? text.compare(0, p.size(), p) == 0
                                          : text.size() >= p.size() && text.compare(text.size() - p.size(), p.size(), p) == 0;
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

StatusOr<Value> Pad(Renderer& r, const std::string& s, const std::string& name, const std::vector<Value>& a) {
  if (!a[0].is_integral()) return r.Fail(name + "() needs an int width");
  const auto width = static_cast<int64_t>(std::min<int64_t>(a[0].i(), 1 << 24));
  std::string fill = " ";
  if (!a[1].is_undefined()) {
    if (!a[1].is_string() || CodePointCount(a[1].str()) != 1) return r.Fail(name + "() fill must be one character");
    fill = a[1].str();
  }
  const auto len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return Value::Str(s);
  TESSERA_RETURN_IF_ERROR(r.ChargeText(static_cast<size_t>(width) * fill.size()));
  auto rep = [&fill](int64_t n) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += fill;
    return out;
  };
  const int64_t total = width - len;
  if (name == "ljust") return Value::Str(s + rep(total));
  if (name == "rjust") return Value::Str(rep(total) + s);
  const int64_t left = total / 2 + (total & width & 1);  // CPython's centering
  return Value::Str(rep(left) + s + rep(total - left));
}

StatusOr<Value> Splitting(Renderer& r, const std::string& s, const std::string& name, const std::vector<Value>& a) {
  if (name == "splitlines") {
    std::vector<Value> lines;
    const std::vector<char32_t> cps = DecodeUtf8(s);
    size_t start = 0;
    for (size_t k = 0; k < cps.size(); ++k) {
      const char32_t c = cps[k];
      const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                      c == 0x2028 || c == 0x2029;
      if (!br) continue;
      size_t end = k + 1;
      if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') end = k + 2;
      lines.push_back(Value::Str(EncodeUtf8(cps, start, Truthy(a[0]) ? end : k)));
      start = end;
      k = end - 1;
    }
    if (start < cps.size()) lines.push_back(Value::Str(EncodeUtf8(cps, start, cps.size())));
    return Value::MakeList(std::move(lines));
  }
  std::string sep;
  const bool has_sep = !a[0].is_undefined() && !a[0].is_none();
  if (has_sep) {
    CHAT_ASSIGN_OR_RETURN(sep, StrArg(r, name, a[0]));
    if (sep.empty()) return r.Fail("empty separator");
  }
  if (!a[1].is_undefined() && !a[1].is_integral()) return r.Fail(name + "(): maxsplit must be an int");
  const int64_t maxsplit = a[1].is_integral() ? a[1].i() : -1;
  const std::vector<std::string> parts = name == "split" ? PySplit(s, has_sep ? &sep : nullptr, maxsplit)
                                                         : PyRSplit(s, has_sep ? &sep : nullptr, maxsplit);
  TESSERA_RETURN_IF_ERROR(r.CheckItems(parts.size()));
  std::vector<Value> out;
  for (const std::string& p : parts) out.push_back(Value::Str(p));
  return Value::MakeList(std::move(out));
}

StatusOr<Value> Searching(Renderer& r, const std::string& s, const std::string& name, const std::vector<Value>& a) {
  std::string sub;
  CHAT_ASSIGN_OR_RETURN(sub, StrArg(r, name, a[0]));
  if (name == "count") {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::Int(n);
  }
  const int64_t at = FindCp(s, sub, name == "rfind" || name == "rindex");
  if (at < 0 && (name == "index" || name == "rindex")) return r.Fail("substring not found");
  return Value::Int(at);
}

StatusOr<Value> Replace(Renderer& r, const std::string& s, const std::vector<Value>& a) {
  std::string old_s, new_s;
  CHAT_ASSIGN_OR_RETURN(old_s, StrArg(r, "replace", a[0]));
  CHAT_ASSIGN_OR_RETURN(new_s, StrArg(r, "replace", a[1]));
  int64_t count = a[2].is_integral() ? a[2].i() : -1;
  std::string out;
  if (old_s.empty()) {  // inserts `new` before every character and at the end
    const std::vector<char32_t> cps = DecodeUtf8(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count != 0) out += new_s, --count;
      if (k < cps.size()) AppendUtf8(cps[k], &out);
      if (out.size() > (1u << 20)) TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));
    }
  } else {
    size_t pos = 0;
    for (size_t at = s.find(old_s); at != std::string::npos && count != 0; at = s.find(old_s, pos), --count) {
      out.append(s, pos, at - pos);
      out += new_s;
      pos = at + old_s.size();
      if (out.size() > (1u << 20)) TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));
    }
    out.append(s, pos, std::string::npos);
  }
  TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));
  return Value::Str(std::move(out));
}

StatusOr<Value> Join(Renderer& r, const std::string& sep, const Value& seq) {
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(seq));
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].is_string())
      return r.Fail("sequence item " + std::to_string(k) + ": expected str instance, " + TypeName(items[k]) + " found");
    if (k) out += sep;
    out += items[k].str();
    if (out.size() > (1u << 20)) TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));
  }
  TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));
  return Value::Str(std::move(out));
}

StatusOr<Value> Partition(Renderer& r, const std::string& s, const std::string& name, const Value& arg) {
  std::string sep;
  CHAT_ASSIGN_OR_RETURN(sep, StrArg(r, name, arg));
  if (sep.empty()) return r.Fail("empty separator");
  const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
  if (at == std::string::npos) {
    if (name == "partition") return Value::MakeList({Value::Str(s), Value::Str(""), Value::Str("")}, true);
    return Value::MakeList({Value::Str(""), Value::Str(""), Value::Str(s)}, true);
  }
  return Value::MakeList({Value::Str(s.substr(0, at)), Value::Str(sep), Value::Str(s.substr(at + sep.size()))}, true);
}

StatusOr<Value> StrMethod(Renderer& r, const std::string& s, const std::string& name, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind(name, args, {"a", "b", "c"}, &a));
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(s.size() / 16));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (!a[0].is_undefined() && !a[0].is_none() && !a[0].is_string()) return r.Fail(name + " arg must be None or str");
    return Value::Str(PyStrip(s, a[0].is_string() ? &a[0].str() : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value::Str(PyUpper(s));
  if (name == "lower") return Value::Str(PyLower(s));
  if (name == "title") return Value::Str(PyTitle(s));
  if (name == "capitalize") return Value::Str(PyCapitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (char32_t c : DecodeUtf8(s)) {
      std::string one;
      AppendUtf8(c, &one);
      const std::string up = PyUpper(one);
      out += up != one ? up : PyLower(one);
    }
    return Value::Str(std::move(out));
  }
  if (name == "startswith" || name == "endswith") return StartsEnds(r, s, name, a);
  if (name == "split" || name == "rsplit" || name == "splitlines") return Splitting(r, s, name, a);
  if (name == "replace") return Replace(r, s, a);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return Searching(r, s, name, a);
  if (name == "join") return Join(r, s, a[0]);
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value::Bool(AllOf(s, IsDigitCp));
  if (name == "isalpha") return Value::Bool(AllOf(s, IsAlphaCp));
  if (name == "isalnum") return Value::Bool(AllOf(s, IsAlnumCp));
  if (name == "isspace") return Value::Bool(AllOf(s, IsPySpace));
  if (name == "islower") return Value::Bool(PyLower(s) == s && PyUpper(s) != s);
  if (name == "isupper") return Value::Bool(PyUpper(s) == s && PyLower(s) != s);
  if (name == "center" || name == "ljust" || name == "rjust") return Pad(r, s, name, a);
  if (name == "zfill") {
    if (!a[0].is_integral()) return r.Fail("zfill() needs an int width");
    const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    const auto len = static_cast<int64_t>(CodePointCount(s));
    const int64_t fill = std::min<int64_t>(a[0].i(), 1 << 24) - len;
    if (fill <= 0) return Value::Str(s);
    TESSERA_RETURN_IF_ERROR(r.ChargeText(static_cast<size_t>(fill) + s.size()));
    return Value::Str(s.substr(0, sign ? 1 : 0) + std::string(static_cast<size_t>(fill), '0') + s.substr(sign ? 1 : 0));
  }
  if (name == "partition" || name == "rpartition") return Partition(r, s, name, a[0]);
  std::string affix;
  CHAT_ASSIGN_OR_RETURN(affix, StrArg(r, name, a[0]));
  if (name == "removeprefix") return Value::Str(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
  const bool has_suffix = s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
  return Value::Str(has_suffix ? s.substr(0, s.size() - affix.size()) : s);
}

StatusOr<Value> DictMethod(Renderer& r, const Dict& d, const std::string& name, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind(name, args, {"key", "default"}, &a));
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(d.size()));
  if (name == "get") {
    const Value* v = d.Find(a[0]);
    return v ? *v : (a[1].is_undefined() ? Value::None() : a[1]);
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d.items()) {
    if (name == "items") out.push_back(Value::MakeList({k, v}, /*tuple=*/true));
    if (name == "keys") out.push_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::MakeList(std::move(out));
}

StatusOr<Value> ListMethod(Renderer& r, const List& l, const std::string& name, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind(name, args, {"value"}, &a));
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(l.items.size()));
  int64_t count = 0;
  for (size_t k = 0; k < l.items.size(); ++k) {
    if (!Equals(l.items[k], a[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(k));
    ++count;
  }
  if (name == "index") return r.Fail(std::string(l.is_tuple ? "tuple" : "list") + ".index(x): x not in " + (l.is_tuple ? "tuple" : "list"));
  return Value::Int(count);
}

}  // namespace

bool HasMethod(const Value& self, std::string_view name) {
  if (self.is_string()) return In(kStrMethods, name);
  if (self.is_dict()) return In(kDictMethods, name);
  if (self.is_list()) return In(kListMethods, name);
  return false;
}

bool IsMutatingMethod(const Value& self, std::string_view name) {
  if (self.is_dict()) return In(kDictMutators, name);
  if (self.is_list()) return In(kListMutators, name);
  return false;
}

StatusOr<Value> CallMethod(Renderer& r, const Value& self, const std::string& name, const CallArgs& args) {
  if (self.is_string()) return StrMethod(r, self.str(), name, args);
  if (self.is_dict()) return DictMethod(r, self.dict(), name, args);
  if (self.is_list()) return ListMethod(r, self.list(), name, args);
  return r.Fail("'" + TypeName(self) + "' object has no method '" + name + "'");
}

}  // namespace tessera::chat
