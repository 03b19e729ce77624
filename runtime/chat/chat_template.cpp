#include "runtime/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"

namespace troupe::chat {

namespace {

// bos_token / eos_token are a string or an AddedToken object {"content": ...}.
std::string token_field(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::optional<chat_template> chat_template::load(const std::string& model_dir, const std::string& override_file) {
  const std::string path = model_dir + "/tokenizer_config.json";
  nlohmann::json cfg = nlohmann::json::object();
  if (std::filesystem::exists(path)) {
    cfg = parse_json(read_regular_file(path, max_tokenizer_file_bytes, "tokenizer_config.json"), path);
    if (!cfg.is_object()) throw input_error(path + ": expected a JSON object");
  }
  const std::string jinja_file = !override_file.empty() ? override_file : model_dir + "/chat_template.jinja";
  if (!override_file.empty() || std::filesystem::exists(jinja_file)) {
    const std::string text = read_regular_file(jinja_file, max_json_file_bytes, "chat template");
    try {
      return chat_template(text, token_field(cfg, "bos_token"), token_field(cfg, "eos_token"));
    } catch (const template_error& e) {
      throw input_error(jinja_file + ": " + e.what());
    }
  }
  if (!cfg.contains("chat_template")) return std::nullopt;
  std::string source;
  const auto& t = cfg["chat_template"];
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {  // named templates: the "default" one serves chat
    for (const auto& e : t)
      if (e.value("name", "") == "default" && e.contains("template")) source = e["template"].get<std::string>();
    if (source.empty()) throw input_error(path + ": chat_template lists no template named \"default\"");
  } else {
    throw input_error(path + ": chat_template: expected a string or a list of named templates");
  }
  try {
    return chat_template(source, token_field(cfg, "bos_token"), token_field(cfg, "eos_token"));
  } catch (const template_error& e) {
    throw input_error(path + ": chat_template: " + e.what());
  }
}

chat_template::chat_template(const std::string& source, std::string bos, std::string eos)
    : tmpl_(source), bos_(std::move(bos)), eos_(std::move(eos)), tool_format_(infer_tool_format(source)),
      reasoning_(infer_reasoning_format(source)) {}

std::string chat_template::render(const nlohmann::json& messages, bool add_generation_prompt,
                                  const nlohmann::json& extra) const {
  nlohmann::json ctx = extra.is_object() ? extra : nlohmann::json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  try {
    return tmpl_.render(ctx);
  } catch (const template_raised& e) {
    throw input_error(std::string("the chat template refused the conversation: ") + e.what());
  } catch (const template_error& e) {
    throw input_error(std::string("chat template: ") + e.what());
  }
}

}  // namespace troupe::chat
