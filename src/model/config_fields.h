// Typed access to config.json fields for ParseModelConfig (config.cc): messages that name the
// field and the offending value, and the CFG_ASSIGN macro. Internal to the config parser; kept in
// its own header so config.cc holds only the parse itself.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/status.h"

namespace tessera::model::config_detail {

using Json = nlohmann::json;

#define CFG_CONCAT_INNER(a, b) a##b
#define CFG_CONCAT(a, b) CFG_CONCAT_INNER(a, b)
#define CFG_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                    \
  if (!tmp.ok()) return tmp.status();   \
  lhs = std::move(tmp.value())
// lhs = value of a StatusOr expression, or return its error.
#define CFG_ASSIGN(lhs, expr) CFG_ASSIGN_IMPL(CFG_CONCAT(cfg_statusor_, __LINE__), lhs, expr)

inline Status Bad(const std::string& field, const std::string& detail) {
  return InvalidArgument("ParseModelConfig: " + field + " " + detail);
}

// A value for messages: scalars as JSON, strings quoted and truncated, compounds by kind only.
inline std::string Show(const Json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return "\"" + (s.size() > 80 ? s.substr(0, 80) + "..." : s) + "\"";
  }
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return std::string("<") + v.type_name() + ">";
}

inline std::string Str(double v) {
  Json j = v;
  return j.dump();
}

inline Status CheckRange(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return Bad(field,
               "= " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return Status::Ok();
}

// Typed access to one JSON object; field names in messages carry `prefix` ("text_config.").
class Fields {
 public:
  Fields(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string Name(std::string_view key) const { return prefix_ + std::string(key); }
  const Json* Find(std::string_view key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  bool Present(std::string_view key) const { return Find(key) != nullptr; }
  bool HasValue(std::string_view key) const {
    const Json* v = Find(key);
    return v != nullptr && !v->is_null();
  }

  // Missing -> def (or "missing required field"); null -> nullopt; else an integer.
  StatusOr<std::optional<int64_t>> OptInt(std::string_view key, std::optional<int64_t> def, bool required) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (required) return Bad(Name(key), "is a required field and is missing");
      return def;
    }
    if (v->is_null()) return std::optional<int64_t>();
    StatusOr<int64_t> i = AsInt(key, *v);
    if (!i.ok()) return i.status();
    return std::optional<int64_t>(i.value());
  }
  // Missing -> def (or required error); null or non-integer -> error.
  StatusOr<int64_t> Int(std::string_view key, std::optional<int64_t> def) const {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (!def) return Bad(Name(key), "is a required field and is missing");
      return *def;
    }
    return AsInt(key, *v);
  }
  StatusOr<std::optional<double>> OptNum(std::string_view key, std::optional<double> def) const {
    const Json* v = Find(key);
    if (v == nullptr) return def;
    if (v->is_null()) return std::optional<double>();
    if (!v->is_number()) return Bad(Name(key), "= " + Show(*v) + " must be a number");
    return std::optional<double>(v->get<double>());
  }
  StatusOr<double> Num(std::string_view key, double def) const {
    const Json* v = Find(key);
    if (v == nullptr) return def;
    if (!v->is_number()) return Bad(Name(key), "= " + Show(*v) + " must be a number");
    return v->get<double>();
  }
  // null counts as missing (HF's `bool | None` fields treat None as false / the default).
  StatusOr<bool> Bool(std::string_view key, bool def) const {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return def;
    if (!v->is_boolean()) return Bad(Name(key), "= " + Show(*v) + " must be true or false");
    return v->get<bool>();
  }
  // Missing -> def; null -> nullopt.
  StatusOr<std::optional<std::string>> OptString(std::string_view key, std::optional<std::string> def) const {
    const Json* v = Find(key);
    if (v == nullptr) return def;
    if (v->is_null()) return std::optional<std::string>();
    if (!v->is_string()) return Bad(Name(key), "= " + Show(*v) + " must be a string");
    return std::optional<std::string>(v->get<std::string>());
  }

 private:
  StatusOr<int64_t> AsInt(std::string_view key, const Json& v) const {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Bad(Name(key), "= " + Show(v) + " is too large");
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    return Bad(Name(key), "= " + Show(v) + " must be an integer");
  }

  const Json& obj_;
  std::string prefix_;
};

}  // namespace tessera::model::config_detail
