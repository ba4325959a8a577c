// libFuzzer target: the server's request parser (server::ParseApiRequest, what /v1/chat/completions
// and /v1/completions run on a body) and the text path behind every response (TextStream,
// AppendJsonString). The first byte picks the route; the rest is the body. Invariants: an accepted
// request is within the API's ranges and the limits (images decoded within max_image_bytes, at most
// max_images, 1..4 non-empty stop strings, messages_json a JSON array); a refusal is a 400 with a
// message. The body, cut into pieces, streams through a TextStream to a prefix of itself that never
// holds a completed stop string, and any bytes written as a JSON string parse back.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "server/api_request.h"
#include "server/api_response.h"
#include "server/text_stream.h"

namespace {

using tessera::server::ApiError;
using tessera::server::ApiLimits;
using tessera::server::ApiRequest;
using tessera::server::ApiRoute;

void CheckAccepted(const ApiRequest& r, ApiRoute route, const ApiLimits& limits) {
  FUZZ_CHECK(r.route == route, "route");
  FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 2, "temperature out of [0, 2]");
  FUZZ_CHECK(r.top_p > 0 && r.top_p <= 1, "top_p out of (0, 1]");
  FUZZ_CHECK(r.top_k >= 0, "negative top_k");
  FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1, "max_tokens < 1");
  FUZZ_CHECK(static_cast<int64_t>(r.stop.size()) <= limits.max_stop, "too many stop strings");
  for (const std::string& s : r.stop) FUZZ_CHECK(!s.empty(), "empty stop string");
  FUZZ_CHECK(!r.include_usage || r.stream, "include_usage without stream");
  FUZZ_CHECK(r.images.size() == r.image_params.size(), "an image without its param");
  FUZZ_CHECK(static_cast<int64_t>(r.images.size()) <= limits.max_images, "too many images");
  for (const std::string& img : r.images)
    FUZZ_CHECK(!img.empty() && static_cast<int64_t>(img.size()) <= limits.max_image_bytes, "image size");
  if (route == ApiRoute::kChat) {
    const nlohmann::json m = nlohmann::json::parse(r.messages_json, nullptr, false);
    FUZZ_CHECK(m.is_array() && !m.empty(), "messages_json is not a non-empty array");
  } else {
    FUZZ_CHECK(r.prompt_is_ids ? !r.prompt_ids.empty() : !r.prompt_text.empty(), "empty prompt");
    for (int32_t id : r.prompt_ids) FUZZ_CHECK(id >= 0, "negative token id");
  }
}

void CheckText(std::string_view body) {
  // Stop strings from the body itself, so matches happen; pieces of varying length.
  std::vector<std::string> stops;
  if (body.size() > 6) stops = {std::string(body.substr(body.size() / 2, 3)), std::string(body.substr(1, 1))};
  tessera::server::TextStream t(stops);
  std::string out;
  for (size_t i = 0, n = 1; i < body.size(); i += n, n = n % 5 + 1) out += t.Append(body.substr(i, n));
  out += t.Finish();
  FUZZ_CHECK(body.substr(0, out.size()) == out, "streamed text is not a prefix of the input");
  FUZZ_CHECK(t.stopped() || out == body, "text lost without a stop string");
  for (const std::string& s : stops) FUZZ_CHECK(out.find(s) == std::string::npos, "a completed stop string was sent");
  std::string json;
  tessera::server::AppendJsonString(body, &json);
  FUZZ_CHECK(!nlohmann::json::parse(json, nullptr, false).is_discarded(), "AppendJsonString wrote invalid JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ApiRoute route = data[0] & 1 ? ApiRoute::kCompletion : ApiRoute::kChat;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  ApiLimits limits;
  limits.max_images = 3;
  limits.max_image_bytes = 256;
  tessera::fuzz::NoEscape("ParseApiRequest", [&] {
    ApiRequest r;
    const ApiError e = tessera::server::ParseApiRequest(route, body, limits, &r);
    if (!e.ok()) {
      FUZZ_CHECK(e.status == 400 && !e.message.empty(), "a refusal must be a 400 saying why");
      return;
    }
    CheckAccepted(r, route, limits);
  });
  tessera::fuzz::NoEscape("TextStream", [&] { CheckText(body); });
  return 0;
}
