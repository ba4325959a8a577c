// jinja2's filters over sequences and mappings: length, first, last, list, join, reverse, sort,
// unique, min, max, sum, dictsort, items, map, select, reject, selectattr, rejectattr, batch.
// Where jinja2 returns a generator (map, select, reverse...) we return the list it would yield.
#include <algorithm>
#include <cmath>

#include "chat/library.h"
#include "chat/status_macros.h"
#include "chat/text.h"

namespace tessera::chat {
namespace {

using SeqFn = StatusOr<Value> (*)(Renderer&, const Value&, const CallArgs&);

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0, each with getitem.
StatusOr<Value> GetPath(Renderer& r, Value item, const Value& path) {
  if (path.is_integral()) return r.GetItem(item, path);
  if (!path.is_string()) return r.Fail("attribute must be a string or an int");
  const std::string dot = ".";
  for (const std::string& part : PySplit(path.str(), &dot, -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    Value key = digits && part.size() < 18 ? Value::Int(std::stoll(part)) : Value::Str(part);
    CHAT_ASSIGN_OR_RETURN(item, r.GetItem(item, key));
  }
  return item;
}

// The sort key of jinja2's case-insensitive filters: strings lower-cased.
Value IgnoreCase(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::Str(PyLower(v.str()));
}

// Sorts `items` by `keys` (stable, as Python's sorted); errors from comparing come back.
Status SortByKeys(Renderer& r, std::vector<Value>* items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    StatusOr<int> c = reverse ? Order(r, keys[b], keys[a]) : Order(r, keys[a], keys[b]);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return c.value() < 0;
  });
  TESSERA_RETURN_IF_ERROR(error);
  TESSERA_RETURN_IF_ERROR(r.ChargeWork(items->size() * 8));
  std::vector<Value> sorted;
  sorted.reserve(items->size());
  for (size_t k : order) sorted.push_back((*items)[k]);
  *items = std::move(sorted);
  return Status::Ok();
}

// The keys of sort / unique / min / max: the attribute (if given), case-folded unless asked not to.
StatusOr<std::vector<Value>> Keys(Renderer& r, const std::vector<Value>& items, const Value& attribute,
                                  bool case_sensitive) {
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    Value k = item;
    if (!attribute.is_undefined() && !attribute.is_none()) CHAT_ASSIGN_OR_RETURN(k, GetPath(r, item, attribute));
    keys.push_back(IgnoreCase(k, case_sensitive));
  }
  return keys;
}

StatusOr<Value> Length(Renderer& r, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Kind::kUndefined: return Value::Int(0);
    case Kind::kString: return Value::Int(static_cast<int64_t>(CodePointCount(v.str())));
    case Kind::kList: return Value::Int(static_cast<int64_t>(v.list().items.size()));
    case Kind::kDict: return Value::Int(static_cast<int64_t>(v.dict().size()));
    default: return r.Fail("object of type '" + TypeName(v) + "' has no len()");
  }
}

