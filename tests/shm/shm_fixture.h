// Helpers of the shm tests: a segment name unique to the running test (removed
// at the end), forked children, pipes, and a watchdog against deadlocks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/common/error.h"
#include "kiln/shm/store.h"

namespace kiln::shm::test {

// "kiln-test-<pid>-<n>"; removes the segment when it goes out of scope.
class SegmentName {
public:
  SegmentName();
  ~SegmentName();
  SegmentName(const SegmentName&) = delete;
  SegmentName& operator=(const SegmentName&) = delete;
  const std::string& str() const { return name_; }

private:
  std::string name_;
};

// The code of the kiln::Error `f` throws; nullopt if it throws none.
std::optional<ErrorCode> errorOf(const std::function<void()>& f);

// A pipe a forked child sends uint64s through to its parent.
class Pipe {
public:
  Pipe();
  ~Pipe();
  void send(uint64_t value);
  // Closes this process's write end first, so that it throws, rather than
  // blocks, once every sender has died without sending.
  uint64_t receive();

private:
  int fds_[2];
};

// Forks; the child runs `body` and _exits 0 when it returns, 1 when it throws.
pid_t forkChild(const std::function<void()>& body);
// Waits for `pid`; its exit status, or 128 + the signal that killed it.
int waitChild(pid_t pid);
// SIGKILLs `pid` and reaps it.
void killChild(pid_t pid);

// Ends the test process with a message if it is still alive after `seconds`
// (a deadlock in the store); disarmed when it goes out of scope.
class Watchdog {
public:
  explicit Watchdog(unsigned seconds);
  ~Watchdog();
};

} // namespace kiln::shm::test
