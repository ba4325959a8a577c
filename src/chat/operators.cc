// Python's operators on template values: arithmetic with int/float promotion (64-bit ints,
// overflow is an error), string and list concatenation and repetition, ordering, `in`, slicing
// and printf-style `%` formatting.
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

const char* OpSymbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
    case BinOp::kConcat: return "~";
  }
  return "?";
}

Status Unsupported(Renderer& r, const char* op, const Value& a, const Value& b) {
  return r.Fail(std::string("unsupported operand type(s) for ") + op + ": '" + TypeName(a) + "' and '" + TypeName(b) +
                "'");
}

// Python's floor division and modulo of floats (the result of % has the divisor's sign).
void FloatDivMod(double a, double b, double* div, double* mod) {
  double m = std::fmod(a, b);
  double d = (a - m) / b;
  if (m != 0.0) {
    if ((b < 0) != (m < 0)) {
      m += b;
      d -= 1.0;
    }
  } else {
    m = std::copysign(0.0, b);
  }
  double floordiv = 0.0;
  if (d != 0.0) {
    floordiv = std::floor(d);
    if (d - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  *div = floordiv;
  *mod = m;
}

StatusOr<Value> IntPow(Renderer& r, int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return r.Fail("integer overflow in **");
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return r.Fail("integer overflow in **");
  }
  return Value::Int(result);
}

StatusOr<Value> Arithmetic(Renderer& r, BinOp op, const Value& a, const Value& b) {
  const bool ints = !a.is_float() && !b.is_float();
  const int64_t x = a.i(), y = b.i();
  const double fx = a.f(), fy = b.f();
  int64_t out = 0;
  switch (op) {
    case BinOp::kAdd:
      if (!ints) return Value::Float(fx + fy);
      if (__builtin_add_overflow(x, y, &out)) return r.Fail("integer overflow in +");
      return Value::Int(out);
    case BinOp::kSub:
      if (!ints) return Value::Float(fx - fy);
      if (__builtin_sub_overflow(x, y, &out)) return r.Fail("integer overflow in -");
      return Value::Int(out);
    case BinOp::kMul:
      if (!ints) return Value::Float(fx * fy);
      if (__builtin_mul_overflow(x, y, &out)) return r.Fail("integer overflow in *");
      return Value::Int(out);
    case BinOp::kDiv:
      if (fy == 0.0) return r.Fail("division by zero");
      return Value::Float(fx / fy);
    case BinOp::kFloorDiv:
    case BinOp::kMod: {
      if (ints) {
        if (y == 0) return r.Fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinOp::kMod) return Value::Int(0);
          return r.Fail("integer overflow in //");
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y, q -= 1;
        return Value::Int(op == BinOp::kMod ? m : q);
      }
      if (fy == 0.0) return r.Fail("float division or modulo by zero");
      double d, m;
      FloatDivMod(fx, fy, &d, &m);
      return Value::Float(op == BinOp::kMod ? m : d);
    }
    case BinOp::kPow:
      if (ints && y >= 0) return IntPow(r, x, y);
      if (fx == 0.0 && fy < 0) return r.Fail("0.0 cannot be raised to a negative power");
      if (fx < 0 && std::trunc(fy) != fy) return r.Fail("a negative number to a fractional power is complex");
      return Value::Float(std::pow(fx, fy));
    default:
      return Unsupported(r, OpSymbol(op), a, b);
  }
}

// str * n and list * n.
StatusOr<Value> Repeat(Renderer& r, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const size_t len = seq.str().size();
    if (len > 0 && static_cast<uint64_t>(n) > (1ull << 40) / len) return r.ChargeText(1ull << 40);
    TESSERA_RETURN_IF_ERROR(r.ChargeText(len * static_cast<size_t>(n)));
    std::string s;
    s.reserve(len * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) s += seq.str();
    return Value::Str(std::move(s));
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > (1ull << 40) / items.size()) return r.CheckItems(1ull << 40);
  TESSERA_RETURN_IF_ERROR(r.CheckItems(items.size() * static_cast<size_t>(n)));
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(items.size() * static_cast<size_t>(n)));
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return Value::MakeList(std::move(out), seq.list().is_tuple);
}

