#include "chat/text.h"

#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace tessera::chat {
namespace {

// Length of the UTF-8 sequence starting at s[i] and its code point, or 0 when malformed.
size_t NextCodePoint(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = 0;
  char32_t v = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, v = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, v = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, v = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// The C.UTF-8 locale for the wide-character case functions (Unicode simple case mappings);
// null where the C library lacks it, and then only ASCII letters change case.
locale_t Utf8Locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

char32_t ToUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t loc = Utf8Locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t ToLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t loc = Utf8Locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

bool IsCased(char32_t c) { return ToUpper(c) != c || ToLower(c) != c; }

template <typename F>
std::string MapCodePoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(f(c), &out);
  return out;
}

bool InSet(char32_t c, const std::vector<char32_t>& set) {
  for (char32_t x : set)
    if (x == c) return true;
  return false;
}

// Python prints these code points escaped in repr(): controls, separators other than ' ', format
// characters, surrogates and private use (an approximation of str.isprintable()).
bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = NextCodePoint(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::vector<char32_t> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  char32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = NextCodePoint(s, i, &cp);
    if (n == 0) {  // never for interpreter strings; keep the byte rather than loop forever
      out.push_back(static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], &out);
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool IsAscii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> set = chars ? DecodeUtf8(*chars) : std::vector<char32_t>{};
  auto strip = [&](char32_t c) { return chars ? InSet(c, set) : IsPySpace(c); };
  // Only the ends are decoded: long messages are trimmed without a pass over their middle.
  size_t b = 0, e = s.size();
  char32_t cp = 0;
  while (left && b < e) {
    const size_t n = NextCodePoint(s, b, &cp);
    if (n == 0 || !strip(cp)) break;
    b += n;
  }
  while (right && e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const size_t n = NextCodePoint(s, start, &cp);
    if (n == 0 || start + n != e || !strip(cp)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::vector<char32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && IsPySpace(cps[e - 1])) --e;
      out.push_back(EncodeUtf8(cps, i, e));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    out.push_back(EncodeUtf8(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return PySplit(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit && end >= sep->size()) {
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::vector<char32_t> cps = DecodeUtf8(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && IsPySpace(cps[j - 1])) --j;
      if (j == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        size_t b = 0;
        while (b < j && IsPySpace(cps[b])) ++b;
        out.push_back(EncodeUtf8(cps, b, j));
        break;
      }
      size_t i = j;
      while (i > 0 && !IsPySpace(cps[i - 1])) --i;
      out.push_back(EncodeUtf8(cps, i, j));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::string PyUpper(std::string_view s) { return MapCodePoints(s, ToUpper); }
std::string PyLower(std::string_view s) { return MapCodePoints(s, ToLower); }

std::string PyCapitalize(std::string_view s) {
  bool first = true;
  return MapCodePoints(s, [&first](char32_t c) {
    const char32_t r = first ? ToUpper(c) : ToLower(c);
    first = false;
    return r;
  });
}

std::string PyTitle(std::string_view s) {
  bool prev_cased = false;
  return MapCodePoints(s, [&prev_cased](char32_t c) {
    const char32_t r = prev_cased ? ToLower(c) : ToUpper(c);
    prev_cased = IsCased(c);
    return r;
  });
}

std::string JinjaTitle(std::string_view s) {
  auto is_sep = [](char32_t c) { return IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  bool word_start = true;
  return MapCodePoints(s, [&](char32_t c) {
    if (is_sep(c)) {
      word_start = true;
      return c;
    }
    const char32_t r = word_start ? ToUpper(c) : ToLower(c);
    word_start = false;
    return r;
  });
}

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_at = sci.find('e');
  std::string mant = sci.substr(0, e_at);
  const int exp10 = std::stoi(sci.substr(e_at + 1));
  std::string sign;
  if (mant[0] == '-') sign = "-", mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  const int decpt = exp10 + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= nd) return sign + digits + std::string(decpt - nd, '0') + ".0";
    return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  std::string out = sign + digits.substr(0, 1);
  if (nd > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + ebuf;
}

void AppendPyEscape(char32_t cp, std::string* out) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
  }
  *out += buf;
}

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!IsPrintable(c)) {
      AppendPyEscape(c, &out);
    } else {
      AppendUtf8(c, &out);
    }
  }
  out += quote;
  return out;
}

}  // namespace tessera::chat
