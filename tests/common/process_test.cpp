#include "kiln/common/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "kiln/common/error.h"

using namespace kiln;

TEST(SpawnProcess, RunsTheBinaryWithItsArguments) {
  const pid_t pid = spawnProcess({"/bin/sh", "-c", "exit 7"});
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(SpawnProcess, ReportsABinaryThatCannotBeExecuted) {
  try {
    spawnProcess({"/nonexistent/kiln-nothing"});
    FAIL() << "spawned a missing binary";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(e.message().find("/nonexistent/kiln-nothing"), std::string::npos);
    EXPECT_NE(e.message().find("No such file"), std::string::npos) << e.message();
  }
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "the failed child was left unreaped";
}

TEST(ProcessAlive, TellsLiveFromZombieFromGone) {
  const pid_t pid = spawnProcess({"/bin/sleep", "30"});
  EXPECT_TRUE(processAlive(pid));
  kill(pid, SIGKILL);
  for (int i = 0; i < 500 && processAlive(pid); ++i) usleep(2000);
  EXPECT_FALSE(processAlive(pid)) << "a zombie counts as dead";
  waitpid(pid, nullptr, 0);
  EXPECT_FALSE(processAlive(pid));
  EXPECT_FALSE(processAlive(0));
  EXPECT_TRUE(processAlive(getpid()));
}
