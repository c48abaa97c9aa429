#include "cudnn_attention.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cudnn.h"
#include "kiln/common/error.h"
#include "kiln/common/log.h"

namespace kiln::runtime::detail {
namespace {

// The uids of the tensors a call binds (virtual tensors number from kVirtual).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kMinusInfinity,
  kDout,
  kDq,
  kDk,
  kDv,
  kSeed,
  kOffset,
  kDropoutScale,
  kBias,
  kVirtual = 100
};

cudnnDataType_t dataType(ir::DType t) {
  return t == ir::DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// One operation graph's descriptors, kept while its plan lives.
class GraphBuilder {
public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  const Descriptor& tensor(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                           std::vector<int64_t> strides, bool isVirtual = false) {
    Descriptor& t = keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set(CUDNN_ATTR_TENSOR_STRIDES, strides)
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t{16})
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, isVirtual);
    return t.finalize();
  }

  // An f32 intermediate of these dims, dense.
  const Descriptor& virtualTensor(const std::vector<int64_t>& dims,
                                  cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(nextVirtual_++, type, dims, contiguousStrides(dims), true);
  }

  // A scalar passed by value (its host address goes in the variant pack).
  const Descriptor& scalar(int64_t uid) {
    Descriptor& t = keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_DATA_FLOAT)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, std::vector<int64_t>{1, 1, 1, 1})
        .set(CUDNN_ATTR_TENSOR_STRIDES, std::vector<int64_t>{1, 1, 1, 1})
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t{16})
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, false)
        .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    return t.finalize();
  }

  // The random stream's 0-d i64 seed or offset, in device memory.
  const Descriptor& streamTensor(int64_t uid) {
    return tensor(uid, CUDNN_DATA_INT64, {1, 1, 1, 1}, {1, 1, 1, 1});
  }

  // y: Bernoulli draws of probability `keep` (1 where kept) from cuDNN's
  // Philox stream of the seed and offset, one per element of y's dims.
  void bernoulli(double probability, const Descriptor& seed, const Descriptor& offset,
                 const Descriptor& y) {
    Descriptor& rng = keep(CUDNN_BACKEND_RNG_DESCRIPTOR);
    cudnnRngDistribution_t distribution = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    rng.set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &distribution)
        .set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &probability)
        .finalize();
    Descriptor& op = keep(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RNG_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_RNG_SEED, seed)
        .set(CUDNN_ATTR_OPERATION_RNG_DESC, rng)
        .set(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, offset);
    ops_.push_back(&op.finalize());
  }

  // y = mode(x[, b[, t]]) computed in f32 (GEN_INDEX along `axis`).
  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                 const Descriptor* t, const Descriptor& y, int64_t axis = -1,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT) {
    Descriptor& pw = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, precision);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw.finalize();
    Descriptor& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    float one = 1.0f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    ops_.push_back(&op.finalize());
  }

  // y = reduce(x) over the dims where y has size 1, in f32.
  void reduction(cudnnReduceTensorOp_t mode, const Descriptor& x, const Descriptor& y) {
    Descriptor& r = keep(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .set(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, false)
        .finalize();
    Descriptor& op = keep(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    ops_.push_back(&op.finalize());
  }

  // y: x's elements seen through y's dims and strides (a transpose).
  void reshape(const Descriptor& x, const Descriptor& y) {
    Descriptor& op = keep(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    ops_.push_back(&op.finalize());
  }

  // c = a @ b over the last two dims, accumulated in f32.
  void matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c) {
    Descriptor& m = keep(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize();
    Descriptor& op = keep(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m)
        .set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    ops_.push_back(&op.finalize());
  }

  // The graph's first engine config that finalizes into a plan (heuristics' order).
  // nullopt with `why` when none does.
  std::optional<Descriptor> plan(std::string& why) {
    Descriptor& graph = keep(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops_)
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
        .finalize();
    Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
        .finalize();
    const Cudnn& c = *cudnn();
    int64_t count = 0;
    cudnnCheck(c.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
               "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    cudnnCheck(c.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                          raw.data()),
               "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
    if (count == 0) why = "cuDNN's heuristics offer no engine";
    for (int64_t i = 0; i < count; ++i) {
      try {
        Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i])
            .finalize();
        return plan;
      } catch (const Error& e) {
        why = e.what(); // the last engine's reason
      }
    }
    return std::nullopt;
  }

  int64_t nextVirtual() { return nextVirtual_++; }

private:
  Descriptor& keep(cudnnBackendDescriptorType_t type) {
    kept_.push_back(std::make_unique<Descriptor>(type));
    return *kept_.back();
  }

  cudnnHandle_t handle_;
  std::vector<std::unique_ptr<Descriptor>> kept_;
  std::vector<const Descriptor*> ops_;
  int64_t nextVirtual_ = kVirtual;
};

// A [B, H, rows, E] operand: its dims and strides, and those of its transpose.
struct Layout {
  std::vector<int64_t> dims, strides;
  Layout transposed() const {
    return {{dims[0], dims[1], dims[3], dims[2]}, {strides[0], strides[1], strides[3], strides[2]}};
  }
};

// The four dims of a [B, H, rows, E] tensor (a 3-d one has B = 1, a 2-d one B = H = 1).
Layout layoutOf(const Tensor& t) {
  Layout l{t.sizes, t.strides};
  while (l.dims.size() < 4) {
    l.dims.insert(l.dims.begin(), 1);
    l.strides.insert(l.strides.begin(), l.dims.front() * l.strides.front());
  }
  return l;
}

const std::vector<int64_t> kScalarDims = {1, 1, 1, 1};

// The bias as cuDNN takes it, [B or 1, H or 1, L, S]: the mask's dims
// right-aligned, its batch and query-row dims of size 1 expanded with stride
// 0 (as torch passes a mask), a head dim of 1 broadcast by cuDNN.
Layout biasLayout(const Tensor& mask, const Layout& q, int64_t keys) {
  Layout l{{1, 1, 1, keys}, {0, 0, 0, 1}};
  size_t n = mask.sizes.size();
  for (size_t i = 0; i < n; ++i) {
    l.dims[4 - n + i] = mask.sizes[i];
    l.strides[4 - n + i] = mask.sizes[i] == 1 ? 0 : mask.strides[i];
  }
  for (size_t d : {0, 2}) l.dims[d] = q.dims[d];
  if (l.dims[1] == 1) l.strides[1] = l.dims[2] * keys; // as a dense tensor's
  return l;
}

// The masked scaled scores of q @ k^T: bmm1, the scale, the bias (a mask)
// added, and (causal) the diagonal band keeping key j <= query i at -infinity
// elsewhere.
const Descriptor& maskedScores(GraphBuilder& g, const AttentionCall& call, const Descriptor& q,
                               const Descriptor& kT, const std::vector<int64_t>& scores,
                               const Descriptor& scale, const Descriptor& minusInfinity,
                               const Descriptor* bias, bool subtractStats,
                               const Descriptor* stats) {
  const Descriptor& s = g.virtualTensor(scores);
  g.matmul(q, kT, s);
  const Descriptor* x = &g.virtualTensor(scores);
  g.pointwise(CUDNN_POINTWISE_MUL, s, &scale, nullptr, *x);
  if (bias) {
    const Descriptor& biased = g.virtualTensor(scores);
    g.pointwise(CUDNN_POINTWISE_ADD, *x, bias, nullptr, biased);
    x = &biased;
  }
  if (subtractStats) {
    const Descriptor& y = g.virtualTensor(scores);
    g.pointwise(CUDNN_POINTWISE_SUB, *x, stats, nullptr, y);
    x = &y;
  }
  if (!call.causal) return *x;
  const Descriptor& row = g.virtualTensor(scores, CUDNN_DATA_INT32);
  const Descriptor& col = g.virtualTensor(scores, CUDNN_DATA_INT32);
  const Descriptor& keep = g.virtualTensor(scores, CUDNN_DATA_BOOLEAN);
  const Descriptor& masked = g.virtualTensor(scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, *x, nullptr, nullptr, row, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, *x, nullptr, nullptr, col, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, keep, -1, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, *x, &minusInfinity, &keep, masked);
  return masked;
}

// Dropout's draws over the scores (1 where a weight is kept, with probability
// 1 - p), from cuDNN's Philox stream of the call's seed and offset: the same
// draws in the forward and the backward of one seed and offset.
const Descriptor& keptDraws(GraphBuilder& g, const AttentionCall& call,
                            const std::vector<int64_t>& scores) {
  const Descriptor& kept = g.virtualTensor(scores);
  g.bernoulli(1 - call.dropout, g.streamTensor(kSeed), g.streamTensor(kOffset), kept);
  return kept;
}

// The weights p dropout keeps, scaled by 1 / (1 - p) (`scale`), of dtype `type`.
const Descriptor& keptWeights(GraphBuilder& g, const Descriptor& p, const Descriptor& kept,
                              const Descriptor& scale, const std::vector<int64_t>& scores,
                              cudnnDataType_t type) {
  const Descriptor& masked = g.virtualTensor(scores);
  const Descriptor& scaled = g.virtualTensor(scores, type);
  g.pointwise(CUDNN_POINTWISE_MUL, p, &kept, nullptr, masked);
  g.pointwise(CUDNN_POINTWISE_MUL, masked, &scale, nullptr, scaled);
  return scaled;
}

// Forward: S = mask(q k^T * scale); stats = max + log(sum exp(S - max));
// out = (exp(S - max) / sum) @ v (the probabilities in the operands' dtype).
void forwardGraph(GraphBuilder& g, const AttentionCall& call, cudnnDataType_t type, const Layout& q,
                  const Layout& k, const Layout& v, const Layout& out, const Layout* bias,
                  bool withStats) {
  int64_t b = q.dims[0], h = q.dims[1], rows = q.dims[2], keys = k.dims[2];
  std::vector<int64_t> scores = {b, h, rows, keys}, rowDims = {b, h, rows, 1};
  Layout kT = k.transposed();
  const Descriptor& qd = g.tensor(kQ, type, q.dims, q.strides);
  const Descriptor& kd = g.tensor(kK, type, kT.dims, kT.strides);
  const Descriptor& vd = g.tensor(kV, type, v.dims, v.strides);
  const Descriptor& od = g.tensor(kO, type, out.dims, out.strides);
  // Inference keeps the stats inside the graph (cuDNN's engines want them either way).
  const Descriptor& stats =
      withStats ? g.tensor(kStats, CUDNN_DATA_FLOAT, rowDims, contiguousStrides(rowDims))
                : g.virtualTensor(rowDims);
  const Descriptor& scale = g.scalar(kScale);
  const Descriptor& minusInfinity = g.scalar(kMinusInfinity);
  const Descriptor* biasd = bias ? &g.tensor(kBias, type, bias->dims, bias->strides) : nullptr;
  const Descriptor& s =
      maskedScores(g, call, qd, kd, scores, scale, minusInfinity, biasd, false, nullptr);
  const Descriptor& max = g.virtualTensor(rowDims);
  const Descriptor& shifted = g.virtualTensor(scores);
  const Descriptor& e = g.virtualTensor(scores);
  const Descriptor& sum = g.virtualTensor(rowDims);
  const Descriptor& logSum = g.virtualTensor(rowDims);
  bool dropout = call.dropout > 0;
  const Descriptor& p = dropout ? g.virtualTensor(scores) : g.virtualTensor(scores, type);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  g.pointwise(CUDNN_POINTWISE_SUB, s, &max, nullptr, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, e);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, logSum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, &logSum, nullptr, stats);
  g.pointwise(CUDNN_POINTWISE_DIV, e, &sum, nullptr, p);
  if (!dropout) {
    g.matmul(p, vd, od);
    return;
  }
  // The kept weights scaled by 1 / (1 - p), in the operands' dtype for bmm2.
  const Descriptor& kept = keptDraws(g, call, scores);
  g.matmul(keptWeights(g, p, kept, g.scalar(kDropoutScale), scores, type), vd, od);
}

