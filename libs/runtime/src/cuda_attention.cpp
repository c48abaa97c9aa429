#include "cuda_attention.h"

#include <cmath>
#include <optional>
#include <cstdint>

#include "kiln/common/error.h"
#include "cudnn_attention.h"
#include "matrix_product.h"

namespace kiln::runtime::detail {
namespace {

[[noreturn]] void refuse(const std::string& op, const std::string& why) {
  throw Error(ErrorCode::Internal, "runtime: flash attention's " + op + ": " + why);
}

// A [b0, b1,] rows, E operand: its batch, batch and row strides (0 for absent dims).
struct Strides {
  int64_t batch0 = 0, batch1 = 0, row = 0;
};

Strides stridesOf(const std::string& op, const Tensor& t, size_t rank) {
  if (t.sizes.size() != rank || rank < 2 || rank > 4) refuse(op, "operands of 2 to 4 dims");
  if (t.strides.back() != 1 && t.sizes.back() != 1) refuse(op, "an operand's last dim is strided");
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) refuse(op, "an operand is not 4-byte aligned");
  Strides s;
  s.row = t.strides[rank - 2];
  if (rank >= 3) s.batch1 = t.strides[rank - 3];
  if (rank == 4) s.batch0 = t.strides[0];
  return s;
}

// lse and delta: [..., L] f32, dense.
void requireDenseRows(const std::string& op, const Tensor& t) {
  int64_t expected = 1;
  for (size_t d = t.sizes.size(); d-- > 0;) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) refuse(op, "row statistics are not dense");
    expected *= t.sizes[d];
  }
}

int64_t elements(const Tensor& t) {
  int64_t n = 1;
  for (int64_t s : t.sizes) n *= s;
  return n;
}

// A dense tensor of `like`'s dtype over `sizes` at `data`.
Tensor denseAt(void* data, const Tensor& like, const std::vector<int64_t>& sizes) {
  return Tensor{like.dtype, data, sizes, contiguousStrides(sizes)};
}

// The [dk, dv] side by side of a [..., S, E + Ev] tensor: its two views.
std::pair<Tensor, Tensor> splitKeyValue(const Tensor& kv, int64_t embed) {
  Tensor dk = kv, dv = kv;
  dk.sizes.back() = embed;
  dv.sizes.back() = kv.sizes.back() - embed;
  dv.data = static_cast<char*>(kv.data) + embed * 2; // half precision
  return {dk, dv};
}

// Launches one of the flash kernels (flash_attention.h's parameters).
struct Launcher {
  const std::string& op;
  const CudaCallContext& ctx;
  int64_t batch, heads, rowsL, rowsS;
  float scale;

  void run(CUfunction kernel, bool keyRows, int64_t blockRows, const Tensor* g, const Tensor& q,
           const Tensor& k, const Tensor& v, const void* lse, const void* delta,
           const Tensor* out, const void* outLse) const {
    size_t rank = q.sizes.size();
    Strides sq = stridesOf(op, q, rank), sk = stridesOf(op, k, rank), sv = stridesOf(op, v, rank);
    Strides sg = g ? stridesOf(op, *g, rank) : Strides{};
    Strides so = out ? stridesOf(op, *out, rank) : Strides{};
    int64_t rowBlocks = ((keyRows ? rowsS : rowsL) + blockRows - 1) / blockRows;
    if (rowBlocks == 0 || batch * heads == 0) return; // nothing to compute
    if (rowBlocks > 65535) refuse(op, "more than 65535 blocks of rows");
    const void* gp = g ? g->data : nullptr;
    const void *qp = q.data, *kp = k.data, *vp = v.data;
    void* outRows = out ? out->data : nullptr;
    int64_t values[] = {heads,     rowsL,     rowsS,    sg.batch0, sg.batch1, sg.row,
                        sq.batch0, sq.batch1, sq.row,   sk.batch0, sk.batch1, sk.row,
                        sv.batch0, sv.batch1, sv.row,   so.batch0, so.batch1, so.row};
    float scaleArg = scale;
    std::vector<void*> args = {&gp, &qp, &kp, &vp, &lse, &delta, &outRows, &outLse};
    for (int64_t& value : values) args.push_back(&value);
    args.push_back(&scaleArg);
    launch(kernel, rowBlocks, args);
  }

