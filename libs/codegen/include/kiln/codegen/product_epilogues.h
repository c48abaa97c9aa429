// Graph passes over matrix products for cuBLASLt's epilogues, run on the
// CUDA target's decomposed graph before lowering (before ir::padProducts):
// bias adds moved into the product, and bias grads beside the weight grad's.
#pragma once

#include <optional>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::codegen {

// Whether a node of the graph writes a tensor in place: the passes below then
// leave it as it is, and lowering pairs nothing through them (an epilogue
// computes where the product is, which a mutation between would change).
bool hasMutations(const ir::Graph& graph);

// add(matmul(a, b), bias) (either order, no alpha) with a contiguous
// [..., M, K], a 2-d b, a bias of the result's dtype and shape [N], and the
// product read by that add alone, as reshape(addmm(bias, a as [-1, K], b)):
// cuBLASLt adds the bias in its epilogue (torch's linear), where a kernel of
// its own would read and write the product again (GPT-2's qkv projection:
// 28 us a layer on an H100). The graph is returned as it is when none applies.
ir::Graph biasedProducts(const ir::Graph& graph);

// Whether `gelu` is a tanh GELU of f16/bf16 over a product plus a [N] bias
// (add(matmul, bias), or addmm, maybe reshaped): kept from decomposition on
// CUDA so that lowering can make it the product's epilogue (geluProduct).
bool geluOfABiasedProduct(const ir::Graph& graph, const ir::Node& gelu);

// The addmm whose cuBLASLt epilogue can compute this kept gelu
// (GELU_AUX_BIAS: the gelu as the call's further result, the pre-activation
// as the call's own, which the backward reads): gelu(addmm(bias, a, b)) or
// gelu(reshape(addmm)) of a contiguous product, a [N] bias, no alpha or beta,
// a static inner dim > 0, the gelu contiguous. nullopt when it has none.
std::optional<ir::ValueId> geluProduct(const ir::Graph& graph, ir::ValueId gelu);

// The product whose cuBLASLt epilogue can apply this ReLU (RELU_BIAS, or
// RELU without a bias): relu(p) or relu(reshape(p)) of f32/f16/bf16, p an
// addmm, mm, bmm or matmul of matrices (each operand at least 2-d) of the
// relu's dtype with a static inner dim > 0,
// read by nothing else (`uses`: readers of each value, graph outputs
// counted). The relu's value is then the call's result: the backward of
// relu reads its result, never the pre-activation (a rule reading it would
// be a second use). nullopt when it has none.
std::optional<ir::ValueId> reluProduct(const ir::Graph& graph, ir::ValueId relu,
                                       const std::vector<size_t>& uses);

// The product that can compute a bias grad in its epilogue: for `sum` of a
// contiguous f16/bf16 `dy` [..., N] over every dim but the last (in dy's
// dtype, no keepdim), an mm or 2-d matmul of the same dtype whose first
// operand is dy as an [N, rows] transpose (views of dy: a linear layer's
// weight grad, dy^T @ x). Its epilogue sums that operand's rows, which are
// dy's columns (cuBLASLt's BGRADA/BGRADB). nullopt when the graph has none.
std::optional<ir::ValueId> productSummingRows(const ir::Graph& graph, ir::ValueId sum);

// The graph with each bias grad that productSummingRows pairs with a later
// product moved right after it (where nothing between reads it), so that
// lowering can make the two one library call. Returned as it is when none moves.
ir::Graph biasGradsAfterProducts(const ir::Graph& graph);

} // namespace kiln::codegen
