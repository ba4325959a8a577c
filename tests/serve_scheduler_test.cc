// The server's engine thread (server/scheduler.h): jobs submitted from many threads, more than
// there are slots, each get exactly the tokens a plain Session::Generate gives the same prompt;
// a full queue (its places beyond the free slots) refuses; a cancelled job frees its slot; Stop ends what is queued and running.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/scheduler.h"
#include "tessera/engine.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace tessera::server {
namespace {

using namespace std::chrono_literals;

const std::string kModel = TESSERA_TESTDATA_DIR "/models/gemma3_text";

std::unique_ptr<Model> LoadModel() {
  LoadOptions load;
  load.threads = 2;
  StatusOr<std::unique_ptr<Model>> m = Model::Load(kModel, load);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

SessionOptions Slots(int64_t n) {
  SessionOptions o;
  o.max_batch = n;
  o.max_context = 64;
  o.max_chunk = 8;
  return o;
}

PromptData MakePrompt(int64_t n, int32_t salt) {
  PromptData p;
  p.tokens.push_back(2);
  for (int64_t i = 1; i < n; ++i) p.tokens.push_back(static_cast<int32_t>(10 + (i * 7 + salt * 13) % 400));
  return p;
}

GenerateOptions Options(int64_t max_new, uint64_t seed, float temperature) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  return o;
}

// The reference: the same prompt alone in a one-row session.
std::vector<int32_t> Alone(const Model& m, const PromptData& p, const GenerateOptions& o) {
  StatusOr<std::unique_ptr<Session>> s = m.NewSession(Slots(1));
  EXPECT_TRUE(s.ok()) << s.status().message();
  GenerateOutput out;
  const Status st = s.value()->Generate({p.View()}, o, &out);
  EXPECT_TRUE(st.ok()) << st.message();
  return out.rows.at(0).tokens;
}

// Every token of a job, read the way a handler reads them.
std::vector<int32_t> Drain(Job& job) {
  std::vector<int32_t> tokens;
  while (!job.Wait(tokens.size(), 50ms, &tokens)) {
  }
  return tokens;
}

// A model, a batch of `slots` slots of `context` tokens and the scheduler over it.
struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<RequestBatch> batch;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Scheduler> sched;
};

Engine MakeEngine(int64_t slots, int64_t context, int64_t max_queue, bool start) {
  Engine e;
  e.model = LoadModel();
  if (!e.model) return e;
  SessionOptions o = Slots(slots);
  o.max_context = context;
  auto batch = RequestBatch::Create(*e.model, o);
  EXPECT_TRUE(batch.ok()) << batch.status().message();
  if (!batch.ok()) return e;
  e.batch = std::move(batch).value();
  e.metrics = std::make_unique<Metrics>(slots, 0);
  e.sched = std::make_unique<Scheduler>(*e.batch, max_queue, *e.metrics);
  if (start) e.sched->Start();
  return e;
}

TEST(ServeScheduler, ConcurrentJobsGiveTheirAloneTokens) {
  Engine e = MakeEngine(3, 64, 16, /*start=*/true);
  ASSERT_TRUE(e.sched);
  const Model& m = *e.model;
  Scheduler& sched = *e.sched;
  constexpr int kJobs = 7;  // more than the slots: some wait in the queue
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::vector<int32_t>> got(kJobs), want(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const GenerateOptions o = Options(4 + i % 4, 100 + i, i % 2 ? 0.8f : 0.0f);
    want[i] = Alone(m, MakePrompt(3 + 5 * i, i), o);
    jobs.push_back(std::make_shared<Job>(MakePrompt(3 + 5 * i, i), o));
  }
  std::vector<std::thread> clients;
  for (int i = 0; i < kJobs; ++i)
    clients.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * i));  // arrivals spread over the steps
      ASSERT_TRUE(sched.Submit(jobs[i]));
      ASSERT_TRUE(jobs[i]->WaitAdmitted().ok());
      got[i] = Drain(*jobs[i]);
    });
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kJobs; ++i) {
    EXPECT_EQ(got[i], want[i]) << "job " << i;
    EXPECT_TRUE(jobs[i]->result().status.ok());
    EXPECT_EQ(jobs[i]->result().output.tokens, want[i]);
  }
  sched.Stop();
}