  // Each row's sum of g * o into delta [batch * heads, L] (16 rows a block).
  void delta(CUfunction kernel, const Tensor& g, const Tensor& o, void* delta) const {
    size_t rank = g.sizes.size();
    Strides sg = stridesOf(op, g, rank), so = stridesOf(op, o, rank);
    int64_t rowBlocks = (rowsL + 15) / 16;
    if (rowBlocks == 0 || batch * heads == 0) return;
    if (rowBlocks > 65535) refuse(op, "more than 65535 blocks of rows");
    const void *gp = g.data, *outp = o.data;
    int64_t values[] = {heads, rowsL, sg.batch0, sg.batch1, sg.row, so.batch0, so.batch1, so.row};
    std::vector<void*> args = {&gp, &outp, &delta};
    for (int64_t& value : values) args.push_back(&value);
    launch(kernel, rowBlocks, args);
  }

  void launch(CUfunction kernel, int64_t rowBlocks, std::vector<void*>& args) const {
    cudaCheck(ctx.driver.cuLaunchKernel(kernel, static_cast<unsigned>(batch * heads),
                                        static_cast<unsigned>(rowBlocks), 1, 128, 1, 1, 0,
                                        ctx.stream, args.data(), nullptr),
              "cuLaunchKernel");
  }
};

} // namespace

bool isFlashAttention(const std::string& op) {
  return op == "scaled_dot_product_attention" || op == "attention_lse" ||
         op == "attention_grad_query" || op == "attention_grad_key_value";
}

