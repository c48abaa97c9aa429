#include "cuda_attention.h"

#include <cmath>
#include <cstdint>

#include "kiln/common/error.h"
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

} // namespace

bool isFlashAttention(const std::string& op) {
  return op == "scaled_dot_product_attention" || op == "attention_lse" ||
         op == "attention_grad_query" || op == "attention_grad_key_value";
}

void cudaFlashAttention(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::vector<ir::Attr>& attrs, const Tensor& out,
                        const std::vector<Tensor>& results, CUfunction kernel,
                        const CudaDriver& driver, CUstream stream) {
  bool grad = op == "attention_grad_query" || op == "attention_grad_key_value";
  if (inputs.size() != (grad ? 6u : 3u)) refuse(op, std::to_string(inputs.size()) + " operands");
  const Tensor* g = grad ? &inputs[0] : nullptr;
  const Tensor& q = inputs[grad ? 1 : 0];
  const Tensor& k = inputs[grad ? 2 : 1];
  const Tensor& v = inputs[grad ? 3 : 2];
  size_t rank = q.sizes.size();
  Strides sq = stridesOf(op, q, rank), sk = stridesOf(op, k, rank), sv = stridesOf(op, v, rank);
  Strides sg = g ? stridesOf(op, *g, rank) : Strides{};
  bool rowsOut = op != "attention_lse";
  Strides so = rowsOut ? stridesOf(op, out, rank) : Strides{};
  if (!rowsOut) requireDenseRows(op, out);
  if (results.size() > (op == "scaled_dot_product_attention" ? 1u : 0u))
    refuse(op, std::to_string(results.size()) + " further results");
  const Tensor* rowsLse = rowsOut ? (results.empty() ? nullptr : &results[0]) : &out;
  if (rowsLse && rowsOut) requireDenseRows(op, *rowsLse);
  if (grad) {
    requireDenseRows(op, inputs[4]);
    requireDenseRows(op, inputs[5]);
  }
  int64_t heads = rank >= 3 ? q.sizes[rank - 3] : 1, batch = rank == 4 ? q.sizes[0] : 1;
  int64_t rowsL = q.sizes[rank - 2], rowsS = k.sizes[rank - 2];
  auto scale = static_cast<float>(
      numberAttr(attrs, "scale", 1.0 / std::sqrt(static_cast<double>(q.sizes.back()))));
  auto blockRows = static_cast<int64_t>(numberAttr(attrs, "block_rows", 0));
  if (blockRows <= 0) refuse(op, "the call names no block_rows");
  int64_t rowBlocks =
      ((op == "attention_grad_key_value" ? rowsS : rowsL) + blockRows - 1) / blockRows;
  if (rowBlocks == 0 || batch * heads == 0) return; // nothing to compute
  if (rowBlocks > 65535) refuse(op, "more than 65535 blocks of rows");
  if (batch * heads > INT32_MAX) refuse(op, "more than 2^31 - 1 batch * heads");

  void* gp = g ? g->data : nullptr;
  void *qp = q.data, *kp = k.data, *vp = v.data;
  void* lse = grad ? inputs[4].data : nullptr;
  void* delta = grad ? inputs[5].data : nullptr;
  void* outRows = rowsOut ? out.data : nullptr;
  void* outLse = rowsLse ? rowsLse->data : nullptr;
  int64_t values[] = {heads,     rowsL,     rowsS,    sg.batch0, sg.batch1, sg.row,
                      sq.batch0, sq.batch1, sq.row,   sk.batch0, sk.batch1, sk.row,
                      sv.batch0, sv.batch1, sv.row,   so.batch0, so.batch1, so.row};
  std::vector<void*> args = {&gp, &qp, &kp, &vp, &lse, &delta, &outRows, &outLse};
  for (int64_t& value : values) args.push_back(&value);
  args.push_back(&scale);
  cudaCheck(driver.cuLaunchKernel(kernel, static_cast<unsigned>(batch * heads),
                                  static_cast<unsigned>(rowBlocks), 1, 128, 1, 1, 0, stream,
                                  args.data(), nullptr),
            "cuLaunchKernel");
}

} // namespace kiln::runtime::detail
