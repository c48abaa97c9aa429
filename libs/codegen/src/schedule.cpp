// Greedy fusion in program order (see schedule.h for the rules).
#include "kiln/codegen/schedule.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "flash_attention.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

using VarMap = std::unordered_map<sym::Expr, sym::Expr>;

bool isReduction(const Buffer& b) {
  return b.loops.reduce != ReduceOp::None;
}

bool startsWith(const Shape& shape, const Shape& prefix) {
  if (prefix.size() > shape.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k)
    if (shape[k] != prefix[k]) return false;
  return true;
}

void forEachLoad(const Scalar& s, const std::function<void(const ScalarNode&)>& fn) {
  if (s->kind == ScalarKind::Load) fn(*s);
  for (const Scalar& a : s->args) forEachLoad(a, fn);
}

// The loads of a buffer's body and of a scatter's destination index.
void forEachLoad(const Loops& l, const std::function<void(const ScalarNode&)>& fn) {
  forEachLoad(l.body, fn);
  if (l.scatter)
    for (const Scalar& a : l.scatter->args) forEachLoad(a, fn);
}

// One buffer as the kernel sees it: its loop without unit dims, split into the
// kernel's outer part and its own inner part.
struct Member {
  BufferId id;
  LoopShape shape;
  std::vector<sym::Expr> inner; // inner vars: reduction vars, or the pointwise dims past outer
  Shape innerRanges;
};

// Whether a scalar's value is known before the program runs: it loads
// nothing and reads no symbol (one a runtime step binds may not be yet).
bool isConstant(const Scalar& s) {
  if (s->kind == ScalarKind::Load || s->kind == ScalarKind::Philox) return false;
  if (s->kind == ScalarKind::IndexOf && !s->index.asInteger()) return false;
  for (const Scalar& a : s->args)
    if (!isConstant(a)) return false;
  return true;
}

// A pointwise buffer of one element whose value is a constant.
bool isFreeScalar(const Buffer& b) {
  return isPointwise(b) && withoutUnitDims(b.loops).ranges.empty() && isConstant(b.loops.body);
}

// The order the fuser takes buffers in: the program's, but scalars computed
// from nothing first (isFreeScalar), and an extern call's
// operand computed for it alone (a pointwise buffer just before it) moves,
// with the call and what reads the call's results, after the next run of
// pointwise buffers over the same ranges, which it then joins: GPT-2's gelu
// recomputed for fc2's weight grad reads the pre-activation that the gelu
// backward a few buffers later reads too (one kernel, where it had its own).
// Only what reads the call's results (and, with columnPartials, column sums
// of earlier work) may come between the call and the run, nothing moves past
// a mutation, nor further than a few buffers (the
// operand's sources and the call's other inputs live that much longer).
std::vector<BufferId> fusionOrder(const Program& program, const ScheduleOptions& options) {
  constexpr size_t kLookahead = 16;
  size_t n = program.buffers.size();
  std::vector<std::set<BufferId>> reads(n);
  std::vector<size_t> readers(n, 0);
  for (BufferId id = 0; id < n; ++id) {
    const Buffer& b = program.buffers[id];
    if (b.kind == BufferKind::Computed)
      forEachLoad(b.loops, [&](const ScalarNode& load) { reads[id].insert(load.buffer); });
    if (b.kind == BufferKind::Extern) reads[id].insert(b.call.inputs.begin(), b.call.inputs.end());
    for (BufferId r : reads[id]) ++readers[r];
  }
  for (const Output& o : program.outputs)
    if (o.symInt.isNull()) ++readers[o.buffer];
  // Scalars computed from nothing (the constants a library call reads: each
  // attention's dropout offset) come first, side by side: one kernel for all.
  std::vector<BufferId> order(n);
  for (BufferId id = 0; id < n; ++id) order[id] = id;
  std::stable_partition(order.begin(), order.end(),
                        [&](BufferId id) { return isFreeScalar(program.buffers[id]); });
  for (size_t i = 1; i < n; ++i) {
    BufferId call = order[i], operand = order[i - 1];
    const Buffer& c = program.buffers[call];
    if (c.kind != BufferKind::Extern || !isPointwise(program.buffers[operand]) ||
        readers[operand] != 1 || !reads[call].count(operand))
      continue;
    Shape ranges = withoutUnitDims(program.buffers[operand].loops).ranges;
    std::set<BufferId> moving = {call};
    moving.insert(c.call.results.begin(), c.call.results.end());
    auto joins = [&](BufferId b) {
      return isPointwise(program.buffers[b]) &&
             withoutUnitDims(program.buffers[b].loops).ranges == ranges;
    };
    std::optional<size_t> runEnd;
    for (size_t j = i + 1; j < n && j <= i + kLookahead; ++j) {
      BufferId b = order[j];
      if (program.buffers[b].aliasOf) break;
      bool dependent = moving.count(b) > 0;
      for (BufferId r : reads[b]) dependent = dependent || moving.count(r);
      if (!dependent && joins(b)) {
        runEnd = j;
        continue;
      }
      // A column sum of what came before stays before the operand: the scheduler
      // pulls it into its operand's kernel (a bias grad after its weight grad's product).
      if (!dependent && !runEnd && options.columnPartials && isReduction(program.buffers[b]) &&
          reducesColumns(program.buffers[b].loops))
        continue;
      if (runEnd || !dependent) break; // the run ends; or other work comes first
      moving.insert(b);
    }
    if (!runEnd) continue;
    std::vector<BufferId> reordered(order.begin(),
                                    order.begin() + static_cast<std::ptrdiff_t>(i - 1));
    for (size_t j = i; j <= *runEnd; ++j)
      if (!moving.count(order[j])) reordered.push_back(order[j]);
    reordered.push_back(operand);
    size_t next = reordered.size();
    for (size_t j = i; j <= *runEnd; ++j)
      if (moving.count(order[j])) reordered.push_back(order[j]);
    reordered.insert(reordered.end(), order.begin() + static_cast<std::ptrdiff_t>(*runEnd + 1),
                     order.end());
    order = std::move(reordered);
    i = next; // the call's new place
  }
  return order;
}

