#include "chat/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "chat/text.h"

namespace tessera::chat {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// \r\n and \r become \n everywhere, and one trailing newline goes (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool AllPySpace(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t c : DecodeUtf8(s))
    if (!IsPySpace(c)) return false;
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(NormalizeNewlines(source)), name_(name) {}

  StatusOr<std::vector<Token>> Run();

 private:
  Status Fail(std::string_view msg) const { return TemplateError(name_, line_, msg); }
  bool At(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }
  void Advance(size_t n) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k, ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }
  // Skips Python whitespace (\s); returns whether any was skipped and the last one was '\n'.
  bool SkipSpace();
  void Emit(TokKind kind, std::string text = {}) { out_.push_back(Token{kind, line_, std::move(text), 0, 0}); }
  void EmitText(std::string text, int line, char sign, bool is_variable);
  StatusOr<bool> TryRaw();
  Status Comment();
  Status Tag(bool is_block);
  bool TagEnd(bool is_block);
  Status ExprToken();
  size_t MatchDigits(size_t p) const;
  size_t MatchFloat() const;
  size_t MatchInt(int* base) const;
  Status Number();
  Status String();
  Status Operator();

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<char> balance_;
  std::vector<Token> out_;
};

bool Lexer::SkipSpace() {
  bool newline_last = false;
  while (pos_ < src_.size()) {
    const auto b = static_cast<unsigned char>(src_[pos_]);
    size_t n = 1;
    char32_t cp = b;
    if (b >= 0x80) {
      const size_t len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
      const std::vector<char32_t> one = DecodeUtf8(std::string_view(src_).substr(pos_, len));
      cp = one.empty() ? 0 : one[0];
      n = len;
    }
    if (!IsPySpace(cp)) break;
    newline_last = cp == '\n';
    Advance(n);
  }
  return newline_last;
}

void Lexer::EmitText(std::string text, int line, char sign, bool is_variable) {
  if (sign == '-') {
    text = PyStrip(text, nullptr, /*left=*/false, /*right=*/true);
  } else if (sign != '+' && !is_variable) {  // lstrip_blocks: the tag's own line is left bare
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && AllPySpace(std::string_view(text).substr(l_pos))) text.resize(l_pos);
  }
  if (!text.empty()) out_.push_back(Token{TokKind::kText, line, std::move(text), 0, 0});
}

StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    size_t start = pos_;
    while (start + 1 < src_.size() &&
           !(src_[start] == '{' && (src_[start + 1] == '{' || src_[start + 1] == '%' || src_[start + 1] == '#')))
      ++start;
    if (start + 1 >= src_.size()) {  // no more tags: the rest is data, untouched
      const int line = line_;
      std::string rest = src_.substr(pos_);
      Advance(rest.size());
      out_.push_back(Token{TokKind::kText, line, std::move(rest), 0, 0});
      break;
    }
    const char type = src_[start + 1];
    const char sign = (start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')) ? src_[start + 2] : 0;
    const int text_line = line_;
    std::string text = src_.substr(pos_, start - pos_);
    Advance(start - pos_);
    EmitText(std::move(text), text_line, sign, type == '{');
    if (type == '%') {
      StatusOr<bool> raw = TryRaw();
      if (!raw.ok()) return raw.status();
      if (raw.value()) continue;
    }
    Advance(sign ? 3 : 2);
    if (type == '#') {
      TESSERA_RETURN_IF_ERROR(Comment());
    } else {
      TESSERA_RETURN_IF_ERROR(Tag(type == '%'));
    }
  }
  out_.push_back(Token{TokKind::kEof, line_, {}, 0, 0});
  return std::move(out_);
}

// {% raw %}...{% endraw %}: the body is data, tags in it are not interpreted.
StatusOr<bool> Lexer::TryRaw() {
  size_t p = pos_ + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  auto skip_ws = [this](size_t q) {
    while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n')) ++q;
    return q;
  };
  p = skip_ws(p);
  if (src_.compare(p, 3, "raw") != 0) return false;
  p = skip_ws(p + 3);
  const bool strip_after = src_.compare(p, 3, "-%}") == 0;
  if (!strip_after && src_.compare(p, 2, "%}") != 0) return false;
  Advance(p + (strip_after ? 3 : 2) - pos_);
  line_starting_ = false;
  if (strip_after) line_starting_ = SkipSpace();
  // The body runs to the first {% endraw %}; its text gets that tag's whitespace control.
  for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 1)) {
    size_t q = s + 2;
    const char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
    q = skip_ws(q + (sign ? 1 : 0));
    if (src_.compare(q, 6, "endraw") != 0) continue;
    q = skip_ws(q + 6);
    const bool plus = src_.compare(q, 3, "+%}") == 0, minus = src_.compare(q, 3, "-%}") == 0;
    if (!plus && !minus && src_.compare(q, 2, "%}") != 0) continue;
    const int line = line_;
    std::string body = src_.substr(pos_, s - pos_);
    Advance(s - pos_);
    EmitText(std::move(body), line, sign, /*is_variable=*/false);
    Advance(q + (plus || minus ? 3 : 2) - pos_);
    line_starting_ = false;
    if (minus) {
      line_starting_ = SkipSpace();
    } else if (!plus && pos_ < src_.size() && src_[pos_] == '\n') {
      Advance(1);
      line_starting_ = true;
    }
    return true;
  }
  return Fail("missing {% endraw %} for this {% raw %}");
}

