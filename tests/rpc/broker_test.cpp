// rpc::Broker with kiln-test-worker processes and raw peers: routing, requeues
// after deaths and silence, the attempt budget, deadlines, unknown services, drain.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <set>

#include <capnp/any.h>
#include <gtest/gtest.h>

#include "kiln/schema/broker.capnp.h"
#include "rpc_fixture.h"

namespace {

using kiln::Clock;
using kiln::Error;
using kiln::ErrorCode;
using kiln::Millis;
using kiln::rpc::WorkerPhase;
using namespace kiln::rpc::test;
using Broker = RpcTest;

ErrorCode callCode(kiln::rpc::Client& client, const std::string& service,
                   capnp::MessageBuilder& request, Millis timeout, std::string* from = nullptr) {
  try {
    client.call(service, request, timeout);
  } catch (const Error& e) {
    if (from) *from = e.service();
    return e.code();
  }
  ADD_FAILURE() << "the call succeeded";
  return ErrorCode::Internal;
}

// The pid of the worker of testsvc that holds a request, once one does.
int waitForBusyWorker(kiln::rpc::test::BrokerThread& broker) {
  int pid = 0;
  waitUntil(
      [&] {
        for (const auto& worker : broker.workers("testsvc"))
          if (worker.phase == WorkerPhase::Busy) pid = worker.pid;
        return pid != 0;
      },
      Millis(5000));
  return pid;
}

bool registered(kiln::rpc::test::BrokerThread& broker, int pid) {
  const auto workers = broker.workers("testsvc");
  return std::any_of(workers.begin(), workers.end(), [&](const auto& w) { return w.pid == pid; });
}

TEST_F(Broker, SpreadsSequentialRequestsOverAllWorkersInTurn) {
  startBroker();
  for (int i = 0; i < 3; ++i) spawnWorker();
  const auto pids = waitForWorkers(3);
  ASSERT_EQ(pids.size(), 3u);

  auto caller = client();
  std::map<int, int> served;
  for (int i = 0; i < 30; ++i) ++served[callPid(*caller, *whoamiRequest())];
  // Least recently used first: with one request at a time, each worker gets every third.
  for (const int pid : pids) EXPECT_EQ(served[pid], 10) << "worker " << pid;
}

TEST_F(Broker, RunsConcurrentRequestsOnDifferentWorkers) {
  startBroker();
  for (int i = 0; i < 3; ++i) spawnWorker();
  const auto pids = waitForWorkers(3);
  ASSERT_EQ(pids.size(), 3u);

  std::vector<std::future<int>> calls;
  for (int i = 0; i < 3; ++i)
    calls.push_back(std::async(std::launch::async, [&] {
      auto caller = client();
      return callPid(*caller, *sleepRequest(300));
    }));
  std::set<int> answered;
  for (auto& call : calls) answered.insert(call.get());
  EXPECT_EQ(answered, std::set<int>(pids.begin(), pids.end()));
}

TEST_F(Broker, RequeuesWhenWorkerDies) {
  startBroker();
  spawnWorker();
  spawnWorker();
  const auto pids = waitForWorkers(2);
  ASSERT_EQ(pids.size(), 2u);

  auto caller = client();
  auto pending = std::async(std::launch::async,
                            [&] { return callPid(*caller, *sleepRequest(300), Millis(5000)); });
  const int holder = waitForBusyWorker(*broker_);
  ASSERT_NE(holder, 0);
  children_.kill(holder);

  const int answered = pending.get(); // a normal reply, not an error
  EXPECT_NE(answered, holder);
  EXPECT_TRUE(answered == pids[0] || answered == pids[1]);
  EXPECT_TRUE(waitUntil([&] { return !registered(*broker_, holder); }, Millis(2000)));
  const auto view = broker_->onBroker([](auto& broker) { return broker.service("testsvc"); });
  EXPECT_EQ(view.served, 1u);
  EXPECT_EQ(view.errors, 0u);
}

TEST_F(Broker, RequeuesAtOnceWhenProcessDiedIsReported) {
  options_.liveness = 200; // silence alone would take 10 s to notice
  startBroker();
  spawnWorker();
  spawnWorker();
  ASSERT_EQ(waitForWorkers(2).size(), 2u);

  auto caller = client();
  auto pending = std::async(std::launch::async,
                            [&] { return callPid(*caller, *sleepRequest(200), Millis(3000)); });
  const int holder = waitForBusyWorker(*broker_);
  ASSERT_NE(holder, 0);
  children_.kill(holder);
  broker_->onBroker([&](auto& broker) { broker.processDied(holder); });
  EXPECT_NE(pending.get(), holder);
  EXPECT_FALSE(registered(*broker_, holder));
}

TEST_F(Broker, DropsWorkerThatStopsHeartbeating) {
  startBroker();
  std::atomic<int> gone{0};
  broker_->onBroker([&](auto& broker) {
    broker.onWorkerGone([&](const kiln::rpc::WorkerView& view) {
      if (view.pid == 4001) ++gone;
    });
  });
  RawPeer silent(options_.workerEndpoint);
  RawPeer beating(options_.workerEndpoint);
  const auto sent = Clock::now();
  silent.send({readyFrame("raw", 4001)});
  beating.send({readyFrame("raw", 4002)});
  ASSERT_EQ(waitForWorkers(2, "raw").size(), 2u);

  // The silent one is forgotten after liveness * heartbeat; the one that beats stays.
  ASSERT_TRUE(waitUntil(
      [&] {
        beating.send({heartbeatFrame()});
        return broker_->workers("raw").size() == 1;
      },
      Millis(3000)));
  EXPECT_GE(Clock::now() - sent, kSilence);
  const auto left = broker_->workers("raw");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].pid, 4002);
  EXPECT_EQ(gone.load(), 1);
  // ... and keeps staying while it beats.
  EXPECT_FALSE(waitUntil(
      [&] {
        beating.send({heartbeatFrame()});
        return broker_->workers("raw").empty();
      },
      kSilence * 3));
}

