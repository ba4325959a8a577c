#include "server/completion.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <random>

#include "server/api_response.h"
#include "server/client_socket.h"
#include "server/text_stream.h"

namespace tessera::server {
namespace {

using namespace std::chrono_literals;

// How often a waiting handler looks whether its client is still connected.
constexpr auto kPollInterval = 100ms;

ApiError ServerError(std::string message) { return ApiError{500, "server_error", "", "", std::move(message)}; }

// A request refused when Add saw it: the client's error unless the server is going down.
ApiError AdmissionError(const Status& st) {
  if (st.code() == StatusCode::kCancelled) return ApiError{503, "server_error", "unavailable", "", st.message()};
  if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kOutOfRange)
    return BadRequest("", st.message());
  return ServerError(st.message());
}

ApiError QueueFull() {
  return ApiError{503, "server_error", "queue_full", "",
                  "the server is busy: every slot and queue place is taken; retry later"};
}

// max_new_tokens within the context: prompt + completion <= max_context.
ApiError CompletionBudget(const ApiRequest& r, int64_t prompt, int64_t max_context, int64_t* max_new) {
  const int64_t room = max_context - prompt;
  if (room < 1 || (r.max_tokens && *r.max_tokens > room)) {
    // Saturating: max_tokens may be any int64 the client sent.
    const int64_t total = !r.max_tokens ? prompt
                          : *r.max_tokens > std::numeric_limits<int64_t>::max() - prompt
                              ? std::numeric_limits<int64_t>::max()
                              : prompt + *r.max_tokens;
    const std::string asked = std::to_string(total);
    const std::string parts = r.max_tokens ? " (" + std::to_string(prompt) + " in the prompt, " +
                                                 std::to_string(*r.max_tokens) + " in the completion)"
                                           : " in the prompt, with no room left for a completion";
    return ApiError{400, "invalid_request_error", "context_length_exceeded",
                    r.route == ApiRoute::kChat ? "messages" : "prompt",
                    "This model's maximum context length is " + std::to_string(max_context) +
                        " tokens. However, you requested " + asked + " tokens" + parts + "."};
  }
  *max_new = r.max_tokens.value_or(room);
  return {};
}

uint64_t FreshSeed() {
  thread_local std::mt19937_64 gen(std::random_device{}());
  return gen();
}

GenerateOptions MakeOptions(const ApiRequest& r, const ServedModel& m, int64_t max_new) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = r.temperature;
  o.sampling.top_p = r.top_p;
  o.sampling.top_k = r.top_k;
  o.sampling.seed = r.seed ? *r.seed : FreshSeed();
  o.stop_tokens = r.route == ApiRoute::kChat ? m.chat_stop_tokens : m.stop_tokens;
  return o;
}

const char* FinishReasonOf(FinishReason f) { return f == FinishReason::kStop ? "stop" : "length"; }

// A running completion as the handler sees it: its job, its text and its chunk writer. Going out
// of scope cancels the job (a no-op once it finished), so every way out frees the slot.
class Generation {
 public:
  Generation(const CompletionContext& ctx, const ApiRequest& r, std::shared_ptr<Job> job, int64_t prompt_tokens)
      : model_(ctx.model),
        job_(std::move(job)),
        stop_tokens_(job_->options().stop_tokens),
        text_(r.stop),
        route_(r.route),
        id_((r.route == ApiRoute::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(FreshSeed())),
        created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                     .count()),
        chunks_(r.route, id_, created_, model_.id, r.include_usage),
        include_usage_(r.include_usage),
        return_ids_(r.return_token_ids) {
    usage_.prompt_tokens = prompt_tokens;
    fresh_.reserve(64);
    if (return_ids_) {
      ids_.reserve(static_cast<size_t>(job_->options().max_new_tokens));
      chunks_.ReturnTokenIds(&job_->prompt().tokens);
    }
  }
  ~Generation() { job_->Cancel(); }

  // Runs to the end of the completion, handing text to `emit` as it becomes safe to send. Returns
  // false when the client went away (`alive` or `emit` said so).
  template <class Emit, class Alive>
  bool Run(Emit&& emit, Alive&& alive) {
    auto checked = std::chrono::steady_clock::now();
    for (;;) {
      fresh_.clear();
      const bool finished = job_->Wait(have_, kPollInterval, &fresh_);
      for (int32_t token : fresh_) {
        ++have_;
        usage_.completion_tokens = static_cast<int64_t>(have_);
        if (std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end()) continue;
        if (return_ids_) ids_.push_back(token);
        const std::string_view t = text_.Append(model_.tokenizer->Piece(token));
        if (!t.empty() && !emit(t)) return false;
        if (text_.stopped()) {  // the rest is not wanted: free the slot now
          job_->Cancel();
          finish_ = "stop";
          return true;
        }
      }
      if (finished) return Finish(emit);
      // Tokens may arrive every few milliseconds with nothing written (a non-streaming response):
      // the connection is looked at by the clock, not per wake-up.
      const auto now = std::chrono::steady_clock::now();
      if (now - checked >= kPollInterval) {
        if (!alive()) return false;
        checked = now;
      }
    }
  }

