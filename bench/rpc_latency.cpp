// rpc_latency: what the broker hop costs. In one run, over ipc:// endpoints in a
// temporary directory, it times the same 16-byte ping through rpc::Client::call
// (the same frames and parsing on both paths):
//   direct  client -> a server process that answers the envelope itself
//   broker  client -> rpc::Broker (its own process) -> kiln-tracer -> back
// alternating blocks of calls between the two, so that load from elsewhere on the
// host falls on both alike; then counts messages/s of 4 concurrent clients through
// the broker to 1 and to 2 workers. Prints a table and the ratio
// broker_p50 / direct_p50, writes bench/results/rpc_latency-<kind>-<date>.json, and
// kills every child on the way out.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kiln/common/process.h"
#include "kiln/rpc/broker.h"
#include "kiln/rpc/client.h"
#include "kiln/schema/broker.capnp.h"
#include "kiln/schema/tracer.capnp.h"
#include "report.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

constexpr const char* kService = "tracer";
constexpr size_t kPayloadBytes = 16;
constexpr int kClients = 4;
constexpr Millis kStartTimeout{10000};

// ---- children --------------------------------------------------------------

// Child processes, spawned by fork + exec so that no ZeroMQ state crosses a fork.
// Stopped (SIGTERM, then SIGKILL after a grace period) when this goes out of scope;
// killed at once on SIGINT/SIGTERM (through OnStopSignal) or, through
// PR_SET_PDEATHSIG, when this process dies without cleaning up.
class Children {
public:
  ~Children() { // the last started first: workers leave while their broker still runs
    for (;;) {
      pid_t last;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (pids_.empty()) return;
        last = pids_.back();
      }
      stop(last);
    }
  }

  pid_t spawn(const std::vector<std::string>& args) {
    std::lock_guard<std::mutex> lock(mutex_);
    const pid_t pid = spawnProcess(args);
    pids_.push_back(pid);
    return pid;
  }

  void stop(pid_t pid) {
    kill(pid, SIGTERM);
    const auto deadline = Clock::now() + Millis(2000);
    while (waitpid(pid, nullptr, WNOHANG) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(Millis(5));
    kill(pid, SIGKILL); // harmless when it has exited; ESRCH once reaped
    waitpid(pid, nullptr, 0);
    std::lock_guard<std::mutex> lock(mutex_);
    pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
  }

  void killAll() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const pid_t pid : pids_) kill(pid, SIGKILL);
    for (const pid_t pid : pids_) waitpid(pid, nullptr, 0);
    pids_.clear();
  }

private:
  std::mutex mutex_;
  std::vector<pid_t> pids_;
};

// SIGINT/SIGTERM go to one thread, which runs `cleanup` and exits the process.
// Blocks them in the calling thread, so every thread started later blocks them too.
class OnStopSignal {
public:
  explicit OnStopSignal(std::function<void()> cleanup) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::thread([this, cleanup = std::move(cleanup)] {
      int signal = 0;
      sigwait(&signals_, &signal);
      if (done_.load()) return;
      cleanup();
      _exit(128 + signal);
    });
  }
  ~OnStopSignal() {
    done_.store(true);
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }

private:
  sigset_t signals_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// ---- the two servers (children of the benchmark, same binary) -------------

std::atomic<bool> stopServing{false};
void onServeSignal(int) {
  stopServing.store(true);
}

void serveUntilSignalled(const std::function<void()>& pollOnce) {
  std::signal(SIGTERM, onServeSignal);
  std::signal(SIGINT, onServeSignal);
  while (!stopServing.load()) pollOnce();
}

// The baseline: answers the client's envelope itself, doing the framing work
// the broker and worker do together (parse envelope and body, build reply
// header and body), minus the two extra hops.
int serveDirect(const std::string& endpoint) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.bind(endpoint);
  serveUntilSignalled([&] {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, Millis(100)) == 0) return;
    } catch (const zmq::error_t&) {
      return; // EINTR: the loop checks the stop flag
    }
    std::vector<zmq::message_t> frames;
    frames.reserve(3);
    (void)zmq::recv_multipart(socket, std::back_inserter(frames));
    if (frames.size() != 3) return;
    rpc::Message envelope(std::move(frames[1]));
    rpc::Message request(std::move(frames[2]));
    capnp::MallocMessageBuilder reply;
    reply.initRoot<schema::TracerReply>().setPong(request.root<schema::TracerRequest>().getPing());
    capnp::MallocMessageBuilder header(64); // as small as the broker's headers
    auto head = header.initRoot<schema::ReplyHeader>();
    head.setRequestId(envelope.root<schema::Envelope>().getRequestId());
    head.setOk();
    socket.send(frames[0], zmq::send_flags::sndmore);
    socket.send(rpc::toFrame(header), zmq::send_flags::sndmore);
    socket.send(rpc::toFrame(reply), zmq::send_flags::none);
  });
  return 0;
}

