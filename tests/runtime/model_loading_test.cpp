// Broken model folders get errors that name the file and the tensor or key.
#define BOOST_TEST_MODULE model_loading
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/model/generation_config.h"
#include "runtime/model/config_json.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/safetensors.h"
#include "tests/support/models.h"
#include "runtime/model/model_source.h"
#include "runtime/model/model_tokenizer.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// A scratch copy of the tiny model whose config or tensors a test may break.
std::string scratch_copy(const std::string& name) {
  const std::string src = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  const std::string dst = std::string(TROUPE_BINARY_DIR) + "/test-models/broken-" + name;
  fs::remove_all(dst);
  fs::copy(src, dst, fs::copy_options::recursive);
  return dst;
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
  auto j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  f(j);
  std::ofstream(dir + "/config.json") << j.dump();
}

// Rewrites model.safetensors, letting `f` drop or reshape tensors.
void edit_tensors(const std::string& dir, const std::function<bool(std::string&, std::vector<std::int64_t>&)>& keep) {
  std::vector<std::tuple<std::string, std::vector<std::int64_t>, std::vector<std::uint8_t>>> tensors;
  {
    model::safetensors_file f(dir + "/model.safetensors");
    for (auto& [name, t] : f.tensors()) {
      std::string n = name;
      auto shape = t.shape;
      if (!keep(n, shape)) continue;
      std::int64_t numel = 1;
      for (auto d : shape) numel *= d;
      std::vector<std::uint8_t> bytes(std::size_t(numel) * 4, 0);
      std::memcpy(bytes.data(), t.data, std::min(bytes.size(), t.bytes));
      tensors.emplace_back(n, shape, std::move(bytes));
    }
  }
  model::safetensors_writer w;
  for (auto& [n, s, b] : tensors) w.declare(n, kernels::dtype::f32, s);
  w.open(dir + "/model.safetensors");
  for (auto& [n, s, b] : tensors) w.write(b.data(), b.size());
  w.close();
}

