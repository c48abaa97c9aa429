// Flash attention's kernels (flash_attention.h): which nodes they take, their
// names, and their CUDA source.
#include "flash_attention.h"

#include <set>

#include "kiln/common/error.h"
#include "kiln/ir/attention.h"
#include "kiln/ir/op_registry.h"

namespace kiln::codegen::detail {
namespace {

// Operand positions: sdpa and attention_lse take (query, key, value[, mask]),
// the grads (grad, query, key, value, out, lse).
bool isGrad(const std::string& op) {
  return op == "attention_grad_query" || op == "attention_grad_key_value";
}

const char* kindOf(const std::string& op) {
  if (op == "scaled_dot_product_attention") return "fwd";
  if (op == "attention_lse") return "lse";
  if (op == "attention_grad_query") return "dq";
  return "dkv";
}

} // namespace

// kiln_flash_<kind>_d<E>_<dtype>[_causal]: what flashAttentionDefinition reads back,
// and the prebuilt kernels' names (flashAttentionKernels).
std::string flashKernelName(const char* kind, int64_t embed, bool bf16, bool causal) {
  return std::string("kiln_flash_") + kind + "_d" + std::to_string(embed) +
         (bf16 ? "_bf16" : "_f16") + (causal ? "_causal" : "");
}

namespace {

bool isAttentionCall(const ir::Node& node) {
  return node.kind == ir::NodeKind::Call && isFlashAttentionOp(node.target);
}

// Strides and offset in multiples of `elements` (size-1 dims aside), the last dim dense.
bool denseIn(const ir::TensorMeta& m, int64_t elements) {
  if (m.dim() < 2 || m.dim() > 4 || m.strides.back().asInteger() != int64_t{1}) return false;
  auto multiple = [&](sym::Expr e) {
    std::optional<int64_t> n = e.asInteger();
    return n && *n % elements == 0;
  };
  for (size_t d = 0; d + 1 < m.dim(); ++d)
    if (!multiple(m.strides[d]) && m.sizes[d].asInteger() != int64_t{1}) return false;
  return multiple(m.storageOffset);
}

// A mask cuDNN adds as its bias: bool (made a bias of 0 and -inf by lowering:
// attentionBiases) or the query's dtype, over whole rows of S keys (a multiple
// of 8) dense in their last dim, its other strides in multiples of 8 (16-byte
// rows); its broadcast dims reach cuDNN with stride 0.
bool cudnnBias(const ir::Graph& graph, const ir::Node& node, ir::ValueId mask) {
  const ir::TensorMeta& m = graph.meta(mask);
  const ir::TensorMeta& k = graph.meta(node.inputs[isGrad(node.target) ? 2 : 1]);
  std::optional<int64_t> keys = k.sizes[k.dim() - 2].asInteger();
  if (!keys || *keys % 8 != 0 || m.dim() < 1 || m.dim() > 4) return false;
  if (m.sizes.back().asInteger() != keys) return false;
  if (m.dtype == ir::DType::Bool) return true;
  for (size_t d = 0; d < m.dim(); ++d) {
    std::optional<int64_t> stride = m.strides[d].asInteger();
    bool last = d + 1 == m.dim();
    if (!stride || (last ? *stride != 1 : *stride % 8 != 0 && m.sizes[d].asInteger() != 1))
      return false;
  }
  std::optional<int64_t> offset = m.storageOffset.asInteger();
  return offset && *offset % 8 == 0;
}

// A fused call's operands: half precision, a mask only for cuDNN (`masks`:
// cudnnBias), each of query's dims and dense in its last dim with strides and
// offset in multiples of `elements`, query and key of head size E, value (and
// grad, out) of Ev, both in [least, most] and multiples of `step`, lse dense,
// a positive scale (the forward takes a row's largest score for its largest
// scaled score).
bool fusedOperands(const ir::Graph& graph, const ir::Node& node, int64_t elements, int64_t step,
                   int64_t least, int64_t most, bool sameWidths, bool masks) {
  if (!isAttentionCall(node)) return false;
  bool grad = isGrad(node.target);
  if (std::optional<ir::ValueId> mask = ir::attentionMask(node))
    if (!masks || !cudnnBias(graph, node, *mask)) return false; // the decomposition
  const ir::TensorMeta& q = graph.meta(node.inputs[grad ? 1 : 0]);
  const ir::TensorMeta& v = graph.meta(node.inputs[grad ? 3 : 2]);
  if (q.dtype != ir::DType::BFloat16 && q.dtype != ir::DType::Float16) return false;
  std::optional<int64_t> embed = q.sizes.back().asInteger(), embedV = v.sizes.back().asInteger();
  for (std::optional<int64_t> width : {embed, embedV})
    if (!width || *width % step != 0 || *width < least || *width > most) return false;
  if (sameWidths && embed != embedV) return false;
  for (size_t i = 0; i < (grad ? 5u : 3u); ++i) {
    const ir::TensorMeta& m = graph.meta(node.inputs[i]);
    bool keyWidth = grad ? (i == 1 || i == 2) : i < 2;
    if (m.sizes.back().asInteger() != (keyWidth ? embed : embedV) || m.dim() != q.dim() ||
        !denseIn(m, elements))
      return false;
  }
  if (grad && !graph.meta(node.inputs[5]).isContiguous()) return false;
  if (const ir::AttrValue* scale = node.attr("scale")) {
    const double* real = std::get_if<double>(scale);
    const int64_t* whole = std::get_if<int64_t>(scale);
    if ((real && !(*real > 0)) || (whole && *whole <= 0)) return false;
  }
  return true;
}

} // namespace

bool isFlashAttentionOp(const std::string& op) {
  return op == "scaled_dot_product_attention" || op == "attention_lse" || isGrad(op);
}

bool flashKernelsRun(const ir::Graph& graph, const ir::Node& node) {
  // 32-bit loads: even strides and offset; one head size of 16 to 64.
  return !ir::attentionStream(node) && fusedOperands(graph, node, 2, 16, 16, 64, true, false);
}

bool flashAttentionTakes(const ir::Graph& graph, const ir::Node& node) {
  // cuDNN's: 16-byte aligned rows, head sizes in multiples of 8 up to 128 (every
  // architecture it runs fused attention on takes those, forward and backward).
  return flashKernelsRun(graph, node) || fusedOperands(graph, node, 8, 8, 8, 128, false, true);
}

// 4 warps of 16 * T rows: T = 2 in `forward`, 1 in the grads (the kernels' source).
int64_t flashAttentionBlockRows(const ir::Node& node) {
  return node.target == "scaled_dot_product_attention" || node.target == "attention_lse" ? 128
                                                                                          : 64;
}

std::string flashAttentionKernel(const ir::Graph& graph, const ir::Node& node) {
  const ir::TensorMeta& q = graph.meta(node.inputs[isGrad(node.target) ? 1 : 0]);
  const ir::AttrValue* causal = node.attr("is_causal");
  return flashKernelName(kindOf(node.target), *q.sizes.back().asInteger(),
                         q.dtype == ir::DType::BFloat16, causal && std::get<bool>(*causal));
}

bool namesFlashKernel(const ir::Attr& attr) {
  return attr.name == "kernel" || attr.name == "kv_kernel" || attr.name == "delta_kernel";
}

std::string flashAttentionDeltaKernel(const ir::Graph& graph, const ir::Node& node) {
  const ir::TensorMeta& q = graph.meta(node.inputs[1]);
  return flashKernelName("delta", *q.sizes.back().asInteger(), q.dtype == ir::DType::BFloat16,
                         false);
}

std::string flashAttentionDefinition(const std::string& kernel) {
  // kiln_flash_<kind>_d<E>_<dtype>[_causal], kind fwd, lse, dq, dkv or delta
  size_t kindEnd = kernel.find("_d", 11);
  if (kernel.rfind("kiln_flash_", 0) != 0 || kindEnd == std::string::npos)
    throw Error(ErrorCode::Internal, "codegen: not a flash attention kernel: " + kernel);
  std::string kind = kernel.substr(11, kindEnd - 11);
  int embed = std::stoi(kernel.substr(kindEnd + 2));
  bool bf16 = kernel.find("_bf16") != std::string::npos;
  bool causal = kernel.find("_causal") != std::string::npos;
  std::string flags = std::to_string(embed) + ", " + (bf16 ? "true" : "false") + ", " +
                      (causal ? "true" : "false");
  if (kind == "delta")
    return "extern \"C\" __global__ void __launch_bounds__(128) " + kernel +
           "(KILN_FLASH_DELTA_PARAMS) {\n  kiln_flash::row_delta<" + std::to_string(embed) + ", " +
           (bf16 ? "true" : "false") + ">(KILN_FLASH_DELTA_ARGS);\n}\n";
  std::string body = kind == "fwd"   ? "forward<" + flags + ", true>"
                     : kind == "lse" ? "forward<" + flags + ", false>"
                     : kind == "dq"  ? "grad_query<" + flags + ">"
                                     : "grad_key_value<" + flags + ">";
  // Blocks an SM keeps (registers capped to fit them): the kernels are latency-bound, and
  // those counts spill at most a few words outside the steps' loop (ptxas -v, sm_90).
  const char* blocks = kind == "fwd" ? "2" : kind == "dkv" ? "3" : "4";
  return "extern \"C\" __global__ void __launch_bounds__(128, " + std::string(blocks) + ") " + kernel +
         "(KILN_FLASH_PARAMS) {\n  kiln_flash::" + body + "(KILN_FLASH_ARGS);\n}\n";
}

const std::string& flashAttentionSource() {
  // Guarded: each kernel's unit carries it (its helpers have internal linkage),
  // and a text of several units keeps the first.
  static const std::string source = "\n#ifndef KILN_FLASH_HELPERS\n#define KILN_FLASH_HELPERS"
                                    R"(
/* Flash attention (FlashAttention-2's algorithm) on tensor cores. A block of
   4 warps takes 16 * T rows a warp (T = 2 for the forward, 1 for the grads)
   and steps over the other side's rows 64 at a time through shared memory,
   the next step's rows copied (cp.async) while this step's are used: products
   by mma.sync m16n8k16 with f32 accumulation, operands from shared memory by
   ldmatrix, the softmax online in registers (scores in log2 units). Only the
   steps that cross the causal diagonal or the last row mask elements; blocks
   with the most steps start first. */
#define KILN_FLASH_PARAMS                                                                   \
  const uint16_t* __restrict__ g, const uint16_t* __restrict__ q,                           \
      const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,                       \
      const float* __restrict__ lse, const float* __restrict__ delta,                       \
      uint16_t* __restrict__ out, float* __restrict__ out_lse, int64_t heads, int64_t L,    \
      int64_t S, int64_t gb0, int64_t gb1, int64_t grow, int64_t qb0, int64_t qb1,          \
      int64_t qrow, int64_t kb0, int64_t kb1, int64_t krow, int64_t vb0, int64_t vb1,       \
      int64_t vrow, int64_t ob0, int64_t ob1, int64_t orow, float scale
#define KILN_FLASH_ARGS                                                                     \
  g, q, k, v, lse, delta, out, out_lse, heads, L, S, gb0, gb1, grow, qb0, qb1, qrow, kb0,   \
      kb1, krow, vb0, vb1, vrow, ob0, ob1, orow, scale
#define KILN_FLASH_DELTA_PARAMS                                                             \
  const uint16_t* __restrict__ g, const uint16_t* __restrict__ o, float* __restrict__ delta,  \
      int64_t heads, int64_t L, int64_t gb0, int64_t gb1, int64_t grow, int64_t ob0,          \
      int64_t ob1, int64_t orow
#define KILN_FLASH_DELTA_ARGS g, o, delta, heads, L, gb0, gb1, grow, ob0, ob1, orow
namespace kiln_flash {
constexpr int kWarps = 4;
constexpr int kStep = 64; /* the other side's rows a step takes; a shared tile's rows */
constexpr float kLog2e = 1.4426950408889634f;
KILN_FN float minus_infinity() { return -__int_as_float(0x7f800000); }

/* 2^x by the special function unit alone: exp2f would rescale subnormal
   results, which are zeros next to a softmax row's largest term. */
KILN_FN float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <bool BF16> KILN_FN uint16_t narrow(float x) { return BF16 ? kiln_f2b(x) : kiln_f2h(x); }
template <bool BF16> KILN_FN float widen(uint16_t x) { return BF16 ? kiln_b2f(x) : kiln_h2f(x); }
template <bool BF16> KILN_FN uint32_t pack(float lo, float hi) {
  return (uint32_t)narrow<BF16>(lo) | ((uint32_t)narrow<BF16>(hi) << 16);
}
KILN_FN uint32_t word(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

/* c (16x8, f32) += a (16x16, rows) * b (16x8, columns): a warp's mma. */
template <bool BF16> KILN_FN void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if (BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

KILN_FN unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

/* Asynchronous copies to shared memory (cp.async), `bytes` of them read:
   0 fills zeros. A group is committed per pipeline stage. */
KILN_FN void copy16(void* to, const void* from, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(to)),
               "l"(from), "r"(bytes));
}
KILN_FN void copy4(void* to, const void* from, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(to)),
               "l"(from), "r"(bytes));
}
KILN_FN void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> KILN_FN void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Moves a [.., rows, D] operand to the block's batch entry (b0, b1); whether
   its rows may then be copied 16 bytes at a time. */
KILN_FN bool enter(const uint16_t* __restrict__& x, int64_t b0, int64_t b1, int64_t stride0,
                   int64_t stride1, int64_t row) {
  x += b0 * stride0 + b1 * stride1;
  return reinterpret_cast<unsigned long long>(x) % 16 == 0 && row % 8 == 0;
}

/* The block's first own row (its batch entry is blockIdx.x). Blocks start in
   blockIdx.y order; with a causal mask the rows with the most steps go first:
   the last queries (LAST_FIRST) or the first keys. */
template <int ROWS, bool CAUSAL, bool LAST_FIRST> KILN_FN int64_t first_own_row() {
  const int64_t y = CAUSAL && LAST_FIRST ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  return y * ROWS;
}

/* The keys rows [m0, m0 + rows) may see: all, or causally up to the last of them. */
template <bool CAUSAL> KILN_FN int64_t keys_seen(int64_t S, int64_t m0, int rows) {
  return CAUSAL ? (S < m0 + rows ? S : m0 + rows) : S;
}

/* Rows [first, first + 64) of a [rows, D] matrix (rows `stride` apart) into a
   shared tile, zeros past `rows`, asynchronously. Tile rows are padded by 8
   elements (144 bytes for D = 64): ldmatrix's 8 row reads fall in different banks. */
template <int D>
KILN_FN void load_tile(uint16_t (*tile)[D + 8], const uint16_t* base, int64_t stride,
                       int64_t first, int64_t rows, bool by16) {
  if (by16) {
    for (int i = threadIdx.x; i < kStep * D / 8; i += 32 * kWarps) {
      const int r = i / (D / 8), c = (i % (D / 8)) * 8;
      const bool in = first + r < rows;
      copy16(&tile[r][c], in ? base + (first + r) * stride + c : base, in ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < kStep * D / 2; i += 32 * kWarps) {
      const int r = i / (D / 2), c = (i % (D / 2)) * 2;
      const bool in = first + r < rows;
      copy4(&tile[r][c], in ? base + (first + r) * stride + c : base, in ? 4 : 0);
    }
  }
}

/* 64 floats of a row statistic from `first` on (zeros past `rows`), asynchronously. */
KILN_FN void load_rows(float* to, const float* from, int64_t first, int64_t rows) {
  for (int i = threadIdx.x; i < kStep; i += 32 * kWarps)
    copy4(to + i, first + i < rows ? from + first + i : from, first + i < rows ? 4 : 0);
}

/* 16 rows of a tile from row0 on as a warp's A fragments, one per 16 columns. */
template <int D> KILN_FN void load_a(uint32_t (*a)[4], const uint16_t (*tile)[D + 8], int row0) {
  const int lane = threadIdx.x % 32, gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int c = kk * 16 + t * 2;
    a[kk][0] = word(&tile[row0 + gr][c]);
    a[kk][1] = word(&tile[row0 + gr + 8][c]);
    a[kk][2] = word(&tile[row0 + gr][c + 8]);
    a[kk][3] = word(&tile[row0 + gr + 8][c + 8]);
  }
}

/* Four 8x8 matrices of a tile into a warp's registers (ldmatrix), each
   lane naming one row: as stored, or transposed. */
KILN_FN void load_matrices(uint32_t* r, const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
KILN_FN void load_matrices_t(uint32_t* r, const uint16_t* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

/* For each of a warp's T row tiles t: s[t] (16 x 64, eight 16x8 C fragments)
   = a[t] (16 x D) * tile^T (tile: 64 x D). The B fragments of columns j, j + 1
   are rows j*8.. of the tile, as stored; each serves the T row tiles. */
template <int D, bool BF16, int T>
KILN_FN void times_rows(float (*s)[kStep / 8][4], const uint32_t (*a)[D / 16][4],
                        const uint16_t (*tile)[D + 8]) {
  const int lane = threadIdx.x % 32, m = lane >> 3, r = lane & 7;
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int j = 0; j < kStep / 8; ++j) s[t][j][0] = s[t][j][1] = s[t][j][2] = s[t][j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < kStep / 8; j += 2) {
      uint32_t b[4];
      load_matrices(b, &tile[(j + (m >> 1)) * 8 + r][kk * 16 + (m & 1) * 8]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        mma<BF16>(s[t][j], a[t][kk], b[0], b[1]);
        mma<BF16>(s[t][j + 1], a[t][kk], b[2], b[3]);
      }
    }
}

/* For each row tile t: acc[t] (16 x D) += p[t] (16 x 64, C fragments, rounded
   to the operands' dtype) * tile (64 x D): the B fragments are the tile's 16
   rows of a step, transposed. */
template <int D, bool BF16, int T>
KILN_FN void times_tile(float (*acc)[D / 8][4], const float (*p)[kStep / 8][4],
                        const uint16_t (*tile)[D + 8]) {
  const int lane = threadIdx.x % 32, m = lane >> 3, r = lane & 7;
#pragma unroll
  for (int kk = 0; kk < kStep / 16; ++kk) {
    uint32_t a[T][4];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      a[t][0] = pack<BF16>(p[t][2 * kk][0], p[t][2 * kk][1]);
      a[t][1] = pack<BF16>(p[t][2 * kk][2], p[t][2 * kk][3]);
      a[t][2] = pack<BF16>(p[t][2 * kk + 1][0], p[t][2 * kk + 1][1]);
      a[t][3] = pack<BF16>(p[t][2 * kk + 1][2], p[t][2 * kk + 1][3]);
    }
#pragma unroll
    for (int d = 0; d < D / 8; d += 2) {
      uint32_t b[4];
      load_matrices_t(b, &tile[kk * 16 + (m & 1) * 8 + r][(d + (m >> 1)) * 8]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        mma<BF16>(acc[t][d], a[t], b[0], b[1]);
        mma<BF16>(acc[t][d + 1], a[t], b[2], b[3]);
      }
    }
  }
}

/* A thread's element (j, e) of a 16 x 64 fragment set: its row (0..15 of the
   tile's) and column (0..63 of the step). */
KILN_FN int row_of(int e) { return ((threadIdx.x % 32) >> 2) + 8 * (e >> 1); }
KILN_FN int col_of(int j, int e) { return j * 8 + (threadIdx.x & 3) * 2 + (e & 1); }

/* f(t, j, e) for each of the thread's elements of a warp's T row tiles of
   16 x kStep accumulators (row 16 * t + row_of(e), column col_of(j, e)). */
template <int T, class F> KILN_FN void each_element(F f) {
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int j = 0; j < kStep / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(t, j, e);
}

/* Whether a step's element at `row`, `col` (relative to the warp's first row
   and the step's first column) is hidden: past the other side's `seen`
   columns, or causally (col > row + diag, diag: the warp's first row less the
   step's first column). */
template <bool CAUSAL> KILN_FN bool hidden(int row, int col, int seen, int diag) {
  return col >= seen || (CAUSAL && col > row + diag);
}

/* A step's `seen` and `diag` (see hidden) for a warp's rows from `row0` and the
   step's columns from `col0` of `count`; clamped to ints. */
KILN_FN int seen_of(int64_t count, int64_t col0) {
  return count - col0 < kStep ? (int)(count - col0) : kStep;
}
KILN_FN int diag_of(int64_t row0, int64_t col0) {
  const int64_t d = row0 - col0;
  return d > kStep ? kStep : d < -2 * kStep ? -2 * kStep : (int)d;
}

/* f(t, h, row) for the rows this thread holds halves h of in each of the warp's
   T row tiles (the warp's rows from `first` on), where row < count. */
template <int T, class F> KILN_FN void each_own_row(int64_t first, int64_t count, F f) {
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = first + 16 * t + row_of(2 * h);
      if (row < count) f(t, h, row);
    }
}