// The broker as the launcher runs it: its own process, polling in a loop.
int serveBroker(const std::string& clientEndpoint, const std::string& workerEndpoint) {
  rpc::BrokerOptions options;
  options.clientEndpoint = clientEndpoint;
  options.workerEndpoint = workerEndpoint;
  rpc::Broker broker(options);
  broker.declareService(kService);
  serveUntilSignalled([&] { broker.poll(Millis(100)); });
  return 0;
}

// ---- measuring -------------------------------------------------------------

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
};

Stats summarize(std::vector<double> micros) {
  std::sort(micros.begin(), micros.end());
  const size_t n = micros.size();
  return {micros[n / 2], micros[std::min(n - 1, n * 99 / 100)],
          std::accumulate(micros.begin(), micros.end(), 0.0) / double(n)};
}

struct PingRequest {
  capnp::MallocMessageBuilder message;
  PingRequest() {
    auto payload = message.initRoot<schema::TracerRequest>().initPing().initPayload(kPayloadBytes);
    std::fill(payload.begin(), payload.end(), kj::byte(0x5a));
  }
};

void callPing(rpc::Client& client, PingRequest& ping, Millis timeout = Millis(5000)) {
  auto reply = client.call(kService, ping.message, timeout);
  auto root = reply->root<schema::TracerReply>();
  if (!root.isPong() || root.getPong().getPayload().size() != kPayloadBytes)
    throw Error(ErrorCode::Malformed, "ping answered with something other than its pong");
}

// Times `iterations` sequential calls on each path, alternating blocks of calls
// between the paths so that load from elsewhere on the host falls on both alike.
std::vector<Stats> timeInterleaved(const std::vector<std::string>& endpoints, int warmup,
                                   int iterations) {
  constexpr int kBlocks = 20;
  std::vector<std::unique_ptr<rpc::Client>> clients;
  std::vector<std::vector<double>> micros(endpoints.size());
  PingRequest ping;
  for (const auto& endpoint : endpoints) {
    clients.push_back(std::make_unique<rpc::Client>(endpoint));
    callPing(*clients.back(), ping, kStartTimeout); // waits for the server to come up
    for (int i = 0; i < warmup; ++i) callPing(*clients.back(), ping);
  }
  for (int block = 0; block < kBlocks; ++block) {
    const int calls = iterations * (block + 1) / kBlocks - iterations * block / kBlocks;
    for (size_t path = 0; path < endpoints.size(); ++path) {
      for (int i = 0; i < calls; ++i) {
        const auto start = Clock::now();
        callPing(*clients[path], ping);
        micros[path].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    }
  }
  std::vector<Stats> stats;
  for (auto& samples : micros) stats.push_back(summarize(std::move(samples)));
  return stats;
}

// Messages/s of kClients threads, each with its own Client, calling for `seconds`.
double throughput(const std::string& endpoint, double seconds) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<uint64_t> counts(kClients, 0);
  std::vector<std::exception_ptr> failures(kClients);
  Clock::time_point start, end;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        rpc::Client client(endpoint);
        PingRequest ping;
        callPing(client, ping, kStartTimeout);
        ++ready;
        while (!go.load()) std::this_thread::yield();
        while (Clock::now() < end) {
          callPing(client, ping);
          ++counts[t];
        }
      } catch (...) {
        failures[t] = std::current_exception();
        ++ready;
      }
    });
  }
  while (ready.load() < kClients) std::this_thread::sleep_for(Millis(1));
  start = Clock::now();
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go.store(true);
  for (auto& thread : threads) thread.join();
  for (auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return double(std::accumulate(counts.begin(), counts.end(), uint64_t{0})) / elapsed;
}

// Calls `info` until `count` distinct worker pids have answered.
void awaitWorkers(const std::string& endpoint, size_t count) {
  rpc::Client client(endpoint);
  capnp::MallocMessageBuilder request;
  request.initRoot<schema::TracerRequest>().setInfo();
  std::set<int> pids;
  const auto deadline = Clock::now() + kStartTimeout;
  while (pids.size() < count) {
    if (Clock::now() > deadline)
      throw Error(ErrorCode::DeadlineExceeded, fmt::format("{} workers did not register", count));
    auto reply = client.call(kService, request, kStartTimeout);
    pids.insert(reply->root<schema::TracerReply>().getInfo().getPid());
    std::this_thread::sleep_for(Millis(5));
  }
}

// ---- the report ------------------------------------------------------------

std::string jsonStats(const Stats& s) {
  return fmt::format("{{\"p50\": {:.1f}, \"p99\": {:.1f}, \"mean\": {:.1f}}}", s.p50, s.p99,
                     s.mean);
}