class Fuser {
public:
  Fuser(const Program& program, const ScheduleOptions& options)
      : program_(program), options_(options) {}

  Schedule run() {
    order_ = fusionOrder(program_, options_);
    for (current_ = 0; current_ < order_.size(); ++current_) {
      BufferId id = order_[current_];
      const Buffer& b = program_.buffers[id];
      if (b.kind == BufferKind::Input || b.kind == BufferKind::ExternResult || pulled_.count(id))
        continue;
      place(id);
      // Its step comes now: a column sum pulled into a kernel after this may read it.
      placed_.insert(id);
      placed_.insert(b.call.results.begin(), b.call.results.end());
    }
    flush();
    return std::move(schedule_);
  }

private:
  void place(BufferId id) {
    const Buffer& b = program_.buffers[id];
    if (b.kind == BufferKind::Extern) {
      flush();
      schedule_.steps.push_back({Step::CallExtern, 0, id});
      return;
    }
    if (b.aliasOf) { // a mutation: a kernel of its own, in order
      flush();
      open_ = start(id);
      flush();
      return;
    }
    if (open_ && tryJoin(*open_, id)) return;
    if (open_ && tryJoinColumns(*open_, id)) return;
    // Work the open kernel does not feed may join the kernel before it
    // (split reductions' partials side by side: layer_norm's two weight grads).
    if (open_ && held_ && !readsFrom(*open_, b) && tryJoin(*held_, id)) return;
    if (held_) emit(*held_);
    if (open_) pullColumnSums(*open_);
    held_ = std::move(open_);
    open_ = start(id);
  }

  // A kernel being formed: its outer ranges and members so far.
  struct Group {
    Shape outer;
    bool reductions = false;
    bool columns = false; // Kernel::columns
    std::vector<Member> members;
  };

  Group start(BufferId id) {
    const Buffer& b = program_.buffers[id];
    LoopShape shape = b.loops.scatter ? scatterOuter(b.loops) : withoutUnitDims(b.loops);
    Group g{shape.ranges, isReduction(b), false, {}};
    g.members.push_back(member(id, g.outer.size()));
    return g;
  }