  // return_token_ids: the completion's ids not handed out yet (each chunk carries the ids whose
  // text it sends; the finish chunk the rest).
  std::span<const int32_t> TakeUnsentIds() {
    const std::span<const int32_t> out = std::span<const int32_t>(ids_).subspan(ids_sent_);
    ids_sent_ = ids_.size();
    return out;
  }
  // For the non-streaming body; null without return_token_ids.
  std::optional<TokenIds> Ids() const {
    if (!return_ids_) return std::nullopt;
    return TokenIds{&job_->prompt().tokens, ids_};
  }
  const ApiError& error() const { return error_; }
  const char* finish_reason() const { return finish_; }
  const Usage& usage() const { return usage_; }
  std::string_view text() const { return text_.text(); }
  ChunkWriter& chunks() { return chunks_; }
  bool include_usage() const { return include_usage_; }
  const std::string& id() const { return id_; }
  const std::string& model_id() const { return model_.id; }
  int64_t created() const { return created_; }
  ApiRoute route() const { return route_; }

 private:
  template <class Emit>
  bool Finish(Emit&& emit) {
    const RequestResult& res = job_->result();
    if (!res.status.ok()) {
      error_ = res.status.code() == StatusCode::kCancelled ? AdmissionError(res.status) : ServerError(res.status.message());
      return true;
    }
    finish_ = FinishReasonOf(res.output.finish);
    const std::string_view rest = text_.Finish();
    return rest.empty() || emit(rest);
  }

  const ServedModel& model_;
  std::shared_ptr<Job> job_;
  const std::vector<int32_t> stop_tokens_;
  TextStream text_;
  ApiRoute route_;
  std::string id_;
  int64_t created_;
  ChunkWriter chunks_;
  bool include_usage_;
  bool return_ids_;
  std::vector<int32_t> ids_;  // return_token_ids: the completion's ids (stop tokens left out)
  size_t ids_sent_ = 0;
  Usage usage_;
  size_t have_ = 0;
  std::vector<int32_t> fresh_;
  const char* finish_ = nullptr;
  ApiError error_;
};

// SSE: a role chunk (chat), a chunk per piece of text, the finish chunk, the usage chunk when
// asked, [DONE]. An engine error after the start is an error event.
bool StreamEvents(Generation& g, httplib::DataSink& sink) {
  auto send = [&](std::string_view s) { return sink.write(s.data(), s.size()); };
  if (g.route() == ApiRoute::kChat && !send(g.chunks().Role())) return false;
  const bool ok = g.Run([&](std::string_view t) { return send(g.chunks().Text(t, g.TakeUnsentIds())); },
                        [&] { return sink.is_writable(); });
  if (!ok) return false;
  if (!g.error().ok()) {
    if (!send(g.chunks().Error(g.error()))) return false;
  } else {
    if (!send(g.chunks().Finish(g.finish_reason(), g.TakeUnsentIds()))) return false;
    if (g.include_usage() && !send(g.chunks().UsageChunk(g.usage()))) return false;
  }
  if (!send(ChunkWriter::kDone)) return false;
  sink.done();
  return true;
}

// One JSON body once the completion ends, written by the handler itself: the status follows the
// outcome, so an engine error after the start is an error status, not a 200 with an error body.
// Meanwhile the connection is watched; a client that left gets nothing (status 499, as nginx
// counts a request its client closed, in /metrics only).
void GatherBody(Generation& g, const ClientSocket& client, httplib::Response& res) {
  if (!g.Run([](std::string_view) { return true; }, [&] { return client.Connected(); })) {
    res.status = 499;
    return;
  }
  if (!g.error().ok()) return ReplyError(g.error(), res);
  const std::optional<TokenIds> ids = g.Ids();
  res.status = 200;
  res.set_content(CompletionJson(g.route(), g.id(), g.created(), g.model_id(), g.text(), g.finish_reason(), g.usage(),
                                 ids ? &*ids : nullptr),
                  "application/json");
}

}  // namespace

void ReplyError(const ApiError& e, httplib::Response& res) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

void RunCompletion(const CompletionContext& ctx, const ApiRequest& r, const httplib::Request& req,
                   httplib::Response& res) {
  if (!ctx.scheduler.HasRoom()) return ReplyError(QueueFull(), res);  // before tokenizing and encoding images
  PromptData prompt;
  if (ApiError e = BuildPrompt(ctx.model, r, ctx.prompt_limits, &prompt); !e.ok()) return ReplyError(e, res);
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  int64_t max_new = 0;
  if (ApiError e = CompletionBudget(r, prompt_tokens, ctx.max_context, &max_new); !e.ok()) return ReplyError(e, res);
  auto job = std::make_shared<Job>(std::move(prompt), MakeOptions(r, ctx.model, max_new));
  if (!ctx.scheduler.Submit(job)) return ReplyError(QueueFull(), res);
  if (const Status st = job->WaitAdmitted(); !st.ok()) return ReplyError(AdmissionError(st), res);
  auto g = std::make_shared<Generation>(ctx, r, std::move(job), prompt_tokens);
  if (!r.stream) return GatherBody(*g, ClientSocket::Find(req.remote_addr, req.remote_port, req.local_port), res);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream",
                                   [g](size_t, httplib::DataSink& sink) { return StreamEvents(*g, sink); });
}

}  // namespace tessera::server
