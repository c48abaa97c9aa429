#pragma once

#include <sys/types.h>

namespace kiln::shm {

// False when `pid` names no process, or a zombie (dead, not yet reaped).
// A process of another user counts as alive.
bool processAlive(pid_t pid);

} // namespace kiln::shm
