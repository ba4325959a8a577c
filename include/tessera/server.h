// `tessera serve`: an OpenAI-compatible HTTP server over the request/slot runtime
// (tessera/requests.h). One engine thread owns the RequestBatch; HTTP handler threads parse,
// tokenize and queue requests and stream their tokens back (docs/serving.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/engine.h"
#include "tessera/status.h"

namespace tessera::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless the operator says otherwise
  int port = 8080;                 // 0: a free port (port() says which)
  std::string model_id;            // the name in /v1/models and responses; empty: the path's basename
  std::string api_key;             // empty: no authentication; else "Authorization: Bearer KEY"
  // The engine: session.max_batch is the number of slots (concurrent requests), max_context each
  // one's prompt + completion tokens. The mode is always unified.
  SessionOptions session;
  int64_t max_queue = 64;  // requests waiting for a slot; more get 503 + Retry-After
  // Request limits (413 / 400 beyond them).
  int64_t max_body_bytes = int64_t{32} << 20;
  int64_t max_messages = 256;
  int64_t max_images = 8;                      // image parts per request
  int64_t max_image_pixels = int64_t{1} << 25;  // one decoded image (width x height)
};

class Server {
 public:
  // Loads the model at `model_path` (a checkpoint directory or a .gguf file) with its tokenizer
  // and chat template, and sizes the slots; nothing listens yet.
  static StatusOr<std::unique_ptr<Server>> Create(const std::string& model_path, const LoadOptions& load,
                                                  const ServerOptions& options);
  ~Server();  // Stop()s

  // Binds host:port and starts the engine and the HTTP threads; port() is then the bound port.
  Status Start();
  int port() const;
  // Blocks until Stop() (from another thread, e.g. a signal watcher) has closed everything.
  void Wait();
  // Stops accepting, ends queued and running requests, closes connections. Thread-safe, idempotent.
  void Stop();

  const ModelInfo& model_info() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
