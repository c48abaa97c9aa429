// kiln::Program: an exported program (kiln.export) — a traced graph with its
// symbolic input spec, the Dims the user declared and the runtime asserts the
// shapes service left — as a `.kiln` file holds it (schemas/program.capnp,
// docs/export.md). It reads and writes that file and checks a call's inputs;
// compiled.h compiles and runs it through a stack.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/common/dtype.h"
#include "kiln/guards/guard_set.h"
#include "kiln/ir/graph.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::program {

// A tensor's values, dense and row-major.
struct TensorData {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::string bytes;
};

// A tensor file: one flat message of schemas/program.capnp's TensorData (how
// kiln-run-program takes inputs and gives outputs). Errors as Program::load's.
TensorData loadTensor(const std::string& path);
void saveTensor(const std::string& path, const TensorData& tensor);

// One placeholder of the graph: the caller's, or a tensor the program carries.
struct Input {
  std::string name;   // "x", "self.fc1.weight"
  std::string source; // L['x'], L['self'].fc1.weight
  ir::ValueId placeholder = 0;
  std::optional<TensorData> constant; // none: the caller passes it
  std::vector<guards::Step> path;     // a user input's place in the exported callable's
                                      // arguments (for Python callers)
};

// A dynamic dimension as the user declared it.
struct Symbol {
  sym::Expr symbol;   // of the program's table (s0)
  std::string dim;    // the Dim's name
  std::string source; // x.size(0)
  sym::Range range;
};

struct RuntimeAssert {
  sym::Expr condition; // a boolean over the symbols
  std::string message; // the condition in the user's terms
};

// What a call passes for one user input, for checking.
struct InputShape {
  DType dtype = DType::Float32;
  ir::Device device;
  std::vector<int64_t> sizes;
};

class Program {
public:
  // `graph` must be over `table`; `inputs` has one entry per placeholder, in
  // order. Error{InvalidArgument} for a program that does not hold together
  // (a symbol or assert naming what the graph lacks, a constant that does not
  // match its placeholder).
  Program(std::shared_ptr<sym::SymbolTable> table, ir::Graph graph, std::vector<Input> inputs,
          std::vector<Symbol> symbols, std::vector<RuntimeAssert> asserts,
          std::string outputSpec = {}, std::string name = {});

  // A `.kiln` file. Error{NotFound} or Error{Io} when it cannot be read,
  // Error{Malformed} for bytes that are not a kiln program (bad magic,
  // truncated, damaged), Error{Unsupported} for another format version.
  static Program load(const std::string& path);
  static Program fromBytes(std::string_view bytes);
  std::string toBytes() const;
  void save(const std::string& path) const; // atomically: temp file + rename

  const std::string& name() const { return name_; }
  const ir::Graph& graph() const { return graph_; }
  sym::SymbolTable& table() const { return *table_; }
  const std::vector<Input>& inputs() const { return inputs_; }
  std::vector<const Input*> userInputs() const; // what a call passes, in order
  const std::vector<Symbol>& symbols() const { return symbols_; }
  const std::vector<RuntimeAssert>& asserts() const { return asserts_; }
  // schemas/tracer.capnp's OutputSpec as a flat message (empty: the graph's
  // outputs as a flat list).
  const std::string& outputSpec() const { return outputSpec_; }

  // The symbols' values for a call, after checking it: as many inputs as
  // userInputs(), each of its placeholder's dtype, device type, rank and
  // static sizes; each Dim one value within its range; every runtime assert
  // true. Error{InvalidArgument} saying what failed in the user's terms, e.g.
  // "runtime assert s0*s1 == s2 failed: s0=3, s1=4, s2=13 (...)".
  sym::Binding check(const std::vector<InputShape>& inputs) const;

  // The spec, the asserts and the graph, for people.
  std::string text() const;

private:
  void validate() const;

  std::shared_ptr<sym::SymbolTable> table_;
  ir::Graph graph_; // over *table_
  std::vector<Input> inputs_;
  std::vector<Symbol> symbols_;
  std::vector<RuntimeAssert> asserts_;
  std::string outputSpec_;
  std::string name_;
};

} // namespace kiln::program

namespace kiln {
using program::Program; // kiln::Program::load(path), as the SDK's docs spell it
} // namespace kiln
