// The guards service through a real stack: its verbs, typed errors for bad
// requests, entries surviving a SIGKILL of the service, and two client
// processes of one job reaching the same dynamic decision and artifact.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <capnp/any.h>
#include <gtest/gtest.h>

#include "kiln_cli.h"
#include "kiln/client/stack.h"
#include "kiln/common/error.h"
#include "kiln/guards/wire.h"
#include "kiln/runtime/artifact.h"
#include "kiln/schema/broker.capnp.h"
#include "kiln/schema/guards.capnp.h"
#include "kiln/sym/symbol_table.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

using kiln::testing::runKiln;

template <class Pred> bool eventually(Pred pred, Millis within = Millis(15000)) {
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(Millis(20));
  }
  return pred();
}

const guards::FunctionKey kFn{"model", "Block.forward", "c0ffee"};
const std::vector<std::string> kNames = {"x"};

guards::CallInput callOf(int64_t batch, int64_t width = 3) {
  guards::CallInput call;
  call.args = {guards::Input::of(guards::contiguousTensor(DType::Float32, {batch, width}))};
  call.state = guards::defaultGlobalState();
  return call;
}

guards::CompiledEntry entryFor(const guards::CallInput& call, const guards::FrameState& frame,
                               const std::string& artifact) {
  guards::CompiledEntry e;
  e.guards = guards::guardsForCall(call, kNames, frame);
  e.artifacts = {artifact};
  return e;
}

class GuardsTest : public ::testing::Test {
protected:
  void SetUp() override {
    static int counter = 0;
    base_ = "/tmp/kgt-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    runDir_ = base_ + "-run";
    cache_ = base_ + "-cache";
    ::setenv("KILN_CACHE_DIR", cache_.c_str(), 1); // the stack's services inherit both
    ::setenv("KILN_GUARDS_CACHE_LIMIT", "3", 1);
    std::string out = runKiln("--run-dir " + runDir_ + " up");
    ASSERT_NE(out.find("up"), std::string::npos) << out;
  }
  void TearDown() override {
    runKiln("--run-dir " + runDir_ + " down");
    fs::remove_all(runDir_);
    fs::remove_all(cache_);
    ::unsetenv("KILN_CACHE_DIR");
    ::unsetenv("KILN_GUARDS_CACHE_LIMIT");
  }
  std::string guardsLog() { return runKiln("--run-dir " + runDir_ + " logs guards -n 1000"); }

  std::string base_, runDir_, cache_;
};

TEST_F(GuardsTest, VerbsThroughTheStack) {
  auto stack = client::Stack::connect(runDir_);
  client::GuardsEntries none = stack.guardsEntries(kFn);
  EXPECT_TRUE(none.entries.empty());
  EXPECT_EQ(none.limit, 3u) << "KILN_GUARDS_CACHE_LIMIT";

  // First call: a miss with no entries; observe, "trace", insert.
  client::GuardsLookup first = stack.guardsLookup(kFn, callOf(8));
  EXPECT_FALSE(first.hit);
  EXPECT_TRUE(first.reasons.empty());
  guards::FrameState frame = stack.guardsObserve(kFn, guards::observe(callOf(8), kNames));
  client::GuardsInsert inserted = stack.guardsInsert(kFn, entryFor(callOf(8), frame, "art-8"));
  EXPECT_EQ(inserted.id, 1u);
  EXPECT_FALSE(inserted.runEagerly);
  client::GuardsLookup hit = stack.guardsLookup(kFn, callOf(8));
  ASSERT_TRUE(hit.hit);
  EXPECT_EQ(hit.hit->id, 1u);
  EXPECT_EQ(hit.hit->artifacts, std::vector<std::string>{"art-8"});

  // Another batch: a miss naming the guard; automatic dynamic makes dim 0 a symbol.
  client::GuardsLookup miss = stack.guardsLookup(kFn, callOf(16));
  ASSERT_FALSE(miss.hit);
  ASSERT_EQ(miss.reasons.size(), 1u);
  EXPECT_EQ(miss.reasons[0].first, 1u);
  EXPECT_NE(miss.reasons[0].second.find("got 16"), std::string::npos) << miss.reasons[0].second;
  frame = stack.guardsObserve(kFn, guards::observe(callOf(16), kNames));
  EXPECT_TRUE(frame.dynamicDim("L['x']", 0));
  EXPECT_EQ(stack.guardsInsert(kFn, entryFor(callOf(16), frame, "art-dyn")).id, 2u);
  for (int64_t batch : {16, 5, 300}) {
    client::GuardsLookup r = stack.guardsLookup(kFn, callOf(batch));
    ASSERT_TRUE(r.hit) << batch;
    EXPECT_EQ(r.hit->id, 2u);
  }

  // mark_static of the width, then the width changing: a third entry, then the limit.
  guards::FrameState marked = stack.guardsMark(kFn, "L['x'].size()[1]", false);
  EXPECT_TRUE(marked.forcedStatic.count("L['x'].size()[1]"));
  EXPECT_EQ(stack.guardsInsert(kFn, entryFor(callOf(16, 4), marked, "art-w4")).id, 3u);
  client::GuardsLookup full = stack.guardsLookup(kFn, callOf(16, 5));
  EXPECT_EQ(full.reasons.size(), 3u);
  EXPECT_TRUE(full.runEagerly);
  EXPECT_TRUE(full.frame.forcedStatic.count("L['x'].size()[1]"));
  EXPECT_TRUE(stack.guardsInsert(kFn, entryFor(callOf(16, 5), marked, "art-w5")).runEagerly);

  client::GuardsEntries all = stack.guardsEntries(kFn);
  ASSERT_EQ(all.entries.size(), 3u);
  EXPECT_EQ(all.entries[2].artifacts, std::vector<std::string>{"art-w4"});
  EXPECT_TRUE(all.frame.dynamicDim("L['x']", 0));

  // Misses, recompiles and the limit are in the service's log.
  const std::string log = guardsLog();
  EXPECT_NE(log.find("miss function=model.Block.forward@c0ffee"), std::string::npos) << log;
  EXPECT_NE(log.find("recompile function=model.Block.forward@c0ffee entry=2"), std::string::npos)
      << log;
  EXPECT_NE(log.find("cache limit reached"), std::string::npos) << log;
}

