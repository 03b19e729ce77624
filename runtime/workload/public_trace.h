// Request traces in the formats people publish, read into Troupe's arrivals (trace.h) so that a
// simulation or a replay runs on the workloads others measured. Each is recognised by its first
// line; only local files are read.
//  - Azure LLM inference traces (2023, 2024): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, the
//    time as "YYYY-MM-DD HH:MM:SS.fffffff" (UTC).
//  - Mooncake's traces: JSON lines {"timestamp": ms, "input_length", "output_length",
//    "hash_ids": [...]}, each hash id naming one block of `mooncake_block_tokens` prompt tokens,
//    equal ids meaning an equal prefix block.
//  - BurstGPT: CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, the
//    time in seconds.
//  - Troupe's own `seconds,prompt_tokens,max_tokens` (parse_trace).
// Times are made relative to the first request. Rows a format allows but a request cannot be
// (no generated tokens: BurstGPT's failed requests, Azure's empty answers) are skipped and
// counted, never replayed as something else; malformed rows fail naming the line.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/workload/trace.h"

namespace troupe::workload {

enum class trace_format { troupe, azure, mooncake, burstgpt };
const char* trace_format_name(trace_format f);

constexpr int mooncake_block_tokens = 512;

struct public_trace {
  trace_format format = trace_format::troupe;
  std::vector<arrival> arrivals;
  // Per arrival (Mooncake only, else empty): the ids of its prompt's blocks, in order.
  std::vector<std::vector<std::int64_t>> prefix_blocks;
  std::size_t skipped = 0;  // rows that are no request (no generated tokens)
};

// Throws input_error naming the source and line for a format not recognised, a malformed row, or
// time going backwards.
public_trace parse_public_trace(const std::string& text, const std::string& source);
public_trace read_public_trace(const std::string& path);  // input_error naming the file when unreadable

// The prompt of request `index` of a trace, as token ids below `vocab`: one block of
// mooncake_block_tokens tokens per prefix block id (equal ids give equal tokens, so a prefix
// cache finds what the trace says is shared), then tokens of its own up to its length.
std::vector<std::int32_t> trace_prompt(const arrival& a, const std::vector<std::int64_t>& blocks, std::size_t index, int vocab);

}  // namespace troupe::workload
