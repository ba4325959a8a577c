// ParseApiRequest: the JSON body of /v1/chat/completions and /v1/completions to an ApiRequest.
// Fields the engine cannot honour (n > 1, logprobs, penalties, tools...) are refused by name rather
// than silently ignored, so a client never gets an answer to a question it did not ask; fields that
// change nothing about the tokens (user, metadata, ...) are ignored, as the API does.
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_nesting.h"
#include "server/api_request.h"

namespace tessera::server {
namespace {

using Json = nlohmann::json;

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string TypeName(const Json& v) { return v.is_null() ? "null" : v.type_name(); }

ApiError WrongType(const std::string& param, const char* want, const Json& v) {
  return BadRequest(param, "'" + param + "' must be " + want + ", got " + TypeName(v));
}

// A number field within [lo, hi] (open at lo when lo_open).
ApiError ReadNumber(const Json& body, const char* name, double lo, double hi, bool lo_open, float* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number()) return WrongType(name, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo))
    return BadRequest(name, "'" + std::string(name) + "' must be in " + (lo_open ? "(" : "[") + Number(lo) + ", " +
                                Number(hi) + "], got " + it->dump());
  *out = static_cast<float>(v);
  return {};
}

// An integer field >= lo.
ApiError ReadInt(const Json& body, const char* name, int64_t lo, std::optional<int64_t>* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number_integer()) return WrongType(name, "an integer", *it);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return BadRequest(name, "'" + std::string(name) + "' is too large: " + it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < lo) return BadRequest(name, "'" + std::string(name) + "' must be >= " + std::to_string(lo) + ", got " + it->dump());
  *out = v;
  return {};
}

ApiError ReadBool(const Json& body, const char* name, bool* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_boolean()) return WrongType(name, "a boolean", *it);
  *out = it->get<bool>();
  return {};
}

ApiError ReadSeed(const Json& body, ApiRequest* r) {
  auto it = body.find("seed");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_number_integer()) return WrongType("seed", "an integer", *it);
  r->seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  return {};
}

