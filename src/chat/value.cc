#include "chat/value.h"

#include <algorithm>
#include <cmath>

#include "chat/text.h"

namespace tessera::chat {
namespace {

uint16_t NestedDepth(int child_max) { return static_cast<uint16_t>(std::min(child_max + 1, 65535)); }

// int == float exactly, as Python compares them (no rounding of the int).
bool IntEqualsFloat(int64_t i, double f) {
  if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) return false;
  return std::trunc(f) == f && static_cast<int64_t>(f) == i;
}

bool ListsEqual(const List& a, const List& b, int depth) {
  if (a.is_tuple != b.is_tuple || a.items.size() != b.items.size()) return false;
  for (size_t k = 0; k < a.items.size(); ++k)
    if (!Equals(a.items[k], b.items[k], depth + 1)) return false;
  return true;
}

bool DictsEqual(const Dict& a, const Dict& b, int depth) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a.items()) {
    const Value* other = b.Find(k);
    if (!other || !Equals(v, *other, depth + 1)) return false;
  }
  return true;
}

bool ReprItems(const std::vector<Value>& items, std::string* out, int depth) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) *out += ", ";
    if (!ToRepr(items[k], out, depth + 1)) return false;
  }
  return true;
}

bool ReprDict(const Dict& d, std::string* out, int depth) {
  *out += '{';
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (!first) *out += ", ";
    first = false;
    if (!ToRepr(k, out, depth + 1)) return false;
    *out += ": ";
    if (!ToRepr(v, out, depth + 1)) return false;
  }
  *out += '}';
  return true;
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::None() { return Value(Kind::kNone); }

Value Value::Bool(bool b) {
  Value v(Kind::kBool);
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v(Kind::kInt);
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v(Kind::kFloat);
  v.f_ = f;
  return v;
}

Value Value::Str(std::string s) {
  Value v(Kind::kString);
  v.ptr_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::MakeList(std::vector<Value> items, bool tuple) {
  Value v(Kind::kList);
  int child = 0;
  for (const Value& x : items) child = std::max(child, x.depth());
  v.depth_ = NestedDepth(child);
  v.ptr_ = std::make_shared<const List>(List{std::move(items), tuple});
  return v;
}

Value Value::MakeDict(Dict d) {
  Value v(Kind::kDict);
  int child = 0;
  for (const auto& [k, x] : d.items()) child = std::max({child, k.depth(), x.depth()});
  v.depth_ = NestedDepth(child);
  v.ptr_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::Ns(Namespace* ns) {
  Value v(Kind::kNamespace);
  v.ns_ = ns;
  return v;
}

Value Value::Fn(Callable c) {
  Value v(Kind::kCallable);
  v.ptr_ = std::make_shared<const Callable>(std::move(c));
  return v;
}

std::string Value::undefined_hint() const {
  if (kind_ != Kind::kUndefined || !ptr_) return "a value is undefined";
  return *static_cast<const std::string*>(ptr_.get());
}

const Value* Dict::Find(std::string_view key) const {
  if (str_index_.empty()) {
    for (const auto& [k, v] : items_)
      if (k.is_string() && k.str() == key) return &v;
    return nullptr;
  }
  auto it = str_index_.find(std::string(key));
  return it == str_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(key.str());
  for (const auto& [k, v] : items_)
    if (!k.is_string() && Equals(k, key)) return &v;
  return nullptr;
}

Value* Dict::FindSlot(const Value& key) { return const_cast<Value*>(static_cast<const Dict*>(this)->Find(key)); }

void Dict::Set(Value key, Value value) {
  if (Value* slot = FindSlot(key)) {
    *slot = std::move(value);
    return;
  }
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() <= kIndexFrom) return;
  if (str_index_.empty()) {
    for (size_t k = 0; k < items_.size(); ++k)
      if (items_[k].first.is_string()) str_index_.emplace(items_[k].first.str(), k);
  } else if (items_.back().first.is_string()) {
    str_index_.emplace(items_.back().first.str(), items_.size() - 1);
  }
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b();
    case Kind::kInt:
      return v.i() != 0;
    case Kind::kFloat:
      return v.f() != 0.0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
      return !v.list().items.empty();
    case Kind::kDict:
      return v.dict().size() != 0;
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool Equals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && b.is_float()) return a.f() == b.f();
    if (a.is_float()) return IntEqualsFloat(b.i(), a.f());
    if (b.is_float()) return IntEqualsFloat(a.i(), b.f());
    return a.i() == b.i();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
      return ListsEqual(a.list(), b.list(), depth);
    case Kind::kDict:
      return DictsEqual(a.dict(), b.dict(), depth);
    case Kind::kNamespace:
      return a.ns() == b.ns();
    case Kind::kCallable:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return v.list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return v.fn().kind == CallableKind::kMacro ? "Macro" : "function";
  }
  return "object";
}

bool ToStr(const Value& v, std::string* out) {
  if (v.is_undefined()) return true;
  if (v.is_string()) {
    *out += v.str();
    return true;
  }
  return ToRepr(v, out, 0);
}

bool ToRepr(const Value& v, std::string* out, int depth) {
  if (depth > kMaxValueDepth) return false;
  switch (v.kind()) {
    case Kind::kUndefined:
      *out += "Undefined";
      return true;
    case Kind::kNone:
      *out += "None";
      return true;
    case Kind::kBool:
      *out += v.b() ? "True" : "False";
      return true;
    case Kind::kInt:
      *out += std::to_string(v.i());
      return true;
    case Kind::kFloat:
      *out += PyFloatRepr(v.f());
      return true;
    case Kind::kString:
      *out += PyStrRepr(v.str());
      return true;
    case Kind::kList: {
      const List& l = v.list();
      *out += l.is_tuple ? '(' : '[';
      if (!ReprItems(l.items, out, depth)) return false;
      if (l.is_tuple && l.items.size() == 1) *out += ',';
      *out += l.is_tuple ? ')' : ']';
      return true;
    }
    case Kind::kDict:
      return ReprDict(v.dict(), out, depth);
    case Kind::kNamespace:
      *out += "<Namespace ";
      if (!ReprDict(v.ns()->attrs, out, depth)) return false;
      *out += '>';
      return true;
    case Kind::kCallable:
      *out += (v.fn().kind == CallableKind::kMacro ? "<Macro '" : "<function '") + v.fn().name + "'>";
      return true;
  }
  return true;
}

}  // namespace tessera::chat