// Backward, as FlashAttention-2's: delta = rowsum(dout * out) and dq's f32
// accumulator live in the workspace (uids kDelta, kDqAccumulator); P is
// recomputed from the stats; dv = P^T dout, dS = P * (dout v^T - delta) *
// scale, dk = dS^T q, dq = dS k. With dropout (cuDNN's form of it), the same
// draws M again: dv = (P M / (1 - p))^T dout, dS = P * (dout v^T M - delta (1 -
// p)) / (1 - p) * scale, the scalar kOne bound to 1 - p.
enum WorkspaceUid : int64_t { kDelta = 50, kDqAccumulator, kOne };

void backwardGraph(GraphBuilder& g, const AttentionCall& call, cudnnDataType_t type,
                   const Layout& q, const Layout& k, const Layout& v, const Layout& out,
                   const Layout& dout, const Layout& dq, const Layout& dk, const Layout& dv,
                   const Layout* bias) {
  int64_t b = q.dims[0], h = q.dims[1], rows = q.dims[2], keys = k.dims[2], e = q.dims[3];
  std::vector<int64_t> scores = {b, h, rows, keys}, rowDims = {b, h, rows, 1};
  std::vector<int64_t> transposedScores = {b, h, keys, rows};
  std::vector<int64_t> transposedStrides = {h * rows * keys, rows * keys, 1, keys};
  Layout kT = k.transposed(), vT = v.transposed();
  const Descriptor& qd = g.tensor(kQ, type, q.dims, q.strides);
  const Descriptor& kTd = g.tensor(kK, type, kT.dims, kT.strides);
  const Descriptor& vTd = g.tensor(kV, type, vT.dims, vT.strides);
  const Descriptor& od = g.tensor(kO, type, out.dims, out.strides);
  const Descriptor& doutd = g.tensor(kDout, type, dout.dims, dout.strides);
  const Descriptor& stats =
      g.tensor(kStats, CUDNN_DATA_FLOAT, rowDims, contiguousStrides(rowDims));
  const Descriptor& dqd = g.tensor(kDq, type, dq.dims, dq.strides);
  const Descriptor& dkd = g.tensor(kDk, type, dk.dims, dk.strides);
  const Descriptor& dvd = g.tensor(kDv, type, dv.dims, dv.strides);
  const Descriptor& scale = g.scalar(kScale);
  const Descriptor& one = g.scalar(kOne);
  const Descriptor& minusInfinity = g.scalar(kMinusInfinity);
  std::vector<int64_t> dqDims = {b, h, rows, e};
  const Descriptor& delta =
      g.tensor(kDelta, CUDNN_DATA_FLOAT, rowDims, contiguousStrides(rowDims));
  const Descriptor& dqAccumulator =
      g.tensor(kDqAccumulator, CUDNN_DATA_FLOAT, dqDims, contiguousStrides(dqDims));

  const Descriptor& product = g.virtualTensor(dqDims);
  const Descriptor& rowSum = g.virtualTensor(rowDims);
  g.pointwise(CUDNN_POINTWISE_MUL, doutd, &od, nullptr, product);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, rowSum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowSum, &one, nullptr, delta);

  const Descriptor* biasd = bias ? &g.tensor(kBias, type, bias->dims, bias->strides) : nullptr;
  const Descriptor& logits =
      maskedScores(g, call, qd, kTd, scores, scale, minusInfinity, biasd, true, &stats);
  const Descriptor& p = g.virtualTensor(scores);
  g.pointwise(CUDNN_POINTWISE_EXP, logits, nullptr, nullptr, p);
  bool dropout = call.dropout > 0;
  const Descriptor* kept = nullptr;
  const Descriptor* dropoutScale = nullptr;
  const Descriptor* pKept = &p; // the weights dv takes
  if (dropout) {
    kept = &keptDraws(g, call, scores);
    dropoutScale = &g.scalar(kDropoutScale);
    pKept = &keptWeights(g, p, *kept, *dropoutScale, scores, CUDNN_DATA_FLOAT);
  }
  const Descriptor& pT = g.tensor(g.nextVirtual(), type, transposedScores, transposedStrides, true);
  g.reshape(*pKept, pT);
  g.matmul(pT, doutd, dvd);

  const Descriptor* dp = &g.virtualTensor(scores);
  g.matmul(doutd, vTd, *dp);
  if (dropout) {
    const Descriptor& masked = g.virtualTensor(scores);
    g.pointwise(CUDNN_POINTWISE_MUL, *dp, kept, nullptr, masked);
    dp = &masked;
  }
  const Descriptor& centred = g.virtualTensor(scores);
  const Descriptor* weighted = &g.virtualTensor(scores);
  const Descriptor& ds = g.virtualTensor(scores);
  g.pointwise(CUDNN_POINTWISE_SUB, *dp, &delta, nullptr, centred);
  g.pointwise(CUDNN_POINTWISE_MUL, centred, &p, nullptr, *weighted);
  if (dropout) {
    const Descriptor& rescaled = g.virtualTensor(scores);
    g.pointwise(CUDNN_POINTWISE_MUL, *weighted, dropoutScale, nullptr, rescaled);
    weighted = &rescaled;
  }
  g.pointwise(CUDNN_POINTWISE_MUL, *weighted, &scale, nullptr, ds);
  const Descriptor& dsT = g.tensor(g.nextVirtual(), type, transposedScores, transposedStrides, true);
  g.reshape(ds, dsT);
  g.matmul(dsT, qd, dkd);

  const Descriptor& kRows = g.tensor(g.nextVirtual(), CUDNN_DATA_FLOAT, k.dims, k.strides, true);
  g.reshape(kTd, kRows);
  g.matmul(ds, kRows, dqAccumulator);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dqAccumulator, nullptr, nullptr, dqd);
}

