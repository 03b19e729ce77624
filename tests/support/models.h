// Test models: synthesized once per build tree and shared by the tests that need them.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/model/llama_model.h"
#include "runtime/model/synth.h"

namespace troupe::test {

// The folder for `opts` under build/test-models/NAME, synthesized if absent. A lock file keeps
// tests that run in parallel from writing the same folder at once.
inline std::string synth_model(const std::string& name, model::synth_options opts) {
  const std::string root = std::string(TROUPE_BINARY_DIR) + "/test-models";
  std::filesystem::create_directories(root);
  opts.out = root + "/" + name;
  int fd = ::open((opts.out + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(fd, LOCK_EX);
  if (!std::filesystem::exists(opts.out + "/model.safetensors")) model::synthesize(opts);
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return opts.out;
}

inline model::synth_options preset(const std::string& p, const std::string& arch = "llama",
                                   kernels::dtype t = kernels::dtype::f32) {
  model::synth_options o;
  o.preset = p;
  o.arch = arch;
  o.type = t;
  return o;
}

// The `small` F32 Llama model shared by a test executable's cases (loaded once).
// The folder of the `tiny` preset (what process tests serve: it loads in milliseconds).
inline std::string tiny_model_dir() { return synth_model("tiny-llama-f32", preset("tiny")); }

inline std::shared_ptr<const model::llama_model> small_model() {
  static auto m = std::shared_ptr<const model::llama_model>(model::llama_model::load(synth_model("small-llama-f32", preset("small"))));
  return m;
}

}  // namespace troupe::test
