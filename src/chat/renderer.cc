#include "chat/renderer.h"

#include <pthread.h>

#include <algorithm>

#include "chat/depth_guard.h"
#include "chat/library.h"
#include "chat/lexer.h"
#include "chat/status_macros.h"

namespace tessera::chat {
namespace {

// The lowest address this thread's stack may reach while rendering: `budget` below the current
// frame, or less when the thread's stack is smaller (leaving a margin for whatever runs on top).
uintptr_t StackFloor(size_t budget) {
  char here;
  const auto sp = reinterpret_cast<uintptr_t>(&here);
  thread_local uintptr_t lowest = 0;  // the thread's stack does not move: ask once per thread
  thread_local bool known = false;
  if (!known) {
    known = true;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) lowest = reinterpret_cast<uintptr_t>(addr);
      pthread_attr_destroy(&attr);
    }
  }
  constexpr size_t kMargin = 256u << 10;
  if (lowest == 0 || sp <= lowest + 2 * kMargin) return sp - std::min<size_t>(budget, 256u << 10);
  return sp - std::min(budget, sp - lowest - kMargin);
}

}  // namespace

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::Set(const std::string& name, Value v) {
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Status Renderer::Fail(std::string_view message) const { return TemplateError(name_, line_, message); }

Status Renderer::UndefinedError(const Value& v) const { return Fail(v.undefined_hint()); }

Status Renderer::ChargeText(size_t bytes) {
  if (bytes > limits_.max_string_bytes)
    return Fail("text grows past the limit of " + std::to_string(limits_.max_string_bytes) + " bytes");
  steps_ += static_cast<int64_t>(bytes / 16);
  if (steps_ > limits_.max_steps) return Fail("template exceeds the work limit (an endless or runaway loop?)");
  return Status::Ok();
}

Status Renderer::ChargeWork(size_t units) {
  steps_ += static_cast<int64_t>(std::min<size_t>(units, static_cast<size_t>(limits_.max_steps) + 1));
  if (steps_ > limits_.max_steps) return Fail("template exceeds the work limit (an endless or runaway loop?)");
  return Status::Ok();
}

Status Renderer::CheckItems(size_t n) const {
  if (n > limits_.max_items) return Fail("a list grows past the limit of " + std::to_string(limits_.max_items) + " items");
  return Status::Ok();
}

Status Renderer::Bind(std::string_view fn, const CallArgs& args, std::initializer_list<const char*> names,
                      std::vector<Value>* out) const {
  out->assign(names.size(), Value());
  if (args.pos.size() > names.size())
    return Fail(std::string(fn) + "() takes at most " + std::to_string(names.size()) + " argument(s), got " +
                std::to_string(args.pos.size()));
  std::copy(args.pos.begin(), args.pos.end(), out->begin());
  for (const auto& kv : args.kw) {
    const std::string& key = kv.first;
    const Value& v = kv.second;
    auto it = std::find_if(names.begin(), names.end(), [&key](const char* n) { return key == n; });
    if (it == names.end()) return Fail(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    const size_t at = static_cast<size_t>(it - names.begin());
    if (at < args.pos.size()) return Fail(std::string(fn) + "() got multiple values for argument '" + key + "'");
    (*out)[at] = v;
  }
  return Status::Ok();
}

StatusOr<std::string> Renderer::Str(const Value& v) {
  std::string s;
  if (!ToStr(v, &s)) return Fail("value nested too deeply to print");
  TESSERA_RETURN_IF_ERROR(ChargeText(s.size()));
  return s;
}

Namespace* Renderer::NewNamespace() {
  namespaces_.push_back(std::make_unique<Namespace>());
  return namespaces_.back().get();
}

std::shared_ptr<Scope> Renderer::Child(const std::shared_ptr<Scope>& parent) const {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

StatusOr<std::string> Renderer::Render(const Body& root, const Dict& context) {
  auto top = std::make_shared<Scope>();
  for (const auto& [k, v] : context.items())
    if (k.is_string()) top->Set(k.str(), v);
  stack_floor_ = StackFloor(limits_.max_stack_bytes);
  std::string out;
  Status st = Exec(root, top, &out);
  kept_scopes_.clear();  // before the namespaces their values may point to
  if (!st.ok()) return st;
  return out;
}

Status Renderer::Enter() {
  char probe;
  if (eval_depth_ > limits_.max_eval_depth || reinterpret_cast<uintptr_t>(&probe) < stack_floor_)
    return Fail("template nests too deeply (recursion?)");
  return Status::Ok();
}

Status Renderer::Exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string* out) {
  DepthGuard guard(&eval_depth_);
  TESSERA_RETURN_IF_ERROR(Enter());
  for (const StmtPtr& s : body) {
    line_ = s->line;
    if (++steps_ > limits_.max_steps) return Fail("template exceeds the work limit (an endless or runaway loop?)");
    TESSERA_RETURN_IF_ERROR(ExecStmt(*s, scope, out));
    if (out->size() > limits_.max_string_bytes)
      return Fail("output grows past the limit of " + std::to_string(limits_.max_string_bytes) + " bytes");
    if (flow_ != Flow::kNormal) return Status::Ok();
  }
  return Status::Ok();
}

Status Renderer::ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
  switch (s.kind) {
    case StmtKind::kText:
      *out += s.text;
      return ChargeText(s.text.size());
    case StmtKind::kOutput: {
      Value v;
      CHAT_ASSIGN_OR_RETURN(v, Eval(*s.expr, scope.get()));
      std::string text;
      CHAT_ASSIGN_OR_RETURN(text, Str(v));
      *out += text;
      return Status::Ok();
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        bool take = true;
        if (cond) {
          Value c;
          CHAT_ASSIGN_OR_RETURN(c, Eval(*cond, scope.get()));
          take = Truthy(c);
        }
        if (take) return Exec(body, scope, out);
      }
      return Status::Ok();
    case StmtKind::kFor:
      return ExecFor(s, scope, out);
    case StmtKind::kSet: {
      Value v;
      CHAT_ASSIGN_OR_RETURN(v, Eval(*s.expr, scope.get()));
      line_ = s.line;
      return Assign(s.target, v, scope.get());
    }
    case StmtKind::kMacro: {
      Callable c{CallableKind::kMacro, s.macro->name, s.macro.get(), scope.get(), Value()};
      kept_scopes_.push_back(scope);
      scope->Set(s.macro->name, Value::Fn(std::move(c)));
      return Status::Ok();
    }
    case StmtKind::kCallBlock:
      return ExecCallBlock(s, scope, out);
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock:
    case StmtKind::kWith:
    case StmtKind::kGeneration:
      return ExecCaptured(s, scope, out);
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::Ok();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::Ok();
  }
  return Status::Ok();
}

// Statements whose body renders in a scope of its own: block set, filter, with, generation.
Status Renderer::ExecCaptured(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
  std::shared_ptr<Scope> inner = Child(scope);
  if (s.kind == StmtKind::kWith) {
    for (const auto& [target, expr] : s.assigns) {
      Value v;
      CHAT_ASSIGN_OR_RETURN(v, Eval(*expr, scope.get()));
      TESSERA_RETURN_IF_ERROR(Assign(target, v, inner.get()));
    }
    return Exec(s.body, inner, out);
  }
  if (s.kind == StmtKind::kGeneration) return Exec(s.body, inner, out);
  std::string text;
  TESSERA_RETURN_IF_ERROR(Exec(s.body, inner, &text));
  Value v;
  CHAT_ASSIGN_OR_RETURN(v, FilterValues(s.filters, Value::Str(std::move(text)), scope.get()));
  line_ = s.line;
  if (s.kind == StmtKind::kSetBlock) return Assign(s.target, v, scope.get());
  std::string printed;
  CHAT_ASSIGN_OR_RETURN(printed, Str(v));
  *out += printed;
  return Status::Ok();
}

Status Renderer::Assign(const Target& t, const Value& v, Scope* scope) {
  if (v.depth() > kMaxValueDepth) return Fail("value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
  if (!t.attr.empty()) {
    const Value* ns = scope->Find(t.names[0]);
    if (!ns || !ns->is_namespace()) return Fail("cannot assign attribute on non-namespace object '" + t.names[0] + "'");
    if (t.attr[0] == '_')
      return Fail("chat templates cannot store underscore-prefixed attributes on a namespace ('" + t.attr + "')");
    ns->ns()->attrs.Set(Value::Str(t.attr), v);
    return Status::Ok();
  }
  if (!t.unpack) {
    scope->Set(t.names[0], v);
    return Status::Ok();
  }
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, Iterate(v));
  if (items.size() != t.names.size())
    return Fail("cannot unpack " + std::to_string(items.size()) + " value(s) into " + std::to_string(t.names.size()) +
                " names");
  for (size_t k = 0; k < items.size(); ++k) scope->Set(t.names[k], items[k]);
  return Status::Ok();
}

// jinja2's `loop`: index, index0, revindex, revindex0, first, last, length, previtem, nextitem,
// depth, depth0, and cycle(...).
Value Renderer::LoopValue(const std::vector<Value>& items, size_t index) const {
  static const Value kKeys[] = {Value::Str("index"),  Value::Str("index0"), Value::Str("revindex"),
                                Value::Str("revindex0"), Value::Str("first"), Value::Str("last"),
                                Value::Str("length"), Value::Str("depth"),  Value::Str("depth0"),
                                Value::Str("previtem"), Value::Str("nextitem"), Value::Str("cycle")};
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(index);
  Dict d;
  d.Set(kKeys[0], Value::Int(i + 1));
  d.Set(kKeys[1], Value::Int(i));
  d.Set(kKeys[2], Value::Int(n - i));
  d.Set(kKeys[3], Value::Int(n - i - 1));
  d.Set(kKeys[4], Value::Bool(i == 0));
  d.Set(kKeys[5], Value::Bool(i == n - 1));
  d.Set(kKeys[6], Value::Int(n));
  d.Set(kKeys[7], Value::Int(1));
  d.Set(kKeys[8], Value::Int(0));
  if (i > 0) d.Set(kKeys[9], items[index - 1]);
  if (i + 1 < n) d.Set(kKeys[10], items[index + 1]);
  d.Set(kKeys[11], Value::Fn(Callable{CallableKind::kLoopCycle, "loop.cycle", nullptr, nullptr, Value::Int(i)}));
  return Value::MakeDict(std::move(d));
}

Status Renderer::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
  Value seq;
  CHAT_ASSIGN_OR_RETURN(seq, Eval(*s.expr, scope.get()));
  line_ = s.line;
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, Iterate(seq));
  if (s.cond) {  // `for x in xs if cond`: the loop (and loop.length) sees only the kept items
    std::vector<Value> kept;
    for (Value& item : items) {
      TESSERA_RETURN_IF_ERROR(ChargeWork(2));
      std::shared_ptr<Scope> probe = Child(scope);
      TESSERA_RETURN_IF_ERROR(Assign(s.target, item, probe.get()));
      Value keep;
      CHAT_ASSIGN_OR_RETURN(keep, Eval(*s.cond, probe.get()));
      if (Truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return Exec(s.else_body, scope, out);
  for (size_t k = 0; k < items.size(); ++k) {
    TESSERA_RETURN_IF_ERROR(ChargeWork(s.uses_loop ? 12 : 4));  // a scope, and a loop object
    std::shared_ptr<Scope> iter = Child(scope);
    line_ = s.line;
    TESSERA_RETURN_IF_ERROR(Assign(s.target, items[k], iter.get()));
    if (s.uses_loop) iter->Set("loop", LoopValue(items, k));
    TESSERA_RETURN_IF_ERROR(Exec(s.body, iter, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::Ok();
}

// {% call(params) m(args) %}body{% endcall %}: m is called with `caller` rendering the body.
Status Renderer::ExecCallBlock(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
  const Expr& call = *s.expr;
  Value callee;
  CHAT_ASSIGN_OR_RETURN(callee, Eval(*call.items[0], scope.get()));
  CallArgs args;
  TESSERA_RETURN_IF_ERROR(EvalArgs(call.args, scope.get(), &args));
  line_ = s.line;
  if (!callee.is_callable() || callee.fn().kind != CallableKind::kMacro)
    return Fail("a call block needs a macro to call");
  kept_scopes_.push_back(scope);
  Callable caller{CallableKind::kMacro, "caller", s.macro.get(), scope.get(), Value()};
  Callable with_caller = callee.fn();
  with_caller.self = Value::Fn(std::move(caller));
  Value result;
  CHAT_ASSIGN_OR_RETURN(result, CallMacro(with_caller, args));
  std::string text;
  CHAT_ASSIGN_OR_RETURN(text, Str(result));
  *out += text;
  return Status::Ok();
}

StatusOr<Value> Renderer::CallMacro(const Callable& c, const CallArgs& args) {
  const MacroDef& m = *c.macro;
  if (call_depth_ >= limits_.max_call_depth)
    return Fail("macro calls nest deeper than " + std::to_string(limits_.max_call_depth) + " (endless recursion?)");
  if (args.pos.size() > m.params.size())
    return Fail("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)");
  auto scope = std::make_shared<Scope>();
  scope->parent = c.scope->shared_from_this();
  std::vector<bool> bound(m.params.size(), false);
  for (size_t k = 0; k < args.pos.size(); ++k) scope->Set(m.params[k], args.pos[k]), bound[k] = true;
  for (const auto& [key, v] : args.kw) {
    auto it = std::find(m.params.begin(), m.params.end(), key);
    if (it == m.params.end()) return Fail("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    const size_t at = static_cast<size_t>(it - m.params.begin());
    if (bound[at]) return Fail("macro '" + m.name + "' got multiple values for argument '" + key + "'");
    scope->Set(key, v), bound[at] = true;
  }
  for (size_t k = 0; k < m.params.size(); ++k) {
    if (bound[k]) continue;
    Value v = Value::Undefined("parameter '" + m.params[k] + "' was not provided");
    if (m.defaults[k]) CHAT_ASSIGN_OR_RETURN(v, Eval(*m.defaults[k], scope.get()));
    scope->Set(m.params[k], std::move(v));
  }
  if (c.self.is_callable()) scope->Set("caller", c.self);
  ++call_depth_;
  const int line = line_;
  std::string text;
  Status st = Exec(m.body, scope, &text);
  --call_depth_;
  TESSERA_RETURN_IF_ERROR(st);
  line_ = line;
  return Value::Str(std::move(text));
}

}  // namespace tessera::chat