  Member member(BufferId id, size_t outerRank) {
    const Buffer& b = program_.buffers[id];
    Member m{id, withoutUnitDims(b.loops), {}, {}};
    if (isReduction(b)) {
      m.inner = b.loops.reductionVars;
      m.innerRanges = b.loops.reductionRanges;
    } else {
      m.inner.assign(m.shape.vars.begin() + static_cast<std::ptrdiff_t>(outerRank), m.shape.vars.end());
      m.innerRanges.assign(m.shape.ranges.begin() + static_cast<std::ptrdiff_t>(outerRank),
                           m.shape.ranges.end());
    }
    return m;
  }

  void emit(const Group& g) {
    Kernel k;
    k.outer = g.outer;
    k.columns = g.columns;
    for (const Member& m : g.members) k.buffers.push_back(m.id);
    schedule_.steps.push_back({Step::RunKernel, schedule_.kernels.size(), 0});
    schedule_.kernels.push_back(std::move(k));
  }

  void flush() {
    if (held_) emit(*held_);
    if (open_) pullColumnSums(*open_);
    if (open_) emit(*open_);
    held_.reset();
    open_.reset();
  }

  bool readsFrom(const Group& g, const Buffer& b) const {
    bool reads = false;
    forEachLoad(b.loops, [&](const ScalarNode& load) {
      for (const Member& m : g.members) reads = reads || m.id == load.buffer;
    });
    return reads;
  }

  // The outer ranges the kernel would have with `b` in it, if any.
  static std::optional<Shape> outerWith(const Group& g, const Buffer& b, const LoopShape& shape) {
    if (isReduction(b)) {
      if (g.reductions) return shape.ranges == g.outer ? std::optional<Shape>(g.outer) : std::nullopt;
      return startsWith(g.outer, shape.ranges) ? std::optional<Shape>(shape.ranges) : std::nullopt;
    }
    return startsWith(shape.ranges, g.outer) ? std::optional<Shape>(g.outer) : std::nullopt;
  }

  // Maps a member's outer vars to canonical ones (the kernel's, by position)
  // and its inner vars to `innerTarget`'s when their ranges agree.
  VarMap mapping(const Member& m, size_t outerRank, const std::vector<sym::Expr>& innerTarget,
                 const Shape& innerTargetRanges) {
    VarMap map = unitsToZero(program_.buffers[m.id].loops);
    for (size_t k = 0; k < outerRank; ++k) map.emplace(m.shape.vars[k], canonical(k));
    if (m.innerRanges == innerTargetRanges)
      for (size_t k = 0; k < m.inner.size(); ++k) map.emplace(m.inner[k], innerTarget[k]);
    return map;
  }

  bool tryJoin(Group& g, BufferId id) {
    const Buffer& b = program_.buffers[id];
    if (g.columns) return false; // its loop runs down columns
    LoopShape shape = withoutUnitDims(b.loops);
    std::optional<Shape> outer = outerWith(g, b, shape);
    if (!outer) return false;
    size_t rank = outer->size();
    std::vector<Member> members;
    for (const Member& m : g.members) members.push_back(member(m.id, rank));
    Member candidate = member(id, rank);
    bool ok = true, readsMember = false;
    VarMap self = mapping(candidate, rank, candidate.inner, candidate.innerRanges);
    forEachLoad(b.loops.body, [&](const ScalarNode& load) {
      for (const Member& producer : members) {
        if (producer.id != load.buffer) continue;
        readsMember = true;
        const Buffer& p = program_.buffers[producer.id];
        // The producer's element read must be the one stored at this outer
        // index (and, for a pointwise producer with elements of its own in the
        // row, at the reader's inner index). One element a row (layer_norm's
        // saved rstd) is held by every thread of the row, as a reduction is.
        if (!isReduction(p) && !producer.innerRanges.empty() &&
            producer.innerRanges != candidate.innerRanges) {
          ok = false;
          return;
        }
        VarMap theirs = mapping(producer, rank, candidate.inner, candidate.innerRanges);
        sym::Expr wanted = sym::substitute(storeIndex(p), theirs);
        if (sym::substitute(load.index, self) != wanted || !load.indirect.empty()) ok = false;
      }
    });
    if (!ok) return false;
    // Unrelated work shares a kernel only where it adds no loop: over the same
    // outer ranges, and a pointwise buffer over a member's own ranges (nested in
    // the items, other loops would run serially within each: one block on a GPU).
    if (!readsMember &&
        (*outer != g.outer || (!isReduction(b) && !sameLoopAsAMember(g.outer, members, shape))))
      return false;
    // A kernel of one item (a reduction to a scalar) holds no pointwise loops:
    // they get kernels parallel over their elements.
    if (outer->empty() && !isReduction(b) && !shape.ranges.empty()) return false;
    g.outer = *outer;
    g.reductions = g.reductions || isReduction(b);
    members.push_back(candidate);
    g.members = std::move(members);
    return true;
  }

