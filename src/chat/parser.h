// Tokens to the statement / expression tree, with jinja2's grammar and operator precedence
// (filters and `is` tests bind tighter than arithmetic; `**` is left-associative as in jinja2).
// Nesting is bounded so that no template, however written, exhausts the stack.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"
#include "tessera/status.h"

namespace tessera::chat {

// Statement nesting and expression-tree depth allowed (real chat templates stay far below).
inline constexpr int kMaxParseNesting = 64;
inline constexpr int kMaxExprDepth = 96;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name);
  StatusOr<Body> Parse();

 private:
  // Statements (parser.cc).
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const;
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().kind == TokKind::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().kind == TokKind::kName && Cur().text == n; }
  bool SkipName(std::string_view n);
  bool SkipOp(std::string_view op);
  Status Fail(std::string_view message) const;
  Status ExpectOp(std::string_view op);
  Status ExpectName(std::string* out);
  Status ExpectDottedName(std::string* out);
  Status ExpectBlockEnd();
  std::string Describe(const Token& t) const;

  Status ParseBody(Body* out, std::initializer_list<std::string_view> ends, std::string* end);
  Status ParseTag(Body* out);
  Status ParseBlock(Body* body, std::string_view end_tag);
  Status ParseFor(Stmt* s);
  Status ParseIf(Stmt* s);
  Status ParseSet(Stmt* s);
  Status ParseMacro(Stmt* s);
  Status ParseCallBlock(Stmt* s);
  Status ParseWith(Stmt* s);
  Status ParseSignature(MacroDef* m);
  Status ParseTarget(Target* t, bool allow_attr);
  Status ParseFilterChain(std::vector<FilterCall>* out);

  // Expressions (parser_expr.cc), one function per precedence level.
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parentheses);
  StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  StatusOr<ExprPtr> ParseCondExpr();
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseFilteredUnary();
  StatusOr<ExprPtr> ParseUnary(bool with_filter);
  // An operator of a binary precedence level: a name ("or") or an operator token ("+").
  struct OpToken {
    const char* text;
    bool is_name;
    ExprKind kind;
    BinOp op = BinOp::kAdd;
  };
  StatusOr<ExprPtr> ParseBinaryLevel(StatusOr<ExprPtr> (Parser::*next)(), std::initializer_list<OpToken> ops);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParseListOrDict(bool dict);
  StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscribed();
  Status ParseCallArgs(std::vector<Arg>* args);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);
  // A finished node: its depth from its children, refused past kMaxExprDepth.
  StatusOr<ExprPtr> Seal(ExprPtr e) const;
  ExprPtr Node(ExprKind kind, int line) const;

  std::vector<Token> tokens_;
  const std::string& name_;
  size_t pos_ = 0;
  int nesting_ = 0;     // statement and parenthesis nesting now
  int loop_depth_ = 0;  // enclosing for-loops (in this macro), for break / continue
  int loop_names_ = 0;  // `loop` names parsed so far
};

}  // namespace tessera::chat
