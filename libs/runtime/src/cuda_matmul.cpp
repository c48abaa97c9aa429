#include "cuda_matmul.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "cublaslt.h"
#include "cuda_copy.h"
#include "kiln/common/error.h"
#include "kiln/common/log.h"
#include "matrix_product.h"

namespace kiln::runtime::detail {
namespace {

// A matrix as cuBLASLt reads it: column-major with leading dimension `ld`
// (unit row stride), or the transpose of one (unit column stride).
struct Stored {
  bool transposed;
  int64_t ld;
};

std::optional<Stored> stored(const MatrixLayout& x) {
  int64_t rows = std::max<int64_t>(x.rows, 1), cols = std::max<int64_t>(x.cols, 1);
  if (x.rowStride == 1 || x.rows == 1) {
    int64_t ld = x.cols == 1 ? rows : x.colStride;
    if (ld >= rows) return Stored{false, ld};
  }
  if (x.colStride == 1 || x.cols == 1) {
    int64_t ld = x.rows == 1 ? cols : x.rowStride;
    if (ld >= cols) return Stored{true, ld};
  }
  return std::nullopt;
}

struct Types {
  cudaDataType data, scale;
  cublasComputeType_t compute;
};

std::optional<Types> typesOf(ir::DType dtype) {
  switch (dtype) {
  case ir::DType::Float32: return Types{CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  case ir::DType::Float16: return Types{CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  case ir::DType::BFloat16: return Types{CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  case ir::DType::Float64: return Types{CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
  default: return std::nullopt;
  }
}

uint32_t alignment(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// One cuBLASLt call: D (m x n, column-major) = epilogue(alpha * op(A) op(B) +
// beta * D), `batch` times at the given strides.
struct Gemm {
  Types types;
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t alignA = 0, alignB = 0, alignD = 0, alignBias = 0;
  int64_t auxLd = 0; // GELU_AUX's pre-activation: its leading dimension (D's layout)

  auto key() const {
    return std::make_tuple(int(types.data), transA, transB, m, n, k, lda, ldb, ldd, batch, strideA,
                           strideB, strideD, int(epilogue), alignA, alignB, alignD, alignBias,
                           auxLd);
  }
};

template <class T, class Destroy> struct Owned { // a cuBLASLt descriptor, destroyed with its scope
  T handle = nullptr;
  Destroy destroy;
  ~Owned() {
    if (handle) destroy(handle);
  }
  T release() { return std::exchange(handle, nullptr); }
};

template <class Desc, class Attr, class Value>
void set(cublasStatus_t (*fn)(Desc, Attr, const void*, size_t), Desc desc, Attr attr,
         const Value& value, const char* call) {
  cublasCheck(fn(desc, attr, &value, sizeof(value)), call);
}

// How many of the heuristic's algorithms a call shape's first run times.
// The heuristic's first is not always the fastest on the H100: for GPT-2's
// fc1 with GELU_AUX_BIAS its fifth ran 74.9 us against 82.2, and GPT-2's
// products took 8756 us a step against 8913 with the heuristic's first.
constexpr int kCandidates = 8;

// cuBLASLt's descriptors of one call shape and the heuristic's algorithms for
// it, made once for the process: making them per call was most of a
// product's host time (18-26 us a call; GPT-2's step makes 147).
struct Prepared {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos; // in the heuristic's order
  std::optional<size_t> fastest;           // the timed calls' choice, once made
};

// KILN_MATMUL_AUTOTUNE=0: the heuristic's first algorithm, untimed (the same
// algorithm in every process, so the same bits).
bool autotuning() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_MATMUL_AUTOTUNE");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

// nullopt when the heuristic has no algorithm for the call (an epilogue
// cuBLASLt's kernels do not take with these operands' layouts).
std::optional<Prepared> prepare(const CublasLt& lt, cublasLtHandle_t handle, const Gemm& g,
                                size_t workspaceBytes) {
  Owned<cublasLtMatmulDesc_t, decltype(lt.cublasLtMatmulDescDestroy)> op{
      nullptr, lt.cublasLtMatmulDescDestroy};
  cublasCheck(lt.cublasLtMatmulDescCreate(&op.handle, g.types.compute, g.types.scale),
              "cublasLtMatmulDescCreate");
  int32_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto setOp = lt.cublasLtMatmulDescSetAttribute;
  set(setOp, op.handle, CUBLASLT_MATMUL_DESC_TRANSA, ta, "cublasLtMatmulDescSetAttribute");
  set(setOp, op.handle, CUBLASLT_MATMUL_DESC_TRANSB, tb, "cublasLtMatmulDescSetAttribute");
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    set(setOp, op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue,
        "cublasLtMatmulDescSetAttribute");
  if (g.auxLd)
    set(setOp, op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.auxLd,
        "cublasLtMatmulDescSetAttribute");
  using Layout = Owned<cublasLtMatrixLayout_t, decltype(lt.cublasLtMatrixLayoutDestroy)>;
  auto layout = [&](Layout& out, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    cublasCheck(lt.cublasLtMatrixLayoutCreate(&out.handle, g.types.data,
                                              static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld),
                "cublasLtMatrixLayoutCreate");
    if (g.batch == 1) return;
    auto setLayout = lt.cublasLtMatrixLayoutSetAttribute;
    int32_t count = static_cast<int32_t>(g.batch);
    set(setLayout, out.handle, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count,
        "cublasLtMatrixLayoutSetAttribute");
    set(setLayout, out.handle, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride,
        "cublasLtMatrixLayoutSetAttribute");
  };
  Layout la{nullptr, lt.cublasLtMatrixLayoutDestroy}, lb{nullptr, lt.cublasLtMatrixLayoutDestroy},
      ld{nullptr, lt.cublasLtMatrixLayoutDestroy};
  layout(la, g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda, g.strideA);
  layout(lb, g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb, g.strideB);
  layout(ld, g.m, g.n, g.ldd, g.strideD);

  Owned<cublasLtMatmulPreference_t, decltype(lt.cublasLtMatmulPreferenceDestroy)> pref{
      nullptr, lt.cublasLtMatmulPreferenceDestroy};
  cublasCheck(lt.cublasLtMatmulPreferenceCreate(&pref.handle), "cublasLtMatmulPreferenceCreate");
  auto setPref = lt.cublasLtMatmulPreferenceSetAttribute;
  uint64_t bytes = workspaceBytes;
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  set(setPref, pref.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, bytes, call);
  set(setPref, pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.alignA, call);
  set(setPref, pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.alignB, call);
  set(setPref, pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.alignD, call);
  set(setPref, pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.alignD, call);
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  cublasCheck(lt.cublasLtMatmulAlgoGetHeuristic(handle, op.handle, la.handle, lb.handle, ld.handle,
                                                ld.handle, pref.handle, kCandidates, results,
                                                &found),
              "cublasLtMatmulAlgoGetHeuristic");
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  if (algos.empty()) return std::nullopt;
  std::optional<size_t> fastest;
  if (algos.size() == 1) fastest = 0;
  return Prepared{op.release(), la.release(),     lb.release(),
                  ld.release(), std::move(algos), fastest};
}

// A CUDA event for timing, destroyed with its scope.
class TimingEvent {
public:
  explicit TimingEvent(const CudaDriver& driver) : driver_(driver) {
    cudaCheck(driver_.cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~TimingEvent() { driver_.cuEventDestroy(event_); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  CUevent get() const { return event_; }

private:
  const CudaDriver& driver_;
  CUevent event_ = nullptr;
};

// The fastest of the call's algorithms: each runs the call itself, on its
// own operands and into its own result (which the call then writes again),
// back to back as a step runs them: a warm-up run each, then
// three rounds of kRepeats runs each, its best round's mean counting. Another
// algorithm replaces the heuristic's first only when it is faster by more
// than kMargin: a first round of timing each run alone (the GPU idle between)
// chose by noise and made GPT-2's products 0.3% slower than the heuristic. One
// cuBLASLt refuses at run time is dropped. `matmul(algo)` queues the call on
// ctx.stream; the host waits for each round (a shape's first call only).
//
// A product whose heuristic's first runs longer than kLongestMs keeps it
// untimed: timing its 8 algorithms ~15 times each costs the cold compile more
// than the product could save (bench/gpu's MLP, two 1.3 ms products: 0.35 s,
// where its cold compile had been 0.08 s against torch.compile's 0.57). That
// first is timed before the others run at all: their warm-up runs alone (and
// their kernels' loading) cost such a product's first call ~10 ms.
template <class Matmul>
size_t chooseFastest(const CudaCallContext& ctx, const Gemm& g, const Prepared& call,
                     Matmul matmul) {
  constexpr int kRepeats = 4;
  constexpr float kMargin = 0.02f, kLongestMs = 0.25f;
  const CudaDriver& driver = ctx.driver;
  size_t count = call.algos.size();
  std::deque<TimingEvent> marks; // marks[i] .. marks[i + 1]: algorithm i's runs in a round
  for (size_t i = 0; i <= count; ++i) marks.emplace_back(driver);
  std::vector<bool> refused(count, false);
  refused[0] = matmul(call.algos[0]) != CUBLAS_STATUS_SUCCESS;
  if (!refused[0]) { // the warm-up loaded its kernel: now one run of the heuristic's first
    float ms = 0;
    cudaCheck(driver.cuEventRecord(marks[0].get(), ctx.stream), "cuEventRecord");
    refused[0] = matmul(call.algos[0]) != CUBLAS_STATUS_SUCCESS;
    cudaCheck(driver.cuEventRecord(marks[1].get(), ctx.stream), "cuEventRecord");
    cudaCheck(driver.cuEventSynchronize(marks[1].get()), "cuEventSynchronize");
    cudaCheck(driver.cuEventElapsedTime(&ms, marks[0].get(), marks[1].get()), "cuEventElapsedTime");
    if (!refused[0] && ms > kLongestMs) return 0;
  }
  for (size_t i = 1; i < count; ++i) refused[i] = matmul(call.algos[i]) != CUBLAS_STATUS_SUCCESS;
  std::vector<float> fastest(count, std::numeric_limits<float>::infinity());
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < count; ++i) {
      cudaCheck(driver.cuEventRecord(marks[i].get(), ctx.stream), "cuEventRecord");
      for (int r = 0; r < kRepeats && !refused[i]; ++r)
        refused[i] = matmul(call.algos[i]) != CUBLAS_STATUS_SUCCESS;
    }
    cudaCheck(driver.cuEventRecord(marks[count].get(), ctx.stream), "cuEventRecord");
    cudaCheck(driver.cuEventSynchronize(marks[count].get()), "cuEventSynchronize");
    for (size_t i = 0; i < count; ++i) {
      float ms = 0;
      cudaCheck(driver.cuEventElapsedTime(&ms, marks[i].get(), marks[i + 1].get()),
                "cuEventElapsedTime");
      if (!refused[i]) fastest[i] = std::min(fastest[i], ms / kRepeats);
    }
  }
  size_t best =
      static_cast<size_t>(std::min_element(fastest.begin(), fastest.end()) - fastest.begin());
  if (std::isfinite(fastest[0]) && fastest[best] > fastest[0] * (1 - kMargin)) best = 0;
  if (std::isfinite(fastest[best]))
    log().debug("cuBLASLt: {}x{}x{} (batch {}, epilogue {}): algorithm {} of {}, {:.1f} us "
                "(the heuristic's first: {:.1f} us)",
                g.m, g.n, g.k, g.batch, int(g.epilogue), best + 1, count, fastest[best] * 1e3,
                fastest[0] * 1e3);
  return best;
}

// The prepared calls by device and shape, for the process (never destroyed:
// cuBLASLt may be gone when static destructors run).
struct PreparedCalls {
  std::mutex mutex;
  using Key = decltype(std::tuple_cat(std::make_tuple(0), std::declval<Gemm>().key()));
  std::map<Key, std::optional<Prepared>> calls;
};

PreparedCalls& preparedCalls() {
  static PreparedCalls* calls = new PreparedCalls();
  return *calls;
}

// false when cuBLASLt has no algorithm for the call (nothing is queued).
// `aux`: GELU_AUX's pre-activation output.
bool tryGemm(const CudaCallContext& ctx, const Gemm& g, const void* a, const void* b, void* d,
             const void* bias, double alpha, double beta, void* aux = nullptr) {
  const CublasLt& lt = cublasLt();
  cublasLtHandle_t handle = cublasLtHandle(ctx.device);
  size_t workspaceBytes = 0;
  void* workspace = ctx.workspace(workspaceBytes);
  PreparedCalls& cache = preparedCalls();
  // Held through the call: the bias and aux pointers are set on the shared descriptor.
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto key = std::tuple_cat(std::make_tuple(ctx.device), g.key());
  auto it = cache.calls.find(key);
  if (it == cache.calls.end())
    it = cache.calls.emplace(key, prepare(lt, handle, g, workspaceBytes)).first;
  if (!it->second) return false;
  Prepared& call = *it->second;
  if (bias)
    set(lt.cublasLtMatmulDescSetAttribute, call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias,
        "cublasLtMatmulDescSetAttribute");
  if (aux)
    set(lt.cublasLtMatmulDescSetAttribute, call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux,
        "cublasLtMatmulDescSetAttribute");
  float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  bool wide = g.types.scale == CUDA_R_64F;
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return lt.cublasLtMatmul(handle, call.op, wide ? static_cast<const void*>(&alpha) : &alpha32, a,
                             call.a, b, call.b, wide ? static_cast<const void*>(&beta) : &beta32, d,
                             call.d, d, call.d, &algo, workspace, workspaceBytes, ctx.stream);
  };
  // Timed only where running the call again changes nothing it reads: beta 0
  // (D is not read), and not while the stream captures a graph (no waiting).
  // Deterministic runs take the heuristic's first, whatever other runs chose.
  size_t algo = 0;
  if (ctx.timedProducts && autotuning()) {
    if (!call.fastest && beta == 0 && !ctx.capturing)
      call.fastest = chooseFastest(ctx, g, call, matmul);
    algo = call.fastest.value_or(0);
  }
  cublasCheck(matmul(call.algos[algo]), "cublasLtMatmul");
  return true;
}

void runGemm(const CudaCallContext& ctx, const Gemm& g, const void* a, const void* b, void* d,
             const void* bias, double alpha, double beta) {
  if (!tryGemm(ctx, g, a, b, d, bias, alpha, beta))
    throw Error(ErrorCode::Unsupported, "runtime: cuBLASLt has no algorithm for a " +
                                            std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                                            std::to_string(g.k) + " product");
}

// A batch dim of the product: its size and each operand's stride (elements).
struct Dim {
  int64_t size, a, b, c;
};

// The batch dims, size-1 dims dropped and dims merged where every operand
// steps through them as through one.
std::vector<Dim> collapse(const ProductShape& p) {
  std::vector<Dim> dims;
  for (size_t d = 0; d < p.batchSizes.size(); ++d) {
    Dim next{p.batchSizes[d], p.a.batchStrides[d], p.b.batchStrides[d], p.c.batchStrides[d]};
    if (next.size == 1) continue;
    if (!dims.empty()) {
      Dim& last = dims.back();
      if (last.a == next.a * next.size && last.b == next.b * next.size &&
          last.c == next.c * next.size) {
        last = {last.size * next.size, next.a, next.b, next.c};
        continue;
      }
    }
    dims.push_back(next);
  }
  return dims;
}

const char* at(const void* base, int64_t elements, size_t e) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(e);
}
char* at(void* base, int64_t elements, size_t e) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(e);
}

// The product of one entry of the outer batch dims: `count` matrices of the
// inner batch dim, `inner` holding each operand's stride along it.
struct Entry {
  const void* a;
  const void* b;
  void* c;
  Dim inner;
};

class DeviceProduct {
public:
  // `further`: the bias_grad or gelu_tanh_aux epilogue's result (else null).
  DeviceProduct(const ProductShape& p, Types types, Epilogue epilogue, const Tensor* further,
                const CudaCallContext& ctx)
      : p_(p), types_(types), epilogue_(epilogue),
        rowSums_(epilogue == Epilogue::BiasGrad ? further : nullptr),
        activation_(epilogue == Epilogue::GeluTanhAux ? further : nullptr), ctx_(ctx),
        e_(elementSize(p.dtype)) {}

  void run(const Entry& entry) {
    int64_t m = p_.c.matrix.rows, n = p_.c.matrix.cols, k = p_.a.matrix.cols,
            count = entry.inner.size;
    if (m == 0 || count == 0) return;
    if (n == 0) { // no product, but the rows still have their sums
      if (rowSums_) sumRows(p_.a.matrix, entry.a);
      return;
    }
    if (count > INT32_MAX)
      throw Error(ErrorCode::Unsupported, "runtime: a batch of more than 2^31 products");
    bool withBias = p_.bias && p_.beta != 0;
    // The result: C itself when cuBLASLt can write it (as D = C, or D = C^T
    // from B^T A^T), else a dense temporary copied into C at the end.
    MatrixLayout c = p_.c.matrix;
    void* cData = entry.c;
    int64_t cStride = entry.inner.c;
    std::optional<Scratch> cTemp;
    if (!storedColumnMajor(c) && !storedColumnMajor(c.transposed())) {
      cTemp.emplace(ctx_.allocator, static_cast<size_t>(count * m * n) * e_);
      cData = cTemp->data, c = {m, n, n, 1}, cStride = m * n;
    }
    bool swap = storedColumnMajor(c.transposed());
    // addmm's bias as cuBLASLt's epilogue (torch's fast path): a vector along
    // C's columns (D = C^T's rows), beta 1, one matrix.
    const void* biasVector = nullptr;
    std::optional<Scratch> biasCopy;
    if (withBias && activation_) { // a dense [n] (cudaMatrixProduct checked), 16-byte aligned
      biasVector = p_.bias->data;
      if (alignment(biasVector) < 16) {
        biasCopy.emplace(ctx_.allocator, static_cast<size_t>(n) * e_);
        cudaCheck(ctx_.driver.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(biasCopy->data),
                                            reinterpret_cast<CUdeviceptr>(p_.bias->data),
                                            static_cast<size_t>(n) * e_, ctx_.stream),
                  "cuMemcpyAsync");
        biasVector = biasCopy->data;
      }
    } else if (withBias && swap && p_.beta == 1 && count == 1 && m > 1 && n > 1 && k > 1) {
      MatrixLayout b = biasLayout(*p_.bias, m, n);
      if (b.rowStride == 0 && b.colStride == 1 && alignment(p_.bias->data) >= 16)
        biasVector = p_.bias->data;
    }
    double beta = 0;
    if (withBias && !biasVector) { // C = the bias, broadcast; then D = alpha * AB + beta * C
      for (int64_t i = 0; i < count; ++i)
        copyMatrix(ctx_.driver, ctx_.stream, p_.bias->data, biasLayout(*p_.bias, m, n),
                   at(cData, i * cStride, e_), c, e_);
      beta = p_.beta;
    }
    if (k == 0) { // no products: C is 0, or the bias (with beta 1)
      if (withBias && (p_.beta != 1 || epilogue_ != Epilogue::None))
        throw Error(ErrorCode::Unsupported,
                    "runtime: addmm with an empty inner dim, beta != 1 or an epilogue");
      if (!withBias) {
        Scratch zero(ctx_.allocator, 16);
        cudaCheck(ctx_.driver.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(zero.data), 0, 16,
                                              ctx_.stream),
                  "cuMemsetD8Async");
        for (int64_t i = 0; i < count; ++i)
          copyMatrix(ctx_.driver, ctx_.stream, zero.data, {m, n, 0, 0}, at(cData, i * cStride, e_),
                     c, e_);
      }
      if (rowSums_) sumRows(p_.a.matrix, entry.a);
    } else {
      // D = C: A @ B; or D = C^T: B^T @ A^T.
      MatrixLayout x = swap ? p_.b.matrix.transposed() : p_.a.matrix;
      MatrixLayout y = swap ? p_.a.matrix.transposed() : p_.b.matrix;
      const void* xData = swap ? entry.b : entry.a;
      const void* yData = swap ? entry.a : entry.b;
      int64_t xStride = swap ? entry.inner.b : entry.inner.a,
              yStride = swap ? entry.inner.a : entry.inner.b;
      std::optional<Scratch> xTemp, yTemp;
      dense(x, xData, xStride, count, xTemp);
      dense(y, yData, yStride, count, yTemp);
      MatrixLayout d = swap ? c.transposed() : c;
      Stored sx = *stored(x), sy = *stored(y), sd = *stored(d);
      Gemm g;
      g.types = types_;
      g.transA = sx.transposed, g.transB = sy.transposed;
      g.m = d.rows, g.n = d.cols, g.k = k;
      g.lda = sx.ld, g.ldb = sy.ld, g.ldd = sd.ld;
      g.batch = count, g.strideA = xStride, g.strideB = yStride, g.strideD = cStride;
      // cuBLASLt's bias grads sum its operand over k: A's rows are B's
      // (BGRADB) in D = C^T = B^T A^T, A's own (BGRADA) in D = C.
      g.epilogue = epilogueOf(biasVector != nullptr, swap);
      const void* vector = rowSums_ ? rowSums_->data : biasVector;
      g.alignA = alignment(xData), g.alignB = alignment(yData), g.alignD = alignment(cData);
      g.alignBias = vector ? alignment(vector) : 0;
      if (activation_) {
        geluWithPreActivation(g, xData, yData, cData, biasVector, sd.ld);
      } else if (!rowSums_) {
        runGemm(ctx_, g, xData, yData, cData, vector, p_.alpha, beta);
      } else if (!tryGemm(ctx_, g, xData, yData, cData, vector, p_.alpha, beta)) {
        g.epilogue = CUBLASLT_EPILOGUE_DEFAULT, g.alignBias = 0;
        runGemm(ctx_, g, xData, yData, cData, nullptr, p_.alpha, beta);
        sumRows(swap ? y.transposed() : x, swap ? yData : xData);
      }
    }
    if (cTemp)
      for (int64_t i = 0; i < count; ++i)
        copyMatrix(ctx_.driver, ctx_.stream, at(cData, i * cStride, e_), c,
                   at(entry.c, i * entry.inner.c, e_), p_.c.matrix, e_);
  }

private:
  static bool storedColumnMajor(const MatrixLayout& x) {
    auto s = stored(x);
    return s && !s->transposed;
  }

  // An operand cuBLASLt cannot read as it lies is copied into a dense
  // row-major temporary (`count` matrices), which it reads transposed.
  void dense(MatrixLayout& x, const void*& data, int64_t& stride, int64_t count,
             std::optional<Scratch>& temp) {
    if (stored(x)) return;
    int64_t size = x.rows * x.cols;
    temp.emplace(ctx_.allocator, static_cast<size_t>(count * size) * e_);
    MatrixLayout to{x.rows, x.cols, x.cols, 1};
    for (int64_t i = 0; i < count; ++i)
      copyMatrix(ctx_.driver, ctx_.stream, at(data, i * stride, e_), x,
                 at(temp->data, i * size, e_), to, e_);
    x = to, data = temp->data, stride = size;
  }

  // gelu_tanh_aux: D is the activation, the pre-activation cuBLASLt's aux
  // output in D's layout (C's memory: D = C^T, cudaMatrixProduct checked).
  // Where GELU_AUX has no algorithm, two products: the pre-activation, then
  // the gelu of the same product.
  void geluWithPreActivation(Gemm g, const void* x, const void* y, void* preActivation,
                             const void* bias, int64_t ld) {
    void* activation = activation_->data;
    g.auxLd = ld;
    g.alignD = alignment(activation);
    if (tryGemm(ctx_, g, x, y, activation, bias, p_.alpha, 0, preActivation)) return;
    g.auxLd = 0;
    g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    g.alignD = alignment(preActivation);
    runGemm(ctx_, g, x, y, preActivation, bias, p_.alpha, 0);
    g.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    g.alignD = alignment(activation);
    runGemm(ctx_, g, x, y, activation, bias, p_.alpha, 0);
  }

  // The bias_grad epilogue's sums where cuBLASLt's epilogue has no
  // algorithm for the call: one more product, `a` times a column of ones.
  void sumRows(MatrixLayout a, const void* data) {
    auto sums = reinterpret_cast<CUdeviceptr>(rowSums_->data);
    if (a.cols == 0) {
      cudaCheck(ctx_.driver.cuMemsetD8Async(sums, 0, static_cast<size_t>(a.rows) * e_, ctx_.stream),
                "cuMemsetD8Async");
      return;
    }
    int64_t stride = 0;
    std::optional<Scratch> temp;
    dense(a, data, stride, 1, temp);
    Scratch ones(ctx_.allocator, static_cast<size_t>(a.cols) * e_);
    uint16_t one = p_.dtype == ir::DType::BFloat16 ? 0x3F80 : 0x3C00; // f16's 1.0 else
    cudaCheck(ctx_.driver.cuMemsetD16Async(reinterpret_cast<CUdeviceptr>(ones.data), one,
                                           static_cast<size_t>(a.cols), ctx_.stream),
              "cuMemsetD16Async");
    Stored sa = *stored(a);
    Gemm g;
    g.types = types_;
    g.transA = sa.transposed;
    g.m = a.rows, g.n = 1, g.k = a.cols;
    g.lda = sa.ld, g.ldb = a.cols, g.ldd = a.rows;
    g.alignA = alignment(data), g.alignB = alignment(ones.data);
    g.alignD = alignment(rowSums_->data);
    runGemm(ctx_, g, data, ones.data, rowSums_->data, nullptr, 1, 0);
  }

  cublasLtEpilogue_t epilogueOf(bool bias, bool swap) const {
    switch (epilogue_) {
    case Epilogue::BiasGrad: return swap ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
    case Epilogue::GeluTanhAux:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::Relu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Epilogue::GeluTanh: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case Epilogue::None: break;
    }
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }

  const ProductShape& p_;
  Types types_;
  Epilogue epilogue_;
  const Tensor* rowSums_;
  const Tensor* activation_;
  const CudaCallContext& ctx_;
  size_t e_;
};

// Whether a tensor is row-major dense (dims of size 1 take any stride).
bool dense(const Tensor& t) {
  int64_t elements = 1;
  for (size_t d = t.sizes.size(); d-- > 0;) {
    if (t.sizes[d] != 1 && t.strides[d] != elements) return false;
    elements *= t.sizes[d];
  }
  return true;
}

int64_t numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t size : t.sizes) n *= size;
  return n;
}

// The bias_grad or gelu_tanh_aux epilogue's one further result, checked
// against the product (null for the other epilogues, which make none).
const Tensor* furtherResult(const std::string& op, Epilogue epilogue, const ProductShape& p,
                            const std::vector<Tensor>& results) {
  if (epilogue != Epilogue::BiasGrad && epilogue != Epilogue::GeluTanhAux) {
    if (!results.empty())
      throw Error(ErrorCode::InvalidArgument,
                  "runtime: " + op + " writes further results only with the bias_grad or "
                                     "gelu_tanh_aux epilogue");
    return nullptr;
  }
  const char* name = epilogue == Epilogue::BiasGrad ? "bias_grad" : "gelu_tanh_aux";
  if (p.dtype != ir::DType::Float16 && p.dtype != ir::DType::BFloat16)
    throw Error(ErrorCode::Unsupported, std::string("runtime: the ") + name +
                                            " epilogue is for f16 and bf16 products, not " +
                                            std::string(ir::name(p.dtype)));
  const Tensor* r = results.size() == 1 ? &results[0] : nullptr;
  bool fits = r && r->dtype == p.dtype && dense(*r) && p.batchSizes.empty();
  const MatrixLayout& c = p.c.matrix;
  if (epilogue == Epilogue::BiasGrad) {
    if (!fits || p.bias || p.alpha != 1 || r->sizes.size() != 1 || r->sizes[0] != c.rows)
      throw Error(ErrorCode::InvalidArgument,
                  "runtime: the bias_grad epilogue takes one unbatched product without bias or "
                  "alpha and one further result: its first operand's row sums, dense, of its "
                  "dtype");
    return r;
  }
  bool denseRows = (c.colStride == 1 || c.cols == 1) && (c.rowStride == c.cols || c.rows == 1);
  bool vectorBias = !p.bias || (p.beta == 1 && p.bias->sizes.size() == 1 &&
                                p.bias->sizes[0] == c.cols && dense(*p.bias));
  if (!fits || numel(*r) != c.rows * c.cols || !denseRows || !vectorBias)
    throw Error(ErrorCode::InvalidArgument,
                "runtime: the gelu_tanh_aux epilogue takes one unbatched product into dense "
                "rows, addmm's bias a [N] vector if any, and one further result: the gelu, "
                "dense, of the product's size and dtype");
  return r;
}

} // namespace

