// The reference interpreter's matrix products, indexing ops, softmax and
// normalizations, one element at a time with double (or int64) accumulation.
#include <cmath>
#include <cstdint>

#include "interpreter_ops.h"
#include "kiln/common/error.h"
#include "kiln/ir/philox.h"

namespace kiln::ir::detail {
namespace {

[[noreturn]] void invalid(const std::string& op, const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "interpret: " + op + ": " + message);
}

// The last two dims swapped: a view.
HostTensor transposed(HostTensor t) {
  size_t r = t.sizes.size();
  if (r >= 2) {
    std::swap(t.sizes[r - 1], t.sizes[r - 2]);
    std::swap(t.strides[r - 1], t.strides[r - 2]);
  }
  return t;
}

// out = beta * bias + alpha * (a @ b), torch.matmul's cases: a 1-d a gains a
// leading dim of 1 and a 1-d b a trailing one, which the result drops; batch
// dims broadcast (indices align to the right, as `at` reads them).
void matmul(const HostTensor& a, const HostTensor& b, const HostTensor* bias, double alpha,
            double beta, const HostTensor& out) {
  bool vectorA = a.sizes.size() == 1, vectorB = b.sizes.size() == 1;
  int64_t inner = a.sizes.back();
  size_t rank = out.sizes.size();
  size_t batch = rank - (vectorA ? 0 : 1) - (vectorB ? 0 : 1);
  bool isFloat = isFloating(out.dtype);
  eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> ai(idx.begin(), idx.begin() + batch), bi = ai;
    if (!vectorA) ai.push_back(idx[batch]);
    ai.push_back(0);
    bi.push_back(0);
    if (!vectorB) bi.push_back(idx[rank - 1]);
    size_t ak = ai.size() - 1, bk = vectorB ? bi.size() - 1 : bi.size() - 2;
    double f = 0;
    int64_t n = 0;
    for (int64_t k = 0; k < inner; ++k) {
      ai[ak] = bi[bk] = k;
      if (isFloat)
        f += castToF(out.dtype, loadElementF(a, ai)) * castToF(out.dtype, loadElementF(b, bi));
      else
        n += loadElementI(a, ai) * loadElementI(b, bi);
    }
    // A factor of 0 drops its term, NaNs included, as torch's addmm.
    bool withBias = bias && beta != 0;
    if (isFloat) {
      double v =
          (alpha != 0 ? alpha * f : 0.0) + (withBias ? beta * loadElementF(*bias, idx) : 0.0);
      storeElementF(out, idx, v);
    } else {
      int64_t v = int64_t(alpha) * n + (withBias ? int64_t(beta) * loadElementI(*bias, idx) : 0);
      storeElementI(out, idx, v);
    }
  });
}

int64_t checkedIndex(const std::string& op, int64_t i, int64_t size) {
  if (i < 0 || i >= size)
    invalid(op, "index " + std::to_string(i) + " is out of range for size " + std::to_string(size));
  return i;
}

// gather's and scatter_add's tensors are of one rank, except that 0-d and 1-d
// stand for each other (a 0-d tensor acts as one of size 1, as in torch): the
// position `idx` in a tensor of `rank` dims.
std::vector<int64_t> asRank(std::vector<int64_t> idx, size_t rank) {
  idx.resize(rank, 0);
  return idx;
}
int64_t sizeAt(const HostTensor& t, size_t d) {
  return t.sizes.empty() ? 1 : t.sizes[d];
}
size_t wrapped(double dim, size_t rank) {
  int64_t r = std::max<int64_t>(int64_t(rank), 1), i = int64_t(dim);
  return size_t(i < 0 ? i + r : i);
}

void copyElement(const HostTensor& from, const std::vector<int64_t>& at, const HostTensor& out,
                 const std::vector<int64_t>& idx) {
  if (isFloating(from.dtype))
    storeElementF(out, idx, loadElementF(from, at));
  else
    storeElementI(out, idx, loadElementI(from, at));
}