  // A column sum joins a flat kernel of rank 2 or more (or one of column sums
  // already) when it walks the kernel's elements (columnCover) as the first
  // sum does, and reads those of its buffers at the element their loop
  // stores at the same position, everything else it reads being computed
  // before the kernel.
  bool tryJoinColumns(Group& g, BufferId id) {
    const Buffer& b = program_.buffers[id];
    if (!options_.columnPartials || g.outer.size() < 2 || (g.reductions && !g.columns) ||
        b.kind != BufferKind::Computed || b.aliasOf || !isReduction(b) ||
        b.loops.reduce == ReduceOp::ArgMax || b.loops.reduce == ReduceOp::ArgMin)
      return false;
    std::optional<ColumnCover> cover = columnCover(g.outer, b.loops);
    if (!cover) return false;
    for (const Member& m : g.members) {
      const Buffer& mb = program_.buffers[m.id];
      if (isReduction(mb)) { // a sum already in: the same walk
        std::optional<ColumnCover> first = columnCover(g.outer, mb.loops);
        if (first->chunkRanges != cover->chunkRanges || first->restRanges != cover->restRanges)
          return false;
      } else if (!isPointwise(mb) || m.shape.ranges != g.outer) {
        return false;
      }
    }
    VarMap self = unitsToZero(b.loops, true);
    bool ok = true, readsMember = false;
    forEachLoad(b.loops, [&](const ScalarNode& load) {
      auto producer = std::find_if(g.members.begin(), g.members.end(),
                                   [&](const Member& m) { return m.id == load.buffer; });
      if (producer == g.members.end()) {
        ok = ok && (program_.buffers[load.buffer].kind == BufferKind::Input ||
                    placed_.count(load.buffer) > 0);
        return;
      }
      const Buffer& p = program_.buffers[producer->id];
      if (isReduction(p) || !load.indirect.empty()) {
        ok = false;
        return;
      }
      readsMember = true;
      VarMap theirs = unitsToZero(p.loops);
      for (size_t k = 0; k + 1 < producer->shape.vars.size(); ++k)
        theirs.emplace(producer->shape.vars[k], cover->rows[k]);
      theirs.emplace(producer->shape.vars.back(), cover->column);
      ok = ok && sym::substitute(load.index, self) == sym::substitute(storeIndex(p), theirs);
    });
    if (!ok || !readsMember) return false;
    g.columns = g.reductions = true;
    g.members.push_back(member(id, g.outer.size()));
    return true;
  }

  // The column sums later in the order that join `g`, now that its run of
  // buffers is over (tryJoinColumns), up to the next mutation: a bias grad
  // comes after the weight grad's product, which reads the kernel's result.
  void pullColumnSums(Group& g) {
    if (!options_.columnPartials || (g.reductions && !g.columns)) return;
    for (size_t j = current_; j < order_.size(); ++j) {
      BufferId id = order_[j];
      const Buffer& b = program_.buffers[id];
      if (b.aliasOf) return;
      if (j == current_ || pulled_.count(id) || !isReduction(b) || !reducesColumns(b.loops))
        continue;
      if (tryJoinColumns(g, id)) pulled_.insert(id);
    }
  }

  static bool sameLoopAsAMember(const Shape& outer, const std::vector<Member>& members,
                                const LoopShape& shape) {
    for (const Member& m : members) {
      Shape ranges = outer;
      ranges.insert(ranges.end(), m.innerRanges.begin(), m.innerRanges.end());
      if (ranges == shape.ranges) return true;
    }
    return false;
  }