StatusOr<Value> Concat(Renderer& r, const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) {
    TESSERA_RETURN_IF_ERROR(r.ChargeText(a.str().size() + b.str().size()));
    return Value::Str(a.str() + b.str());
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const size_t n = a.list().items.size() + b.list().items.size();
    TESSERA_RETURN_IF_ERROR(r.CheckItems(n));
    TESSERA_RETURN_IF_ERROR(r.ChargeWork(n));
    std::vector<Value> items = a.list().items;
    items.insert(items.end(), b.list().items.begin(), b.list().items.end());
    return Value::MakeList(std::move(items), a.list().is_tuple);
  }
  if (a.is_string()) return r.Fail("can only concatenate str (not \"" + TypeName(b) + "\") to str");
  if (a.is_list()) return r.Fail("can only concatenate " + TypeName(a) + " (not \"" + TypeName(b) + "\") to " + TypeName(a));
  return Unsupported(r, "+", a, b);
}

const char* CmpSymbol(CmpOp op) {
  switch (op) {
    case CmpOp::kLt: return "<";
    case CmpOp::kLe: return "<=";
    case CmpOp::kGt: return ">";
    case CmpOp::kGe: return ">=";
    default: return "==";
  }
}

}  // namespace

StatusOr<Value> BinaryOp(Renderer& r, BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kConcat) {
    std::string sa, sb;
    CHAT_ASSIGN_OR_RETURN(sa, r.Str(a));
    CHAT_ASSIGN_OR_RETURN(sb, r.Str(b));
    TESSERA_RETURN_IF_ERROR(r.ChargeText(sa.size() + sb.size()));
    return Value::Str(sa + sb);
  }
  if (a.is_undefined()) return r.UndefinedError(a);
  if (b.is_undefined()) return r.UndefinedError(b);
  if (a.is_number() && b.is_number()) return Arithmetic(r, op, a, b);
  if (op == BinOp::kAdd) return Concat(r, a, b);
  if (op == BinOp::kMul) {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return Repeat(r, a, b.i());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return Repeat(r, b, a.i());
  }
  if (op == BinOp::kMod && a.is_string()) {
    std::string s;
    CHAT_ASSIGN_OR_RETURN(s, PercentFormat(r, a.str(), b));
    return Value::Str(std::move(s));
  }
  return Unsupported(r, OpSymbol(op), a, b);
}

