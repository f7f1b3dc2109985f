// memfit exporter: the fleet view over HTTP for Prometheus (/metrics, text format 0.0.4). The machine is
// probed on its own timer (memfit/diagnose/fleet.h), never per scrape: a scrape serves the last rendering,
// so a slow NVML never blocks it.
#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <thread>

#include "commands.h"
#include "memfit/diagnose/fleet.h"
#include "memfit/report/prometheus.h"

namespace memfit::cli {
namespace {

constexpr size_t kServerWorkers = 128;
constexpr size_t kMaxRequestBodyBytes = 64 * 1024;  // a scrape is a GET: no body

// httplib listens with a backlog of 5, compiled into Debian's library. A burst of connections - 100
// clients at once - overflowed it, and a scrape that came behind them waited for TCP's 1 s SYN
// retransmission (the hostile-clients test saw 1.02 s on a loaded machine). On Linux, listen() on a
// listening socket sets its backlog anew; httplib gives no handle on its socket, so this finds the
// process's listening socket on `port` and listens again with the system's largest backlog.
void widen_listen_backlog(int port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    int fd = 0;
    const char* name = entry->d_name;
    if (std::from_chars(name, name + std::strlen(name), fd).ec != std::errc() || fd == ::dirfd(dir)) continue;
    int accepting = 0;
    socklen_t length = sizeof(accepting);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0 || accepting == 0) continue;
    sockaddr_storage address{};
    socklen_t address_length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &address_length) != 0) continue;
    int bound = -1;
    if (address.ss_family == AF_INET) bound = ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
    if (address.ss_family == AF_INET6)
      bound = ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
  ::closedir(dir);
}

struct ExporterOptions {
  std::string listen = "127.0.0.1:9473";
  std::string interval = "5s";
  bool no_gpu = false;
  bool once = false;
};

// "5s", "500ms", "2m" or plain seconds; 50 ms to 1 hour.
Expected<std::chrono::milliseconds> parse_interval(const std::string& text) {
  double scale = 1000;
  std::string number = text;
  if (text.ends_with("ms")) {
    scale = 1;
    number = text.substr(0, text.size() - 2);
  } else if (text.ends_with("s")) {
    number = text.substr(0, text.size() - 1);
  } else if (text.ends_with("m")) {
    scale = 60000;
    number = text.substr(0, text.size() - 1);
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  const double ms = value * scale;
  if (number.empty() || end != number.c_str() + number.size() || !(ms >= 50 && ms <= 3600000))
    return invalid_argument(fmt::format("--interval '{}' must be a duration from 50ms to 1h (5s, 500ms, 2m)",
                                        text.substr(0, 40)));
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

// HOST:PORT, [IPV6]:PORT; port 0 = any free port (said on stderr).
Expected<std::pair<std::string, int>> parse_listen(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return invalid_argument(
        fmt::format("--listen '{}' must be HOST:PORT (127.0.0.1:9473)", text.substr(0, 80)));
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (end != port_text.c_str() + port_text.size() || port < 0 || port > 65535)
    return invalid_argument(fmt::format("--listen '{}': the port must be 0-65535", text.substr(0, 80)));
  return std::pair{host, static_cast<int>(port)};
}

}  // namespace

Action add_exporter_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<ExporterOptions>();
  CLI::Option* listen_option = app.add_option(
      "--listen", options->listen, "HOST:PORT to serve /metrics on (default 127.0.0.1:9473: loopback)");
  CLI::Option* interval_option =
      app.add_option("--interval", options->interval, "How often the machine is probed (default 5s)");
  app.add_flag("--no-gpu", options->no_gpu, "Do not query NVML");
  // A server's options with --once (no server) are refused rather than ignored.
  app.add_flag("--once", options->once, "Probe once, print the metrics on stdout and exit (no server)")
      ->excludes(listen_option)
      ->excludes(interval_option);
  return [options, &io]() -> int {
    auto interval = parse_interval(options->interval);
    if (!interval.ok()) return fail(io, interval.error());
    auto listen = parse_listen(options->listen);
    if (!listen.ok()) return fail(io, listen.error());
    FleetOptions fleet;
    fleet.query_gpu = !options->no_gpu;
    fleet.environment = io.env;
    auto render = [fleet] { return render_prometheus(fleet_metrics(probe_fleet(fleet))); };
    if (options->once) {
      io.out << render();
      return kExitOk;
    }

    // SIGINT/SIGTERM end the server cleanly: blocked here (inherited by every thread made below) and
    // taken by one thread with sigwait.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    httplib::Server server;
    // httplib gives each connection a worker from a fixed pool until the client closes it or is silent
    // for the read timeout. With its defaults (8 workers, 5 s) 50 clients that connect and send nothing -
    // idle keep-alive sockets, a port scanner, a slowloris - held a scrape for 29 s, past Prometheus's
    // 10 s scrape_timeout: the exporter looked down. So: more workers than a metrics endpoint has
    // clients (idle threads cost a stack each, not CPU; past 128 silent ones a scrape waits for the 2 s
    // timeouts: measured 2.0 s beside 200, 6.0 s beside 400), a silent client dropped after 2 s, and a
    // request body (a scrape has none) refused with 413, where httplib's default, no limit, read it whole.
    server.new_task_queue = [] { return new httplib::ThreadPool(kServerWorkers); };
    server.set_read_timeout(std::chrono::seconds(2));
    server.set_keep_alive_timeout(2);
    server.set_payload_max_length(kMaxRequestBodyBytes);
    // httplib's default adds SO_REUSEPORT, which lets a second exporter bind the same port and take half
    // the scrapes; SO_REUSEADDR alone still allows a restart while old connections linger.
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    const auto& [host, port] = *listen;
    int bound = port;
    if (port == 0) {
      bound = server.bind_to_any_port(host);
    } else if (!server.bind_to_port(host, port)) {
      bound = -1;
    }
    if (bound > 0) widen_listen_backlog(bound);
    if (bound <= 0) {
      pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
      return fail(io,
                  unavailable(fmt::format("cannot listen on {}: the port is in use (another exporter?) or "
                                          "the address is not this machine's",
                                          options->listen)));
    }

    std::mutex mu;
    std::condition_variable wake;
    bool stopping = false;
    auto metrics = std::make_shared<const std::string>(render());  // the first scrape has figures
    std::thread prober([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!wake.wait_for(lock, *interval, [&] { return stopping; })) {
        lock.unlock();
        auto fresh = std::make_shared<const std::string>(render());
        lock.lock();
        metrics = std::move(fresh);
      }
    });
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
      std::shared_ptr<const std::string> text;
      {
        std::lock_guard<std::mutex> lock(mu);
        text = metrics;
      }
      res.set_content(*text, kPrometheusContentType);
    });
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("memfit exporter: the metrics are at /metrics\n", "text/plain");
    });
    std::thread signals([&] {
      int signal = 0;
      sigwait(&stop_signals, &signal);
      server.stop();
    });
    io.err << fmt::format("memfit exporter: serving http://{}:{}/metrics (the machine probed every {} ms)\n",
                          host.find(':') != std::string::npos ? "[" + host + "]" : host, bound,
                          interval->count())
           << std::flush;
    server.listen_after_bind();
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    wake.notify_all();
    prober.join();
    // A stop that did not come from a signal (the server failed): wake the signal thread so it can end.
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
    return kExitOk;
  };
}

}  // namespace memfit::cli
