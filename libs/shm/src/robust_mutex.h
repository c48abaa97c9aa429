// A process-shared pthread mutex that survives the death of its holder:
// the next locker is told (EOWNERDEAD), marks it consistent and goes on.
#pragma once

#include <pthread.h>

namespace kiln::shm {

// Initializes `mutex` in place as robust and process-shared.
void initRobustMutex(pthread_mutex_t& mutex);

class RobustLock {
public:
  explicit RobustLock(pthread_mutex_t& mutex);
  ~RobustLock();
  RobustLock(const RobustLock&) = delete;
  RobustLock& operator=(const RobustLock&) = delete;

  // True when the previous holder died holding the mutex: the caller must
  // repair what a half-done change could have left.
  bool ownerDied() const { return ownerDied_; }

private:
  pthread_mutex_t& mutex_;
  bool ownerDied_ = false;
};

} // namespace kiln::shm
