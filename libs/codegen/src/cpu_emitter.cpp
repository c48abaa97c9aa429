// C++ for the CPU, kernel by kernel (see cpu_emitter.h). Each buffer's body
// becomes straight-line code of single-assignment temporaries, shared where
// two nodes compute the same thing; the branches of a `where` stay inline,
// so only the chosen one runs (cat's other branches would load out of range).
#include "kiln/codegen/cpu_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/common/error.h"
#include "kiln/ir/philox.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

#include "kernel_functions.h"
#include "kernel_text.h"
#include "prelude.h"

namespace kiln::codegen {
namespace {

using namespace detail;

class KernelWriter : KernelText {
public:
  using KernelText::KernelText;

  std::string write(const std::string& name, runtime::Launch& launch) {
    std::ostringstream body;
    bool reductions = false; // or a scatter: no simd over the outer loops
    for (BufferId id : kernel_.buffers)
      reductions = reductions || program_.buffers[id].loops.reduce != ReduceOp::None ||
                   program_.buffers[id].loops.scatter;
    size_t rank = kernel_.outer.size();
    bool simdLast = !reductions && rank > 0 && allMembersFlat();
    size_t parallel = simdLast ? rank - 1 : rank;
    std::string work = workExpr();
    std::string indent = "  ";
    planReuse();
    // Rows of reused bodies: one per thread, made once per call.
    std::string rows;
    for (const auto& [id, scratch] : scratch_)
      rows += "std::vector<" + valueType(program_.buffers[id].loops.body->dtype) + "> " + scratch +
              ";\n";
    bool block = !rows.empty() && parallel > 0;
    if (!rows.empty() && !block) body << indent << rows;
    if (rank > 0) {
      if (block) {
        body << indent << "#pragma omp parallel if (" << work << " >= 32768)\n" << indent << "{\n";
        indent += "  ";
        body << indent << rows << indent << "#pragma omp for collapse(" << parallel << ")\n";
      } else if (parallel > 0)
        body << indent << "#pragma omp parallel for collapse(" << parallel << ") if (" << work
             << " >= 32768)\n";
      else if (simdLast)
        body << indent << "#pragma omp parallel for simd if (" << work << " >= 32768)\n";
      for (size_t k = 0; k < rank; ++k) {
        if (simdLast && k == rank - 1 && parallel > 0) body << indent << "#pragma omp simd\n";
        body << indent << "for (int64_t kiln_o" << k << " = 0; kiln_o" << k << " < "
             << index(kernel_.outer[k]) << "; ++kiln_o" << k << ") {\n";
        indent += "  ";
      }
    }
    for (BufferId id : kernel_.buffers) body << member(id, indent);
    for (size_t k = rank; k-- > 0;) {
      indent.resize(indent.size() - 2);
      body << indent << "}\n";
    }
    if (block && rank > 0) {
      indent.resize(indent.size() - 2);
      body << indent << "}\n";
    }
    std::ostringstream out;
    out << "extern \"C\" int " << name
        << "(char* const* kiln_buffers, const int64_t* kiln_symbols, const uint32_t* kiln_args, "
           "const uint32_t* kiln_slots) {\n"
        << "  int kiln_error = 0;\n";
    for (sym::Expr s : used_) {
      if (declared_.count(s)) continue;
      out << "  const int64_t " << sym::toString(s) << " = kiln_symbols[kiln_slots["
          << launch.symbols.size() << "]];\n";
      launch.symbols.push_back(static_cast<uint32_t>(slot(s)));
    }
    for (BufferId id : buffers_) {
      const Buffer& b = program_.buffers[id];
      out << "  " << storageType(b.layout.dtype) << "* __restrict__ " << pointer(id)
          << " = reinterpret_cast<" << storageType(b.layout.dtype) << "*>(kiln_buffers[kiln_args["
          << launch.buffers.size() << "]]); // " << b.name << "\n";
      launch.buffers.push_back(id);
    }
    out << body.str() << "  return kiln_error;\n}\n";
    // The outer loops' extent (the work a call divides among threads).
    const Buffer& first = program_.buffers[kernel_.buffers.front()];
    launch.items = first.layout.storageOffset.table().integer(1);
    for (sym::Expr r : kernel_.outer) launch.items = launch.items * r;
    return out.str();
  }

private:
  bool allMembersFlat() {
    for (BufferId id : kernel_.buffers)
      if (withoutUnitDims(program_.buffers[id].loops).ranges.size() != kernel_.outer.size())
        return false;
    return true;
  }

