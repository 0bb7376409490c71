// Two values of the [data] section whose syntax the config checks when it is
// parsed and the datasets layer reads again (datasets/megatron_dataset.h,
// datasets/megatron_cache.h): the shares of data.split and the tokenizer
// identifiers of data.cache_tokenizer. Each rule is written once, here.
#pragma once

#include <array>
#include <string>

namespace trident {

// data.split ("969,30,1"): up to three non-negative numbers separated by commas,
// missing ones 0, not all 0, normalised to sum 1 into *shares (Megatron's
// parse_and_normalize_split, blended_megatron_dataset_config.py). Returns ""
// or the problem, naming the text and the expectation.
std::string split_problem(const std::string& text, std::array<double, 3>* shares);

// What data.cache_tokenizer's value `text` lacks to be a tokenizer's
// unique_identifiers (a JSON object), or "" when it is one.
std::string cache_tokenizer_problem(const std::string& text);

}  // namespace trident
