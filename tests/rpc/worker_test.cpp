// rpc::Worker as a real process (kiln-test-worker): it heartbeats while a long
// handler runs, and on SIGTERM finishes the request in hand, says goodbye, exits 0.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "rpc_fixture.h"

namespace {

using kiln::Clock;
using kiln::Millis;
using namespace kiln::rpc::test;
using Worker = RpcTest;

TEST_F(Worker, HeartbeatsWhileHandlerRuns) {
  startBroker();
  std::atomic<int> gone{0};
  broker_->onBroker(
      [&](auto& broker) { broker.onWorkerGone([&](const kiln::rpc::WorkerView&) { ++gone; }); });
  const pid_t pid = spawnWorker();
  ASSERT_EQ(waitForWorkers(1).size(), 1u);
  const auto registeredAt = broker_->workers("testsvc")[0].registeredAt;

  const uint32_t longMs = 5 * kSilence.count();
  auto reply = client()->call("testsvc", *sleepRequest(longMs), Millis(longMs + 5000));
  EXPECT_EQ(reply->root<kiln::testsvc::Reply>().getPid(), pid);
  EXPECT_EQ(reply->root<kiln::testsvc::Reply>().getSlept(), longMs);
  EXPECT_EQ(gone.load(), 0) << "the broker dropped the worker while it was busy";
  const auto workers = broker_->workers("testsvc");
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].registeredAt, registeredAt);
  EXPECT_EQ(workers[0].served, 1u);
}

TEST_F(Worker, FinishesRequestInHandOnSigtermThenExitsZero) {
  options_.liveness = 60; // 3 s: leaving must come from the worker's goodbye, not silence
  startBroker();
  const pid_t pid = spawnWorker();
  ASSERT_EQ(waitForWorkers(1).size(), 1u);

  auto caller = client();
  auto pending = std::async(std::launch::async,
                            [&] { return callPid(*caller, *sleepRequest(600), Millis(5000)); });
  ASSERT_TRUE(waitUntil(
      [&] {
        const auto workers = broker_->workers("testsvc");
        return !workers.empty() && workers[0].phase == kiln::rpc::WorkerPhase::Busy;
      },
      Millis(5000)));
  // Dispatched is not yet in hand: give the worker time to read it. (Stopped before
  // that, it leaves and the broker requeues the request: no loss, but not this test.)
  std::this_thread::sleep_for(Millis(150));
  kill(pid, SIGTERM);
  EXPECT_EQ(pending.get(), pid);
  const auto status = children_.waitExit(pid, Millis(2000));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  EXPECT_TRUE(waitUntil([&] { return broker_->workers("testsvc").empty(); }, Millis(1000)));
}

TEST_F(Worker, RegistersAgainWithABrokerThatRestarted) {
  startBroker();
  const pid_t pid = spawnWorker();
  waitForWorkers(1);
  broker_.reset(); // the broker dies with its sockets and its table of workers
  std::this_thread::sleep_for(kSilence * 2);
  startBroker(); // a new broker on the same endpoints knows nobody
  const auto registered = waitForWorkers(1);
  ASSERT_EQ(registered.size(), 1u);
  EXPECT_EQ(registered.front(), pid);
  auto caller = client();
  EXPECT_EQ(callPid(*caller, *whoamiRequest()), pid);
  EXPECT_TRUE(children_.alive(pid));
}

} // namespace