// layer_norm and rms_norm over the last `k` dims.
void normalize(const std::string& op, const HostTensor& x, size_t k, const HostTensor* weight,
               const HostTensor* bias, double eps, const HostTensor& out) {
  std::vector<int64_t> outer(out.sizes.begin(), out.sizes.end() - k);
  std::vector<int64_t> inner(out.sizes.end() - k, out.sizes.end());
  if (std::isnan(eps)) eps = epsilon(opmath(out.dtype)); // rms_norm's default, as torch's
  eachIndex(outer, [&](const std::vector<int64_t>& o) {
    std::vector<std::vector<int64_t>> where;
    std::vector<double> v;
    eachIndex(inner, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> idx = o;
      idx.insert(idx.end(), i.begin(), i.end());
      where.push_back(idx);
      v.push_back(loadElementF(x, idx));
    });
    double n = double(v.size()), mean = 0, squares = 0;
    for (double e : v) mean += e / n;
    for (double e : v) squares += (op == "rms_norm" ? e * e : (e - mean) * (e - mean)) / n;
    for (size_t j = 0; j < v.size(); ++j) {
      double y = (op == "rms_norm" ? v[j] : v[j] - mean) / std::sqrt(squares + eps);
      if (weight) y *= loadElementF(*weight, where[j]);
      if (bias) y += loadElementF(*bias, where[j]);
      storeElementF(out, where[j], y);
    }
  });
}

// Whether dropout of probability p keeps the element at `counter` of the stream of `seed`.
bool dropoutKeeps(uint64_t seed, uint64_t counter, double p) {
  return philoxUniform(seed, counter) >= p;
}

// An attention's dropout (attention.h): the factor of each of the [..., L, S]
// weights, 0 for a dropped one, 1 / (1 - p) for a kept one (as dropout's).
struct AttentionDropout {
  double p = 0;
  uint64_t seed = 0, offset = 0;
  double factor(uint64_t weight) const {
    if (p == 0) return 1;
    return dropoutKeeps(seed, offset + weight, p) ? 1 / (1 - p) : 0;
  }
};

// The row-major position of a query row (idx's dims but the last, of `sizes`).
uint64_t rowPosition(const std::vector<int64_t>& idx, const std::vector<int64_t>& sizes) {
  uint64_t at = 0;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) at = at * uint64_t(sizes[d]) + uint64_t(idx[d]);
  return at;
}

// softmax(q k^T * scale + mask) v, one query row at a time; a bool mask
// keeps where true, a float mask is added; is_causal keeps s <= l; dropout
// scales each weight by its factor.
void attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
               const HostTensor* mask, bool causal, double scale, const AttentionDropout& drop,
               const HostTensor& out) {
  size_t n = q.sizes.size();
  int64_t embed = q.sizes[n - 1], seq = k.sizes[n - 2];
  std::vector<int64_t> rows = out.sizes;
  rows[n - 1] = 1;
  eachIndex(rows, [&](std::vector<int64_t> idx) {
    int64_t l = idx[n - 2];
    uint64_t firstWeight = rowPosition(idx, out.sizes) * uint64_t(seq);
    std::vector<double> w(seq);
    double max = -INFINITY, sum = 0;
    for (int64_t s = 0; s < seq; ++s) {
      std::vector<int64_t> qi = idx, ki = idx, mi = idx;
      ki[n - 2] = s;
      mi[n - 1] = s;
      double dot = 0;
      for (int64_t e = 0; e < embed; ++e) {
        qi[n - 1] = ki[n - 1] = e;
        dot += loadElementF(q, qi) * loadElementF(k, ki);
      }
      w[s] = embed ? dot * scale : 0; // as torch: scores over no embedding are 0
      if (causal && s > l) w[s] = -INFINITY;
      if (mask && mask->dtype == DType::Bool && !loadElementI(*mask, mi)) w[s] = -INFINITY;
      if (mask && mask->dtype != DType::Bool) w[s] += loadElementF(*mask, mi);
      max = std::max(max, w[s]);
    }
    for (double& x : w) sum += (x = std::exp(x - max));
    // A row whose every score is masked attends to nothing: 0, as torch's safe softmax.
    if (max == -INFINITY) std::fill(w.begin(), w.end(), 0.0), sum = 1;
    for (int64_t e = 0; e < out.sizes[n - 1]; ++e) {
      std::vector<int64_t> vi = idx, oi = idx;
      oi[n - 1] = vi[n - 1] = e;
      double acc = 0;
      for (int64_t s = 0; s < seq; ++s) {
        vi[n - 2] = s;
        acc += w[s] / sum * drop.factor(firstWeight + uint64_t(s)) * loadElementF(v, vi);
      }
      storeElementF(out, oi, acc);
    }
  });
}