  // The amount of work, for the decision to run in parallel.
  std::string workExpr() {
    const Buffer& first = program_.buffers[kernel_.buffers.front()];
    std::string out = "INT64_C(1)";
    for (sym::Expr r : withoutUnitDims(first.loops).ranges) out += " * (" + index(r) + ")";
    for (sym::Expr r : first.loops.reductionRanges) out += " * (" + index(r) + ")";
    return out;
  }

  std::string member(BufferId id, const std::string& outerIndent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    if (l.scatter) return scatter(id, outerIndent);
    bool local = isLocal(id);
    if (!local) buffers_.insert(id);
    std::string lines, indent = outerIndent;
    LoopShape shape = withoutUnitDims(l);
    size_t rank = kernel_.outer.size();
    lines += indent + "// " + b.name + "\n";
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) declare(l.vars[k], "0", lines, indent);
    for (size_t k = 0; k < rank && k < shape.vars.size(); ++k)
      declare(shape.vars[k], "kiln_o" + std::to_string(k), lines, indent);
    sym::Expr store = storeIndex(b);

    if (l.reduce == ReduceOp::None) {
      std::string close;
      for (size_t k = rank; k < shape.vars.size(); ++k) {
        declared_.insert(shape.vars[k]);
        std::string v = sym::toString(shape.vars[k]);
        if (k + 1 == shape.vars.size()) lines += indent + "#pragma omp simd\n";
        lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(shape.ranges[k]) +
                 "; ++" + v + ") {\n";
        indent += "  ";
        close = indent.substr(2) + "}\n" + close;
      }
      Block block(indent);
      std::string value = storedBody(b, block);
      lines += block.lines;
      if (local) return lines + storeOrHold(id, value, "kiln_r" + std::to_string(id), indent);
      lines += indent + pointer(id) + "[" + index(store) + "] = " + value + ";\n";
      return lines + close;
    }
    return lines + reduction(id, store, indent);
  }