void expect_load_error(const std::string& dir, std::vector<std::string> needles) {
  try {
    model::llama_model::load(dir);
    BOOST_ERROR("loaded a broken model in " << dir);
  } catch (const input_error& e) {
    for (auto& n : needles) BOOST_TEST(std::string(e.what()).find(n) != std::string::npos, "'" << n << "' not in: " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(unsupported_architecture) {
  auto dir = scratch_copy("arch");
  edit_config(dir, [](nlohmann::json& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
  expect_load_error(dir, {"config.json", "GPT2LMHeadModel"});
  // The error lists what the registry reads (model/families/registry.cpp), Qwen3 among them.
  expect_load_error(dir, {"supported: LlamaForCausalLM", "Qwen3ForCausalLM"});
}

// sliding_window is read unless use_sliding_window says no (Qwen2's configs carry a window they
// do not use), and a window of 0 or less is refused naming the key.
BOOST_AUTO_TEST_CASE(a_sliding_window_is_read_as_its_config_says) {
  auto dir = scratch_copy("window");
  edit_config(dir, [](nlohmann::json& j) { j["sliding_window"] = 64; });
  BOOST_TEST(model::llama_model::load(dir)->config().window_of(1) == 64);
  edit_config(dir, [](nlohmann::json& j) { j["use_sliding_window"] = false; });
  BOOST_TEST(model::llama_model::load(dir)->config().window_of(1) == 0);
  edit_config(dir, [](nlohmann::json& j) { j["sliding_window"] = -4, j.erase("use_sliding_window"); });
  expect_load_error(dir, {"config.json", "'sliding_window'"});
}

BOOST_AUTO_TEST_CASE(missing_and_ill_typed_config_keys) {
  auto dir = scratch_copy("keys");
  edit_config(dir, [](nlohmann::json& j) { j.erase("hidden_size"); });
  expect_load_error(dir, {"config.json", "'hidden_size'"});
  edit_config(dir, [](nlohmann::json& j) { j["hidden_size"] = "wide"; });
  expect_load_error(dir, {"config.json", "'hidden_size'", "wrong type"});
}

BOOST_AUTO_TEST_CASE(missing_tensor_is_named) {
  auto dir = scratch_copy("missing");
  edit_tensors(dir, [](std::string& n, std::vector<std::int64_t>&) { return n != "model.layers.1.mlp.up_proj.weight"; });
  expect_load_error(dir, {"model.layers.1.mlp.up_proj.weight", "missing"});
}

BOOST_AUTO_TEST_CASE(wrong_shape_names_file_tensor_and_shapes) {
  auto dir = scratch_copy("shape");
  edit_tensors(dir, [](std::string& n, std::vector<std::int64_t>& s) {
    if (n == "model.layers.0.self_attn.k_proj.weight") s[0] += 16;
    return true;
  });
  expect_load_error(dir, {"model.safetensors", "model.layers.0.self_attn.k_proj.weight", "[48, 64]", "expected [32, 64]"});
}

BOOST_AUTO_TEST_CASE(truncated_safetensors_file) {
  auto dir = scratch_copy("truncated");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") / 2);
  expect_load_error(dir, {"model.safetensors", "outside the file"});
}

BOOST_AUTO_TEST_CASE(not_a_model_folder) {
  expect_load_error(std::string(TROUPE_BINARY_DIR) + "/no-such-model", {"config.json", "cannot open"});
}

// vocab_size or max_position_embeddings of 10^12 were truncated to 32 bits; rope_theta = 0 loaded.
BOOST_AUTO_TEST_CASE(sizes_past_32_bits_and_zero_rope_theta_are_refused) {
  auto dir = scratch_copy("sizes");
  edit_config(dir, [](nlohmann::json& j) { j["vocab_size"] = 1000000000000LL; });
  expect_load_error(dir, {"config.json", "'vocab_size' is 1000000000000, beyond"});
  edit_config(dir, [](nlohmann::json& j) {
    j["vocab_size"] = 512;
    j["max_position_embeddings"] = 1000000000000LL;
  });
  expect_load_error(dir, {"'max_position_embeddings' is 1000000000000"});
  edit_config(dir, [](nlohmann::json& j) {
    j["max_position_embeddings"] = 2048;
    j["rope_theta"] = 0;
  });
  expect_load_error(dir, {"config.json", "'rope_theta' must be a positive number"});
  edit_config(dir, [](nlohmann::json& j) {
    j["rope_theta"] = 10000;
    j["eos_token_id"] = {1, 1e13};
  });
  expect_load_error(dir, {"'eos_token_id'"});
}

// Partial rotary (Phi-4-mini) must be a whole, even number of each head's dimensions, and a RoPE
// scaling type not built is refused by name; dynamic NTK is built.
BOOST_AUTO_TEST_CASE(partial_rotary_and_rope_types_are_read_or_refused_by_name) {
  const std::string src = test::synth_model("tiny-phi3-f32", test::preset("tiny", "phi3"));
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/test-models/broken-phi3-rotary";
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  edit_config(dir, [](nlohmann::json& j) {
    j["partial_rotary_factor"] = 0.5;
    j["rope_scaling"] = nullptr;
  });
  BOOST_TEST(model::llama_model::load(dir)->config().rotated_dims() == 8);  // of 16
  edit_config(dir, [](nlohmann::json& j) { j["partial_rotary_factor"] = 0.3; });
  expect_load_error(dir, {"config.json", "'partial_rotary_factor'", "not a whole, even number"});
  auto llama = scratch_copy("rope-type");
  edit_config(llama, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 2.0}}; });
  expect_load_error(llama, {"config.json", "rope_scaling type 'ntk-by-parts'", "dynamic"});
  edit_config(llama, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; });
  BOOST_TEST(model::llama_model::load(llama)->config().rope_scaling->type == "dynamic");
  edit_config(llama, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 1e200}}; });
  expect_load_error(llama, {"config.json", "'rope_scaling.factor'", "finite"});
}

