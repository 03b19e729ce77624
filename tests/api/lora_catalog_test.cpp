// The head's catalog of served LoRA adapters and vLLM's load/unload request bodies.
#define BOOST_TEST_MODULE lora_catalog
#include <boost/test/unit_test.hpp>

#include "runtime/api/api_error.h"
#include "runtime/api/lora_catalog.h"

using namespace troupe;
using namespace troupe::api;

BOOST_AUTO_TEST_CASE(names_are_checked_before_a_load_and_topology_adapters_stay) {
  lora_catalog c({"kjv", "bible"}, 2);
  BOOST_TEST(!c.refuse_new("psalms", {}));
  BOOST_TEST(c.refuse_new("bible", {})->find("base model's served name") != std::string::npos);
  BOOST_TEST(c.refuse_new("", {})->find("1 to 256") != std::string::npos);
  c.add({"psalms", "/a/psalms", "psalms@0123", true});
  BOOST_TEST(c.refuse_new("psalms", {})->find("already loaded") != std::string::npos);
  BOOST_TEST(c.refuse_new("proverbs", {"proverbs"})->find("already loaded") != std::string::npos);  // its load under way
  BOOST_TEST(c.refuse_new("job", {"proverbs"})->find("the most allowed") != std::string::npos);      // one loaded, one loading
  c.add({"proverbs", "/a/proverbs", "proverbs@4567", false});
  BOOST_TEST(c.find("proverbs")->identity == "proverbs@4567");
  BOOST_TEST(c.list().size() == 2u);
  BOOST_TEST(c.remove("psalms")->find("the topology's") != std::string::npos);
  BOOST_TEST(c.remove("job")->find("no adapter") != std::string::npos);
  BOOST_TEST(!c.remove("proverbs"));
  BOOST_TEST(!c.find("proverbs"));
  BOOST_TEST(!c.refuse_new("job", {}));
}

BOOST_AUTO_TEST_CASE(load_and_unload_bodies_name_the_field_at_fault) {
  const auto r = parse_lora_load(R"({"lora_name": "psalms", "lora_path": "/a/psalms", "load_inplace": false})");
  BOOST_TEST(r.name == "psalms");
  BOOST_TEST(r.path == "/a/psalms");
  BOOST_TEST(parse_lora_unload(R"({"lora_name": "psalms", "lora_int_id": 3})") == "psalms");
  auto param_of = [](auto f) {
    try {
      f();
    } catch (const api_error& e) {
      BOOST_TEST(e.status() == 400);
      return e.param();
    }
    return std::string("(accepted)");
  };
  BOOST_TEST(param_of([] { parse_lora_load(R"({"lora_name": "psalms"})"); }) == "lora_path");
  BOOST_TEST(param_of([] { parse_lora_load(R"({"lora_name": 3, "lora_path": "/a"})"); }) == "lora_name");
  BOOST_TEST(param_of([] { parse_lora_load(R"({"lora_name": "p", "lora_path": "/a", "load_inplace": true})"); }) == "load_inplace");
  BOOST_TEST(param_of([] { parse_lora_load(R"({"lora_name": "p", "lora_path": "/a", "rank": 4})"); }) == "rank");
  BOOST_TEST(param_of([] { parse_lora_unload("[]"); }) != "(accepted)");
}
