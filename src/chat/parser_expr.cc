// Expression parsing for Parser (parser.h): one function per jinja2 precedence level, lowest first.
#include <algorithm>

#include "chat/depth_guard.h"
#include "chat/parser.h"
#include "chat/status_macros.h"

namespace tessera::chat {
namespace {

bool TupleEnd(const Token& t) {
  return t.kind == TokKind::kVarEnd || t.kind == TokKind::kBlockEnd || t.kind == TokKind::kEof ||
         (t.kind == TokKind::kOp && t.text == ")");
}

}  // namespace

ExprPtr Parser::Node(ExprKind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

StatusOr<ExprPtr> Parser::Seal(ExprPtr e) const {
  int child = 0;
  for (const ExprPtr& c : e->items)
    if (c) child = std::max(child, c->depth);
  for (const Arg& a : e->args) child = std::max(child, a.value->depth);
  e->depth = child + 1;
  if (e->depth > kMaxExprDepth) return TemplateError(name_, e->line, "expression nested too deeply");
  return e;
}

// One expression, or several separated by commas (a tuple), as in {{ a, b }} and {% set x = 1, 2 %}.
StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr, bool explicit_parentheses) {
  const int line = Cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    if (TupleEnd(Cur()) || (!with_condexpr && IsName("if"))) break;
    ExprPtr e;
    CHAT_ASSIGN_OR_RETURN(e, ParseExpression(with_condexpr));
    items.push_back(std::move(e));
    if (!IsOp(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) return Fail("expected an expression, got " + Describe(Cur()));
  }
  ExprPtr t = Node(ExprKind::kTuple, line);
  t->items = std::move(items);
  return Seal(std::move(t));
}

StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(&nesting_);
  if (guard.depth() > kMaxParseNesting) return Fail("expression nested too deeply");
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

// a if cond else b (the else part optional: then the value is undefined when cond is false).
StatusOr<ExprPtr> Parser::ParseCondExpr() {
  ExprPtr expr;
  CHAT_ASSIGN_OR_RETURN(expr, ParseOr());
  while (IsName("if")) {
    const int line = Cur().line;
    Next();
    ExprPtr cond, other;
    CHAT_ASSIGN_OR_RETURN(cond, ParseOr());
    if (SkipName("else")) {
      DepthGuard guard(&nesting_);
      if (guard.depth() > kMaxParseNesting) return Fail("expression nested too deeply");
      CHAT_ASSIGN_OR_RETURN(other, ParseCondExpr());
    }
    ExprPtr c = Node(ExprKind::kCond, line);
    c->items.push_back(std::move(expr));
    c->items.push_back(std::move(cond));
    c->items.push_back(std::move(other));
    CHAT_ASSIGN_OR_RETURN(expr, Seal(std::move(c)));
  }
  return expr;
}

// One left-associative level: operands from `next`, joined by any of `ops`.
StatusOr<ExprPtr> Parser::ParseBinaryLevel(StatusOr<ExprPtr> (Parser::*next)(), std::initializer_list<OpToken> ops) {
  ExprPtr left;
  CHAT_ASSIGN_OR_RETURN(left, (this->*next)());
  while (true) {
    const OpToken* hit = nullptr;
    for (const OpToken& o : ops) {
      if (o.is_name ? IsName(o.text) : IsOp(o.text)) {
        hit = &o;
        break;
      }
    }
    if (!hit) return left;
    ExprPtr n = Node(hit->kind, Cur().line);
    n->op = hit->op;
    Next();
    ExprPtr right;
    CHAT_ASSIGN_OR_RETURN(right, (this->*next)());
    n->items.push_back(std::move(left));
    n->items.push_back(std::move(right));
    CHAT_ASSIGN_OR_RETURN(left, Seal(std::move(n)));
  }
}

StatusOr<ExprPtr> Parser::ParseOr() { return ParseBinaryLevel(&Parser::ParseAnd, {{"or", true, ExprKind::kOr}}); }

StatusOr<ExprPtr> Parser::ParseAnd() { return ParseBinaryLevel(&Parser::ParseNot, {{"and", true, ExprKind::kAnd}}); }

StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  DepthGuard guard(&nesting_);
  if (guard.depth() > kMaxParseNesting) return Fail("expression nested too deeply");
  ExprPtr n = Node(ExprKind::kNot, Cur().line);
  Next();
  ExprPtr operand;
  CHAT_ASSIGN_OR_RETURN(operand, ParseNot());
  n->items.push_back(std::move(operand));
  return Seal(std::move(n));
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  const int line = Cur().line;
  ExprPtr first;
  CHAT_ASSIGN_OR_RETURN(first, ParseMath1());
  ExprPtr n = Node(ExprKind::kCompare, line);
  n->items.push_back(std::move(first));
  static const std::pair<std::string_view, CmpOp> kOps[] = {{"==", CmpOp::kEq}, {"!=", CmpOp::kNe}, {"<", CmpOp::kLt},
                                                            {"<=", CmpOp::kLe}, {">", CmpOp::kGt},  {">=", CmpOp::kGe}};
  while (true) {
    CmpOp op;
    auto it = std::find_if(std::begin(kOps), std::end(kOps), [this](const auto& p) { return IsOp(p.first); });
    if (it != std::end(kOps)) {
      op = it->second;
      Next();
    } else if (IsName("in")) {
      op = CmpOp::kIn;
      Next();
    } else if (IsName("not") && Peek().kind == TokKind::kName && Peek().text == "in") {
      op = CmpOp::kNotIn;
      Next(), Next();
    } else {
      break;
    }
    ExprPtr rhs;
    CHAT_ASSIGN_OR_RETURN(rhs, ParseMath1());
    n->cmp.push_back(op);
    n->items.push_back(std::move(rhs));
  }
  if (n->cmp.empty()) return std::move(n->items[0]);
  return Seal(std::move(n));
}

