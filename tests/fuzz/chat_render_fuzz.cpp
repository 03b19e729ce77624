// A chat request's JSON rendered through real chat templates (Llama 3's and the synthesized
// model's): request parsing, JSON to template values, and the evaluator under its budget.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/api/openai.h"
#include "runtime/chat/chat_template.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/synth_vocab.h"

namespace {

std::vector<troupe::chat::chat_template> templates() {
  std::vector<troupe::chat::chat_template> out;
  auto synth = nlohmann::json::parse(troupe::tokenizer::synth_tokenizer_config_json(512));
  out.emplace_back(synth["chat_template"].get<std::string>(), "<s>", "</s>");
  for (const char* f : {"llama-3.1.jinja", "mistral-v0.3.jinja"}) {
    std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/tests/chat/templates/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    out.emplace_back(ss.str(), "<s>", "</s>");
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tmpls = templates();
  troupe::api::completion_request r;
  try {
    r = troupe::api::parse_request(std::string(reinterpret_cast<const char*>(data), size), troupe::api::endpoint::chat);
  } catch (const troupe::api::api_error&) {
    return 0;
  }
  for (const auto& t : tmpls) {
    try {
      (void)t.render(r.messages, r.add_generation_prompt, r.template_kwargs);
    } catch (const troupe::input_error&) {
    }
  }
  return 0;
}