TEST_F(Broker, RequeuesRequestOfWorkerThatStopsHeartbeating) {
  startBroker();
  RawPeer silent(options_.workerEndpoint);
  silent.send({readyFrame("testsvc", 4001)});
  ASSERT_EQ(waitForWorkers(1).size(), 1u);
  // The raw worker registered first, so it is first in line once the real one is up.
  const pid_t real = spawnWorker();
  ASSERT_TRUE(waitUntil(
      [&] {
        silent.send({heartbeatFrame()});
        return broker_->workers("testsvc").size() == 2;
      },
      Millis(10000)));

  auto caller = client();
  auto pending = std::async(std::launch::async,
                            [&] { return callPid(*caller, *whoamiRequest(), Millis(5000)); });
  ASSERT_TRUE(awaitDispatch(silent, Millis(2000))); // then it goes silent holding it
  EXPECT_EQ(pending.get(), real);
  EXPECT_FALSE(registered(*broker_, 4001));
}

TEST_F(Broker, AnswersUnavailableAfterMaxAttempts) {
  startBroker();
  for (int i = 0; i < 4; ++i) {
    spawnWorker();
    waitForWorkers(i + 1); // registration order is dispatch order
  }
  const auto workers = broker_->workers("testsvc");
  ASSERT_EQ(workers.size(), 4u);

  auto caller = client();
  EXPECT_EQ(callCode(*caller, "testsvc", *crashRequest(), Millis(10000)), ErrorCode::Unavailable);
  // Each of maxAttempts workers took it once and died; the last one never saw it.
  int died = 0;
  for (const auto& worker : workers) {
    if (!children_.alive(worker.pid)) {
      ++died;
      continue;
    }
    EXPECT_EQ(callPid(*caller, *whoamiRequest()), worker.pid);
  }
  EXPECT_EQ(died, options_.maxAttempts);
}

TEST_F(Broker, AnswersDeadlineExceededWhenHandlerOverruns) {
  startBroker();
  const pid_t pid = spawnWorker();
  waitForWorkers(1);
  auto caller = client();
  const auto start = Clock::now();
  std::string from;
  EXPECT_EQ(callCode(*caller, "testsvc", *sleepRequest(800), Millis(200), &from),
            ErrorCode::DeadlineExceeded);
  EXPECT_EQ(from, "broker"); // the broker answered at the deadline; the client did not give up
  EXPECT_GE(Clock::now() - start, Millis(200));

  // The late reply is dropped, and the worker serves the next request.
  auto reply = caller->call("testsvc", *whoamiRequest(), Millis(5000));
  EXPECT_TRUE(reply->root<kiln::testsvc::Reply>().isWhoami());
  EXPECT_EQ(reply->root<kiln::testsvc::Reply>().getPid(), pid);
}

TEST_F(Broker, AnswersDeadlineExceededForRequestQueuedWithoutWorkers) {
  startBroker();
  broker_->onBroker([](auto& broker) { broker.declareService("testsvc"); });
  auto caller = client();
  std::string from;
  EXPECT_EQ(callCode(*caller, "testsvc", *whoamiRequest(), Millis(200), &from),
            ErrorCode::DeadlineExceeded);
  EXPECT_EQ(from, "broker");
  const auto view = broker_->onBroker([](auto& broker) { return broker.service("testsvc"); });
  EXPECT_EQ(view.queueDepth, 0u);
  EXPECT_EQ(view.errors, 1u);
}

