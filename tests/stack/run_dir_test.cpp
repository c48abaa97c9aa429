#include "kiln/launcher/run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "kiln/common/error.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::launcher;

namespace {
struct TempRoot {
  fs::path path = fs::temp_directory_path() / ("kiln-rd-" + std::to_string(getpid()));
  TempRoot() { fs::create_directories(path); }
  ~TempRoot() { fs::remove_all(path); }
};
} // namespace

TEST(RunDir, IsPrivateLockedAndRemoved) {
  TempRoot root;
  const client::StackPaths paths{(root.path / "s").string()};
  {
    RunDir dir = RunDir::acquire(paths);
    struct stat info {};
    ASSERT_EQ(stat(paths.runDir.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0700u);
    EXPECT_TRUE(fs::is_directory(paths.logDir()));
    EXPECT_EQ(launcherPid(paths), getpid());
    try {
      RunDir::acquire(paths);
      FAIL() << "a second launcher took the same run dir";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::AlreadyExists);
    }
    dir.remove();
  }
  EXPECT_FALSE(fs::exists(paths.runDir));
}

TEST(RunDir, CleansAStaleRunDirAndRefusesAForeignOne) {
  TempRoot root;
  const client::StackPaths stale{(root.path / "stale").string()};
  fs::create_directories(stale.runDir);
  std::ofstream(stale.lockFile()) << "999999\n"; // nobody holds its lock
  std::ofstream(stale.runDir + "/broker.ipc") << "";
  {
    RunDir dir = RunDir::acquire(stale);
    EXPECT_FALSE(fs::exists(stale.runDir + "/broker.ipc"));
    dir.remove();
  }

  const client::StackPaths foreign{(root.path / "project").string()};
  fs::create_directories(foreign.runDir);
  std::ofstream(foreign.runDir + "/notes.txt") << "mine";
  EXPECT_THROW(RunDir::acquire(foreign), Error);
  EXPECT_TRUE(fs::exists(foreign.runDir + "/notes.txt"));
}

TEST(RunDir, SweepRemovesOnlyDeadStacks) {
  TempRoot root;
  const client::StackPaths live{(root.path / "live").string()};
  const client::StackPaths dead{(root.path / "dead").string()};
  RunDir held = RunDir::acquire(live);
  fs::create_directories(dead.runDir);
  std::ofstream(dead.lockFile()) << "999999\n";
  EXPECT_EQ(sweepStaleRunDirs(root.path.string()), 1);
  EXPECT_FALSE(fs::exists(dead.runDir));
  EXPECT_TRUE(fs::exists(live.runDir));
  held.remove();
}
