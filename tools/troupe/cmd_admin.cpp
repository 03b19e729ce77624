// troupe admin: the console of a running cluster (docs/admin.md). One command per call, or an
// interactive console (GNU readline: line editing and history) when none is given; `watch`
// follows the event stream; `keygen` writes a CURVE key pair.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>
#include <fstream>
#include <iostream>
#include <sstream>

#include <readline/history.h>
#include <readline/readline.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include "actors/control/admin_client.h"
#include "actors/control/admin_endpoint.h"
#include "runtime/admin/console_text.h"
#include "runtime/common/error.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "topology/topology.h"

namespace troupe::cli {

namespace {

int keygen(const std::vector<std::string>& pos) {
  const std::string prefix = pos.empty() ? "admin" : pos.front();
  const auto pair = actors::curve_keypair();
  const std::string secret = prefix + ".key", pub = prefix + ".pub";
  {
    const mode_t old = ::umask(077);  // the secret key readable by its owner only
    std::ofstream out(secret, std::ios::trunc);
    ::umask(old);
    if (!out) throw input_error("admin keygen: cannot write " + secret);
    out << pair.secret_key << "\n";
  }
  std::ofstream out(pub, std::ios::trunc);
  if (!out) throw input_error("admin keygen: cannot write " + pub);
  out << pair.public_key << "\n";
  std::printf("wrote %s (secret key, mode 0600) and %s (public key: %s)\n", secret.c_str(), pub.c_str(), pair.public_key.c_str());
  return 0;
}

std::string str(const nlohmann::json& j, const char* k) {
  if (!j.contains(k)) return "";
  return j[k].is_string() ? j[k].get<std::string>() : j[k].dump();
}

std::string event_line(const nlohmann::json& e) {
  std::ostringstream o;
  o << "#" << str(e, "seq") << " " << str(e, "kind");
  for (auto it = e.begin(); it != e.end(); ++it)
    if (it.key() != "v" && it.key() != "seq" && it.key() != "kind" && it.key() != "time")
      o << " " << it.key() << "=" << (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return o.str();
}

volatile std::sig_atomic_t interrupted = 0;

// While it lives, SIGINT (Ctrl-C) sets `interrupted` instead of ending the process, and a wait in
// progress returns (no SA_RESTART): a watch, a top or the console stop what they wait for.
class interrupt_guard {
 public:
  interrupt_guard() {
    interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = [](int) { interrupted = 1; };
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_);
  }
  ~interrupt_guard() { ::sigaction(SIGINT, &old_, nullptr); }
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;

 private:
  struct sigaction old_ {};
};

// A line typed on the console's terminal, if one is complete (the terminal is line-buffered
// between prompts): read whole, without its newline.
std::optional<std::string> typed_line() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1 || !(p.revents & (POLLIN | POLLHUP))) return std::nullopt;
  std::string line;
  for (char c; ::read(STDIN_FILENO, &c, 1) == 1 && c != '\n';) line += c;
  return line;
}

// Follows the event stream until Ctrl-C, `count` events or `seconds`; in the console (`typed`
// set) also until a line is typed, which then comes back in *typed to be run next.
int watch(actors::admin_client& c, bool json, long long count, double seconds, std::string* typed = nullptr) {
  interrupt_guard guard;  // Ctrl-C ends the watch, not the console
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                            std::chrono::duration<double>(seconds > 0 ? seconds : 1e9));
  std::fprintf(stderr, typed ? "watching events (Enter or Ctrl-C stops)\n" : "watching events (Ctrl-C to stop)\n");
  for (long long seen = 0; count <= 0 || seen < count;) {
    if (interrupted || std::chrono::steady_clock::now() >= until) break;
    if (typed)
      if (auto line = typed_line()) {
        *typed = *line;
        break;
      }
    auto e = c.next_event(std::chrono::milliseconds(200));
    if (!e) continue;
    ++seen;
    std::printf("%s\n", json ? e->dump().c_str() : event_line(*e).c_str());
    std::fflush(stdout);
  }
  return 0;
}

// The terminal's width in columns: stdout's window size, else $COLUMNS, else 80.
int terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

