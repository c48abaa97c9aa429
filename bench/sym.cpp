// sym_bench: how many symbolic expressions libs/sym builds and simplifies per
// second. Each workload repeats one small builder pattern over 8 size symbols
// with constants that change every iteration, so nearly every call creates a
// new node; a second pass over the same rounds measures the intern-table hits.
// Counts builder calls (operators, floorDiv, mod, min, ...), each returning a
// canonical node. Prints a table, writes bench/results/sym-<kind>-<date>.json.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/sym/symbol_table.h"
#include "report.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

constexpr int kSymbols = 8;
constexpr double kTarget = 1e6; // builder calls per second

struct Workload {
  const char* name;
  const char* pattern;
  int callsPerIteration;
  std::function<Expr(const std::vector<Expr>&, int64_t)> build;
};

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"linear", "s_i*k + c", 2,
       [](const auto& s, int64_t i) { return s[i % 8] * (i % 61 + 2) + i; }},
      {"sum", "s_i*k + s_j + c", 3,
       [](const auto& s, int64_t i) { return s[i % 8] * (i % 61 + 2) + s[(i / 8) % 8] + i; }},
      {"product", "s_i*s_j*k", 2,
       [](const auto& s, int64_t i) { return s[i % 8] * s[(i / 8) % 8] * (i + 2); }},
      {"floordiv", "(s_i*k + c)//d", 3,
       [](const auto& s, int64_t i) { return floorDiv(s[i % 8] * (i % 13 + 2) + i, i % 7 + 2); }},
      {"mod", "(s_i*k + c)%d", 3,
       [](const auto& s, int64_t i) { return mod(s[i % 8] * (i % 13 + 2) + i, i % 7 + 2); }},
      {"index", "s_i*s_j + s_k*c + min(s_i, c)", 5,
       [](const auto& s, int64_t i) {
         return s[i % 8] * s[(i + 3) % 8] + s[(i / 8) % 8] * i + min(s[i % 8], i);
       }},
  };
  return all;
}

struct Rate {
  double created = 0; // calls/s building new nodes in a fresh table
  double hits = 0;    // calls/s rebuilding the same expressions
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rounds of `iterations` in fresh tables until `seconds` have been spent building.
Rate measure(const Workload& w, int iterations, double seconds) {
  double createTime = 0, hitTime = 0;
  uint64_t createCalls = 0, hitCalls = 0, sink = 0;
  while (createTime < seconds) {
    SymbolTable table;
    std::vector<Expr> s;
    for (int i = 0; i < kSymbols; ++i) s.push_back(table.createBacked(2 + i));
    for (int pass = 0; pass < 2; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < iterations; ++i) sink += w.build(s, i).hash();
      (pass == 0 ? createTime : hitTime) += secondsSince(start);
      (pass == 0 ? createCalls : hitCalls) += uint64_t(iterations) * w.callsPerIteration;
    }
  }
  if (sink == 42) std::puts(""); // keeps the results alive
  return {double(createCalls) / createTime, double(hitCalls) / hitTime};
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app("sym_bench: symbolic expressions built and simplified per second");
  double seconds = 1.0;
  int iterations = 100000;
  std::string out, kind;
  app.add_option("--seconds", seconds, "building time per workload")->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "iterations per fresh table")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out, "results file (default bench/results/sym-<kind>-<date>.json)");
  app.add_option("--kind", kind, "host kind in the default file name (default <nproc>cpu)");
  CLI11_PARSE(app, argc, argv);

  try {
    fmt::print("sym_bench: builder calls per second, {} symbols, {} iterations per fresh table, "
               "{:.1f} s per workload\n",
               kSymbols, iterations, seconds);
    fmt::print("  {:<9} {:<30} {:>12} {:>12}\n", "workload", "pattern", "new M/s", "hit M/s");
    std::vector<std::pair<const Workload*, Rate>> rates;
    double slowest = 0;
    for (const Workload& w : workloads()) {
      const Rate r = measure(w, iterations, seconds);
      rates.emplace_back(&w, r);
      slowest = rates.size() == 1 ? r.created : std::min(slowest, r.created);
      fmt::print("  {:<9} {:<30} {:>12.2f} {:>12.2f}\n", w.name, w.pattern, r.created / 1e6,
                 r.hits / 1e6);
    }
    fmt::print("  slowest: {:.2f} M new nodes/s (target >= {:.1f} M/s): {}\n", slowest / 1e6,
               kTarget / 1e6, slowest >= kTarget ? "met" : "NOT met");

    if (out.empty()) out = bench::defaultResultPath("sym", kind);
    const std::string header = bench::resultHeader("sym");
    std::ofstream file(out);
    file << "{\n"
         << header
         << fmt::format("  \"config\": {{\"symbols\": {}, \"iterations\": {}, \"seconds\": {}}},\n",
                        kSymbols, iterations, seconds)
         << "  \"calls_per_s\": {\n";
    for (size_t i = 0; i < rates.size(); ++i)
      file << fmt::format("    {}: {{\"pattern\": {}, \"new\": {:.0f}, \"hit\": {:.0f}}}{}\n",
                          bench::jsonString(rates[i].first->name),
                          bench::jsonString(rates[i].first->pattern), rates[i].second.created,
                          rates[i].second.hits, i + 1 < rates.size() ? "," : "");
    file << "  },\n"
         << fmt::format("  \"slowest_new_per_s\": {:.0f},\n  \"target_per_s\": {:.0f}\n", slowest,
                        kTarget)
         << "}\n";
    if (!file.flush()) throw Error(ErrorCode::Io, "cannot write " + out);
    fmt::print("  wrote {}\n", out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "sym_bench failed: {}\n", e.what());
    return 1;
  }
  return 0;
}