// attention_lse, attention_grad_query and attention_grad_key_value (ops_nn.cpp):
// flash attention's backward, from the scores recomputed per batch element.
void attentionPiece(const std::string& op, const HostTensor& q, const HostTensor& k,
                    const HostTensor& v, const HostTensor* grad, const HostTensor* lse,
                    const HostTensor* forwardOut, const HostTensor* mask, bool causal, double scale,
                    const AttentionDropout& drop, const HostTensor& out) {
  size_t n = q.sizes.size();
  int64_t rowsL = q.sizes[n - 2], rowsS = k.sizes[n - 2], embed = q.sizes[n - 1],
          embedV = v.sizes[n - 1];
  std::vector<int64_t> batch(q.sizes.begin(), q.sizes.end() - 2);
  eachIndex(batch, [&](const std::vector<int64_t>& b) {
    std::vector<int64_t> firstRow = b;
    firstRow.push_back(0);
    uint64_t firstWeight = rowPosition(firstRow, q.sizes) * uint64_t(rowsS);
    auto factor = [&](int64_t l, int64_t s) {
      return drop.factor(firstWeight + uint64_t(l * rowsS + s));
    };
    auto at = [&](int64_t row, int64_t col) {
      std::vector<int64_t> idx = b;
      idx.push_back(row);
      idx.push_back(col);
      return idx;
    };
    auto rowAt = [&](int64_t row) {
      std::vector<int64_t> idx = b;
      idx.push_back(row);
      return idx;
    };
    auto dot = [&](const HostTensor& a, int64_t i, const HostTensor& c, int64_t j, int64_t width) {
      double sum = 0;
      for (int64_t e = 0; e < width; ++e) sum += loadElementF(a, at(i, e)) * loadElementF(c, at(j, e));
      return sum;
    };
    // p[l][s]: the scores (lse) or the probabilities recomputed from the given lse.
    std::vector<std::vector<double>> p(rowsL, std::vector<double>(rowsS));
    for (int64_t l = 0; l < rowsL; ++l) {
      double max = -INFINITY, sum = 0;
      for (int64_t s = 0; s < rowsS; ++s) {
        p[l][s] = causal && s > l ? -INFINITY : embed ? dot(q, l, k, s, embed) * scale : 0;
        if (mask && mask->dtype == DType::Bool && !loadElementI(*mask, at(l, s)))
          p[l][s] = -INFINITY;
        if (mask && mask->dtype != DType::Bool) p[l][s] += loadElementF(*mask, at(l, s));
        max = std::max(max, p[l][s]);
      }
      if (op == "attention_lse") {
        for (double x : p[l]) sum += std::exp(x - max);
        storeElementF(out, rowAt(l), max + std::log(sum));
        continue;
      }
      double rowLse = loadElementF(*lse, rowAt(l));
      for (double& x : p[l]) x = std::exp(x - rowLse);
    }
    if (op == "attention_lse") return;
    // dS = P * (dO V^T * factor - delta) * scale, delta a row's sum of dO * O
    std::vector<std::vector<double>> ds(rowsL, std::vector<double>(rowsS));
    for (int64_t l = 0; l < rowsL; ++l) {
      double rowDelta = dot(*grad, l, *forwardOut, l, embedV);
      for (int64_t s = 0; s < rowsS; ++s)
        ds[l][s] = p[l][s] * (dot(*grad, l, v, s, embedV) * factor(l, s) - rowDelta) * scale;
    }
    if (op == "attention_grad_query") {
      for (int64_t l = 0; l < rowsL; ++l)
        for (int64_t e = 0; e < embed; ++e) {
          double sum = 0;
          for (int64_t s = 0; s < rowsS; ++s) sum += ds[l][s] * loadElementF(k, at(s, e));
          storeElementF(out, at(l, e), sum);
        }
      return;
    }
    for (int64_t s = 0; s < rowsS; ++s) {
      for (int64_t e = 0; e < embed; ++e) { // dK = dS^T Q
        double sum = 0;
        for (int64_t l = 0; l < rowsL; ++l) sum += ds[l][s] * loadElementF(q, at(l, e));
        storeElementF(out, at(s, e), sum);
      }
      for (int64_t e = 0; e < embedV; ++e) { // dV = (P * factor)^T dO
        double sum = 0;
        for (int64_t l = 0; l < rowsL; ++l)
          sum += p[l][s] * factor(l, s) * loadElementF(*grad, at(l, e));
        storeElementF(out, at(s, embed + e), sum);
      }
    }
  });
}

