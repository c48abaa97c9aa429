#include "kiln/rpc/service_main.h"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "kiln/common/clock.h"
#include "kiln/common/log.h"
#include "kiln/common/version.h"

namespace kiln::rpc {

static const Clock::time_point kProcessStart = Clock::now();
static Worker* runningWorker = nullptr;

void fillInfo(schema::ServiceInfo::Builder info, const std::string& service) {
  info.setService(service);
  info.setVersion(std::string(version()));
  info.setPid(getpid());
  info.setUptimeMs(static_cast<uint64_t>(millisSince(kProcessStart)));
  info.setBuildId(std::string(buildId()));
}

static void onStopSignal(int) {
  if (runningWorker) runningWorker->stop();
}

int serviceMain(const std::string& service, int argc, char** argv, WorkerFactory makeWorker) {
  CLI::App app("kiln " + service + " service");
  WorkerOptions options;
  options.service = service;
  int heartbeatMs = 250;
  app.add_option("--broker", options.endpoint, "the broker's worker endpoint")->required();
  app.add_option("--service-name", options.service, "register under this name");
  app.add_option("--heartbeat-ms", heartbeatMs, "heartbeat interval")->check(CLI::Range(1, 60000));
  app.add_option("--liveness", options.liveness, "missed heartbeats before reconnecting")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  options.heartbeat = Millis(heartbeatMs);

  initLogger(service);
  try {
    auto worker = makeWorker(std::move(options));
    runningWorker = worker.get();
    struct sigaction action {};
    action.sa_handler = onStopSignal;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    worker->run();
    runningWorker = nullptr;
    return 0;
  } catch (const std::exception& e) {
    log().error("{} service failed: {}", service, e.what());
    return 1;
  }
}

} // namespace kiln::rpc
