// The global functions transformers' environment gives chat templates: range (capped as the
// sandbox caps it), dict, namespace, raise_exception and strftime_now.
#include <algorithm>
#include <ctime>

#include "chat/library.h"
#include "chat/status_macros.h"

namespace tessera::chat {
namespace {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

StatusOr<Value> Range(Renderer& r, const CallArgs& args) {
  if (!args.kw.empty()) return r.Fail("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3) return r.Fail("range expected 1 to 3 arguments");
  for (const Value& v : args.pos)
    if (!v.is_integral()) return r.Fail("'" + TypeName(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop = 0, step = 1;
  if (args.pos.size() == 1) {
    stop = args.pos[0].i();
  } else {
    start = args.pos[0].i(), stop = args.pos[1].i();
    if (args.pos.size() == 3) step = args.pos[2].i();
  }
  if (step == 0) return r.Fail("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 n = span <= 0 ? 0 : (span - 1) / abs_step + 1;
  if (n > kMaxRange)
    return r.Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(static_cast<size_t>(n)));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) items.push_back(Value::Int(start + k * step));
  return Value::MakeList(std::move(items));
}

// dict(mapping or pairs, **kwargs), also the attributes of namespace(...).
StatusOr<Dict> DictFromArgs(Renderer& r, const std::string& fn, const CallArgs& args) {
  if (args.pos.size() > 1) return r.Fail(fn + "() expected at most 1 positional argument");
  Dict d;
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      std::vector<Value> items;
      CHAT_ASSIGN_OR_RETURN(items, r.Iterate(src));
      for (const Value& p : items) {
        if (!p.is_list() || p.list().items.size() != 2) return r.Fail(fn + "(): each element must be a key/value pair");
        d.Set(p.list().items[0], p.list().items[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kw) d.Set(Value::Str(k), v);
  return d;
}

StatusOr<Value> MakeNamespace(Renderer& r, const CallArgs& args) {
  Dict d;
  CHAT_ASSIGN_OR_RETURN(d, DictFromArgs(r, "namespace", args));
  for (const auto& [k, v] : d.items()) {
    if (k.is_string() && !k.str().empty() && k.str()[0] == '_')
      return r.Fail("chat templates cannot store underscore-prefixed attributes on a namespace ('" + k.str() + "')");
    if (v.depth() > kMaxValueDepth) return r.Fail("value nests too deeply");
  }
  Namespace* ns = r.NewNamespace();
  ns->attrs = std::move(d);
  return Value::Ns(ns);
}

StatusOr<Value> StrftimeNow(Renderer& r, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("strftime_now", args, {"format"}, &a));
  if (!a[0].is_string()) return r.Fail("strftime_now() needs a format string");
  if (a[0].str().size() > 256) return r.Fail("strftime_now(): format string too long");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[4096];
  const size_t n = std::strftime(buf, sizeof buf, a[0].str().c_str(), &local);
  if (n == 0 && !a[0].str().empty()) return r.Fail("strftime_now(): the formatted date is too long");
  return Value::Str(std::string(buf, n));
}

}  // namespace

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

StatusOr<Value> CallGlobal(Renderer& r, const std::string& name, const CallArgs& args) {
  if (name == "range") return Range(r, args);
  if (name == "namespace") return MakeNamespace(r, args);
  if (name == "dict") {
    Dict d;
    CHAT_ASSIGN_OR_RETURN(d, DictFromArgs(r, "dict", args));
    return Value::MakeDict(std::move(d));
  }
  if (name == "raise_exception") {
    std::vector<Value> a;
    TESSERA_RETURN_IF_ERROR(r.Bind("raise_exception", args, {"message"}, &a));
    std::string msg;
    CHAT_ASSIGN_OR_RETURN(msg, r.Str(a[0]));
    return r.Fail(msg);
  }
  if (name == "strftime_now") return StrftimeNow(r, args);
  return r.Fail("'" + name + "' is undefined");
}

}  // namespace tessera::chat