StatusOr<Value> First(Renderer& r, const Value& v, const CallArgs&) {
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(Renderer& r, const Value& v, const CallArgs&) {
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

StatusOr<Value> ListFilter(Renderer& r, const Value& v, const CallArgs&) {
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> Join(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("join", args, {"d", "attribute"}, &a));
  std::string sep;
  if (!a[0].is_undefined()) CHAT_ASSIGN_OR_RETURN(sep, r.Str(a[0]));
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    Value item = items[k];
    if (!a[1].is_undefined() && !a[1].is_none()) CHAT_ASSIGN_OR_RETURN(item, GetPath(r, item, a[1]));
    std::string s;
    CHAT_ASSIGN_OR_RETURN(s, r.Str(item));
    if (k) out += sep;
    out += s;
    TESSERA_RETURN_IF_ERROR(r.ChargeText(sep.size() + s.size()));
    if (out.size() > (1u << 20)) TESSERA_RETURN_IF_ERROR(r.ChargeText(out.size()));  // the size limit
  }
  return Value::Str(std::move(out));
}

StatusOr<Value> Reverse(Renderer& r, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::Str(EncodeUtf8(cps, 0, cps.size()));
  }
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

StatusOr<Value> Sort(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("sort", args, {"reverse", "case_sensitive", "attribute"}, &a));
  std::vector<Value> items, keys;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  CHAT_ASSIGN_OR_RETURN(keys, Keys(r, items, a[2], Truthy(a[1])));
  TESSERA_RETURN_IF_ERROR(SortByKeys(r, &items, keys, Truthy(a[0])));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> Unique(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("unique", args, {"case_sensitive", "attribute"}, &a));
  std::vector<Value> items, keys, out, seen;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  CHAT_ASSIGN_OR_RETURN(keys, Keys(r, items, a[1], Truthy(a[0])));
  for (size_t k = 0; k < items.size(); ++k) {
    if ((keys[k].is_list() && !keys[k].list().is_tuple) || keys[k].is_dict())
      return r.Fail("unhashable type: '" + TypeName(keys[k]) + "'");
    TESSERA_RETURN_IF_ERROR(r.ChargeWork(seen.size()));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, keys[k]); })) continue;
    seen.push_back(keys[k]);
    out.push_back(items[k]);
  }
  return Value::MakeList(std::move(out));
}

template <bool kMax>
StatusOr<Value> MinMax(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind(kMax ? "max" : "min", args, {"case_sensitive", "attribute"}, &a));
  std::vector<Value> items, keys;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  CHAT_ASSIGN_OR_RETURN(keys, Keys(r, items, a[1], Truthy(a[0])));
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    int c;
    CHAT_ASSIGN_OR_RETURN(c, Order(r, keys[k], keys[best]));
    if (kMax ? c > 0 : c < 0) best = k;
  }
  return items[best];
}

StatusOr<Value> Sum(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("sum", args, {"attribute", "start"}, &a));
  Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
  if (total.is_string()) return r.Fail("sum() can't sum strings [use ''.join(seq) instead]");
  std::vector<Value> items;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  for (Value item : items) {
    if (!a[0].is_undefined() && !a[0].is_none()) CHAT_ASSIGN_OR_RETURN(item, GetPath(r, item, a[0]));
    CHAT_ASSIGN_OR_RETURN(total, BinaryOp(r, BinOp::kAdd, total, item));
  }
  return total;
}

std::vector<Value> ItemPairs(const Dict& d) {
  std::vector<Value> pairs;
  pairs.reserve(d.size());
  for (const auto& [k, x] : d.items()) pairs.push_back(Value::MakeList({k, x}, /*tuple=*/true));
  return pairs;
}

StatusOr<Value> DictSort(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("dictsort", args, {"case_sensitive", "by", "reverse"}, &a));
  if (v.is_undefined()) return r.UndefinedError(v);
  if (!v.is_dict()) return r.Fail("'" + TypeName(v) + "' object has no attribute 'items'");
  const std::string by = a[1].is_string() ? a[1].str() : "key";
  if (by != "key" && by != "value") return r.Fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items = ItemPairs(v.dict()), keys;
  for (const Value& p : items) keys.push_back(IgnoreCase(p.list().items[by == "key" ? 0 : 1], Truthy(a[0])));
  TESSERA_RETURN_IF_ERROR(SortByKeys(r, &items, keys, Truthy(a[2])));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> Items(Renderer& r, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) return r.Fail("Can only get item pairs from a mapping.");
  return Value::MakeList(ItemPairs(v.dict()));
}

StatusOr<Value> Map(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> items, out;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  if (args.pos.empty()) {
    std::vector<Value> a;
    TESSERA_RETURN_IF_ERROR(r.Bind("map", args, {"attribute", "default"}, &a));
    if (a[0].is_undefined()) return r.Fail("map requires a filter argument");
    for (const Value& item : items) {
      Value x;
      CHAT_ASSIGN_OR_RETURN(x, GetPath(r, item, a[0]));
      if (x.is_undefined() && !a[1].is_undefined() && !a[1].is_none()) x = a[1];
      out.push_back(std::move(x));
    }
    return Value::MakeList(std::move(out));
  }
  if (!args.pos[0].is_string()) return r.Fail("map(): the filter name must be a string");
  const CallArgs rest{std::vector<Value>(args.pos.begin() + 1, args.pos.end()), args.kw};
  for (const Value& item : items) {
    Value x;
    CHAT_ASSIGN_OR_RETURN(x, r.ApplyFilter(args.pos[0].str(), item, rest));
    out.push_back(std::move(x));
  }
  return Value::MakeList(std::move(out));
}

