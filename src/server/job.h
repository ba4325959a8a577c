// One request between its HTTP handler thread and the engine thread: the prompt and options going
// in, the tokens and the result coming out. The engine appends each token under a lock into a
// vector reserved for max_new_tokens (no allocation per token); the handler waits on a condition
// variable and reads the tokens past the ones it has.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tessera/engine.h"
#include "tessera/requests.h"

namespace tessera::server {

// A prompt with the storage it points into (image rows).
struct PromptData {
  std::vector<int32_t> tokens, token_types;
  ImageFeatures features;
  Prompt View() const;
};

class Job {
 public:
  Job(PromptData prompt, GenerateOptions options);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // --- the engine thread ---
  const PromptData& prompt() const { return prompt_; }
  const GenerateOptions& options() const { return options_; }
  // The options with on_token and cancel wired to this job (it must outlive the request).
  GenerateOptions EngineOptions();
  void Admitted(const Status& st);  // RequestBatch::Add's answer
  void Finished(RequestResult result);

  // --- the handler thread ---
  // Ends the request at the engine's next step (a stop string, a client that went away).
  void Cancel() { cancel_.store(true); }
  bool cancelled() const { return cancel_.load(); }
  // Blocks until the engine took the request (OK) or refused it.
  Status WaitAdmitted();
  // Waits up to `timeout` for tokens past the first `have`, appending them to *fresh. Returns
  // whether the request has finished (every token is then in).
  bool Wait(size_t have, std::chrono::milliseconds timeout, std::vector<int32_t>* fresh);
  // After Wait said finished.
  const RequestResult& result() const { return result_; }

 private:
  void Push(int32_t token);

  PromptData prompt_;
  GenerateOptions options_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool admitted_ = false, finished_ = false;
  Status admit_status_;
  std::vector<int32_t> tokens_;
  RequestResult result_;
};

}  // namespace tessera::server
