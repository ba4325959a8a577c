// tessera serve: the OpenAI-compatible HTTP server (tessera/server.h) on one model. Prints
// "tessera serve: listening on http://HOST:PORT" once it accepts connections; SIGINT / SIGTERM
// stop it (queued and running requests end, connections close).
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli.h"
#include "tessera/server.h"

namespace tessera::cli {
namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera serve: %s\n", msg.c_str());
  return 1;
}

// The server's options from the command line (the engine's via ParseEngineOptions).
Status ParseServeOptions(const Args& a, server::ServerOptions* opt, LoadOptions* load) {
  TESSERA_RETURN_IF_ERROR(ParseEngineOptions(a, &opt->session, load));
  StatusOr<int64_t> port = a.Int("port", 8080), slots = a.Int("slots", 4), queue = a.Int("max-queue", 64);
  for (const Status& s : {port.status(), slots.status(), queue.status()}) TESSERA_RETURN_IF_ERROR(s);
  if (port.value() < 0 || port.value() > 65535) return InvalidArgument("--port must be in [0, 65535] (0: a free port)");
  if (slots.value() < 1 || slots.value() > 1024) return InvalidArgument("--slots must be in [1, 1024]");
  if (queue.value() < 0 || queue.value() > 65536) return InvalidArgument("--max-queue must be in [0, 65536]");
  opt->port = static_cast<int>(port.value());
  opt->session.max_batch = slots.value();
  opt->max_queue = queue.value();
  opt->host = a.Get("host", "127.0.0.1");
  opt->model_id = a.Get("model-id");
  opt->api_key = a.Get("api-key");
  if (a.Has("api-key") && opt->api_key.empty()) return InvalidArgument("--api-key must not be empty");
  return Status::Ok();
}

// SIGINT / SIGTERM are blocked in every thread (the mask is inherited) and taken by one watcher
// thread, which stops the server, or ends the process while the model is still loading.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      int sig = 0;
      sigwait(&set_, &sig);
      if (done_) return;
      server::Server* s = server_.load();
      if (s == nullptr) std::_Exit(128 + sig);
      std::fprintf(stderr, "tessera serve: signal %d, stopping\n", sig);
      s->Stop();
    });
  }
  ~SignalWatcher() { Join(); }
  // Afterwards the watcher no longer touches the server.
  void Join() {
    if (!thread_.joinable()) return;
    done_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes the watcher if no signal came
    thread_.join();
  }
  void Watch(server::Server* s) { server_.store(s); }

 private:
  sigset_t set_;
  std::atomic<server::Server*> server_{nullptr};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::string UrlHost(const std::string& host) { return host.find(':') != std::string::npos ? "[" + host + "]" : host; }

}  // namespace

int ServeCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv,
                                      {"model", "model-id", "host", "port", "slots", "max-context", "max-chunk",
                                       "api-key", "threads", "max-queue", "kv-dtype", "attention-precision",
                                       "matmul-precision", "dtype", "quantize"},
                                      kServeFlags);
  if (!parsed.ok()) return Fail(parsed.status().message());
  const Args& a = parsed.value();
  if (!a.Has("model")) return Fail("--model DIR (or FILE.gguf) is required");
  server::ServerOptions opt;
  LoadOptions load;
  if (Status st = ParseServeOptions(a, &opt, &load); !st.ok()) return Fail(st.message());
  SignalWatcher signals;
  std::fprintf(stderr, "tessera serve: loading %s ...\n", a.Get("model").c_str());
  StatusOr<std::unique_ptr<server::Server>> made = server::Server::Create(a.Get("model"), load, opt);
  if (!made.ok()) return Fail(made.status().message());
  server::Server& s = *made.value();
  signals.Watch(&s);
  const Status started = s.Start();
  if (started.ok()) {
    std::fprintf(stderr, "tessera serve: %s, %lld slots of %lld tokens\n", s.model_info().model_type.c_str(),
                 static_cast<long long>(opt.session.max_batch), static_cast<long long>(opt.session.max_context));
    std::printf("tessera serve: listening on http://%s:%d\n", UrlHost(opt.host).c_str(), s.port());
    std::fflush(stdout);
    s.Wait();
  }
  signals.Join();  // before the server goes: the watcher may be stopping it
  return started.ok() ? 0 : Fail(started.message());
}

}  // namespace tessera::cli
