#include "kiln/launcher/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml.hpp>

#include "kiln/common/error.h"

namespace kiln::launcher {

extern const char* const kEmbeddedStackToml; // generated from configs/stack.toml

static const std::vector<std::string> kPipelineOrder = {"tracer", "guards", "shapes", "partitioner",
                                                        "codegen"};

const std::string& StackConfig::embeddedDefault() {
  static const std::string text = kEmbeddedStackToml;
  return text;
}

namespace {

// Reads optional keys of one table, checking types and ranges with the key's full name.
class Table {
public:
  Table(const toml::value& root, std::string name, std::string origin)
      : name_(std::move(name)), origin_(std::move(origin)) {
    if (root.contains(name_)) table_ = &root.at(name_);
    if (table_ && !table_->is_table()) fail("", "must be a table");
  }

  std::string string(const char* key, std::string fallback) const {
    const toml::value* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "must be a string");
    return v->as_string().str;
  }

  int64_t integer(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    const toml::value* v = find(key);
    if (!v) return fallback;
    if (!v->is_integer()) fail(key, "must be an integer");
    const int64_t value = v->as_integer();
    if (value < lo || value > hi)
      fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
    return value;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    const std::string full = key.empty() ? name_ : name_ + "." + key;
    throw Error(ErrorCode::InvalidArgument, fmt::format("{}: {} {}", origin_, full, what));
  }

private:
  const toml::value* find(const char* key) const {
    if (!table_ || !table_->contains(key)) return nullptr;
    return &table_->at(key);
  }

  std::string name_;
  std::string origin_;
  const toml::value* table_ = nullptr;
};

int pipelineRank(const std::string& name) {
  auto it = std::find(kPipelineOrder.begin(), kPipelineOrder.end(), name);
  return static_cast<int>(it - kPipelineOrder.begin());
}

} // namespace

StackConfig StackConfig::parse(const std::string& text, const std::string& origin) {
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, origin);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("{}: not valid TOML", origin), {},
                e.what());
  }

  StackConfig config;
  const Table stack(root, "stack", origin);
  config.name = stack.string("name", config.name);
  if (config.name.empty() || config.name.find('/') != std::string::npos)
    stack.fail("name", "must be a non-empty name without '/'");
  config.runDir = stack.string("run_dir", "");
  config.shmBytes = static_cast<size_t>(
      stack.integer("shm_bytes", static_cast<int64_t>(config.shmBytes), 1 << 20, int64_t{1} << 40));
  config.readyTimeout =
      Millis(stack.integer("ready_timeout_ms", config.readyTimeout.count(), 1, 3600000));

  const Table broker(root, "broker", origin);
  config.heartbeat = Millis(broker.integer("heartbeat_ms", config.heartbeat.count(), 1, 60000));
  config.liveness = static_cast<int>(broker.integer("liveness", config.liveness, 1, 100));
  config.maxAttempts = static_cast<int>(broker.integer("max_attempts", config.maxAttempts, 1, 100));
  config.maxQueue = static_cast<size_t>(broker.integer("max_queue", 10000, 1, 10000000));

  const Table supervisor(root, "supervisor", origin);
  config.backoffInitial =
      Millis(supervisor.integer("backoff_initial_ms", config.backoffInitial.count(), 1, 3600000));
  config.backoffMax = Millis(supervisor.integer("backoff_max_ms", config.backoffMax.count(),
                                                config.backoffInitial.count(), 3600000));
  config.crashBudget =
      static_cast<int>(supervisor.integer("crash_budget", config.crashBudget, 0, 100000));
  config.crashWindow = std::chrono::seconds(
      supervisor.integer("crash_window_s", config.crashWindow.count(), 1, 86400));
  config.hangGrace =
      Millis(supervisor.integer("hang_grace_ms", config.hangGrace.count(), 0, 86400000));
  config.stopTimeout =
      Millis(supervisor.integer("stop_timeout_ms", config.stopTimeout.count(), 1, 600000));

  if (root.contains("services")) {
    const toml::value& services = root.at("services");
    if (!services.is_table())
      Table(root, "services", origin).fail("", "must be a table of services");
    for (const auto& [name, value] : services.as_table()) {
      const Table table(services, name, origin + ": services");
      ServiceConfig service;
      service.name = name;
      if (name.empty() || name.size() > 64 || name.rfind("kiln.", 0) == 0)
        table.fail("", "is not a valid service name (1..64 bytes, not starting with 'kiln.')");
      service.binary = table.string("binary", "kiln-" + name);
      service.workers = static_cast<int>(table.integer("workers", 1, 0, 64));
      config.services.push_back(std::move(service));
    }
  }
  std::sort(config.services.begin(), config.services.end(), [](const auto& a, const auto& b) {
    return std::make_pair(pipelineRank(a.name), a.name) <
           std::make_pair(pipelineRank(b.name), b.name);
  });
  return config;
}

StackConfig StackConfig::load(const std::string& path) {
  if (path.empty()) return parse(embeddedDefault(), "configs/stack.toml (embedded)");
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::NotFound, fmt::format("cannot read config {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const ServiceConfig* StackConfig::service(const std::string& name) const {
  for (const auto& s : services)
    if (s.name == name) return &s;
  return nullptr;
}

} // namespace kiln::launcher
