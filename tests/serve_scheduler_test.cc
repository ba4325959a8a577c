// The server's engine thread (server/scheduler.h): jobs submitted from many threads, more than
// there are slots, each get exactly the tokens a plain Session::Generate gives the same prompt;
// a full queue refuses; a cancelled job frees its slot; Stop ends what is queued and running.
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

TEST(ServeScheduler, ConcurrentJobsGiveTheirAloneTokens) {
  std::unique_ptr<Model> m = LoadModel();
  ASSERT_TRUE(m);
  auto batch = RequestBatch::Create(*m, Slots(3));
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  Metrics metrics(3, 0);
  Scheduler sched(*batch.value(), 16, metrics);
  sched.Start();
  constexpr int kJobs = 7;  // more than the slots: some wait in the queue
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::vector<int32_t>> got(kJobs), want(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const GenerateOptions o = Options(4 + i % 4, 100 + i, i % 2 ? 0.8f : 0.0f);
    want[i] = Alone(*m, MakePrompt(3 + 5 * i, i), o);
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
  std::unique_ptr<Model> m = LoadModel();
  ASSERT_TRUE(m);
  auto batch = RequestBatch::Create(*m, Slots(1));
  ASSERT_TRUE(batch.ok());
  Metrics metrics(1, 0);
  Scheduler sched(*batch.value(), 1, metrics);  // not started: nothing leaves the queue
  auto queued = std::make_shared<Job>(MakePrompt(5, 2), Options(3, 1, 0.0f));
  EXPECT_TRUE(sched.Submit(queued));
  EXPECT_FALSE(sched.Submit(std::make_shared<Job>(MakePrompt(5, 3), Options(3, 1, 0.0f))));
  EXPECT_NE(metrics.Render().find("tessera_queue_depth 1\n"), std::string::npos);
  sched.Stop();
  EXPECT_EQ(queued->WaitAdmitted().code(), StatusCode::kCancelled);
}

TEST(ServeScheduler, CancelFreesTheSlot) {
  std::unique_ptr<Model> m = LoadModel();
  ASSERT_TRUE(m);
  SessionOptions o = Slots(1);
  o.max_context = 256;
  auto batch = RequestBatch::Create(*m, o);
  ASSERT_TRUE(batch.ok());
  Metrics metrics(1, 0);
  Scheduler sched(*batch.value(), 4, metrics);
  sched.Start();
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
  EXPECT_EQ(Drain(*queued), Alone(*m, MakePrompt(6, 2), Options(3, 1, 0.0f)));
  sched.Stop();
}

TEST(ServeScheduler, StopEndsQueuedAndRunningJobs) {
  std::unique_ptr<Model> m = LoadModel();
  ASSERT_TRUE(m);
  SessionOptions o = Slots(1);
  o.max_context = 256;
  auto batch = RequestBatch::Create(*m, o);
  ASSERT_TRUE(batch.ok());
  Metrics metrics(1, 0);
  Scheduler sched(*batch.value(), 4, metrics);
  sched.Start();
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