/* A thread's two columns of each 8 of row half h of a 16 x D fragment set,
   times `by`, rounded and stored from `dst` on. */
template <int D, bool BF16> KILN_FN void store_row(uint16_t* dst, const float (*acc)[4], int h, float by) {
  dst += (threadIdx.x & 3) * 2;
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
    *reinterpret_cast<uint32_t*>(dst + d * 8) = pack<BF16>(acc[d][2 * h] * by, acc[d][2 * h + 1] * by);
}

template <int N> KILN_FN void zero(float (*acc)[4]) {
#pragma unroll
  for (int d = 0; d < N; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.f;
}

/* Shared memory of every kernel: two stages of two tiles (a step's operands
   while the next step's arrive), and two stages of row statistics. The
   block's own rows (up to 128) pass through stage 1 before the first step. */
template <int D> struct Tiles {
  uint16_t tile[2][2][kStep][D + 8];
  float rows[2][2][kStep];
};

/* A warp's T row tiles of own operand `o` (T = 1: stage 1's tile o; T = 2: one
   operand, 128 rows over both of stage 1's tiles) as A fragments. */
template <int D, int T> KILN_FN void load_own(uint32_t (*a)[D / 16][4], Tiles<D>& sh, int o) {
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int row = threadIdx.x / 32 * 16 * T + 16 * t;
    load_a<D>(a[t], sh.tile[1][o + row / kStep], row % kStep);
  }
}

