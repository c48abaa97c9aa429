// Backward dataflow over the instruction list: live(i) = uses(i) ∪ (⋃ live(s) over
// successors s) \ stores(i), iterated to a fixpoint.
#include "liveness.h"

#include <vector>

#include "kiln/common/error.h"

namespace kiln::tracer {

namespace {

bool isReturnOrRaise(const std::string& op) {
  return op == "RETURN_VALUE" || op == "RETURN_CONST" || op == "RAISE_VARARGS" || op == "RERAISE";
}

bool isUnconditionalJump(const std::string& op) {
  return op == "JUMP_FORWARD" || op == "JUMP_BACKWARD" || op == "JUMP_BACKWARD_NO_INTERRUPT" || op == "JUMP" ||
         op == "JUMP_NO_INTERRUPT";
}

bool readsLocal(const std::string& op) {
  return op == "LOAD_FAST" || op == "LOAD_FAST_CHECK" || op == "LOAD_FAST_AND_CLEAR" || op == "DELETE_FAST";
}

bool readsLocalsByName(const std::string& op, const std::string& name) {
  return (op == "LOAD_GLOBAL" || op == "LOAD_NAME") &&
         (name == "locals" || name == "vars" || name == "eval" || name == "exec" || name == "dir");
}

} // namespace

std::set<std::string> liveLocals(schema::Code::Reader code, size_t at) {
  auto instructions = code.getInstructions();
  size_t n = instructions.size();
  if (at >= n) throw Error(ErrorCode::Malformed, "tracer: a graph break past the last instruction");
  std::vector<std::string> names;
  for (auto v : code.getVarnames()) names.emplace_back(v.cStr());
  auto index = [&](const std::string& name) -> int {
    for (size_t k = 0; k < names.size(); ++k)
      if (names[k] == name) return static_cast<int>(k);
    return -1;
  };

  std::vector<std::vector<size_t>> successors(n);
  std::vector<int> use(n, -1), store(n, -1);
  for (size_t i = 0; i < n; ++i) {
    auto in = instructions[static_cast<unsigned>(i)];
    std::string op = in.getOpname().cStr(), name = in.getName().cStr();
    if (readsLocalsByName(op, name)) return {names.begin(), names.end()};
    if (readsLocal(op)) use[i] = index(name);
    if (op == "STORE_FAST") store[i] = index(name);
    if (!isReturnOrRaise(op) && !isUnconditionalJump(op) && i + 1 < n) successors[i].push_back(i + 1);
    if (in.getTarget() >= 0 && static_cast<size_t>(in.getTarget()) < n) successors[i].push_back(static_cast<size_t>(in.getTarget()));
  }
  for (auto h : code.getHandlers())
    for (size_t i = h.getStart(); i < h.getEnd() && i < n; ++i)
      if (h.getTarget() < n) successors[i].push_back(h.getTarget());

  // live[i]: a bit per varname, before instruction i.
  std::vector<std::vector<bool>> live(n, std::vector<bool>(names.size(), false));
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      std::vector<bool> out(names.size(), false);
      for (size_t s : successors[i])
        for (size_t k = 0; k < names.size(); ++k) out[k] = out[k] || live[s][k];
      if (store[i] >= 0) out[static_cast<size_t>(store[i])] = false;
      if (use[i] >= 0) out[static_cast<size_t>(use[i])] = true;
      if (out != live[i]) {
        live[i] = std::move(out);
        changed = true;
      }
    }
  }
  std::set<std::string> result;
  for (size_t k = 0; k < names.size(); ++k)
    if (live[at][k]) result.insert(names[k]);
  // Zero-argument super() reads the first argument from the frame's first slot; an argument
  // that is a cell is passed as its cell, not as a local.
  bool firstIsCell = false;
  for (auto cell : code.getCellvars()) firstIsCell = firstIsCell || (!names.empty() && names[0] == cell.cStr());
  for (auto free : code.getFreevars())
    if (std::string(free.cStr()) == "__class__" && code.getArgCount() > 0 && !names.empty() && !firstIsCell)
      result.insert(names[0]);
  return result;
}

} // namespace kiln::tracer
