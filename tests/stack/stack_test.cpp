// Whole-stack tests: the real `kiln` launcher and real service processes in a
// temporary run dir, driven through the CLI and the client library.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/client/stack.h"
#include "kiln/common/error.h"
#include "kiln/common/process.h"
#include "kiln/launcher/supervisor.h"
#include "kiln/schema/broker.capnp.h"
#include "kiln/schema/launcher.capnp.h"
#include "kiln/shm/store.h"

#include "kiln/testsvc/testsvc.capnp.h"
#include <capnp/any.h>

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct CommandResult {
  int exitCode;
  std::string output;
};

CommandResult runKiln(const std::string& args) {
  const std::string command = std::string(KILN_BIN_DIR) + "/kiln " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

bool processGone(int pid) {
  return !processAlive(pid);
}

template <class Pred> bool eventually(Pred pred, Millis within = Millis(10000)) {
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(Millis(20));
  }
  return pred();
}

constexpr const char* kFastStack = R"(
[stack]
shm_bytes = 67108864
ready_timeout_ms = 10000
[broker]
heartbeat_ms = 50
liveness = 4
[supervisor]
backoff_initial_ms = 20
backoff_max_ms = 200
stop_timeout_ms = 3000
[services.tracer]
[services.guards]
[services.shapes]
[services.partitioner]
[services.codegen]
workers = 2
)";

// Pings services in a loop from its own thread and connection, counting outcomes.
class Load {
public:
  Load(std::string runDir, std::vector<std::string> services)
      : thread_([this, runDir, services] {
          auto stack = client::Stack::connect(runDir);
          for (size_t i = 0; !stop_.load(); ++i) {
            const std::string& service = services[i % services.size()];
            try {
              if (stack.ping(service, "load", Millis(5000)) == "load")
                ++ok_;
              else
                ++wrong_;
            } catch (const Error& e) {
              std::lock_guard<std::mutex> lock(mutex_);
              errors_[std::string(errorCodeName(e.code()))]++;
            } catch (...) {
              ++wrong_;
            }
          }
        }) {}
  ~Load() { finish(); }

  void finish() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int ok() const { return ok_.load(); }
  int wrong() const { return wrong_.load(); }
  std::map<std::string, int> errors() {
    std::lock_guard<std::mutex> lock(mutex_);
    return errors_;
  }

private:
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::atomic<int> wrong_{0};
  std::mutex mutex_;
  std::map<std::string, int> errors_;
  std::thread thread_;
};

class StackTest : public ::testing::Test {
protected:
  void SetUp() override {
    static int counter = 0;
    runDir_ =
        fs::path("/tmp") / ("kst-" + std::to_string(getpid()) + "-" + std::to_string(++counter));
    config_ = runDir_.string() + ".toml";
    std::ofstream(config_) << kFastStack;
  }

  void TearDown() override {
    if (fs::exists(runDir_ / "launcher.lock")) {
      const int pid = launcherPid();
      runKiln(where() + " down --timeout-ms 5000");
      if (pid > 0 && !processGone(pid)) kill(pid, SIGKILL);
    }
    fs::remove_all(runDir_);
    fs::remove(config_);
  }

  std::string where() const { return "--config " + config_ + " --run-dir " + runDir_.string(); }
  int launcherPid() const {
    std::ifstream in(runDir_ / "launcher.lock");
    int pid = 0;
    in >> pid;
    return pid;
  }
  void up() {
    const auto result = runKiln(where() + " up");
    ASSERT_EQ(result.exitCode, 0) << result.output;
  }
  client::StackStatus status() { return client::Stack::connect(runDir_.string()).status(); }

  fs::path runDir_;
  std::string config_;
};

} // namespace

TEST_F(StackTest, UpShowsEveryServiceRunningAndDownLeavesNothing) {
  up();
  const auto result = runKiln(where() + " status");
  ASSERT_EQ(result.exitCode, 0) << result.output;
  std::vector<int> pids = {launcherPid()};
  const auto before = status();
  ASSERT_EQ(before.services.size(), 5u);
  for (const auto& service : before.services) {
    EXPECT_EQ(service.state, "running") << service.name;
    EXPECT_NE(result.output.find(service.name), std::string::npos);
    for (const auto& worker : service.workers) pids.push_back(worker.pid);
  }
  EXPECT_EQ(before.service("codegen")->workers.size(), 2u);
  const std::string segment = "/dev/shm/" + client::StackPaths{runDir_.string()}.segmentName();
  EXPECT_TRUE(fs::exists(segment));

  const auto down = runKiln(where() + " down");
  ASSERT_EQ(down.exitCode, 0) << down.output;
  for (int pid : pids) EXPECT_TRUE(eventually([&] { return processGone(pid); })) << "pid " << pid;
  EXPECT_FALSE(fs::exists(runDir_));
  EXPECT_FALSE(fs::exists(segment));
}

