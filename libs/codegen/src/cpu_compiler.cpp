#include "kiln/codegen/cpu_compiler.h"

#include "fnv.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kiln/codegen/cpu_emitter.h"
#include "kiln/common/error.h"

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
  // GCC keeps to 256-bit vectors on AVX-512 CPUs unless told otherwise; kiln's row loops
  // (softmax's exp, layer_norm's sums) run ~1.3x faster with 512-bit ones. Ignored elsewhere.
  return {cxx && *cxx ? cxx : "c++", "-std=c++17", "-O3", "-march=native", "-mprefer-vector-width=512",
          "-fopenmp", "-fno-math-errno", "-fPIC", "-shared", "-w"};
}

namespace {

std::string shellCommand(const std::vector<std::string>& extra, const std::string& log) {
  std::string command;
  for (const std::string& part : cpuCompilerCommand()) command += part + " ";
  for (const std::string& part : extra) command += part + " ";
  return command + "> '" + log + "' 2>&1";
}

// The prelude as a header with its precompiled form beside it in `dir`, built
// once (atomically) per prelude and compiler command; empty when it cannot be
// built, and the caller compiles the prelude as text.
std::string preludeHeader(const std::string& dir) {
  std::string command;
  for (const std::string& part : cpuCompilerCommand()) command += part + " ";
  char name[64];
  std::snprintf(name, sizeof name, "/kiln-prelude-%016llx.h",
                static_cast<unsigned long long>(detail::fnv1a(cpuPrelude() + command)));
  std::string header = dir + name, pch = header + ".gch";
  if (::access(pch.c_str(), R_OK) == 0) return header;
  std::string stem = header + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(stem + ".h");
    out << "#pragma once\n" << cpuPrelude();
    if (!out) return {};
  }
  ++runs;
  std::string log = stem + ".log";
  int status = std::system(
      shellCommand({"-x", "c++-header", "'" + stem + ".h'", "-o", "'" + stem + ".gch'"}, log).c_str());
  std::remove(log.c_str());
  bool built = status == 0 && std::rename((stem + ".h").c_str(), header.c_str()) == 0 &&
               std::rename((stem + ".gch").c_str(), pch.c_str()) == 0;
  std::remove((stem + ".h").c_str());
  std::remove((stem + ".gch").c_str());
  return built ? header : std::string();
}

} // namespace

void compileCpu(const std::string& code, const std::string& soPath) {
  std::string stem = soPath + ".tmp" + std::to_string(::getpid());
  std::string source = stem + ".cpp", object = stem + ".so", log = stem + ".log";
  // The prelude comes precompiled where it can (most of a small kernel's
  // compile time is parsing <cmath>); the source stays whole in the artifact.
  std::string text = code;
  std::vector<std::string> extra;
  size_t at = code.find(cpuPrelude());
  if (at != std::string::npos) {
    size_t slash = soPath.find_last_of('/');
    std::string header = preludeHeader(slash == std::string::npos ? "." : soPath.substr(0, slash));
    if (!header.empty()) {
      text = code.substr(0, at) + code.substr(at + cpuPrelude().size());
      extra = {"-include", "'" + header + "'"};
    }
  }
  {
    std::ofstream out(source);
    out << text;
    if (!out) throw Error(ErrorCode::Io, "codegen: cannot write " + source);
  }
  extra.insert(extra.end(), {"-o", "'" + object + "'", "'" + source + "'", "-lmvec"});
  ++runs;
  int status = std::system(shellCommand(extra, log).c_str());
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
