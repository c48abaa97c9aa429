#include "shm_fixture.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace kiln::shm::test {

SegmentName::SegmentName() {
  static std::atomic<int> counter{0};
  name_ = fmt::format("kiln-test-{}-{}", getpid(), counter++);
  Store::removeSegment(name_);
}

SegmentName::~SegmentName() {
  Store::removeSegment(name_);
}

std::optional<ErrorCode> errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

Pipe::Pipe() {
  if (pipe(fds_) != 0) throwSystemError("pipe");
}

Pipe::~Pipe() {
  for (const int fd : fds_)
    if (fd >= 0) close(fd);
}

void Pipe::send(uint64_t value) {
  if (write(fds_[1], &value, sizeof value) != ssize_t(sizeof value)) throwSystemError("pipe write");
}

uint64_t Pipe::receive() {
  if (fds_[1] >= 0) close(fds_[1]);
  fds_[1] = -1;
  uint64_t value = 0;
  if (read(fds_[0], &value, sizeof value) != ssize_t(sizeof value))
    throw Error(ErrorCode::Io, "the child closed the pipe without sending");
  return value;
}

pid_t forkChild(const std::function<void()>& body) {
  const pid_t pid = fork();
  if (pid < 0) throwSystemError("fork");
  if (pid > 0) return pid;
  int status = 0;
  try {
    body();
  } catch (const std::exception& e) {
    fmt::print(stderr, "child {}: {}\n", getpid(), e.what());
    status = 1;
  }
  _exit(status);
}

int waitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) throwSystemError("waitpid");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void killChild(pid_t pid) {
  kill(pid, SIGKILL);
  EXPECT_EQ(waitChild(pid), 128 + SIGKILL);
}

static void onAlarm(int) {
  static const char message[] = "watchdog: the store deadlocked\n";
  (void)!write(STDERR_FILENO, message, sizeof message - 1);
  _exit(3);
}

Watchdog::Watchdog(unsigned seconds) {
  signal(SIGALRM, onAlarm);
  alarm(seconds);
}

Watchdog::~Watchdog() {
  alarm(0);
  signal(SIGALRM, SIG_DFL);
}

} // namespace kiln::shm::test