TEST_F(StackTest, SigkillOfEachServiceUnderLoadIsContained) {
  up();
  const std::vector<std::string> names = {"tracer", "guards", "shapes", "partitioner", "codegen"};
  Load load(runDir_.string(), names);
  for (const auto& name : names) {
    const auto before = status();
    const int victim = before.service(name)->workers.front().pid;
    ASSERT_GT(victim, 0);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    // Restarted under a new pid and registered again.
    EXPECT_TRUE(eventually([&] {
      const auto now = status();
      const auto* s = now.service(name);
      bool replaced = s->state == "running";
      for (const auto& w : s->workers) replaced = replaced && w.pid != victim;
      return replaced && s->restarts >= 1;
    })) << name;
  }
  const int servedBefore = load.ok();
  EXPECT_TRUE(eventually([&] { return load.ok() > servedBefore + 50; }));
  load.finish();

  const auto after = status();
  for (const auto& name : names) {
    EXPECT_GE(after.service(name)->restarts, 1u) << name;
    EXPECT_NE(after.service(name)->workers.front().lastExit.find("signal 9"), std::string::npos);
  }
  EXPECT_GT(load.ok(), 100);
  EXPECT_EQ(load.wrong(), 0);
  // Every request completed or got a typed error of the kinds a crash may cause.
  for (const auto& [code, count] : load.errors())
    EXPECT_TRUE(code == "unavailable" || code == "deadline_exceeded") << code << " x" << count;
}

TEST_F(StackTest, SwapUnderLoadLosesNoRequest) {
  up();
  const auto before = status().service("codegen")->workers;
  Load first(runDir_.string(), {"codegen"});
  Load second(runDir_.string(), {"codegen"});
  std::this_thread::sleep_for(Millis(200));
  const auto swap =
      runKiln(where() + " swap codegen " + std::string(KILN_BIN_DIR) + "/kiln-codegen");
  ASSERT_EQ(swap.exitCode, 0) << swap.output;
  std::this_thread::sleep_for(Millis(200));
  first.finish();
  second.finish();

  const auto afterStatus = status();
  const auto* after = afterStatus.service("codegen");
  ASSERT_EQ(after->workers.size(), 2u);
  for (const auto& old : before) {
    for (const auto& now : after->workers) EXPECT_NE(now.pid, old.pid);
    EXPECT_TRUE(eventually([&] { return processGone(old.pid); }));
  }
  EXPECT_EQ(after->state, "running");
  EXPECT_GT(first.ok() + second.ok(), 100);
  EXPECT_EQ(first.wrong() + second.wrong(), 0);
  EXPECT_TRUE(first.errors().empty());
  EXPECT_TRUE(second.errors().empty());
}

TEST_F(StackTest, SwapToABrokenBinaryKeepsTheOldWorkers) {
  up();
  const auto before = status().service("tracer")->workers.front().pid;
  const auto swap = runKiln(where() + " swap tracer /bin/false");
  EXPECT_NE(swap.exitCode, 0);
  EXPECT_NE(swap.output.find("unavailable"), std::string::npos) << swap.output;
  EXPECT_EQ(status().service("tracer")->workers.front().pid, before);
  EXPECT_EQ(client::Stack::connect(runDir_.string()).ping("tracer", "x"), "x");
}

TEST_F(StackTest, ASecondStackCannotTakeTheSameRunDir) {
  up();
  const auto again = runKiln(where() + " up");
  EXPECT_NE(again.exitCode, 0);
  EXPECT_NE(again.output.find("already runs"), std::string::npos) << again.output;
  EXPECT_EQ(status().services.size(), 5u);
}