// A built plan and the graph it keeps alive; none when cuDNN refused the graph.
struct Plan {
  std::unique_ptr<GraphBuilder> graph;
  std::optional<Descriptor> plan;
  int64_t workspaceBytes = 0; // cuDNN's own, past what the graph keeps in the workspace
  std::string why;            // no plan: cuDNN's reason
};

struct Plans {
  std::mutex mutex;
  std::map<std::vector<int64_t>, Plan> built;
};

Plans& plans() {
  static Plans* p = new Plans(); // outlives static destructors run at exit
  return *p;
}

bool halfPrecision(ir::DType t) { return t == ir::DType::BFloat16 || t == ir::DType::Float16; }

// Whether cuDNN may take these operands (and a bias): 4 dims or fewer, the last dense,
// 16-byte aligned starts and strides (the descriptors promise 16).
bool takes(const std::vector<const Tensor*>& operands) {
  for (const Tensor* t : operands) {
    if (t->sizes.empty() || t->sizes.size() > 4 || t->strides.back() != 1) return false;
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
    for (size_t d = 0; d + 1 < t->strides.size(); ++d)
      if (t->strides[d] % 8 != 0 && t->sizes[d] != 1) return false;
  }
  return true;
}

thread_local std::string lastRefusal;

// Whether cuDNN may run the call (else lastRefusal says why).
bool accepts(const AttentionCall& call, const std::vector<const Tensor*>& operands) {
  if (!cudnn()) {
    lastRefusal = cudnnUnavailableWhy();
    return false;
  }
  if (!halfPrecision(operands.front()->dtype)) {
    lastRefusal = "operands not f16 or bf16";
    return false;
  }
  std::vector<const Tensor*> all = operands;
  if (call.bias) all.push_back(call.bias);
  if (!takes(all)) {
    lastRefusal = "an operand of more than 4 dims, a strided last dim, or not 16-byte aligned";
    return false;
  }
  if (call.dropout > 0 && !(call.seed && call.offset && call.seed->dtype == ir::DType::Int64 &&
                            call.offset->dtype == ir::DType::Int64)) {
    lastRefusal = "dropout without an i64 seed and offset";
    return false;
  }
  return true;
}

