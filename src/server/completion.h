// One completion request from its parsed body to its response: the prompt and the context check,
// the queue, then the tokens streamed (SSE) or gathered (one JSON body) as the engine makes them.
// A stream is written through a chunked content provider (its status line goes out first, so a
// later engine error is an SSE error event); a non-streaming response waits in the handler and
// answers with the outcome's status. Both poll the connection while they wait: a client that goes
// away cancels its request, which frees its slot at the engine's next step.
#pragma once

#include <httplib.h>

#include "server/api_request.h"
#include "server/scheduler.h"
#include "server/served_model.h"

namespace tessera::server {

struct CompletionContext {
  const ServedModel& model;
  Scheduler& scheduler;
  int64_t max_context = 0;
  PromptLimits prompt_limits;
};

// Answers `res` for the parsed request (`req` names the connection to watch): an error status and
// body, the completion's body once it ends, or 200 with a content provider that streams it.
void RunCompletion(const CompletionContext& ctx, const ApiRequest& request, const httplib::Request& req,
                   httplib::Response& res);

// The OpenAI error body and status on `res`.
void ReplyError(const ApiError& e, httplib::Response& res);

}  // namespace tessera::server
