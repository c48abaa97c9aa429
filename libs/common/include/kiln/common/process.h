// Child processes as the project starts them: fork + exec, dying with their
// parent (PR_SET_PDEATHSIG), with an exec failure reported to the caller
// rather than guessed from an exit status.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kiln {

struct SpawnOptions {
  int stdoutFd = -1; // -1: inherit; else dup'ed onto stdout and stderr
  bool stdinFromNull = true;
  bool ownProcessGroup = false; // a terminal's Ctrl-C then reaches only the parent
};

// Starts argv[0] (a path) with argv. Throws Error{not_found} naming the binary
// and the reason when it cannot be executed; the child is then already reaped.
pid_t spawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// False when `pid` names no process or a zombie (dead, not yet reaped by its
// parent). A process of another user counts as alive.
bool processAlive(pid_t pid);

} // namespace kiln
