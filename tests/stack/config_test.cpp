#include "kiln/launcher/config.h"

#include <gtest/gtest.h>

#include "kiln/common/error.h"

using kiln::Error;
using kiln::ErrorCode;
using kiln::launcher::StackConfig;

TEST(StackConfig, EmbeddedDefaultRunsEveryServiceInPipelineOrder) {
  const auto config = StackConfig::load("");
  EXPECT_EQ(config.name, "default");
  ASSERT_EQ(config.services.size(), 5u);
  const char* order[] = {"tracer", "guards", "shapes", "partitioner", "codegen"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(config.services[i].name, order[i]);
    EXPECT_EQ(config.services[i].binary, std::string("kiln-") + order[i]);
  }
  EXPECT_EQ(config.service("codegen")->workers, 2);
}

TEST(StackConfig, ReadsEveryKey) {
  const auto config = StackConfig::parse(R"(
[stack]
name = "s1"
run_dir = "/tmp/x"
shm_bytes = 2097152
[broker]
heartbeat_ms = 50
liveness = 3
max_attempts = 2
[supervisor]
backoff_initial_ms = 10
backoff_max_ms = 20
crash_budget = 1
crash_window_s = 5
stop_timeout_ms = 700
[services.alpha]
binary = "/bin/true"
workers = 3
)",
                                         "test");
  EXPECT_EQ(config.name, "s1");
  EXPECT_EQ(config.runDir, "/tmp/x");
  EXPECT_EQ(config.shmBytes, 2097152u);
  EXPECT_EQ(config.heartbeat.count(), 50);
  EXPECT_EQ(config.liveness, 3);
  EXPECT_EQ(config.maxAttempts, 2);
  EXPECT_EQ(config.backoffInitial.count(), 10);
  EXPECT_EQ(config.backoffMax.count(), 20);
  EXPECT_EQ(config.crashBudget, 1);
  EXPECT_EQ(config.crashWindow.count(), 5);
  EXPECT_EQ(config.stopTimeout.count(), 700);
  ASSERT_EQ(config.services.size(), 1u);
  EXPECT_EQ(config.services[0].binary, "/bin/true");
  EXPECT_EQ(config.services[0].workers, 3);
}

static void expectInvalid(const std::string& toml, const std::string& mentions) {
  try {
    StackConfig::parse(toml, "bad.toml");
    FAIL() << "accepted: " << toml;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find(mentions), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("bad.toml"), std::string::npos) << e.message();
  }
}

TEST(StackConfig, BadInputNamesTheFileAndKey) {
  expectInvalid("[broker]\nheartbeat_ms = \"fast\"\n", "broker.heartbeat_ms must be an integer");
  expectInvalid("[broker]\nliveness = 0\n", "broker.liveness must be in [1, 100]");
  expectInvalid("[services.x]\nworkers = -1\n", "x.workers");
  expectInvalid("[services.\"kiln.launcher\"]\n", "not a valid service name");
  expectInvalid("[stack\nname=1", "not valid TOML");
  expectInvalid("stack = 3\n", "stack must be a table");
}

TEST(StackConfig, MissingFileIsNotFound) {
  try {
    StackConfig::load("/nonexistent/stack.toml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }
}
