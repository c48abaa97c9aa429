#include "kiln/client/stack_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "kiln/shm/store.h"

namespace kiln::client {

std::string StackPaths::segmentName() const {
  return shm::Store::segmentNameFor(runDir);
}

std::string stacksRoot() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = runtime && *runtime ? runtime : "/tmp";
  return base + "/kiln-" + std::to_string(getuid());
}

StackPaths resolveStack(const std::string& runDir, const std::string& stackName) {
  std::string dir = runDir;
  if (dir.empty())
    if (const char* env = std::getenv("KILN_RUN_DIR"); env && *env) dir = env;
  if (dir.empty()) dir = stacksRoot() + "/" + stackName;
  return StackPaths{std::filesystem::absolute(dir).lexically_normal().string()};
}

} // namespace kiln::client
