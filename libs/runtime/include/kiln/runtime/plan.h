// kiln::runtime::Plan: what a compiled artifact runs, as data. The runtime
// interprets it (no generated host code to trust); the same plan runs from
// Python or a C++ application, for every binding of its symbols that its
// guards admit.
//
// Buffers are numbered: graph inputs (used in place) and the buffers the plan
// allocates, each laid out by its (symbolic) sizes and strides. Steps run in
// order: a kernel of the artifact's library, an extern call (a library
// routine on views of earlier buffers, into a buffer), or freeing a buffer no
// later step reads. The outputs are views of buffers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/sym/eval.h"

namespace kiln::runtime {

// A view of a buffer: sizes, strides and offset counted from its element 0.
// As an output, a non-null `symInt` makes it that value instead (a 0-d i64).
struct View {
  uint32_t buffer = 0;
  ir::TensorMeta meta;
  sym::Expr symInt;
};

struct PlanBuffer {
  std::string name;
  ir::TensorMeta layout;
  int32_t input = -1;   // which graph input it is, or -1: allocated by the plan
  int32_t aliasOf = -1; // >= 0: it is that buffer's memory (a mutation writes it)
  // >= 0: an input buffer whose memory it may take, when the run's caller gave
  // that input up (Allocator::adopt): the step that writes this buffer is the
  // input's last reader and reads it only where it writes, each element before
  // it writes it (a training backward writing a grad over a saved value).
  int32_t reuses = -1;
};

// One step of the plan. Three extern ops the runtime runs itself (the IR's
// data-dependent ops): item and nonzero bind an unbacked symbol (their `symbol`
// attribute) to what the data gives, _assert_scalar checks the binding.
struct Step {
  enum Kind { RunKernel, CallExtern, Free } kind = RunKernel;
  uint32_t kernel = 0; // RunKernel: index into Plan::kernels
  // RunKernel: the buffers it stores into; CallExtern: its further results
  // past `buffer` (scaled_dot_product_attention: the rows' logsumexp, f32 [..., L]).
  std::vector<uint32_t> writes;
  uint32_t buffer = 0; // CallExtern: the result; Free: the buffer freed
  std::string op;      // CallExtern: the IR op
  std::vector<View> inputs;
  std::vector<ir::Attr> attrs;
};

// How a kernel is launched. On the CPU only `buffers` and `symbols` count:
// the positions of the kernel's own buffers and symbol slots, which it finds
// through them (codegen's cpu_emitter.h). On CUDA its parameters, in order:
// a pointer to element 0 of each of `buffers`, the int64 value of each symbol
// slot in `symbols` (indices into Plan::symbols), then an `int*` status word
// it may set (0 ok, 1 integer division by zero, 2 index out of range; only
// when `mayFail`). It covers `items` work items — elements of a pointwise
// kernel, rows of a kernel with reductions — `itemsPerBlock` of them to a
// block of `threads` threads; the kernel's loops are grid-stride, so any grid
// size is correct: the runtime launches ceil(items / itemsPerBlock) blocks
// (capped at 2^31 - 1, and at `waves` times the blocks the device holds at
// once where `waves` is not 0), and none when items is 0.
//
// A row kernel with a 16-byte path takes every access of that path as aligned:
// `aligned` lists them, checked by the runtime per launch. Where one is not,
// `unaligned` is the plan's kernel that runs instead (the same rows element by
// element; two functions, not a branch in one, so that NVRTC compiles them
// apart); a launch without one (-1) reads an aligned copy of each input whose
// memory is not, which mends every access the emitter gives no twin (offsets
// that are static multiples of the vector, no write into another buffer's memory).
struct AlignedAccess {
  int32_t buffer = -1; // the address counts from this buffer's element 0; -1: from 0
  sym::Expr offset;    // elements from there (a step between rows, when buffer is -1)
  uint32_t elementBytes = 1;
  uint32_t bytes = 16; // the alignment (a power of two)
  friend bool operator==(const AlignedAccess& a, const AlignedAccess& b) {
    return a.buffer == b.buffer && a.offset == b.offset && a.elementBytes == b.elementBytes &&
           a.bytes == b.bytes;
  }
};
struct Launch {
  sym::Expr items;
  uint32_t itemsPerBlock = 1;
  uint32_t threads = 128;
  uint32_t sharedBytes = 0; // dynamic shared memory
  std::vector<uint32_t> buffers;
  std::vector<uint32_t> symbols;
  bool mayFail = false;
  std::vector<AlignedAccess> aligned;
  int32_t unaligned = -1; // the kernel run where an access of `aligned` is not; -1: none
  // At most this many waves of blocks (the blocks the device holds at once),
  // each thread looping over more items; 0: one item's worth of blocks each —
  // which a row kernel of a known row count relies on (it takes its row once,
  // without a loop: cuda_emitter.cpp).
  uint32_t waves = 0;
};

// Whether every access of `launch.aligned` is aligned, given the buffers' memory
// (element 0 of each plan buffer) and the run's binding.
bool alignedInRun(const Launch& launch, char* const* buffers, const sym::Binding& binding);

// The alignment of every allocation a run's buffers take (the Allocator gives
// 64 bytes; a given-up input's memory is adopted only when it has this).
constexpr uintptr_t kAligned = 16;

// The bytes of a buffer of `layout` from its element 0 to its last element (at
// least one element's), in the run's binding.
size_t bytesOf(const ir::TensorMeta& layout, const sym::Binding& binding);

// Whether the step binds a symbol from data (item, nonzero): a run waits for it.
bool bindsSymbol(const Step& step);

struct Plan {
  std::vector<ir::Value> inputs; // the graph's placeholders: tensors or symbolic ints
  std::vector<PlanBuffer> buffers;
  std::vector<std::string> kernels; // function names in the library
  std::vector<sym::Expr> symbols;   // kernels' symbol slots, in order
  std::vector<Step> steps;
  std::vector<View> outputs;
  std::vector<Launch> launches; // one per kernel
};

// What a run reads of its plan, worked out once per loaded plan (LoadedArtifact),
// so a run of a static plan sizes nothing before its first step: the bytes of
// each buffer the plan allocates whose layout no symbol decides (0 for inputs,
// aliases and symbolic layouts), how many buffers have each of those sizes, and
// per buffer the output that is all of it (Allocator::allocateOutput).
struct PlanFacts {
  std::vector<size_t> bytes;        // per plan buffer
  std::map<size_t, int> demand;     // size -> how many buffers of it
  std::vector<int32_t> wholeOutput; // per plan buffer: that output's index, or -1
};
PlanFacts planFacts(const Plan& plan);

} // namespace kiln::runtime
