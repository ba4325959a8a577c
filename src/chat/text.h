// Python's string semantics over UTF-8 bytes, for the chat-template interpreter: templates index,
// slice, strip and case-map strings by code point (str in Python), and print numbers and strings
// the way str() / repr() do, so our output matches jinja2's byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::chat {

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Code points of valid UTF-8 (the interpreter only ever holds valid UTF-8).
std::vector<char32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t cp, std::string* out);
std::string EncodeUtf8(const std::vector<char32_t>& cps, size_t begin, size_t end);
// len(s) in code points.
size_t CodePointCount(std::string_view s);
bool IsAscii(std::string_view s);

// str.isspace() for one code point (Unicode White_Space plus the C0 separators Python counts).
bool IsPySpace(char32_t cp);
// str.strip() / lstrip() / rstrip(): `chars` null strips whitespace, else any of its code points.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) and str.split() (sep null: runs of whitespace, empty ends dropped).
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s, const std::string* sep, int64_t maxsplit);

// str.upper() / lower() (simple one-to-one case mappings), str.capitalize(), str.title(), and
// jinja2's `title` filter (words start after whitespace, '-', and opening brackets).
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);
std::string JinjaTitle(std::string_view s);

// repr(float) / str(float): the shortest digits that round-trip, fixed notation for exponents
// -4..15 ("1e-05", "0.0001", "1e+16", "1000000000000000.0"), "inf", "nan".
std::string PyFloatRepr(double v);
// Python's escape of one code point: \xNN, \uNNNN or \UNNNNNNNN (lower-case hex).
void AppendPyEscape(char32_t cp, std::string* out);
// repr(str): quoted with ' (or " when the text has ' and no "), escapes as Python writes them.
std::string PyStrRepr(std::string_view s);

}  // namespace tessera::chat