/* The pipeline (load(i) copies step i's rows into stage i & 1): before the
   first step, the block's own rows (already asked for, stage 1) and the first
   step's arrive; own() takes the warp's rows of stage 1 into registers, and
   stage 1 is free. */
template <class Load, class Own> KILN_FN void start(Load load, int64_t steps, Own own) {
  if (steps > 0) load(0);
  commit();
  wait_copies<0>();
  __syncthreads();
  own();
  __syncthreads();
}

/* At step i: the next step's rows start coming, this step's are in. */
template <class Load> KILN_FN void next_step(Load load, int64_t i, int64_t steps) {
  if (i + 1 < steps) load(i + 1);
  commit();
  wait_copies<1>(); /* this step's tiles are in */
  __syncthreads();
}

/* out = softmax(q k^T * scale) v for 128 query rows (OUT), and/or each row's
   logsumexp into out_lse (natural log). scale > 0 (flashAttentionTakes), so a
   row's largest score is its largest scaled score. */
template <int D, bool BF16, bool CAUSAL, bool OUT> KILN_FN void forward(KILN_FLASH_PARAMS) {
  constexpr int T = 2, kRows = kWarps * 16 * T;
  __shared__ __align__(16) Tiles<D> sh;
  const int64_t b = blockIdx.x, b0 = b / heads, b1 = b % heads;
  const int64_t m0 = first_own_row<kRows, CAUSAL, true>(), mw = m0 + threadIdx.x / 32 * 16 * T;
  const bool by16 = enter(q, b0, b1, qb0, qb1, qrow) & enter(k, b0, b1, kb0, kb1, krow) &
                    enter(v, b0, b1, vb0, vb1, vrow); /* & : every operand moves */
  const int64_t steps = (keys_seen<CAUSAL>(S, m0, kRows) + kStep - 1) / kStep;
  load_tile<D>(sh.tile[1][0], q, qrow, m0, L, by16);
  load_tile<D>(sh.tile[1][1], q, qrow, m0 + kStep, L, by16);
  commit();
  auto load_step = [&](int64_t i) {
    load_tile<D>(sh.tile[i & 1][0], k, krow, i * kStep, S, by16);
    if (OUT) load_tile<D>(sh.tile[i & 1][1], v, vrow, i * kStep, S, by16);
  };
  uint32_t qa[T][D / 16][4];
  start(load_step, steps, [&] { load_own<D, T>(qa, sh, 0); });
  float o[T][D / 8][4];
#pragma unroll
  for (int t = 0; t < T; ++t) zero<D / 8>(o[t]);
  float top[T][2], sum[T][2]; /* per row: the largest scaled score so far, the sum of exps */
#pragma unroll
  for (int t = 0; t < T; ++t) top[t][0] = top[t][1] = minus_infinity(), sum[t][0] = sum[t][1] = 0.f;
  const float scale2 = scale * kLog2e;
  for (int64_t i = 0; i < steps; ++i) {
    next_step(load_step, i, steps);
    const int64_t n0 = i * kStep;
    if (!CAUSAL || n0 <= mw + 16 * T - 1) { /* some of the warp's rows see a key of the step */
      float s[T][kStep / 8][4];
      times_rows<D, BF16, T>(s, qa, sh.tile[i & 1][0]);
      if (n0 + kStep > S || (CAUSAL && n0 + kStep - 1 > mw)) {
        const int seen = seen_of(S, n0), diag = diag_of(mw, n0);
        each_element<T>([&](int t, int j, int e) {
          if (hidden<CAUSAL>(16 * t + row_of(e), col_of(j, e), seen, diag)) s[t][j][e] = minus_infinity();
        });
      }
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float m = minus_infinity();
#pragma unroll
          for (int j = 0; j < kStep / 8; ++j) m = fmaxf(m, fmaxf(s[t][j][2 * h], s[t][j][2 * h + 1]));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
          const float now = fmaxf(top[t][h], m * scale2);
          const float base = now == minus_infinity() ? 0.f : now; /* no key yet: nothing to rescale */
          const float keep = exp2_ftz(top[t][h] - base);
          float add = 0.f;
#pragma unroll
          for (int j = 0; j < kStep / 8; ++j)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e)
              add += (s[t][j][e] = exp2_ftz(fmaf(s[t][j][e], scale2, -base)));
          add += __shfl_xor_sync(0xffffffffu, add, 1);
          add += __shfl_xor_sync(0xffffffffu, add, 2);
          sum[t][h] = sum[t][h] * keep + add;
          top[t][h] = now;
#pragma unroll
          for (int d = 0; d < D / 8; ++d) o[t][d][2 * h] *= keep, o[t][d][2 * h + 1] *= keep;
        }
      if (OUT) times_tile<D, BF16, T>(o, s, sh.tile[i & 1][1]);
    }
    __syncthreads(); /* the next load may overwrite this stage */
  }
  each_own_row<T>(mw, L, [&](int t, int h, int64_t row) {
    if (OUT) /* no keys: zeros, as torch */
      store_row<D, BF16>(out + b0 * ob0 + b1 * ob1 + row * orow, o[t], h,
                         sum[t][h] > 0.f ? 1.f / sum[t][h] : 0.f);
    if (out_lse && (threadIdx.x & 3) == 0) out_lse[b * L + row] = top[t][h] / kLog2e + logf(sum[t][h]);
  });
}

