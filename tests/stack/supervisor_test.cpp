#include "kiln/launcher/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/common/error.h"

using namespace kiln;
using namespace kiln::launcher;

namespace {

class SupervisorTest : public ::testing::Test {
protected:
  void SetUp() override {
    logDir_ = std::filesystem::temp_directory_path() / ("kiln-sup-" + std::to_string(getpid()));
    std::filesystem::create_directories(logDir_);
    options_.logDir = logDir_.string();
    options_.backoffInitial = Millis(5);
    options_.backoffMax = Millis(20);
    options_.crashBudget = 2;
    options_.crashWindow = std::chrono::seconds(60);
  }
  void TearDown() override { std::filesystem::remove_all(logDir_); }

  // Reaps and restarts until `done` or 5 s pass.
  template <class Pred> void pump(Supervisor& supervisor, Pred done) {
    const auto deadline = Clock::now() + Millis(5000);
    while (!done() && Clock::now() < deadline) {
      supervisor.reap();
      supervisor.restartDue();
      std::this_thread::sleep_for(Millis(2));
    }
  }

  std::filesystem::path writeExecutable(const std::string& name, const std::string& content) {
    const auto path = logDir_ / name;
    std::ofstream(path) << content;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }

  std::filesystem::path logDir_;
  SupervisorOptions options_;
};

} // namespace

TEST_F(SupervisorTest, SpendsItsCrashBudgetThenFails) {
  Supervisor shells(options_);
  shells.start(ServiceConfig{"shell", "/bin/cat", 1}); // cat refuses --service-name: exits 1
  pump(shells, [&] { return shells.failed("shell"); });
  ASSERT_TRUE(shells.failed("shell"));
  const std::string reason = shells.failureReason("shell");
  EXPECT_NE(reason.find("crashed 3 times"), std::string::npos) << reason;
  EXPECT_NE(reason.find("crash budget 2"), std::string::npos) << reason;
  EXPECT_EQ(shells.slots("shell")[0]->restarts, 2u);
}

TEST_F(SupervisorTest, RestartsAfterSigkillAndNotAfterRetire) {
  // A long-lived process that ignores our flags: `sh -c 'sleep 30' ...` via a script.
  const auto script = writeExecutable("svc.sh", "#!/bin/sh\nexec sleep 30\n");
  Supervisor supervisor(options_);
  supervisor.start(ServiceConfig{"svc", script.string(), 1});
  const int first = supervisor.slots("svc")[0]->pid;
  ASSERT_GT(first, 0);
  kill(first, SIGKILL);
  pump(supervisor, [&] {
    const int pid = supervisor.slots("svc")[0]->pid;
    return pid > 0 && pid != first;
  });
  const Slot* slot = supervisor.slots("svc")[0];
  EXPECT_NE(slot->pid, first);
  EXPECT_EQ(slot->restarts, 1u);
  EXPECT_NE(slot->lastExit.find("killed by signal 9"), std::string::npos) << slot->lastExit;

  const int second = slot->pid;
  supervisor.retire(second);
  kill(second, SIGTERM);
  pump(supervisor, [&] { return supervisor.slots("svc").empty(); });
  EXPECT_TRUE(supervisor.slots("svc").empty());
  EXPECT_FALSE(supervisor.anyRunning());
}

TEST_F(SupervisorTest, ExecFailureFailsTheServiceAtOnce) {
  Supervisor supervisor(options_);
  supervisor.start(ServiceConfig{"ghost", "/nonexistent/kiln-ghost", 2});
  EXPECT_TRUE(supervisor.failed("ghost"));
  EXPECT_NE(supervisor.failureReason("ghost").find("/nonexistent/kiln-ghost"), std::string::npos);
}

TEST(SupervisorBinary, ResolvesBesideTheExecutableThenPath) {
  EXPECT_EQ(Supervisor::resolveBinary("sh").back(), 'h');
  EXPECT_THROW(Supervisor::resolveBinary("kiln-no-such-binary"), Error);
  EXPECT_EQ(Supervisor::resolveBinary("/bin/sh"), "/bin/sh");
}

TEST_F(SupervisorTest, ABinaryTheKernelCannotRunFailsWithTheExecError) {
  const auto bogus = writeExecutable("kiln-bogus", "\x01\x02 not a program\n");
  Supervisor supervisor(options_);
  supervisor.start(ServiceConfig{"bogus", bogus.string(), 1});
  EXPECT_TRUE(supervisor.failed("bogus"));
  EXPECT_NE(supervisor.failureReason("bogus").find("Exec format error"), std::string::npos)
      << supervisor.failureReason("bogus");
  EXPECT_FALSE(supervisor.anyRunning());
}
