#include "io/safetensors_checkpoint.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "io/input_file.h"
#include "io/json_nesting.h"

namespace tessera::io {
namespace {

using Json = nlohmann::json;

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Whether a directory entry exists at all (a dangling or looping symlink does).
bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string Join(const std::string& dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  return dir.back() == '/' ? dir + std::string(name) : dir + "/" + std::string(name);
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 200;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...'";
}

}  // namespace

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& path) {
  const std::string where = "SafetensorsCheckpoint::Open: ";
  if (!IsDirectory(path)) {
    // A FIFO, device, socket or symlink loop is named as what it is, not reported as missing.
    const std::string kind = DescribeNonRegular(path);
    if (!kind.empty())
      return InvalidArgument(where + Quote(path) + " " + kind +
                             (Exists(path) ? ", not a checkpoint file or directory" : ""));
    return EndsWith(path, ".json") ? OpenIndex(path) : OpenSingle(path);
  }
  const std::string single = Join(path, kSingleFileName), index = Join(path, kIndexFileName);
  const std::string single_kind = DescribeNonRegular(single), index_kind = DescribeNonRegular(index);
  if (single_kind.empty()) return OpenSingle(single);
  if (index_kind.empty()) return OpenIndex(index);
  if (Exists(single)) return InvalidArgument(where + Quote(single) + " " + single_kind + ", not a regular file");
  if (Exists(index)) return InvalidArgument(where + Quote(index) + " " + index_kind + ", not a regular file");
  return InvalidArgument(where + "directory " + Quote(path) + " has neither " + std::string(kSingleFileName) +
                         " nor " + std::string(kIndexFileName));
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::OpenSingle(const std::string& file) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(file);
  if (!f.ok()) return f.status();
  SafetensorsCheckpoint ckpt;
  ckpt.path_ = file;
  for (std::string& name : f.value().TensorNames()) ckpt.owner_.emplace(std::move(name), 0);
  ckpt.shards_.push_back(std::move(f.value()));
  ckpt.DetectPrefix();
  return ckpt;
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::OpenIndex(const std::string& index_path) {
  const std::string where = "SafetensorsCheckpoint::Open: index " + Quote(index_path);
  StatusOr<std::string> read = ReadInputFile(index_path, "index", kMaxIndexBytes);
  if (!read.ok()) return Status(read.status().code(), "SafetensorsCheckpoint::Open: " + read.status().message());
  const std::string dir = Parent(index_path);
  return FromIndexText(read.value(), index_path,
                       [&dir](const std::string& shard) { return SafetensorsFile::Open(Join(dir, shard)); });
}

StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::FromIndexText(std::string_view text,
                                                                     const std::string& index_path,
                                                                     const ShardOpener& open_shard) {
  const std::string where = "SafetensorsCheckpoint::Open: index " + Quote(index_path);
  TESSERA_RETURN_IF_ERROR(CheckJsonNesting(text, where));
  const Json index = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!index.is_object()) return InvalidArgument(where + ": must be a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) return InvalidArgument(where + ": missing or non-object \"weight_map\"");

  SafetensorsCheckpoint ckpt;
  ckpt.path_ = index_path;
  std::map<std::string, size_t> shard_of_file;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string& tensor = it.key();
    if (!it.value().is_string())
      return InvalidArgument(where + ": weight_map entry for " + Quote(tensor) + " is not a string");
    const std::string& shard = it.value().get_ref<const std::string&>();
    // Shards live next to the index: a bare file name, never a path that could leave the directory.
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\0') != std::string::npos)
      return InvalidArgument(where + ": weight_map entry for " + Quote(tensor) + " names shard " + Quote(shard) +
                             ", which is not a plain file name");
    auto found = shard_of_file.find(shard);
    size_t shard_index;
    if (found == shard_of_file.end()) {
      StatusOr<SafetensorsFile> f = open_shard(shard);
      if (!f.ok())
        return Status(f.status().code(), where + ": shard " + Quote(shard) + " (first referenced by tensor " +
                                             Quote(tensor) + "): " + f.status().message());
      shard_index = ckpt.shards_.size();
      ckpt.shards_.push_back(std::move(f.value()));
      shard_of_file.emplace(shard, shard_index);
    } else {
      shard_index = found->second;
    }
    if (!ckpt.shards_[shard_index].Contains(tensor))
      return InvalidArgument(where + ": tensor " + Quote(tensor) + " is mapped to shard " + Quote(shard) +
                             ", which does not contain it");
    ckpt.owner_.emplace(tensor, shard_index);
  }
  ckpt.DetectPrefix();
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(owner_.size());
  for (const auto& [name, shard] : owner_) names.push_back(name);
  return names;
}