Status Lexer::Comment() {
  for (; pos_ < src_.size(); Advance(1)) {
    if (At("+#}")) {
      Advance(3);
      line_starting_ = false;
      return Status::Ok();
    }
    if (At("-#}")) {
      Advance(3);
      line_starting_ = SkipSpace();
      return Status::Ok();
    }
    if (At("#}")) {
      Advance(2);
      line_starting_ = pos_ < src_.size() && src_[pos_] == '\n';
      if (line_starting_) Advance(1);
      return Status::Ok();
    }
  }
  return Fail("missing end of comment tag");
}

// At the end of a tag (only with brackets balanced): consumes it with its whitespace control.
bool Lexer::TagEnd(bool is_block) {
  const char close = is_block ? '%' : '}';
  if (is_block && At("+%}")) {
    Advance(3);
    line_starting_ = false;
    return true;
  }
  if (src_.compare(pos_, 3, std::string{'-', close, '}'}) == 0) {
    Advance(3);
    line_starting_ = SkipSpace();
    return true;
  }
  if (src_.compare(pos_, 2, std::string{close, '}'}) == 0) {
    Advance(2);
    line_starting_ = false;
    if (is_block && pos_ < src_.size() && src_[pos_] == '\n') {  // trim_blocks
      Advance(1);
      line_starting_ = true;
    }
    return true;
  }
  return false;
}

Status Lexer::Tag(bool is_block) {
  Emit(is_block ? TokKind::kBlockBegin : TokKind::kVarBegin);
  balance_.clear();
  while (pos_ < src_.size()) {
    if (balance_.empty() && TagEnd(is_block)) {
      Emit(is_block ? TokKind::kBlockEnd : TokKind::kVarEnd);
      return Status::Ok();
    }
    TESSERA_RETURN_IF_ERROR(ExprToken());
  }
  return Fail(is_block ? "unexpected end of template inside a {% ... %} tag"
                       : "unexpected end of template inside a {{ ... }} tag");
}

Status Lexer::ExprToken() {
  const char c = src_[pos_];
  if (static_cast<unsigned char>(c) >= 0x80 || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
      c == '\v') {
    const size_t before = pos_;
    SkipSpace();
    if (pos_ == before) return Fail("unexpected character in a tag (names are ASCII)");
    return Status::Ok();
  }
  if (IsDigit(c)) return Number();
  if (IsNameStart(c)) {
    size_t e = pos_;
    while (e < src_.size() && IsNameChar(src_[e])) ++e;
    Emit(TokKind::kName, src_.substr(pos_, e - pos_));
    Advance(e - pos_);
    return Status::Ok();
  }
  if (c == '\'' || c == '"') return String();
  return Operator();
}

// (\d+_)*\d+ from p: the end of the match, or p when there is none.
size_t Lexer::MatchDigits(size_t p) const {
  if (p >= src_.size() || !IsDigit(src_[p])) return p;
  size_t e = p;
  while (e < src_.size() && IsDigit(src_[e])) ++e;
  while (e + 1 < src_.size() && src_[e] == '_' && IsDigit(src_[e + 1])) {
    ++e;
    while (e < src_.size() && IsDigit(src_[e])) ++e;
  }
  return e;
}

// jinja2's float literal: digits with a fraction, an exponent, or both; never right after a '.'.
size_t Lexer::MatchFloat() const {
  if (pos_ > 0 && src_[pos_ - 1] == '.') return pos_;
  const size_t whole = MatchDigits(pos_);
  auto exponent = [this](size_t q) {
    if (q >= src_.size() || (src_[q] != 'e' && src_[q] != 'E')) return q;
    size_t d = q + 1;
    if (d < src_.size() && (src_[d] == '+' || src_[d] == '-')) ++d;
    const size_t e = MatchDigits(d);
    return e == d ? q : e;
  };
  size_t frac = whole;
  if (whole < src_.size() && src_[whole] == '.') {
    const size_t f = MatchDigits(whole + 1);
    if (f > whole + 1) frac = f;
  }
  const size_t with_exp = exponent(frac);
  if (with_exp > frac) return with_exp;
  return frac > whole ? frac : pos_;
}