// cross_entropy as torch: with class indices, the weighted nll of the target
// class mixed with the weighted mean over classes by label_smoothing ls:
// (1 - ls) * -w[y] * logp[y] + ls / C * -sum_c w[c] * logp[c], ignore_index
// skipped, 'mean' dividing by the summed w[y] of the targets kept; with class
// probabilities t, -sum_c w[c] * logp[c] * (t[c] * (1 - ls) + ls / C), 'mean'
// dividing by the number of samples.
void crossEntropy(const HostTensor& x, const HostTensor& target, const HostTensor* weight,
                  const std::string& reduction, int64_t ignore, double smoothing,
                  const HostTensor& out) {
  size_t classDim = x.sizes.size() == 1 ? 0 : 1;
  int64_t classes = x.sizes[classDim];
  bool probabilities = isFloating(target.dtype);
  std::vector<int64_t> batch = x.sizes;
  batch.erase(batch.begin() + classDim);
  double total = 0, divisor = 0;
  auto w = [&](int64_t c) { return weight ? loadElementF(*weight, {c}) : 1.0; };
  eachIndex(batch, [&](const std::vector<int64_t>& b) {
    std::vector<int64_t> xi = b;
    xi.insert(xi.begin() + classDim, 0);
    std::vector<double> logp(classes);
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      xi[classDim] = c, max = std::max(max, logp[c] = loadElementF(x, xi));
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(logp[c] - max);
    for (double& l : logp) l = castToF(x.dtype, l - max - std::log(sum)); // log_softmax's dtype
    double loss = 0;
    if (probabilities) {
      for (int64_t c = 0; c < classes; ++c) {
        xi[classDim] = c;
        double t = loadElementF(target, xi);
        if (smoothing != 0) { // in the target's dtype, scalars included, as torch
          auto in = [&](double v) { return castToF(target.dtype, v); };
          t = in(in(t * in(1 - smoothing)) + in(smoothing / double(classes)));
        }
        loss -= w(c) * logp[c] * t;
      }
      divisor += 1;
    } else if (int64_t y = loadElementI(target, b); y != ignore) {
      y = checkedIndex("cross_entropy", y, classes);
      double smooth = 0;
      for (int64_t c = 0; c < classes; ++c) smooth -= w(c) * logp[c];
      loss = -(1 - smoothing) * w(y) * logp[y] + smoothing / double(classes) * smooth;
      divisor += w(y);
    }
    total += loss;
    if (reduction == "none") storeElementF(out, b, loss);
  });
  if (reduction == "sum") storeElementF(out, {}, total);
  if (reduction == "mean") storeElementF(out, {}, total / divisor);
}

// dropout: element i (row-major over the result) is kept, scaled by 1 / (1 - p),
// when its draw from counter offset + i (philox.h) is >= p; train=False copies.
// The product is computed in opmath (float for f32, f16 and bf16), as torch.
void dropout(const HostTensor& x, int64_t seed, int64_t offset, double p, bool train,
             const HostTensor& out) {
  uint64_t i = 0;
  double scale = train ? 1 / (1 - p) : 1.0;
  bool wide = out.dtype == DType::Float64;
  eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    bool keep = !train || dropoutKeeps(uint64_t(seed), uint64_t(offset) + i++, p);
    double v = loadElementF(x, idx);
    double kept = wide ? v * scale : double(float(v) * float(scale));
    storeElementF(out, idx, keep ? kept : 0.0);
  });
}

// The dropout of an attention call: its dropout_p with its seed and offset.
AttentionDropout attentionDropout(const TensorArg& tensor, const NumberArg& number) {
  AttentionDropout drop;
  drop.p = number("dropout_p");
  if (drop.p == 0) return drop;
  drop.seed = uint64_t(tensor("seed")->toInts().at(0));
  drop.offset = uint64_t(tensor("offset")->toInts().at(0));
  return drop;
}

} // namespace

