#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "cli.h"

namespace tessera::cli {

StatusOr<Args> Args::Parse(int argc, char** argv, const std::vector<std::string>& valued,
                           const std::vector<std::string>& flags, bool allow_positional,
                           const std::vector<std::string>& repeatable) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!allow_positional) return InvalidArgument("unexpected argument '" + arg + "' (options are --name value)");
      a.positional_.push_back(arg);
      continue;
    }
    const std::string name = arg.substr(2);
    const bool is_flag = std::find(flags.begin(), flags.end(), name) != flags.end();
    const bool is_repeatable = std::find(repeatable.begin(), repeatable.end(), name) != repeatable.end();
    const bool is_valued = is_repeatable || std::find(valued.begin(), valued.end(), name) != valued.end();
    if (!is_flag && !is_valued) return InvalidArgument("unknown option " + arg);
    if (a.values_.count(name) && !is_repeatable) return InvalidArgument("option " + arg + " given twice");
    if (is_flag) {
      a.values_[name] = "1";
    } else {
      if (i + 1 >= argc) return InvalidArgument("option " + arg + " needs a value");
      a.values_[name] = argv[++i];
      a.all_[name].push_back(a.values_[name]);
    }
  }
  // Shared options: a negative count would otherwise run as if it were 0 or 1.
  for (const auto& [name, min] : {std::pair<const char*, int64_t>{"threads", 1}, {"max-new-tokens", 0}}) {
    StatusOr<int64_t> v = a.Int(name, min);
    if (!v.ok()) return v.status();
    if (v.value() < min)
      return InvalidArgument("--" + std::string(name) + " must be >= " + std::to_string(min) + ", got " +
                             std::to_string(v.value()));
  }
  return a;
}

bool HelpRequested(int argc, char** argv, const std::vector<std::string>& flags) {
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return true;
    if (arg.rfind("--", 0) == 0 && std::find(flags.begin(), flags.end(), arg.substr(2)) == flags.end()) ++i;
  }
  return false;
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? std::vector<std::string>{} : it->second;
}

StatusOr<int64_t> Args::Int(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  const std::string v = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    return InvalidArgument("--" + name + " expects an integer, got '" + v + "'");
  return static_cast<int64_t>(x);
}

StatusOr<double> Args::Float(const std::string& name, double fallback) const {
  if (!Has(name)) return fallback;
  const std::string v = Get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') return InvalidArgument("--" + name + " expects a number, got '" + v + "'");
  return x;
}

StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 0x7fffffff)
      return InvalidArgument(what + ": '" + item + "' is not a non-negative integer id");
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace tessera::cli
