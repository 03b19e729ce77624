// Child processes for tests: start a command with its stdout on a pipe, wait for a line,
// signal it, reap it.
#pragma once
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/troupe/process.h"


namespace troupe::test {

struct command_result {
  int status = -1;
  std::string output;  // stdout (add 2>&1 to the command for stderr too)
};

// Runs a shell command to completion and collects its output.
inline command_result run_command(const std::string& cmd) {
  command_result r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A process's resident memory in kB (VmRSS), or -1.
inline long rss_kb(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::string(line).rfind("VmRSS:", 0) == 0) kb = std::atol(line + 6);
  std::fclose(f);
  return kb;
}

class child_process {
 public:
  explicit child_process(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);  // the child keeps only the write end, as its stdout
    try {
      pid_ = cli::spawn_process(argv, fds[1]);
    } catch (const std::exception&) {
      pid_ = -1;
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~child_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  bool started() const { return pid_ > 0 && out_; }
  pid_t pid() const { return pid_; }

  // Blocks until the child prints a line containing `needle`; false if its stdout closes first.
  bool wait_for_line(const std::string& needle, std::string* line_out = nullptr) {
    char buf[1024];
    while (out_ && std::fgets(buf, sizeof buf, out_)) {
      if (std::string(buf).find(needle) != std::string::npos) {
        if (line_out) *line_out = buf;
        return true;
      }
    }
    return false;
  }

  void kill(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // The child's wait status once it has exited, waited for at most `limit` (blocked on a
  // pidfd, not polled); nothing (and it runs on) when it has not.
  std::optional<int> reap_within(std::chrono::seconds limit) {
    if (pid_ <= 0) return std::nullopt;
    const int fd = int(::syscall(SYS_pidfd_open, pid_, 0));
    if (fd < 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, int(std::chrono::milliseconds(limit).count()));
    ::close(fd);
    int status = 0;
    if (ready != 1 || ::waitpid(pid_, &status, 0) != pid_) return std::nullopt;
    pid_ = -1;
    return status;
  }

  // Waits for the child to exit; returns its wait status.
  int reap() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  std::FILE* out_ = nullptr;
};

}  // namespace troupe::test
