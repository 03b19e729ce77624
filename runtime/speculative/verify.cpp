#include "runtime/speculative/verify.h"

#include <stdexcept>

namespace troupe::speculative {

std::vector<sampling::sampling_row> verify_rows(const sampling::sampling_row& decode_row, std::span<const std::int32_t> proposed) {
  std::vector<sampling::sampling_row> rows;
  rows.reserve(proposed.size() + 1);
  rows.push_back(decode_row);
  for (std::size_t j = 0; j < proposed.size(); ++j) {
    sampling::sampling_row r = rows.back();
    r.num_output += 1;  // the draw's position moves with the tokens before it
    if (!r.history.empty()) r.history.push_back(proposed[j]);  // penalties see the proposed tokens as output
    rows.push_back(std::move(r));
  }
  return rows;
}

sampling::sampling_row row_after(const sampling::sampling_row& decode_row, std::span<const std::int32_t> proposed) {
  sampling::sampling_row r = decode_row;
  r.num_output += std::int32_t(proposed.size());
  if (!r.history.empty()) r.history.insert(r.history.end(), proposed.begin(), proposed.end());
  return r;
}

verdict judge(std::span<const std::int32_t> proposed, std::span<const sampling::sampled_token> chosen) {
  if (chosen.size() != proposed.size() + 1) throw std::invalid_argument("judge: a verify step has one row more than its proposal");
  verdict v;
  for (std::size_t j = 0; j < chosen.size(); ++j) {
    v.tokens.push_back(chosen[j]);
    if (j == proposed.size() || chosen[j].token != proposed[j]) break;
    ++v.accepted;
  }
  return v;
}

}  // namespace troupe::speculative