  std::string reduction(BufferId id, sym::Expr store, std::string indent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    std::string acc = "kiln_acc" + std::to_string(id), type = valueType(l.accumulator), lines;
    bool arg = l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin;
    bool floating = ir::isFloating(l.accumulator);
    std::string init = reductionIdentity(l);
    if (auto scratch = scratch_.find(id); scratch != scratch_.end())
      lines += indent + scratch->second + ".resize(" + numelText(l.reductionRanges) + ");\n";
    lines += indent + type + " " + acc + " = " + init + ";\n";
    if (arg) lines += indent + "int64_t " + acc + "_at = -1, " + acc + "_pos = 0;\n";
    bool extreme = l.reduce == ReduceOp::Max || l.reduce == ReduceOp::Min;
    std::string nan = acc + "_nan";
    // An int flag: GCC vectorizes `|` of ints, not `||` of bools.
    if (extreme && floating) lines += indent + "int " + nan + " = 0;\n";
    std::string close;
    // Sums and products may reassociate (vectorized partial sums), as torch's
    // reductions do; max/min vectorize as plain max/min with a separate "saw a
    // NaN" flag (a NaN wins, as in torch); arg* keep order for the first index.
    std::string simd;
    bool boolean = l.accumulator == DType::Bool; // a bool sum is `any`, a bool product `all`
    if ((l.reduce == ReduceOp::Sum || l.reduce == ReduceOp::Prod) && !boolean)
      simd = "#pragma omp simd reduction(" + std::string(l.reduce == ReduceOp::Sum ? "+" : "*") +
             ":" + acc + ")\n";
    if (extreme)
      simd = "#pragma omp simd reduction(" +
             std::string(l.reduce == ReduceOp::Max ? "max" : "min") + ":" + acc + ")" +
             (floating ? " reduction(|:" + nan + ")" : "") + "\n";
    for (size_t k = 0; k < l.reductionVars.size(); ++k) {
      if (k + 1 == l.reductionVars.size() && !simd.empty()) lines += indent + simd;
      declared_.insert(l.reductionVars[k]);
      std::string v = sym::toString(l.reductionVars[k]);
      lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(l.reductionRanges[k]) +
               "; ++" + v + ") {\n";
      indent += "  ";
      close = indent.substr(2) + "}\n" + close;
    }
    Block block(indent);
    std::string raw = emit(l.body, block, false);
    std::string v = convert(l.body->dtype, l.accumulator, raw);
    if (auto row = rowWrites_.find(id); row != rowWrites_.end())
      block.lines += block.indent + row->second + " = " + raw + ";\n";
    lines += block.lines;
    switch (l.reduce) {
    case ReduceOp::Sum:
      lines += indent + acc + " = " + acc + (boolean ? " || " : " + ") + v + ";\n";
      break;
    case ReduceOp::Prod:
      lines += indent + acc + " = " + acc + (boolean ? " && " : " * ") + v + ";\n";
      break;
    case ReduceOp::Max:
    case ReduceOp::Min: {
      std::string keep = l.reduce == ReduceOp::Max ? " > " : " < ";
      lines += indent + acc + " = " + v + keep + acc + " ? " + v + " : " + acc + ";\n";
      if (floating) lines += indent + nan + " |= " + v + " != " + v + ";\n";
      break;
    }
    case ReduceOp::Any: lines += indent + acc + " = " + acc + " || " + v + ";\n"; break;
    case ReduceOp::All: lines += indent + acc + " = " + acc + " && " + v + ";\n"; break;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin: {
      std::string better = l.reduce == ReduceOp::ArgMax ? ">" : "<";
      std::string test = floating
                             ? "(" + v + " != " + v + " || " + v + " " + better + " " + acc + ")"
                             : "(" + v + " " + better + " " + acc + ")";
      if (floating) test = "(" + acc + " == " + acc + " && " + test + ")";
      lines += indent + "if (" + acc + "_at < 0 || " + test + ") { " + acc + " = " + v + "; " +
               acc + "_at = " + acc + "_pos; }\n" + indent + "++" + acc + "_pos;\n";
      break;
    }
    case ReduceOp::None: break;
    }
    indent = indent.substr(0, indent.size() - 2 * l.reductionVars.size());
    lines += close;
    if (extreme && floating)
      lines += indent + "if (" + nan + ") " + acc + " = std::numeric_limits<" + type +
               ">::quiet_NaN();\n";
    std::string result = arg ? acc + "_at" : acc;
    DType resultType = arg ? DType::Int64 : l.accumulator;
    if (!isLocal(id))
      lines += indent + pointer(id) + "[" + index(store) +
               "] = " + stored(b.layout.dtype, resultType, result) + ";\n";
    registers_[id] = {result, resultType};
    return lines;
  }

  // Reuse of a reduction's body: when a later buffer of the kernel (pointwise,
  // or a reduction), over the same inner ranges, computes the very expression
  // the reduction reduced (softmax's exp(x - max), layer_norm's x + r), the
  // reduction keeps each value in a row and the later buffers read it instead
  // of recomputing. The row is the last reader's own output when that reader is
  // pointwise and stores the row's values in their own type (it reads each
  // element just before overwriting it); otherwise a per-thread scratch vector.
  struct Match { // a later buffer's subtrees equal to a reduction's body
    size_t reader;
    std::vector<const ScalarNode*> nodes;
    std::vector<sym::Expr> outer, inner; // the reader's outer and inner index variables
  };