bool runLinalg(const std::string& op, const TensorArg& tensor, const NumberArg& number,
               const StringArg& string, HostTensor& out) {
  if (op == "mm" || op == "bmm") {
    matmul(*tensor("self"), *tensor("mat2"), nullptr, 1, 0, out);
  } else if (op == "matmul") {
    matmul(*tensor("self"), *tensor("other"), nullptr, 1, 0, out);
  } else if (op == "addmm") {
    matmul(*tensor("mat1"), *tensor("mat2"), tensor("self"), number("alpha"), number("beta"), out);
  } else if (op == "linear") {
    matmul(*tensor("input"), transposed(*tensor("weight")), tensor("bias"), 1, 1, out);
  } else if (op == "index_select" || op == "gather") {
    const HostTensor& self = *tensor("self");
    const HostTensor& index = *tensor("index");
    size_t d = wrapped(number("dim"), self.sizes.size());
    eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> which =
          op == "gather" ? idx : asRank({idx.empty() ? 0 : idx[d]}, index.sizes.size());
      int64_t i = checkedIndex(op, loadElementI(index, which), sizeAt(self, d));
      std::vector<int64_t> at = asRank(idx, self.sizes.size());
      if (!at.empty()) at[d] = i;
      copyElement(self, at, out, idx);
    });
  } else if (op == "scatter_add") {
    const HostTensor& self = *tensor("self");
    const HostTensor& index = *tensor("index");
    const HostTensor& src = *tensor("src");
    eachIndex(out.sizes,
              [&](const std::vector<int64_t>& idx) { copyElement(self, idx, out, idx); });
    size_t d = wrapped(number("dim"), self.sizes.size());
    eachIndex(index.sizes, [&](const std::vector<int64_t>& idx) {
      int64_t i = checkedIndex(op, loadElementI(index, idx), sizeAt(out, d));
      std::vector<int64_t> at = asRank(idx, out.sizes.size());
      std::vector<int64_t> from = asRank(idx, src.sizes.size());
      if (!at.empty()) at[d] = i;
      if (isFloating(out.dtype))
        storeElementF(out, at, loadElementF(out, at) + loadElementF(src, from));
      else
        storeElementI(out, at, loadElementI(out, at) + loadElementI(src, from));
    });
  } else if (op == "layer_norm" || op == "rms_norm") {
    normalize(op, *tensor("input"), size_t(number("normalized_shape")), tensor("weight"),
              tensor("bias"), number("eps"), out);
  } else if (op == "scaled_dot_product_attention") {
    double scale = number("scale"); // NaN when absent: 1 / sqrt(E)
    if (std::isnan(scale)) scale = 1 / std::sqrt(double(tensor("query")->sizes.back()));
    attention(*tensor("query"), *tensor("key"), *tensor("value"), tensor("attn_mask"),
              number("is_causal") != 0, scale, attentionDropout(tensor, number), out);
  } else if (op == "attention_lse" || op == "attention_grad_query" ||
             op == "attention_grad_key_value") {
    bool lse = op == "attention_lse";
    double scale = number("scale"); // NaN when absent: 1 / sqrt(E)
    if (std::isnan(scale)) scale = 1 / std::sqrt(double(tensor("query")->sizes.back()));
    attentionPiece(op, *tensor("query"), *tensor("key"), *tensor("value"),
                   lse ? nullptr : tensor("grad"), lse ? nullptr : tensor("lse"),
                   lse ? nullptr : tensor("out"), tensor("attn_mask"), number("is_causal") != 0,
                   scale, lse ? AttentionDropout{} : attentionDropout(tensor, number), out);
  } else if (op == "cross_entropy") {
    crossEntropy(*tensor("input"), *tensor("target"), tensor("weight"), string("reduction"),
                 int64_t(number("ignore_index")), number("label_smoothing"), out);
  } else if (op == "dropout") {
    dropout(*tensor("input"), tensor("seed")->toInts().at(0), tensor("offset")->toInts().at(0),
            number("p"), number("train") != 0, out);
  } else if (op == "embedding") {
    const HostTensor& weight = *tensor("weight");
    const HostTensor& indices = *tensor("indices");
    eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> row(idx.begin(), idx.end() - 1);
      int64_t i = checkedIndex(op, loadElementI(indices, row), weight.sizes[0]);
      copyElement(weight, {i, idx.back()}, out, idx);
    });
  } else if (op == "softmax" || op == "log_softmax") {
    const HostTensor& self = *tensor("self");
    int64_t rank = std::max<int64_t>(int64_t(self.sizes.size()), 1);
    int64_t dim = int64_t(number("dim"));
    size_t d = size_t(dim < 0 ? dim + rank : dim);
    std::vector<int64_t> outer = out.sizes;
    int64_t n = outer.empty() ? 1 : outer[d];
    if (!outer.empty()) outer[d] = 1;
    eachIndex(outer, [&](std::vector<int64_t> idx) { // one slice along d at a time
      std::vector<double> x(n);
      double max = -INFINITY, sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        if (!idx.empty()) idx[d] = k;
        x[k] = castToF(out.dtype, loadElementF(self, idx));
        max = std::max(max, x[k]);
      }
      for (double v : x) sum += std::exp(v - max);
      for (int64_t k = 0; k < n; ++k) {
        if (!idx.empty()) idx[d] = k;
        double v = op == "softmax" ? std::exp(x[k] - max) / sum : x[k] - max - std::log(sum);
        storeElementF(out, idx, v);
      }
    });
  } else {
    return false;
  }
  return true;
}

} // namespace kiln::ir::detail