TEST_F(StackTest, CrashLoopingServiceIsMarkedFailedWithItsReason) {
  std::ofstream(config_) << R"(
[broker]
heartbeat_ms = 50
[supervisor]
backoff_initial_ms = 5
backoff_max_ms = 20
crash_budget = 2
[services.tracer]
[services.flaky]
binary = "/bin/false"
)";
  const auto result = runKiln(where() + " up");
  EXPECT_NE(result.exitCode, 0);
  EXPECT_NE(result.output.find("flaky"), std::string::npos) << result.output;
  const auto now = status();
  const auto* flaky = now.service("flaky");
  ASSERT_NE(flaky, nullptr);
  EXPECT_EQ(flaky->state, "failed");
  EXPECT_NE(flaky->failureReason.find("crash budget 2"), std::string::npos) << flaky->failureReason;
  EXPECT_EQ(now.service("tracer")->state, "running");
  try {
    client::Stack::connect(runDir_.string()).ping("flaky", "x", Millis(2000));
    FAIL() << "a failed service answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unavailable) << e.what();
  }
  try {
    client::Stack::connect(runDir_.string()).ping("nosuch", "x", Millis(2000));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::UnknownService) << e.what();
  }
}

TEST_F(StackTest, HungWorkerIsKilledAndRestarted) {
  std::ofstream(config_) << "[broker]\nheartbeat_ms = 50\n"
                         << "[supervisor]\nhang_grace_ms = 100\nbackoff_initial_ms = 10\n"
                         << "[services.testsvc]\nbinary = \"" << KILN_TEST_WORKER << "\"\n";
  up();
  const int hung = status().service("testsvc")->workers.front().pid;
  auto stack = client::Stack::connect(runDir_.string());
  capnp::MallocMessageBuilder sleep;
  sleep.initRoot<testsvc::Request>().setSleep(60000);
  try {
    stack.rpc().call("testsvc", sleep, Millis(200));
    FAIL() << "a 60 s sleep answered within 200 ms";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::DeadlineExceeded) << e.what();
  }
  EXPECT_TRUE(eventually([&] {
    const auto now = status();
    const auto* s = now.service("testsvc");
    return s->state == "running" && s->workers.front().pid != hung;
  }));
  const auto after = status();
  const auto* s = after.service("testsvc");
  EXPECT_EQ(s->restarts, 1u);
  EXPECT_NE(s->workers.front().lastExit.find("hung"), std::string::npos)
      << s->workers.front().lastExit;
  EXPECT_TRUE(processGone(hung));

  capnp::MallocMessageBuilder echo;
  echo.initRoot<testsvc::Request>().setEcho(kj::StringPtr("back").asBytes());
  auto reply = stack.rpc().call("testsvc", echo, Millis(2000));
  EXPECT_EQ(reply->root<testsvc::Reply>().getPid(), s->workers.front().pid);
}

TEST_F(StackTest, LogsShowWhatAServiceWrote) {
  up();
  const auto logs = runKiln(where() + " logs tracer");
  ASSERT_EQ(logs.exitCode, 0) << logs.output;
  EXPECT_NE(logs.output.find("worker ready service=tracer"), std::string::npos) << logs.output;
  const auto last = runKiln(where() + " logs launcher -n 1");
  ASSERT_EQ(last.exitCode, 0) << last.output;
  EXPECT_EQ(std::count(last.output.begin(), last.output.end(), '\n'), 1) << last.output;
  const auto missing = runKiln(where() + " logs nosuch");
  EXPECT_NE(missing.exitCode, 0);
  EXPECT_NE(missing.output.find("not_found"), std::string::npos) << missing.output;
}

TEST_F(StackTest, LauncherReclaimsTheShmLeasesOfDeadClients) {
  up();
  const std::string segment = client::StackPaths{runDir_.string()}.segmentName();
  const pid_t child = fork();
  if (child == 0) {
    auto store = shm::Store::attach(segment);
    store.allocate(shm::TensorMeta::contiguous(shm::DType::Float32, {1024}), shm::Lifetime::Leased);
    _exit(0); // dies holding the only lease
  }
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto store = shm::Store::attach(segment);
  ASSERT_EQ(store.list().size(), 1u);
  EXPECT_TRUE(eventually([&] { return store.list().empty(); }, Millis(5000)))
      << "the launcher did not reclaim the dead client's lease";
}