ApiError ReadStop(const Json& body, const ApiLimits& limits, ApiRequest* r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<const Json*> items;
  if (it->is_string()) {
    items.push_back(&*it);
  } else if (it->is_array()) {
    if (static_cast<int64_t>(it->size()) > limits.max_stop)
      return BadRequest("stop", "'stop' holds at most " + std::to_string(limits.max_stop) + " strings, got " +
                                    std::to_string(it->size()));
    for (const Json& s : *it) items.push_back(&s);
  } else {
    return WrongType("stop", "a string or a list of strings", *it);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string param = it->is_array() ? "stop[" + std::to_string(i) + "]" : "stop";
    if (!items[i]->is_string()) return WrongType(param, "a string", *items[i]);
    const std::string& s = items[i]->get_ref<const std::string&>();
    if (s.empty()) return BadRequest(param, "'" + param + "' is empty");
    if (static_cast<int64_t>(s.size()) > limits.max_stop_bytes)
      return BadRequest(param, "'" + param + "' is longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
    r->stop.push_back(s);
  }
  return {};
}

// Fields the engine does not implement: refused unless absent or at their no-op value.
ApiError RefuseUnsupported(const Json& body, ApiRoute route) {
  auto given = [&](const char* name) {
    auto it = body.find(name);
    return it != body.end() && !it->is_null();
  };
  auto nonzero = [&](const char* name) { return given(name) && !(body[name].is_number() && body[name] == 0); };
  auto truthy = [&](const char* name) { return given(name) && !(body[name].is_boolean() && !body[name].get<bool>()); };
  auto nonempty = [&](const char* name) { return given(name) && !((body[name].is_array() || body[name].is_object()) && body[name].empty()); };
  if (given("n") && !(body["n"].is_number_integer() && body["n"] == 1))
    return BadRequest("n", "only n = 1 is supported, got " + body["n"].dump());
  for (const char* name : {"frequency_penalty", "presence_penalty"})
    if (nonzero(name)) return BadRequest(name, std::string("'") + name + "' is not supported (only 0)");
  if (nonempty("logit_bias")) return BadRequest("logit_bias", "'logit_bias' is not supported");
  if (route == ApiRoute::kChat) {
    if (truthy("logprobs")) return BadRequest("logprobs", "'logprobs' is not supported");
    if (given("top_logprobs")) return BadRequest("top_logprobs", "'top_logprobs' is not supported");
    for (const char* name : {"tools", "functions"})
      if (nonempty(name)) return BadRequest(name, std::string("'") + name + "' (tool calling) is not supported");
    if (given("response_format")) {
      const Json& f = body["response_format"];
      if (!f.is_object() || f.value("type", Json()) != "text")
        return BadRequest("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
  } else {
    if (given("logprobs") && !(body["logprobs"].is_number_integer() && body["logprobs"] == 0))
      return BadRequest("logprobs", "'logprobs' is not supported");
    if (truthy("echo")) return BadRequest("echo", "'echo' is not supported");
    if (given("best_of") && !(body["best_of"].is_number_integer() && body["best_of"] == 1))
      return BadRequest("best_of", "only best_of = 1 is supported");
    if (given("suffix") && !(body["suffix"].is_string() && body["suffix"].get_ref<const std::string&>().empty()))
      return BadRequest("suffix", "'suffix' is not supported");
  }
  return {};
}

// One content part of a chat message: text, or an image given as a data URL.
ApiError ReadPart(const Json& part, const std::string& param, const ApiLimits& limits, Json* parts, ApiRequest* r) {
  if (!part.is_object()) return WrongType(param, "an object", part);
  auto type = part.find("type");
  if (type == part.end() || !type->is_string()) return BadRequest(param + ".type", "'" + param + ".type' must be a string");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") {
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return BadRequest(param + ".text", "'" + param + ".text' must be a string");
    parts->push_back({{"type", "text"}, {"text", *text}});
    return {};
  }
  if (t != "image_url")
    return BadRequest(param + ".type", "content part type '" + t + "' is not supported (text, image_url)");
  if (static_cast<int64_t>(r->images.size()) >= limits.max_images)
    return BadRequest(param, "a request holds at most " + std::to_string(limits.max_images) + " images");
  auto image = part.find("image_url");
  if (image == part.end() || !image->is_object() || !image->contains("url") || !(*image)["url"].is_string())
    return BadRequest(param + ".image_url.url", "'" + param + ".image_url' must be an object with a string 'url'");
  std::string bytes;
  ApiError e = DecodeDataUrl((*image)["url"].get_ref<const std::string&>(), param + ".image_url.url",
                             limits.max_image_bytes, &bytes);
  if (!e.ok()) return e;
  r->images.push_back(std::move(bytes));
  r->image_params.push_back(param);
  parts->push_back({{"type", "image"}});
  return {};
}

ApiError ReadMessage(const Json& m, const std::string& param, const ApiLimits& limits, Json* out, ApiRequest* r) {
  if (!m.is_object()) return WrongType(param, "an object", m);
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return BadRequest(param + ".role", "'" + param + ".role' must be a string");
  std::string who = role->get<std::string>();
  if (who == "developer") who = "system";  // the API's newer name for the system role
  if (who != "system" && who != "user" && who != "assistant" && who != "tool")
    return BadRequest(param + ".role", "'" + param + ".role' must be system, developer, user, assistant or tool, got '" +
                                           role->get<std::string>() + "'");
  auto content = m.find("content");
  Json c;
  if (content == m.end() || content->is_null()) {
    if (who != "assistant") return BadRequest(param + ".content", "'" + param + ".content' is missing");
    c = "";  // an assistant turn that only called tools
  } else if (content->is_string()) {
    c = *content;
  } else if (content->is_array()) {
    c = Json::array();
    for (size_t i = 0; i < content->size(); ++i) {
      ApiError e = ReadPart((*content)[i], param + ".content[" + std::to_string(i) + "]", limits, &c, r);
      if (!e.ok()) return e;
    }
  } else {
    return WrongType(param + ".content", "a string or a list of content parts", *content);
  }
  out->push_back({{"role", who}, {"content", std::move(c)}});
  return {};
}

ApiError ReadMessages(const Json& body, const ApiLimits& limits, ApiRequest* r) {
  auto it = body.find("messages");
  if (it == body.end()) return BadRequest("messages", "'messages' is required");
  if (!it->is_array()) return WrongType("messages", "a list of messages", *it);
  if (it->empty()) return BadRequest("messages", "'messages' is empty");
  if (static_cast<int64_t>(it->size()) > limits.max_messages)
    return BadRequest("messages", "at most " + std::to_string(limits.max_messages) + " messages, got " +
                                      std::to_string(it->size()));
  Json messages = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    ApiError e = ReadMessage((*it)[i], "messages[" + std::to_string(i) + "]", limits, &messages, r);
    if (!e.ok()) return e;
  }
  // Rebuilt from checked fields only: shallow, so dumping it never recurses deep.
  r->messages_json = messages.dump(-1, ' ', false, Json::error_handler_t::replace);
  return {};
}

ApiError ReadIds(const Json& ids, const std::string& param, ApiRequest* r) {
  if (ids.empty()) return BadRequest(param, "'" + param + "' is empty");
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& v = ids[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())))
      return BadRequest(param + "[" + std::to_string(i) + "]", "token ids must be non-negative 32-bit integers, got " + v.dump());
    r->prompt_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  r->prompt_is_ids = true;
  return {};
}

