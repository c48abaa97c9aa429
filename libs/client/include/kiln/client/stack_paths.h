// Where a stack lives on this host: its private run directory, the broker's
// endpoints, the launcher's lock, the service logs and the shared-memory segment.
#pragma once

#include <string>

namespace kiln::client {

struct StackPaths {
  std::string runDir;

  std::string clientEndpoint() const { return "ipc://" + runDir + "/broker.ipc"; }
  std::string workerEndpoint() const { return "ipc://" + runDir + "/workers.ipc"; }
  std::string lockFile() const { return runDir + "/launcher.lock"; }
  std::string logDir() const { return runDir + "/logs"; }
  std::string logFile(const std::string& service) const {
    return logDir() + "/" + service + ".log";
  }
  std::string segmentName() const;
};

// ${XDG_RUNTIME_DIR:-/tmp}/kiln-<uid>: the parent of every stack's run dir.
std::string stacksRoot();

// The run dir: `runDir` if given, else $KILN_RUN_DIR, else stacksRoot()/<stackName>.
StackPaths resolveStack(const std::string& runDir = {}, const std::string& stackName = "default");

} // namespace kiln::client
