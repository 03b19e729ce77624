// What `troupe admin` prints for people: each command's result as a table or a sentence, and
// `top`'s screen cut to the terminal's width. Pure functions of the reply (the JSON the admin
// protocol carries, docs/admin.md), so every command's text is tested without a cluster;
// `--json` prints the reply itself instead.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::admin {

// The text for `cmd`'s result, ending in a newline. A result of a shape it does not know (a
// newer server) is printed as indented JSON rather than dropped.
std::string result_text(const std::string& cmd, const nlohmann::json& result);

// `top`'s screen for a `status` result: a title line, the totals, then one line per replica.
// No line is wider than `width` columns: the KV-use bar takes what the other columns leave
// (4 to 30 characters), then the NODE and GEN columns go, then lines are cut.
std::string top_text(const nlohmann::json& status, const std::string& title, int width);

}  // namespace troupe::admin
