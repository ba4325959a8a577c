// tessera::server::Server: the loaded model, the engine thread and cpp-httplib's listener.
#include "tessera/server.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "server/http_api.h"
#include "server/scheduler.h"
#include "server/served_model.h"
#include "tessera/requests.h"

namespace tessera::server {
namespace {

// HTTP threads beyond one per slot and queue place: /health, /metrics and idle keep-alive
// connections still get a thread when every request place is taken.
constexpr int64_t kSpareHttpThreads = 8;

}  // namespace

struct Server::Impl {
  ServerOptions options;
  ServedModel model;
  std::unique_ptr<RequestBatch> batch;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<HttpApi> api;
  httplib::Server http;
  int port = -1;
  std::thread listener;
  std::atomic<bool> started{false}, listener_done{false};
  std::mutex stop_mu;
  bool stopped = false;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Stop();
  Wait();
}

StatusOr<std::unique_ptr<Server>> Server::Create(const std::string& model_path, const LoadOptions& load,
                                                 const ServerOptions& options) {
  if (options.session.max_batch < 1) return InvalidArgument("serve: --slots must be >= 1");
  if (options.max_queue < 0) return InvalidArgument("serve: --max-queue must be >= 0");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->options.session.mode = Mode::kUnified;
  impl->options.session.all_logits = false;
  StatusOr<ServedModel> m = LoadServedModel(model_path, load, options.model_id);
  if (!m.ok()) return m.status();
  impl->model = std::move(m).value();
  const SessionOptions& session = impl->options.session;
  StatusOr<size_t> kv = impl->model.model->KvCacheBytes(session);
  if (!kv.ok()) return kv.status();
  StatusOr<std::unique_ptr<RequestBatch>> batch = RequestBatch::Create(*impl->model.model, session);
  if (!batch.ok()) return batch.status();
  impl->batch = std::move(batch).value();
  impl->metrics = std::make_unique<Metrics>(session.max_batch, static_cast<int64_t>(kv.value()));
  impl->scheduler = std::make_unique<Scheduler>(*impl->batch, options.max_queue, *impl->metrics);
  CompletionContext ctx{impl->model, *impl->scheduler, session.max_context,
                        PromptLimits{options.max_image_pixels, session.matmul_precision}};
  HttpApiOptions api;
  api.api_key = options.api_key;
  api.max_body_bytes = options.max_body_bytes;
  api.limits.max_messages = options.max_messages;
  api.limits.max_images = options.max_images;
  api.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  impl->api = std::make_unique<HttpApi>(ctx, *impl->metrics, std::move(api));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Start() {
  Impl& s = *impl_;
  // A client that closes its socket mid-write must not kill the process: the write fails instead.
  std::signal(SIGPIPE, SIG_IGN);
  const size_t threads = static_cast<size_t>(s.options.session.max_batch + s.options.max_queue + kSpareHttpThreads);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(static_cast<size_t>(s.options.max_body_bytes));
  s.http.set_keep_alive_max_count(1000);
  s.api->Register(s.http);
  const int port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host)
                                       : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  if (port < 0)
    return InvalidArgument("serve: cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                           " (in use, or not an address of this machine)");
  s.port = port;
  s.scheduler->Start();
  // The socket listens from the bind on: connections made before the accept loop starts wait in
  // the kernel's backlog, so the caller may announce the port now.
  s.listener = std::thread([&s] {
    if (!s.http.listen_after_bind()) std::fprintf(stderr, "tessera serve: the listener stopped with an error\n");
    s.listener_done = true;
  });
  s.started = true;
  return Status::Ok();
}

int Server::port() const { return impl_->port; }

const ModelInfo& Server::model_info() const { return impl_->model.model->info(); }

void Server::Wait() {
  if (impl_->listener.joinable()) impl_->listener.join();
}

void Server::Stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.stop_mu);
    if (s.stopped) return;
    s.stopped = true;
  }
  // httplib's stop() does nothing before its accept loop runs: a stop right after Start waits for it.
  while (s.started && !s.listener_done && !s.http.is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.http.stop();        // no new connections; the listener's pool finishes its handlers...
  s.scheduler->Stop();  // ...which return once their jobs end here (Wait joins the listener)
}

}  // namespace tessera::server