/* dq = dS k for 64 query rows, dS = P * (dO v^T - delta) * scale, P = exp(scores - lse). */
template <int D, bool BF16, bool CAUSAL> KILN_FN void grad_query(KILN_FLASH_PARAMS) {
  constexpr int T = 1, kRows = kWarps * 16 * T;
  __shared__ __align__(16) Tiles<D> sh;
  const int64_t b = blockIdx.x, b0 = b / heads, b1 = b % heads;
  const int64_t m0 = first_own_row<kRows, CAUSAL, true>(), mw = m0 + threadIdx.x / 32 * 16 * T;
  const bool by16 = enter(g, b0, b1, gb0, gb1, grow) & enter(q, b0, b1, qb0, qb1, qrow) &
                    enter(k, b0, b1, kb0, kb1, krow) & enter(v, b0, b1, vb0, vb1, vrow);
  const int64_t steps = (keys_seen<CAUSAL>(S, m0, kRows) + kStep - 1) / kStep;
  load_tile<D>(sh.tile[1][0], q, qrow, m0, L, by16);
  load_tile<D>(sh.tile[1][1], g, grow, m0, L, by16);
  commit();
  auto load_step = [&](int64_t i) {
    load_tile<D>(sh.tile[i & 1][0], k, krow, i * kStep, S, by16);
    load_tile<D>(sh.tile[i & 1][1], v, vrow, i * kStep, S, by16);
  };
  uint32_t qa[T][D / 16][4], ga[T][D / 16][4];
  start(load_step, steps, [&] { load_own<D, T>(qa, sh, 0), load_own<D, T>(ga, sh, 1); });
  float rowLse[T][2], rowDelta[T][2]; /* lse in log2 units */
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = mw + 16 * t + row_of(2 * h);
      rowLse[t][h] = row < L ? lse[b * L + row] * kLog2e : 0.f;
      rowDelta[t][h] = row < L ? delta[b * L + row] : 0.f;
    }
  float dq[T][D / 8][4];
