// CUDA C++ for NVRTC, kernel by kernel (see cuda_emitter.h). The scalar text
// is KernelText's, shared with the CPU emitter; this file decides the loops:
// which thread runs which element or row, and how reductions combine.
#include "kiln/codegen/cuda_emitter.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/codegen/plan.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"

#include "flash_attention.h"
#include "kernel_functions.h"
#include "kernel_text.h"
#include "prelude.h"

namespace kiln::codegen {
namespace {

using namespace detail;

// Combining values across the threads of a row's group: butterfly shuffles
// within a warp, then through shared memory between the warps of a block.
// Every thread ends with the same result, combined in the same order each run.
const char* kGroupReduce = R"(
KILN_FN int kiln_shfl_xor(int v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KILN_FN unsigned kiln_shfl_xor(unsigned v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KILN_FN long long kiln_shfl_xor(long long v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KILN_FN float kiln_shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KILN_FN double kiln_shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KILN_FN bool kiln_shfl_xor(bool v, int o) { return __shfl_xor_sync(0xffffffffu, (int)v, o) != 0; }
KILN_FN int8_t kiln_shfl_xor(int8_t v, int o) { return (int8_t)__shfl_xor_sync(0xffffffffu, (int)v, o); }
KILN_FN uint8_t kiln_shfl_xor(uint8_t v, int o) { return (uint8_t)__shfl_xor_sync(0xffffffffu, (int)v, o); }
KILN_FN int16_t kiln_shfl_xor(int16_t v, int o) { return (int16_t)__shfl_xor_sync(0xffffffffu, (int)v, o); }

/* An arg-reduction's candidate: a value and its position in the row (-1: none yet). */
template <class T> struct kiln_arg { T v; int64_t at; };
template <class T> KILN_FN kiln_arg<T> kiln_shfl_xor(kiln_arg<T> a, int o) {
  return {kiln_shfl_xor(a.v, o), kiln_shfl_xor((long long)a.at, o)};
}
/* torch's argmax/argmin: a NaN is the extreme, ties go to the first position. */
template <class T, bool Max> KILN_FN kiln_arg<T> kiln_arg_combine(kiln_arg<T> a, kiln_arg<T> b) {
  if (a.at < 0) return b;
  if (b.at < 0) return a;
  bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return an && bn ? (a.at < b.at ? a : b) : (an ? a : b);
  if (Max ? a.v > b.v : a.v < b.v) return a;
  if (Max ? b.v > a.v : b.v < a.v) return b;
  return a.at < b.at ? a : b;
}

/* A register array of N elements from memory, or to it: one access of word W
   where `aligned`, else element by element (a columns kernel's accesses). */
template <class W, int N, class T> KILN_FN void kiln_load_vector(T* out, const T* p, bool aligned) {
  if (aligned) {
    *reinterpret_cast<W*>(out) = *reinterpret_cast<const W*>(p);
  } else {
#pragma unroll
    for (int u = 0; u < N; ++u) out[u] = p[u];
  }
}
template <class W, int N, class T> KILN_FN void kiln_store_vector(const T* in, T* p, bool aligned) {
  if (aligned) {
    *reinterpret_cast<W*>(p) = *reinterpret_cast<const W*>(in);
  } else {
#pragma unroll
    for (int u = 0; u < N; ++u) p[u] = in[u];
  }
}
/* Item u (a constant) of such an array of bf16: a shift or a mask of its 32-bit word, where
   kiln_b2f(v[u]) extracts the 16 bits first (PRMT + SHF; an H200, the bf16 GELU kernel of
   bench/gpu's case (a): 76.5 -> 75.4 us with a hand-written twin). */
KILN_FN float kiln_b2f_item(const kiln_bf16* v, int u) {
  uint32_t w = reinterpret_cast<const uint32_t*>(v)[u >> 1];
  return __uint_as_float(u & 1 ? w & 0xffff0000u : w << 16);
}

/* The group's combined value, in every thread of the group. G threads per
   group: G <= 32 lanes of one warp, or the whole block (a multiple of 32,
   `shared` holding one slot per warp). */
template <int G, class T, class F> KILN_FN T kiln_group_reduce(T v, F combine, T* shared) {
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o /= 2) v = combine(v, kiln_shfl_xor(v, o));
  if (G <= 32) return v;
  __syncthreads(); /* the slots' readers of the last reduction are done */
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < G / 32; ++w) v = combine(v, shared[w]);
  return v;
}
)";

// The work of a row: the largest inner extent among the kernel's buffers
// (reduction ranges, or pointwise dims past the outer ones); null if symbolic.
std::optional<int64_t> staticRowWork(const Program& program, const Kernel& kernel) {
  int64_t most = 1;
  for (BufferId id : kernel.buffers) {
    const Loops& l = program.buffers[id].loops;
    Shape inner = l.reductionRanges;
    if (l.reduce == ReduceOp::None) {
      LoopShape shape = withoutUnitDims(l);
      inner.assign(shape.ranges.begin() + static_cast<std::ptrdiff_t>(
                                              std::min(kernel.outer.size(), shape.ranges.size())),
                   shape.ranges.end());
    }
    std::optional<int64_t> n = staticNumel(inner);
    if (!n) return std::nullopt;
    most = std::max(most, *n);
  }
  return most;
}

// A columns kernel's block: 8 row lanes of 32 column vectors (fewer vectors, more lanes).
constexpr int kColumnThreads = 256;

int64_t powerOfTwoAtLeast(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Whether a row kernel's 16-byte path needs its element-by-element twin: where
// some access may be unaligned in a way the runtime cannot mend. It mends an
// input whose memory is not (a view at an odd storage offset): the launch reads
// an aligned copy of it. Memory the run allocates is aligned (the Allocator's
// 64 bytes; an input's memory is adopted only when it is 16-byte aligned). So
// a static-shape kernel has no twin unless it writes into another buffer's
// memory (a mutation) or an access starts at an offset not a multiple of the
// vector; symbolic steps between rows, or a symbolic offset, need one. A twin
// costs NVRTC time on every cold compile for a path a run rarely takes (a
// third of GPT-2's kernel compile time before this rule).
bool needsTwin(const Program& program, const std::vector<runtime::AlignedAccess>& aligned) {
  for (const runtime::AlignedAccess& a : aligned) {
    if (a.buffer < 0) return true; // a symbolic step between rows
    std::optional<int64_t> offset = a.offset.asInteger();
    if (!offset || (*offset * static_cast<int64_t>(a.elementBytes)) % a.bytes != 0) return true;
    if (program.buffers[static_cast<size_t>(a.buffer)].aliasOf) return true;
  }
  return false;
}

class CudaKernelWriter : KernelText {
public:
  // `mayAlias`: inputs whose memory a buffer this kernel writes may be (KernelSet::inPlace).
  // `elementsOnly`: a row kernel's twin without the 16-byte path (Launch::unaligned).
  CudaKernelWriter(const Program& program, const Kernel& kernel, std::vector<sym::Expr>& symbols,
                   std::set<BufferId> mayAlias, bool elementsOnly = false)
      : KernelText(program, kernel, symbols), mayAlias_(std::move(mayAlias)),
        elementsOnly_(elementsOnly) {}

  std::string write(const std::string& name, runtime::Launch& launch) {
    std::string text = kernel_.columns ? columnsBody(launch) : body(launch);
    std::ostringstream out;
    // A block of 1024 threads (a long row's) asks for two a multiprocessor: 32
    // registers a thread. Past them one block fits, and half the threads are too
    // few to hide the loads' latency.
    out << "extern \"C\" __global__ void __launch_bounds__(" << threads_
        << (threads_ == 1024 ? ", 2" : "") << ") " << name << "(";
    std::vector<std::string> params;
    const std::set<BufferId>& written = writtenRoots();
    for (BufferId id : buffers_) {
      const Buffer& b = program_.buffers[id];
      bool writes = isWritten(id);
      // Read-only memory no buffer of this kernel writes may take the read-only cache path.
      std::string qualifier = writes ? "" : "const ";
      std::string restrict =
          !writes && !written.count(root(id)) && !mayAlias_.count(id) ? " __restrict__" : "";
      params.push_back(qualifier + storageType(b.layout.dtype) + "*" + restrict + " " +
                       pointer(id));
      launch.buffers.push_back(id);
    }
    for (sym::Expr s : used_) {
      if (declared_.count(s)) continue;
      params.push_back("const int64_t " + sym::toString(s));
      launch.symbols.push_back(static_cast<uint32_t>(slot(s)));
    }
    params.push_back("int* kiln_status");
    for (size_t k = 0; k < params.size(); ++k) out << (k ? ", " : "") << params[k];
    out << ") {\n";
    for (const std::string& s : shared_) out << "  " << s;
    out << "  int kiln_error = 0;\n" << text;
    out << "  if (kiln_error) *kiln_status = kiln_error;\n}\n";
    return out.str();
  }

private:
  // The statements of a flat, row or scatter kernel, its launch's shape in `launch`.
  std::string body(runtime::Launch& launch) {
    bool rows = false, scatters = false;
    for (BufferId id : kernel_.buffers) {
      const Loops& l = program_.buffers[id].loops;
      rows = rows || l.reduce != ReduceOp::None ||
             (!l.scatter && withoutUnitDims(l).ranges.size() != kernel_.outer.size());
      scatters = scatters || l.scatter;
    }
    rows = rows && !scatters;
    size_t rank = kernel_.outer.size();
    sym::Expr items = zero() + 1;
    for (sym::Expr r : kernel_.outer) items = items * r;

    if (rows) { // a group of threads per row
      std::optional<int64_t> work = staticRowWork(program_, kernel_);
      if (columnSums(items, work)) {
        group_ = 1;
        threads_ = 256;
      } else if (work && *work <= 512) {
        group_ = 32;
        threads_ = 128;
      } else {
        // A block per row past 512 elements: at most 8 elements a thread, and (up to 512
        // threads) at most two 16-byte vectors of the stored row a thread. The row's code is
        // unrolled per element, so fewer elements a thread also means less for NVRTC to
        // compile, and 8 a thread keeps registers low enough for a full SM (bench/README).
        int64_t threads = 256;
        if (work) {
          int64_t vectors = static_cast<int64_t>(storedRowElement()) * *work / 32;
          threads = std::clamp<int64_t>(
              powerOfTwoAtLeast(std::max(*work / 8, std::min<int64_t>(vectors, 512))), 128, 1024);
        }
        threads_ = static_cast<int>(threads);
        group_ = threads_;
      }
    } else {
      threads_ = 256;
      group_ = 1;
    }
    int perBlock = threads_ / group_;
    // 32-bit loop indices where every count is known and small: a 64-bit
    // division or modulo (unflattening an item) costs several times a 32-bit one.
    std::optional<int64_t> work =
        rows ? staticRowWork(program_, kernel_) : std::optional<int64_t>(1);
    if (items.asInteger() && work && *items.asInteger() < (int64_t{1} << 30) &&
        *work < (int64_t{1} << 30))
      ix_ = "int";

    std::ostringstream body;
    std::string indent = "  ";
    std::string item = rows ? "kiln_row" : "kiln_item";
    if (!rows) { // the flat index, as a symbol index expressions may be rewritten over
      sym::SymbolTable& table = items.table();
      auto known = table.lookup("kiln_item");
      item_ = known ? *known : table.declare("kiln_item", std::nullopt, sym::Range::size());
      declared_.insert(item_);
    }
    std::string scalarStart; // where the flat loop starts: after the vectorized part
    if (!rows && !scatters && rank > 0) body << vectorized(items, scalarStart, launch);
    if (rows && group_ > 1) perThread_ = persistentRow();
    if (rows && group_ > 1 && !elementsOnly_) launch.aligned = rowVectorPath();
    if (perThread_ > 0) planRowReuse();
    if (rows && group_ < threads_)
      body << indent << "const int kiln_lane = threadIdx.x % " << group_ << ";\n";
    else if (rows)
      body << indent << "const int kiln_lane = threadIdx.x;\n";
    std::string first = rows && group_ < threads_
                            ? "(" + ix_ + ")blockIdx.x * " + std::to_string(perBlock) +
                                  " + threadIdx.x / " + std::to_string(group_)
                        : rows ? "(" + ix_ + ")blockIdx.x"
                               : scalarStart + "(" + ix_ + ")blockIdx.x * " +
                                     std::to_string(threads_) + " + threadIdx.x";
    // Rows of a known count: the runtime launches a block per perBlock of them (waves 0),
    // so each thread's row comes once: without the loop NVRTC optimises a row kernel
    // better (bench/README, gpu: "CUDA emitter choices").
    std::optional<int64_t> rowCount = rows ? items.asInteger() : std::nullopt;
    bool once = rowCount && (*rowCount + perBlock - 1) / perBlock <= INT32_MAX;
    if (scalarStart == kNoScalarLoop) return finish(body.str(), items, perBlock, rows, launch);
    std::ostringstream loop;
    loop << indent << (once ? "if (" : "for (") << ix_ << " " << item << " = " << first << "; "
         << item << " < " << index(items);
    if (!once) loop << "; " << item << " += (" << ix_ << ")gridDim.x * " << perBlock;
    loop << ") {\n";
    indent += "  ";
    if (rank > 0) loop << unflatten(item, indent);
    std::ostringstream members;
    for (size_t m = 0; m < kernel_.buffers.size(); ++m) {
      BufferId id = kernel_.buffers[m];
      members << (rows ? rowMember(m, indent) : flatMember(id, indent));
      inRowLoop_ = false;
      // A later buffer may read this one's elements, stored by other threads of the group.
      if (rows && group_ > 1 && m + 1 < kernel_.buffers.size())
        members << indent << (group_ <= 32 ? "__syncwarp();\n" : "__syncthreads();\n");
    }
    std::istringstream decls(rowDecls_);
    for (std::string line; std::getline(decls, line);) loop << indent << line << "\n";
    loop << members.str();
    indent.resize(indent.size() - 2);
    loop << indent << "}\n";
    body << loop.str();

    return finish(body.str(), items, perBlock, rows, launch);
  }

  // The launch of a flat, row or scatter kernel of these statements.
  std::string finish(std::string text, sym::Expr items, int perBlock, bool rows,
                     runtime::Launch& launch) {
    launch.items = items;
    launch.itemsPerBlock = static_cast<uint32_t>(perBlock * lanes_);
    launch.threads = static_cast<uint32_t>(threads_);
    // Flat kernels of 16-bit elements (8 a vector: twice f32's work a thread)
    // run at most 8 waves of blocks, each thread looping: the fastest cap measured;
    // f32 runs fastest uncapped (bench/README, gpu: "CUDA emitter choices").
    if (!rows && lanes_ == 8) launch.waves = 8;
    launch.mayFail = text.find("&kiln_error") != std::string::npos;
    return text;
  }

  // A columns kernel (Kernel::columns): a block of kColumnThreads threads over
  // one chunk of the rows (the sums' columnCover) and `perBlock` column
  // vectors of `lanes_` columns; its threads' row lanes (threadIdx.x /
  // perBlock) walk the chunk's rows in turn, each computing the flat buffers'
  // items of its vector (vectorMember) and adding them to its own sums, which
  // the block then adds up in row-lane order (deterministic) and its first
  // row lane stores. A vector needs whole vectors in a row (else a column a
  // thread) and is read or written by 16 bytes: taken as aligned where the
  // runtime sees to it (trustedAlignment), else where a check once a launch
  // finds it aligned, element by element where not. The MLP's GELU backward with db1
  // (8192x16384 bf16, H100): 406 us, against 365 + 151 as a flat kernel and
  // cuBLASLt's bias-grad epilogue (lowering's kColumnsKernelSplit).
  std::string columnsBody(runtime::Launch& launch) {
    std::vector<size_t> sums;        // positions of the column sums among the kernel's buffers
    std::vector<ColumnCover> covers; // each one's walk (the same ranges: the scheduler's rule)
    for (size_t m = 0; m < kernel_.buffers.size(); ++m) {
      const Loops& l = program_.buffers[kernel_.buffers[m]].loops;
      if (l.reduce == ReduceOp::None) continue;
      std::optional<ColumnCover> own = columnCover(kernel_.outer, l);
      if (!own)
        throw Error(ErrorCode::Internal, "codegen: a columns kernel's sum walks no columns");
      sums.push_back(m);
      covers.push_back(std::move(*own));
    }
    if (sums.empty())
      throw Error(ErrorCode::Internal, "codegen: a columns kernel without column sums");
    const ColumnCover* cover = &covers.front();
    size_t rank = kernel_.outer.size();
    sym::Expr items = zero() + 1, chunks = zero() + 1, rest = zero() + 1;
    for (sym::Expr r : kernel_.outer) items = items * r;
    for (sym::Expr r : cover->chunkRanges) chunks = chunks * r;
    for (sym::Expr r : cover->restRanges) rest = rest * r;
    if (items.asInteger() && *items.asInteger() < (int64_t{1} << 30)) ix_ = "int";
    sym::SymbolTable& table = items.table();
    auto known = table.lookup("kiln_item");
    item_ = known ? *known : table.declare("kiln_item", std::nullopt, sym::Range::size());
    declared_.insert(item_);
    threads_ = kColumnThreads;
    // Vectors lie within a row, and hold at most 32 bytes of each sum's accumulators (its
    // row lanes' sums in shared memory: 8 KiB a sum); else items one by one, a column a thread.
    std::optional<VectorPlan> plan = planVectors();
    size_t widestSum = 0;
    for (size_t m : sums)
      widestSum =
          std::max(widestSum, elementSize(program_.buffers[kernel_.buffers[m]].loops.accumulator));
    if (!plan || !plan->rowAligned || static_cast<size_t>(lanes_) * widestSum > 32) {
      lanes_ = 1;
      plan = planVectors(1);
    }
    if (!plan)
      plan = VectorPlan{std::vector<std::vector<VectorLoad>>(kernel_.buffers.size()),
                        std::vector<std::optional<sym::Expr>>(kernel_.buffers.size()),
                        {},
                        true};
    sym::Expr columns = kernel_.outer.back();
    sym::Expr vectors = sym::floorDiv(columns + (lanes_ - 1), lanes_);
    int perBlock = 32; // column vectors a block
    if (auto n = vectors.asInteger())
      perBlock = static_cast<int>(std::min<int64_t>(32, powerOfTwoAtLeast(*n)));
    int rowLanes = threads_ / perBlock;
    sym::Expr blocksPerChunk = sym::floorDiv(vectors + (perBlock - 1), perBlock);
    std::string lanes = std::to_string(lanes_), indent = "  ", text;
    bool checked = lanes_ > 1 && !plan->accesses.empty() && !trustedAlignment(*plan, launch);
    if (checked) text += alignmentChecks(*plan, indent);
    text +=
        indent + "const int kiln_column_vector = threadIdx.x % " + std::to_string(perBlock) + ";\n";
    text += indent + "const int kiln_row_lane = threadIdx.x / " + std::to_string(perBlock) + ";\n";
    text += indent + "const " + ix_ + " kiln_chunk = (" + ix_ + ")blockIdx.x / (" +
            index(blocksPerChunk) + ");\n";
    text += indent + "const " + ix_ + " kiln_col = ((" + ix_ + ")blockIdx.x % (" +
            index(blocksPerChunk) + ") * " + std::to_string(perBlock) +
            " + kiln_column_vector) * " + lanes + ";\n";
    // Each sum's chunk variables, and its partial sums (a lane each).
    std::vector<ReduceText> reduce;
    for (size_t s = 0; s < sums.size(); ++s) {
      size_t m = sums[s];
      const Buffer& b = program_.buffers[kernel_.buffers[m]];
      reduce.push_back(reduceText(b.loops));
      text += unflattenVars("kiln_chunk", covers[s].chunkVars, covers[s].chunkRanges, indent);
      for (size_t k = 0; k < b.loops.vars.size(); ++k)
        if (b.loops.ranges[k].asInteger() == 1) declare(b.loops.vars[k], "0", text, indent);
      for (size_t k = 0; k < b.loops.reductionVars.size(); ++k)
        if (b.loops.reductionRanges[k].asInteger() == 1)
          declare(b.loops.reductionVars[k], "0", text, indent);
      text += indent + reduce.back().type + " kiln_acc" + std::to_string(kernel_.buffers[m]) + "[" +
              lanes + "];\n";
      text += indent + "#pragma unroll\n" + indent + "for (int kiln_u = 0; kiln_u < " + lanes +
              "; ++kiln_u) kiln_acc" + std::to_string(kernel_.buffers[m]) +
              "[kiln_u] = " + reduce.back().init + ";\n";
    }
    text += indent + "if (kiln_col < " + index(columns) + ") {\n";
    std::string loop = indent + "  ", inner = loop + "  ";
    // Two rows' loads in flight a thread (four are no faster: bench/README, gpu:
    // "CUDA emitter choices").
    text += loop + "#pragma unroll 2\n";
    text += loop + "for (" + ix_ + " kiln_j = kiln_row_lane; kiln_j < " + index(rest) +
            "; kiln_j += " + std::to_string(rowLanes) + ") {\n";
    for (const ColumnCover& own : covers)
      text += unflattenVars("kiln_j", own.restVars, own.restRanges, inner);
    sym::Expr at = zero();
    for (size_t k = 0; k + 1 < rank; ++k) {
      text += inner + "const " + ix_ + " kiln_p" + std::to_string(k) + " = " +
              index(cover->rows[k]) + ";\n";
      at = (at + cover->rows[k]) * kernel_.outer[k + 1];
    }
    text += inner + "const " + ix_ + " kiln_p" + std::to_string(rank - 1) + " = kiln_col;\n";
    text += inner + "const " + ix_ + " kiln_at = " + index(at) + " + kiln_col;\n";
    for (size_t m = 0; m < kernel_.buffers.size(); ++m)
      if (program_.buffers[kernel_.buffers[m]].loops.reduce == ReduceOp::None)
        text += vectorMember(*plan, m, "kiln_at", inner, checked, true);
    for (int u = 0; u < lanes_; ++u) { // the sums of the vector's items
      text += inner + "{\n";
      std::string lane = inner + "  ";
      for (size_t m = 0; m < kernel_.buffers.size(); ++m)
        if (program_.buffers[kernel_.buffers[m]].loops.reduce == ReduceOp::None)
          hold(kernel_.buffers[m], "kiln_s" + std::to_string(m) + "[" + std::to_string(u) + "]");
      for (size_t s = 0; s < sums.size(); ++s) {
        BufferId id = kernel_.buffers[sums[s]];
        const Loops& l = program_.buffers[id].loops;
        std::string lines;
        declareIndex(covers[s].column, "kiln_col + " + std::to_string(u), lines, lane);
        Block block(lane);
        std::string value = convert(l.body->dtype, l.accumulator, emit(l.body, block, false));
        std::string acc = "kiln_acc" + std::to_string(id) + "[" + std::to_string(u) + "]";
        text += lines + block.lines + lane + "{ const " + reduce[s].type + " a = " + acc +
                ", b = " + value + "; " + acc + " = static_cast<" + reduce[s].type + ">(" +
                reduce[s].combine + "); }\n";
      }
      text += inner + "}\n";
    }
    text += loop + "}\n" + indent + "}\n";
    // The block's row lanes' sums, added in order by its first row lane, which stores them.
    for (size_t s = 0; s < sums.size(); ++s) {
      BufferId id = kernel_.buffers[sums[s]];
      std::string acc = "kiln_acc" + std::to_string(id), slots = acc + "_rows";
      std::string width = std::to_string(perBlock * lanes_);
      shared_.push_back("__shared__ " + reduce[s].type + " " + slots + "[" +
                        std::to_string(rowLanes) + "][" + width + "];\n");
      text += indent + "#pragma unroll\n" + indent + "for (int kiln_u = 0; kiln_u < " + lanes +
              "; ++kiln_u) " + slots + "[kiln_row_lane][kiln_column_vector * " + lanes +
              " + kiln_u] = " + acc + "[kiln_u];\n";
    }
    text += indent + "__syncthreads();\n";
    text += indent + "if (kiln_row_lane == 0 && kiln_col < " + index(columns) + ") {\n";
    std::string lane = indent + "  ";
    for (size_t s = 0; s < sums.size(); ++s) {
      BufferId id = kernel_.buffers[sums[s]];
      const Buffer& b = program_.buffers[id];
      std::string acc = "kiln_acc" + std::to_string(id), slots = acc + "_rows";
      buffers_.insert(id);
      for (int u = 0; u < lanes_; ++u) {
        std::string lines, position = "kiln_column_vector * " + lanes + " + " + std::to_string(u);
        declareIndex(covers[s].column, "kiln_col + " + std::to_string(u), lines, lane + "  ");
        text += lane + "{\n" + lines + lane + "  " + reduce[s].type + " a = " + slots + "[0][" +
                position + "];\n";
        text += lane + "  for (int kiln_r = 1; kiln_r < " + std::to_string(rowLanes) +
                "; ++kiln_r) { const " + reduce[s].type + " b = " + slots + "[kiln_r][" + position +
                "]; a = static_cast<" + reduce[s].type + ">(" + reduce[s].combine + "); }\n";
        text += lane + "  " + pointer(id) + "[" + index(storeIndex(b)) +
                "] = " + stored(b.layout.dtype, b.loops.accumulator, "a") + ";\n" + lane + "}\n";
      }
    }
    text += indent + "}\n";
    for (size_t m = 0; m < kernel_.buffers.size(); ++m)
      if (!isLocal(kernel_.buffers[m])) buffers_.insert(kernel_.buffers[m]);
    launch.items = chunks * blocksPerChunk;
    launch.itemsPerBlock = 1;
    launch.threads = static_cast<uint32_t>(threads_);
    launch.mayFail = text.find("&kiln_error") != std::string::npos;
    return text;
  }

  // Variables `vars` over `ranges` (row-major) from the flat position `flat` (C++).
  std::string unflattenVars(const std::string& flat, const std::vector<sym::Expr>& vars,
                            const Shape& ranges, const std::string& indent) {
    if (vars.empty()) return "";
    std::string rest = "kiln_rest" + std::to_string(nextRest_++);
    std::string lines = indent + ix_ + " " + rest + " = " + flat + ";\n";
    for (size_t k = vars.size(); k-- > 0;) {
      declareIndex(vars[k], k == 0 ? rest : rest + " % " + index(ranges[k]), lines, indent);
      if (k > 0) lines += indent + rest + " /= " + index(ranges[k]) + ";\n";
    }
    return lines;
  }

  // An index variable of the loop index type (32-bit where the kernel's counts allow).
  void declareIndex(sym::Expr var, const std::string& value, std::string& lines,
                    const std::string& indent) {
    declared_.insert(var);
    lines += indent + "const " + ix_ + " " + sym::toString(var) + " = " + value + ";\n";
  }

  // A reduction's accumulator type, its identity and its combining expression of a and b.
  struct ReduceText {
    std::string type, init, combine;
  };
  static ReduceText reduceText(const Loops& l) {
    ReduceText r{valueType(l.accumulator), reductionIdentity(l), ""};
    bool boolean = l.accumulator == DType::Bool;
    switch (l.reduce) {
    case ReduceOp::Sum: r.combine = boolean ? "a || b" : "a + b"; break;
    case ReduceOp::Prod: r.combine = boolean ? "a && b" : "a * b"; break;
    case ReduceOp::Max: r.combine = "kiln_maximum(a, b)"; break;
    case ReduceOp::Min: r.combine = "kiln_minimum(a, b)"; break;
    case ReduceOp::Any: r.combine = "a || b"; break;
    case ReduceOp::All: r.combine = "a && b"; break;
    default: break;
    }
    return r;
  }

  BufferId root(BufferId id) const {
    while (program_.buffers[id].aliasOf) id = *program_.buffers[id].aliasOf;
    return id;
  }

  // A kernel of column sums (reducesColumns) runs a thread per output, each
  // over its whole column: neighbouring threads read neighbouring elements.
  // Where outputs are few and columns long, lowering has split the sums
  // (LowerOptions::splitReductions) so that there are enough threads.
  // Sums through a gather of several sources are slow this way (GPT-2's qkv
  // bias grad through the cat of attention's grads: 107 us, where loading the
  // stored cat takes 21 us): lowering stores such bodies when a library call
  // stores them anyway (findExternInputs).
  bool columnSums(sym::Expr items, std::optional<int64_t> work) const {
    for (BufferId id : kernel_.buffers)
      if (!reducesColumns(program_.buffers[id].loops)) return false;
    std::optional<int64_t> outputs = hintedNumel({items}); // symbolic: as lowering planned it
    return outputs && (*outputs >= 2048 || (work && *work <= 256));
  }

  bool isWritten(BufferId id) const {
    return std::find(kernel_.buffers.begin(), kernel_.buffers.end(), id) != kernel_.buffers.end();
  }

  // The memory this kernel writes (the roots of its buffers), found once.
  const std::set<BufferId>& writtenRoots() {
    if (!writtenRoots_) {
      writtenRoots_.emplace();
      for (BufferId id : kernel_.buffers) writtenRoots_->insert(root(id));
    }
    return *writtenRoots_;
  }

  // The index variables of a buffer's dims of size 1 are 0; its outer ones are the row's.
  void bindOuter(const Loops& l, const LoopShape& shape, std::string& lines,
                 const std::string& indent) {
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) declare(l.vars[k], "0", lines, indent);
    for (size_t k = 0; k < kernel_.outer.size() && k < shape.vars.size(); ++k) {
      declare(shape.vars[k], "kiln_o" + std::to_string(k), lines, indent);
      outerOf_[shape.vars[k]] = k;
    }
  }

  bool atomicScatters() const override { return true; }
  bool erfPolynomials() const override { return true; }

  // In a flat kernel, an index that walks the outer dims in row-major order
  // (stride c of the last dim, c times the last dim's size of the one before,
  // ...) is `base + c * kiln_item`: no division into outer indices, which for
  // symbolic sizes would cost a 64-bit division per element. Other indices
  // (broadcasts, transposes) read the outer indices, which every thread has.
  sym::Expr rewriteIndex(sym::Expr e) override {
    if (group_ != 1 || item_.isNull() || kernel_.outer.empty()) return e;
    std::vector<std::pair<sym::Expr, size_t>> vars;
    for (sym::Expr v : sym::freeSymbols(e))
      if (auto at = outerOf_.find(v); at != outerOf_.end()) vars.emplace_back(v, at->second);
    std::set<size_t> dims; // every outer dim must step the index (else: a broadcast)
    for (auto& [v, k] : vars) dims.insert(k);
    if (dims.size() != kernel_.outer.size()) return e;
    sym::Substitution zeros;
    for (auto& [v, k] : vars) zeros[v] = zero();
    sym::Expr base = sym::substitute(e, zeros);
    size_t last = kernel_.outer.size() - 1;
    sym::Expr c = zero();
    for (auto& [v, k] : vars)
      if (k == last) {
        sym::Substitution one = zeros;
        one[v] = zero() + 1;
        c = sym::substitute(e, one) - base;
      }
    if (c.asInteger() == 0) return e;
    sym::Expr linear = base;
    for (auto& [v, k] : vars) {
      sym::Expr stride = c;
      for (size_t j = k + 1; j < kernel_.outer.size(); ++j) stride = stride * kernel_.outer[j];
      linear = linear + stride * v;
    }
    return linear == e ? base + c * item_ : e;
  }

  // The outer dims of a buffer's index variables (for rewriteIndex), and its size-1 ones as 0.
  sym::Substitution mapOuter(const Loops& l) {
    sym::Substitution units = unitsToZero(l);
    LoopShape shape = withoutUnitDims(l);
    for (size_t k = 0; k < kernel_.outer.size() && k < shape.vars.size(); ++k)
      outerOf_[shape.vars[k]] = k;
    return units;
  }

  // The offset `base` when `index` is base + kiln_item: consecutive items, consecutive elements.
  std::optional<sym::Expr> contiguousBase(sym::Expr index, const sym::Substitution& units) {
    sym::Expr at = rewriteIndex(sym::substitute(index, units));
    sym::Expr base = sym::substitute(at, {{item_, zero()}});
    if (at != base + item_) return std::nullopt;
    return base;
  }

  // The offset `base` when `index` is base + the last outer index, base free of
  // outer indices: a row-broadcast operand (a bias), whose elements follow the
  // items of a vector that lies within one row.
  std::optional<sym::Expr> rowBase(sym::Expr index, const sym::Substitution& units) {
    sym::Expr at = sym::substitute(index, units);
    std::optional<sym::Expr> last;
    for (sym::Expr v : sym::freeSymbols(at)) {
      auto o = outerOf_.find(v);
      if (o == outerOf_.end()) continue;
      if (o->second + 1 != kernel_.outer.size() || last) return std::nullopt;
      last = v;
    }
    if (!last) return std::nullopt;
    sym::Expr base = sym::substitute(at, {{*last, zero()}});
    if (at != base + *last) return std::nullopt;
    return base;
  }

  // A load of the vector path: its elements at base + kiln_item, or (a row's
  // broadcast operand) at base + the row position of the vector's first item.
  struct VectorLoad {
    const ScalarNode* node;
    sym::Expr base;
    bool perRow;
  };

  // The loads of `s` that always run (not under a `where`, not indirect) as
  // `find` places them.
  template <class Find>
  void vectorLoads(const Scalar& s, const sym::Substitution& units, bool perRow, Find find,
                   std::vector<VectorLoad>& out) {
    if (s->kind == ScalarKind::Where) {
      vectorLoads(s->args[0], units, perRow, find, out);
      return;
    }
    if (s->kind == ScalarKind::Load && s->indirect.empty() && !registers_.count(s->buffer) &&
        !isLocal(s->buffer))
      if (auto base = find(s->index, units)) out.push_back({s.get(), *base, perRow});
    for (const Scalar& a : s->args) vectorLoads(a, units, perRow, find, out);
  }

  // A kernel's 16-byte accesses (a flat kernel's, a columns kernel's): per
  // member, the loads whose elements follow the items (base + kiln_item) or,
  // where a vector lies within a row, the row's position (a broadcast
  // operand: base + the last outer index); and its store where it follows
  // the items.
  struct VectorAccess {
    BufferId buffer;
    sym::Expr base;
  };
  struct VectorPlan {
    std::vector<std::vector<VectorLoad>> loads;   // per member
    std::vector<std::optional<sym::Expr>> stores; // per member
    std::vector<VectorAccess> accesses;
    bool rowAligned = false; // a vector's items share a row
  };

  // The plan over the kernel's pointwise members, `lanes_` set to 16 bytes of
  // the widest element they move; null (lanes_ 1) when none moves by vectors.
  std::optional<VectorPlan> planVectors(int lanes = 0) {
    VectorPlan plan;
    size_t widest = 0;
    auto contiguous = [&](sym::Expr i, const sym::Substitution& u) { return contiguousBase(i, u); };
    for (BufferId id : kernel_.buffers) {
      const Buffer& b = program_.buffers[id];
      plan.loads.emplace_back();
      plan.stores.emplace_back();
      if (b.loops.reduce != ReduceOp::None) continue; // a columns kernel's sums
      sym::Substitution units = mapOuter(b.loops);
      vectorLoads(b.loops.body, units, false, contiguous, plan.loads.back());
      for (const VectorLoad& v : plan.loads.back()) {
        plan.accesses.push_back({v.node->buffer, v.base});
        widest = std::max(widest, elementSize(program_.buffers[v.node->buffer].layout.dtype));
      }
      if (!isLocal(id)) plan.stores.back() = contiguousBase(storeIndex(b), units);
      if (plan.stores.back()) {
        plan.accesses.push_back({id, *plan.stores.back()});
        widest = std::max(widest, elementSize(b.layout.dtype));
      }
    }
    if (plan.accesses.empty() || widest > 8) return std::nullopt;
    lanes_ = lanes ? lanes : static_cast<int>(16 / widest);
    auto lastRange = kernel_.outer.back().asInteger();
    plan.rowAligned = lastRange && *lastRange % lanes_ == 0;
    if (plan.rowAligned) { // a vector lies within a row: broadcast operands load as vectors too
      auto perRow = [&](sym::Expr i, const sym::Substitution& u) -> std::optional<sym::Expr> {
        if (contiguousBase(i, u)) return std::nullopt; // already a vector of items
        return rowBase(i, u);
      };
      for (size_t m = 0; m < kernel_.buffers.size(); ++m) {
        const Loops& l = program_.buffers[kernel_.buffers[m]].loops;
        if (l.reduce != ReduceOp::None) continue;
        std::vector<VectorLoad> found;
        vectorLoads(l.body, mapOuter(l), true, perRow, found);
        for (const VectorLoad& v : found) {
          if (elementSize(program_.buffers[v.node->buffer].layout.dtype) > widest) continue;
          plan.accesses.push_back({v.node->buffer, v.base});
          plan.loads[m].push_back(v);
        }
      }
    }
    return plan;
  }

  // Whether every 16-byte access of the plan is aligned (C++ statements setting kiln_aligned).
  std::string alignmentChecks(const VectorPlan& plan, const std::string& indent) {
    std::string text =
        indent + "bool kiln_aligned = true; // every 16-byte access of the vector path\n";
    for (const VectorAccess& a : plan.accesses) {
      buffers_.insert(a.buffer);
      text += indent + "kiln_aligned = kiln_aligned && " +
              alignedAt(a.buffer, a.base, vectorBytes(a.buffer)) + ";\n";
    }
    return text;
  }

  size_t vectorBytes(BufferId id) const {
    return elementSize(program_.buffers[id].layout.dtype) * static_cast<size_t>(lanes_);
  }

  // Member m's `lanes_` items from item `at` (C++): its vector loads into
  // register arrays, each item's value, and its store. The items' outer
  // indices are kiln_p0.. (the last one + the item's lane) where the plan's
  // vectors lie within a row, else unflattened from the item. `checked`: the
  // accesses move 16 bytes only where kiln_aligned says so, else element by
  // element (a columns kernel); else they always do (a flat kernel's vector
  // loop runs only where they are aligned). Each item's value is kept in the
  // array kiln_s<m> where a later member holds it (local), where it is stored
  // as a vector, or where `keep` asks (a columns kernel's sums read it).
  std::string vectorMember(const VectorPlan& plan, size_t m, const std::string& at,
                           const std::string& inner, bool checked, bool keep) {
    BufferId id = kernel_.buffers[m];
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    std::string lanes = std::to_string(lanes_), text;
    auto access = [&](BufferId buffer, const std::string& array, const std::string& address,
                      bool load) {
      buffers_.insert(buffer);
      std::string word = wordOf(vectorBytes(buffer));
      if (checked)
        return inner + (load ? "kiln_load_vector<" : "kiln_store_vector<") + word + ", " + lanes +
               ">(" + array + ", " + address + ", kiln_aligned);\n";
      return inner + (load ? "*reinterpret_cast<" + word + "*>(" + array +
                                 ") = *reinterpret_cast<const " + word + "*>(" + address + ");\n"
                           : "*reinterpret_cast<" + word + "*>(" + address +
                                 ") = *reinterpret_cast<" + word + "*>(" + array + ");\n");
    };
    std::vector<std::string> arrays; // each load's array: one per (buffer, base)
    std::map<std::pair<BufferId, std::string>, std::string> loaded;
    std::string rowAt = "kiln_p" + std::to_string(kernel_.outer.size() - 1);
    for (size_t k = 0; k < plan.loads[m].size(); ++k) { // after the stores of the buffers before
      auto [node, base, perRow] = plan.loads[m][k];
      BufferId from = node->buffer;
      auto [it, fresh] =
          loaded.emplace(std::make_pair(from, sym::toString(base) + (perRow ? " per row" : "")),
                         "kiln_l" + std::to_string(m) + "_" + std::to_string(k));
      arrays.push_back(it->second);
      if (!fresh) continue;
      text += inner + "__align__(16) " + storageType(program_.buffers[from].layout.dtype) + " " +
              it->second + "[" + lanes + "];\n";
      text += access(from, it->second,
                     pointer(from) + " + (" + index(base) + ") + " + (perRow ? rowAt : at), true);
    }
    std::string out = "kiln_s" + std::to_string(m);
    const std::optional<sym::Expr>& store = plan.stores[m];
    bool held = isLocal(id) || keep || store; // in `out`
    if (held)
      text +=
          inner + "__align__(16) " + storageType(b.layout.dtype) + " " + out + "[" + lanes + "];\n";
    for (int u = 0; u < lanes_; ++u) {
      text += inner + "{\n";
      std::string lane = inner + "  ";
      for (size_t p = 0; p < m; ++p)
        if (isLocal(kernel_.buffers[p]))
          hold(kernel_.buffers[p], "kiln_s" + std::to_string(p) + "[" + std::to_string(u) + "]");
      text += lane + "const " + ix_ + " kiln_item = " + at + " + " + std::to_string(u) + ";\n";
      if (plan.rowAligned) { // the vector's items share a row: its outer indices, the last one + u
        for (size_t k = 0; k < kernel_.outer.size(); ++k)
          text += lane + "const " + ix_ + " kiln_o" + std::to_string(k) + " = kiln_p" +
                  std::to_string(k) +
                  (k + 1 == kernel_.outer.size() ? " + " + std::to_string(u) : std::string()) +
                  ";\n";
      } else {
        text += unflatten("kiln_item", lane);
      }
      for (size_t k = 0; k < plan.loads[m].size(); ++k) {
        const ScalarNode* node = plan.loads[m][k].node;
        DType stored = program_.buffers[node->buffer].layout.dtype;
        replaced_[node] = stored == DType::BFloat16
                              ? "kiln_b2f_item(" + arrays[k] + ", " + std::to_string(u) + ")"
                              : fromStorage(stored, arrays[k] + "[" + std::to_string(u) + "]");
      }
      std::string lines;
      bindOuter(l, withoutUnitDims(l), lines, lane);
      Block block(lane);
      std::string value = storedBody(b, block);
      text += lines + block.lines;
      std::string slot = out + "[" + std::to_string(u) + "]";
      if (held) text += lane + slot + " = " + value + ";\n";
      if (!store && !isLocal(id))
        text += lane + pointer(id) + "[" + index(storeIndex(b)) + "] = " + (held ? slot : value) +
                ";\n";
      for (const VectorLoad& v : plan.loads[m]) replaced_.erase(v.node);
      text += inner + "}\n";
    }
    if (store) text += access(id, out, pointer(id) + " + (" + index(*store) + ") + " + at, false);
    return text;
  }

  // A flat kernel's 128-bit path: each thread takes `lanes_` consecutive items,
  // loading and storing the elements that follow the items (base + kiln_item)
  // as one 16-byte access, the rest element by element. Where every such
  // access is aligned in any run (trustedAlignment) and the vectors cover
  // every item, that is the whole kernel (`scalarStart` kNoScalarLoop);
  // otherwise it runs where a check at run time (once per launch) finds them
  // aligned, and the scalar loop finishes the items (all of them, where not).
  std::string vectorized(sym::Expr items, std::string& scalarStart, runtime::Launch& launch) {
    std::optional<VectorPlan> plan = planVectors();
    if (!plan) return "";
    std::string lanes = std::to_string(lanes_), indent = "  ", text;
    auto count = items.asInteger();
    bool whole = count && *count % lanes_ == 0 && trustedAlignment(*plan, launch);
    if (whole) {
      text = indent + "const " + ix_ + " kiln_vitems = " + std::to_string(*count / lanes_) + ";\n";
    } else {
      text = alignmentChecks(*plan, indent);
      text += indent + "const " + ix_ + " kiln_vitems = kiln_aligned ? (" + index(items) + ") / " +
              lanes + " : 0;\n";
    }
    text += indent + "for (" + ix_ + " kiln_v = (" + ix_ + ")blockIdx.x * " +
            std::to_string(threads_) + " + threadIdx.x; kiln_v < kiln_vitems; kiln_v += (" + ix_ +
            ")gridDim.x * " + std::to_string(threads_) + ") {\n";
    std::string inner = indent + "  ";
    if (plan->rowAligned) text += unflatten("kiln_v * " + lanes, inner, "kiln_p");
    for (size_t m = 0; m < kernel_.buffers.size(); ++m)
      text += vectorMember(*plan, m, "kiln_v * " + lanes, inner, false, false);
    text += indent + "}\n";
    for (BufferId id : kernel_.buffers) registers_.erase(id); // the scalar loop holds its own
    scalarStart = whole ? kNoScalarLoop : "kiln_vitems * " + lanes + " + ";
    return text;
  }

  // Whether the plan's 16-byte accesses are aligned in every run: their
  // offsets static multiples of the vector, no write into another buffer's
  // memory (needsTwin). The runtime then checks them per launch (Launch::aligned)
  // and gives a misaligned input an aligned copy; the kernel takes them as aligned.
  bool trustedAlignment(const VectorPlan& plan, runtime::Launch& launch) {
    std::vector<runtime::AlignedAccess> accesses;
    for (const VectorAccess& a : plan.accesses) {
      uint32_t element =
          static_cast<uint32_t>(elementSize(program_.buffers[a.buffer].layout.dtype));
      runtime::AlignedAccess access{static_cast<int32_t>(a.buffer), a.base, element,
                                    static_cast<uint32_t>(vectorBytes(a.buffer))};
      if (std::find(accesses.begin(), accesses.end(), access) == accesses.end())
        accesses.push_back(access);
    }
    if (accesses.empty() || needsTwin(program_, accesses)) return false;
    launch.aligned = std::move(accesses);
    return true;
  }

  static constexpr const char* kNoScalarLoop = "none";

  // The unsigned type of `bytes` bytes (a vector access's word).
  static std::string wordOf(size_t bytes) {
    return bytes == 16  ? "uint4"
           : bytes == 8 ? "uint2"
           : bytes == 4 ? "unsigned"
           : bytes == 2 ? "unsigned short"
                        : "unsigned char";
  }

  // Whether the address of element `base` of buffer `id` is a multiple of `bytes` (C++).
  std::string alignedAt(BufferId id, sym::Expr base, size_t bytes) {
    return "reinterpret_cast<unsigned long long>(" + pointer(id) + " + (" + index(base) + ")) % " +
           std::to_string(bytes) + " == 0";
  }

  std::string vectorWord(BufferId id, int lanes) const {
    return wordOf(elementSize(program_.buffers[id].layout.dtype) * static_cast<size_t>(lanes));
  }

  // A persistent row's reduction whose reduced expression a later buffer of
  // the row computes again (softmax's exp(x - max), layer_norm's x + r) keeps
  // each value in a register array, which the later buffer reads instead.
  void planRowReuse() {
    size_t rank = kernel_.outer.size();
    for (size_t p = 0; p < kernel_.buffers.size(); ++p) {
      const Loops& pl = program_.buffers[kernel_.buffers[p]].loops;
      LoopShape ps = withoutUnitDims(pl);
      RowInner in = rowInner(pl);
      if (ps.vars.size() < rank || in.vars.empty()) continue;
      for (size_t r = 0; r < p; ++r) {
        BufferId rid = kernel_.buffers[r];
        const Loops& rl = program_.buffers[rid].loops;
        if (rl.reduce == ReduceOp::None || rl.reductionRanges != in.ranges || opCount(rl.body) < 3)
          continue;
        LoopShape rs = withoutUnitDims(rl);
        std::unordered_map<sym::Expr, sym::Expr> map = unitsToZero(rl);
        for (size_t k = 0; k < rank && k < rs.vars.size(); ++k) map.emplace(rs.vars[k], ps.vars[k]);
        for (size_t k = 0; k < in.vars.size(); ++k) map.emplace(rl.reductionVars[k], in.vars[k]);
        std::vector<const ScalarNode*> found;
        findAll(pl.body, codegen::substitute(rl.body, map), unitsToZero(pl), found);
        if (found.empty()) continue;
        auto [it, fresh] = rowKeeps_.emplace(rid, "kiln_e" + std::to_string(rid));
        if (fresh)
          rowDecls_ += valueType(rl.body->dtype) + " " + it->second + "[" +
                       std::to_string(rowSlots()) + "];\n";
        for (const ScalarNode* f : found) replaced_[f] = it->second + "[kiln_slot]";
      }
    }
  }

  // A persistent row's vectors per thread.
  int vectorsPerThread() const {
    int64_t vectors = rowExtent_ / rowLanes_;
    return static_cast<int>((vectors + group_ - 1) / group_);
  }

  // A persistent row's register array length: its positions per thread on either path.
  int rowSlots() const { return std::max(perThread_, rowLanes_ * vectorsPerThread()); }

  // A row buffer's inner loop: its variables past the outer dims, and its size-1 ones as 0.
  struct RowInner {
    std::vector<sym::Expr> vars;
    Shape ranges;
    sym::Substitution units;
  };
  RowInner rowInner(const Loops& l) {
    RowInner in{l.reductionVars, l.reductionRanges, mapOuter(l)};
    if (l.reduce == ReduceOp::None) {
      LoopShape shape = withoutUnitDims(l);
      size_t rank = std::min(kernel_.outer.size(), shape.vars.size());
      in.vars.assign(shape.vars.begin() + static_cast<std::ptrdiff_t>(rank), shape.vars.end());
      in.ranges.assign(shape.ranges.begin() + static_cast<std::ptrdiff_t>(rank),
                       shape.ranges.end());
    }
    return in;
  }

  // The offset `base` when `index` is base + the row position (its inner
  // variables flattened row-major), base free of them.
  std::optional<sym::Expr> rowContiguousBase(sym::Expr index, const RowInner& in) {
    sym::Expr at = sym::substitute(index, in.units);
    sym::Substitution zeros;
    sym::Expr position = zero();
    for (size_t k = 0; k < in.vars.size(); ++k) {
      zeros[in.vars[k]] = zero();
      position = position * in.ranges[k] + in.vars[k];
    }
    sym::Expr base = sym::substitute(at, zeros);
    if (in.vars.empty() || at != base + position) return std::nullopt;
    return base;
  }

  // The positions [0, L) of a 1-d row where `condition` holds, when it holds
  // exactly there (position <= C: a cat's or a pad's first piece), else null.
  std::optional<int64_t> positionBound(const Scalar& condition, const RowInner& in) const {
    if (condition->kind != ScalarKind::IndexOf || in.vars.size() != 1) return std::nullopt;
    sym::Expr c = sym::substitute(condition->index, in.units);
    if (c.kind() != sym::Kind::Le) return std::nullopt;
    sym::Expr d = c.terms()[0].expr - c.terms()[1].expr; // d <= 0
    sym::Expr v = in.vars[0];
    int64_t coefficient = 0;
    if (d == v) {
      coefficient = 1;
    } else if (d.kind() == sym::Kind::Sum && d.terms().size() == 1 && d.terms()[0].expr == v) {
      coefficient = d.terms()[0].coeff;
    }
    if (coefficient <= 0) return std::nullopt;
    int64_t constant = d.kind() == sym::Kind::Sum ? d.constant() : 0; // k v + c <= 0
    if (constant > 0) return int64_t{0};
    return -constant / coefficient + 1;
  }

  // The loads of `s` under a `where` whose condition holds on the row's first
  // positions alone (positionBound), with that bound: on those positions they
  // run whatever the other elements do.
  template <class Find>
  void guardedLoads(const Scalar& s, const RowInner& in, Find find,
                    std::vector<std::pair<VectorLoad, int64_t>>& out) {
    if (s->kind == ScalarKind::Where) {
      if (std::optional<int64_t> bound = positionBound(s->args[0], in)) {
        std::vector<VectorLoad> loads;
        vectorLoads(s->args[1], in.units, false, find, loads);
        for (const VectorLoad& load : loads) out.push_back({load, *bound});
      }
      return;
    }
    for (const Scalar& a : s->args) guardedLoads(a, in, find, out);
  }

  // Row kernels' 16-byte path: per buffer, the loads (and the store) at
  // base + the row position become one access per `rowLanes_` positions when
  // the row's extent is static, and every such access is aligned in every
  // row: its address in row 0 and its step from row to row (a multiple of the
  // lanes), both checked by the runtime per launch where not known here.
  // A looped row whose extent is no multiple of the lanes ends with its last
  // positions one by one (GPT-2's 50257 logits a row); a persistent row's
  // must be one. Returns what the runtime checks (none: no vector path); where
  // a check fails it runs the kernel's twin without the path (Launch::unaligned).
  std::vector<runtime::AlignedAccess> rowVectorPath() {
    rowVectors_.assign(kernel_.buffers.size(), RowVectors{});
    std::optional<int64_t> extent = commonRowExtent();
    if (!extent) return {};
    size_t widest = 0;
    std::vector<std::vector<VectorLoad>> loads(kernel_.buffers.size());
    std::vector<std::vector<std::pair<VectorLoad, int64_t>>> guarded(kernel_.buffers.size());
    std::vector<std::optional<sym::Expr>> stores(kernel_.buffers.size());
    for (size_t m = 0; m < kernel_.buffers.size(); ++m) {
      const Buffer& b = program_.buffers[kernel_.buffers[m]];
      RowInner in = rowInner(b.loops);
      auto contiguous = [&](sym::Expr i, const sym::Substitution&) {
        return rowContiguousBase(i, in);
      };
      vectorLoads(b.loops.body, in.units, false, contiguous, loads[m]);
      if (perThread_ == 0) guardedLoads(b.loops.body, in, contiguous, guarded[m]);
      for (const VectorLoad& v : loads[m])
        widest = std::max(widest, elementSize(program_.buffers[v.node->buffer].layout.dtype));
      for (const auto& [v, bound] : guarded[m])
        widest = std::max(widest, elementSize(program_.buffers[v.node->buffer].layout.dtype));
      bool local = isLocal(kernel_.buffers[m]);
      if (b.loops.reduce == ReduceOp::None && !local)
        stores[m] = rowContiguousBase(storeIndex(b), in);
      if (stores[m]) widest = std::max(widest, elementSize(b.layout.dtype));
    }
    if (widest == 0 || widest > 8) return {};
    int lanes = static_cast<int>(16 / widest);
    if (*extent % lanes != 0 && perThread_ > 0) return {};
    // A guarded load joins the vectors when its bound leaves out less than a
    // vector (a padded row's last positions: GPT-2's logits grad, 50257 of 50264):
    // the vectors stop before the bound, and the rest of the row runs one by one.
    int64_t vectorEnd = *extent / lanes * lanes;
    for (auto& byBuffer : guarded) {
      std::vector<std::pair<VectorLoad, int64_t>> taken;
      for (const auto& g : byBuffer)
        if (*extent - g.second < lanes) {
          taken.push_back(g);
          vectorEnd = std::min(vectorEnd, g.second / lanes * lanes);
        }
      byBuffer = std::move(taken);
    }
    std::vector<runtime::AlignedAccess> checks;
    // The access's checks (its row-0 address, symbolic steps between rows), or null
    // when some row may be unaligned.
    auto aligned = [&](BufferId id,
                       sym::Expr base) -> std::optional<std::vector<runtime::AlignedAccess>> {
      sym::Substitution rowZero;
      for (sym::Expr v : sym::freeSymbols(base))
        if (outerOf_.count(v)) rowZero[v] = zero();
      sym::Expr first = sym::substitute(base, rowZero), affine = first;
      uint32_t element = static_cast<uint32_t>(elementSize(program_.buffers[id].layout.dtype));
      uint32_t bytes = element * static_cast<uint32_t>(lanes);
      std::vector<runtime::AlignedAccess> access{{static_cast<int32_t>(id), first, element, bytes}};
      for (auto& [v, zeroed] : rowZero) {
        sym::Substitution one = rowZero;
        one[v] = zero() + 1;
        sym::Expr step = sym::substitute(base, one) - first;
        auto known = step.asInteger();
        if (known && *known % lanes != 0) return std::nullopt;
        if (!known) access.push_back({-1, step, element, bytes});
        affine = affine + step * v;
      }
      if (affine != base) return std::nullopt;
      return access;
    };
    auto add = [&](const std::vector<runtime::AlignedAccess>& access) {
      for (const runtime::AlignedAccess& a : access)
        if (std::find(checks.begin(), checks.end(), a) == checks.end()) checks.push_back(a);
    };
    for (size_t m = 0; m < kernel_.buffers.size(); ++m) {
      mapOuter(program_.buffers[kernel_.buffers[m]].loops);
      for (const auto& [v, bound] : guarded[m]) loads[m].push_back(v);
      for (const VectorLoad& v : loads[m])
        if (auto access = aligned(v.node->buffer, v.base)) {
          add(*access);
          rowVectors_[m].loads.push_back(v);
        }
      if (stores[m])
        if (auto access = aligned(kernel_.buffers[m], *stores[m])) {
          add(*access);
          rowVectors_[m].store = stores[m];
        }
    }
    if (checks.empty()) return {};
    rowLanes_ = lanes;
    rowExtent_ = *extent;
    rowVectorEnd_ = vectorEnd;
    return checks;
  }

  // The bytes of an element of the row as the kernel stores it: the last buffer
  // that stores whole rows (softmax's or layer_norm's result); 0 if none does.
  size_t storedRowElement() const {
    for (auto it = kernel_.buffers.rbegin(); it != kernel_.buffers.rend(); ++it) {
      const Buffer& b = program_.buffers[*it];
      if (b.loops.reduce != ReduceOp::None || isLocal(*it)) continue;
      LoopShape shape = withoutUnitDims(b.loops);
      if (shape.ranges.size() > kernel_.outer.size()) return elementSize(b.layout.dtype);
    }
    return 0;
  }

  // The one static inner extent every buffer of this row kernel runs over
  // (buffers of one element per row aside); null if they differ or one is symbolic.
  std::optional<int64_t> commonRowExtent() const {
    std::optional<Shape> common;
    for (BufferId id : kernel_.buffers) {
      const Loops& l = program_.buffers[id].loops;
      Shape inner = l.reductionRanges;
      if (l.reduce == ReduceOp::None) {
        LoopShape shape = withoutUnitDims(l);
        size_t rank = std::min(kernel_.outer.size(), shape.ranges.size());
        inner.assign(shape.ranges.begin() + static_cast<std::ptrdiff_t>(rank), shape.ranges.end());
      }
      if (inner.empty()) continue;
      if (common && *common != inner) return std::nullopt;
      common = inner;
    }
    if (!common) return std::nullopt;
    int64_t w = 1;
    for (sym::Expr r : *common) {
      auto v = r.asInteger();
      if (!v) return std::nullopt;
      w *= *v;
    }
    return w;
  }

  // Elements per thread when the row's extent is static and small enough to
  // keep in registers; else 0. With 16-byte loads a block per row keeps its
  // elements too: re-reading them from L1 is faster only for element-by-element
  // loads (bench/README, gpu: "CUDA emitter choices").
  int persistentRow() const {
    std::optional<int64_t> w = commonRowExtent();
    if (!w) return 0;
    int64_t per = (*w + group_ - 1) / group_;
    return per >= 1 && per <= 32 ? static_cast<int>(per) : 0;
  }

  // The outer indices of a flat position, named <prefix>0, <prefix>1, ...
  std::string unflatten(const std::string& flat, const std::string& indent,
                        const std::string& prefix = "kiln_o") {
    size_t rank = kernel_.outer.size();
    std::string lines = indent + ix_ + " kiln_rest = " + flat + ";\n";
    for (size_t k = rank; k-- > 0;) {
      std::string r = index(kernel_.outer[k]);
      lines += indent + "const " + ix_ + " " + prefix + std::to_string(k) + " = " +
               (k == 0 ? std::string("kiln_rest") : "kiln_rest % " + r) + ";\n";
      if (k > 0) lines += indent + "kiln_rest /= " + r + ";\n";
    }
    return lines;
  }

  // A buffer of a flat kernel: its element at the thread's outer index.
  std::string flatMember(BufferId id, const std::string& indent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    if (!isLocal(id)) buffers_.insert(id);
    if (l.scatter) return scatter(id, indent);
    std::string lines = indent + "// " + b.name + "\n";
    bindOuter(l, withoutUnitDims(l), lines, indent);
    Block block(indent);
    std::string value = storedBody(b, block);
    return lines + block.lines + storeOrHold(id, value, "kiln_r" + std::to_string(id), indent);
  }

  // The work of one position of a row loop: lines after `block`'s, given
  // where the position's value is stored ("" for a reduction).
  using PositionBody = std::function<std::string(Block& block, const std::string& storeTo)>;

  // A loop of the group's threads over a row buffer's inner positions
  // (`ranges` flattened, binding `vars`). A kernel with a vector path walks it by vectors
  // (vectorAccess: 16-byte accesses), a looped row's last positions past the vectors one by
  // one; its twin for unaligned memory (Launch::unaligned) walks it one by one.
  std::string rowLoop(size_t member, const std::vector<sym::Expr>& vars, const Shape& ranges,
                      const std::string& storeTo, const std::string& indent,
                      const PositionBody& body) {
    if (rowLanes_ == 1) return rowLoopText(member, vars, ranges, storeTo, indent, body, false);
    std::string vector = rowLoopText(member, vars, ranges, storeTo, indent, body, true);
    if (rowVectorEnd_ < rowExtent_) // looped rows only
      vector += rowLoopText(member, vars, ranges, storeTo, indent, body, false, rowVectorEnd_);
    return vector;
  }

  // The positions from `from` on (vector: in 16-byte accesses; else one by one).
  std::string rowLoopText(size_t member, const std::vector<sym::Expr>& vars, const Shape& ranges,
                          const std::string& storeTo, std::string indent, const PositionBody& body,
                          bool vector, int64_t from = 0) {
    std::string lines, g = std::to_string(group_), close = indent + "}\n";
    std::string lanes = std::to_string(rowLanes_);
    const RowVectors& v = rowVectors_[member];
    std::string storeSlot = storeTo, storeArray;
    for (size_t k = 0; k < vars.size(); ++k) { // before the vector loads: their cache keys
      declared_.insert(vars[k]);
      innerOf_[vars[k]] = k;
    }
    if (vector) { // kiln_jv: the thread's vector; kiln_u: its element
      std::string count = std::to_string(rowVectorEnd_ / rowLanes_);
      if (perThread_ > 0) {
        bool whole =
            rowExtent_ / rowLanes_ % group_ == 0; // every thread's every vector is in the row
        lines = indent + "#pragma unroll\n" + indent + "for (int kiln_t = 0; kiln_t < " +
                std::to_string(vectorsPerThread()) + "; ++kiln_t) " +
                (whole ? "{ const " + ix_ + " kiln_jv = kiln_lane + kiln_t * " + g + ";\n"
                       : "if (const " + ix_ + " kiln_jv = kiln_lane + kiln_t * " + g +
                             "; kiln_jv < " + count + ") {\n");
      } else {
        lines = indent + "for (" + ix_ + " kiln_jv = kiln_lane; kiln_jv < " + count +
                "; kiln_jv += " + g + ") {\n";
      }
      indent += "  ";
      std::map<std::pair<BufferId, std::string>, std::string> arrays;
      for (const VectorLoad& load : v.loads) {
        if (perThread_ > 0 && inRowCache(*load.node)) continue; // read from registers
        BufferId from = load.node->buffer;
        auto [it, fresh] = arrays.emplace(std::make_pair(from, sym::toString(load.base)),
                                          "kiln_l" + std::to_string(nextArray_));
        if (fresh) {
          ++nextArray_;
          lines += indent + storageType(program_.buffers[from].layout.dtype) + " " + it->second +
                   "[" + lanes + "];\n" +
                   vectorAccess(it->second, from, load.base, /*load=*/true, indent);
        }
        vectorElement_[load.node] = it->second + "[kiln_u]";
      }
      if (v.store) {
        storeArray = "kiln_s" + std::to_string(nextArray_++);
        lines += indent + storageType(program_.buffers[kernel_.buffers[member]].layout.dtype) +
                 " " + storeArray + "[" + lanes + "];\n";
      }
      lines += indent + "#pragma unroll\n" + indent + "for (int kiln_u = 0; kiln_u < " + lanes +
               "; ++kiln_u) {\n";
      indent += "  ";
      lines += indent + "const " + ix_ + " kiln_j = kiln_jv * " + lanes + " + kiln_u;\n";
      if (perThread_ > 0)
        lines += indent + "const int kiln_slot = kiln_t * " + lanes + " + kiln_u;\n";
      if (v.store) storeSlot = storeArray + "[kiln_u]";
    } else if (perThread_ > 0) { // a static row: unrolled, so cached elements stay in registers
      bool whole = *commonRowExtent() % group_ == 0;
      lines = indent + "#pragma unroll\n" + indent + "for (int kiln_t = 0; kiln_t < " +
              std::to_string(perThread_) + "; ++kiln_t) " +
              (whole ? "{ const " + ix_ + " kiln_j = kiln_lane + kiln_t * " + g + ";\n"
                     : "if (const " + ix_ + " kiln_j = kiln_lane + kiln_t * " + g + "; kiln_j < " +
                           numelText(ranges) + ") {\n");
      indent += "  ";
      lines += indent + "const int kiln_slot = kiln_t;\n";
    } else {
      std::string start = from ? std::to_string(from) + " + kiln_lane" : "kiln_lane";
      lines = indent + "for (" + ix_ + " kiln_j = " + start + "; kiln_j < " + numelText(ranges) +
              "; kiln_j += " + g + ") {\n";
      indent += "  ";
    }
    if (!vars.empty()) lines += indent + ix_ + " kiln_jrest = kiln_j;\n";
    for (size_t k = vars.size(); k-- > 0;) {
      std::string r = index(ranges[k]);
      lines += indent + "const int64_t " + sym::toString(vars[k]) + " = " +
               (k == 0 ? std::string("kiln_jrest") : "kiln_jrest % " + r) + ";\n";
      if (k > 0) lines += indent + "kiln_jrest /= " + r + ";\n";
    }
    inRowLoop_ = true;
    Block block(indent);
    std::string tail = body(block, storeSlot);
    lines += block.lines + tail;
    if (vector) {
      for (const VectorLoad& load : v.loads) vectorElement_.erase(load.node);
      indent.resize(indent.size() - 2);
      lines += indent + "}\n";
      if (v.store)
        lines += vectorAccess(storeArray, kernel_.buffers[member], *v.store, /*load=*/false, indent);
    }
    return lines + close;
  }

  // Vector kiln_jv of a row (`lanes` elements from `base`) between `array` and buffer `id`:
  // one 16-byte access (the runtime checked its alignment: rowVectorPath).
  std::string vectorAccess(const std::string& array, BufferId id, sym::Expr base, bool load,
                           const std::string& indent) {
    std::string word = vectorWord(id, rowLanes_);
    std::string at =
        pointer(id) + " + (" + index(base) + ") + kiln_jv * " + std::to_string(rowLanes_);
    return indent +
           (load ? "*reinterpret_cast<" + word + "*>(" + array + ") = *reinterpret_cast<const " +
                       word + "*>(" + at + ");"
                 : "*reinterpret_cast<" + word + "*>(" + at + ") = *reinterpret_cast<" + word +
                       "*>(" + array + ");") +
           "\n";
  }

  // A row kernel of a warp per row whose buffers all run over one static inner extent keeps
  // what it loads from memory in registers (element kiln_t of a per-thread
  // array): a later buffer of the row reading the same element (softmax's
  // three passes over x, layer_norm's over x + r) reads the register, so the
  // row crosses memory once. Only loads every thread makes (not under a
  // `where`) of memory the kernel does not write.
  std::string cachedLoad(const ScalarNode& n, const std::string& loaded, bool lazy) override {
    std::string element = loaded;
    if (auto v = vectorElement_.find(&n); v != vectorElement_.end())
      element = fromStorage(program_.buffers[n.buffer].layout.dtype, v->second);
    std::optional<std::string> key = lazy || !inRowLoop_ ? std::nullopt : rowCacheKey(n);
    if (!key) return element;
    auto [it, fresh] = cached_.emplace(*key, "kiln_c" + std::to_string(cached_.size()));
    std::string slot = it->second + "[kiln_slot]";
    if (!fresh) return slot;
    if (cacheDeclared_.insert(it->second).second) {
      DType t = program_.buffers[n.buffer].layout.dtype;
      rowDecls_ += valueType(t) + " " + it->second + "[" + std::to_string(rowSlots()) + "];\n";
    }
    return "(" + slot + " = " + element + ")";
  }

  // The register array's key of a load a persistent row keeps (its buffer and
  // its index over canonical row positions); null for loads it does not keep.
  std::optional<std::string> rowCacheKey(const ScalarNode& n) {
    if (perThread_ == 0 || writtenRoots().count(root(n.buffer))) return std::nullopt;
    sym::Substitution canonical;
    for (sym::Expr v : sym::freeSymbols(n.index)) {
      if (auto o = outerOf_.find(v); o != outerOf_.end())
        canonical[v] = canonicalVar("kiln_co", o->second);
      else if (auto i = innerOf_.find(v); i != innerOf_.end())
        canonical[v] = canonicalVar("kiln_ci", i->second);
      else if (!isSizeSymbol(v))
        return std::nullopt; // a variable of no row position
    }
    return std::to_string(n.buffer) + ":" + sym::toString(sym::substitute(n.index, canonical));
  }

  bool inRowCache(const ScalarNode& n) {
    std::optional<std::string> key = rowCacheKey(n);
    return key && cached_.count(*key);
  }

  bool isSizeSymbol(sym::Expr v) const { return !declared_.count(v); } // not a loop variable

  sym::Expr canonicalVar(const std::string& prefix, size_t k) {
    sym::SymbolTable& table = zero().table();
    std::string name = prefix + std::to_string(k);
    auto known = table.lookup(name);
    return known ? *known : table.declare(name, std::nullopt, sym::Range::size());
  }

  // A buffer of a row kernel: pointwise over its dims past the outer ones, or a reduction.
  std::string rowMember(size_t member, std::string indent) {
    BufferId id = kernel_.buffers[member];
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    bool local = isLocal(id);
    if (!local) buffers_.insert(id);
    LoopShape shape = withoutUnitDims(l);
    std::string lines = indent + "// " + b.name + "\n";
    bindOuter(l, shape, lines, indent);
    sym::Expr store = storeIndex(b);
    if (l.reduce == ReduceOp::None) {
      size_t rank = std::min(kernel_.outer.size(), shape.vars.size());
      std::vector<sym::Expr> vars(shape.vars.begin() + static_cast<std::ptrdiff_t>(rank),
                                  shape.vars.end());
      Shape ranges(shape.ranges.begin() + static_cast<std::ptrdiff_t>(rank), shape.ranges.end());
      auto element = [&](Block& block, const std::string& storeTo) {
        std::string value = storedBody(b, block);
        return block.indent + storeTo + " = " + value + ";\n";
      };
      std::string target = pointer(id) + "[" + index(store) + "]";
      if (!vars.empty()) return lines + rowLoop(member, vars, ranges, target, indent, element);
      // One element per row: every thread computes it and holds it (later
      // buffers of the row read the register), the first stores it.
      Block block(indent);
      std::string name = "kiln_r" + std::to_string(id);
      std::string value = storedBody(b, block);
      lines += block.lines + indent + "const " + storageType(b.layout.dtype) + " " + name + " = " +
               value + ";\n";
      hold(id, name);
      return lines + indent + "if (kiln_lane == 0) " + target + " = " + name + ";\n";
    }
    return lines + reduction(member, store, indent, local);
  }

  // TODO(issue 7): softmax over rows not kept in registers (GPT-2's 50257-long
  // vocabulary rows, 0.93 ms) reads the row twice, for its max and for its sum of
  // exp(x - max). A one-pass online max/sum per element measured slower on the
  // H100 (1.25 ms: the branch and the exp on the running max keep loads from
  // overlapping); a chunked form (a chunk's max, then one rescale and the
  // chunk's exps) is the next thing to measure. (Its grad, a padded row, reads
  // by vectors up to the pad: guardedLoads, 748 -> 688 us in GPT-2's step.)
  std::string reduction(size_t member, sym::Expr store, std::string indent, bool local) {
    BufferId id = kernel_.buffers[member];
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    std::string acc = "kiln_acc" + std::to_string(id), type = valueType(l.accumulator), lines;
    bool arg = l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin;
    ReduceText text = reduceText(l);
    const std::string &init = text.init, &combine = text.combine;
    std::string slotType = arg ? "kiln_arg<" + type + ">" : type;
    std::string fn = arg ? "kiln_arg_combine<" + type + ", " +
                               (l.reduce == ReduceOp::ArgMax ? "true" : "false") + ">"
                         : "[](" + type + " a, " + type + " b) { return static_cast<" + type +
                               ">(" + combine + "); }";
    if (group_ > 32)
      shared_.push_back("__shared__ " + slotType + " " + acc + "_slots[" +
                        std::to_string(threads_ / 32) + "];\n");
    std::string slots = group_ > 32 ? acc + "_slots" : "(" + slotType + "*)0";
    lines += indent + (arg ? slotType + " " + acc + " = {0, -1};\n"
                           : type + " " + acc + " = " + init + ";\n");
    auto keeps = rowKeeps_.find(id);
    auto element = [&](Block& block, const std::string&) {
      std::string value = emit(l.body, block, false);
      std::string kept = keeps == rowKeeps_.end()
                             ? ""
                             : block.indent + keeps->second + "[kiln_slot] = " + value + ";\n";
      std::string v = convert(l.body->dtype, l.accumulator, value);
      if (arg)
        return kept + block.indent + acc + " = " + fn + "(" + acc + ", " + slotType + "{" + v +
               ", kiln_j});\n";
      return kept + block.indent + "{ const " + type + " a = " + acc + ", b = " + v + "; " + acc +
             " = static_cast<" + type + ">(" + combine + "); }\n";
    };
    lines += rowLoop(member, l.reductionVars, l.reductionRanges, "", indent, element);
    lines += indent + acc + " = kiln_group_reduce<" + std::to_string(group_) + ">(" + acc + ", " +
             fn + ", " + slots + ");\n";
    std::string result = arg ? acc + ".at" : acc;
    DType resultType = arg ? DType::Int64 : l.accumulator;
    if (!local)
      lines += indent + "if (kiln_lane == 0) " + pointer(id) + "[" + index(store) +
               "] = " + stored(b.layout.dtype, resultType, result) + ";\n";
    registers_[id] = {result, resultType};
    return lines;
  }

  int threads_ = 256;
  int group_ = 1; // threads per row (1: a flat kernel)
  std::optional<std::set<BufferId>> writtenRoots_;
  std::string ix_ = "int64_t"; // the loops' index type
  int perThread_ = 0;          // a persistent row's elements per thread (0: not persistent)
  struct RowVectors {          // a row buffer's accesses of the vector path
    std::vector<VectorLoad> loads;
    std::optional<sym::Expr> store;
  };
  std::vector<RowVectors> rowVectors_; // per buffer of the kernel
  int rowLanes_ = 1;                   // positions per vector of a row kernel (1: no vector path)
  std::unordered_map<const ScalarNode*, std::string> vectorElement_; // a load -> its vector element
  int64_t rowExtent_ = 0;                    // the row's static extent (with a vector path)
  int64_t rowVectorEnd_ = 0;                 // the positions the vectors cover: the rest one by one
  std::map<BufferId, std::string> rowKeeps_; // a reduction -> its register array of values
  std::set<std::string> cacheDeclared_;
  int nextArray_ = 0;
  int nextRest_ = 0;                              // unflattenVars' temporaries
  bool inRowLoop_ = false;                        // emitting inside a row's inner loop
  std::unordered_map<sym::Expr, size_t> innerOf_; // an inner index variable -> its position
  std::map<std::string, std::string> cached_;     // (buffer, canonical index) -> register array
  std::string rowDecls_;                          // the register arrays, declared per row
  std::set<BufferId> mayAlias_; // inputs a written buffer may take over: read without __restrict__
  int lanes_ = 1;                                 // items per thread in a flat kernel's vector path
  sym::Expr item_;                                // flat kernels: kiln_item
  std::unordered_map<sym::Expr, size_t> outerOf_; // a buffer's index variable -> its outer dim
  std::vector<std::string> shared_;
  bool elementsOnly_ = false; // a row kernel's twin without the 16-byte path
};

} // namespace

const std::string& cudaPrelude() {
  static const std::string prelude = detail::kernelPrelude(true) + kGroupReduce;
  return prelude;
}

CudaSource emitCuda(const Program& program, const Schedule& schedule) {
  CudaSource out;
  out.prelude = cudaPrelude();
  std::ostringstream code;
  code << "// Generated by kiln's CUDA emitter.\n" << out.prelude;
  KernelFunctions functions;
  auto addFunction = [&](const std::string& name, const std::string& text, runtime::Launch launch) {
    std::ostringstream unit;
    out.kernels.push_back(functions.add(name, text, unit));
    code << unit.str();
    if (out.kernels.back() == name) out.units.push_back(unit.str()); // a function of its own
    out.launches.push_back(std::move(launch));
  };
  std::vector<std::pair<size_t, std::set<BufferId>>> twins; // kernels with a 16-byte path
  out.inPlace = inPlaceCandidates(program, schedule);
  for (size_t k = 0; k < schedule.kernels.size(); ++k) {
    std::string name = "kiln_kernel_" + std::to_string(k);
    runtime::Launch launch;
    std::set<BufferId> mayAlias; // inputs a written buffer of this kernel may take over
    for (auto [written, input] : out.inPlace)
      if (std::count(schedule.kernels[k].buffers.begin(), schedule.kernels[k].buffers.end(),
                     written))
        mayAlias.insert(input);
    std::string text =
        CudaKernelWriter(program, schedule.kernels[k], out.symbols, mayAlias).write(name, launch);
    addFunction(name, text, std::move(launch));
    if (needsTwin(program, out.launches.back().aligned)) // after the schedule's kernels
      twins.push_back({k, mayAlias});
  }
  for (auto& [k, mayAlias] : twins) {
    std::string name = "kiln_kernel_" + std::to_string(k) + "_unaligned";
    runtime::Launch launch;
    std::string text = CudaKernelWriter(program, schedule.kernels[k], out.symbols, mayAlias,
                                        /*elementsOnly=*/true)
                           .write(name, launch);
    out.launches[k].unaligned = static_cast<int32_t>(out.kernels.size());
    addFunction(name, text, std::move(launch));
  }
  // Flash attention's kernels, each once, after the schedule's (the plan's
  // extern calls name them).
  std::map<std::string, sym::Expr> flash; // name -> no items: no step launches it itself
  for (const Buffer& b : program.buffers)
    for (const ir::Attr& a : b.call.attrs)
      if (b.kind == BufferKind::Extern && detail::namesFlashKernel(a))
        flash.emplace(std::get<std::string>(a.value), b.layout.storageOffset.table().integer(0));
  if (!flash.empty()) code << detail::flashAttentionSource();
  for (const auto& [name, none] : flash) {
    std::string definition = "\n" + detail::flashAttentionDefinition(name);
    code << definition;
    // A unit each, with the helpers (internal linkage): prebuilt, or compiled by
    // NVRTC on a CPU of its own (attention's backward: 0.05-0.65 s a kernel).
    out.flashUnits.emplace(out.units.size(), name);
    out.units.push_back(detail::flashAttentionUnit(name));
    runtime::Launch launch;
    launch.items = none;
    launch.threads = 128;
    out.kernels.push_back(name);
    out.launches.push_back(std::move(launch));
  }
  out.code = code.str();
  return out;
}

} // namespace kiln::codegen
