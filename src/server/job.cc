#include "server/job.h"

namespace tessera::server {

Prompt PromptData::View() const {
  Prompt p;
  p.tokens = tokens;
  p.token_types = token_types;
  if (!features.rows.empty()) {
    p.image_embeds = features.rows.data();
    p.image_rows = static_cast<int64_t>(features.rows.size()) / features.hidden;
  }
  return p;
}

Job::Job(PromptData prompt, GenerateOptions options) : prompt_(std::move(prompt)), options_(std::move(options)) {
  tokens_.reserve(static_cast<size_t>(options_.max_new_tokens));
}

GenerateOptions Job::EngineOptions() {
  GenerateOptions o = options_;
  o.cancel = &cancel_;
  o.on_token = [this](int64_t, int32_t token) {
    Push(token);
    return !cancelled();
  };
  return o;
}

void Job::Push(int32_t token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.push_back(token);
  }
  cv_.notify_one();
}

void Job::Admitted(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admitted_ = true;
    admit_status_ = st;
    if (!st.ok()) finished_ = true;
  }
  cv_.notify_one();
}

void Job::Finished(RequestResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_one();
}

Status Job::WaitAdmitted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return admitted_; });
  return admit_status_;
}

bool Job::Wait(size_t have, std::chrono::milliseconds timeout, std::vector<int32_t>* fresh) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return finished_ || tokens_.size() > have; });
  if (tokens_.size() > have) fresh->insert(fresh->end(), tokens_.begin() + have, tokens_.end());
  return finished_;
}

}  // namespace tessera::server