#pragma unroll
  for (int t = 0; t < T; ++t) zero<D / 8>(dq[t]);
  const float scale2 = scale * kLog2e;
  for (int64_t i = 0; i < steps; ++i) {
    next_step(load_step, i, steps);
    const int64_t n0 = i * kStep;
    float s[T][kStep / 8][4], dp[T][kStep / 8][4];
    times_rows<D, BF16, T>(s, qa, sh.tile[i & 1][0]);
    times_rows<D, BF16, T>(dp, ga, sh.tile[i & 1][1]);
    each_element<T>([&](int t, int j, int e) {
      const float p = exp2_ftz(fmaf(s[t][j][e], scale2, -rowLse[t][e >> 1]));
      s[t][j][e] = p * (dp[t][j][e] - rowDelta[t][e >> 1]) * scale;
    });
    if (n0 + kStep > S || (CAUSAL && n0 + kStep - 1 > mw)) {
      const int seen = seen_of(S, n0), diag = diag_of(mw, n0);
      each_element<T>([&](int t, int j, int e) {
        if (hidden<CAUSAL>(16 * t + row_of(e), col_of(j, e), seen, diag)) s[t][j][e] = 0.f;
      });
    }
    times_tile<D, BF16, T>(dq, s, sh.tile[i & 1][0]);
    __syncthreads();
  }
  each_own_row<T>(mw, L, [&](int t, int h, int64_t row) {
    store_row<D, BF16>(out + b0 * ob0 + b1 * ob1 + row * orow, dq[t], h, 1.f);
  });
}

