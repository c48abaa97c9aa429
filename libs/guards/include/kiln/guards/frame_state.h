// Automatic dynamic: what a function's calls have shown of its inputs' sizes
// and int and float values. The first call's are recorded as static; a later
// call that differs in a tensor dim (or an int, or a float) turns that one
// dynamic, so the next trace makes it a symbol (a float: a graph input) and
// later values reuse that entry (PyTorch's automatic_dynamic_shapes).
// mark_dynamic / mark_static override it. The ranks of a job merge their
// observations in rank order, so all of them reach the same decisions (the
// seeds' compiler collectives).
#pragma once

#include <map>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/guards/guard_set.h"
#include "kiln/guards/input.h"

namespace kiln::guards {

struct FrameInput {
  std::string source; // L['x'], L['xs'][1]
  bool isTensor = false;
  bool isFloat = false;
  std::vector<StaticInt> sizes; // a tensor's dims
  StaticInt value;              // an int's value
  std::optional<double> number; // a float's value (nullopt: dynamic)
};

struct FrameState {
  std::vector<FrameInput> inputs;    // in first-seen order
  std::set<std::string> forcedDynamic; // "L['x'].size()[0]" (mark_dynamic), "L['n']"
  std::set<std::string> forcedStatic;  // mark_static

  const FrameInput* find(const std::string& source) const;
  // Records what one call saw (all static); returns whether a decision changed.
  bool observe(const std::vector<FrameInput>& seen);
  bool dynamicDim(const std::string& source, size_t dim) const;
  bool dynamicInt(const std::string& source) const;
  bool dynamicFloat(const std::string& source) const;
  void mark(const std::string& dim, bool dynamic); // "L['x'].size()[0]" or "L['n']"
  std::string text() const;
};

// The tensors and ints of a call, with their sources: arguments by parameter
// name (`argNames[i]`, or "arg<i>"), keywords by name, items of lists, tuples
// and str/int-keyed dicts inside them.
std::vector<FrameInput> observe(const CallInput& call, const std::vector<std::string>& argNames);

// The decision of a job's ranks: `base` updated with each rank's observations,
// rank 0 first. Every rank computing it from the same inputs gets the same state.
FrameState merge(FrameState base, const std::vector<std::vector<FrameInput>>& byRank);

// Guards that every input of `call` is as it is now, except what `frame`
// made dynamic: call shape, global state, types, constants, lengths, dict
// keys and tensor matches, through lists, tuples and dicts. A dynamic dim of a
// contiguous tensor becomes a symbol read from its size (with its contiguous
// strides as shape guards and `>= 2`, sizes 0 and 1 staying static as in
// PyTorch); a dynamic int becomes a symbol; a dynamic float is guarded by type
// only. Objects get a type guard only: what the graph reads of them is the
// tracer's to guard. Symbols are named
// s0, s1, ... in source order.
// The symbols of one call's dynamic dims: named s<n> in order (`next`); a
// dynamic dim whose size equals an earlier one's takes that dim's symbol
// (`bySize`), its own size read and guarded equal to it (but for dims the user
// marked dynamic, which keep their own): PyTorch's duck sizing,
// so that q, k and v of one length, or x and the tensor it is added to, share
// their symbols and what the trace relied on stays true of every graph made
// from it (a backward's reductions to each input's sizes).
struct DynamicSizes {
  size_t next = 0;
  std::map<int64_t, sym::Expr> bySize;
};

// The guards of one tensor at `node` as guardsForCall makes them: a tensor
// match, its dynamic dims as symbols (`sizes`) with `>= 2` and
// contiguous-stride shape guards. Returns each dim's size in the set's table:
// a constant, or the dim's symbol.
std::vector<sym::Expr> guardTensor(GuardSet& set, uint32_t node, const TensorInput& tensor, const FrameState& frame,
                                   DynamicSizes& sizes);

GuardSet guardsForCall(const CallInput& call, const std::vector<std::string>& argNames, const FrameState& frame);

} // namespace kiln::guards