// A full-screen view refreshed every second (runtime/admin/console_text.h draws it to the
// terminal's width, asked again each frame so a resize applies). Ctrl-C (or --count frames,
// --for seconds) ends it.
int top(actors::admin_client& c, const std::string& endpoint, long long count, double seconds) {
  interrupt_guard guard;
  const auto start = std::chrono::steady_clock::now();
  for (long long frame = 0; count <= 0 || frame < count; ++frame) {
    if (interrupted || (seconds > 0 && std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(seconds))) break;
    const auto t0 = std::chrono::steady_clock::now();
    admin::reply r;
    try {
      r = c.call("status");
    } catch (const actors::admin_interrupted&) {
      break;
    }
    const std::time_t now = std::time(nullptr);
    char clock[16];
    std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
    const std::string title = "troupe top  " + endpoint + "  " + clock + "  (Ctrl-C quits)";
    std::string screen = "\x1b[H\x1b[2J";  // home, clear
    screen += r.ok ? admin::top_text(r.result, title, terminal_width()) : title + "\n\nerror: " + r.error + "\n";
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
    if (count > 0 && frame + 1 >= count) break;
    const auto next = t0 + std::chrono::seconds(1);
    while (!interrupted && std::chrono::steady_clock::now() < next) std::this_thread::sleep_until(std::min(next, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
  }
  return 0;
}

// The console's own `watch` and `top` flags (--count N, --for S, --json), taken out of `words`;
// the command line's come parsed.
struct follow_flags {
  long long count = 0;
  double seconds = 0;
  bool json = false;
};

follow_flags follow_flags_of(std::vector<std::string>& words, follow_flags f) {
  std::vector<std::string> rest{words.front()};
  for (std::size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--json") {
      f.json = true;
    } else if ((w == "--count" || w == "--for") && i + 1 < words.size()) {
      char* end = nullptr;
      const double v = std::strtod(words[i + 1].c_str(), &end);
      if (*end != '\0' || !(v >= 0)) throw input_error(w + ": expected a non-negative number, got \"" + words[i + 1] + "\"");
      if (w == "--count")
        f.count = static_cast<long long>(v);
      else
        f.seconds = v;
      ++i;
    } else {
      throw input_error(words.front() + ": unknown argument \"" + w + "\" (it takes --count N, --for SECONDS and --json)");
    }
  }
  words = rest;
  return f;
}

// Runs one command line; returns its exit code (1: the server refused it). In the console,
// `typed` takes a line typed during a watch, to run next.
int run_one(actors::admin_client& c, std::vector<std::string> words, bool json, long long count, double seconds,
            const std::string& endpoint, std::string* typed = nullptr) {
  if (words.empty()) return 0;
  if (words[0] == "watch" || words[0] == "top") {
    const follow_flags f = follow_flags_of(words, {count, seconds, json});
    if (words[0] == "top") return top(c, endpoint, f.count, f.seconds);
    return watch(c, f.json, f.count, f.seconds, typed);
  }
  const std::vector<std::string> rest(words.begin() + 1, words.end());
  const admin::reply r = c.call(words[0], rest);
  if (!r.ok) {
    std::fprintf(stderr, "troupe admin: %s\n", r.error.c_str());
    return 1;
  }
  if (json)
    std::printf("%s\n", r.result.dump().c_str());
  else
    std::fputs(admin::result_text(words[0], r.result).c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

// One line typed at the prompt (readline's editing and history), or nullopt at the end of
// input. Ctrl-C drops the line being typed and gives a new prompt, as a shell does: readline's
// callback interface, so the wait is ours and a signal always interrupts it.
std::optional<std::string> prompt_line(const char* prompt) {
  static std::optional<std::string> line;
  static bool done = false, eof = false;
  line.reset();
  done = eof = false;
  ::rl_callback_handler_install(prompt, [](char* l) {
    done = true;
    if (!l) {
      eof = true;
    } else {
      line = l;
      std::free(l);
    }
    ::rl_callback_handler_remove();
  });
  while (!done) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&p, 1, 200);
    if (interrupted) {
      interrupted = 0;
      ::rl_free_line_state();
      ::rl_callback_sigcleanup();
      ::rl_replace_line("", 0);
      std::fputs("^C\n", stdout);
      std::fflush(stdout);
      ::rl_on_new_line();
      ::rl_redisplay();
      continue;
    }
    if (n == 1) ::rl_callback_read_char();
  }
  if (eof) return std::nullopt;
  return line;
}

int console(actors::admin_client& c, bool json, const std::string& endpoint) {
  std::printf("troupe admin console: help lists the commands, quit ends\n");
  interrupt_guard guard;  // Ctrl-C stops the command running, never the console
  ::rl_catch_signals = 0;  // the guard's handler takes SIGINT, also while a line is read
  std::string next;        // a line typed during a watch, run next
  for (;;) {
    std::string line;
    if (!next.empty()) {
      line = std::exchange(next, "");
    } else {
      auto typed = prompt_line("troupe> ");
      if (!typed) break;  // end of input
      line = *typed;
    }
    const auto words = split(line);
    if (words.empty()) continue;
    ::add_history(line.c_str());
    if (words[0] == "quit" || words[0] == "exit") break;
    interrupted = 0;
    try {
      run_one(c, words, json, 0, 0, endpoint, &next);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe admin: %s\n", e.what());
    }
  }
  return 0;
}

// Whether something listens at a tcp://HOST:PORT endpoint, asked with a TCP connect of at most
// `limit`: ZeroMQ connects lazily, so a console with nothing to talk to waited for its whole
// request timeout (30 s) in silence. Other transports (ipc://) are taken as they are.
std::optional<std::string> unreachable(const std::string& endpoint, std::chrono::milliseconds limit) {
  if (endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
  const std::string hp = endpoint.substr(6);
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = hp.substr(0, colon);
  if (host == "*" || host == "localhost") host = "127.0.0.1";
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (::getaddrinfo(host.c_str(), hp.substr(colon + 1).c_str(), &hints, &res) != 0) return "cannot resolve " + host;
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, int(limit.count())) == 1) {
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    } else {
      err = ETIMEDOUT;
    }
  }
  if (fd >= 0) ::close(fd);
  if (err == 0) return std::nullopt;
  return std::string(std::strerror(err));
}

}  // namespace