void appendLayout(std::vector<int64_t>& key, const Layout& l) {
  key.insert(key.end(), l.dims.begin(), l.dims.end());
  key.insert(key.end(), l.strides.begin(), l.strides.end());
}

// A plan's key: its kind (0 forward with stats, 2 without, 1 backward), the
// device, dtype, causality, dropout probability (its bits) and every
// operand's layout, the bias's last.
std::vector<int64_t> planKey(int64_t kind, const AttentionCall& call, int device, ir::DType dtype,
                             std::initializer_list<const Layout*> operands,
                             const std::optional<Layout>& bias) {
  int64_t dropoutBits = 0;
  std::memcpy(&dropoutBits, &call.dropout, sizeof dropoutBits);
  std::vector<int64_t> key = {kind,        device,      static_cast<int64_t>(dtype),
                              call.causal, dropoutBits, bias.has_value()};
  for (const Layout* l : operands) appendLayout(key, *l);
  if (bias) appendLayout(key, *bias);
  return key;
}

// The bias, and the seed, offset and 1 / (1 - p) of a call with dropout, bound by their uids.
void bindOptional(const AttentionCall& call, float& dropoutScale, std::vector<int64_t>& uids,
                  std::vector<void*>& pointers) {
  if (call.bias) {
    uids.push_back(kBias);
    pointers.push_back(call.bias->data);
  }
  if (call.dropout <= 0) return;
  uids.insert(uids.end(), {kSeed, kOffset, kDropoutScale});
  pointers.insert(pointers.end(), {call.seed->data, call.offset->data, &dropoutScale});
}

