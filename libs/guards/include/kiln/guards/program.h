// A guard set compiled to a flat program for the guard VM (vm.h): one
// register per node, loads emitted just before a node's first check, checks
// ordered cheapest and most likely to fail first, symbols read once, shape
// guards as postfix int64 code. A Program owns everything it reads, so it
// outlives its GuardSet and crosses threads freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/guards/guard_set.h"

namespace kiln::guards {

enum class Op : uint8_t {
  CallShape, // the call's positional count and keyword names
  Globals,   // the global state
  Load,      // register[node] = step of register[parent] (or of the call, for a root)
  Check,     // nodes[node].checks[operand] holds of register[node]
  Symbol,    // symbols[operand] = int of register[node]; equal to it when already read
  Shape,     // shapeCode[operand] evaluates to true
};

struct Instruction {
  Op op;
  uint32_t node = 0;
  uint32_t operand = 0;
};

// A shape guard's postfix code over the symbol slots.
enum class SymOp : uint8_t { Constant, Symbol, Add, Mul, FloorDiv, Mod, Min, Max, Eq, Ne, Le, And, Or, Not };

struct SymInstruction {
  SymOp op;
  uint32_t count = 0; // operands popped (n-ary ops), or the symbol slot
  int64_t value = 0;  // Constant
};

struct ShapeCode {
  std::vector<SymInstruction> code;
  std::string text; // "s0 >= 2", for messages
};

struct Program {
  CallShape call;
  GlobalState globals;
  std::vector<Node> nodes;          // as in the set: register i holds node i's value
  std::vector<std::string> sources; // each node's source text
  std::vector<std::string> symbols; // slot -> name
  std::vector<uint32_t> symbolNodes; // slot -> the node it is read from
  std::vector<ShapeCode> shapes;
  std::vector<Instruction> code;
  size_t maxStack = 0;              // the deepest shape-guard stack
};

Program compile(const GuardSet& set);

// Runs postfix shape code over bound symbol slots; false also on division by
// zero or int64 overflow (the guard cannot be shown to hold).
bool evaluateShape(const ShapeCode& shape, const int64_t* symbols, int64_t* stack);

// Why a compiled entry did not serve a call, in words:
//   "L['x'].size()[0] == 8 failed: got 16"
struct Failure {
  size_t instruction = 0;
  std::string reason;
};

} // namespace kiln::guards
