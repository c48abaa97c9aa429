// The entry store the guards service is a shell over: hits and misses with a
// reason per entry, ids, the cache limit, automatic dynamic through observe,
// marks, job rounds, and persistence (a second store over the directory sees
// everything; corrupt and torn files are skipped).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/guards/store.h"
#include "kiln/guards/wire.h"

namespace fs = std::filesystem;

namespace kiln::guards {
namespace {

const FunctionKey kFn{"model", "Block.forward", "c0ffee"};
const FunctionKey kOther{"model", "head", "beef"};
const std::vector<std::string> kNames = {"x", "n"};

CallInput callOf(std::vector<int64_t> sizes, int64_t n = 3) {
  return CallInput::of({Input::of(contiguousTensor(DType::Float32, std::move(sizes))), Input::of(n)});
}

CompiledEntry entryFor(const CallInput& call, const FrameState& frame,
                       const std::string& artifact) {
  CompiledEntry e;
  e.guards = guardsForCall(call, kNames, frame);
  e.artifacts = {artifact};
  e.graphs = {"graph-" + artifact};
  e.outputs = std::string("out\0puts", 8);
  return e;
}

class StoreDir : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = (fs::path("/tmp") / ("kiln-store-" + std::to_string(getpid()) + "-" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // As a client does on a miss: observe, trace (guards for the call), insert.
  uint64_t recompile(EntryStore& store, const CallInput& call, const std::string& artifact) {
    FrameState frame = *store.observe(kFn, observe(call, kNames)).frame;
    return store.insert(kFn, entryFor(call, frame, artifact)).id;
  }

  std::string dir_;
};

TEST_F(StoreDir, HitsAndMissesWithAReasonPerEntryInOrder) {
  EntryStore store(dir_);
  LookupResult empty = store.lookup(kFn, callOf({8, 4}));
  EXPECT_EQ(empty.hit, nullptr);
  EXPECT_TRUE(empty.reasons.empty());
  EXPECT_FALSE(empty.runEagerly);

  EXPECT_EQ(store.insert(kFn, entryFor(callOf({8, 4}), {}, "a8")).id, 1u);
  EXPECT_EQ(store.insert(kFn, entryFor(callOf({16, 4}), {}, "a16")).id, 2u);
  EXPECT_EQ(store.insert(kOther, entryFor(callOf({8, 4}), {}, "other")).id, 1u)
      << "ids are per function";

  LookupResult hit = store.lookup(kFn, callOf({16, 4}));
  ASSERT_NE(hit.hit, nullptr);
  EXPECT_EQ(hit.hit->id, 2u);
  EXPECT_EQ(hit.hit->artifacts, std::vector<std::string>{"a16"});
  EXPECT_EQ(hit.hit->outputs, std::string("out\0puts", 8));
  EXPECT_TRUE(hit.reasons.empty());

  LookupResult miss = store.lookup(kFn, callOf({32, 4}));
  EXPECT_EQ(miss.hit, nullptr);
  ASSERT_EQ(miss.reasons.size(), 2u);
  EXPECT_EQ(miss.reasons[0].first, 1u);
  EXPECT_EQ(miss.reasons[1].first, 2u);
  EXPECT_NE(miss.reasons[0].second.find("L['x']"), std::string::npos) << miss.reasons[0].second;
  EXPECT_NE(miss.reasons[0].second.find("8"), std::string::npos) << miss.reasons[0].second;
  EXPECT_NE(miss.reasons[1].second.find("16"), std::string::npos) << miss.reasons[1].second;
  EXPECT_NE(miss.reasons[1].second.find("got 32"), std::string::npos) << miss.reasons[1].second;

  LookupResult otherInt = store.lookup(kFn, callOf({8, 4}, 5));
  ASSERT_EQ(otherInt.reasons.size(), 2u);
  EXPECT_EQ(otherInt.reasons[0].second, "L['n'] == 3 failed: got 5");
}

TEST_F(StoreDir, TheSameEntryInsertedTwiceIsStoredOnce) {
  EntryStore store(dir_);
  InsertResult first = store.insert(kFn, entryFor(callOf({8, 4}), {}, "a8"));
  InsertResult again = store.insert(kFn, entryFor(callOf({8, 4}), {}, "a8"));
  EXPECT_EQ(again.id, first.id);
  EXPECT_TRUE(again.known);
  EXPECT_EQ(store.entries(kFn).size(), 1u);
  // Another artifact for the same guards is another entry.
  EXPECT_EQ(store.insert(kFn, entryFor(callOf({8, 4}), {}, "b8")).id, 2u);
}

TEST_F(StoreDir, TheCacheLimitTurnsCallsEager) {
  EntryStore store(dir_, 3);
  EXPECT_EQ(store.cacheLimit(), 3u);
  for (int64_t n = 0; n < 3; ++n) {
    InsertResult r = store.insert(kFn, entryFor(callOf({8, 4}, n), {}, "a" + std::to_string(n)));
    EXPECT_FALSE(r.runEagerly);
    EXPECT_EQ(r.id, static_cast<uint64_t>(n + 1));
  }
  EXPECT_FALSE(store.lookup(kFn, callOf({8, 4}, 1)).runEagerly) << "a hit is a hit";
  LookupResult miss = store.lookup(kFn, callOf({8, 4}, 7));
  EXPECT_TRUE(miss.runEagerly);
  EXPECT_EQ(miss.reasons.size(), 3u);
  InsertResult over = store.insert(kFn, entryFor(callOf({8, 4}, 7), {}, "a7"));
  EXPECT_TRUE(over.runEagerly);
  EXPECT_EQ(store.entries(kFn).size(), 3u);
  EXPECT_FALSE(store.lookup(kOther, callOf({8, 4}, 7)).runEagerly) << "the limit is per function";

  EntryStore none("", 0);
  EXPECT_TRUE(none.insert(kFn, entryFor(callOf({8, 4}), {}, "a")).runEagerly);
  EXPECT_TRUE(none.lookup(kFn, callOf({8, 4})).runEagerly);
}

TEST_F(StoreDir, ASizeChangeMakesOneEntryWithASymbolForLaterSizes) {
  EntryStore store(dir_);
  EXPECT_EQ(recompile(store, callOf({8, 4}), "static8"), 1u);
  EXPECT_NE(store.lookup(kFn, callOf({8, 4})).hit, nullptr);
  EXPECT_FALSE(store.frame(kFn).dynamicDim("L['x']", 0));

  // The batch changes: the miss is observed, dim 0 turns dynamic, and the
  // next trace's guards read it as a symbol.
  LookupResult miss = store.lookup(kFn, callOf({12, 4}));
  ASSERT_EQ(miss.reasons.size(), 1u);
  ObserveResult seen = store.observe(kFn, observe(callOf({12, 4}), kNames));
  EXPECT_TRUE(seen.changed);
  ASSERT_TRUE(seen.frame);
  EXPECT_TRUE(seen.frame->dynamicDim("L['x']", 0));
  EXPECT_FALSE(seen.frame->dynamicDim("L['x']", 1));
  GuardSet guards = guardsForCall(callOf({12, 4}), kNames, *seen.frame);
  ASSERT_EQ(guards.symbols().size(), 1u);
  EXPECT_EQ(guards.source(guards.symbols()[0].node), "L['x'].size()[0]");
  CompiledEntry dynamic = entryFor(callOf({12, 4}), *seen.frame, "dynamic");
  EXPECT_EQ(store.insert(kFn, std::move(dynamic)).id, 2u);

  for (int64_t batch : {12, 5, 64, 1000}) {
    LookupResult r = store.lookup(kFn, callOf({batch, 4}));
    ASSERT_NE(r.hit, nullptr) << batch;
    EXPECT_EQ(r.hit->id, 2u) << batch;
  }
  EXPECT_NE(store.lookup(kFn, callOf({8, 4}, 3)).hit, nullptr);
  EXPECT_EQ(store.lookup(kFn, callOf({8, 4}, 3)).hit->id, 1u)
      << "the first entry that holds serves";
  EXPECT_EQ(store.entries(kFn).size(), 2u);
  // Seeing the same again changes nothing.
  EXPECT_FALSE(store.observe(kFn, observe(callOf({40, 4}), kNames)).changed);
}

TEST_F(StoreDir, MarksOverrideAutomaticDynamic) {
  EntryStore store(dir_);
  FrameState frame = store.mark(kFn, "L['x'].size()[1]", true);
  EXPECT_TRUE(frame.dynamicDim("L['x']", 1));
  store.observe(kFn, observe(callOf({8, 4}), kNames));
  store.observe(kFn, observe(callOf({9, 4}), kNames));
  EXPECT_TRUE(store.frame(kFn).dynamicDim("L['x']", 0));
  frame = store.mark(kFn, "L['x'].size()[0]", false);
  EXPECT_FALSE(frame.dynamicDim("L['x']", 0)) << "mark_static wins over an observed change";
  EXPECT_TRUE(frame.dynamicDim("L['x']", 1));
  frame = store.mark(kFn, "L['x'].size()[1]", false);
  EXPECT_FALSE(frame.dynamicDim("L['x']", 1));
  EXPECT_THROW(store.mark(kFn, "", true), Error);
}

std::optional<JobMember> member(uint32_t rank, uint32_t world, uint64_t round = 0,
                                std::string job = "job-a") {
  return JobMember{std::move(job), rank, world, round};
}

TEST_F(StoreDir, AJobRoundIsPendingUntilEveryRankReported) {
  EntryStore store(dir_);
  ObserveResult r1 = store.observe(kFn, observe(callOf({8, 4}), kNames), member(1, 3));
  EXPECT_FALSE(r1.frame);
  EXPECT_EQ(r1.missing, (std::vector<uint32_t>{0, 2}));
  ObserveResult r0 = store.observe(kFn, observe(callOf({4, 4}), kNames), member(0, 3));
  EXPECT_FALSE(r0.frame);
  EXPECT_EQ(r0.missing, (std::vector<uint32_t>{2}));
  EXPECT_TRUE(store.frame(kFn).inputs.empty()) << "nothing is decided before the round is";
  // Rank 1 asks again with the same report: still pending, nothing doubled.
  EXPECT_EQ(store.observe(kFn, observe(callOf({8, 4}), kNames), member(1, 3)).missing,
            (std::vector<uint32_t>{2}));

  ObserveResult r2 = store.observe(kFn, observe(callOf({4, 4}), kNames), member(2, 3));
  ASSERT_TRUE(r2.frame);
  EXPECT_TRUE(r2.changed);
  EXPECT_TRUE(r2.frame->dynamicDim("L['x']", 0)) << r2.frame->text();
  EXPECT_FALSE(r2.frame->dynamicDim("L['x']", 1));
  // The same answer for every rank, also when asked again (at-least-once requests).
  for (uint32_t rank = 0; rank < 3; ++rank) {
    ObserveResult again = store.observe(kFn, observe(callOf({100, 4}), kNames), member(rank, 3));
    ASSERT_TRUE(again.frame);
    EXPECT_EQ(again.frame->text(), r2.frame->text());
  }
  EXPECT_EQ(store.frame(kFn).text(), r2.frame->text()) << "the function learnt the decision too";
}

TEST_F(StoreDir, ARankReportingTwiceReplacesItsReport) {
  EntryStore store(dir_);
  store.observe(kFn, observe(callOf({8, 4}), kNames), member(0, 2));
  store.observe(kFn, observe(callOf({4, 4}), kNames), member(0, 2)); // replaces, does not add
  ObserveResult done = store.observe(kFn, observe(callOf({4, 4}), kNames), member(1, 2));
  ASSERT_TRUE(done.frame);
  EXPECT_FALSE(done.frame->dynamicDim("L['x']", 0))
      << "rank 0's first report was replaced: " << done.frame->text();
}

TEST_F(StoreDir, RoundsAndJobsAreIndependent) {
  EntryStore store(dir_);
  // Round 0: both ranks see 8: static.
  store.observe(kFn, observe(callOf({8, 4}), kNames), member(0, 2, 0));
  ObserveResult round0 = store.observe(kFn, observe(callOf({8, 4}), kNames), member(1, 2, 0));
  ASSERT_TRUE(round0.frame);
  EXPECT_FALSE(round0.frame->dynamicDim("L['x']", 0));
  // Round 1 starts from round 0's decision; a batch of 16 on one rank makes it dynamic.
  EXPECT_FALSE(store.observe(kFn, observe(callOf({16, 4}), kNames), member(1, 2, 1)).frame);
  ObserveResult round1 = store.observe(kFn, observe(callOf({8, 4}), kNames), member(0, 2, 1));
  ASSERT_TRUE(round1.frame);
  EXPECT_TRUE(round1.frame->dynamicDim("L['x']", 0));
  // Round 0's answer stands.
  EXPECT_FALSE(store.observe(kFn, {}, member(0, 2, 0)).frame->dynamicDim("L['x']", 0));
  // Another job's round 0 is its own round.
  ObserveResult other =
      store.observe(kFn, observe(callOf({8, 4}), kNames), member(0, 2, 0, "job-b"));
  EXPECT_FALSE(other.frame);
  EXPECT_EQ(other.missing, std::vector<uint32_t>{1});
  // A world size other than the round's, or a rank outside it, is refused.
  EXPECT_THROW(store.observe(kFn, {}, member(0, 3, 0, "job-b")), Error);
  EXPECT_THROW(store.observe(kFn, {}, member(2, 2, 5)), Error);
  EXPECT_THROW(store.observe(kFn, {}, member(0, 0, 5)), Error);
}

TEST_F(StoreDir, ASecondStoreOverTheDirectorySeesEverything) {
  std::string before;
  {
    EntryStore store(dir_, 5);
    recompile(store, callOf({8, 4}), "static8");
    store.observe(kFn, observe(callOf({12, 4}), kNames));
    store.insert(kFn, entryFor(callOf({12, 4}), store.frame(kFn), "dynamic"));
    store.mark(kFn, "L['x'].size()[1]", false);
    store.insert(kOther, entryFor(callOf({2, 2}), {}, "other"));
    store.observe(kFn, observe(callOf({4, 4}), kNames), member(0, 2, 0)); // a round half reported
    store.observe(kOther, observe(callOf({4, 4}), kNames), member(0, 1, 0)); // a decided round
    before = store.frame(kFn).text();
  }
  EntryStore again(dir_, 5);
  EXPECT_EQ(again.functionCount(), 2u);
  EXPECT_EQ(again.entryCount(), 3u);
  ASSERT_EQ(again.entries(kFn).size(), 2u);
  EXPECT_EQ(again.entries(kFn)[0].id, 1u);
  EXPECT_EQ(again.entries(kFn)[1].artifacts, std::vector<std::string>{"dynamic"});
  EXPECT_EQ(again.entries(kFn)[1].outputs, std::string("out\0puts", 8));
  EXPECT_EQ(again.frame(kFn).text(), before);
  EXPECT_TRUE(again.frame(kFn).forcedStatic.count("L['x'].size()[1]"));
  LookupResult hit = again.lookup(kFn, callOf({77, 4}));
  ASSERT_NE(hit.hit, nullptr);
  EXPECT_EQ(hit.hit->id, 2u);
  // Ids go on from where they were.
  EXPECT_EQ(again.insert(kFn, entryFor(callOf({1, 4}), {}, "one")).id, 3u);
  // The half-reported round completes with the other rank's report.
  ObserveResult done = again.observe(kFn, observe(callOf({4, 4}), kNames), member(1, 2, 0));
  EXPECT_TRUE(done.frame);
  ASSERT_TRUE(again.observe(kOther, {}, member(0, 1, 0)).frame);
}

void overwrite(const std::string& path, size_t at, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(StoreDir, ACorruptOrTornFileIsSkippedAndTheOthersLoad) {
  const FunctionKey third{"model", "tail", "f00d"};
  std::string fnPath, otherPath;
  {
    EntryStore store(dir_);
    store.insert(kFn, entryFor(callOf({8, 4}), {}, "a"));
    store.insert(kOther, entryFor(callOf({8, 4}), {}, "b"));
    store.insert(third, entryFor(callOf({8, 4}), {}, "c"));
    fnPath = store.pathOf(kFn);
    otherPath = store.pathOf(kOther);
  }
  ASSERT_TRUE(fs::exists(fnPath));
  overwrite(fnPath, fs::file_size(fnPath) / 2,
            "garbage!"); // corrupt: the checksum no longer matches
  fs::resize_file(otherPath, fs::file_size(otherPath) - 13); // torn
  std::ofstream(dir_ + "/junk.kguard") << "not a store file";
  std::ofstream(dir_ + "/empty.kguard");

  EntryStore again(dir_);
  EXPECT_EQ(again.functionCount(), 1u);
  EXPECT_TRUE(again.entries(kFn).empty());
  EXPECT_TRUE(again.entries(kOther).empty());
  ASSERT_EQ(again.entries(third).size(), 1u);
  EXPECT_EQ(again.entries(third)[0].artifacts, std::vector<std::string>{"c"});
  // A skipped function starts over, and its new file replaces the bad one.
  EXPECT_EQ(again.insert(kFn, entryFor(callOf({8, 4}), {}, "a2")).id, 1u);
  EXPECT_EQ(EntryStore(dir_).entries(kFn).size(), 1u);
}

TEST_F(StoreDir, AFileOfAnotherBuildIsSkipped) {
  std::string path;
  {
    EntryStore store(dir_);
    store.insert(kFn, entryFor(callOf({8, 4}), {}, "a"));
    path = store.pathOf(kFn);
  }
  ASSERT_EQ(EntryStore(dir_).entries(kFn).size(), 1u);
  overwrite(path, 8, "another!"); // the hash of the build that wrote it, after the magic
  EXPECT_TRUE(EntryStore(dir_).entries(kFn).empty());
}

TEST_F(StoreDir, AMemoryOnlyStoreWritesNothing) {
  EntryStore store("");
  store.insert(kFn, entryFor(callOf({8, 4}), {}, "a"));
  EXPECT_EQ(store.pathOf(kFn), "");
  EXPECT_FALSE(fs::exists(dir_));
}

TEST(StoreWire, EntriesKeysAndMembersRoundTrip) {
  CompiledEntry e = entryFor(callOf({8, 4}), {}, "a");
  e.id = 42;
  CompiledEntry back = compiledEntryFromBytes(toBytes(e));
  EXPECT_EQ(back.id, 42u);
  EXPECT_EQ(back.artifacts, e.artifacts);
  EXPECT_EQ(back.graphs, e.graphs);
  EXPECT_EQ(back.outputs, e.outputs);
  EXPECT_EQ(back.guards.text(), e.guards.text());

  capnp::MallocMessageBuilder message;
  auto key = message.initRoot<schema::FunctionKey>();
  toWire(kFn, key);
  EXPECT_EQ(fromWire(key.asReader()), kFn);
  key.setCodeHash("");
  EXPECT_THROW(fromWire(key.asReader()), Error);

  capnp::MallocMessageBuilder m2;
  auto job = m2.initRoot<schema::JobMember>();
  EXPECT_EQ(fromWire(job.asReader()), std::nullopt) << "an empty job is no job";
  toWire(JobMember{"j", 1, 2, 3}, job);
  auto read = fromWire(job.asReader());
  ASSERT_TRUE(read);
  EXPECT_EQ(read->rank, 1u);
  EXPECT_EQ(read->round, 3u);
  job.setRank(2);
  EXPECT_THROW(fromWire(job.asReader()), Error);
}

} // namespace
} // namespace kiln::guards
