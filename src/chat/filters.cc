// jinja2's built-in filters on strings and numbers, plus transformers' `tojson`; the sequence
// filters are in filters_seq.cc. Each follows jinja2 3.1: a filter that takes a string turns
// any value into its str() first, and undefined into "".
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "chat/json_value.h"
#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

using FilterFn = StatusOr<Value> (*)(Renderer&, const Value&, const CallArgs&);

StatusOr<Value> StrResult(Renderer& r, std::string s) {
  TESSERA_RETURN_IF_ERROR(r.ChargeText(s.size()));
  return Value::Str(std::move(s));
}

// For filters of one string and no options: upper, lower, capitalize, title, string, safe.
template <std::string (*F)(std::string_view)>
StatusOr<Value> StringFilter(Renderer& r, const Value& v, const CallArgs& args) {
  if (!args.pos.empty() || !args.kw.empty()) return r.Fail("this filter takes no arguments");
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  return StrResult(r, F(s));
}

std::string Identity(std::string_view s) { return std::string(s); }

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

StatusOr<Value> Trim(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("trim", args, {"chars"}, &a));
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  if (!a[0].is_undefined() && !a[0].is_none() && !a[0].is_string()) return r.Fail("trim(): chars must be a string");
  return StrResult(r, PyStrip(s, a[0].is_string() ? &a[0].str() : nullptr, true, true));
}

StatusOr<Value> Default(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("default", args, {"default_value", "boolean"}, &a));
  const Value fallback = a[0].is_undefined() ? Value::Str("") : a[0];
  if (v.is_undefined() || (Truthy(a[1]) && !Truthy(v))) return fallback;
  return v;
}

StatusOr<Value> Replace(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("replace", args, {"old", "new", "count"}, &a));
  if (!a[0].is_string() || !a[1].is_string()) return r.Fail("replace(): old and new must be strings");
  if (!a[2].is_undefined() && !a[2].is_none() && !a[2].is_integral()) return r.Fail("replace(): count must be an int");
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  return CallMethod(r, Value::Str(std::move(s)), "replace", CallArgs{{a[0], a[1], a[2].is_integral() ? a[2] : Value::Int(-1)}, {}});
}

StatusOr<Value> Indent(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("indent", args, {"width", "first", "blank"}, &a));
  std::string unit = "    ";
  if (a[0].is_string()) {
    unit = a[0].str();
  } else if (a[0].is_integral()) {
    unit.assign(static_cast<size_t>(std::clamp<int64_t>(a[0].i(), 0, 4096)), ' ');
  } else if (!a[0].is_undefined()) {
    return r.Fail("indent(): width must be an int or a string");
  }
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  Value lines_v;
  CHAT_ASSIGN_OR_RETURN(lines_v, CallMethod(r, Value::Str(s + "\n"), "splitlines", CallArgs{}));
  const auto& lines = lines_v.list().items;
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string& line = lines[k].str();
    if (k > 0) out += "\n";
    if (k > 0 && (Truthy(a[2]) || !line.empty())) out += unit;
    out += line;
    TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size() / 64));
  }
  if (Truthy(a[1])) out = unit + out;
  return StrResult(r, std::move(out));
}

StatusOr<Value> Center(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("center", args, {"width"}, &a));
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  return CallMethod(r, Value::Str(std::move(s)), "center", CallArgs{{a[0].is_undefined() ? Value::Int(80) : a[0]}, {}});
}

StatusOr<Value> Format(Renderer& r, const Value& v, const CallArgs& args) {
  if (!args.pos.empty() && !args.kw.empty()) return r.Fail("format(): positional and keyword arguments cannot mix");
  std::string fmt;
  CHAT_ASSIGN_OR_RETURN(fmt, r.Str(v));
  Value packed;
  if (!args.kw.empty()) {
    Dict d;
    for (const auto& [k, x] : args.kw) d.Set(Value::Str(k), x);
    packed = Value::MakeDict(std::move(d));
  } else {
    packed = Value::MakeList(args.pos, /*tuple=*/true);
  }
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, PercentFormat(r, fmt, packed));
  return StrResult(r, std::move(s));
}

// The text of a Python number literal without its '_' separators (each between two digits);
// false when one is misplaced.
bool WithoutSeparators(std::string_view text, std::string* out) {
  const std::string s = PyStrip(text, nullptr, true, true);
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '_') {
      *out += s[k];
      continue;
    }
    if (k == 0 || k + 1 == s.size() || !std::isalnum(static_cast<unsigned char>(s[k - 1])) ||
        !std::isalnum(static_cast<unsigned char>(s[k + 1])))
      return false;
  }
  return !out->empty();
}

// Python's float(str): surrounding whitespace, '_' between digits, inf/nan spellings.
bool ParseFloat(std::string_view text, double* out) {
  std::string clean;
  if (!WithoutSeparators(text, &clean) || clean.find_first_of("xXpP") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

// Python's int(str, base): sign, whitespace, '_' separators; base 0 reads a 0x/0o/0b prefix.
bool ParseInt(std::string_view text, int base, int64_t* out) {
  std::string clean;
  if (!WithoutSeparators(text, &clean)) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(clean.c_str(), &end, base);
  if (errno == ERANGE || end != clean.c_str() + clean.size()) return false;
  *out = v;
  return true;
}

StatusOr<Value> IntFilter(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("int", args, {"default", "base"}, &a));
  const Value fallback = a[0].is_undefined() ? Value::Int(0) : a[0];
  const int base = a[1].is_integral() ? static_cast<int>(a[1].i()) : 10;
  if (base != 0 && (base < 2 || base > 36)) return r.Fail("int(): base must be 0 or 2..36");
  if (v.is_integral()) return Value::Int(v.i());
  double f = 0;
  if (v.is_float()) {
    f = v.f();
  } else if (v.is_string()) {
    int64_t i;
    if (ParseInt(v.str(), base, &i)) return Value::Int(i);
    if (!ParseFloat(v.str(), &f)) return fallback;
  } else {
    return fallback;
  }
  if (!std::isfinite(f)) return r.Fail("cannot convert float " + PyFloatRepr(f) + " to integer");
  if (std::fabs(f) >= 9.2e18) return r.Fail("integer out of range (64-bit)");
  return Value::Int(static_cast<int64_t>(f));
}

StatusOr<Value> FloatFilter(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("float", args, {"default"}, &a));
  if (v.is_number()) return Value::Float(v.f());
  double f;
  if (v.is_string() && ParseFloat(v.str(), &f)) return Value::Float(f);
  return a[0].is_undefined() ? Value::Float(0.0) : a[0];
}