Epilogue parseEpilogue(const std::vector<ir::Attr>& attrs) {
  for (const ir::Attr& a : attrs) {
    if (a.name != "epilogue") continue;
    const auto* name = std::get_if<std::string>(&a.value);
    if (!name)
      throw Error(ErrorCode::InvalidArgument, "runtime: the epilogue attribute is not a name");
    if (name->empty() || *name == "none") return Epilogue::None;
    if (*name == "relu") return Epilogue::Relu;
    if (*name == "gelu_tanh") return Epilogue::GeluTanh;
    if (*name == "bias_grad") return Epilogue::BiasGrad;
    if (*name == "gelu_tanh_aux") return Epilogue::GeluTanhAux;
    throw Error(ErrorCode::InvalidArgument, "runtime: unknown epilogue '" + *name +
                                                "' (have: none, relu, gelu_tanh, bias_grad, "
                                                "gelu_tanh_aux)");
  }
  return Epilogue::None;
}

bool cudaMatrixProduct(const std::string& op, const std::vector<Tensor>& inputs,
                       const std::vector<ir::Attr>& attrs, const Tensor& out,
                       const std::vector<Tensor>& results, const CudaCallContext& context) {
  std::optional<ProductShape> p =
      productShape(op, inputs, numberAttr(attrs, "alpha"), numberAttr(attrs, "beta"), out);
  if (!p) return false;
  std::optional<Types> types = typesOf(out.dtype);
  if (!types)
    throw Error(ErrorCode::Unsupported, "runtime: no CUDA routine for " + op + " of " +
                                            std::string(ir::name(out.dtype)) +
                                            " (have: f32, f16, bf16, f64)");
  Epilogue epilogue = parseEpilogue(attrs);
  if (epilogue != Epilogue::None && epilogue != Epilogue::BiasGrad && p->a.matrix.cols == 0)
    throw Error(ErrorCode::Unsupported,
                "runtime: an epilogue on a product with an empty inner dim");
  const Tensor* further = furtherResult(op, epilogue, *p, results);
  std::vector<Dim> dims = collapse(*p);
  Dim inner = dims.empty() ? Dim{1, 0, 0, 0} : dims.back();
  if (!dims.empty()) dims.pop_back();
  DeviceProduct product(*p, *types, epilogue, further, context);
  size_t e = elementSize(p->dtype);
  std::vector<int64_t> index(dims.size(), 0);
  int64_t outer = 1;
  for (const Dim& d : dims) outer *= d.size;
  for (int64_t n = 0; n < outer; ++n) { // the outer batch dims, row-major
    int64_t offA = 0, offB = 0, offC = 0;
    for (size_t d = 0; d < dims.size(); ++d)
      offA += index[d] * dims[d].a, offB += index[d] * dims[d].b, offC += index[d] * dims[d].c;
    product.run({at(p->a.data, offA, e), at(p->b.data, offB, e), at(p->c.data, offC, e), inner});
    for (size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d].size) break;
      index[d] = 0;
    }
  }
  return true;
}

} // namespace kiln::runtime::detail
