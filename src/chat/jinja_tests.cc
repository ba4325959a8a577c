// jinja2's tests (`x is defined`, `x is string`, `x is divisibleby 3`...) with Python's type
// model: bools are numbers, strings and dicts are sequences, undefined is iterable.
#include <algorithm>

#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

using TestFn = StatusOr<bool> (*)(Renderer&, const Value&, const CallArgs&);

StatusOr<Value> OneArg(Renderer& r, const char* name, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind(name, args, {"other"}, &a));
  if (args.pos.empty() && args.kw.empty()) return r.Fail(std::string("the '") + name + "' test needs an argument");
  return a[0];
}

template <Kind K>
StatusOr<bool> KindIs(Renderer&, const Value& v, const CallArgs&) {
  return v.kind() == K;
}

StatusOr<bool> Defined(Renderer&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
StatusOr<bool> Undefined(Renderer&, const Value& v, const CallArgs&) { return v.is_undefined(); }
StatusOr<bool> True(Renderer&, const Value& v, const CallArgs&) { return v.is_bool() && v.b(); }
StatusOr<bool> False(Renderer&, const Value& v, const CallArgs&) { return v.is_bool() && !v.b(); }
StatusOr<bool> Number(Renderer&, const Value& v, const CallArgs&) { return v.is_number(); }
StatusOr<bool> Iterable(Renderer&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
StatusOr<bool> Sequence(Renderer&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
// Undefined is callable in jinja2 (calling it is the error).
StatusOr<bool> Callable(Renderer&, const Value& v, const CallArgs&) { return v.is_callable() || v.is_undefined(); }
StatusOr<bool> Escaped(Renderer&, const Value&, const CallArgs&) { return false; }

StatusOr<bool> Lower(Renderer& r, const Value& v, const CallArgs&) {
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  return PyLower(s) == s && PyUpper(s) != s;  // str.islower(): cased characters, all lower
}

StatusOr<bool> Upper(Renderer& r, const Value& v, const CallArgs&) {
  std::string s;
  CHAT_ASSIGN_OR_RETURN(s, r.Str(v));
  return PyUpper(s) == s && PyLower(s) != s;
}

StatusOr<bool> SameAs(Renderer& r, const Value& v, const CallArgs& args) {
  Value o;
  CHAT_ASSIGN_OR_RETURN(o, OneArg(r, "sameas", args));
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.b() == o.b();
  if (v.is_int()) return v.i() == o.i() && v.i() >= -5 && v.i() <= 256;  // CPython's shared small ints
  if (v.is_namespace()) return v.ns() == o.ns();
  return false;
}

template <CmpOp Op>
StatusOr<bool> Cmp(Renderer& r, const Value& v, const CallArgs& args) {
  Value o;
  CHAT_ASSIGN_OR_RETURN(o, OneArg(r, "comparison", args));
  return CompareValues(r, Op, v, o);
}

StatusOr<bool> In(Renderer& r, const Value& v, const CallArgs& args) {
  Value o;
  CHAT_ASSIGN_OR_RETURN(o, OneArg(r, "in", args));
  return Contains(r, o, v);
}

StatusOr<bool> DivisibleBy(Renderer& r, const Value& v, const CallArgs& args) {
  Value o;
  CHAT_ASSIGN_OR_RETURN(o, OneArg(r, "divisibleby", args));
  Value m;
  CHAT_ASSIGN_OR_RETURN(m, BinaryOp(r, BinOp::kMod, v, o));
  return Equals(m, Value::Int(0));
}

template <int Rem>
StatusOr<bool> Parity(Renderer& r, const Value& v, const CallArgs&) {
  Value m;
  CHAT_ASSIGN_OR_RETURN(m, BinaryOp(r, BinOp::kMod, v, Value::Int(2)));
  return Equals(m, Value::Int(Rem));
}

StatusOr<bool> IsFilter(Renderer&, const Value& v, const CallArgs&) { return v.is_string() && IsFilterName(v.str()); }
StatusOr<bool> IsTest(Renderer&, const Value& v, const CallArgs&) { return v.is_string() && IsTestName(v.str()); }

struct NamedTest {
  const char* name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"defined", Defined},
    {"undefined", Undefined},
    {"none", KindIs<Kind::kNone>},
    {"boolean", KindIs<Kind::kBool>},
    {"true", True},
    {"false", False},
    {"integer", KindIs<Kind::kInt>},
    {"float", KindIs<Kind::kFloat>},
    {"number", Number},
    {"string", KindIs<Kind::kString>},
    {"mapping", KindIs<Kind::kDict>},
    {"iterable", Iterable},
    {"sequence", Sequence},
    {"callable", Callable},
    {"escaped", Escaped},
    {"lower", Lower},
    {"upper", Upper},
    {"sameas", SameAs},
    {"in", In},
    {"eq", Cmp<CmpOp::kEq>},
    {"equalto", Cmp<CmpOp::kEq>},
    {"==", Cmp<CmpOp::kEq>},
    {"ne", Cmp<CmpOp::kNe>},
    {"!=", Cmp<CmpOp::kNe>},
    {"lt", Cmp<CmpOp::kLt>},
    {"lessthan", Cmp<CmpOp::kLt>},
    {"<", Cmp<CmpOp::kLt>},
    {"le", Cmp<CmpOp::kLe>},
    {"<=", Cmp<CmpOp::kLe>},
    {"gt", Cmp<CmpOp::kGt>},
    {"greaterthan", Cmp<CmpOp::kGt>},
    {">", Cmp<CmpOp::kGt>},
    {"ge", Cmp<CmpOp::kGe>},
    {">=", Cmp<CmpOp::kGe>},
    {"divisibleby", DivisibleBy},
    {"odd", Parity<1>},
    {"even", Parity<0>},
    {"filter", IsFilter},
    {"test", IsTest},
};

}  // namespace

StatusOr<bool> CallTest(Renderer& r, const std::string& name, const Value& v, const CallArgs& args) {
  if (const NamedTest* t = FindByName(kTests, name)) return t->fn(r, v, args);
  return r.Fail("no test named '" + name + "'");
}

bool IsTestName(std::string_view name) { return FindByName(kTests, name) != nullptr; }

}  // namespace tessera::chat