StatusOr<Value> Abs(Renderer& r, const Value& v, const CallArgs& args) {
  if (!v.is_number()) return r.Fail("bad operand type for abs(): '" + TypeName(v) + "'");
  if (v.is_float()) return Value::Float(std::fabs(v.f()));
  if (v.i() == INT64_MIN) return r.Fail("integer overflow in abs()");
  return Value::Int(std::llabs(v.i()));
}

// Python's round(x, n): the decimal nearest the exact binary value, halves to even. printf's
// conversion is exact with the same tie rule, so the text it gives is Python's digits.
double RoundHalfEven(double x, int64_t n) {
  if (!std::isfinite(x) || n > 340) return x;
  if (n < 0) {
    const double p = std::pow(10.0, static_cast<double>(std::min<int64_t>(-n, 308)));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.0f", x / p);
    return std::strtod(buf, nullptr) * p;
  }
  std::vector<char> buf(static_cast<size_t>(n) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(n), x);
  return std::strtod(buf.data(), nullptr);
}

StatusOr<Value> Round(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("round", args, {"precision", "method"}, &a));
  const int64_t precision = a[0].is_integral() ? a[0].i() : 0;
  const std::string method = a[1].is_string() ? a[1].str() : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    return r.Fail("round(): method must be 'common', 'ceil' or 'floor'");
  if (!v.is_number()) return r.Fail("round(): a number is required, not " + TypeName(v));
  if (method == "common" && !v.is_float()) return Value::Int(v.i());  // round(int, n) stays an int
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -308, 308)));
  const double x = v.f() * scale;
  double rounded;
  if (method == "ceil") {
    rounded = std::ceil(x);
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else {
    return Value::Float(RoundHalfEven(v.f(), precision));
  }
  return Value::Float(rounded / scale);
}

StatusOr<Value> ToJson(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonDumpOptions o;
  o.ensure_ascii = Truthy(a[0]);
  if (a[1].is_integral()) {
    o.indent = true;
    o.indent_unit.assign(static_cast<size_t>(std::clamp<int64_t>(a[1].i(), 0, 4096)), ' ');
  } else if (a[1].is_string()) {
    o.indent = true;
    o.indent_unit = a[1].str();
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return r.Fail("tojson(): indent must be an int or a string");
  }
  if (o.indent) o.item_separator = ",";
  if (a[2].is_list() && a[2].list().items.size() == 2 && a[2].list().items[0].is_string() &&
      a[2].list().items[1].is_string()) {
    o.item_separator = a[2].list().items[0].str();
    o.key_separator = a[2].list().items[1].str();
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    return r.Fail("tojson(): separators must be a pair of strings");
  }
  o.sort_keys = Truthy(a[3]);
  std::string out, error;
  if (!DumpJson(v, o, &out, &error)) return r.Fail("tojson: " + error);
  return StrResult(r, std::move(out));
}

StatusOr<Value> Attr(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("attr", args, {"name"}, &a));
  if (!a[0].is_string()) return r.Fail("attr(): the name must be a string");
  // An attribute only, never an item: of a dict that is its methods.
  if (v.is_undefined() || v.is_namespace() || HasMethod(v, a[0].str()) || IsMutatingMethod(v, a[0].str()))
    return r.GetAttr(v, a[0].str());
  return Value::Undefined("'" + TypeName(v) + " object' has no attribute '" + a[0].str() + "'");
}

struct NamedFilter {
  const char* name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"upper", StringFilter<PyUpper>},
    {"lower", StringFilter<PyLower>},
    {"capitalize", StringFilter<PyCapitalize>},
    {"title", StringFilter<JinjaTitle>},
    {"string", StringFilter<Identity>},
    {"safe", StringFilter<Identity>},
    {"escape", StringFilter<HtmlEscape>},
    {"e", StringFilter<HtmlEscape>},
    {"forceescape", StringFilter<HtmlEscape>},
    {"trim", Trim},
    {"default", Default},
    {"d", Default},
    {"replace", Replace},
    {"indent", Indent},
    {"center", Center},
    {"format", Format},
    {"int", IntFilter},
    {"float", FloatFilter},
    {"abs", Abs},
    {"round", Round},
    {"tojson", ToJson},
    {"attr", Attr},
};

}  // namespace

StatusOr<Value> CallFilter(Renderer& r, const std::string& name, const Value& v, const CallArgs& args) {
  if (const NamedFilter* f = FindByName(kFilters, name)) return f->fn(r, v, args);
  bool found = false;
  StatusOr<Value> out = CallSequenceFilter(r, name, v, args, &found);
  if (found) return out;
  return r.Fail("no filter named '" + name + "'");
}

bool IsFilterName(std::string_view name) { return FindByName(kFilters, name) || IsSequenceFilterName(name); }

}  // namespace tessera::chat
