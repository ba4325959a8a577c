// Expression evaluation for Renderer (renderer.h): names, literals, attribute and item access as
// jinja2's sandbox resolves them, calls, filters, tests and operators.
#include <algorithm>

#include "chat/depth_guard.h"
#include "chat/library.h"
#include "chat/renderer.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

Value BoundMethod(const Value& self, const std::string& name) {
  return Value::Fn(Callable{CallableKind::kMethod, name, nullptr, nullptr, self});
}

std::string MissingAttr(const Value& obj, const std::string& name) {
  return "'" + TypeName(obj) + " object' has no attribute '" + name + "'";
}

}  // namespace

StatusOr<Value> Renderer::Eval(const Expr& e, Scope* scope) {
  DepthGuard guard(&eval_depth_);
  TESSERA_RETURN_IF_ERROR(Enter());
  if (++steps_ > limits_.max_steps) return Fail("template exceeds the work limit (an endless or runaway loop?)");
  line_ = e.line;
  return EvalNode(e, scope);
}

StatusOr<Value> Renderer::EvalNode(const Expr& e, Scope* scope) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return EvalName(e, scope);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return EvalCollection(e, scope);
    case ExprKind::kAttr:
    case ExprKind::kItem: {
      Value obj, key;
      CHAT_ASSIGN_OR_RETURN(obj, Eval(*e.items[0], scope));
      if (e.kind == ExprKind::kItem) CHAT_ASSIGN_OR_RETURN(key, Eval(*e.items[1], scope));
      line_ = e.line;
      if (obj.is_undefined()) return UndefinedError(obj);
      return e.kind == ExprKind::kAttr ? GetAttr(obj, e.name) : GetItem(obj, key);
    }
    case ExprKind::kSlice:
      return EvalSlice(e, scope);
    case ExprKind::kCall: {
      Value callee;
      CHAT_ASSIGN_OR_RETURN(callee, Eval(*e.items[0], scope));
      CallArgs args;
      TESSERA_RETURN_IF_ERROR(EvalArgs(e.args, scope, &args));
      line_ = e.line;
      return Call(callee, args);
    }
    case ExprKind::kFilter:
    case ExprKind::kTest:
      return EvalFilterOrTest(e, scope);
    case ExprKind::kNot:
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return EvalUnary(e, scope);
    case ExprKind::kBinary: {
      Value a, b;
      CHAT_ASSIGN_OR_RETURN(a, Eval(*e.items[0], scope));
      CHAT_ASSIGN_OR_RETURN(b, Eval(*e.items[1], scope));
      line_ = e.line;
      return BinaryOp(*this, e.op, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      Value a;
      CHAT_ASSIGN_OR_RETURN(a, Eval(*e.items[0], scope));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.items[1], scope);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, scope);
    case ExprKind::kCond: {
      Value c;
      CHAT_ASSIGN_OR_RETURN(c, Eval(*e.items[1], scope));
      if (Truthy(c)) return Eval(*e.items[0], scope);
      if (e.items[2]) return Eval(*e.items[2], scope);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined");
    }
  }
  return Fail("unknown expression");
}

StatusOr<Value> Renderer::EvalFilterOrTest(const Expr& e, Scope* scope) {
  Value v;
  CHAT_ASSIGN_OR_RETURN(v, Eval(*e.items[0], scope));
  CallArgs args;
  TESSERA_RETURN_IF_ERROR(EvalArgs(e.args, scope, &args));
  line_ = e.line;
  if (e.kind == ExprKind::kFilter) return ApplyFilter(e.name, v, args);
  bool r;
  CHAT_ASSIGN_OR_RETURN(r, ApplyTest(e.name, v, args));
  return Value::Bool(r != e.negated);
}

StatusOr<Value> Renderer::EvalUnary(const Expr& e, Scope* scope) {
  Value v;
  CHAT_ASSIGN_OR_RETURN(v, Eval(*e.items[0], scope));
  if (e.kind == ExprKind::kNot) return Value::Bool(!Truthy(v));
  line_ = e.line;
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number())
    return Fail("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" +
                TypeName(v) + "'");
  if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.i()) : v;
  if (v.is_float()) return Value::Float(-v.f());
  if (v.i() == INT64_MIN) return Fail("integer overflow");
  return Value::Int(-v.i());
}

StatusOr<Value> Renderer::EvalName(const Expr& e, Scope* scope) const {
  if (const Value* v = scope->Find(e.name)) return *v;
  if (IsGlobalFunction(e.name)) return Value::Fn(Callable{CallableKind::kBuiltin, e.name, nullptr, nullptr, Value()});
  return Value::Undefined("'" + e.name + "' is undefined");
}

StatusOr<Value> Renderer::EvalCollection(const Expr& e, Scope* scope) {
  std::vector<Value> items;
  items.reserve(e.items.size());
  for (const ExprPtr& x : e.items) {
    Value v;
    CHAT_ASSIGN_OR_RETURN(v, Eval(*x, scope));
    items.push_back(std::move(v));
  }
  line_ = e.line;
  if (e.kind != ExprKind::kDict) return Value::MakeList(std::move(items), e.kind == ExprKind::kTuple);
  Dict d;
  for (size_t k = 0; k + 1 < items.size(); k += 2) {
    const Value& key = items[k];
    if (key.is_list() && !key.list().is_tuple) return Fail("unhashable type: 'list'");
    if (key.is_dict() || key.is_namespace()) return Fail("unhashable type: '" + TypeName(key) + "'");
    d.Set(key, items[k + 1]);
  }
  return Value::MakeDict(std::move(d));
}