int cmd_admin(const args& a) {
  // swap's and rollout's flags travel to the server as the command's own arguments.
  std::vector<std::string> pos = a.positional();
  const bool swap = !pos.empty() && pos.front() == "swap", rollout = !pos.empty() && pos.front() == "rollout";
  for (const char* flag : {"model", "revision", "canary", "step", "max-ttft-ratio", "max-itl-ratio", "max-error-rate", "max-refusal-rate",
                           "min-requests", "held-out", "prompts", "max-ppl-ratio", "min-greedy-match", "greedy-tokens"}) {
    if (!a.has(flag)) continue;
    const bool both = std::string(flag) == "model" || std::string(flag) == "revision";
    if (!rollout && !(swap && both)) throw input_error(std::string("--") + flag + (both ? ": only `swap` and `rollout` take it" : ": only `rollout` takes it"));
    pos.push_back(std::string("--") + flag);
    pos.push_back(*a.get(flag));
  }
  actors::admin_client_config cfg;
  if (auto config = a.get("config")) {  // the endpoints (and the server's key) from a topology
    const auto topo = topology::load_topology(*config);
    if (!topo.admin.enabled()) throw input_error("--config " + *config + ": the topology has no [admin] endpoint");
    cfg.endpoint = topo.admin.endpoint;
    cfg.events = topo.admin.events;
    if (topo.admin.curve()) cfg.server_key = actors::curve_public_of(actors::read_key_file(topo.admin.secret_key, "admin.secret_key"));
  }
  cfg.endpoint = a.get("endpoint", cfg.endpoint);
  cfg.events = a.get("events", cfg.events);
  if (auto k = a.get("server-key")) cfg.server_key = k->size() == 40 ? *k : actors::read_key_file(*k, "--server-key");
  if (auto k = a.get("key")) cfg.secret_key = actors::read_key_file(*k, "--key");
  const double timeout = a.get_double("timeout", 30);
  if (!(timeout > 0)) throw input_error("--timeout: must be positive seconds");
  cfg.timeout = std::chrono::milliseconds(static_cast<long long>(timeout * 1000));
  const long long count = a.get_int("count", 0);
  const double seconds = a.get_double("for", 0);
  if (count < 0 || seconds < 0) throw input_error("--count and --for must not be negative");
  if (auto why = unreachable(cfg.endpoint, std::chrono::milliseconds(1500)))
    throw input_error("no admin endpoint at " + cfg.endpoint + " (" + *why +
                      "): is a head with [admin] running there? Name it with --endpoint or --config TOPOLOGY");
  std::unique_ptr<actors::admin_client> client;
  try {
    client = std::make_unique<actors::admin_client>(cfg);
  } catch (const std::exception& e) {
    throw input_error(std::string("admin: ") + e.what());
  }
  if (pos.empty()) return console(*client, a.has("json"), cfg.endpoint);
  try {
    return run_one(*client, pos, a.has("json"), count, seconds, cfg.endpoint);
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "troupe admin: %s\n", e.what());
    return 1;
  }
}

int cmd_admin_keygen(const args& a) { return keygen(a.positional()); }

}  // namespace troupe::cli