std::string selfDirectory() {
  return fs::read_symlink("/proc/self/exe").parent_path().string();
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app("rpc_latency: the cost of the broker hop, against a direct call");
  int iterations = 20000;
  int warmup = 2000;
  double seconds = 2.0;
  std::string out, kind, tracer = selfDirectory() + "/kiln-tracer";
  std::string serve, endpoint, workerEndpoint;
  app.add_option("--iterations", iterations, "timed sequential calls per path")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed calls before them")->check(CLI::NonNegativeNumber);
  app.add_option("--seconds", seconds, "duration of each throughput run")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out,
                 "results file (default bench/results/rpc_latency-<kind>-<date>.json)");
  app.add_option("--kind", kind, "host kind in the default file name (default <nproc>cpu)");
  app.add_option("--tracer", tracer, "the worker binary")->check(CLI::ExistingFile);
  // How the benchmark starts its own servers.
  app.add_option("--serve", serve)->check(CLI::IsMember({"direct", "broker"}))->group("");
  app.add_option("--endpoint", endpoint)->group("");
  app.add_option("--worker-endpoint", workerEndpoint)->group("");
  CLI11_PARSE(app, argc, argv);

  try {
    if (serve == "direct") return serveDirect(endpoint);
    if (serve == "broker") return serveBroker(endpoint, workerEndpoint);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rpc_latency --serve {}: {}\n", serve, e.what());
    return 1;
  }

  std::string runDir;
  int status = 0;
  try {
    char dirTemplate[] = "/tmp/kiln-rpc-latency-XXXXXX";
    if (!mkdtemp(dirTemplate)) throwSystemError("mkdtemp");
    runDir = dirTemplate;
    if (access(tracer.c_str(), X_OK) != 0)
      throw Error(ErrorCode::NotFound, "no worker binary at " + tracer + " (build kiln-tracer)");
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const std::string directEp = "ipc://" + runDir + "/direct.ipc";
    const std::string clientEp = "ipc://" + runDir + "/clients.ipc";
    const std::string workerEp = "ipc://" + runDir + "/workers.ipc";
    const std::vector<std::string> tracerArgs = {tracer, "--broker", workerEp};
    setenv("KILN_LOG_LEVEL", "warn", 0); // the workers' startup lines are not results

    Children children;
    const OnStopSignal onStop([&children, runDir] {
      children.killAll();
      std::error_code ignored;
      fs::remove_all(runDir, ignored);
    });
    children.spawn({self, "--serve", "direct", "--endpoint", directEp});
    children.spawn(
        {self, "--serve", "broker", "--endpoint", clientEp, "--worker-endpoint", workerEp});
    children.spawn(tracerArgs);
    const auto latency = timeInterleaved({directEp, clientEp}, warmup, iterations);
    const Stats& directStats = latency[0];
    const Stats& brokerStats = latency[1];
    const double oneWorker = throughput(clientEp, seconds);
    children.spawn(tracerArgs);
    awaitWorkers(clientEp, 2);
    const double twoWorkers = throughput(clientEp, seconds);

    const double ratio = brokerStats.p50 / directStats.p50;
    fmt::print("rpc_latency: {} sequential calls per path after {} warm-up (paths interleaved), "
               "{}-byte ping, ipc://\n",
               iterations, warmup, kPayloadBytes);
    fmt::print("  {:<8} {:>9} {:>9} {:>9}\n", "path", "p50 us", "p99 us", "mean us");
    for (const auto& [name, s] :
         {std::pair{"direct", directStats}, std::pair{"broker", brokerStats}})
      fmt::print("  {:<8} {:>9.1f} {:>9.1f} {:>9.1f}\n", name, s.p50, s.p99, s.mean);
    fmt::print("  broker_p50 / direct_p50 = {:.2f}x (target <= 2.2x)\n", ratio);
    fmt::print(
        "  throughput, {} clients, {:.1f} s each: 1 worker {:.0f} msg/s, 2 workers {:.0f} msg/s "
        "({:.2f}x)\n",
        kClients, seconds, oneWorker, twoWorkers, twoWorkers / oneWorker);

    if (out.empty()) out = bench::defaultResultPath("rpc_latency", kind);
    const std::string header = bench::resultHeader("rpc_latency");
    std::ofstream file(out);
    file << "{\n"
         << header
         << fmt::format(
                "  \"config\": {{\"iterations\": {}, \"warmup\": {}, \"payload_bytes\": {}, "
                "\"clients\": {}, \"seconds\": {}, \"transport\": \"ipc\"}},\n",
                iterations, warmup, kPayloadBytes, kClients, seconds)
         << "  \"direct_us\": " << jsonStats(directStats) << ",\n"
         << "  \"broker_us\": " << jsonStats(brokerStats) << ",\n"
         << fmt::format("  \"ratio_p50\": {:.3f},\n  \"target_ratio_p50\": 2.2,\n", ratio)
         << fmt::format(
                "  \"throughput_msgs_per_s\": {{\"workers_1\": {:.0f}, \"workers_2\": {:.0f}}},\n",
                oneWorker, twoWorkers)
         << fmt::format("  \"throughput_ratio_2_over_1\": {:.3f}\n", twoWorkers / oneWorker)
         << "}\n";
    if (!file.flush()) throw Error(ErrorCode::Io, "cannot write " + out);
    fmt::print("  wrote {}\n", out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rpc_latency failed: {}\n", e.what());
    status = 1;
  }
  if (!runDir.empty()) fs::remove_all(runDir);
  return status;
}