// jinja2's integer literal (0b / 0o / 0x prefixes, '_' separators); the end, and the base.
size_t Lexer::MatchInt(int* base) const {
  const char p1 = pos_ + 1 < src_.size() ? static_cast<char>(src_[pos_ + 1] | 0x20) : 0;
  if (src_[pos_] == '0' && (p1 == 'b' || p1 == 'o' || p1 == 'x')) {
    *base = p1 == 'b' ? 2 : p1 == 'o' ? 8 : 16;
    size_t e = pos_ + 2;
    while (true) {
      const size_t d = (e < src_.size() && src_[e] == '_') ? e + 1 : e;
      const int v = d < src_.size() ? HexDigit(src_[d]) : -1;
      if (v < 0 || v >= *base) break;
      e = d + 1;
    }
    if (e > pos_ + 2) return e;
  }
  *base = 10;
  const char want = src_[pos_] == '0' ? '0' : 0;  // "0(_?0)*" or "[1-9](_?\d)*"
  size_t e = pos_ + 1;
  while (true) {
    const size_t d = (e < src_.size() && src_[e] == '_') ? e + 1 : e;
    if (d >= src_.size() || !IsDigit(src_[d]) || (want && src_[d] != want)) break;
    e = d + 1;
  }
  return e;
}

Status Lexer::Number() {
  const size_t fend = MatchFloat();
  std::string digits;
  if (fend > pos_) {
    for (size_t k = pos_; k < fend; ++k)
      if (src_[k] != '_') digits += src_[k];
    Token t{TokKind::kFloat, line_, digits, 0, std::strtod(digits.c_str(), nullptr)};
    out_.push_back(std::move(t));
    Advance(fend - pos_);
    return Status::Ok();
  }
  int base = 10;
  const size_t iend = MatchInt(&base);
  for (size_t k = pos_ + (base == 10 ? 0 : 2); k < iend; ++k)
    if (src_[k] != '_') digits += src_[k];
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), nullptr, base);
  if (errno == ERANGE) return Fail("integer literal " + digits + " is out of range (64-bit)");
  out_.push_back(Token{TokKind::kInt, line_, src_.substr(pos_, iend - pos_), v, 0});
  Advance(iend - pos_);
  return Status::Ok();
}

// A quoted literal, decoded as jinja2 does (Python's unicode-escape rules).
Status Lexer::String() {
  const char quote = src_[pos_];
  size_t e = pos_ + 1;
  while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
  if (e >= src_.size()) return Fail("unterminated string literal");
  const std::string_view body = std::string_view(src_).substr(pos_ + 1, e - pos_ - 1);
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    if (body[k] != '\\') {
      out += body[k];
      continue;
    }
    const char c = body[++k];
    static const std::string_view kSimple = "\\'\"abfnrtv";
    static const char kSimpleValue[] = {'\\', '\'', '"', '\a', '\b', '\f', '\n', '\r', '\t', '\v'};
    if (c == '\n') continue;  // a backslash-newline joins the lines
    if (size_t at = kSimple.find(c); at != std::string_view::npos) {
      out += kSimpleValue[at];
    } else if (c >= '0' && c <= '7') {
      char32_t v = 0;
      for (int n = 0; n < 3 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++n, ++k) v = v * 8 + (body[k] - '0');
      --k;
      AppendUtf8(v, &out);
    } else if (c == 'x' || c == 'u' || c == 'U') {
      const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
      char32_t v = 0;
      for (int d = 1; d <= n; ++d) {
        const int h = k + d < body.size() ? HexDigit(body[k + d]) : -1;
        if (h < 0) return Fail(std::string("truncated \\") + c + " escape in a string literal");
        v = v * 16 + static_cast<char32_t>(h);
      }
      k += n;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return Fail("string literal escape is not a Unicode scalar value");
      AppendUtf8(v, &out);
    } else if (c == 'N') {
      return Fail("\\N{...} escapes in string literals are not supported");
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
      const std::vector<char32_t> cp = DecodeUtf8(body.substr(k, len));
      out += '\\';
      AppendPyEscape(cp.empty() ? 0 : cp[0], &out);  // what Python's backslashreplace leaves
      k += len - 1;
    } else {
      out += '\\';
      out += c;
    }
  }
  const int line = line_;
  Advance(e + 1 - pos_);
  out_.push_back(Token{TokKind::kString, line, std::move(out), 0, 0});
  return Status::Ok();
}

Status Lexer::Operator() {
  static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  for (const char* op : kTwo) {
    if (At(op)) {
      Emit(TokKind::kOp, op);
      Advance(2);
      return Status::Ok();
    }
  }
  const char c = src_[pos_];
  if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
    return Fail(std::string("unexpected character '") + c + "'");
  if (c == '(' || c == '[' || c == '{') {
    balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  } else if (c == ')' || c == ']' || c == '}') {
    if (balance_.empty()) return Fail(std::string("unexpected '") + c + "'");
    if (balance_.back() != c) return Fail(std::string("unexpected '") + c + "', expected '" + balance_.back() + "'");
    balance_.pop_back();
  }
  Emit(TokKind::kOp, std::string(1, c));
  Advance(1);
  return Status::Ok();
}

}  // namespace

Status TemplateError(const std::string& name, int line, std::string_view message) {
  return InvalidArgument("chat template '" + name + "' line " + std::to_string(line) + ": " + std::string(message));
}

StatusOr<std::vector<Token>> Lex(std::string_view source, const std::string& name) {
  Lexer lexer(source, name);
  return lexer.Run();
}

}  // namespace tessera::chat
