// The Jinja subset: any template source either fails to parse with template_error, or renders
// (or fails) within a small budget, with a context of a few values.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const nlohmann::json ctx = {
      {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}},
      {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"n", 3}, {"tools", nlohmann::json::array()}};
  troupe::chat::render_limits lim;
  lim.max_steps = 20000;
  lim.max_output = 1 << 16;
  try {
    troupe::chat::jinja_template t(std::string(reinterpret_cast<const char*>(data), size));
    (void)t.render(ctx, lim);
  } catch (const troupe::chat::template_error&) {
  }
  return 0;
}
