#include "kiln/common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "kiln/common/error.h"

namespace kiln {

static constexpr unsigned kCloseRangeCloexec = 1U << 2; // CLOSE_RANGE_CLOEXEC

pid_t spawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) throw Error(ErrorCode::InvalidArgument, "spawnProcess: empty argv");
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  int execPipe[2];
  if (pipe2(execPipe, O_CLOEXEC) != 0) throwSystemError("pipe2");
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    close(execPipe[0]);
    close(execPipe[1]);
    throwSystemError("fork");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126); // the parent died before prctl
    if (options.stdinFromNull) {
      const int devNull = open("/dev/null", O_RDONLY);
      dup2(devNull, 0);
    }
    if (options.stdoutFd >= 0) {
      dup2(options.stdoutFd, 1);
      dup2(options.stdoutFd, 2);
    }
    if (options.ownProcessGroup) setpgid(0, 0);
    // Inherited fds close at exec, not now: the exec-error pipe must stay open until then.
    // (Linux >= 5.11; on older kernels the call fails and our own fds are CLOEXEC anyway.)
    syscall(SYS_close_range, 3, ~0U, kCloseRangeCloexec);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr); // the parent may block signals it waits for
    execv(args[0], args.data());
    const int error = errno;
    (void)!write(execPipe[1], &error, sizeof(error));
    _exit(127);
  }
  close(execPipe[1]);
  int execError = 0;
  const ssize_t got = read(execPipe[0], &execError, sizeof(execError)); // EOF on exec
  close(execPipe[0]);
  if (got == sizeof(execError)) {
    waitpid(pid, nullptr, 0);
    throw Error(ErrorCode::NotFound,
                std::string("cannot execute ") + argv[0] + ": " + std::strerror(execError));
  }
  return pid;
}

bool processAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on a zombie; its state in /proc/<pid>/stat (after the
  // parenthesized command name, which may hold spaces) says 'Z'.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

} // namespace kiln
