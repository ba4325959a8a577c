// CHAT_ASSIGN_OR_RETURN(lhs, expr): the interpreter threads StatusOr through every evaluation
// step, and this keeps each step one line. `lhs` is an existing variable (one statement, so it
// can follow an unbraced if).
#pragma once

#include <utility>

#include "tessera/status.h"

#define CHAT_CONCAT_INNER_(a, b) a##b
#define CHAT_CONCAT_(a, b) CHAT_CONCAT_INNER_(a, b)
#define CHAT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  do {                                              \
    auto tmp = (expr);                              \
    if (!tmp.ok()) return tmp.status();             \
    lhs = std::move(tmp).value();                   \
  } while (0)
#define CHAT_ASSIGN_OR_RETURN(lhs, expr) CHAT_ASSIGN_OR_RETURN_IMPL_(CHAT_CONCAT_(chat_status_or_, __LINE__), lhs, expr)
