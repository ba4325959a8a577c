// Shared pieces of the `tessera` command-line tool: argument parsing and the subcommands.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/engine.h"
#include "tessera/status.h"

namespace tessera::cli {

// --name value / --flag arguments after the subcommand.
class Args {
 public:
  // `flags`: options without a value; `repeatable`: valued options that may be given several
  // times (GetAll). Unknown or repeated options are errors, and so are positional arguments unless
  // allow_positional. Options several commands share are checked
  // here: --threads must be >= 1, --max-new-tokens >= 0.
  static StatusOr<Args> Parse(int argc, char** argv, const std::vector<std::string>& valued,
                              const std::vector<std::string>& flags, bool allow_positional = false,
                              const std::vector<std::string>& repeatable = {});
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> GetAll(const std::string& name) const;  // a repeatable option's values
  StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  StatusOr<double> Float(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;
  std::vector<std::string> positional_;
};

// Options without a value, by command: shared by the parsers and the --help scan (tessera.cc).
inline const std::vector<std::string> kRunFlags = {"no-stop", "no-repack"};
inline const std::vector<std::string> kKvMemoryFlags = {"per-layer"};
inline const std::vector<std::string> kQuantizeFlags = {"verbose"};
inline const std::vector<std::string> kServeFlags = {"no-repack"};

// Whether the arguments ask for help: "--help" or "-h" where an option may stand (the value of
// an option such as --prompt is not a request). `flags` are the command's options without a value.
bool HelpRequested(int argc, char** argv, const std::vector<std::string>& flags);

// The engine options run and serve share: --max-context, --max-chunk, --threads, --mode,
// --kv-dtype, --attention-precision, --matmul-precision, --no-repack, --dtype, --quantize (each
// command lists the ones it accepts; absent ones keep their defaults).
Status ParseEngineOptions(const Args& a, SessionOptions* opt, LoadOptions* load);

// "1,2,3" -> ids; errors name the bad item.
StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what);

int RunCommand(int argc, char** argv);      // tessera run
int InspectCommand(int argc, char** argv);  // tessera inspect
int KvMemoryCommand(int argc, char** argv); // tessera kv-memory
int DemoCommand(int argc, char** argv);     // tessera demo
int SelfCheckCommand(int argc, char** argv);  // tessera selfcheck
int QuantizeCommand(int argc, char** argv);   // tessera quantize
int ServeCommand(int argc, char** argv);      // tessera serve

}  // namespace tessera::cli
