// Internal to the checkpoint store (checkpoint_store.cpp, checkpoint_reader.cpp):
// the index files' format and the checks shared by commit() and the reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "core/json_fwd.h"

namespace trident::ckpt::detail {

inline constexpr const char* kFormat = "trident-checkpoint";
inline constexpr int64_t kFormatVersion = 1;

std::string rank_name(int rank);  // "rank-00003"
std::string shape_text(const std::vector<int64_t>& s);
std::string hex(uint64_t v);  // 16 lowercase hex digits
uint64_t parse_hex(const std::string& s, const std::string& what);
int64_t volume(const std::vector<int64_t>& extent);
json::Value int_array(const std::vector<int64_t>& v);
json::Value meta_json(const Meta& m);
Meta meta_from(const json::Value& j, const std::string& what);
// The file's JSON; a missing or unparsable file throws CheckpointError naming it.
json::Value read_json(const std::string& path);
// Throws naming the tensor unless [off, off + ext) lies inside `full`.
void check_box(const std::string& name, const std::vector<int64_t>& full, const std::vector<int64_t>& off,
               const std::vector<int64_t>& ext, const std::string& who);
// Throws naming the manifest when its world disagrees with the step's rank files
// (rank 0's index and how many there are) rather than letting an intact rank file
// take the blame.
void check_manifest_world(const std::string& step_dir, int64_t world, const std::string& manifest);
// Rank `rank`'s index after checking it belongs to this step and world and
// that its .bin has the size the index records (else: truncated, naming the
// file and the first tensor cut off) and the index's bin_size is where its
// last tensor or blob ends (else: an edited index).
json::Value checked_index(const std::string& step_dir, int rank, int64_t step, int world);
// Step number of a "step-XXXXXXXX" directory name, or -1.
int64_t step_of(const std::string& name);

}  // namespace trident::ckpt::detail