TEST_F(GuardsTest, BadRequestsGetTypedErrorsAndTheServiceLives) {
  auto stack = client::Stack::connect(runDir_);
  const int pid = stack.info("guards").pid;
  auto expectError = [&](capnp::MessageBuilder& request, ErrorCode code, const char* what) {
    try {
      stack.rpc().call("guards", request, Millis(5000));
      ADD_FAILURE() << what << ": answered ok";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << what << ": " << e.what();
      EXPECT_EQ(e.service(), "guards") << what;
    }
  };
  capnp::MallocMessageBuilder list;
  list.getRoot<capnp::AnyPointer>().initAs<capnp::List<int32_t>>(3);
  expectError(list, ErrorCode::Malformed, "a list where a struct belongs");

  capnp::MallocMessageBuilder
      unknownVerb; // Envelope's first data word is where the union tag is read
  unknownVerb.initRoot<schema::Envelope>().setRequestId(99);
  expectError(unknownVerb, ErrorCode::Unsupported, "verb 99");

  capnp::MallocMessageBuilder badParent;
  auto insert = badParent.initRoot<schema::GuardsRequest>().initInsert();
  guards::toWire(kFn, insert.initFunction());
  auto node = insert.initEntry().initGuards().initNodes(1)[0];
  node.setParent(5);
  node.initStep().setAttr();
  expectError(badParent, ErrorCode::Malformed, "a node whose parent comes after it");

  capnp::MallocMessageBuilder noKey;
  noKey.initRoot<schema::GuardsRequest>().initEntries();
  expectError(noKey, ErrorCode::InvalidArgument, "an empty function key");

  capnp::MallocMessageBuilder badRank;
  auto observe = badRank.initRoot<schema::GuardsRequest>().initObserve();
  guards::toWire(kFn, observe.initFunction());
  guards::toWire(guards::JobMember{"job", 4, 2, 0}, observe.initJob());
  expectError(badRank, ErrorCode::InvalidArgument, "rank 4 of a world of 2");

  capnp::MallocMessageBuilder noDim;
  guards::toWire(kFn, noDim.initRoot<schema::GuardsRequest>().initMark().initFunction());
  expectError(noDim, ErrorCode::InvalidArgument, "a mark without a dim");

  EXPECT_EQ(stack.ping("guards", "still here"), "still here");
  EXPECT_EQ(stack.info("guards").pid, pid) << "the service was restarted";
  EXPECT_TRUE(stack.guardsEntries(kFn).entries.empty()) << "a refused request stored something";
}

TEST_F(GuardsTest, AKilledServiceLosesNoEntry) {
  auto stack = client::Stack::connect(runDir_);
  const guards::FunctionKey other{"model", "head", "beef"};
  stack.guardsInsert(kFn, entryFor(callOf(8), {}, "art-8"));
  guards::FrameState frame = stack.guardsObserve(kFn, guards::observe(callOf(8), kNames));
  frame = stack.guardsObserve(kFn, guards::observe(callOf(12), kNames));
  stack.guardsInsert(kFn, entryFor(callOf(12), frame, "art-dyn"));
  stack.guardsMark(kFn, "L['x'].size()[1]", true);
  stack.guardsInsert(other, entryFor(callOf(2), {}, "art-other"));
  const std::string frameBefore = stack.guardsEntries(kFn).frame.text();

  const client::StackStatus before = stack.status();
  const auto* guardsService = before.service("guards");
  ASSERT_NE(guardsService, nullptr);
  const int victim = guardsService->workers.front().pid;
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_TRUE(eventually([&] {
    const auto now = stack.status();
    const auto* s = now.service("guards");
    return s->state == "running" && !s->workers.empty() && s->workers.front().pid != victim &&
           s->workers.front().pid > 0 && s->restarts >= 1;
  }));

  const int restarted = stack.info("guards", Millis(10000)).pid;
  EXPECT_NE(restarted, victim);
  client::GuardsEntries entries = stack.guardsEntries(kFn);
  ASSERT_EQ(entries.entries.size(), 2u);
  EXPECT_EQ(entries.entries[0].artifacts, std::vector<std::string>{"art-8"});
  EXPECT_EQ(entries.entries[1].artifacts, std::vector<std::string>{"art-dyn"});
  EXPECT_EQ(entries.frame.text(), frameBefore);
  EXPECT_EQ(stack.guardsEntries(other).entries.size(), 1u);
  client::GuardsLookup hit = stack.guardsLookup(kFn, callOf(40));
  ASSERT_TRUE(hit.hit);
  EXPECT_EQ(hit.hit->id, 2u);
  EXPECT_EQ(stack.guardsInsert(kFn, entryFor(callOf(1), {}, "art-1")).id, 3u) << "ids go on";
  EXPECT_NE(guardsLog().find("functions=2 entries=3"), std::string::npos) << guardsLog();
}

