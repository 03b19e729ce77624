#include "runtime/workload/request_trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/log.h"

namespace troupe::workload {

std::string trace_line(const trace_record& r) {
  const nlohmann::json j = {{"timestamp", r.timestamp}, {"prompt_len", r.prompt_len}, {"output_len", r.output_len}, {"tenant", r.tenant},
                            {"model", r.model},         {"endpoint", r.endpoint},     {"outcome", r.outcome}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

request_trace::request_trace(const std::string& path, std::size_t max_bytes) : path_(path), max_bytes_(max_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw input_error("request_trace: cannot open " + path + ": " + std::strerror(errno));
  struct stat s {};
  if (::fstat(fd, &s) == 0) bytes_ = std::size_t(s.st_size);
  f_ = ::fdopen(fd, "a");
  if (!f_) {
    ::close(fd);
    throw input_error("request_trace: cannot open " + path + ": " + std::strerror(errno));
  }
}

request_trace::~request_trace() {
  if (f_) std::fclose(f_);
}

void request_trace::record(const trace_record& r) {
  const std::string line = trace_line(r);
  if (bytes_ + line.size() > max_bytes_) {
    if (dropped_++ == 0)
      log::warn("request_trace_full", {{"path", path_}, {"max_bytes", max_bytes_}, {"why", "later requests are not recorded"}});
    return;
  }
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    if (dropped_++ == 0) log::warn("request_trace_write_failed", {{"path", path_}, {"error", std::strerror(errno)}});
    return;
  }
  bytes_ += line.size();
  ++recorded_;
}

}  // namespace troupe::workload