StatusOr<int> Order(Renderer& r, const Value& a, const Value& b) {
  if (a.is_undefined()) return r.UndefinedError(a);
  if (b.is_undefined()) return r.UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.i() < b.i() ? -1 : a.i() > b.i() ? 1 : 0;
    return a.f() < b.f() ? -1 : a.f() > b.f() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    TESSERA_RETURN_IF_ERROR(r.ChargeWork(std::min(a.str().size(), b.str().size()) / 16));
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      TESSERA_RETURN_IF_ERROR(r.ChargeWork(1));
      if (Equals(x[k], y[k])) continue;
      return Order(r, x[k], y[k]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return r.Fail("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

StatusOr<bool> CompareValues(Renderer& r, CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq:
    case CmpOp::kNe:
      if (a.is_string() && b.is_string()) TESSERA_RETURN_IF_ERROR(r.ChargeWork(a.str().size() / 16));
      return Equals(a, b) == (op == CmpOp::kEq);
    case CmpOp::kIn:
    case CmpOp::kNotIn: {
      bool in;
      CHAT_ASSIGN_OR_RETURN(in, Contains(r, b, a));
      return in == (op == CmpOp::kIn);
    }
    default:
      break;
  }
  if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {
    const double x = a.f(), y = b.f();  // NaN compares false, as in Python
    return op == CmpOp::kLt ? x < y : op == CmpOp::kLe ? x <= y : op == CmpOp::kGt ? x > y : x >= y;
  }
  StatusOr<int> c = Order(r, a, b);
  if (!c.ok()) {
    if (a.is_undefined() || b.is_undefined()) return c.status();
    return r.Fail(std::string("'") + CmpSymbol(op) + "' not supported between instances of '" + TypeName(a) +
                  "' and '" + TypeName(b) + "'");
  }
  const int v = c.value();
  return op == CmpOp::kLt ? v < 0 : op == CmpOp::kLe ? v <= 0 : op == CmpOp::kGt ? v > 0 : v >= 0;
}

StatusOr<bool> Contains(Renderer& r, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string())
        return r.Fail("'in <string>' requires string as left operand, not " + TypeName(item));
      TESSERA_RETURN_IF_ERROR(r.ChargeWork(container.str().size() / 16));
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      TESSERA_RETURN_IF_ERROR(r.ChargeWork(container.list().items.size()));
      for (const Value& v : container.list().items)
        if (Equals(v, item)) return true;
      return false;
    case Kind::kDict:
      if ((item.is_list() && !item.list().is_tuple) || item.is_dict())
        return r.Fail("unhashable type: '" + TypeName(item) + "'");
      return container.dict().Find(item) != nullptr;
    default:
      return r.Fail("argument of type '" + TypeName(container) + "' is not iterable");
  }
}

StatusOr<Value> SliceValue(Renderer& r, const Value& v, const Value& start, const Value& stop, const Value& step) {
  auto bound = [&r](const Value& b, int64_t* out, bool* given) -> Status {
    *given = !(b.is_undefined() || b.is_none());
    if (*given && !b.is_integral()) return r.Fail("slice indices must be integers or None");
    if (*given) *out = b.i();
    return Status::Ok();
  };
  int64_t lo = 0, hi = 0, st = 1;
  bool has_lo, has_hi, has_st;
  TESSERA_RETURN_IF_ERROR(bound(start, &lo, &has_lo));
  TESSERA_RETURN_IF_ERROR(bound(stop, &hi, &has_hi));
  TESSERA_RETURN_IF_ERROR(bound(step, &st, &has_st));
  if (st == 0) return r.Fail("slice step cannot be zero");
  if (!v.is_string() && !v.is_list()) return r.Fail("'" + TypeName(v) + "' object is not subscriptable");
  const std::vector<char32_t> cps = v.is_string() ? DecodeUtf8(v.str()) : std::vector<char32_t>{};
  const auto len = static_cast<int64_t>(v.is_string() ? cps.size() : v.list().items.size());
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(static_cast<size_t>(len)));
  auto adjust = [&](int64_t x, bool given, int64_t dflt) {
    if (!given) return dflt;
    if (x < 0) {
      x += len;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= len) {
      x = st < 0 ? len - 1 : len;
    }
    return x;
  };
  lo = adjust(lo, has_lo, st < 0 ? len - 1 : 0);
  hi = adjust(hi, has_hi, st < 0 ? -1 : len);
  if (st == INT64_MIN) st = -INT64_MAX;
  const int64_t count = st > 0 ? (lo < hi ? (hi - lo - 1) / st + 1 : 0) : (hi < lo ? (lo - hi - 1) / -st + 1 : 0);
  std::vector<int64_t> idx;
  for (int64_t k = 0; k < count; ++k) idx.push_back(lo + k * st);
  if (v.is_string()) {
    std::string s;
    for (int64_t k : idx) AppendUtf8(cps[static_cast<size_t>(k)], &s);
    return Value::Str(std::move(s));
  }
  std::vector<Value> items;
  for (int64_t k : idx) items.push_back(v.list().items[static_cast<size_t>(k)]);
  return Value::MakeList(std::move(items), v.list().is_tuple);
}

}  // namespace tessera::chat
