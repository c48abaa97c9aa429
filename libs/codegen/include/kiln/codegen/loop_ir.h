// kiln::codegen loop-level IR: what a graph becomes before kernels are emitted.
// Shared by every target (the CPU and CUDA emitters differ only in how they
// print it).
//
// A program is a list of buffers in execution order. Each buffer is one of
//   - an input: a graph placeholder's storage;
//   - computed: a loop nest over `ranges` (symbolic sizes) whose body gives
//     the element at index (i0, i1, ...) as a scalar expression: pointwise;
//     or, with `reductionRanges` and a reduce op, the reduction over
//     (r0, r1, ...) of such an expression;
//   - extern: a call of a library routine (the matmul family; attention on
//     targets that keep it) on earlier buffers.
// Loads name a buffer and a flat element index, an expression over the index
// variables and the graph's size symbols: views are folded into it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/ir/graph.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/expr.h"

namespace kiln::codegen {

using ir::DType;
using ir::Shape;
using BufferId = uint32_t;

enum class ScalarKind {
  Load,     // buffer[index]
  Constant, // a number of the node's dtype
  IndexOf,  // the value of an integer index expression (arange, masks)
  Unary,    // op(arg)
  Binary,   // op(a, b)
  Where,    // args[0] ? args[1] : args[2]; only the chosen branch is evaluated (cat's
            // branches load out of range otherwise)
  Cast,     // arg converted to dtype
  Philox,   // the uniform draw in [0, 1) (f64) of Philox-4x32-10 with key args[0] and
            // counter args[1] (ints, taken as uint64): dropout's stream (kiln/ir/philox.h)
};

struct ScalarNode;
using Scalar = std::shared_ptr<const ScalarNode>;

// One node of a loop body's expression tree; immutable once built.
struct ScalarNode {
  ScalarKind kind = ScalarKind::Constant;
  DType dtype = DType::Float32;
  std::string op;      // Unary and Binary: the op's name ("exp", "add", "maximum", ...)
  BufferId buffer = 0; // Load
  sym::Expr index;     // Load: flat element index; IndexOf: the value
  // Load through loaded values (embedding, gather): `index` also mentions these
  // symbols, each bound to the value of the arg at the same position, which
  // must lie in [0, indirectSizes[k]) (else the load is an index error).
  std::vector<sym::Expr> indirect;
  std::vector<sym::Expr> indirectSizes;
  double number = 0;   // Constant of a floating dtype
  int64_t integer = 0; // Constant of an integral or bool dtype
  std::vector<Scalar> args;
};

Scalar load(DType dtype, BufferId buffer, sym::Expr index);
Scalar indirectLoad(DType dtype, BufferId buffer, sym::Expr index, std::vector<sym::Expr> symbols,
                    std::vector<Scalar> values, std::vector<sym::Expr> sizes);
Scalar constantF(DType dtype, double value);
Scalar constantI(DType dtype, int64_t value);
Scalar indexOf(DType dtype, sym::Expr value);
Scalar unary(std::string op, DType dtype, Scalar arg);
Scalar binary(std::string op, DType dtype, Scalar a, Scalar b);
Scalar where(Scalar condition, Scalar a, Scalar b); // dtype of a (and b)
// arg converted to dtype: arg itself when already of dtype. A value rounded
// to f16/bf16 and converted straight back to the dtype it was computed in is
// that value unrounded: a fused chain of half-precision ops (to_dtype's too)
// keeps its intermediates in f32, as Inductor does (its
// emulate_precision_casts off); what a buffer stores rounds. `foldRoundTrip`
// false keeps the rounding (LowerOptions::emulatePrecisionCasts).
Scalar cast(DType dtype, Scalar arg, bool foldRoundTrip = true);
Scalar philox(Scalar seed, Scalar counter);

// The scalar with index variables replaced (loads' indices and IndexOf values).
Scalar substitute(const Scalar& s, const std::unordered_map<sym::Expr, sym::Expr>& vars);
size_t opCount(const Scalar& s); // nodes in the tree: the cost of recomputing it

enum class ReduceOp { None, Sum, Prod, Max, Min, ArgMax, ArgMin, Any, All };
std::string_view reduceOpName(ReduceOp op);

// A loop nest: pointwise when reduce is None.
struct Loops {
  std::vector<sym::Expr> vars; // i0.. one per range
  Shape ranges;
  std::vector<sym::Expr> reductionVars; // r0..
  Shape reductionRanges;
  ReduceOp reduce = ReduceOp::None;
  DType accumulator = DType::Float32; // the reduction's accumulation dtype
  Scalar body;
  // A scatter (scatter_add; pointwise, in a mutation's alias buffer): each
  // element of the loop nest is added to the buffer's element that this Load
  // of the buffer names, in the buffer dtype's opmath (bool: or), instead of
  // being stored at the loop's own index. Its index goes through loaded values
  // (checked as an indirect load's: out of range is an index error). Two
  // indices that differ outside `scatterDim` never reach the same element:
  // the other loops may run in parallel, the loop over vars[scatterDim] runs
  // in order, so sums are deterministic. `scatterDim` past the vars: no loop
  // in order, every element adds atomically (LowerOptions::unorderedScatter).
  Scalar scatter;
  size_t scatterDim = 0;
  bool atomicScatter() const { return scatter && !vars.empty() && scatterDim >= vars.size(); }
};

struct ExternCall {
  std::string op; // the IR op ("mm", "bmm", "matmul"; see LowerOptions::externOps)
  std::vector<BufferId> inputs;
  std::vector<ir::TensorMeta> inputViews; // each input's layout (views folded)
  std::vector<ir::Attr> attrs;
  // Further results the call writes (ExternResult buffers): a flash attention
  // forward's rows' logsumexp, which attention_lse of the same inputs would give.
  std::vector<BufferId> results;
};

// ExternResult: written by the call of an Extern buffer (ExternCall::results),
// with no step of its own.
enum class BufferKind { Input, Computed, Extern, ExternResult };

struct Buffer {
  BufferKind kind = BufferKind::Computed;
  std::string name;         // buf3, or the placeholder's name
  ir::TensorMeta layout;    // dtype, sizes and strides of what is stored (offset 0)
  uint32_t placeholder = 0; // Input: which graph input
  Loops loops;              // Computed
  ExternCall call;          // Extern
  // A mutation (in-place or out= op): a computed buffer stored into the
  // memory of buffer `aliasOf` (an input, or an earlier buffer) at its
  // layout's offset, instead of memory of its own. Never fused.
  std::optional<BufferId> aliasOf;
};

// A graph output: a view (offset, sizes, strides) of a buffer, or a symbolic
// int (sym_size and the like), returned as a 0-d i64 tensor.
struct Output {
  BufferId buffer = 0;
  ir::TensorMeta view;
  sym::Expr symInt; // non-null: this output is its value
};

// The product of sizes that are all known; null when one is symbolic.
std::optional<int64_t> staticNumel(const Shape& sizes);
// The product with symbols at their hints (what a kernel is planned for); null
// when one is unbacked. Capped at 2^40.
std::optional<int64_t> hintedNumel(const Shape& sizes);

// How far in memory each load of `body` moves when `var` steps by one (null
// where the step is not a constant): how a loop over `var` walks its inputs.
std::vector<std::optional<int64_t>> loadSteps(const Scalar& body, sym::Expr var);

// A computed buffer of one element per index: no reduction, scatter or mutation.
bool isPointwise(const Buffer& buffer);

// The loops' size-1 vars as 0 (outer ones; reduction ones too where asked).
sym::Substitution unitsToZero(const Loops& loops, bool reductionVars = false);

// A reduction across the rows of what it reads (a column sum: bias and
// layer_norm weight grads): some loads move along its last output dim and
// none of those by one element along its last reduction dim, so a thread per
// output reads memory neighbouring threads read, where threads sharing an
// output would read one element each of far-apart rows.
bool reducesColumns(const Loops& loops);

// Where a computed buffer stores the element at its index variables: its
// layout's offset (non-zero for a mutation's view of its target) plus the strides.
sym::Expr storeIndex(const Buffer& buffer);

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Output> outputs;
  // Bias grads lowered as column sums where a product's epilogue could
  // compute them (LowerOptions::biasGradsInKernels): each sum's node in the
  // lowered graph, and the buffer that reads dy (a split sum's partials).
  std::vector<std::pair<ir::ValueId, BufferId>> kernelBiasGrads;
};

// The text form, one buffer per line group:
//   buf2 : f32[s0, 768] = pointwise [s0, 768]
//     exp(load(x, 768*i0 + i1))
std::string print(const Program& program);
std::string print(const Scalar& scalar, const Program& program);

} // namespace kiln::codegen
