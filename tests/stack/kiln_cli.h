// The `kiln` launcher of this build, run as a user would from a shell: what it
// printed (stdout and stderr). For the whole-stack tests.
#pragma once

#include <cstdio>
#include <string>

namespace kiln::testing {

inline std::string runKiln(const std::string& args) {
  const std::string command = std::string(KILN_BIN_DIR) + "/kiln " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  pclose(pipe);
  return output;
}

} // namespace kiln::testing
