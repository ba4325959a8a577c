#include "chat/parser.h"

#include <algorithm>

#include "chat/depth_guard.h"
#include "chat/status_macros.h"

namespace tessera::chat {
namespace {

bool Contains(std::initializer_list<std::string_view> list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

Parser::Parser(std::vector<Token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

const Token& Parser::Peek(size_t n) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }

bool Parser::SkipName(std::string_view n) {
  if (!IsName(n)) return false;
  Next();
  return true;
}

bool Parser::SkipOp(std::string_view op) {
  if (!IsOp(op)) return false;
  Next();
  return true;
}

Status Parser::Fail(std::string_view message) const { return TemplateError(name_, Cur().line, message); }

std::string Parser::Describe(const Token& t) const {
  switch (t.kind) {
    case TokKind::kText: return "template text";
    case TokKind::kVarBegin: return "'{{'";
    case TokKind::kVarEnd: return "end of print statement '}}'";
    case TokKind::kBlockBegin: return "'{%'";
    case TokKind::kBlockEnd: return "end of statement block '%}'";
    case TokKind::kString: return "a string";
    case TokKind::kInt:
    case TokKind::kFloat: return "a number";
    case TokKind::kEof: return "end of template";
    default: return "'" + t.text + "'";
  }
}

Status Parser::ExpectOp(std::string_view op) {
  if (SkipOp(op)) return Status::Ok();
  return Fail("expected '" + std::string(op) + "', got " + Describe(Cur()));
}

Status Parser::ExpectName(std::string* out) {
  if (Cur().kind != TokKind::kName) return Fail("expected a name, got " + Describe(Cur()));
  *out = Cur().text;
  Next();
  return Status::Ok();
}

// A filter or test name (jinja2 allows dotted ones).
Status Parser::ExpectDottedName(std::string* out) {
  TESSERA_RETURN_IF_ERROR(ExpectName(out));
  while (SkipOp(".")) {
    std::string part;
    TESSERA_RETURN_IF_ERROR(ExpectName(&part));
    *out += "." + part;
  }
  return Status::Ok();
}

Status Parser::ExpectBlockEnd() {
  if (Cur().kind != TokKind::kBlockEnd) return Fail("expected end of statement block '%}', got " + Describe(Cur()));
  Next();
  return Status::Ok();
}

StatusOr<Body> Parser::Parse() {
  Body body;
  std::string end;
  TESSERA_RETURN_IF_ERROR(ParseBody(&body, {}, &end));
  return body;
}

// Statements up to one of the `ends` tags (its name consumed, so the caller reads what follows),
// or to the end of the template when `ends` is empty.
Status Parser::ParseBody(Body* out, std::initializer_list<std::string_view> ends, std::string* end) {
  DepthGuard guard(&nesting_);
  if (guard.depth() > kMaxParseNesting) return Fail("statements nested too deeply");
  while (true) {
    const Token& t = Cur();
    if (t.kind == TokKind::kEof) {
      if (ends.size() == 0) return Status::Ok();
      return Fail("unexpected end of template, expected '" + std::string(*(ends.end() - 1)) + "'");
    }
    if (t.kind == TokKind::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText, s->line = t.line, s->text = t.text;
      out->push_back(std::move(s));
      Next();
    } else if (t.kind == TokKind::kVarBegin) {
      Next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput, s->line = t.line;
      CHAT_ASSIGN_OR_RETURN(s->expr, ParseTuple(/*with_condexpr=*/true, /*explicit_parentheses=*/false));
      if (Cur().kind != TokKind::kVarEnd) return Fail("expected end of print statement '}}', got " + Describe(Cur()));
      Next();
      out->push_back(std::move(s));
    } else if (t.kind == TokKind::kBlockBegin) {
      Next();
      if (Cur().kind == TokKind::kName && Contains(ends, Cur().text)) {
        *end = Cur().text;
        Next();
        return Status::Ok();
      }
      TESSERA_RETURN_IF_ERROR(ParseTag(out));
    } else {
      return Fail("unexpected " + Describe(t));
    }
  }
}

// The rest of a block statement: its %}, the body, and {% end_tag %}.
Status Parser::ParseBlock(Body* body, std::string_view end_tag) {
  TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  TESSERA_RETURN_IF_ERROR(ParseBody(body, {end_tag}, &end));
  return ExpectBlockEnd();
}

Status Parser::ParseTag(Body* out) {
  if (Cur().kind != TokKind::kName) return Fail("expected a statement name after '{%', got " + Describe(Cur()));
  const std::string tag = Cur().text;
  auto s = std::make_unique<Stmt>();
  s->line = Cur().line;
  Next();
  if (tag == "for") {
    TESSERA_RETURN_IF_ERROR(ParseFor(s.get()));
  } else if (tag == "if") {
    TESSERA_RETURN_IF_ERROR(ParseIf(s.get()));
  } else if (tag == "set") {
    TESSERA_RETURN_IF_ERROR(ParseSet(s.get()));
  } else if (tag == "macro") {
    TESSERA_RETURN_IF_ERROR(ParseMacro(s.get()));
  } else if (tag == "call") {
    TESSERA_RETURN_IF_ERROR(ParseCallBlock(s.get()));
  } else if (tag == "with") {
    TESSERA_RETURN_IF_ERROR(ParseWith(s.get()));
  } else if (tag == "filter") {
    s->kind = StmtKind::kFilterBlock;
    TESSERA_RETURN_IF_ERROR(ParseFilterChain(&s->filters));
    TESSERA_RETURN_IF_ERROR(ParseBlock(&s->body, "endfilter"));
  } else if (tag == "generation") {
    s->kind = StmtKind::kGeneration;
    TESSERA_RETURN_IF_ERROR(ParseBlock(&s->body, "endgeneration"));
  } else if (tag == "print") {
    s->kind = StmtKind::kOutput;
    CHAT_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
    TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return TemplateError(name_, s->line, "'" + tag + "' outside of a for loop");
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
             tag == "autoescape" || tag == "do") {
    return TemplateError(name_, s->line, "the '" + tag + "' tag is not supported in chat templates");
  } else {
    return TemplateError(name_, s->line, "unknown tag '" + tag + "'");
  }
  out->push_back(std::move(s));
  return Status::Ok();
}

Status Parser::ParseTarget(Target* t, bool allow_attr) {
  const bool paren = SkipOp("(");
  std::string first;
  TESSERA_RETURN_IF_ERROR(ExpectName(&first));
  t->names.push_back(first);
  if (allow_attr && !paren && IsOp(".")) {
    Next();
    return ExpectName(&t->attr);
  }
  while (SkipOp(",")) {
    t->unpack = true;
    if (Cur().kind != TokKind::kName) break;  // a trailing comma
    t->names.push_back(Cur().text);
    Next();
  }
  if (paren) {
    t->unpack = true;
    TESSERA_RETURN_IF_ERROR(ExpectOp(")"));
  }
  for (const std::string& n : t->names)
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      return Fail("cannot assign to '" + n + "'");
  return Status::Ok();
}

Status Parser::ParseFor(Stmt* s) {
  s->kind = StmtKind::kFor;
  TESSERA_RETURN_IF_ERROR(ParseTarget(&s->target, /*allow_attr=*/false));
  if (!SkipName("in")) return Fail("expected 'in' in the for statement, got " + Describe(Cur()));
  CHAT_ASSIGN_OR_RETURN(s->expr, ParseTuple(/*with_condexpr=*/false, false));
  if (SkipName("if")) {
    CHAT_ASSIGN_OR_RETURN(s->cond, ParseExpression());
  }
  if (IsName("recursive")) return Fail("recursive for loops are not supported");
  TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  ++loop_depth_;
  const int loop_names = loop_names_;
  std::string end;
  Status st = ParseBody(&s->body, {"else", "endfor"}, &end);
  s->uses_loop = loop_names_ != loop_names;
  --loop_depth_;
  TESSERA_RETURN_IF_ERROR(st);
  TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  if (end == "else") {
    TESSERA_RETURN_IF_ERROR(ParseBody(&s->else_body, {"endfor"}, &end));
    TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  }
  return Status::Ok();
}

Status Parser::ParseIf(Stmt* s) {
  s->kind = StmtKind::kIf;
  std::string end = "if";
  while (end == "if" || end == "elif") {
    ExprPtr cond;
    CHAT_ASSIGN_OR_RETURN(cond, ParseTuple(/*with_condexpr=*/false, false));
    TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
    Body body;
    TESSERA_RETURN_IF_ERROR(ParseBody(&body, {"elif", "else", "endif"}, &end));
    s->branches.emplace_back(std::move(cond), std::move(body));
  }
  if (end == "else") {
    TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
    Body body;
    TESSERA_RETURN_IF_ERROR(ParseBody(&body, {"endif"}, &end));
    s->branches.emplace_back(nullptr, std::move(body));
  }
  return ExpectBlockEnd();
}

Status Parser::ParseSet(Stmt* s) {
  TESSERA_RETURN_IF_ERROR(ParseTarget(&s->target, /*allow_attr=*/true));
  if (SkipOp("=")) {
    s->kind = StmtKind::kSet;
    CHAT_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
    return ExpectBlockEnd();
  }
  s->kind = StmtKind::kSetBlock;
  if (s->target.unpack || !s->target.attr.empty()) return Fail("a block set assigns one plain name");
  if (IsOp("|")) {
    Next();
    TESSERA_RETURN_IF_ERROR(ParseFilterChain(&s->filters));
  }
  return ParseBlock(&s->body, "endset");
}

// name(args) [| name(args)]...: the first filter's name is at the current token.
Status Parser::ParseFilterChain(std::vector<FilterCall>* out) {
  do {
    FilterCall f;
    f.line = Cur().line;
    TESSERA_RETURN_IF_ERROR(ExpectDottedName(&f.name));
    if (IsOp("(")) TESSERA_RETURN_IF_ERROR(ParseCallArgs(&f.args));
    out->push_back(std::move(f));
  } while (SkipOp("|"));
  return Status::Ok();
}

// (name, name=default, ...) of a macro or a call block's caller.
Status Parser::ParseSignature(MacroDef* m) {
  TESSERA_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!m->params.empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    std::string param;
    TESSERA_RETURN_IF_ERROR(ExpectName(&param));
    ExprPtr def;
    if (SkipOp("=")) {
      CHAT_ASSIGN_OR_RETURN(def, ParseExpression());
    } else if (!m->defaults.empty() && m->defaults.back()) {
      return Fail("parameter '" + param + "' without a default follows one with a default");
    }
    m->params.push_back(std::move(param));
    m->defaults.push_back(std::move(def));
  }
  Next();
  return Status::Ok();
}

Status Parser::ParseMacro(Stmt* s) {
  s->kind = StmtKind::kMacro;
  s->macro = std::make_unique<MacroDef>();
  s->macro->line = s->line;
  TESSERA_RETURN_IF_ERROR(ExpectName(&s->macro->name));
  TESSERA_RETURN_IF_ERROR(ParseSignature(s->macro.get()));
  TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  const int loops = loop_depth_;
  loop_depth_ = 0;  // break / continue cannot reach a loop outside the macro
  std::string end;
  Status st = ParseBody(&s->macro->body, {"endmacro"}, &end);
  loop_depth_ = loops;
  TESSERA_RETURN_IF_ERROR(st);
  if (Cur().kind == TokKind::kName && Cur().text == s->macro->name) Next();  // {% endmacro name %}
  return ExpectBlockEnd();
}

Status Parser::ParseCallBlock(Stmt* s) {
  s->kind = StmtKind::kCallBlock;
  s->macro = std::make_unique<MacroDef>();
  s->macro->name = "caller";
  s->macro->line = s->line;
  if (IsOp("(")) TESSERA_RETURN_IF_ERROR(ParseSignature(s->macro.get()));
  CHAT_ASSIGN_OR_RETURN(s->expr, ParseExpression());
  if (s->expr->kind != ExprKind::kCall) return TemplateError(name_, s->line, "expected a call in the call block");
  TESSERA_RETURN_IF_ERROR(ExpectBlockEnd());
  const int loops = loop_depth_;
  loop_depth_ = 0;
  std::string end;
  Status st = ParseBody(&s->macro->body, {"endcall"}, &end);
  loop_depth_ = loops;
  TESSERA_RETURN_IF_ERROR(st);
  return ExpectBlockEnd();
}

Status Parser::ParseWith(Stmt* s) {
  s->kind = StmtKind::kWith;
  while (Cur().kind != TokKind::kBlockEnd) {
    if (!s->assigns.empty()) TESSERA_RETURN_IF_ERROR(ExpectOp(","));
    Target t;
    TESSERA_RETURN_IF_ERROR(ParseTarget(&t, /*allow_attr=*/false));
    TESSERA_RETURN_IF_ERROR(ExpectOp("="));
    ExprPtr value;
    CHAT_ASSIGN_OR_RETURN(value, ParseExpression());
    s->assigns.emplace_back(std::move(t), std::move(value));
  }
  return ParseBlock(&s->body, "endwith");
}

}  // namespace tessera::chat