/* [dk, dv] for 64 key rows: dv = P^T dO, dk = dS^T q, over every query row. */
template <int D, bool BF16, bool CAUSAL> KILN_FN void grad_key_value(KILN_FLASH_PARAMS) {
  constexpr int T = 1, kRows = kWarps * 16 * T;
  __shared__ __align__(16) Tiles<D> sh;
  const int64_t b = blockIdx.x, b0 = b / heads, b1 = b % heads;
  const int64_t n0 = first_own_row<kRows, CAUSAL, false>(), nw = n0 + threadIdx.x / 32 * 16 * T;
  const bool by16 = enter(g, b0, b1, gb0, gb1, grow) & enter(q, b0, b1, qb0, qb1, qrow) &
                    enter(k, b0, b1, kb0, kb1, krow) & enter(v, b0, b1, vb0, vb1, vrow);
  const int64_t first = CAUSAL ? n0 : 0; /* causal: queries from the first key on */
  const int64_t steps = first < L ? (L - first + kStep - 1) / kStep : 0;
  load_tile<D>(sh.tile[1][0], k, krow, n0, S, by16);
  load_tile<D>(sh.tile[1][1], v, vrow, n0, S, by16);
  commit();
  auto load_step = [&](int64_t i) {
    const int64_t m0 = first + i * kStep;
    load_tile<D>(sh.tile[i & 1][0], q, qrow, m0, L, by16);
    load_tile<D>(sh.tile[i & 1][1], g, grow, m0, L, by16);
    load_rows(sh.rows[i & 1][0], lse + b * L, m0, L);
    load_rows(sh.rows[i & 1][1], delta + b * L, m0, L);
  };
  uint32_t ka[T][D / 16][4], va[T][D / 16][4];
  start(load_step, steps, [&] { load_own<D, T>(ka, sh, 0), load_own<D, T>(va, sh, 1); });
  float dk[T][D / 8][4], dv[T][D / 8][4];
#pragma unroll
  for (int t = 0; t < T; ++t) zero<D / 8>(dk[t]), zero<D / 8>(dv[t]);
  const float scale2 = scale * kLog2e;
  for (int64_t i = 0; i < steps; ++i) {
    next_step(load_step, i, steps);
    const int64_t m0 = first + i * kStep;
    const float* sl = sh.rows[i & 1][0];
    const float* sd = sh.rows[i & 1][1];
    float st[T][kStep / 8][4], dpt[T][kStep / 8][4]; /* k q^T and v dO^T: keys by queries */
    times_rows<D, BF16, T>(st, ka, sh.tile[i & 1][0]);
    times_rows<D, BF16, T>(dpt, va, sh.tile[i & 1][1]);
    each_element<T>([&](int t, int j, int e) {
      const int c = col_of(j, e);
      const float p = exp2_ftz(fmaf(st[t][j][e], scale2, -sl[c] * kLog2e));
      st[t][j][e] = p;
      dpt[t][j][e] = p * (dpt[t][j][e] - sd[c]) * scale;
    });
    /* hidden: a query past L, or causally a key after the query (row > col + diag) */
    if (m0 + kStep > L || (CAUSAL && nw + 16 * T - 1 > m0)) {
      const int seen = seen_of(L, m0), diag = diag_of(nw, m0);
      each_element<T>([&](int t, int j, int e) {
        const int row = 16 * t + row_of(e), col = col_of(j, e);
        if (col >= seen || (CAUSAL && row + diag > col)) st[t][j][e] = dpt[t][j][e] = 0.f;
      });
    }
    times_tile<D, BF16, T>(dv, st, sh.tile[i & 1][1]);
    times_tile<D, BF16, T>(dk, dpt, sh.tile[i & 1][0]);
    __syncthreads();
  }
  each_own_row<T>(nw, S, [&](int t, int h, int64_t key) {
    uint16_t* dst = out + b0 * ob0 + b1 * ob1 + key * orow;
    store_row<D, BF16>(dst, dk[t], h, 1.f);
    store_row<D, BF16>(dst + D, dv[t], h, 1.f);
  });
}