TEST(ServeScheduler, FullQueueRefuses) {
  Engine e = MakeEngine(1, 64, 1, /*start=*/false);  // not started: nothing leaves the queue
  ASSERT_TRUE(e.sched);
  Scheduler& sched = *e.sched;
  // One job for the free slot, one for the queue's place; the third is refused.
  auto first = std::make_shared<Job>(MakePrompt(5, 1), Options(3, 1, 0.0f));
  auto queued = std::make_shared<Job>(MakePrompt(5, 2), Options(3, 1, 0.0f));
  EXPECT_TRUE(sched.Submit(first));
  EXPECT_TRUE(sched.Submit(queued));
  EXPECT_FALSE(sched.Submit(std::make_shared<Job>(MakePrompt(5, 3), Options(3, 1, 0.0f))));
  EXPECT_NE(e.metrics->Render().find("tessera_queue_depth 2\n"), std::string::npos);
  sched.Stop();
  EXPECT_EQ(first->WaitAdmitted().code(), StatusCode::kCancelled);
  EXPECT_EQ(queued->WaitAdmitted().code(), StatusCode::kCancelled);
}

TEST(ServeScheduler, CancelFreesTheSlot) {
  Engine e = MakeEngine(1, 256, 4, /*start=*/true);
  ASSERT_TRUE(e.sched);
  Scheduler& sched = *e.sched;
  auto running = std::make_shared<Job>(MakePrompt(5, 1), Options(240, 1, 0.0f));
  ASSERT_TRUE(sched.Submit(running));
  ASSERT_TRUE(running->WaitAdmitted().ok());
  auto queued = std::make_shared<Job>(MakePrompt(6, 2), Options(3, 1, 0.0f));
  ASSERT_TRUE(sched.Submit(queued));  // waits: the one slot is busy
  running->Cancel();
  std::vector<int32_t> tokens;
  while (!running->Wait(tokens.size(), 50ms, &tokens)) {
  }
  EXPECT_EQ(running->result().output.finish, FinishReason::kCancelled);
  EXPECT_LT(running->result().output.tokens.size(), 240u);
  // The slot is free again: the queued job runs to its end.
  ASSERT_TRUE(queued->WaitAdmitted().ok());
  EXPECT_EQ(Drain(*queued), Alone(*e.model, MakePrompt(6, 2), Options(3, 1, 0.0f)));
  sched.Stop();
}

TEST(ServeScheduler, StopEndsQueuedAndRunningJobs) {
  Engine e = MakeEngine(1, 256, 4, /*start=*/true);
  ASSERT_TRUE(e.sched);
  Scheduler& sched = *e.sched;
  auto running = std::make_shared<Job>(MakePrompt(5, 1), Options(240, 1, 0.0f));
  auto queued = std::make_shared<Job>(MakePrompt(5, 2), Options(240, 1, 0.0f));
  ASSERT_TRUE(sched.Submit(running));
  ASSERT_TRUE(sched.Submit(queued));
  ASSERT_TRUE(running->WaitAdmitted().ok());
  sched.Stop();
  EXPECT_EQ(queued->WaitAdmitted().code(), StatusCode::kCancelled);
  std::vector<int32_t> tokens;
  EXPECT_TRUE(running->Wait(0, 0ms, &tokens));
  EXPECT_EQ(running->result().status.code(), StatusCode::kCancelled);
  EXPECT_FALSE(sched.Submit(std::make_shared<Job>(MakePrompt(5, 3), Options(3, 1, 0.0f))));
}

}  // namespace
}  // namespace tessera::server
