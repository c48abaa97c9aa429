// RunDir: a stack's private run directory (mode 0700), held by one launcher
// through an flock on its lock file, so two stacks never share one. A run dir
// whose lock nobody holds belongs to a dead stack and is cleaned.
#pragma once

#include <string>

#include "kiln/client/stack_paths.h"

namespace kiln::launcher {

class RunDir {
public:
  // Creates and locks the run dir (and its logs folder). Cleans it first if a
  // dead stack left it; Error{already_exists} if a live launcher holds it.
  static RunDir acquire(const client::StackPaths& paths);

  RunDir(RunDir&& other) noexcept;
  RunDir& operator=(RunDir&&) = delete;
  ~RunDir();

  // Deletes the directory and its shared-memory segment, then drops the lock.
  void remove();
  const client::StackPaths& paths() const { return paths_; }

private:
  RunDir(client::StackPaths paths, int lockFd) : paths_(std::move(paths)), lockFd_(lockFd) {}
  client::StackPaths paths_;
  int lockFd_ = -1;
};

// Removes the run dir (and its segment) if its launcher is gone; false if it
// is live or is no run dir.
bool removeIfStale(const client::StackPaths& paths);

// Removes every run dir under `root` whose launcher is gone; returns how many.
int sweepStaleRunDirs(const std::string& root);

// The pid written in a run dir's lock file by its launcher, or 0.
int launcherPid(const client::StackPaths& paths);

} // namespace kiln::launcher
