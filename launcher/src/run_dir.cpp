#include "kiln/launcher/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/common/log.h"
#include "kiln/shm/store.h"

namespace fs = std::filesystem;

namespace kiln::launcher {

static void makePrivateDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorCode::Io, fmt::format("cannot create {}: {}", dir, ec.message()));
  if (chmod(dir.c_str(), 0700) != 0) throwSystemError("chmod 0700 " + dir);
  struct stat info {};
  if (stat(dir.c_str(), &info) != 0) throwSystemError("stat " + dir);
  if (info.st_uid != getuid())
    throw Error(ErrorCode::InvalidArgument, fmt::format("{} belongs to another user", dir));
}

// Opens and tries to lock `lockFile`; returns the fd (locked) or -1 if a live process holds it.
static int tryLock(const std::string& lockFile) {
  const int fd = open(lockFile.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throwSystemError("open " + lockFile);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void clearStale(const client::StackPaths& paths) {
  shm::Store::removeSegment(paths.segmentName());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(paths.runDir, ec))
    if (entry.path() != paths.lockFile()) fs::remove_all(entry.path(), ec);
}

RunDir RunDir::acquire(const client::StackPaths& paths) {
  // Only a parent we create is made private: it may be a shared one like /tmp.
  const fs::path parent = fs::path(paths.runDir).parent_path();
  if (!fs::exists(parent)) makePrivateDir(parent.string());
  // Never take over (and later delete) a directory that is not a run dir.
  if (fs::exists(paths.runDir) && !fs::is_empty(paths.runDir) && !fs::exists(paths.lockFile()))
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} exists and is not a kiln run dir; choose an empty or new one",
                            paths.runDir));
  makePrivateDir(paths.runDir);
  const int fd = tryLock(paths.lockFile());
  if (fd < 0)
    throw Error(ErrorCode::AlreadyExists,
                fmt::format("a kiln stack already runs at {} (launcher pid {})", paths.runDir,
                            launcherPid(paths)));
  clearStale(paths);
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    throwSystemError("write " + paths.lockFile());
  makePrivateDir(paths.logDir());
  return RunDir(paths, fd);
}

RunDir::RunDir(RunDir&& other) noexcept : paths_(std::move(other.paths_)), lockFd_(other.lockFd_) {
  other.lockFd_ = -1;
}

RunDir::~RunDir() {
  if (lockFd_ >= 0) close(lockFd_);
}

void RunDir::remove() {
  if (lockFd_ < 0) return;
  shm::Store::removeSegment(paths_.segmentName());
  std::error_code ec;
  fs::remove_all(paths_.runDir, ec);
  if (ec) log().warn("cannot remove run dir {}: {}", paths_.runDir, ec.message());
  close(lockFd_);
  lockFd_ = -1;
}

bool removeIfStale(const client::StackPaths& paths) {
  if (!fs::exists(paths.lockFile())) return false;
  const int fd = tryLock(paths.lockFile());
  if (fd < 0) return false; // a live launcher holds it
  shm::Store::removeSegment(paths.segmentName());
  std::error_code ec;
  fs::remove_all(paths.runDir, ec);
  close(fd);
  log().info("removed stale run dir {}", paths.runDir);
  return true;
}

int sweepStaleRunDirs(const std::string& root) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory() && removeIfStale(client::StackPaths{entry.path().string()})) ++removed;
  return removed;
}

int launcherPid(const client::StackPaths& paths) {
  std::ifstream in(paths.lockFile());
  int pid = 0;
  in >> pid;
  return pid;
}

} // namespace kiln::launcher