  sym::Expr canonical(size_t k) {
    while (canonical_.size() <= k) {
      sym::SymbolTable& table = tableOf(program_);
      std::string name;
      do name = "k" + std::to_string(nextCanonical_++);
      while (table.lookup(name));
      canonical_.push_back(table.declare(name, std::nullopt, sym::Range{0, sym::kInf}));
    }
    return canonical_[k];
  }

  sym::Expr zero() { return tableOf(program_).integer(0); }

  static sym::SymbolTable& tableOf(const Program& program) {
    return program.buffers.front().layout.storageOffset.table();
  }

  const Program& program_;
  ScheduleOptions options_;
  std::vector<BufferId> order_; // fusionOrder's
  size_t current_ = 0;          // the position in order_ being placed
  std::set<BufferId> placed_;   // buffers whose step is placed (a column sum may read them)
  std::set<BufferId> pulled_;   // column sums that joined a kernel before their turn
  Schedule schedule_;
  std::optional<Group> open_; // the kernel buffers join
  std::optional<Group> held_; // the kernel just before it, not yet emitted
  std::vector<sym::Expr> canonical_;
  uint32_t nextCanonical_ = 0;
};

std::string shapeText(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + sym::toString(shape[i]);
  return out + "]";
}

} // namespace

LoopShape scatterOuter(const Loops& loops) {
  LoopShape out;
  for (size_t k = 0; k < loops.ranges.size(); ++k) {
    if (loops.ranges[k].asInteger() == 1 || k == loops.scatterDim) continue;
    out.ranges.push_back(loops.ranges[k]);
    out.vars.push_back(loops.vars[k]);
  }
  return out;
}

LoopShape withoutUnitDims(const Loops& loops) {
  LoopShape out;
  for (size_t k = 0; k < loops.ranges.size(); ++k) {
    if (loops.ranges[k].asInteger() == 1) continue;
    out.ranges.push_back(loops.ranges[k]);
    out.vars.push_back(loops.vars[k]);
  }
  return out;
}

std::optional<ColumnCover> columnCover(const Shape& outer, const Loops& sum) {
  if (outer.size() < 2 || sum.reduce == ReduceOp::None || sum.scatter) return std::nullopt;
  LoopShape out = withoutUnitDims(sum);
  if (out.ranges.empty() || out.ranges.back() != outer.back()) return std::nullopt;
  ColumnCover c;
  c.column = out.vars.back();
  c.chunkVars.assign(out.vars.begin(), out.vars.end() - 1);
  c.chunkRanges.assign(out.ranges.begin(), out.ranges.end() - 1);
  for (size_t k = 0; k < sum.reductionRanges.size(); ++k)
    if (sum.reductionRanges[k].asInteger() != 1) {
      c.restVars.push_back(sum.reductionVars[k]);
      c.restRanges.push_back(sum.reductionRanges[k]);
    }
  // Row dims taken whole by the chunks, one maybe cut (chunk * its rest + rest), then the rest's.
  size_t chunk = 0, rest = 0;
  for (size_t d = 0; d + 1 < outer.size(); ++d) {
    if (chunk < c.chunkRanges.size() && outer[d] == c.chunkRanges[chunk]) {
      c.rows.push_back(c.chunkVars[chunk++]);
    } else if (chunk + 1 == c.chunkRanges.size() && rest < c.restRanges.size() &&
               outer[d] == c.chunkRanges[chunk] * c.restRanges[rest]) {
      c.rows.push_back(c.chunkVars[chunk++] * c.restRanges[rest] + c.restVars[rest]);
      ++rest;
    } else if (chunk == c.chunkRanges.size() && rest < c.restRanges.size() &&
               outer[d] == c.restRanges[rest]) {
      c.rows.push_back(c.restVars[rest++]);
    } else {
      return std::nullopt;
    }
  }
  if (chunk != c.chunkRanges.size() || rest != c.restRanges.size()) return std::nullopt;
  return c;
}

