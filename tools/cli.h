// Shared pieces of the `tessera` command-line tool: argument parsing and the subcommands.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::cli {

// --name value / --flag arguments after the subcommand.
class Args {
 public:
  // `flags`: options without a value. Unknown or repeated options are errors.
  static StatusOr<Args> Parse(int argc, char** argv, const std::vector<std::string>& valued,
                              const std::vector<std::string>& flags);
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  StatusOr<double> Float(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// "1,2,3" -> ids; errors name the bad item.
StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what);

int RunCommand(int argc, char** argv);      // tessera run
int InspectCommand(int argc, char** argv);  // tessera inspect
int KvMemoryCommand(int argc, char** argv); // tessera kv-memory
int DemoCommand(int argc, char** argv);     // tessera demo
int SelfCheckCommand(int argc, char** argv);  // tessera selfcheck

}  // namespace tessera::cli
