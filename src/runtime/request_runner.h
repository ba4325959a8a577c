// The request/slot runtime behind tessera/requests.h: requests own rows (slots) of one session's
// in-place cache, each at its own position. Every step packs each slot's work into one forward
// pass: a prefill chunk for a joining request, one token for a decoding one, nothing for a free
// slot. A slot keeps its tokens after its request leaves, for prefix reuse by the next.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/generator.h"
#include "runtime/session.h"
#include "tessera/requests.h"

namespace tessera::runtime {

class RequestRunner {
 public:
  static StatusOr<std::unique_ptr<RequestRunner>> Create(const model::GemmaModel& model, const SessionOptions& options,
                                                         ThreadPool* pool);

  StatusOr<RequestId> Add(const Prompt& prompt, const GenerateOptions& options);
  Status Step();
  void Cancel(RequestId id);
  bool finished(RequestId id) const { return done_.count(id) > 0; }
  StatusOr<RequestResult> Take(RequestId id);
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  StepTokens last_step() const { return last_step_; }

 private:
  // A running request: its copied prompt, progress and generation state.
  struct Request {
    Request(RequestId id, const GenerateOptions& o, int64_t vocab) : id(id), options(o), stream(id, options, vocab) {}
    RequestId id;
    GenerateOptions options;  // the stream reads it: the request is heap-allocated and never moves
    TokenStream stream;
    std::vector<int32_t> tokens, types, blocks;  // types: 0 where the prompt gave none
    std::vector<uint8_t> embedded;               // the token is a placeholder taking an image row
    std::vector<float> embeds;                   // [placeholders, hidden]
    int64_t prefilled = 0;        // prompt tokens in the cache
    int64_t embed_row = 0;        // next embeds row to feed
    int64_t step_count = 0;       // tokens this step feeds
    int32_t next_token = 0;       // the sampled token the next decode step feeds
    bool cancel = false;
    RequestResult result;
  };
  // What a slot's cache rows hold, for prefix reuse: tokens, their types and image rows.
  struct Slot {
    Request* request = nullptr;  // null: free
    std::vector<int32_t> tokens, types, blocks;
    std::vector<uint8_t> embedded;  // the token took an image row
    std::vector<float> embeds;      // those rows, in order
  };

  RequestRunner(const model::GemmaModel& model, std::unique_ptr<Session> session);
  Status Validate(const Prompt& p) const;
  // Prompt tokens slot s already holds for `r` (whole image blocks only; < the prompt's length).
  int64_t CommonPrefix(const Slot& s, const Request& r) const;
  // Picks a free slot for r, keeps its longest reusable prefix (or clears it), binds r to it.
  Status Place(Request& r);
  // This step's chunk of a prefilling request: up to max_chunk tokens, ending before an image block.
  int64_t ChunkLength(const Request& r) const;
  // After the step: records what the slot now holds, samples where the prompt is done.
  void Advance(int64_t slot, Request& r, const float* logits);
  void Finish(int64_t slot, Request& r);
  // A step that failed ends its requests with the error and empties their rows.
  void FailStep(const Status& st, int64_t rows);

  const model::GemmaModel& model_;
  std::unique_ptr<Session> session_;
  std::vector<Slot> slots_;
  std::map<RequestId, std::unique_ptr<Request>> running_;
  std::map<RequestId, std::unique_ptr<Request>> done_;  // finished, not yet taken
  std::vector<RowChunk> chunks_;                        // [slots] this step's rows
  std::vector<float> logits_;                           // [slots, vocab]
  RequestId next_id_ = 0;
  StepTokens last_step_;
};

}  // namespace tessera::runtime