Schedule schedule(const Program& program, const ScheduleOptions& options) {
  Schedule s = Fuser(program, options).run();
  // Where each buffer is read: its kernel (or -1: an extern call, another
  // kernel or an output, which need it in memory).
  std::vector<int64_t> readBy(program.buffers.size(), -2); // -2: not read yet
  auto note = [&](BufferId id, int64_t where) {
    readBy[id] = readBy[id] == -2 || readBy[id] == where ? where : -1;
  };
  for (size_t k = 0; k < s.kernels.size(); ++k)
    for (BufferId id : s.kernels[k].buffers)
      forEachLoad(program.buffers[id].loops,
                  [&](const ScalarNode& load) { note(load.buffer, static_cast<int64_t>(k)); });
  for (const Buffer& b : program.buffers)
    if (b.kind == BufferKind::Extern)
      for (BufferId in : b.call.inputs) note(in, -1);
  for (const Output& o : program.outputs)
    if (o.symInt.isNull()) note(o.buffer, -1);
  for (size_t k = 0; k < s.kernels.size(); ++k) {
    bool flat = isFlat(program, s.kernels[k]);
    for (BufferId id : s.kernels[k].buffers)
      if ((flat || program.buffers[id].loops.reduce != ReduceOp::None) &&
          readBy[id] == static_cast<int64_t>(k))
        s.kernels[k].local.push_back(id);
  }
  return s;
}

bool isFlat(const Program& program, const Kernel& kernel) {
  for (BufferId id : kernel.buffers) {
    const Buffer& b = program.buffers[id];
    if (kernel.columns && b.loops.reduce != ReduceOp::None) continue;
    if (b.loops.reduce != ReduceOp::None || b.loops.scatter || b.aliasOf ||
        withoutUnitDims(b.loops).ranges.size() != kernel.outer.size())
      return false;
  }
  return true;
}

std::string explain(const Schedule& schedule, const Program& program) {
  std::ostringstream out;
  for (const Step& step : schedule.steps) {
    if (step.kind == Step::CallExtern) {
      const Buffer& b = program.buffers[step.buffer];
      out << "extern " << b.name << " = " << b.call.op << "(";
      for (size_t i = 0; i < b.call.inputs.size(); ++i)
        out << (i ? ", " : "") << program.buffers[b.call.inputs[i]].name;
      out << ")";
      bool named = false; // kernels of the artifact's (flash attention)
      for (const char* kernel : {"kernel", "kv_kernel", "delta_kernel"})
        for (const ir::Attr& a : b.call.attrs)
          if (a.name == kernel) {
            out << (named ? ", " : " by ") << std::get<std::string>(a.value);
            named = true;
          }
      // Attention naming no kernel of ours: cuDNN's alone (flash_attention.h), with its dropout.
      if (detail::isFlashAttentionOp(b.call.op) && !named) {
        out << " on cuDNN alone";
        for (const ir::Attr& a : b.call.attrs)
          if (const double* p = a.name == "dropout_p" ? std::get_if<double>(&a.value) : nullptr)
            out << " with dropout " << *p;
      }
      for (const ir::Attr& a : b.call.attrs) // cuBLASLt's (bias_grad: its further result)
        if (a.name == "epilogue") out << " with epilogue " << std::get<std::string>(a.value);
      for (BufferId r : b.call.results) out << ", and " << program.buffers[r].name;
      out << "\n";
      continue;
    }
    const Kernel& k = schedule.kernels[step.kernel];
    out << "kernel " << step.kernel << " over " << shapeText(k.outer) << ":";
    for (size_t i = 0; i < k.buffers.size(); ++i) {
      const Buffer& b = program.buffers[k.buffers[i]];
      LoopShape shape = withoutUnitDims(b.loops);
      Shape inner(shape.ranges.begin() + static_cast<std::ptrdiff_t>(
                                             std::min(k.outer.size(), shape.ranges.size())),
                  shape.ranges.end());
      out << (i ? ", " : " ") << b.name << " (";
      if (b.loops.scatter && b.loops.scatterDim < b.loops.ranges.size())
        out << "scatter in order over [" << sym::toString(b.loops.ranges[b.loops.scatterDim])
            << "]";
      else if (b.loops.atomicScatter())
        out << "scatter in any order (atomics)";
      else if (b.loops.scatter)
        out << "scatter";
      else if (b.loops.reduce != ReduceOp::None)
        out << reduceOpName(b.loops.reduce) << " of " << shapeText(b.loops.reductionRanges)
            << (k.columns ? " down the columns" : "");
      else
        out << "pointwise " << shapeText(inner);
      out << ")";
    }
    out << "\n";
  }
  return out.str();
}

} // namespace kiln::codegen