StatusOr<SafetensorsTensor> SafetensorsCheckpoint::Get(std::string_view tensor) const {
  auto it = owner_.find(tensor);
  if (it == owner_.end())
    return InvalidArgument("SafetensorsCheckpoint::Get: no tensor " + Quote(tensor) + " in checkpoint " + Quote(path_) +
                           " (" + std::to_string(owner_.size()) + " tensors)");
  return shards_[it->second].Get(tensor);
}

StatusOr<std::vector<int64_t>> SafetensorsCheckpoint::GetIntegers(std::string_view tensor,
                                                                 std::vector<int64_t>* shape) const {
  auto it = owner_.find(tensor);
  if (it == owner_.end())
    return InvalidArgument("SafetensorsCheckpoint::GetIntegers: no tensor " + Quote(tensor) + " in checkpoint " +
                           Quote(path_));
  return shards_[it->second].GetIntegers(tensor, shape);
}

StatusOr<std::string> SafetensorsCheckpoint::DetectLanguageModelPrefix(const std::function<bool(std::string_view)>& has,
                                                                       std::string_view where) {
  std::vector<std::string> found;
  std::string tried;
  for (std::string_view prefix : kLanguageModelPrefixes) {
    const std::string key = std::string(prefix) + std::string(kPrefixAnchor);
    tried += (tried.empty() ? "" : ", ") + Quote(key);
    if (has(key)) found.emplace_back(prefix);
  }
  if (found.empty())
    return InvalidArgument("DetectLanguageModelPrefix: " + std::string(where) +
                           " has no language-model embedding; tried " + tried);
  if (found.size() > 1)
    return InvalidArgument("DetectLanguageModelPrefix: " + std::string(where) + " is ambiguous: both " +
                           Quote(found[0] + std::string(kPrefixAnchor)) + " and " +
                           Quote(found[1] + std::string(kPrefixAnchor)) + " exist");
  return found[0];
}

void SafetensorsCheckpoint::DetectPrefix() {
  StatusOr<std::string> p =
      DetectLanguageModelPrefix([this](std::string_view name) { return Contains(name); }, "checkpoint " + Quote(path_));
  if (p.ok()) {
    lm_prefix_ = p.value();
  } else {
    lm_prefix_.reset();
    lm_prefix_error_ = p.status().message();
  }
}

StatusOr<std::string> SafetensorsCheckpoint::LanguageModelPrefix() const {
  if (!lm_prefix_) return InvalidArgument(lm_prefix_error_);
  return *lm_prefix_;
}

StatusOr<SafetensorsTensor> SafetensorsCheckpoint::GetLanguageModelTensor(std::string_view canonical) const {
  if (!lm_prefix_) return InvalidArgument(lm_prefix_error_);
  const std::string key = *lm_prefix_ + std::string(canonical);
  auto it = owner_.find(key);
  if (it == owner_.end())
    return InvalidArgument("SafetensorsCheckpoint::GetLanguageModelTensor: no tensor " + Quote(canonical) + " (key " +
                           Quote(key) + ") in checkpoint " + Quote(path_));
  return shards_[it->second].Get(key);
}

bool SafetensorsCheckpoint::HasLanguageModelTensor(std::string_view canonical) const {
  return lm_prefix_ && Contains(*lm_prefix_ + std::string(canonical));
}

std::optional<std::string> SafetensorsCheckpoint::LmHeadName() const {
  if (!lm_prefix_) return std::nullopt;
  const std::string key = *lm_prefix_ == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
  if (!Contains(key)) return std::nullopt;
  return key;
}

}  // namespace tessera::io
