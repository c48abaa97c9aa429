#include "process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace kiln::shm {

bool processAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on a zombie; its state in /proc/<pid>/stat (after the
  // parenthesized command name) says 'Z'.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

} // namespace kiln::shm
