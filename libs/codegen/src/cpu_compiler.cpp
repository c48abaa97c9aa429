#include "kiln/codegen/cpu_compiler.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/common/error.h"
#include <cstdlib>

namespace kiln::codegen {
namespace {

std::atomic<size_t> runs{0};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

size_t compilerRuns() {
  return runs.load();
}

std::vector<std::string> cpuCompilerCommand() {
  const char* cxx = std::getenv("KILN_CXX");
  return {cxx && *cxx ? cxx : "c++", "-std=c++17", "-O3", "-march=native", "-fopenmp",
          "-fno-math-errno", "-fPIC", "-shared", "-w"};
}

void compileCpu(const std::string& code, const std::string& soPath) {
  std::string stem = soPath + ".tmp" + std::to_string(::getpid());
  std::string source = stem + ".cpp", object = stem + ".so", log = stem + ".log";
  {
    std::ofstream out(source);
    out << code;
    if (!out) throw Error(ErrorCode::Io, "codegen: cannot write " + source);
  }
  std::string command;
  for (const std::string& part : cpuCompilerCommand()) command += part + " ";
  command += "-o '" + object + "' '" + source + "' -lmvec > '" + log + "' 2>&1";
  ++runs;
  int status = std::system(command.c_str());
  std::string messages = readFile(log);
  std::remove(source.c_str());
  std::remove(log.c_str());
  if (status != 0) {
    std::remove(object.c_str());
    int exit = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    throw Error(ErrorCode::Internal,
                "codegen: the C++ compiler failed (exit " + std::to_string(exit) + ")", "",
                messages + "\n--- source ---\n" + code);
  }
  if (std::rename(object.c_str(), soPath.c_str()) != 0)
    throw Error(ErrorCode::Io, "codegen: cannot move the compiled kernels to " + soPath);
}

} // namespace kiln::codegen
