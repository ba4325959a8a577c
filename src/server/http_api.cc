#include "server/http_api.h"

#include <exception>

#include "server/api_response.h"

namespace tessera::server {
namespace {

constexpr const char* kChatPath = "/v1/chat/completions";
constexpr const char* kCompletionPath = "/v1/completions";

// A body past the limit is still read (and dropped) up to this many times the limit, so the reply
// can be a clean 413 on a connection that stays usable; beyond it the connection is given up.
constexpr int64_t kDrainFactor = 4;

// The route a request counts under in /metrics (a bounded set of labels, whatever the path).
std::string RouteLabel(const std::string& path) {
  for (const char* known : {kChatPath, kCompletionPath, "/v1/models", "/health", "/metrics"})
    if (path == known) return known;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

ApiError ReadBody(const httplib::ContentReader& reader, const httplib::Response& res, int64_t max, std::string* body) {
  bool too_large = false;
  int64_t seen = 0;
  const bool ok = reader([&](const char* data, size_t n) {
    seen += static_cast<int64_t>(n);
    if (too_large || seen > max) {
      too_large = true;
      body->clear();
      return seen <= kDrainFactor * max;
    }
    body->append(data, n);
    return true;
  });
  if (too_large || res.status == 413)
    return ApiError{413, "invalid_request_error", "request_too_large", "",
                    "the request body is larger than " + std::to_string(max) + " bytes"};
  if (!ok) return BadRequest("", "the request body could not be read");
  return {};
}

// The body httplib's own answers (unknown route, bad request line, payload too large) lack.
ApiError DefaultError(const httplib::Request& req, int status) {
  switch (status) {
    case 404:
      return ApiError{404, "invalid_request_error", "not_found", "", "no route " + req.method + " " + req.path};
    case 405:
      return ApiError{405, "invalid_request_error", "method_not_allowed", "",
                      req.method + " is not allowed on " + req.path};
    case 413:
      return ApiError{413, "invalid_request_error", "request_too_large", "", "the request is too large"};
    default:
      if (status >= 500) return ApiError{status, "server_error", "", "", "internal server error"};
      return ApiError{status, "invalid_request_error", "", "", "the request is malformed"};
  }
}

std::string ModelJson(const std::string& id, int64_t created) {
  std::string s = "{\"id\":";
  AppendJsonString(id, &s);
  return s + ",\"object\":\"model\",\"created\":" + std::to_string(created) + ",\"owned_by\":\"tessera\"}";
}

}  // namespace

HttpApi::HttpApi(const CompletionContext& ctx, Metrics& metrics, HttpApiOptions options)
    : ctx_(ctx), metrics_(metrics), options_(std::move(options)) {}

bool HttpApi::KeyMatches(const std::string& key, const std::string& header) {
  static const std::string kBearer = "Bearer ";
  const bool scheme = header.compare(0, kBearer.size(), kBearer) == 0;
  const std::string_view given = scheme ? std::string_view(header).substr(kBearer.size()) : std::string_view();
  // Every byte of the key is compared whatever the given one holds: the time tells nothing of
  // where they differ.
  unsigned diff = given.size() != key.size() || !scheme;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(key[i]) ^ g;
  }
  return diff == 0;
}

bool HttpApi::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options_.api_key.empty() || KeyMatches(options_.api_key, req.get_header_value("Authorization"))) return true;
  ReplyError(ApiError{401, "invalid_request_error", "invalid_api_key", "",
                      "a valid API key is required: 'Authorization: Bearer KEY'"},
             res);
  res.set_header("WWW-Authenticate", "Bearer");
  return false;
}

void HttpApi::Completion(ApiRoute route, const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader) {
  std::string body;
  if (ApiError e = ReadBody(reader, res, options_.max_body_bytes, &body); !e.ok()) return ReplyError(e, res);
  if (!Authorized(req, res)) return;
  ApiRequest r;
  if (ApiError e = ParseApiRequest(route, body, options_.limits, &r); !e.ok()) return ReplyError(e, res);
  body = std::string();  // the images' bytes are in r now; the body's copy can go
  if (!r.model.empty() && r.model != ctx_.model.id)
    return ReplyError(ApiError{404, "invalid_request_error", "model_not_found", "model",
                               "the model '" + r.model + "' does not exist; this server serves '" + ctx_.model.id + "'"},
                      res);
  RunCompletion(ctx_, r, req, res);
}

void HttpApi::Models(const httplib::Request& req, httplib::Response& res) const {
  if (!Authorized(req, res)) return;
  const std::string model = ModelJson(ctx_.model.id, options_.created);
  if (req.matches.size() > 1) {
    if (req.matches[1] != ctx_.model.id)
      return ReplyError(ApiError{404, "invalid_request_error", "model_not_found", "model",
                                 "the model '" + req.matches[1].str() + "' does not exist"},
                        res);
    return res.set_content(model, "application/json");
  }
  res.set_content("{\"object\":\"list\",\"data\":[" + model + "]}", "application/json");
}

void HttpApi::Register(httplib::Server& server) {
  for (auto [path, route] : {std::pair{kChatPath, ApiRoute::kChat}, std::pair{kCompletionPath, ApiRoute::kCompletion}}) {
    server.Post(path, [this, route](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& reader) { Completion(route, req, res, reader); });
    server.Get(path, [](const httplib::Request&, httplib::Response& res) { res.status = 405; });
  }
  server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { Models(req, res); });
  server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { Models(req, res); });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
  });
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    res.set_content(ErrorJson(DefaultError(req, res.status)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    ReplyError(ApiError{500, "server_error", "", "", "internal error: " + what}, res);
  });
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.CountRequest(RouteLabel(req.path), res.status);
  });
}

}  // namespace tessera::server