TEST_F(Broker, AnswersUnknownService) {
  startBroker();
  spawnWorker();
  waitForWorkers(1);
  auto caller = client();
  std::string from;
  EXPECT_EQ(callCode(*caller, "nosuch", *whoamiRequest(), Millis(2000), &from),
            ErrorCode::UnknownService);
  EXPECT_EQ(from, "broker");
}

TEST_F(Broker, DrainLetsRequestInHandFinishThenWorkerLeaves) {
  options_.liveness = 60; // 3 s: leaving must come from the worker's goodbye, not silence
  startBroker();
  const pid_t draining = spawnWorker();
  waitForWorkers(1);
  const pid_t staying = spawnWorker();
  ASSERT_EQ(waitForWorkers(2).size(), 2u);

  auto first = client();
  auto inHand = std::async(std::launch::async,
                           [&] { return callPid(*first, *sleepRequest(400), Millis(5000)); });
  ASSERT_EQ(waitForBusyWorker(*broker_), draining);
  broker_->onBroker([&](auto& broker) { broker.drain(draining); });

  // Requests sent meanwhile go to the other worker; none is lost.
  std::vector<std::future<int>> more;
  for (int i = 0; i < 6; ++i)
    more.push_back(std::async(std::launch::async, [&] {
      auto caller = client();
      return callPid(*caller, *sleepRequest(20), Millis(5000));
    }));
  for (auto& call : more) EXPECT_EQ(call.get(), staying);
  EXPECT_EQ(inHand.get(), draining);

  const auto status = children_.waitExit(draining, Millis(2000));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "status " << *status;
  EXPECT_TRUE(waitUntil([&] { return !registered(*broker_, draining); }, Millis(1000)));
  EXPECT_TRUE(registered(*broker_, staying));
  EXPECT_EQ(callPid(*first, *whoamiRequest()), staying);
}

TEST_F(Broker, IgnoresReplyForAnotherDispatch) {
  startBroker();
  RawPeer worker(options_.workerEndpoint);
  worker.send({readyFrame("testsvc", 4001)});
  ASSERT_EQ(waitForWorkers(1).size(), 1u);

  auto firstClient = client();
  auto first = std::async(std::launch::async,
                          [&] { return callPid(*firstClient, *whoamiRequest(), Millis(5000)); });
  const auto held = awaitDispatch(worker, Millis(2000));
  ASSERT_TRUE(held);
  // A reply naming a dispatch it does not hold: the worker is still busy with `held`.
  worker.send({workerReplyFrame(*held + 1000), whoamiReplyBody(4001)});
  auto secondClient = client();
  auto second = std::async(std::launch::async,
                           [&] { return callPid(*secondClient, *whoamiRequest(), Millis(5000)); });
  EXPECT_FALSE(dispatchedWithin(worker, Millis(300)));

  worker.send({workerReplyFrame(*held), whoamiReplyBody(4001)});
  EXPECT_EQ(first.get(), 4001);
  const auto next = awaitDispatch(worker, Millis(2000));
  ASSERT_TRUE(next);
  worker.send({workerReplyFrame(*next), whoamiReplyBody(4001)});
  EXPECT_EQ(second.get(), 4001);
}

TEST_F(Broker, AnswersMalformedWhenWorkerErrorCannotBeDecoded) {
  startBroker();
  RawPeer worker(options_.workerEndpoint);
  worker.send({readyFrame("testsvc", 4001)});
  ASSERT_EQ(waitForWorkers(1).size(), 1u);

  auto firstClient = client();
  auto first = std::async(std::launch::async, [&] {
    return callCode(*firstClient, "testsvc", *whoamiRequest(), Millis(5000));
  });
  const auto held = awaitDispatch(worker, Millis(2000));
  ASSERT_TRUE(held);
  capnp::MallocMessageBuilder bad;
  auto reply = bad.initRoot<kiln::schema::WorkerMessage>().initReply();
  reply.setDispatchId(*held);
  // The error's `message` (its pointer 0) holds a struct where text belongs.
  capnp::AnyStruct::Builder(reply.initError()).getPointerSection()[0].initAs<kiln::testsvc::Nest>();
  worker.send({frameBytes(bad)});
  EXPECT_EQ(first.get(), ErrorCode::Malformed);

  // The worker is free again: the next request goes to it.
  auto secondClient = client();
  auto second = std::async(std::launch::async,
                           [&] { return callPid(*secondClient, *whoamiRequest(), Millis(5000)); });
  const auto next = awaitDispatch(worker, Millis(2000));
  ASSERT_TRUE(next);
  worker.send({workerReplyFrame(*next), whoamiReplyBody(4001)});
  EXPECT_EQ(second.get(), 4001);
}

} // namespace