// One rank of a job: observe its call, then trace (guards for the call under
// the decided frame state) and compile a graph with the dims it made symbolic.
// Writes "<artifact key>\n<frame state>" to `out`; exits non-zero on failure.
int runRank(const std::string& runDir, uint32_t rank, int64_t batch, const std::string& out) {
  try {
    auto stack = client::Stack::connect(runDir);
    const guards::CallInput call = callOf(batch);
    guards::FrameState frame =
        stack.guardsObserve(kFn, guards::observe(call, kNames),
                            guards::JobMember{"train-7", rank, 2, 0}, Millis(60000));
    guards::GuardSet set = guards::guardsForCall(call, kNames, frame);

    sym::SymbolTable table;
    std::vector<sym::Expr> sizes = {table.integer(batch), table.integer(3)};
    for (const guards::SymbolSource& s : set.symbols())
      if (set.source(s.node) == "L['x'].size()[0]")
        sizes[0] = table.declare(s.symbol.name(), batch, {2, sym::kInf});
    ir::Graph graph(table);
    ir::ValueId x = graph.placeholder(
        "x", ir::Value(ir::TensorMeta::contiguous(ir::DType::Float32, sizes, table)));
    graph.setOutputs({graph.call("relu", {graph.call("mul", {x}, {{"other", 2.0}})})});
    client::Compiled compiled = stack.compile(graph);
    sym::SymbolTable artifactTable;
    const std::string key = runtime::fromBytes(compiled.artifact, artifactTable).key;

    guards::CompiledEntry entry;
    entry.guards = std::move(set);
    entry.artifacts = {key};
    stack.guardsInsert(kFn, entry);
    std::ofstream(out) << key << "\n" << frame.text();
    return 0;
  } catch (const std::exception& e) {
    std::ofstream(out) << "error: " << e.what();
    return 1;
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(GuardsTest, TwoRanksWithDifferentBatchesGetOneDecisionAndOneArtifact) {
  const std::vector<int64_t> batches = {4, 8};
  std::vector<pid_t> children;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    const pid_t child = fork();
    if (child == 0)
      _exit(runRank(runDir_, rank, batches[rank], base_ + "-rank" + std::to_string(rank)));
    ASSERT_GT(child, 0);
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank failed";
  }
  const std::string rank0 = readFile(base_ + "-rank0"), rank1 = readFile(base_ + "-rank1");
  fs::remove(base_ + "-rank0");
  fs::remove(base_ + "-rank1");
  ASSERT_EQ(rank0.rfind("error", 0), std::string::npos) << rank0;
  ASSERT_EQ(rank1.rfind("error", 0), std::string::npos) << rank1;
  EXPECT_EQ(rank0, rank1) << "the ranks decided or compiled differently";
  EXPECT_NE(rank0.find("L['x']: [dynamic, 3]"), std::string::npos) << rank0;

  // Both inserted the same entry: it is stored once and serves other batches.
  auto stack = client::Stack::connect(runDir_);
  client::GuardsEntries entries = stack.guardsEntries(kFn);
  ASSERT_EQ(entries.entries.size(), 1u);
  EXPECT_EQ(entries.entries[0].artifacts.at(0) + "\n", rank0.substr(0, rank0.find('\n') + 1));
  EXPECT_TRUE(entries.frame.dynamicDim("L['x']", 0));
  client::GuardsLookup hit = stack.guardsLookup(kFn, callOf(16));
  ASSERT_TRUE(hit.hit);
  EXPECT_EQ(hit.hit->id, entries.entries[0].id);
}

TEST_F(GuardsTest, ARankAloneTimesOutNamingTheMissingRank) {
  auto stack = client::Stack::connect(runDir_);
  try {
    stack.guardsObserve(kFn, guards::observe(callOf(4), kNames),
                        guards::JobMember{"lonely", 0, 3, 0}, Millis(500));
    FAIL() << "decided without ranks 1 and 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::DeadlineExceeded) << e.what();
    EXPECT_NE(e.message().find("rank(s) 1, 2 of 3"), std::string::npos) << e.what();
  }
}

} // namespace