// generation_config.json was not read: its end-of-sequence ids add to config.json's, and its
// sampling becomes the default of what a request leaves out.
BOOST_AUTO_TEST_CASE(generation_config_adds_eos_ids_and_sampling_defaults) {
  auto dir = scratch_copy("genconfig");
  std::ofstream(dir + "/generation_config.json")
      << R"({"eos_token_id": [2, 77, 78], "temperature": 0.6, "top_p": 0.9, "top_k": 20, "do_sample": true})";
  const auto before = model::parse_model_config(
      [&] { std::stringstream ss; ss << std::ifstream(dir + "/config.json").rdbuf(); return ss.str(); }(), "c");
  const auto c = model::load_model_config(dir);
  for (int id : {77, 78}) BOOST_TEST(std::count(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == 1);
  BOOST_TEST(c.eos_token_ids.size() >= before.eos_token_ids.size() + 2);
  const auto g = model::load_generation_config(dir);
  BOOST_TEST(g.defaults.temperature == 0.6f);
  BOOST_TEST(g.defaults.top_p == 0.9f);
  BOOST_TEST(g.defaults.top_k == 20);
  std::ofstream(dir + "/generation_config.json") << R"({"top_p": 7})";
  BOOST_CHECK_THROW(model::load_generation_config(dir), input_error);
}

// model.safetensors.index.json was not read: a folder holding another checkpoint beside the
// indexed shards (as Mistral's do) failed with a duplicate tensor; a missing shard is named.
BOOST_AUTO_TEST_CASE(the_safetensors_index_names_the_files_to_load) {
  auto dir = scratch_copy("index");
  fs::rename(dir + "/model.safetensors", dir + "/model-00001-of-00001.safetensors");
  fs::copy_file(dir + "/model-00001-of-00001.safetensors", dir + "/consolidated.safetensors");
  nlohmann::json map = nlohmann::json::object();
  {
    model::safetensors_file f(dir + "/model-00001-of-00001.safetensors");
    for (auto& [name, t] : f.tensors()) map[name] = "model-00001-of-00001.safetensors";
  }
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump();
  BOOST_TEST(model::llama_model::load(dir)->num_layers() > 0);
  map["model.norm.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  expect_load_error(dir, {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "not in the folder"});
}

namespace {

std::size_t mappings() {
  std::ifstream in("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string safetensors_with_header(const std::string& name, const std::string& header) {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/test-models/" + name + ".safetensors";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes << header << std::string(16, '\0');
  return path;
}

}  // namespace

// Found by the fuzzer: a float in a shape was converted with undefined behaviour, and a file
// whose header was refused stayed mapped (the constructor threw before the destructor could
// unmap it): every refused file leaked its size in address space.
BOOST_AUTO_TEST_CASE(bad_safetensors_headers_are_refused_without_leaking_the_mapping) {
  const std::string floats = safetensors_with_header("float-shape", R"({"a": {"dtype": "F32", "shape": [2.4e49], "data_offsets": [0, 16]}})");
  BOOST_CHECK_THROW(model::safetensors_file{floats}, input_error);
  const std::string huge = safetensors_with_header("huge-shape", R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 16]}})");
  BOOST_CHECK_THROW(model::safetensors_file{huge}, input_error);
  const std::size_t before = mappings();
  for (int i = 0; i < 200; ++i) BOOST_CHECK_THROW(model::safetensors_file{floats}, input_error);
  BOOST_TEST(mappings() <= before + 2);
}

// Two tensors whose data_offsets overlap loaded silently: each read the other's bytes, and the
// output changed. Such a table is never a real file.
BOOST_AUTO_TEST_CASE(safetensors_whose_tensors_overlap_are_refused) {
  const std::string overlap = safetensors_with_header(
      "overlap", R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})");
  try {
    model::safetensors_file f{overlap};
    BOOST_FAIL("overlapping tensors were read");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("tensors 'a' and 'b' overlap (data_offsets 0 + 12 bytes and 8)") != std::string::npos, e.what());
  }
  const std::string adjacent = safetensors_with_header(
      "adjacent", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})");
  BOOST_TEST(model::safetensors_file{adjacent}.tensors().size() == 2u);
}

// A model folder's files are read only as regular files: config.json or a weights file that is
// a symlink to /dev/zero, or a FIFO, is refused by what it is before a byte is read (reading it
// "to the end" never ended, or blocked until a writer came).
BOOST_AUTO_TEST_CASE(model_files_that_are_devices_or_fifos_are_refused_before_they_are_read) {
  const std::string dir = scratch_copy("device");
  fs::remove(dir + "/model.safetensors");
  fs::create_symlink("/dev/zero", dir + "/model.safetensors");
  expect_load_error(dir, {"model.safetensors: is not a regular file (a device)"});
  fs::remove(dir + "/model.safetensors");
  BOOST_TEST_REQUIRE(::mkfifo((dir + "/model.safetensors").c_str(), 0600) == 0);
  expect_load_error(dir, {"model.safetensors: is not a regular file (a FIFO)"});
  fs::remove(dir + "/config.json");
  BOOST_TEST_REQUIRE(::mkfifo((dir + "/config.json").c_str(), 0600) == 0);
  expect_load_error(dir, {"config.json: is not a regular file (a FIFO)"});
  const std::string tok = scratch_copy("tokenizer-device");
  fs::remove(tok + "/tokenizer.json");
  fs::create_symlink("/dev/zero", tok + "/tokenizer.json");
  try {
    model::load_tokenizer(tok);
    BOOST_ERROR("a tokenizer.json on /dev/zero was read");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("tokenizer.json: is not a regular file (a device)") != std::string::npos, e.what());
  }
}
