// rpc::Client through a real broker and kiln-test-worker: reply bodies, typed
// errors from the service, and its own deadline when nothing answers.
#include <gtest/gtest.h>

#include "rpc_fixture.h"

namespace {

using kiln::Clock;
using kiln::Error;
using kiln::ErrorCode;
using kiln::Millis;
using namespace kiln::rpc::test;
using Client = RpcTest;

TEST_F(Client, GetsTheReplyBody) {
  startBroker();
  const pid_t pid = spawnWorker();
  waitForWorkers(1);
  const std::string payload(256 * 1024, 'p');
  auto reply = client()->call("testsvc", *echoRequest(payload), Millis(5000));
  auto root = reply->root<kiln::testsvc::Reply>();
  EXPECT_EQ(root.getPid(), pid);
  ASSERT_TRUE(root.isEcho());
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(root.getEcho().begin()), root.getEcho().size()),
      payload);
}

TEST_F(Client, ThrowsTheErrorTheServiceAnswered) {
  startBroker();
  spawnWorker();
  waitForWorkers(1);
  try {
    client()->call("testsvc", *failRequest("no such tensor"), Millis(5000));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.message(), "no such tensor");
    EXPECT_EQ(e.service(), "testsvc");
  }
}

TEST_F(Client, ThrowsDeadlineExceededWhenNothingAnswersThenRecovers) {
  auto caller = client(); // no broker yet: the request waits in the socket
  const auto start = Clock::now();
  try {
    caller->call("testsvc", *whoamiRequest(), Millis(100));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::DeadlineExceeded);
  }
  EXPECT_GE(Clock::now() - start, Millis(100));
  EXPECT_LT(Clock::now() - start, Millis(3000));

  startBroker();
  const pid_t pid = spawnWorker();
  waitForWorkers(1);
  EXPECT_EQ(callPid(*caller, *whoamiRequest()), pid);
}

TEST_F(Client, RefusesATimeoutThatIsNotPositive) {
  auto caller = client();
  for (const Millis timeout : {Millis(0), Millis(-5)}) {
    try {
      caller->call("testsvc", *whoamiRequest(), timeout);
      FAIL() << "accepted a timeout of " << timeout.count() << " ms";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
}

} // namespace