TEST_F(StackTest, LauncherAnswersBadRequestsWithTypedErrors) {
  up();
  const int launcher = launcherPid();
  auto stack = client::Stack::connect(runDir_.string());
  auto expectError = [&](capnp::MessageBuilder& request, ErrorCode code, const char* what) {
    try {
      stack.rpc().call("kiln.launcher", request, Millis(2000));
      ADD_FAILURE() << what << ": answered ok";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    }
  };
  capnp::MallocMessageBuilder list;
  list.getRoot<capnp::AnyPointer>().initAs<capnp::List<int32_t>>(3);
  expectError(list, ErrorCode::Malformed, "a list where a struct belongs");

  capnp::MallocMessageBuilder unknownVerb; // Envelope's first data word is the union tag
  unknownVerb.initRoot<schema::Envelope>().setRequestId(99);
  expectError(unknownVerb, ErrorCode::Unsupported, "verb 99");

  capnp::MallocMessageBuilder noService;
  noService.initRoot<schema::LauncherRequest>().initSwap().setService("nosuch");
  expectError(noService, ErrorCode::NotFound, "swap of an unknown service");

  capnp::MallocMessageBuilder noBinary;
  auto swap = noBinary.initRoot<schema::LauncherRequest>().initSwap();
  swap.setService("tracer");
  swap.setBinary("/nonexistent/kiln-tracer");
  expectError(noBinary, ErrorCode::NotFound, "swap to a missing binary");

  const auto bogus = runDir_.string() + "-bogus";
  std::ofstream(bogus) << "not a program\n";
  std::filesystem::permissions(bogus, std::filesystem::perms::owner_all);
  capnp::MallocMessageBuilder badBinary;
  auto badSwap = badBinary.initRoot<schema::LauncherRequest>().initSwap();
  badSwap.setService("codegen");
  badSwap.setBinary(bogus);
  expectError(badBinary, ErrorCode::NotFound, "swap to a binary the kernel cannot run");
  fs::remove(bogus);
  const auto after = stack.status();
  EXPECT_EQ(after.service("codegen")->workers.size(), 2u) << "a failed swap left slots behind";
  EXPECT_EQ(after.service("codegen")->state, "running");

  EXPECT_TRUE(processAlive(launcher));
  EXPECT_EQ(stack.status().services.size(), 5u);
  EXPECT_EQ(stack.ping("tracer", "still"), "still");
}

TEST_F(StackTest, ALauncherKilledTakesItsServicesAndItsRunDirIsReclaimed) {
  up();
  const auto before = status();
  std::vector<int> services;
  for (const auto& service : before.services)
    for (const auto& worker : service.workers) services.push_back(worker.pid);
  const int launcher = launcherPid();
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  for (int pid : services) EXPECT_TRUE(eventually([&] { return processGone(pid); })) << pid;
  EXPECT_TRUE(fs::exists(runDir_ / "launcher.lock")) << "nothing cleaned up after a SIGKILL";
  // Known dead by its pid: the error comes at once, not after the connect timeout (a
  // minute here, so that a loaded machine cannot blur the two).
  const auto start = Clock::now();
  try {
    client::Stack::connect(runDir_.string(), Millis(60000));
    FAIL() << "connected to a dead stack";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unavailable);
    EXPECT_NE(e.message().find("is gone"), std::string::npos) << e.message();
  }
  EXPECT_LT(Clock::now() - start, Millis(30000)) << "waited for a launcher known dead";

  up(); // the stale run dir (and its segment) is taken over
  EXPECT_NE(launcherPid(), launcher);
  EXPECT_EQ(status().services.size(), 5u);
  EXPECT_EQ(client::Stack::connect(runDir_.string()).ping("codegen", "again"), "again");

  // `kiln down` of a stack whose launcher died just removes what it left.
  ASSERT_EQ(kill(launcherPid(), SIGKILL), 0);
  EXPECT_TRUE(eventually([&] { return processGone(launcherPid()); }));
  const auto down = runKiln(where() + " down");
  EXPECT_EQ(down.exitCode, 0) << down.output;
  EXPECT_FALSE(fs::exists(runDir_));
}

TEST_F(StackTest, SigtermStopsAForegroundLauncherCleanly) {
  const pid_t launcher = spawnProcess({std::string(KILN_BIN_DIR) + "/kiln", "--config", config_,
                                       "--run-dir", runDir_.string(), "up", "--foreground"});
  ASSERT_TRUE(eventually([&] {
    try {
      const auto now = status();
      for (const auto& service : now.services)
        if (service.state != "running") return false;
      return true;
    } catch (const Error&) {
      return false;
    }
  }));
  std::vector<int> services;
  for (const auto& service : status().services)
    for (const auto& worker : service.workers) services.push_back(worker.pid);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  int wait = 0;
  ASSERT_EQ(waitpid(launcher, &wait, 0), launcher);
  EXPECT_TRUE(WIFEXITED(wait) && WEXITSTATUS(wait) == 0) << launcher::describeExit(wait);
  for (int pid : services) EXPECT_TRUE(processGone(pid)) << pid;
  EXPECT_FALSE(fs::exists(runDir_));
}
