// What the guards service keeps per function: compiled entries (a guard set
// and what to run when it holds), keyed by the function's stable identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/guards/guard_set.h"

namespace kiln::guards {

// The same in every process running the same code.
struct FunctionKey {
  std::string module;
  std::string qualname;
  std::string codeHash; // of the bytecode, consts and names

  std::string text() const; // "mymodel.Block.forward@3f2a..."
  friend bool operator==(const FunctionKey& a, const FunctionKey& b) {
    return a.module == b.module && a.qualname == b.qualname && a.codeHash == b.codeHash;
  }
};

struct CompiledEntry {
  GuardSet guards;
  std::vector<std::string> artifacts; // codegen cache keys, in the order the SDK runs them
  std::vector<std::string> graphs;    // structural hashes of the graphs
  std::string outputs;                // the output structure, as the tracer wrote it
  uint64_t id = 0;                    // unique within the function; given by the service
};

// A client's place in a job whose ranks must reach the same decisions.
struct JobMember {
  std::string job;
  uint32_t rank = 0;
  uint32_t worldSize = 1;
  uint64_t round = 0; // which recompile of the function this is (0, 1, ...)
};

} // namespace kiln::guards
