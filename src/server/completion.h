// One completion request from its parsed body to its response: the prompt and the context check,
// the queue, then the tokens streamed (SSE) or gathered (one JSON body) as the engine makes them.
// Both kinds of response are written from the handler thread through a chunked content provider,
// which polls the connection while it waits: a client that goes away cancels its request, which
// frees its slot at the engine's next step.
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

// Answers `res` for the parsed request: an error status and body, or 200 with a content provider
// that streams or gathers the completion.
void RunCompletion(const CompletionContext& ctx, const ApiRequest& request, httplib::Response& res);

// The OpenAI error body and status on `res`.
void ReplyError(const ApiError& e, httplib::Response& res);

}  // namespace tessera::server