// The plan of `key` (built by `build` the first time); null when cuDNN refuses it.
const Plan* planFor(const std::vector<int64_t>& key, int device, const char* what,
                    const std::function<void(GraphBuilder&)>& build) {
  Plans& all = plans();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto it = all.built.find(key);
  if (it == all.built.end()) {
    Plan p;
    std::string why;
    auto start = std::chrono::steady_clock::now();
    // Whatever stops a graph being built (a descriptor cuDNN calls a bad
    // parameter, no engine) leaves the call to kiln's kernels; only a built
    // plan's execution fails the call.
    try {
      p.graph = std::make_unique<GraphBuilder>(cudnnHandle(device));
      build(*p.graph);
      p.plan = p.graph->plan(why);
    } catch (const Error& e) {
      why = e.what();
    }
    if (p.plan) {
      const Cudnn& c = *cudnn();
      int64_t got = 0;
      cudnnCheck(c.cudnnBackendGetAttribute(p.plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &got, &p.workspaceBytes),
                 "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
      auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
      kiln::log().info("cuDNN attention: {} plan built in {:.0f} ms (workspace {} bytes)", what,
                       ms.count(), p.workspaceBytes);
    } else {
      kiln::log().info("cuDNN attention: no plan for this {} ({}); kiln's flash kernels run it "
                       "where the call names them",
                       what, why);
      p.why = "no cuDNN plan: " + why;
    }
    it = all.built.emplace(key, std::move(p)).first;
  }
  if (!it->second.plan) lastRefusal = it->second.why;
  return it->second.plan ? &it->second : nullptr;
}

void execute(const Plan& plan, const CudaCallContext& ctx, std::vector<int64_t> uids,
             std::vector<void*> pointers, void* workspace) {
  const Cudnn& c = *cudnn();
  cudnnHandle_t handle = cudnnHandle(ctx.device);
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  // One handle a device: its stream is set under the plans' lock.
  std::lock_guard<std::mutex> lock(plans().mutex);
  cudnnCheck(c.cudnnSetStream(handle, reinterpret_cast<cudaStream_t>(ctx.stream)),
             "cudnnSetStream");
  cudnnCheck(c.cudnnBackendExecute(handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
}

// The run's workspace when it is large enough, else scratch of `bytes`.
void* workspaceOf(const CudaCallContext& ctx, size_t bytes, std::optional<Scratch>& scratch) {
  size_t have = 0;
  void* shared = ctx.workspace(have);
  if (bytes <= have) return shared;
  scratch.emplace(ctx.allocator, bytes);
  return scratch->data;
}

} // namespace

bool cudnnAttentionForward(const AttentionCall& call, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& out, const Tensor* lse,
                           const CudaCallContext& context) {
  if (!accepts(call, {&q, &k, &v, &out})) return false;
  Layout ql = layoutOf(q), kl = layoutOf(k), vl = layoutOf(v), ol = layoutOf(out);
  std::optional<Layout> bl;
  if (call.bias) bl = biasLayout(*call.bias, ql, kl.dims[2]);
  std::vector<int64_t> key =
      planKey(lse ? 0 : 2, call, context.device, q.dtype, {&ql, &kl, &vl, &ol}, bl);
  cudnnDataType_t type = dataType(q.dtype);
  const Plan* plan = planFor(key, context.device, "forward", [&](GraphBuilder& g) {
    forwardGraph(g, call, type, ql, kl, vl, ol, bl ? &*bl : nullptr, lse != nullptr);
  });
  if (!plan) return false;
  std::optional<Scratch> scratch;
  void* workspace = workspaceOf(context, static_cast<size_t>(plan->workspaceBytes), scratch);
  float scale = call.scale, minusInfinity = -INFINITY;
  float dropoutScale = static_cast<float>(1 / (1 - call.dropout));
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kScale};
  std::vector<void*> pointers = {q.data, k.data, v.data, out.data, &scale};
  if (call.causal) { // the pack binds exactly the graph's tensors
    uids.push_back(kMinusInfinity);
    pointers.push_back(&minusInfinity);
  }
  bindOptional(call, dropoutScale, uids, pointers);
  if (lse) {
    uids.push_back(kStats);
    pointers.push_back(lse->data);
  }
  execute(*plan, context, uids, pointers, workspace);
  return true;
}

bool cudnnAttentionBackward(const AttentionCall& call, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const CudaCallContext& context) {
  if (!accepts(call, {&dout, &q, &k, &v, &out, &dq, &dk, &dv})) return false;
  Layout ql = layoutOf(q), kl = layoutOf(k), vl = layoutOf(v), ol = layoutOf(out);
  Layout gl = layoutOf(dout), dql = layoutOf(dq), dkl = layoutOf(dk), dvl = layoutOf(dv);
  std::optional<Layout> bl;
  if (call.bias) bl = biasLayout(*call.bias, ql, kl.dims[2]);
  std::vector<int64_t> key =
      planKey(1, call, context.device, q.dtype, {&ql, &kl, &vl, &ol, &gl, &dql, &dkl, &dvl}, bl);
  cudnnDataType_t type = dataType(q.dtype);
  const Plan* plan = planFor(key, context.device, "backward", [&](GraphBuilder& g) {
    backwardGraph(g, call, type, ql, kl, vl, ol, gl, dql, dkl, dvl, bl ? &*bl : nullptr);
  });
  if (!plan) return false;
  // The workspace: dq's f32 accumulator, then delta, then cuDNN's own (16-byte aligned).
  auto aligned = [](size_t n) { return (n + 255) / 256 * 256; };
  size_t accumulatorBytes = aligned(static_cast<size_t>(ql.dims[0] * ql.dims[1] * ql.dims[2] *
                                                        ql.dims[3]) * sizeof(float));
  size_t deltaBytes = aligned(static_cast<size_t>(ql.dims[0] * ql.dims[1] * ql.dims[2]) *
                              sizeof(float));
  std::optional<Scratch> scratch;
  auto* workspace = static_cast<char*>(workspaceOf(
      context, accumulatorBytes + deltaBytes + static_cast<size_t>(plan->workspaceBytes), scratch));
  // kOne scales delta: 1 - p with dropout (backwardGraph).
  float scale = call.scale, one = static_cast<float>(1 - call.dropout), minusInfinity = -INFINITY;
  float dropoutScale = static_cast<float>(1 / (1 - call.dropout));
  std::vector<int64_t> uids = {kQ,  kK,  kV,     kO,  kDout,          kStats, kDq,
                               kDk, kDv, kScale, kOne, kDqAccumulator, kDelta};
  std::vector<void*> pointers = {q.data, k.data, v.data, out.data, dout.data, lse.data, dq.data,
                                 dk.data, dv.data, &scale, &one, workspace,
                                 workspace + accumulatorBytes};
  if (call.causal) {
    uids.push_back(kMinusInfinity);
    pointers.push_back(&minusInfinity);
  }
  bindOptional(call, dropoutScale, uids, pointers);
  execute(*plan, context, uids, pointers, workspace + accumulatorBytes + deltaBytes);
  return true;
}

const std::string& cudnnAttentionRefusal() {
  return lastRefusal;
}

} // namespace kiln::runtime::detail
