// The routes on cpp-httplib's server: authentication, body limits, the OpenAI routes, /health and
// /metrics, and the API's error shape for everything httplib answers itself (404, 413, 500).
#pragma once

#include <httplib.h>

#include <string>

#include "server/completion.h"
#include "server/metrics.h"

namespace tessera::server {

struct HttpApiOptions {
  std::string api_key;  // empty: no authentication
  int64_t max_body_bytes = 0;
  ApiLimits limits;
  int64_t created = 0;  // the model's "created" time in /v1/models (server start)
};

class HttpApi {
 public:
  HttpApi(const CompletionContext& ctx, Metrics& metrics, HttpApiOptions options);
  void Register(httplib::Server& server);

  // Whether `header` ("Bearer KEY") holds `key`, in time that depends on the key's length only.
  static bool KeyMatches(const std::string& key, const std::string& header);

 private:
  void Completion(ApiRoute route, const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void Models(const httplib::Request& req, httplib::Response& res) const;

  CompletionContext ctx_;
  Metrics& metrics_;
  HttpApiOptions options_;
};

}  // namespace tessera::server