/* delta: each row's sum of grad * out (f32), which the grads subtract from
   dO v^T; 8 threads a row, 16 rows a block, 4-byte loads. */
template <int D, bool BF16>
KILN_FN void row_delta(const uint16_t* __restrict__ g, const uint16_t* __restrict__ o,
                       float* __restrict__ delta, int64_t heads, int64_t L, int64_t gb0,
                       int64_t gb1, int64_t grow, int64_t ob0, int64_t ob1, int64_t orow) {
  const int64_t b0 = blockIdx.x / heads, b1 = blockIdx.x % heads;
  const int64_t row = (int64_t)blockIdx.y * 16 + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  float sum = 0.f;
  if (row < L) {
    const uint16_t* gr = g + b0 * gb0 + b1 * gb1 + row * grow;
    const uint16_t* orr = o + b0 * ob0 + b1 * ob1 + row * orow;
#pragma unroll
    for (int e = 2 * lane; e < D; e += 16) {
      const uint32_t gw = word(gr + e), ow = word(orr + e);
      sum += widen<BF16>((uint16_t)gw) * widen<BF16>((uint16_t)ow) +
             widen<BF16>((uint16_t)(gw >> 16)) * widen<BF16>((uint16_t)(ow >> 16));
    }
  }
#pragma unroll
  for (int d = 4; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  if (row < L && lane == 0) delta[blockIdx.x * L + row] = sum;
}
} /* namespace kiln_flash */
#endif /* KILN_FLASH_HELPERS */
)";
  return source;
}

std::string flashAttentionUnit(const std::string& kernel) {
  return flashAttentionSource() + "\n" + flashAttentionDefinition(kernel);
}

} // namespace kiln::codegen::detail

namespace kiln::codegen {

std::vector<std::string> flashAttentionKernels() {
  std::vector<std::string> names;
  for (int64_t embed : {16, 32, 48, 64})
    for (bool bf16 : {false, true}) {
      names.push_back(detail::flashKernelName("delta", embed, bf16, false));
      for (const char* kind : {"fwd", "lse", "dq", "dkv"})
        for (bool causal : {false, true})
          names.push_back(detail::flashKernelName(kind, embed, bf16, causal));
    }
  return names;
}

} // namespace kiln::codegen
