// What the renderer dispatches to: operators (operators.cc), filters (filters.cc,
// filters_seq.cc), tests (jinja_tests.cc), methods of str/dict/list (methods.cc) and the global
// functions (globals.cc), each with jinja2's semantics in transformers' sandbox.
#pragma once

#include <string>
#include <string_view>

#include "chat/ast.h"
#include "chat/renderer.h"
#include "chat/value.h"
#include "tessera/status.h"

namespace tessera::chat {

// The entry called `name` in a table of {name, function} (filters, tests), or null.
template <typename Entry, size_t N>
const Entry* FindByName(const Entry (&table)[N], std::string_view name) {
  for (const Entry& e : table)
    if (name == e.name) return &e;
  return nullptr;
}

StatusOr<Value> BinaryOp(Renderer& r, BinOp op, const Value& a, const Value& b);
StatusOr<bool> CompareValues(Renderer& r, CmpOp op, const Value& a, const Value& b);
// Python's ordering (a < b) as -1 / 0 / 1; an error for types Python does not order.
StatusOr<int> Order(Renderer& r, const Value& a, const Value& b);
StatusOr<bool> Contains(Renderer& r, const Value& container, const Value& item);
// v[start:stop:step] of a str, list or tuple; bounds undefined or None are omitted.
StatusOr<Value> SliceValue(Renderer& r, const Value& v, const Value& start, const Value& stop, const Value& step);
// printf-style formatting: "%s %d" % args and the `format` filter.
StatusOr<std::string> PercentFormat(Renderer& r, const std::string& fmt, const Value& args);

StatusOr<Value> CallFilter(Renderer& r, const std::string& name, const Value& v, const CallArgs& args);
// Filters on sequences (filters_seq.cc); false in `found` when `name` is not one of them.
StatusOr<Value> CallSequenceFilter(Renderer& r, const std::string& name, const Value& v, const CallArgs& args,
                                   bool* found);
StatusOr<bool> CallTest(Renderer& r, const std::string& name, const Value& v, const CallArgs& args);
bool IsFilterName(std::string_view name);
bool IsSequenceFilterName(std::string_view name);
bool IsTestName(std::string_view name);

// The method `name` of `self` exists (its attribute is a bound method).
bool HasMethod(const Value& self, std::string_view name);
// A method the immutable sandbox refuses (list.append, dict.update...).
bool IsMutatingMethod(const Value& self, std::string_view name);
StatusOr<Value> CallMethod(Renderer& r, const Value& self, const std::string& name, const CallArgs& args);

bool IsGlobalFunction(std::string_view name);
StatusOr<Value> CallGlobal(Renderer& r, const std::string& name, const CallArgs& args);

}  // namespace tessera::chat