// select / reject / selectattr / rejectattr: keep the items whose test (truthiness without one)
// gives `keep`; the *attr forms test an attribute of each item.
template <bool kKeep, bool kAttr>
StatusOr<Value> SelectReject(Renderer& r, const Value& v, const CallArgs& args) {
  const size_t off = kAttr ? 1 : 0;
  if (kAttr && args.pos.empty()) return r.Fail("Missing parameter for attribute name");
  std::vector<Value> items, out;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  const bool has_test = args.pos.size() > off;
  if (has_test && !args.pos[off].is_string()) return r.Fail("the test name must be a string");
  const CallArgs rest{has_test ? std::vector<Value>(args.pos.begin() + off + 1, args.pos.end()) : std::vector<Value>{},
                      args.kw};
  for (const Value& item : items) {
    Value x = item;
    if (kAttr) CHAT_ASSIGN_OR_RETURN(x, GetPath(r, item, args.pos[0]));
    bool pass = Truthy(x);
    if (has_test) CHAT_ASSIGN_OR_RETURN(pass, r.ApplyTest(args.pos[off].str(), x, rest));
    if (pass == kKeep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

StatusOr<Value> Batch(Renderer& r, const Value& v, const CallArgs& args) {
  std::vector<Value> a;
  TESSERA_RETURN_IF_ERROR(r.Bind("batch", args, {"linecount", "fill_with"}, &a));
  if (!a[0].is_integral() || a[0].i() <= 0) return r.Fail("batch(): linecount must be a positive int");
  std::vector<Value> items, out, row;
  CHAT_ASSIGN_OR_RETURN(items, r.Iterate(v));
  const auto n = static_cast<size_t>(std::min<int64_t>(a[0].i(), 1 << 20));
  for (const Value& item : items) {
    row.push_back(item);
    if (row.size() == n) out.push_back(Value::MakeList(std::move(row))), row.clear();
  }
  if (!row.empty()) {
    if (!a[1].is_undefined() && !a[1].is_none()) {
      TESSERA_RETURN_IF_ERROR(r.CheckItems(n));
      row.resize(n, a[1]);
    }
    out.push_back(Value::MakeList(std::move(row)));
  }
  return Value::MakeList(std::move(out));
}

struct NamedSeqFilter {
  const char* name;
  SeqFn fn;
};

constexpr NamedSeqFilter kSeqFilters[] = {
    {"length", Length},
    {"count", Length},
    {"first", First},
    {"last", Last},
    {"list", ListFilter},
    {"join", Join},
    {"reverse", Reverse},
    {"sort", Sort},
    {"unique", Unique},
    {"min", MinMax<false>},
    {"max", MinMax<true>},
    {"sum", Sum},
    {"dictsort", DictSort},
    {"items", Items},
    {"map", Map},
    {"select", SelectReject<true, false>},
    {"reject", SelectReject<false, false>},
    {"selectattr", SelectReject<true, true>},
    {"rejectattr", SelectReject<false, true>},
    {"batch", Batch},
};

}  // namespace

StatusOr<Value> CallSequenceFilter(Renderer& r, const std::string& name, const Value& v, const CallArgs& args,
                                   bool* found) {
  const NamedSeqFilter* f = FindByName(kSeqFilters, name);
  *found = f != nullptr;
  if (!f) return Value();
  return f->fn(r, v, args);
}

bool IsSequenceFilterName(std::string_view name) { return FindByName(kSeqFilters, name) != nullptr; }

}  // namespace tessera::chat
