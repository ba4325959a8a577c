// The parsed template: expression and statement nodes of the Jinja subset chat templates use.
// Nodes carry their source line for error messages; the tree is immutable once parsed, so one
// parsed template renders from any number of threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace tessera::chat {

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // items
  kTuple,    // items
  kDict,     // items: key, value, key, value...
  kAttr,     // items[0].name
  kItem,     // items[0][items[1]]
  kSlice,    // items[0][items[1]:items[2]:items[3]] (each bound may be null)
  kCall,     // items[0](args)
  kFilter,   // items[0] | name(args)
  kTest,     // items[0] is [not] name(args)
  kNot,      // not items[0]
  kNeg,      // -items[0]
  kPos,      // +items[0]
  kBinary,   // items[0] op items[1]
  kAnd,      // items[0] and items[1]
  kOr,       // items[0] or items[1]
  kCompare,  // items[0] ops[0] items[1] ops[1] items[2]...
  kCond,     // items[0] if items[1] else items[2] (items[2] may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// A call argument: positional when `name` is empty.
struct Arg {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;  // nesting of this subtree (bounded at parse time)
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<Arg> args;
  BinOp op = BinOp::kAdd;
  std::vector<CmpOp> cmp;
  bool negated = false;  // kTest: `is not`
};

// A filter applied by a block: {% filter upper %} or {% set x | trim %}.
struct FilterCall {
  std::string name;
  std::vector<Arg> args;
  int line = 0;
};

enum class StmtKind : uint8_t {
  kText,         // template data
  kOutput,       // {{ expr }}
  kIf,           // branches (a null condition is the else branch)
  kFor,          // target in expr [if cond]: body, else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target | filters %}body{% endset %}
  kMacro,        // {% macro %}: macro
  kCallBlock,    // {% call(params) expr %}body{% endcall %}: expr, macro (the caller)
  kFilterBlock,  // {% filter f %}body{% endfilter %}
  kWith,         // {% with a = x %}body{% endwith %}
  kBreak,
  kContinue,
  kGeneration,   // transformers' {% generation %}body{% endgeneration %}: renders its body
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: one name, several names (tuple unpacking), or a namespace attribute.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: names[0].attr
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param; null when the parameter has none
  Body body;
  int line = 0;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Target target;
  ExprPtr cond;
  Body body;
  Body else_body;
  std::vector<FilterCall> filters;
  std::unique_ptr<MacroDef> macro;
  std::vector<std::pair<Target, ExprPtr>> assigns;
  bool uses_loop = false;  // kFor: the body mentions `loop` (else no loop object is built)
};

}  // namespace tessera::chat
