// printf-style formatting as Python's str % args does it (used by `%` on strings and by the
// `format` filter): %s %r %d %i %u %f %F %e %E %g %G %x %X %o %c %%, with flags, width and
// precision (`*` taken from the arguments) and %(name)s keys into a dict.
#include <cmath>
#include <cstdio>

#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

struct Spec {
  std::string key;
  bool has_key = false;
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

std::string Pad(std::string s, const Spec& spec) {
  const auto len = static_cast<int>(CodePointCount(s));
  if (spec.width <= len) return s;
  const std::string fill(static_cast<size_t>(spec.width - len), ' ');
  return spec.flags.find('-') != std::string::npos ? s + fill : fill + s;
}

class Formatter {
 public:
  Formatter(Renderer& r, const std::string& fmt, const Value& args) : r_(r), fmt_(fmt), args_(args) {
    if (args.is_list() && args.list().is_tuple) {
      items_ = args.list().items;
    } else {
      items_.push_back(args);
    }
  }

  StatusOr<std::string> Run();

 private:
  StatusOr<Value> NextArg() {
    if (next_ >= items_.size()) return r_.Fail("not enough arguments for format string");
    return items_[next_++];
  }
  Status ParseSpec(size_t* i, Spec* spec);
  StatusOr<std::string> Convert(const Spec& spec, const Value& v);
  StatusOr<std::string> Number(const Spec& spec, const Value& v);

  Renderer& r_;
  const std::string& fmt_;
  const Value& args_;
  std::vector<Value> items_;
  size_t next_ = 0;
  bool used_key_ = false;
};

Status Formatter::ParseSpec(size_t* i, Spec* spec) {
  size_t k = *i;
  auto number = [&](int* out) -> Status {
    if (k < fmt_.size() && fmt_[k] == '*') {
      ++k;
      Value v;
      CHAT_ASSIGN_OR_RETURN(v, NextArg());
      if (!v.is_integral()) return r_.Fail("* wants int");
      *out = static_cast<int>(std::min<int64_t>(std::max<int64_t>(v.i(), 0), 4096));
      return Status::Ok();
    }
    int n = -1;
    while (k < fmt_.size() && fmt_[k] >= '0' && fmt_[k] <= '9') n = std::min((n < 0 ? 0 : n) * 10 + (fmt_[k++] - '0'), 4096);
    *out = n;
    return Status::Ok();
  };
  if (k < fmt_.size() && fmt_[k] == '(') {
    const size_t close = fmt_.find(')', k);
    if (close == std::string::npos) return r_.Fail("incomplete format key");
    spec->key = fmt_.substr(k + 1, close - k - 1);
    spec->has_key = true;
    k = close + 1;
  }
  while (k < fmt_.size() && std::string_view("-+ #0").find(fmt_[k]) != std::string_view::npos) spec->flags += fmt_[k++];
  TESSERA_RETURN_IF_ERROR(number(&spec->width));
  if (k < fmt_.size() && fmt_[k] == '.') {
    ++k;
    TESSERA_RETURN_IF_ERROR(number(&spec->precision));
    if (spec->precision < 0) spec->precision = 0;
  }
  while (k < fmt_.size() && (fmt_[k] == 'l' || fmt_[k] == 'h' || fmt_[k] == 'L')) ++k;
  if (k >= fmt_.size()) return r_.Fail("incomplete format");
  spec->type = fmt_[k];
  *i = k + 1;
  return Status::Ok();
}

StatusOr<std::string> Formatter::Number(const Spec& spec, const Value& v) {
  const char t = spec.type;
  const bool integer = t == 'd' || t == 'i' || t == 'u' || t == 'x' || t == 'X' || t == 'o';
  if (!v.is_number()) {
    return r_.Fail(std::string("%") + t + " format: " + (integer ? "a real number" : "must be real number") +
                   " is required, not " + TypeName(v));
  }
  if ((t == 'x' || t == 'X' || t == 'o') && v.is_float())
    return r_.Fail(std::string("%") + t + " format: an integer is required, not float");
  std::string cfmt = "%" + spec.flags;
  if (spec.width >= 0) cfmt += std::to_string(spec.width);
  if (spec.precision >= 0) cfmt += "." + std::to_string(spec.precision);
  char buf[8192];
  if (integer) {
    const double f = v.f();
    if (v.is_float() && !(std::isfinite(f) && std::fabs(f) < 9.2e18)) return r_.Fail("cannot convert float to integer");
    const long long n = v.is_float() ? static_cast<long long>(f) : static_cast<long long>(v.i());
    cfmt += std::string("ll") + (t == 'i' || t == 'u' ? 'd' : t);
    std::snprintf(buf, sizeof buf, cfmt.c_str(), n);
  } else {
    cfmt += t;
    std::snprintf(buf, sizeof buf, cfmt.c_str(), v.f());
  }
  return std::string(buf);
}

StatusOr<std::string> Formatter::Convert(const Spec& spec, const Value& v) {
  switch (spec.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string s;
      if (spec.type == 's') {
        CHAT_ASSIGN_OR_RETURN(s, r_.Str(v));
      } else if (!ToRepr(v, &s)) {
        return r_.Fail("value nested too deeply to print");
      }
      if (spec.precision >= 0) {
        const std::vector<char32_t> cps = DecodeUtf8(s);
        s = EncodeUtf8(cps, 0, std::min(cps.size(), static_cast<size_t>(spec.precision)));
      }
      return Pad(std::move(s), spec);
    }
    case 'c': {
      std::string s;
      if (v.is_string() && CodePointCount(v.str()) == 1) {
        s = v.str();
      } else if (v.is_integral() && v.i() >= 0 && v.i() <= 0x10FFFF && !(v.i() >= 0xD800 && v.i() <= 0xDFFF)) {
        AppendUtf8(static_cast<char32_t>(v.i()), &s);
      } else {
        return r_.Fail("%c requires an int or a single character");
      }
      return Pad(std::move(s), spec);
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
      return Number(spec, v);
    default:
      return r_.Fail(std::string("unsupported format character '") + spec.type + "'");
  }
}

StatusOr<std::string> Formatter::Run() {
  std::string out;
  for (size_t i = 0; i < fmt_.size();) {
    if (fmt_[i] != '%') {
      out += fmt_[i++];
      continue;
    }
    ++i;
    if (i < fmt_.size() && fmt_[i] == '%') {
      out += '%';
      ++i;
      continue;
    }
    Spec spec;
    TESSERA_RETURN_IF_ERROR(ParseSpec(&i, &spec));
    Value v;
    if (spec.has_key) {
      if (!args_.is_dict()) return r_.Fail("format requires a mapping");
      const Value* found = args_.dict().Find(spec.key);
      if (!found) return r_.Fail("format key '" + spec.key + "' not found");
      v = *found;
      used_key_ = true;
    } else {
      CHAT_ASSIGN_OR_RETURN(v, NextArg());
    }
    std::string piece;
    CHAT_ASSIGN_OR_RETURN(piece, Convert(spec, v));
    TESSERA_RETURN_IF_ERROR(r_.ChargeText(piece.size()));
    out += piece;
    if (out.size() > (1u << 20)) TESSERA_RETURN_IF_ERROR(r_.ChargeText(out.size()));  // the size limit
  }
  if (!used_key_ && next_ < items_.size() && !(items_.size() == 1 && args_.is_dict()))
    return r_.Fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace

StatusOr<std::string> PercentFormat(Renderer& r, const std::string& fmt, const Value& args) {
  Formatter f(r, fmt, args);
  return f.Run();
}

}  // namespace tessera::chat