void cudaFlashAttention(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::vector<ir::Attr>& attrs, const Tensor& out,
                        const std::vector<Tensor>& results, const FlashKernels& kernels,
                        const CudaCallContext& context) {
  bool grad = op == "attention_grad_query" || op == "attention_grad_key_value";
  AttentionCall call;
  call.dropout = numberAttr(attrs, "dropout_p", 0.0);
  // The operands, then a mask (cuDNN's bias), then the seed and offset of dropout.
  size_t unmasked = grad ? 6u : 3u, stream = call.dropout > 0 ? 2u : 0u;
  if (inputs.size() != unmasked + stream && inputs.size() != unmasked + 1 + stream)
    refuse(op, std::to_string(inputs.size()) + " operands");
  if (inputs.size() > unmasked + stream) call.bias = &inputs[unmasked];
  if (call.dropout > 0) {
    call.seed = &inputs[inputs.size() - 2];
    call.offset = &inputs[inputs.size() - 1];
  }
  const Tensor* g = grad ? &inputs[0] : nullptr;
  const Tensor& q = inputs[grad ? 1 : 0];
  const Tensor& k = inputs[grad ? 2 : 1];
  const Tensor& v = inputs[grad ? 3 : 2];
  size_t rank = q.sizes.size();
  stridesOf(op, q, rank);
  size_t furtherResults = op == "scaled_dot_product_attention" || op == "attention_grad_query";
  if (results.size() > furtherResults)
    refuse(op, std::to_string(results.size()) + " further results");
  int64_t heads = rank >= 3 ? q.sizes[rank - 3] : 1, batch = rank == 4 ? q.sizes[0] : 1;
  if (batch * heads > INT32_MAX) refuse(op, "more than 2^31 - 1 batch * heads");
  for (const ir::Attr& a : attrs)
    if (const bool* causal = a.name == "is_causal" ? std::get_if<bool>(&a.value) : nullptr)
      call.causal = *causal;
  call.scale = static_cast<float>(
      numberAttr(attrs, "scale", 1.0 / std::sqrt(static_cast<double>(q.sizes.back()))));
  // Our kernels where cuDNN does not take the call: those it names (none with
  // dropout nor for head sizes they lack, flash_attention.h).
  bool named = false;
  for (const ir::Attr& a : attrs) named = named || a.name == "kernel";
  auto ours = [&] {
    if (!named)
      throw Error(ErrorCode::Unsupported,
                  "runtime: " + op + (call.dropout > 0 ? " with dropout" : "") +
                      (call.bias ? " with a mask" : "") + " of head size " +
                      std::to_string(q.sizes.back()) +
                      " runs on cuDNN's fused attention alone, which does not take this call (" +
                      cudnnAttentionRefusal() + ")");
    auto blockRows = static_cast<int64_t>(numberAttr(attrs, "block_rows", 0));
    if (blockRows <= 0) refuse(op, "the call names no block_rows");
    return std::make_pair(
        Launcher{op, context, batch, heads, q.sizes[rank - 2], k.sizes[rank - 2], call.scale},
        blockRows);
  };

  if (!grad) {
    bool rowsOut = op != "attention_lse";
    const Tensor* lse = rowsOut ? (results.empty() ? nullptr : &results[0]) : &out;
    if (lse) requireDenseRows(op, *lse);
    if (rowsOut && cudnnAttentionForward(call, q, k, v, out, lse, context)) return;
    if (!rowsOut && !named) { // the logsumexp alone: cuDNN's forward, its output in scratch
      std::vector<int64_t> sizes = q.sizes;
      sizes.back() = v.sizes.back();
      int64_t bytes = elements(q) / q.sizes.back() * v.sizes.back() * 2;
      Scratch rows(context.allocator, static_cast<size_t>(bytes));
      if (cudnnAttentionForward(call, q, k, v, denseAt(rows.data, q, sizes), lse, context)) return;
    }
    auto [launcher, blockRows] = ours();
    launcher.run(kernels("kernel"), false, blockRows, nullptr, q, k, v, nullptr, nullptr,
                 rowsOut ? &out : nullptr, lse ? lse->data : nullptr);
    return;
  }

  const Tensor& forwardOut = inputs[4];
  const Tensor& lse = inputs[5];
  requireDenseRows(op, lse);
  const Tensor* dq = op == "attention_grad_query" ? &out : nullptr;
  const Tensor* dkv = op == "attention_grad_key_value" ? &out : results.empty() ? nullptr : &results[0];
  {
    // cuDNN computes all three: the grads no call asks for land in scratch.
    std::optional<Scratch> dqScratch, dkvScratch;
    Tensor dqT = dq ? *dq : Tensor{};
    if (!dq) {
      dqScratch.emplace(context.allocator, static_cast<size_t>(elements(q)) * 2);
      dqT = denseAt(dqScratch->data, q, q.sizes);
    }
    Tensor dkvT = dkv ? *dkv : Tensor{};
    if (!dkv) {
      std::vector<int64_t> sizes = k.sizes;
      sizes.back() += v.sizes.back();
      dkvScratch.emplace(context.allocator, static_cast<size_t>(elements(k) + elements(v)) * 2);
      dkvT = denseAt(dkvScratch->data, k, sizes);
    }
    auto [dk, dv] = splitKeyValue(dkvT, k.sizes.back());
    if (cudnnAttentionBackward(call, *g, q, k, v, forwardOut, lse, dqT, dk, dv, context)) return;
  }
  auto [launcher, blockRows] = ours();
  Scratch delta(context.allocator, static_cast<size_t>(batch * heads * q.sizes[rank - 2]) * 4);
  launcher.delta(kernels("delta_kernel"), *g, forwardOut, delta.data);
  if (dq)
    launcher.run(kernels("kernel"), false, blockRows, g, q, k, v, lse.data, delta.data, dq,
                 nullptr);
  if (dkv)
    launcher.run(kernels(dq ? "kv_kernel" : "kernel"), true, blockRows, g, q, k, v, lse.data,
                 delta.data, dkv, nullptr);
}

} // namespace kiln::runtime::detail