  void planReuse() {
    size_t rank = kernel_.outer.size();
    std::map<BufferId, std::vector<Match>> matches;
    for (size_t p = 0; p < kernel_.buffers.size(); ++p) {
      const Loops& pl = program_.buffers[kernel_.buffers[p]].loops;
      LoopShape ps = withoutUnitDims(pl);
      if (ps.vars.size() < rank) continue;
      // The reader's inner loop: a reduction's ranges, or a pointwise buffer's dims past outer.
      bool reduces = pl.reduce != ReduceOp::None;
      std::vector<sym::Expr> outer(ps.vars.begin(),
                                   ps.vars.begin() + static_cast<std::ptrdiff_t>(rank));
      std::vector<sym::Expr> inner =
          reduces ? pl.reductionVars
                  : std::vector<sym::Expr>(ps.vars.begin() + static_cast<std::ptrdiff_t>(rank),
                                           ps.vars.end());
      Shape innerRanges =
          reduces ? pl.reductionRanges
                  : Shape(ps.ranges.begin() + static_cast<std::ptrdiff_t>(rank), ps.ranges.end());
      for (size_t r = 0; r < p; ++r) {
        BufferId rid = kernel_.buffers[r];
        const Loops& rl = program_.buffers[rid].loops;
        if (rl.reduce == ReduceOp::None || rl.reductionRanges != innerRanges ||
            innerRanges.empty() || opCount(rl.body) < 3)
          continue;
        LoopShape rs = withoutUnitDims(rl);
        std::unordered_map<sym::Expr, sym::Expr> map = unitsToZero(rl);
        for (size_t k = 0; k < rank && k < rs.vars.size(); ++k) map.emplace(rs.vars[k], ps.vars[k]);
        for (size_t k = 0; k < inner.size(); ++k) map.emplace(rl.reductionVars[k], inner[k]);
        Scalar wanted = codegen::substitute(rl.body, map);
        Match m{p, {}, outer, inner};
        findAll(pl.body, wanted, unitsToZero(pl), m.nodes);
        if (!m.nodes.empty()) matches[rid].push_back(std::move(m));
      }
    }
    std::set<BufferId> inOutput = rowsInOutputs(matches);
    for (const auto& [rid, found] : matches) {
      const Loops& rl = program_.buffers[rid].loops;
      LoopShape rs = withoutUnitDims(rl);
      std::vector<sym::Expr> rOuter(
          rs.vars.begin(),
          rs.vars.begin() + static_cast<std::ptrdiff_t>(std::min(rank, rs.vars.size())));
      if (inOutput.count(rid)) { // rowsInOutputs checked rOuter covers the kernel's rank
        BufferId out = kernel_.buffers[found.back().reader];
        auto at = [&](const std::vector<sym::Expr>& outer, const std::vector<sym::Expr>& inner) {
          const Match& last = found.back();
          std::unordered_map<sym::Expr, sym::Expr> map = unitsToZero(program_.buffers[out].loops);
          for (size_t k = 0; k < rank; ++k) map.emplace(last.outer[k], outer[k]);
          for (size_t k = 0; k < inner.size(); ++k) map.emplace(last.inner[k], inner[k]);
          return pointer(out) + "[" +
                 index(sym::substitute(storeIndex(program_.buffers[out]), map)) + "]";
        };
        rowWrites_[rid] = at(rOuter, rl.reductionVars);
        for (const Match& m : found)
          for (const ScalarNode* f : m.nodes) replaced_[f] = at(m.outer, m.inner);
        continue;
      }
      std::string name = "kiln_row" + std::to_string(rid);
      scratch_.emplace(rid, name);
      rowWrites_[rid] = name + "[" + linear(rl.reductionVars, rl.reductionRanges) + "]";
      for (const Match& m : found)
        for (const ScalarNode* f : m.nodes)
          replaced_[f] = name + "[" + linear(m.inner, rl.reductionRanges) + "]";
    }
  }

