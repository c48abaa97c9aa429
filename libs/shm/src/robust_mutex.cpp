#include "robust_mutex.h"

#include <cerrno>
#include <cstring>

#include "kiln/common/error.h"

namespace kiln::shm {

static void check(int rc, const char* what) {
  if (rc != 0) throw Error(ErrorCode::Internal, std::string(what) + ": " + std::strerror(rc));
}

void initRobustMutex(pthread_mutex_t& mutex) {
  pthread_mutexattr_t attr;
  check(pthread_mutexattr_init(&attr), "pthread_mutexattr_init");
  check(pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED), "setpshared");
  check(pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST), "setrobust");
  const int rc = pthread_mutex_init(&mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  check(rc, "pthread_mutex_init");
}

RobustLock::RobustLock(pthread_mutex_t& mutex) : mutex_(mutex) {
  int rc = pthread_mutex_lock(&mutex_);
  if (rc == EOWNERDEAD) {
    ownerDied_ = true;
    rc = pthread_mutex_consistent(&mutex_);
  }
  check(rc, "locking the shared-memory store");
}

RobustLock::~RobustLock() {
  pthread_mutex_unlock(&mutex_);
}

} // namespace kiln::shm
