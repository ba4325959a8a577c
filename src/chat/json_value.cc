#include "chat/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "chat/text.h"
#include "io/json_nesting.h"

namespace tessera::chat {
namespace {

using Json = nlohmann::ordered_json;

// Depth is bounded by CheckJsonNesting before the parse.
StatusOr<Value> FromJson(const Json& j, std::string_view what) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return InvalidArgument(std::string(what) + ": integer " + std::to_string(u) + " is out of range (64-bit)");
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.get<double>());
    case Json::value_t::string:
      return Value::Str(j.get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const Json& e : j) {
        StatusOr<Value> v = FromJson(e, what);
        if (!v.ok()) return v.status();
        items.push_back(std::move(v).value());
      }
      return Value::MakeList(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) {
        StatusOr<Value> v = FromJson(e, what);
        if (!v.ok()) return v.status();
        d.Set(Value::Str(k), std::move(v).value());
      }
      return Value::MakeDict(std::move(d));
    }
    default:
      return InvalidArgument(std::string(what) + ": unsupported JSON value");
  }
}

void AppendEscape(char32_t c, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
  *out += buf;
}

void DumpString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          AppendEscape(c, out);
        } else if (ensure_ascii && c >= 0x80) {
          if (c >= 0x10000) {  // a surrogate pair, as Python writes it
            AppendEscape(0xD800 + ((c - 0x10000) >> 10), out);
            AppendEscape(0xDC00 + ((c - 0x10000) & 0x3FF), out);
          } else {
            AppendEscape(c, out);
          }
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  *out += '"';
}

std::string FloatJson(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return PyFloatRepr(f);
}

bool KeyString(const Value& k, std::string* s, std::string* error) {
  switch (k.kind()) {
    case Kind::kString: *s = k.str(); return true;
    case Kind::kBool: *s = k.b() ? "true" : "false"; return true;
    case Kind::kInt: *s = std::to_string(k.i()); return true;
    case Kind::kFloat: *s = FloatJson(k.f()); return true;
    case Kind::kNone: *s = "null"; return true;
    default:
      *error = "keys must be str, int, float, bool or None, not " + TypeName(k);
      return false;
  }
}

struct Dumper {
  const JsonDumpOptions& o;
  std::string* out;
  std::string* error;

  void Newline(int level) {
    if (!o.indent) return;
    *out += '\n';
    for (int k = 0; k < level; ++k) *out += o.indent_unit;
  }

  bool SortedItems(const Dict& d, std::vector<const std::pair<Value, Value>*>* items) {
    for (const auto& kv : d.items()) items->push_back(&kv);
    if (!o.sort_keys) return true;
    const bool strings = std::all_of(items->begin(), items->end(), [](auto* p) { return p->first.is_string(); });
    const bool numbers = std::all_of(items->begin(), items->end(), [](auto* p) { return p->first.is_number(); });
    if (!strings && !numbers) {
      *error = "sort_keys needs keys of one comparable type";
      return false;
    }
    std::stable_sort(items->begin(), items->end(), [strings](auto* a, auto* b) {
      return strings ? a->first.str() < b->first.str() : a->first.f() < b->first.f();
    });
    return true;
  }

  bool Object(const Dict& d, int level) {
    std::vector<const std::pair<Value, Value>*> items;
    if (!SortedItems(d, &items)) return false;
    if (items.empty()) return *out += "{}", true;
    *out += '{';
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) *out += o.item_separator;
      Newline(level + 1);
      std::string key;
      if (!KeyString(items[k]->first, &key, error)) return false;
      DumpString(key, o.ensure_ascii, out);
      *out += o.key_separator;
      if (!Dump(items[k]->second, level + 1)) return false;
    }
    Newline(level);
    *out += '}';
    return true;
  }

  bool Dump(const Value& v, int level) {
    if (level > kMaxValueDepth) return *error = "value nested too deeply", false;
    switch (v.kind()) {
      case Kind::kNone: *out += "null"; return true;
      case Kind::kBool: *out += v.b() ? "true" : "false"; return true;
      case Kind::kInt: *out += std::to_string(v.i()); return true;
      case Kind::kFloat: *out += FloatJson(v.f()); return true;
      case Kind::kString: DumpString(v.str(), o.ensure_ascii, out); return true;
      case Kind::kDict: return Object(v.dict(), level);
      case Kind::kList: {
        const auto& items = v.list().items;
        if (items.empty()) return *out += "[]", true;
        *out += '[';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) *out += o.item_separator;
          Newline(level + 1);
          if (!Dump(items[k], level + 1)) return false;
        }
        Newline(level);
        *out += ']';
        return true;
      }
      default:
        *error = "Object of type " + TypeName(v) + " is not JSON serializable";
        return false;
    }
  }
};

}  // namespace

StatusOr<Value> ParseJsonValue(std::string_view text, std::string_view what) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text, what, kMaxJsonInputNesting));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": not valid JSON");
  return FromJson(j, what);
}

bool DumpJson(const Value& v, const JsonDumpOptions& options, std::string* out, std::string* error) {
  Dumper d{options, out, error};
  return d.Dump(v, 0);
}

}  // namespace tessera::chat