StatusOr<ExprPtr> Parser::ParseMath1() {
  return ParseBinaryLevel(&Parser::ParseConcat, {{"+", false, ExprKind::kBinary, BinOp::kAdd},
                                                 {"-", false, ExprKind::kBinary, BinOp::kSub}});
}

StatusOr<ExprPtr> Parser::ParseConcat() {
  return ParseBinaryLevel(&Parser::ParseMath2, {{"~", false, ExprKind::kBinary, BinOp::kConcat}});
}

StatusOr<ExprPtr> Parser::ParseMath2() {
  return ParseBinaryLevel(&Parser::ParsePow, {{"*", false, ExprKind::kBinary, BinOp::kMul},
                                              {"/", false, ExprKind::kBinary, BinOp::kDiv},
                                              {"//", false, ExprKind::kBinary, BinOp::kFloorDiv},
                                              {"%", false, ExprKind::kBinary, BinOp::kMod}});
}

StatusOr<ExprPtr> Parser::ParsePow() {
  return ParseBinaryLevel(&Parser::ParseFilteredUnary, {{"**", false, ExprKind::kBinary, BinOp::kPow}});
}

StatusOr<ExprPtr> Parser::ParseFilteredUnary() { return ParseUnary(true); }

// -x and +x bind to the operand with its postfix (attributes, calls) but before its filters:
// -x|abs is (-x)|abs, as in jinja2.
StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&nesting_);
  if (guard.depth() > kMaxParseNesting) return Fail("expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = Node(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Cur().line);
    Next();
    ExprPtr operand;
    CHAT_ASSIGN_OR_RETURN(operand, ParseUnary(false));
    node->items.push_back(std::move(operand));
    CHAT_ASSIGN_OR_RETURN(node, Seal(std::move(node)));
  } else {
    CHAT_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  CHAT_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  ExprPtr n = Node(ExprKind::kLiteral, t.line);
  if (t.kind == TokKind::kName) {
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      n->literal = Value::Bool(t.text[0] == 't' || t.text[0] == 'T');
    } else if (t.text == "none" || t.text == "None") {
      n->literal = Value::None();
    } else {
      n->kind = ExprKind::kName;
      n->name = t.text;
      if (t.text == "loop") ++loop_names_;
    }
    Next();
  } else if (t.kind == TokKind::kString) {
    std::string s;
    while (Cur().kind == TokKind::kString) {  // adjacent literals concatenate
      s += Cur().text;
      Next();
    }
    n->literal = Value::Str(std::move(s));
  } else if (t.kind == TokKind::kInt) {
    n->literal = Value::Int(t.int_value);
    Next();
  } else if (t.kind == TokKind::kFloat) {
    n->literal = Value::Float(t.float_value);
    Next();
  } else if (IsOp("(")) {
    Next();
    CHAT_ASSIGN_OR_RETURN(n, ParseTuple(true, /*explicit_parentheses=*/true));
    TESSERA_RETURN_IF_ERROR(ExpectOp(")"));
    return n;
  } else if (IsOp("[") || IsOp("{")) {
    return ParseListOrDict(IsOp("{"));
  } else {
    return Fail("unexpected " + Describe(t));
  }
  return Seal(std::move(n));
}

StatusOr<ExprPtr> Parser::ParseListOrDict(bool dict) {
  ExprPtr n = Node(dict ? ExprKind::kDict : ExprKind::kList, Cur().line);
  const char* close = dict ? "}" : "]";
  Next();
  while (!IsOp(close)) {
    if (!n->items.empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(close)) break;
    ExprPtr e;
    CHAT_ASSIGN_OR_RETURN(e, ParseExpression());
    n->items.push_back(std::move(e));
    if (dict) {
      TESSERA_RETURN_IF_ERROR(ExpectOp(":"));
      CHAT_ASSIGN_OR_RETURN(e, ParseExpression());
      n->items.push_back(std::move(e));
    }
  }
  Next();
  return Seal(std::move(n));
}

StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  ExprPtr call = Node(ExprKind::kCall, Cur().line);
  TESSERA_RETURN_IF_ERROR(ParseCallArgs(&call->args));
  call->items.push_back(std::move(callee));
  return Seal(std::move(call));
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      ExprPtr f = Node(ExprKind::kFilter, Cur().line);
      TESSERA_RETURN_IF_ERROR(ExpectDottedName(&f->name));
      if (IsOp("(")) TESSERA_RETURN_IF_ERROR(ParseCallArgs(&f->args));
      f->items.push_back(std::move(node));
      CHAT_ASSIGN_OR_RETURN(node, Seal(std::move(f)));
    } else if (IsName("is")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

// x is [not] name, with arguments in parentheses or one bare argument (x is divisibleby 3).
StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  ExprPtr t = Node(ExprKind::kTest, Cur().line);
  Next();
  t->negated = SkipName("not");
  TESSERA_RETURN_IF_ERROR(ExpectDottedName(&t->name));
  const Token& c = Cur();
  const bool bare_arg_start = c.kind == TokKind::kName || c.kind == TokKind::kString || c.kind == TokKind::kInt ||
                              c.kind == TokKind::kFloat || IsOp("(") || IsOp("[") || IsOp("{");
  if (IsOp("(")) {
    TESSERA_RETURN_IF_ERROR(ParseCallArgs(&t->args));
  } else if (bare_arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail("tests cannot be chained with 'is'");
    DepthGuard guard(&nesting_);
    if (guard.depth() > kMaxParseNesting) return Fail("expression nested too deeply");
    ExprPtr arg;
    CHAT_ASSIGN_OR_RETURN(arg, ParsePrimary());
    CHAT_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    t->args.push_back(Arg{"", std::move(arg)});
  }
  t->items.push_back(std::move(node));
  return Seal(std::move(t));
}

StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  if (SkipOp(".")) {
    ExprPtr n = Node(ExprKind::kAttr, Cur().line);
    if (Cur().kind == TokKind::kName) {
      n->name = Cur().text;
    } else if (Cur().kind == TokKind::kInt) {  // x.0 is x[0]
      n->kind = ExprKind::kItem;
      ExprPtr index = Node(ExprKind::kLiteral, Cur().line);
      index->literal = Value::Int(Cur().int_value);
      n->items.push_back(nullptr);
      n->items.push_back(std::move(index));
    } else {
      return Fail("expected a name or number after '.', got " + Describe(Cur()));
    }
    Next();
    if (n->items.empty()) n->items.push_back(nullptr);
    n->items[0] = std::move(node);
    return Seal(std::move(n));
  }
  const int line = Cur().line;
  Next();  // [
  std::vector<ExprPtr> subs;
  while (!IsOp("]")) {
    if (!subs.empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    ExprPtr s;
    CHAT_ASSIGN_OR_RETURN(s, ParseSubscribed());
    subs.push_back(std::move(s));
  }
  Next();
  if (subs.empty()) return TemplateError(name_, line, "expected a subscript inside '[]'");
  ExprPtr index;
  if (subs.size() == 1) {
    index = std::move(subs[0]);
  } else {
    index = Node(ExprKind::kTuple, line);
    index->items = std::move(subs);
    CHAT_ASSIGN_OR_RETURN(index, Seal(std::move(index)));
  }
  if (index->kind == ExprKind::kSlice) {  // a slice node carries its bounds; the object goes first
    index->items.insert(index->items.begin(), std::move(node));
    return Seal(std::move(index));
  }
  ExprPtr n = Node(ExprKind::kItem, line);
  n->items.push_back(std::move(node));
  n->items.push_back(std::move(index));
  return Seal(std::move(n));
}

// One subscript: an expression, or a slice [start]:[stop][:[step]] (bounds may be omitted).
StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const int line = Cur().line;
  ExprPtr start;
  if (!IsOp(":")) {
    CHAT_ASSIGN_OR_RETURN(start, ParseExpression());
    if (!IsOp(":")) return start;
  }
  Next();
  ExprPtr slice = Node(ExprKind::kSlice, line);
  slice->items.push_back(std::move(start));
  auto bound = [this]() -> StatusOr<ExprPtr> {
    if (IsOp("]") || IsOp(",") || IsOp(":")) return ExprPtr();
    return ParseExpression();
  };
  ExprPtr stop, step;
  CHAT_ASSIGN_OR_RETURN(stop, bound());
  if (SkipOp(":")) {
    CHAT_ASSIGN_OR_RETURN(step, bound());
  }
  slice->items.push_back(std::move(stop));
  slice->items.push_back(std::move(step));
  return Seal(std::move(slice));
}

// (a, b, name=c): positional arguments may not follow keyword ones.
Status Parser::ParseCallArgs(std::vector<Arg>* args) {
  TESSERA_RETURN_IF_ERROR(ExpectOp("("));
  bool keyword_seen = false;
  while (!IsOp(")")) {
    if (!args->empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    if (IsOp("*") || IsOp("**")) return Fail("*args and **kwargs in calls are not supported");
    Arg a;
    if (Cur().kind == TokKind::kName && Peek().kind == TokKind::kOp && Peek().text == "=") {
      a.name = Cur().text;
      Next(), Next();
      keyword_seen = true;
    } else if (keyword_seen) {
      return Fail("positional argument after a keyword argument");
    }
    CHAT_ASSIGN_OR_RETURN(a.value, ParseExpression());
    args->push_back(std::move(a));
  }
  Next();
  return Status::Ok();
}

}  // namespace tessera::chat
