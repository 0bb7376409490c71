// MegatronLayout (label `reference`): parallel.pipeline_layout and the
// account_for_* split (core/pipeline_layout.h) against megatron-core itself.
// megatron_layout_reference.py prints megatron-core's parse of each layout
// string (PipelineParallelLayerLayout, validate_layer_layout) and its
// get_num_layers_to_build for each accounted split; this test computes each
// again with Trident's code and compares: the expanded stages, the layers per
// model chunk, and which inputs both refuse. Trident refuses two things
// Megatron runs (an empty stage, multi-token prediction); those cases say so.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/pipeline_layout.h"
#include "tests/run_helpers.h"

namespace trident {
namespace {

struct LayoutCase {
  std::string text;
  int64_t pp, chunks_per_rank, layers;
  std::string trident_only;  // non-empty: Megatron accepts, Trident refuses with these words
};

struct AccountCase {
  int64_t layers, pp, vp;
  bool embedding, loss;
};

const std::vector<LayoutCase> kLayouts = {
    {"Et*3|t*4|t*3L", 3, 1, 10, ""},
    {"E,t,t|t,t|t,t,L", 3, 1, 6, ""},
    {"E|(tt|)*2,(t|)*4,tL", 4, 2, 9, ""},
    {"Ettt|(tt|)*29,t|L", 16, 2, 62, ""},
    {"(Et|)*1,tL", 2, 1, 2, ""},
    {"Et|(tt|)*0,tL", 2, 1, 2, ""},
    {"EtL", 1, 1, 1, ""},
    {"E|t|t|L", 2, 2, 2, ""},
    {"Ettt|L", 2, 1, 3, ""},
    // Refused by both.
    {"Et|tX", 2, 1, 2, ""},           // unknown character
    {"tE|tL", 2, 1, 2, ""},           // embedding not first
    {"Et|tLt", 2, 1, 3, ""},          // loss not last
    {"Et|tt", 2, 1, 3, ""},           // no loss
    {"EEt|tL", 2, 1, 2, ""},          // embedding twice
    {"Et|tL", 2, 1, 3, ""},           // layer count
    {"Et|t|tL", 2, 1, 3, ""},         // stages not a multiple of pp
    {"(Et|tL", 2, 1, 2, ""},          // unclosed group
    {"Et|tL)", 2, 1, 2, ""},          // stray ')'
    {"(Et|)tL", 2, 1, 2, ""},         // group without a count
    {"E t|tL", 2, 1, 2, ""},          // a space
    // Megatron runs these; Trident refuses them.
    {"E|(tt|)*2,(t|)*4,mL", 4, 2, 8, "multi-token prediction"},
    {"Et||tL", 3, 1, 2, "stage 1 is empty"},
};

const std::vector<AccountCase> kAccounts = {
    {7, 2, 1, true, false}, {7, 2, 1, false, true}, {6, 2, 1, true, true}, {10, 4, 1, true, true},
    {6, 2, 2, true, true},  {2, 4, 1, true, true},  {15, 2, 2, true, false}, {8, 3, 1, false, true},
    {6, 4, 1, false, true}, {5, 2, 2, true, true},  {6, 3, 1, false, true},  {14, 2, 2, true, false},
    {4, 2, 2, false, true},
};

std::vector<std::string> megatron_lines() {
  const std::string cases = ::testing::TempDir() + "megatron_layout_cases.txt";
  {
    std::ofstream f(cases);
    for (const LayoutCase& c : kLayouts) f << "layout\t" << c.text << "\t" << c.pp << "\t" << c.layers << "\n";
    for (const AccountCase& c : kAccounts)
      f << "account\t" << c.layers << "\t" << c.pp << "\t" << c.vp << "\t" << c.embedding << "\t" << c.loss << "\n";
  }
  const std::string cmd =
      std::string(TRIDENT_PYTHON) + " " + TRIDENT_SOURCE_DIR + "/tests/reference/megatron_layout_reference.py " + cases;
  int status = -1;
  std::vector<std::string> lines = trident::testing::stdout_lines(cmd, &status);
  EXPECT_EQ(status, 0) << cmd << " failed";
  return lines;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() && &x == &v.front() ? "" : "|") + x;
  return s;
}

// Trident's line for a layout case, in the script's format; `refusal` gets its error.
std::string trident_layout(const LayoutCase& c, std::string& refusal) {
  std::vector<std::string> stages;
  try {
    stages = parse_pipeline_layout(c.text);
  } catch (const std::invalid_argument& e) {
    refusal = e.what();
    return "parse-error";
  }
  // Megatron's parse alone also checks the stage count against pp.
  if (static_cast<int64_t>(stages.size()) % c.pp != 0) return "parse-error";
  try {
    const std::vector<int64_t> layers = layout_chunk_layers(stages, c.layers, c.pp, c.chunks_per_rank);
    for (size_t s = 0; s < stages.size(); ++s) {  // the counts are the stages' t's
      int64_t t = 0;
      for (char ch : stages[s]) t += ch == 't';
      EXPECT_EQ(layers[s], t) << c.text << " stage " << s;
    }
  } catch (const std::invalid_argument& e) {
    refusal = e.what();
    return "invalid " + join(stages);
  }
  return "ok " + join(stages);
}

std::string trident_account(const AccountCase& c) {
  try {
    const std::vector<int64_t> n = accounted_chunk_layers(c.layers, c.pp, c.vp, c.embedding, c.loss);
    std::string s = "ok ";
    for (size_t i = 0; i < n.size(); ++i) s += (i ? "," : "") + std::to_string(n[i]);
    return s;
  } catch (const std::invalid_argument&) {
    return "error";
  }
}

TEST(MegatronLayout, AgreesWithMegatronCore) {
  const std::vector<std::string> lines = megatron_lines();
  ASSERT_EQ(lines.size(), kLayouts.size() + kAccounts.size()) << "megatron_layout_reference.py printed too little";
  for (size_t i = 0; i < kLayouts.size(); ++i) {
    const LayoutCase& c = kLayouts[i];
    std::string refusal;
    const std::string ours = trident_layout(c, refusal);
    if (c.trident_only.empty()) {
      if (lines[i].rfind("ok ", 0) == 0 || (ours.rfind("invalid ", 0) == 0 && lines[i].rfind("invalid ", 0) == 0))
        EXPECT_EQ(ours, lines[i]) << c.text << " (Trident: " << refusal << ")";
      else
        EXPECT_NE(ours.rfind("ok ", 0), 0u) << c.text << ": megatron-core refuses it (" << lines[i] << "), Trident not";
    } else {
      EXPECT_EQ(lines[i].rfind("ok ", 0), 0u) << c.text << ": megatron-core " << lines[i];
      EXPECT_EQ("invalid " + lines[i].substr(3), ours) << c.text;
      EXPECT_NE(refusal.find(c.trident_only), std::string::npos) << c.text << ": " << refusal;
    }
  }
  for (size_t i = 0; i < kAccounts.size(); ++i) {
    const AccountCase& c = kAccounts[i];
    EXPECT_EQ(trident_account(c), lines[kLayouts.size() + i])
        << c.layers << " layers, pp " << c.pp << ", vp " << c.vp << ", embedding " << c.embedding << ", loss "
        << c.loss;
  }
}

}  // namespace
}  // namespace trident