StatusOr<Value> Renderer::EvalSlice(const Expr& e, Scope* scope) {
  Value bounds[4];
  for (int k = 0; k < 4; ++k)
    if (e.items[k]) CHAT_ASSIGN_OR_RETURN(bounds[k], Eval(*e.items[k], scope));
  line_ = e.line;
  if (bounds[0].is_undefined()) return UndefinedError(bounds[0]);
  return SliceValue(*this, bounds[0], bounds[1], bounds[2], bounds[3]);
}

// a < b < c holds when each adjacent pair does (b evaluated once).
StatusOr<Value> Renderer::EvalCompare(const Expr& e, Scope* scope) {
  Value left;
  CHAT_ASSIGN_OR_RETURN(left, Eval(*e.items[0], scope));
  for (size_t k = 0; k < e.cmp.size(); ++k) {
    Value right;
    CHAT_ASSIGN_OR_RETURN(right, Eval(*e.items[k + 1], scope));
    line_ = e.line;
    bool holds;
    CHAT_ASSIGN_OR_RETURN(holds, CompareValues(*this, e.cmp[k], left, right));
    if (!holds) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Status Renderer::EvalArgs(const std::vector<Arg>& args, Scope* scope, CallArgs* out) {
  for (const Arg& a : args) {
    Value v;
    CHAT_ASSIGN_OR_RETURN(v, Eval(*a.value, scope));
    if (a.name.empty()) {
      out->pos.push_back(std::move(v));
    } else {
      out->kw.emplace_back(a.name, std::move(v));
    }
  }
  return Status::Ok();
}

StatusOr<Value> Renderer::FilterValues(const std::vector<FilterCall>& filters, Value v, Scope* scope) {
  for (const FilterCall& f : filters) {
    CallArgs args;
    TESSERA_RETURN_IF_ERROR(EvalArgs(f.args, scope, &args));
    line_ = f.line;
    CHAT_ASSIGN_OR_RETURN(v, ApplyFilter(f.name, v, args));
  }
  return v;
}

// obj.name: a method of str/dict/list first, then the item (jinja2's sandboxed getattr).
StatusOr<Value> Renderer::GetAttr(const Value& obj, const std::string& name) const {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!name.empty() && name[0] == '_') return Value::Undefined("access to attribute '" + name + "' is unsafe");
  if (IsMutatingMethod(obj, name))
    return Value::Undefined("access to attribute '" + name + "' of '" + TypeName(obj) + "' object is unsafe");
  if (HasMethod(obj, name)) return BoundMethod(obj, name);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns()->attrs.Find(name)) return *v;
  }
  return Value::Undefined(MissingAttr(obj, name));
}

// obj[key]: the item first, then (for a string key) the attribute (jinja2's sandboxed getitem).
StatusOr<Value> Renderer::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    const bool is_str = obj.is_string();
    TESSERA_RETURN_IF_ERROR(ChargeWork(is_str ? obj.str().size() / 16 : 0));
    const std::vector<char32_t> cps = is_str ? DecodeUtf8(obj.str()) : std::vector<char32_t>{};
    const auto n = static_cast<int64_t>(is_str ? cps.size() : obj.list().items.size());
    int64_t i = key.i();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (!is_str) return obj.list().items[static_cast<size_t>(i)];
      return Value::Str(EncodeUtf8(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
    return Value::Undefined(TypeName(obj) + " object has no element " + std::to_string(key.i()));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  std::string k;
  ToRepr(key, &k);
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute " + k);
}

StatusOr<Value> Renderer::Call(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) return Fail("'" + TypeName(callee) + "' object is not callable");
  const Callable& c = callee.fn();
  switch (c.kind) {
    case CallableKind::kMacro:
      return CallMacro(c, args);
    case CallableKind::kBuiltin:
      return CallGlobal(*this, c.name, args);
    case CallableKind::kMethod:
      return CallMethod(*this, c.self, c.name, args);
    case CallableKind::kLoopCycle:
      if (args.pos.empty()) return Fail("no items for cycling given");
      return args.pos[static_cast<size_t>(c.self.i()) % args.pos.size()];
  }
  return Fail("not callable");
}

StatusOr<Value> Renderer::ApplyFilter(const std::string& name, const Value& v, const CallArgs& args) {
  return CallFilter(*this, name, v, args);
}

StatusOr<bool> Renderer::ApplyTest(const std::string& name, const Value& v, const CallArgs& args) {
  return CallTest(*this, name, v, args);
}

// What `for x in v` visits: list and tuple items, dict keys, string characters; undefined is empty.
StatusOr<std::vector<Value>> Renderer::Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return std::vector<Value>{};
    case Kind::kList:
      TESSERA_RETURN_IF_ERROR(ChargeWork(v.list().items.size()));
      return v.list().items;
    case Kind::kDict: {
      TESSERA_RETURN_IF_ERROR(ChargeWork(v.dict().size()));
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, x] : v.dict().items()) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      TESSERA_RETURN_IF_ERROR(ChargeWork(v.str().size()));
      std::vector<Value> chars;
      for (char32_t c : DecodeUtf8(v.str())) {
        std::string s;
        AppendUtf8(c, &s);
        chars.push_back(Value::Str(std::move(s)));
      }
      return chars;
    }
    default:
      return Fail("'" + TypeName(v) + "' object is not iterable");
  }
}

}  // namespace tessera::chat