// A string, a list of token ids, or a one-element list of either (the API's batch forms, batch 1).
ApiError ReadPrompt(const Json& body, ApiRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("prompt", "'prompt' is required");
  const Json* p = &*it;
  std::string param = "prompt";
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];
    param = "prompt[0]";
  } else if (p->is_array() && !p->empty() && !(*p)[0].is_number()) {
    return BadRequest("prompt", "one prompt per request: 'prompt' must be a string or a list of token ids");
  }
  if (p->is_string()) {
    r->prompt_text = p->get<std::string>();
    if (r->prompt_text.empty()) return BadRequest(param, "'" + param + "' is empty");
    return {};
  }
  if (!p->is_array()) return WrongType(param, "a string or a list of token ids", *p);
  return ReadIds(*p, param, r);
}

ApiError ReadSampling(const Json& body, ApiRequest* r) {
  if (ApiError e = ReadNumber(body, "temperature", 0.0, 2.0, false, &r->temperature); !e.ok()) return e;
  if (ApiError e = ReadNumber(body, "top_p", 0.0, 1.0, /*lo_open=*/true, &r->top_p); !e.ok()) return e;
  std::optional<int64_t> top_k;
  if (ApiError e = ReadInt(body, "top_k", -1, &top_k); !e.ok()) return e;
  r->top_k = top_k.value_or(0) < 0 ? 0 : top_k.value_or(0);
  return ReadSeed(body, r);
}

ApiError ReadLengthAndStream(const Json& body, ApiRequest* r) {
  // The API's newer name wins when both are given.
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    if (r->max_tokens) break;
    if (ApiError e = ReadInt(body, name, 1, &r->max_tokens); !e.ok()) return e;
  }
  if (ApiError e = ReadBool(body, "stream", &r->stream); !e.ok()) return e;
  if (ApiError e = ReadBool(body, "return_token_ids", &r->return_token_ids); !e.ok()) return e;
  auto opts = body.find("stream_options");
  if (opts != body.end() && !opts->is_null()) {
    if (!r->stream) return BadRequest("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (!opts->is_object()) return WrongType("stream_options", "an object", *opts);
    if (ApiError e = ReadBool(*opts, "include_usage", &r->include_usage); !e.ok()) {
      e.param = "stream_options.include_usage";
      return e;
    }
  }
  return {};
}

}  // namespace

ApiError BadRequest(std::string param, std::string message) {
  return ApiError{400, "invalid_request_error", "", std::move(param), std::move(message)};
}

ApiError ParseApiRequest(ApiRoute route, std::string_view body, const ApiLimits& limits, ApiRequest* out) {
  *out = ApiRequest{};
  out->route = route;
  // Printing or copying a parsed value recurses per level: a deep document is refused unparsed.
  if (const Status st = io::CheckJsonNesting(body, "the request body"); !st.ok()) return BadRequest("", st.message());
  const Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return BadRequest("", "the request body is not valid JSON");
  if (!j.is_object()) return BadRequest("", "the request body must be a JSON object, got " + TypeName(j));
  auto model = j.find("model");
  if (model != j.end() && !model->is_null()) {
    if (!model->is_string()) return WrongType("model", "a string", *model);
    out->model = model->get<std::string>();
  }
  if (ApiError e = RefuseUnsupported(j, route); !e.ok()) return e;
  if (ApiError e = route == ApiRoute::kChat ? ReadMessages(j, limits, out) : ReadPrompt(j, out); !e.ok()) return e;
  if (ApiError e = ReadSampling(j, out); !e.ok()) return e;
  if (ApiError e = ReadStop(j, limits, out); !e.ok()) return e;
  return ReadLengthAndStream(j, out);
}

}  // namespace tessera::server
