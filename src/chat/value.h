// The values a chat template computes with: Python's data model as jinja2 sees it (undefined,
// None, bool, int, float, str, list/tuple, dict, namespace, and callables). Strings, lists and
// dicts are immutable once built (transformers renders in jinja2's immutable sandbox), so a value
// shares them by pointer; a namespace is the one mutable object and lives as long as the render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::chat {

class Value;
struct List;
class Dict;
struct Namespace;
struct Callable;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

class Value {
 public:
  Value() = default;  // undefined, with no hint
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value Str(std::string v);
  static Value MakeList(std::vector<Value> items, bool tuple = false);
  static Value MakeDict(Dict d);
  static Value Ns(Namespace* ns);
  static Value Fn(Callable c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // bool, int and float: Python's numbers (True + 1 == 2).
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  // bool or int, usable as an index or count.
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }

  bool b() const { return b_; }
  int64_t i() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double f() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i()); }
  const std::string& str() const { return *static_cast<const std::string*>(ptr_.get()); }
  const List& list() const { return *static_cast<const List*>(ptr_.get()); }
  const Dict& dict() const { return *static_cast<const Dict*>(ptr_.get()); }
  Namespace* ns() const { return ns_; }
  const Callable& fn() const { return *static_cast<const Callable*>(ptr_.get()); }
  // Why the value is undefined ("'x' is undefined"), for the error when it is used.
  std::string undefined_hint() const;
  // Levels of list/dict nesting (0 for scalars); the renderer refuses to store values nested past
  // kMaxValueDepth, so no value is ever deep enough for its destructor to exhaust the stack.
  int depth() const { return depth_; }

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  Kind kind_ = Kind::kUndefined;
  uint16_t depth_ = 0;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
    Namespace* ns_;
  };
  std::shared_ptr<const void> ptr_;  // the string, list, dict, callable, or undefined hint
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

// A dict keeps insertion order (as Python's). Small dicts (messages, loop objects) are searched
// in order; past kIndexFrom entries string keys get a hash index. Other keys (ints, bools, None,
// tuples from template literals) are few and found by Python equality.
class Dict {
 public:
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts, or replaces the value of an equal key in place.
  void Set(Value key, Value value);
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  static constexpr size_t kIndexFrom = 8;
  Value* FindSlot(const Value& key);
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> str_index_;  // empty until the dict outgrows kIndexFrom
};

// jinja2's namespace(): attributes assignable with {% set ns.attr = ... %} from any scope.
struct Namespace {
  Dict attrs;
};

struct MacroDef;
struct Scope;

enum class CallableKind : uint8_t { kMacro, kBuiltin, kMethod, kLoopCycle };

struct Callable {
  CallableKind kind = CallableKind::kBuiltin;
  std::string name;                // the macro, global function or method name
  const MacroDef* macro = nullptr;  // kMacro: its definition (owned by the parsed template)
  Scope* scope = nullptr;           // kMacro: the scope it was defined in (kept alive by the render)
  Value self;                       // kMethod: the receiver; kMacro: `caller` for a call block
};

// Python truthiness (undefined is false).
bool Truthy(const Value& v);
// Python ==: numbers across int/float/bool, lists and tuples never equal each other, dicts by
// content. `depth` guards recursion through nested data.
bool Equals(const Value& a, const Value& b, int depth = 0);
// Python's name for the type, for messages ("int", "str", "list", "dict", "NoneType"...).
std::string TypeName(const Value& v);
// str(v) and repr(v) as Python prints them; undefined prints as "". Errors only past
// kMaxValueDepth levels of nesting (a namespace holding itself).
bool ToStr(const Value& v, std::string* out);
bool ToRepr(const Value& v, std::string* out, int depth = 0);

// Deeper values are refused (printing, comparing and serializing recurse once per level).
inline constexpr int kMaxValueDepth = 256;

}  // namespace tessera::chat
