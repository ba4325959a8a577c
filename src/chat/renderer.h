// Executes a parsed template: scopes as jinja2 has them (each loop iteration and macro call gets
// its own; a macro sees the scope it was defined in), macros, filters, tests and methods, with
// limits on work, text size and call depth so that no template can hang or exhaust memory.
// One Renderer is one render: it owns the namespaces and scopes the render creates.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"
#include "tessera/status.h"

namespace tessera::chat {

struct Scope : std::enable_shared_from_this<Scope> {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(std::string_view name) const;  // here, then the enclosing scopes
  void Set(const std::string& name, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct RenderLimits {
  int64_t max_steps = 10'000'000;     // nodes evaluated, plus one per 16 bytes of text built
  size_t max_string_bytes = 16 << 20;  // any one string, the output included
  size_t max_items = 1 << 20;          // elements of one list or dict
  int max_call_depth = 200;            // nested macro calls
  int max_eval_depth = 4000;           // nested statement/expression evaluation, all calls together
  size_t max_stack_bytes = 4u << 20;   // stack the render may use (less when the thread has less)
};

class Renderer {
 public:
  Renderer(const std::string& name, const RenderLimits& limits) : name_(name), limits_(limits) {}

  // Renders `root` with `context` (messages, add_generation_prompt, ...) as the outermost scope.
  StatusOr<std::string> Render(const Body& root, const Dict& context);

  // For filters, tests, methods and global functions (evaluation state is the current node).
  Status Fail(std::string_view message) const;
  Status UndefinedError(const Value& v) const;
  Status ChargeText(size_t bytes);  // a string of `bytes` is built: size limit, and work
  Status ChargeWork(size_t units);  // work proportional to `units` (bytes / 16, or items)
  Status CheckItems(size_t n) const;
  // Binds Python-style arguments to parameters `names` (unbound ones stay undefined).
  Status Bind(std::string_view fn, const CallArgs& args, std::initializer_list<const char*> names,
              std::vector<Value>* out) const;
  StatusOr<std::string> Str(const Value& v);
  StatusOr<std::vector<Value>> Iterate(const Value& v);
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name) const;
  StatusOr<Value> GetItem(const Value& obj, const Value& key);
  StatusOr<Value> Call(const Value& callee, const CallArgs& args);
  StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const CallArgs& args);
  StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args);
  Namespace* NewNamespace();
  int line() const { return line_; }

 private:
  // Statements (renderer.cc).
  Status Exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecCallBlock(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecCaptured(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status Assign(const Target& t, const Value& v, Scope* scope);
  StatusOr<Value> CallMacro(const Callable& c, const CallArgs& args);
  Value LoopValue(const std::vector<Value>& items, size_t index) const;
  std::shared_ptr<Scope> Child(const std::shared_ptr<Scope>& parent) const;
  // One more level of evaluation: refused past max_eval_depth or when the stack runs low.
  Status Enter();

  // Expressions (eval.cc).
  StatusOr<Value> Eval(const Expr& e, Scope* scope);
  StatusOr<Value> EvalNode(const Expr& e, Scope* scope);
  StatusOr<Value> EvalName(const Expr& e, Scope* scope) const;
  StatusOr<Value> EvalFilterOrTest(const Expr& e, Scope* scope);
  StatusOr<Value> EvalUnary(const Expr& e, Scope* scope);
  StatusOr<Value> EvalCollection(const Expr& e, Scope* scope);
  StatusOr<Value> EvalSlice(const Expr& e, Scope* scope);
  StatusOr<Value> EvalCompare(const Expr& e, Scope* scope);
  Status EvalArgs(const std::vector<Arg>& args, Scope* scope, CallArgs* out);
  StatusOr<Value> FilterValues(const std::vector<FilterCall>& filters, Value v, Scope* scope);

  const std::string& name_;
  RenderLimits limits_;
  int line_ = 0;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  uintptr_t stack_floor_ = 0;  // evaluation stops before the stack pointer goes below this
  enum class Flow : uint8_t { kNormal, kBreak, kContinue } flow_ = Flow::kNormal;
  std::vector<std::unique_ptr<Namespace>> namespaces_;
  std::vector<std::shared_ptr<Scope>> kept_scopes_;  // scopes macros were defined in
};

}  // namespace tessera::chat