  // The reductions that keep their row in their last reader's output
  // (rowInOutput). Rows kept in one output are written over each other, in
  // kernel order: an earlier row goes there only if whatever reads it after a
  // later row's loop reads it inside that later row's expression (softmax's
  // output reads exp(x - max), not x - max again); else it gets a scratch row
  // (two softmaxes of one row in a kernel once read the first's exps for the
  // row itself).
  std::set<BufferId> rowsInOutputs(const std::map<BufferId, std::vector<Match>>& matches) {
    size_t rank = kernel_.outer.size();
    auto position = [&](BufferId id) {
      return static_cast<size_t>(
          std::find(kernel_.buffers.begin(), kernel_.buffers.end(), id) - kernel_.buffers.begin());
    };
    std::map<BufferId, std::vector<BufferId>> byOutput; // output -> reductions (sorted below)
    for (const auto& [rid, found] : matches)
      if (withoutUnitDims(program_.buffers[rid].loops).vars.size() >= rank &&
          rowInOutput(rid, found.back()))
        byOutput[kernel_.buffers[found.back().reader]].push_back(rid);
    std::set<BufferId> kept;
    for (auto& [out, rids] : byOutput) {
      std::sort(rids.begin(), rids.end(),
                [&](BufferId a, BufferId b) { return position(a) < position(b); });
      for (size_t j = 0; j < rids.size(); ++j) {
        bool safe = true;
        for (const Match& m : matches.at(rids[j])) {
          if (j + 1 == rids.size() || m.reader <= position(rids[j + 1])) continue;
          for (const ScalarNode* f : m.nodes) {
            bool shadowed = false; // inside a later row's expression in this reader
            for (size_t k = j + 1; k < rids.size() && !shadowed; ++k)
              for (const Match& later : matches.at(rids[k]))
                if (later.reader == m.reader)
                  for (const ScalarNode* g : later.nodes) shadowed = shadowed || contains(*g, f);
            safe = safe && shadowed;
          }
        }
        if (safe) kept.insert(rids[j]);
      }
    }
    return kept;
  }

  static bool contains(const ScalarNode& tree, const ScalarNode* node) {
    if (&tree == node) return true;
    for (const Scalar& a : tree.args)
      if (contains(*a, node)) return true;
    return false;
  }

  // Whether reduction `rid` may keep its row in the output of its last reader: a
  // pointwise buffer of this kernel with memory of its own, storing values of the
  // row's type, its inner dims contiguous.
  bool rowInOutput(BufferId rid, const Match& last) {
    BufferId out = kernel_.buffers[last.reader];
    const Buffer& b = program_.buffers[out];
    DType t = program_.buffers[rid].loops.body->dtype;
    if (b.loops.reduce != ReduceOp::None || b.aliasOf || b.layout.dtype != t ||
        t == DType::Float16 || t == DType::BFloat16 || t == DType::Bool || isLocal(out))
      return false;
    std::unordered_map<sym::Expr, sym::Expr> innerToZero;
    for (sym::Expr v : last.inner) innerToZero.emplace(v, zero());
    sym::Expr store = storeIndex(b);
    const Shape& ranges = program_.buffers[rid].loops.reductionRanges;
    sym::Expr offset = store - sym::substitute(store, innerToZero);
    sym::Expr linearInner = zero();
    for (size_t k = 0; k < last.inner.size(); ++k)
      linearInner = linearInner * ranges[k] + last.inner[k];
    return offset == linearInner;
  }


  std::map<BufferId, std::string> scratch_;   // reduction -> its row of bodies
  std::map<BufferId, std::string> rowWrites_; // reduction -> where it keeps each body
};

} // namespace

const std::string& cpuPrelude() {
  static const std::string prelude = detail::kernelPrelude(false);
  return prelude;
}

CpuSource emitCpu(const Program& program, const Schedule& schedule) {
  CpuSource out;
  std::ostringstream code;
  code << "// Generated by kiln's CPU emitter.\n" << cpuPrelude();
  KernelFunctions functions;
  for (size_t k = 0; k < schedule.kernels.size(); ++k) {
    std::string name = "kiln_kernel_" + std::to_string(k);
    runtime::Launch launch;
    std::string text = KernelWriter(program, schedule.kernels[k], out.symbols).write(name, launch);
    out.kernels.push_back(functions.add(name, text, code));
    out.launches.push_back(std::move(launch));
  }
  out.code = code.str();
  return out;
}

} // namespace kiln::codegen
