// Config: defaults, the preset, overrides, round-trip, and one expected message
// per kind of bad config.
#include "core/config.h"
#include "core/activation_memory.h"
#include "core/config_rules.h"
#include "core/router_options.h"
#include "framework/config_tables.h"
#include "models/gpt/gpt_rules.h"
#include "schedules/generators.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <utility>
#include <vector>

#include "schedules/generators.h"

using trident::Config;
using trident::ConfigError;
using trident::load_config;
using trident::parse_config;

namespace {

const std::string kTiny = std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt-tiny.toml";
// GPT's block shape as its family hands it in (NOTE [model features]).
const trident::ModelFeatures kGptShape = trident::gpt_family().features;

// A figure as the memory checks' messages print it (3 significant digits).
std::string figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3Lg", static_cast<long double>(v));
  return buf;
}

// The message of the ConfigError `fn` throws; fails the test when none is thrown.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

struct BadCase {
  const char* what;
  const char* toml;
  std::vector<std::string> overrides;
  const char* expected;  // substring of the message
};

}  // namespace

TEST(Config, DefaultsParseFromEmptyText) {
  const Config c = parse_config("", "empty.toml");
  EXPECT_EQ(c, Config{});
  EXPECT_EQ(c.source, "empty.toml");
  EXPECT_EQ(c.model.layers, 2);
  EXPECT_EQ(c.parallel.dp, -1);
  EXPECT_EQ(c.schedule.kind, "1f1b");
  EXPECT_DOUBLE_EQ(c.training.lr, 1e-3);
  EXPECT_EQ(c.data.source, "synthetic");
  EXPECT_TRUE(c.logging.progress);
}

TEST(Config, TinyPresetLoads) {
  const Config c = load_config(kTiny);
  EXPECT_EQ(c.source, kTiny);
  EXPECT_EQ(c.model.layers, 8);
  EXPECT_EQ(c.model.hidden, 64);
  EXPECT_EQ(c.model.heads, 8);
  EXPECT_EQ(c.model.ffn(), 256);
  EXPECT_EQ(c.model.seq_len, 32);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.data.tokenizer, "byte");
  EXPECT_EQ(c.data.source, "synthetic");
  EXPECT_EQ(c.training.micro_batch_size, 2);
  EXPECT_EQ(c.training.global_batch_size, 16);
  EXPECT_EQ(c.training.steps, 30);
  EXPECT_EQ(c.training.warmup_steps, 3);
  EXPECT_EQ(c.logging.dir, "runs/gpt-tiny");
}

// Every layout of the regression matrix (tp, pp in {1, 2, 4}, dp, chunks in
// {1, 2}, sequence parallelism) passes check_config for the preset at `path`.
void expect_divides_for_every_matrix_layout(const std::string& path) {
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int dp : {1, 2})
        for (int chunks : {1, 2}) {
          std::vector<std::string> ov = {"parallel.tp=" + std::to_string(tp), "parallel.pp=" + std::to_string(pp),
                                         "schedule.chunks=" + std::to_string(chunks),
                                         "parallel.sequence_parallel=true"};
          if (chunks > 1) ov.push_back("schedule.kind=interleaved");
          Config c = trident::load_checked_config(path, ov);
          trident::resolve_world(c, tp * pp * dp);
          EXPECT_EQ(c.parallel.dp, dp);
          EXPECT_EQ(trident::num_microbatches(c), 16 / (2 * dp));
        }
}

TEST(Config, TinyPresetDividesForEveryMatrixLayout) { expect_divides_for_every_matrix_layout(kTiny); }

TEST(Config, LlamaTinyDividesForEveryMatrixLayout) {
  const std::string llama = std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-tiny.toml";
  const Config base = load_config(llama);
  EXPECT_EQ(base.model.arch, "llama");
  EXPECT_LT(base.model.kv(), base.model.heads);  // grouped-query attention
  EXPECT_FALSE(base.model.tie_embeddings);
  expect_divides_for_every_matrix_layout(llama);
}

// The main job's demo (scripts/main.sh: tp 2 x pp 2 x dp 2, interleaved v = 2)
// is a model whose blocks are the work, so that its pipeline's virtual stages
// cost about the same: per token the blocks' matrix weights (L (4h² + 2hf))
// are at least ten times the head's (h × padded vocabulary), and its layout
// splits the layers evenly with 8 micro-batches per replica.
TEST(Config, MainJobDemoIsBlocksNotHead) {
  Config c = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt-brown-bytes.toml",
                         {"parallel.tp=2", "parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2"});
  trident::resolve_world(c, 8);
  const auto& m = c.model;
  const int64_t blocks = m.layers * (4 * m.hidden * m.hidden + 2 * m.hidden * m.ffn());
  const int64_t head = m.hidden * m.padded_vocab(c.parallel.tp);
  EXPECT_GE(blocks, 10 * head) << "blocks " << blocks << " head " << head;
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(m.layers % (c.parallel.pp * c.schedule.chunks), 0);
  EXPECT_EQ(trident::num_microbatches(c), 8);
  EXPECT_EQ(c.data.tokenizer, "byte");
}

// The GPU presets carry the published sizes (Meta's Llama 3.2 1B and 3.1 8B
// model cards / config.json files) and pass every check of their layout.
TEST(Config, LlamaGpuPresetsHaveThePublishedSizes) {
  const Config one = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-3.2-1b.toml");
  EXPECT_EQ(std::vector<int64_t>({one.model.layers, one.model.hidden, one.model.heads, one.model.kv(),
                                  one.model.ffn(), one.model.vocab_size}),
            std::vector<int64_t>({16, 2048, 32, 8, 8192, 128256}));
  EXPECT_TRUE(one.model.tie_embeddings);
  EXPECT_EQ(one.model.rope_factor, 32.0);
  Config eight = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/llama-3.1-8b.toml");
  EXPECT_EQ(std::vector<int64_t>({eight.model.layers, eight.model.hidden, eight.model.heads, eight.model.kv(),
                                  eight.model.ffn(), eight.model.vocab_size}),
            std::vector<int64_t>({32, 4096, 32, 8, 14336, 128256}));
  EXPECT_FALSE(eight.model.tie_embeddings);
  EXPECT_EQ(eight.model.rope_theta, 500000.0);
  trident::resolve_world(eight, 8);
  EXPECT_EQ(eight.parallel.dp, 1);
}

// DeepSeek-V3's preset: 671B parameters (its report's Table 1 and abstract: 671B total, not
// counting the 14B of its multi-token prediction module), of which the routed experts hold
// 58 MoE layers x 256 x 3 x 7168 x 2048.
TEST(Config, DeepseekV3PresetHasThePublishedParameterCount) {
  const Config c = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/deepseek-v3.toml");
  const double total = static_cast<double>(trident::config_rules::model_params(
      c.model, trident::ModelFeatures{.gated_mlp = true, .position_table = false, .moe = true}));
  EXPECT_NEAR(total / 671e9, 1.0, 0.005) << total;
  EXPECT_EQ(static_cast<double>(trident::config_rules::expert_params(c.model)), 58.0 * 256 * 3 * 7168 * 2048);
}

// A warm-up longer than the run is accepted (the trainer warns): shortening
// any preset takes one --set training.steps=N.
TEST(Config, WarmupLongerThanRunIsAccepted) {
  const Config c = parse_config("[training]\nsteps = 5\nwarmup_steps = 20\n", "t.toml");
  EXPECT_EQ(c.training.warmup_steps, 20);
}

// "auto" is stored as [-1], written back as "auto", and needs a layer per chunk.
TEST(Config, AutoPipelineSplitRoundTrips) {
  const Config c = parse_config("[parallel]\npp = 2\npipeline_layers = \"auto\"\n", "a.toml");
  EXPECT_TRUE(c.parallel.auto_split());
  EXPECT_NE(trident::to_toml(c).find("pipeline_layers = \"auto\""), std::string::npos);
  EXPECT_EQ(parse_config(trident::to_toml(c), "b.toml"), c);
  EXPECT_TRUE(parse_config("", "c.toml", {"parallel.pipeline_layers=auto"}).parallel.auto_split());
  EXPECT_THROW(parse_config("[parallel]\npipeline_layers = \"even\"\n", "d.toml"), ConfigError);
  Config few = parse_config("[model]\nlayers = 2\n[parallel]\npp = 4\npipeline_layers = \"auto\"\n", "e.toml");
  EXPECT_THROW(trident::check_config_tables(few, trident::config_tables()), ConfigError);  // 2 layers, 4 chunks
}

TEST(Config, OverridesApplyInOrder) {
  const Config c = load_config(kTiny, {"training.lr=3e-4", "schedule.kind=interleaved", "schedule.chunks=2",
                                       "parallel.pp=2", "parallel.pipeline_layers=[1,2,2,3]",
                                       "logging.dir = runs/x y", "training.steps=5", "training.steps=7",
                                       "model.dropout=0", "data.source=file", "data.path=\"quoted\"",
                                       "logging.progress=false"});
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-4);
  EXPECT_EQ(c.schedule.kind, "interleaved");
  EXPECT_EQ(c.parallel.pipeline_layers, (std::vector<int64_t>{1, 2, 2, 3}));
  EXPECT_EQ(c.logging.dir, "runs/x y");
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_EQ(c.model.dropout, 0.0);  // an integer is accepted for a number
  EXPECT_EQ(c.data.path, "quoted");
  EXPECT_FALSE(c.logging.progress);
}

// data.paths: TOML and --set, numbers with or without a fraction, written back.
TEST(Config, BlendPathsParseAndRoundTrip) {
  const Config c = parse_config("[data]\nsource = \"file\"\npaths = [[0.7, \"x/a\"], [3, \"b\"]]\n", "b.toml");
  ASSERT_EQ(c.data.paths.size(), 2u);
  EXPECT_EQ(c.data.paths[0].weight, 0.7);
  EXPECT_EQ(c.data.paths[0].path, "x/a");
  EXPECT_EQ(c.data.paths[1].weight, 3.0);
  EXPECT_EQ(parse_config(trident::to_toml(c), "again.toml"), c);
  EXPECT_NE(trident::to_toml(c).find("paths = [[0.7, \"x/a\"], [3.0, \"b\"]]"), std::string::npos) << trident::to_toml(c);
  const Config d = load_config(kTiny, {"data.source=file", "data.paths=[[1, \"a\"], [1, \"b\"]]"});
  EXPECT_EQ(d.data.paths.size(), 2u);
  EXPECT_NE(d, c);
}

TEST(Config, RoundTripThroughToToml) {
  Config c = load_config(kTiny, {"training.lr=3.0000000000000004e-4", "parallel.pipeline_layers=[3,5]",
                                 "parallel.pp=2", "data.source=file", "data.path=\"a \\\"q\\\" b\\\\c\"", "model.layernorm_eps=1e-6",
                                 "training.peak_tflops=90", "logging.progress=false"});
  const std::string text = trident::to_toml(c);
  const Config back = parse_config(text, "roundtrip.toml");
  EXPECT_EQ(back, c) << text;
  const std::string again = trident::to_toml(back);
  EXPECT_EQ(again.substr(again.find('\n')), text.substr(text.find('\n')));  // all but the source line
  EXPECT_NE(text.find("timeout_s = 60.0 "), std::string::npos) << text;
  // Every key is written out: commented out where the model reads no value of it (NOTE [given keys]).
  for (const auto& k : trident::config_keys()) {
    const std::string key = k.name.substr(k.name.find('.') + 1);
    const std::string line = (trident::model_key_unread(c, k.name) ? "\n# " : "\n") + key + " = ";
    EXPECT_NE(text.find(line), std::string::npos) << k.name;
  }
  // And a change is seen by ==.
  Config d = back;
  d.parallel.pipeline_layers = {4, 4};
  EXPECT_NE(d, c);
  EXPECT_EQ(parse_config(trident::to_toml(Config{}), "d.toml"), Config{});
}

TEST(Config, ReadmeDocumentsEveryKey) {
  const std::string readme = read_file(std::string(TRIDENT_SOURCE_DIR) + "/configs/README.md");
  ASSERT_FALSE(readme.empty());
  for (const auto& k : trident::config_keys()) {
    // Its table row: | `section.key` | type | `default` | allowed | meaning |
    const auto row = readme.find("| `" + k.name + "` |");
    ASSERT_NE(row, std::string::npos) << k.name << " is not in configs/README.md";
    // The README is where a key is documented; its row says what the schema says.
    const std::string line = readme.substr(row, readme.find('\n', row) - row);
    EXPECT_EQ(line, "| `" + k.name + "` | " + k.type + " | `" + k.default_value + "` | " + k.expect + " | " + k.doc + " |")
        << k.name << ": README row disagrees with the schema";
  }
}

// The docs/ pages repeat the rows of the keys a reader looks up there: each such row (a
// table row whose first cell is a `section.key`) must name a key of the schema and say what
// configs/README.md says, so a page cannot drift from the schema.
TEST(Config, DocsPagesKeyRowsAgreeWithTheSchema) {
  std::map<std::string, std::string> rows;
  for (const auto& k : trident::config_keys())
    rows[k.name] = "| `" + k.name + "` | " + k.type + " | `" + k.default_value + "` | " + k.expect + " | " + k.doc + " |";
  const std::regex key_row(R"(^\| `([a-z]+)\.([a-z_0-9]+)` \|)");
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TRIDENT_SOURCE_DIR) + "/docs")) {
    if (entry.path().extension() != ".md") continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, key_row)) continue;
      const std::string name = m[1].str() + "." + m[2].str();
      const auto it = rows.find(name);
      ASSERT_NE(it, rows.end()) << entry.path().filename() << ": " << name << " is not a config key";
      EXPECT_EQ(line, it->second) << entry.path().filename() << ": the row of " << name << " disagrees with the schema";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no key row found in docs/*.md: the pages or this test's pattern changed";
}

// NOTE [given keys]: the keys a model does not read are written commented out, so every preset's
// effective config (a run's config.toml, a checkpoint's manifest) reads back and passes the rules
// that refuse such a key when given.
TEST(Config, EffectiveConfigsReadBackThroughTheGivenKeysRules) {
  for (const char* preset : {"gpt-tiny", "llama-tiny", "mixtral-tiny", "qwen2-moe-tiny", "deepseek-v3-tiny"}) {
    Config c = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + preset + ".toml");
    trident::check_config_tables(c, trident::config_tables());
    const std::string text = trident::to_toml(c);
    Config back = parse_config(text, std::string(preset) + " again");
    EXPECT_NO_THROW(trident::check_config_tables(back, trident::config_tables())) << text;
    EXPECT_EQ(back, c) << preset;
    const bool dense = c.model.experts == 0;
    EXPECT_EQ(text.find("\n# moe_top_k = 2 ") != std::string::npos, dense) << text;
    EXPECT_EQ(back.gave("model.moe_top_k"), !dense) << preset;
  }
  const Config given = parse_config("[model]\nlayers = 2\n", "g.toml", {"training.lr=1e-3"});
  EXPECT_TRUE(given.gave("model.layers"));
  EXPECT_TRUE(given.gave("training.lr"));  // its default value, given
  EXPECT_FALSE(given.gave("training.steps"));
}

TEST(Config, BadConfigsNameKeyValueAndExpectation) {
  const std::vector<BadCase> cases = {
      {"unknown section", "[modle]\nlayers = 2\n", {}, "x.toml: unknown section [modle] (line 1)"},
      {"unknown top-level key", "steps = 3\n", {}, "x.toml: unknown top-level key steps"},
      {"unknown key", "[training]\nstepz = 3\n", {}, "x.toml: unknown key training.stepz (line 2)"},
      {"string for int", "[model]\nlayers = \"two\"\n", {}, "x.toml: model.layers = \"two\": expected an integer >= 1"},
      {"float for int", "[model]\nlayers = 2.5\n", {}, "model.layers = 2.5: expected an integer >= 1"},
      {"negative steps", "[training]\nsteps = -3\n", {}, "x.toml: training.steps = -3: expected an integer >= 1"},
      {"zero tp", "[parallel]\ntp = 0\n", {}, "parallel.tp = 0: expected an integer >= 1"},
      {"dp zero", "[parallel]\ndp = 0\n", {}, "parallel.dp = 0: expected -1 (auto) or an integer >= 1"},
      {"dropout 1", "[model]\ndropout = 1.0\n", {}, "model.dropout = 1.0: expected a finite number in [0, 1)"},
      {"unknown data source", "[data]\nsource = \"web\"\n", {}, "data.source = \"web\": expected one of"},
      {"unknown tokenizer", "[data]\ntokenizer = \"sp\"\n", {}, "data.tokenizer = \"sp\""},
      {"unknown data format", "[data]\nformat = \"hdf5\"\n", {}, "data.format = \"hdf5\": expected one of \"trident\", \"megatron\""},
      {"megatron without a file", "[data]\nformat = \"megatron\"\n", {},
       "data.format = \"megatron\" reads data.path: it needs data.source = \"file\", got \"synthetic\""},
      {"megatron with evaluation", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\n[training]\neval_interval = 5\n", {},
       "data.format = \"megatron\" with training.eval_interval = 5 needs data.split (e.g. \"969,30,1\")"},
      {"megatron split without valid", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\nsplit = \"99,0,1\"\n"
       "[training]\neval_interval = 5\n", {}, "data.split = \"99,0,1\" has no valid share but training.eval_interval = 5"},
      {"bad split", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\nsplit = \"99;1\"\n", {},
       "data.split = \"99;1\": part 1 is \"99;1\", not a number"},
      {"split of a token file", "[data]\nsource = \"file\"\npath = \"p\"\nsplit = \"9,1\"\n", {},
       "data.split = \"9,1\" with data.format = \"trident\": expected data.format = \"megatron\""},
      {"unknown data order", "[data]\norder = \"random\"\n", {},
       "data.order = \"random\": expected one of \"auto\", \"stream\", \"megatron\""},
      {"megatron order on a token file", "[data]\nsource = \"file\"\npath = \"p\"\norder = \"megatron\"\n", {},
       "data.order = \"megatron\" needs data.format = \"megatron\" (it walks the documents of PREFIX.idx), got "
       "data.format = \"trident\""},
      {"megatron order, seed beyond numpy's", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\n"
       "[training]\nseed = 4294967296\n", {}, "training.seed = 4294967296 with data.order = \"megatron\": numpy's RandomState"},
      {"cache_dir in the stream order", "[data]\ncache_dir = \"c\"\n", {},
       "data.cache_dir = \"c\" holds Megatron's index caches, which only data.order = \"megatron\" reads; this run's "
       "order is \"stream\""},
      {"cache_dir without a split", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\n"
       "cache_dir = \"c\"\n", {},
       "data.cache_dir = \"c\" needs data.split: the index caches megatron-core reads and writes are described by "
       "the split string"},
      {"cache_tokenizer not an object", "[data]\ncache_tokenizer = \"[1]\"\n", {},
       "data.cache_tokenizer = \"[1]\": expected a JSON object, the tokenizer's unique_identifiers"},
      {"cache_tokenizer not JSON", "[data]\ncache_tokenizer = \"{'class': 1}\"\n", {},
       "data.cache_tokenizer = \"{'class': 1}\": not JSON ("},
      {"cache_tokenizer without cache_dir", "[data]\ncache_tokenizer = \"{}\"\n", {},
       "data.cache_tokenizer = \"{}\" names the tokenizer in the index caches written to data.cache_dir, which is "
       "not set: expected data.cache_dir, or no data.cache_tokenizer"},
      {"megatron order, seq_len 1", "[data]\nformat = \"megatron\"\nsource = \"file\"\npath = \"p\"\n"
       "[model]\nseq_len = 1\n", {}, "model.seq_len = 1 with data.order = \"megatron\""},
      {"path and paths", "[data]\nsource = \"file\"\npath = \"p\"\npaths = [[1, \"a\"]]\n", {},
       "data.path = \"p\" and data.paths: expected one of them"},
      {"paths on synthetic data", "[data]\npaths = [[1, \"a\"]]\n", {},
       "data.paths reads files: it needs data.source = \"file\", got \"synthetic\""},
      {"paths weight", "[data]\nsource = \"file\"\npaths = [[0, \"a\"], [1, \"b\"]]\n", {},
       "data.paths = [[0.0, \"a\"], [1.0, \"b\"]]: expected an array of [weight, prefix] pairs, each weight a finite number > 0"},
      {"paths shape", "[data]\nsource = \"file\"\npaths = [\"a\", \"b\"]\n", {},
       "x.toml: data.paths = [ 'a', 'b' ]: expected an array of [weight, prefix] pairs, each weight a finite number > 0"},
      {"paths order", "[data]\nsource = \"file\"\npaths = [[\"a\", 1]]\n", {},
       ": expected an array of [weight, prefix] pairs, each weight a finite number > 0"},
      {"hf tokenizer without its folder", "[data]\ntokenizer = \"hf\"\n", {}, "data.tokenizer = \"hf\" needs data.tokenizer_dir"},
      {"unknown backend", "[parallel]\nbackend = \"mpi\"\n", {}, "parallel.backend = \"mpi\""},
      {"unknown device", "[training]\ndevice = \"tpu\"\n", {}, "training.device = \"tpu\""},
      {"bool as string", "[logging]\nprogress = \"yes\"\n", {}, "logging.progress = \"yes\": expected true or false"},
      {"list of strings", "[parallel]\npipeline_layers = [\"a\"]\n", {}, "expected \"auto\" or an array of integers >= 1"},
      {"section not a table", "model = 3\n", {}, "x.toml: model must be a table [model]"},
      {"malformed TOML", "[model]\nlayers = = 2\n", {}, "x.toml:2:"},
      {"hidden % heads", "[model]\nhidden = 64\nheads = 6\n", {}, "model.hidden (64) must be divisible by model.heads (6)"},
      {"tp divides heads", "[model]\nheads = 8\n[parallel]\ntp = 3\n", {}, "parallel.tp (3) must divide model.heads (8)"},
      {"llama needs ffn_hidden", "[model]\narch = \"llama\"\n", {}, "model.ffn_hidden must be set for model.arch = \"llama\""},
      {"kv_heads divides heads", "[model]\narch = \"llama\"\nffn_hidden = 96\nheads = 4\nkv_heads = 3\n", {}, "model.kv_heads (3) must divide model.heads (4)"},
      {"tp divides kv_heads", "[model]\narch = \"llama\"\nffn_hidden = 96\nheads = 4\nkv_heads = 1\n[parallel]\ntp = 2\n", {},
       "parallel.tp (2) must divide model.kv_heads (1): each tensor-parallel rank holds whole key/value heads"},
      {"llama has no dropout", "[model]\narch = \"llama\"\nffn_hidden = 96\ndropout = 0.1\n", {}, "model.dropout = 0.1: llama has no dropout, expected 0"},
      {"odd head dim", "[model]\narch = \"llama\"\nffn_hidden = 96\nhidden = 12\nheads = 4\nkv_heads = 4\n", {}, "model.hidden / model.heads (3) must be even for rotary embeddings"},
      {"llama key under gpt", "[model]\nkv_heads = 2\n", {}, "model.kv_heads (2) is a llama key: model.arch = \"gpt\" does not read it"},
      {"untied gpt", "[model]\ntie_embeddings = false\n", {}, "model.tie_embeddings = false is a llama key"},
      {"rope_theta under gpt", "[model]\nrope_theta = 5e5\n", {}, "model.rope_theta is a llama key"},
      {"rope factor without scaling", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_factor = 4.0\n", {},
       "model.rope_factor is read only with model.rope_scaling = \"llama3\" or \"yarn\", got \"none\""},
      {"rope bands", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_scaling = \"llama3\"\nrope_low_freq_factor = 4.0\nrope_high_freq_factor = 4.0\n", {},
       "model.rope_high_freq_factor (4.0) must exceed model.rope_low_freq_factor (4.0)"},
      {"yarn key under llama3", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_scaling = \"llama3\"\nrope_mscale = 1.0\n", {},
       "model.rope_mscale is read only with model.rope_scaling = \"yarn\", got \"llama3\""},
      {"llama3 key under yarn", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_scaling = \"yarn\"\nrope_low_freq_factor = 2.0\n", {},
       "model.rope_low_freq_factor is read only with model.rope_scaling = \"llama3\", got \"yarn\""},
      {"yarn betas", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_scaling = \"yarn\"\nrope_beta_fast = 1.0\n", {},
       "model.rope_beta_fast (1.0) must exceed model.rope_beta_slow (1.0)"},
      {"yarn key under gpt", "[model]\nrope_beta_slow = 2.0\n", {}, "model.rope_beta_slow"},
      {"yarn factor below 1", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_scaling = \"yarn\"\nrope_factor = 0.5\n",
       {}, "model.rope_factor = 0.5: expected a finite number >= 1"},
      // NOTE [given keys]: a key the model does not read is refused at its default value too.
      {"MoE key at its default on a dense model", "[model]\narch = \"llama\"\nffn_hidden = 96\nmoe_top_k = 2\n", {},
       "model.moe_top_k is a mixture-of-experts key: model.arch = \"llama\" is a dense family"},
      {"no experts said of a dense model", "", {"model.experts=0"}, "model.experts is a mixture-of-experts key"},
      {"rope factor at its default without scaling", "[model]\narch = \"llama\"\nffn_hidden = 96\nrope_factor = 8.0\n", {},
       "model.rope_factor is read only with model.rope_scaling = \"llama3\" or \"yarn\", got \"none\""},
      {"yarn key at its default under gpt", "", {"model.rope_beta_fast=32"}, "model.rope_beta_fast is a llama key"},
      {"tp divides ffn", "[model]\nhidden = 64\nheads = 4\nffn_hidden = 90\n[parallel]\ntp = 4\n", {},
       "parallel.tp (4) must divide the MLP width (90"},
      {"sequence parallel", "[model]\nseq_len = 30\nheads = 4\n[parallel]\ntp = 4\nsequence_parallel = true\n", {},
       "parallel.sequence_parallel needs model.seq_len (30) divisible by parallel.tp (4)"},
      {"bf16 pipeline under fp32", "[parallel]\npp = 2\npipeline_dtype = \"bf16\"\n", {},
       "parallel.pipeline_dtype = \"bf16\" needs training.precision = \"bf16\", got \"fp32\""},
      {"pipeline dtype without a pipeline", "[parallel]\npipeline_dtype = \"fp32\"\n", {},
       "parallel.pipeline_dtype = \"fp32\" has no effect with a single pipeline stage"},
      {"pipeline dtype value", "[parallel]\npp = 2\npipeline_dtype = \"fp16\"\n", {},
       "parallel.pipeline_dtype = \"fp16\": expected one of \"auto\", \"fp32\", \"bf16\""},
      {"layers % pp", "[model]\nlayers = 6\n[parallel]\npp = 4\n", {},
       "model.layers (6) must be divisible by parallel.pp (4) x schedule.chunks (1) = 4"},
      {"pipeline_layers count", "[model]\nlayers = 8\n[parallel]\npp = 2\npipeline_layers = [4, 4, 0]\n", {},
       "parallel.pipeline_layers = [4, 4, 0]: expected \"auto\" or an array of integers >= 1"},
      {"pipeline_layers entries", "[model]\nlayers = 8\n[parallel]\npp = 2\npipeline_layers = [8]\n", {},
       "parallel.pipeline_layers has 1 entries but parallel.pp (2) x schedule.chunks (1) = 2"},
      {"pipeline_layers sum", "[model]\nlayers = 8\n[parallel]\npp = 2\npipeline_layers = [3, 4]\n", {},
       "parallel.pipeline_layers sums to 7 but model.layers = 8"},
      {"chunks without interleaved", "[model]\nlayers = 4\n[schedule]\nchunks = 2\n", {},
       "schedule.chunks = 2 needs schedule.kind = \"interleaved\", \"zb-v\", \"v-half\", \"v-min\", \"dualpipev\" or \"file\", got \"1f1b\""},
      {"file schedule without file", "[schedule]\nkind = \"file\"\n", {}, "schedule.kind = \"file\" needs schedule.file"},
      {"global % micro", "[training]\nglobal_batch_size = 10\nmicro_batch_size = 4\n", {},
       "training.global_batch_size (10) must be divisible by training.micro_batch_size (4)"},
      {"global % micro x dp", "[training]\nglobal_batch_size = 8\nmicro_batch_size = 2\n[parallel]\ndp = 3\n", {},
       "training.micro_batch_size (2) x parallel.dp (3) = 6"},
      {"min_lr > lr", "[training]\nlr = 1e-4\nmin_lr = 1e-3\n", {}, "training.min_lr (0.001) must be <= training.lr (0.0001)"},
      {"zero 2", "[parallel]\nzero = 2\n", {}, "x.toml: parallel.zero = 2: expected an integer in [0, 1]"},
      {"dropout with tp", "[model]\ndropout = 0.1\n[parallel]\ntp = 2\n", {},
       "x.toml: model.dropout = 0.1 with parallel.tp = 2: expected model.dropout = 0 when parallel.tp > 1"},
      {"recompute with dropout", "[model]\ndropout = 0.1\n[training]\nrecompute = \"full\"\n", {},
       "x.toml: training.recompute = \"full\" with model.dropout = 0.1: expected training.recompute = \"none\" or "
       "model.dropout = 0"},
      {"trace step after the run", "[training]\nsteps = 3\n[logging]\ntrace = true\ntrace_step = 5\n", {},
       "x.toml: logging.trace_step = 5 but training.steps = 3: expected logging.trace_step <= training.steps when "
       "logging.trace = true"},
      {"schedule file without kind file", "[schedule]\nfile = \"s.txt\"\n", {},
       "x.toml: schedule.file = \"s.txt\" with schedule.kind = \"1f1b\": expected schedule.kind = \"file\", or no "
       "schedule.file"},
      {"data path with synthetic data", "[data]\npath = \"data/brown\"\n", {},
       "x.toml: data.path = \"data/brown\" with data.source = \"synthetic\": expected data.source = \"file\", or no "
       "data.path"},
      {"tokenizer dir with byte", "[data]\ntokenizer_dir = \"vocab\"\n", {},
       "x.toml: data.tokenizer_dir = \"vocab\" with data.tokenizer = \"byte\": expected data.tokenizer = \"gpt2\" "
       "or \"hf\", or no data.tokenizer_dir"},
      {"bucket size 0", "[parallel]\ndp_bucket_mb = 0\n", {}, "parallel.dp_bucket_mb = 0"},
      {"negative eval interval", "[training]\neval_interval = -1\n", {}, "training.eval_interval = -1: expected an integer >= 0"},
      {"file data without path", "[data]\nsource = \"file\"\n", {}, "data.source = \"file\" needs data.path"},
      {"nccl on cpu", "[parallel]\nbackend = \"nccl\"\n", {}, "parallel.backend = \"nccl\" needs training.device = \"cuda\""},
      {"gloo on cuda", "[parallel]\nbackend = \"gloo\"\n[training]\ndevice = \"cuda\"\n", {},
       "parallel.backend = \"gloo\" with training.device = \"cuda\" is not supported"},
      {"checkpoint without dir", "[checkpoint]\ninterval = 5\n", {}, "checkpoint.interval = 5 needs checkpoint.dir"},
      {"resume without dir", "[checkpoint]\nresume = true\n", {}, "checkpoint.resume = true needs checkpoint.dir"},
      {"async without dir", "[checkpoint]\nasync = true\n", {}, "checkpoint.async = true needs checkpoint.dir"},
      {"measured costs without zb-auto", "", {"schedule.zb_auto_costs=measured", "parallel.pp=2"},
       "schedule.zb_auto_costs = \"measured\" with schedule.kind = \"1f1b\": only zb-auto is searched for costs"},
      {"measured costs at pp 1", "",
       {"schedule.kind=zb-auto", "schedule.memory_limit=2", "schedule.zb_auto_costs=measured"},
       "schedule.zb_auto_costs = \"measured\" with parallel.pp = 1: one stage has no pipeline list to search"},
      {"unknown zb-auto costs", "", {"schedule.zb_auto_costs=fast"}, "schedule.zb_auto_costs = \"fast\": expected one of"},
      {"param gather overlap without ZeRO-1", "", {"parallel.overlap_param_gather=false"},
       "parallel.overlap_param_gather = false with parallel.zero = 0: only ZeRO-1 gathers parameters after the step"},
      {"async without interval", "", {"checkpoint.dir=ck", "checkpoint.async=true"},
       "checkpoint.async = true writes the checkpoint.interval saves in the background, but checkpoint.interval = 0"},
      {"exit without dir", "", {"training.exit_after_steps=3"},
       "training.exit_after_steps = 3 needs checkpoint.dir: the run would stop with nothing to continue from"},
      {"exit at the last step", "", {"training.steps=4", "training.exit_after_steps=4", "checkpoint.dir=ck"},
       "training.exit_after_steps = 4 is not before training.steps = 4: expected 0 (off) or a step in [1, 3]"},
      {"override without =", "", {"training.steps"}, "--set training.steps: expected section.key=value"},
      {"override without section", "", {"steps=3"}, "--set steps=3: expected section.key=value"},
      {"unknown override key", "", {"training.stepz=3"}, "--set training.stepz=3: unknown key training.stepz: keys of [training] are steps,"},
      {"unknown override section", "", {"trainer.steps=3"}, "unknown key trainer.steps: sections are [model]"},
      {"override out of range", "", {"training.steps=-3"}, "x.toml: --set training.steps=-3: training.steps = -3: expected an integer >= 1"},
      {"override wrong type", "", {"training.lr=fast"}, "--set training.lr=fast: training.lr = fast: expected a finite number > 0"},
      {"lr inf", "", {"training.lr=inf"}, "training.lr = inf: expected a finite number > 0"},
      {"init_std inf", "", {"model.init_std=inf"}, "model.init_std = inf: expected a finite number > 0"},
      {"layernorm_eps inf", "[model]\nlayernorm_eps = inf\n", {}, "x.toml: model.layernorm_eps = inf: expected a finite number > 0 (line 2)"},
      {"eps inf", "", {"training.eps=+inf"}, "training.eps = inf: expected a finite number > 0"},
      {"weight decay nan", "", {"training.weight_decay=nan"}, "training.weight_decay = nan: expected a finite number >= 0"},
      {"blend weight inf", "", {"data.source=file", "data.paths=[[inf, \"a\"]]"}, "each weight a finite number > 0"},
      {"timeout inf", "", {"parallel.timeout_s=inf"}, "parallel.timeout_s = inf: expected a finite number in [1, 1000000]"},
      {"timeout huge", "", {"parallel.timeout_s=1e300"}, "parallel.timeout_s = 1e+300: expected a finite number in [1, 1000000]"},
      {"timeout tiny", "", {"parallel.timeout_s=1e-9"}, "parallel.timeout_s = 1e-09: expected a finite number in [1, 1000000]"},
      {"bucket huge", "", {"parallel.dp_bucket_mb=1e30"}, "parallel.dp_bucket_mb = 1e+30: expected a finite number in (0, 1048576]"},
      {"threads huge", "", {"training.threads=100000"}, "training.threads = 100000: expected an integer in [1, 1024]"},
      {"override bare string", "", {"training.device=tpu"}, "--set training.device=tpu: training.device = \"tpu\": expected one of"},
      {"override smuggling", "", {"training.steps=3\nmodel.layers = 4"}, "expected an integer >= 1 (values are read as TOML)"},
  };
  for (const BadCase& bc : cases) {
    const std::string msg = error_of([&] {
      Config c = parse_config(bc.toml, "x.toml", bc.overrides);
      trident::check_config_tables(c, trident::config_tables());  // the families' and kinds' rules
    });
    EXPECT_NE(msg.find(bc.expected), std::string::npos)
        << bc.what << "\n  expected: " << bc.expected << "\n  got:      " << msg;
  }
  EXPECT_GE(cases.size(), 12u);
}

TEST(Config, MalformedTomlGivesLineAndColumn) {
  const std::string msg = error_of([] { parse_config("[model]\nlayers = 2\nhidden = [1,\n", "bad.toml"); });
  EXPECT_EQ(msg.rfind("bad.toml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("invalid TOML"), std::string::npos) << msg;
  const std::string dup = error_of([] { parse_config("[model]\nlayers = 2\nlayers = 3\n", "dup.toml"); });
  EXPECT_NE(dup.find("dup.toml:3:"), std::string::npos) << dup;
}

TEST(Config, MissingFile) {
  EXPECT_EQ(error_of([] { load_config("nope.toml"); }), "cannot open config file 'nope.toml'");
  EXPECT_EQ(error_of([] { load_config(TRIDENT_SOURCE_DIR); }),
            std::string("cannot open config file '") + TRIDENT_SOURCE_DIR + "'");
}

TEST(Config, ResolveWorld) {
  Config c = load_config(kTiny, {"parallel.tp=2", "parallel.pp=4"});
  trident::resolve_world(c, 16);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(trident::num_microbatches(c), 4);

  Config bad = load_config(kTiny, {"parallel.tp=2", "parallel.pp=4", "parallel.dp=2"});
  EXPECT_NE(error_of([&] { trident::resolve_world(bad, 8); })
                .find("parallel: tp(2) x pp(4) x dp(2) = 16 but WORLD_SIZE = 8"),
            std::string::npos);
  Config odd = load_config(kTiny, {"parallel.tp=4"});
  EXPECT_NE(error_of([&] { trident::resolve_world(odd, 6); })
                .find("WORLD_SIZE = 6 is not divisible by tp(4) x pp(1) = 4"),
            std::string::npos);
  // dp resolved from the world must also split the global batch (16 / (2 * 3)).
  Config three = load_config(kTiny);
  EXPECT_NE(error_of([&] { trident::resolve_world(three, 3); })
                .find("training.global_batch_size (16) must be divisible by training.micro_batch_size (2) x parallel.dp (3) = 6"),
            std::string::npos);
  Config unresolved = load_config(kTiny);
  EXPECT_NE(error_of([&] { trident::num_microbatches(unresolved); }).find("unresolved"), std::string::npos);
}

TEST(Config, CheckConfigCatchesProgrammaticValues) {
  Config c;
  c.source = "code";
  c.training.beta2 = 1.5;
  EXPECT_EQ(error_of([&] { trident::check_config(c); }), "code: training.beta2 = 1.5: expected a finite number in [0, 1)");
  c = Config{};
  c.model.init_std = 0;
  EXPECT_NE(error_of([&] { trident::check_config(c); }).find("model.init_std = 0.0: expected a finite number > 0"),
            std::string::npos);
}

// The generators own the kinds and the families their rules; the config checks
// are handed them as tables (NOTE [config tables]).
TEST(Config, TablesHoldTheGeneratorsKindsAndTheFamilies) {
  const trident::ConfigTables t = trident::config_tables();
  std::vector<std::string> kinds = trident::sched::schedule_kinds();
  kinds.insert(kinds.end(), {"zb-auto", "file"});
  ASSERT_EQ(t.kinds.size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(t.kinds[i].kind, kinds[i]);
    Config c = parse_config("[schedule]\nkind = \"" + kinds[i] + "\"\n" +
                                (kinds[i] == "file" ? "file = \"s.txt\"\n" : "") +
                                (kinds[i] == "zb-auto" ? "memory_limit = 2\n" : ""),
                            "k.toml");
    EXPECT_NO_THROW(trident::check_config_tables(c, t)) << kinds[i];
    EXPECT_EQ(c.schedule.chunks, trident::sched::default_chunks(kinds[i])) << kinds[i];  // absent: the kind's
  }
  Config c = parse_config("[schedule]\nkind = \"zigzag\"\n", "x.toml");  // parsing cannot know the generators
  std::string expected = "x.toml: schedule.kind = \"zigzag\": expected one of ";
  for (size_t i = 0; i < kinds.size(); ++i) expected += (i == 0 ? "\"" : i + 1 < kinds.size() ? ", \"" : " or \"") + kinds[i] + "\"";
  EXPECT_EQ(error_of([&] { trident::check_config_tables(c, t); }), expected);
  c = parse_config("[model]\narch = \"bert\"\n", "a.toml");  // nor the families
  EXPECT_EQ(error_of([&] { trident::check_config_tables(c, t); }),
            "a.toml: model.arch = \"bert\": expected one of \"gpt\", \"llama\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\" or \"deepseek_v3\"");
  // A family's rules are its table's: a table without Llama's rules lets its rule go.
  c = parse_config("[model]\narch = \"llama\"\n", "l.toml");
  EXPECT_NE(error_of([&] { Config d = c; trident::check_config_tables(d, t); }).find("model.ffn_hidden must be set"),
            std::string::npos);
  trident::ConfigTables lax = t;
  lax.families[1].check = [](const Config&) {};
  EXPECT_NO_THROW(trident::check_config_tables(c, lax));
}

// schedule.memory_limit belongs to zb-auto: needed there, refused elsewhere.
TEST(Config, MemoryLimitOnlyWithZbAuto) {
  EXPECT_EQ(trident::load_config(kTiny, {"schedule.kind=zb-auto", "schedule.memory_limit=4"}).schedule.memory_limit, 4);
  EXPECT_NE(error_of([&] { trident::load_config(kTiny, {"schedule.kind=zb-auto"}); })
                .find("schedule.kind = \"zb-auto\" needs schedule.memory_limit >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trident::load_config(kTiny, {"schedule.memory_limit=4"}); })
                .find("schedule.memory_limit = 4 with schedule.kind = \"1f1b\": only zb-auto has a memory limit"),
            std::string::npos);
}

// The layout arithmetic has one copy, shared by resolve_world and Layout::make.
TEST(Config, LayoutFactors) {
  EXPECT_NO_THROW(trident::check_layout_factors("w", 16, 2, 4, 2));
  EXPECT_EQ(error_of([] { trident::check_layout_factors("w", 8, 2, 4, 2); }),
            "w: tp(2) x pp(4) x dp(2) = 16 but WORLD_SIZE = 8");
  EXPECT_EQ(error_of([] { trident::check_layout_factors("w", 4, 0, 4, 1); }),
            "w: every factor must be >= 1, got tp(0) x pp(4) x dp(1) with WORLD_SIZE = 4");
}

TEST(Config, KeysTableDescribesTypesAndDefaults) {
  const auto keys = trident::config_keys();
  EXPECT_EQ(keys.size(), 120u);
  bool found = false;
  for (const auto& k : keys) {
    if (k.name != "parallel.dp") continue;
    found = true;
    EXPECT_EQ(k.type, "integer");
    EXPECT_EQ(k.default_value, "-1");
    EXPECT_EQ(k.expect, "-1 (auto) or an integer >= 1");
    EXPECT_FALSE(k.doc.empty());
  }
  EXPECT_TRUE(found);
}

namespace {

// The schedule.chunks a config of `kind` with `chunks` ends up with in a run:
// absent (0) becomes sched::default_chunks, as check_config_tables resolves it.
std::string chunks_error(const std::string& kind, const std::string& chunks) {
  std::vector<std::string> ov = {"parallel.pp=2", "schedule.kind=" + kind};
  if (!chunks.empty()) ov.push_back("schedule.chunks=" + chunks);
  try {
    trident::load_checked_config(kTiny, ov);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, ChunksDefaultToWhatTheKindNeeds) {
  // gpt-tiny has 4 layers: pp 2 x chunks 2 divides them, so only the chunks check can fail.
  for (const std::string& kind : trident::sched::schedule_kinds()) {
    EXPECT_EQ(chunks_error(kind, ""), "") << kind;  // absent: the kind's own
    EXPECT_EQ(chunks_error(kind, std::to_string(trident::sched::default_chunks(kind))), "") << kind;
  }
  EXPECT_EQ(trident::load_config(kTiny, {"schedule.kind=zb-v"}).schedule.chunks, 0);  // the file's: absent
  EXPECT_EQ(trident::load_checked_config(kTiny, {"schedule.kind=zb-v"}).schedule.chunks, 2);  // resolved by the tables
  // An explicit other value is an error naming it.
  EXPECT_NE(chunks_error("zb-v", "1").find("schedule.chunks = 1: schedule.kind = \"zb-v\" runs 2 chunks per rank"),
            std::string::npos) << chunks_error("zb-v", "1");
  EXPECT_NE(chunks_error("dualpipev", "4").find("schedule.chunks = 4: schedule.kind = \"dualpipev\" runs 2 chunks"),
            std::string::npos) << chunks_error("dualpipev", "4");
  EXPECT_NE(chunks_error("1f1b", "2").find("schedule.chunks = 2 needs schedule.kind"), std::string::npos);
  // The layer check counts the kind's chunks when none are given: 6 layers do not split over pp 2 x 2.
  EXPECT_NE(error_of([&] { trident::load_checked_config(kTiny, {"parallel.pp=2", "schedule.kind=zb-v", "model.layers=6"}); })
                .find("parallel.pp (2) x schedule.chunks (2) = 4"),
            std::string::npos);
}

// The host-memory check counts the activations of the micro-batches the schedule
// keeps in flight (issue 30), per (micro-batch, chunk) pair the fewest layers of
// any chunk times NOTE [activation memory]'s bytes of one layer less the attention
// core; with every rank on the host the mean over pipeline ranks, else the least.
// On CUDA the same lower bound (less the synthetic tokens, which stay on the
// host) is checked against the device's total memory, one rank per device, with
// the least any pipeline rank keeps in flight (issue 30).
TEST(Config, DeviceMemoryIsCheckedOnCuda) {
  Config c = load_config(kTiny, {"training.micro_batch_size=4096", "training.global_batch_size=16384",
                                 "parallel.dp=1", "parallel.pp=4", "training.threads=1",
                                 "data.synthetic_tokens=1000000000"});
  c.schedule.chunks = 1;
  const int64_t gib = int64_t{1} << 30;
  const std::vector<int> inflight = {4, 3, 2, 1};
  // training.device = "cpu": the host's check, not this one.
  EXPECT_NO_THROW(trident::check_device_memory(c, kGptShape, 0, 1, inflight));
  c.training.device = "cuda";
  EXPECT_NO_THROW(trident::check_device_memory(c, kGptShape, 0, 0, inflight));  // not readable: skipped
  EXPECT_NO_THROW(trident::check_device_memory(c, kGptShape, 0, 80 * gib, inflight));
  const std::string e = error_of([&] { trident::check_device_memory(c, kGptShape, 3, gib / 4, inflight); });
  EXPECT_NE(e.find("bytes of device memory but CUDA device 3 has 2.68e+08 (its total memory): one rank x ("),
            std::string::npos) << e;
  EXPECT_NE(e.find("activations of 1 micro-batch(es) in flight under schedule.kind = \"1f1b\", 2 layer(s) each"),
            std::string::npos) << e;
  EXPECT_EQ(e.find("synthetic_tokens"), std::string::npos) << "the tokens stay on the host: " << e;
  // The 4e9 bytes of synthetic tokens are not in the figure: a device 1 % above it fits.
  const std::string at_least = "needs at least ";
  ASSERT_NE(e.find(at_least), std::string::npos) << e;
  const double needed = std::stod(e.substr(e.find(at_least) + at_least.size()));
  EXPECT_LT(needed, 4e9) << e;
  EXPECT_NO_THROW(trident::check_device_memory(c, kGptShape, 3, static_cast<int64_t>(needed * 1.01), inflight));
  // The host's check leaves a CUDA run's device memory to this one.
  EXPECT_NO_THROW(trident::check_host_resources(c, kGptShape, 4, gib / 4, 0, inflight));
}

// The parameters in the host-memory figure are the family's (NOTE [model
// shape]): gpt-tiny's two MLP matrices and learned position table, llama-tiny's
// three (SwiGLU), grouped k and v (4 of 8 heads) and untied head, each written
// out here.
TEST(Config, HostMemoryCountsTheFamilysParameters) {
  const double L = 8, h = 64, V = 256, S = 32;
  const double gpt = L * (2 * h * h + 2 * h * h + 2 * h * 256) + V * h + S * h;  // 411648
  const double llama = L * (2 * h * h + 2 * h * 32 + 3 * h * 176) + 2 * V * h;    // 369664
  for (const auto& [file, params] : {std::pair{kTiny, gpt}, std::pair{std::string(TRIDENT_SOURCE_DIR) +
                                                                      "/configs/llama-tiny.toml", llama}}) {
    Config c = trident::load_checked_config(file, {"parallel.dp=1"});
    const trident::ModelFeatures shape = trident::model_family(c, trident::model_families()).features;
    const std::string e = error_of([&] { trident::check_host_resources(c, shape, 1, 1024, 0); });
    EXPECT_NE(e.find("(" + figure(params) + " parameters of model.layers = 8"), std::string::npos)
        << file << ": " << e;
  }
}

// ZeRO-1 shards the moments over dp x cp, the routed experts' over their expert-data-parallel
// ranks ((tp / etp) x cp x dp / ep, NOTE [expert grid]): cp 2 halves both shares of AdamW's
// moments that one process holds whole.
TEST(Config, HostMemoryShardsTheMomentsOverTheContextParallelRanks) {
  const std::string mixtral = std::string(TRIDENT_SOURCE_DIR) + "/configs/mixtral-tiny.toml";
  const auto adamw = [&](const std::vector<std::string>& sets) {
    Config c = trident::load_checked_config(mixtral, sets);
    const trident::ModelFeatures shape = trident::model_family(c, trident::model_families()).features;
    const std::string e = error_of([&] { trident::check_host_resources(c, shape, 1, 1024, 0); });
    const size_t at = e.find("AdamW: "), experts = e.find(" x parallel.pp): ");
    EXPECT_NE(at, std::string::npos) << e;
    EXPECT_NE(experts, std::string::npos) << e;
    return std::pair{std::stod(e.substr(at + 7)), std::stod(e.substr(experts + 17))};
  };
  const auto [whole, whole_experts] = adamw({"parallel.dp=1", "parallel.zero=1"});
  const auto [cp2, cp2_experts] = adamw({"parallel.dp=1", "parallel.cp=2", "parallel.zero=1"});
  // 16 bytes a parameter, 8 of them the moments: 12 of 16 left with the moments in halves.
  EXPECT_NEAR(cp2 / whole, 12.0 / 16, 0.01) << whole << " " << cp2;
  EXPECT_NEAR(cp2_experts / whole_experts, 12.0 / 16, 0.01) << whole_experts << " " << cp2_experts;
}

TEST(Config, HostMemoryCountsTheActivationsInFlight) {
  // 131072 tokens per micro-batch through 64-wide layers: activations of a few GB, the
  // parameters, logits and synthetic tokens together under 1 GB.
  Config c = load_config(kTiny, {"training.micro_batch_size=4096", "training.global_batch_size=16384",
                                 "parallel.dp=1", "training.threads=1"});
  c.schedule.chunks = 1;
  const int64_t host = int64_t{1} << 30;
  EXPECT_NO_THROW(trident::check_host_resources(c, kGptShape, 1, host, 0));  // without the schedule's figures
  const double layer = trident::layer_activation_bytes(c.model, kGptShape, 4096, 1, false, "selective", 4);
  std::string e = error_of([&] { trident::check_host_resources(c, kGptShape, 1, host, 0, {1}); });
  EXPECT_NE(e.find("; activations of 1 micro-batch(es) in flight under schedule.kind = \"1f1b\", 8 layer(s) each, "
                   "of training.micro_batch_size x model.seq_len: " + figure(8 * layer) + ")"),
            std::string::npos) << e;
  // pp = 4 under 1F1B: ranks 0..3 hold 4, 3, 2, 1 micro-batches of 2 layers each. All four
  // ranks on this host: 2.5 on average; only one of them here: the least, 1.
  c.parallel.pp = 4;
  e = error_of([&] { trident::check_host_resources(c, kGptShape, 4, host, 0, {4, 3, 2, 1}); });
  EXPECT_NE(e.find("activations of 2.5 micro-batch(es) in flight under schedule.kind = \"1f1b\", 2 layer(s) each, "
                   "of training.micro_batch_size x model.seq_len: " + figure(2.5 * 2 * layer) + ")"),
            std::string::npos) << e;
  c.parallel.dp = 2;  // 8 ranks, 1 here: it may be the last stage's
  e = error_of([&] { trident::check_host_resources(c, kGptShape, 1, host / 4, 0, {4, 3, 2, 1}); });
  EXPECT_NE(e.find("activations of 1 micro-batch(es) in flight"), std::string::npos) << e;
  // Explicit pipeline_layers: the fewest any chunk has.
  c.parallel.pipeline_layers = {3, 1, 2, 2};
  e = error_of([&] { trident::check_host_resources(c, kGptShape, 8, host, 0, {4, 3, 2, 1}); });
  EXPECT_NE(e.find("2.5 micro-batch(es) in flight under schedule.kind = \"1f1b\", 1 layer(s) each"), std::string::npos)
      << e;
  // Context parallelism: a rank keeps seq / cp of each sequence's tokens, so
  // every term of a layer's bytes divides by cp, and the 8 GB above fits at cp 8.
  EXPECT_DOUBLE_EQ(trident::layer_activation_bytes(c.model, kGptShape, 4096, 1, false, "selective", 4, 2), layer / 2);
  EXPECT_DOUBLE_EQ(trident::layer_activation_bytes(c.model, kGptShape, 4096, 2, true, "none", 4, 4),
                   trident::layer_activation_bytes(c.model, kGptShape, 4096, 2, true, "none", 4) / 4);
  Config one = load_config(kTiny, {"training.micro_batch_size=4096", "training.global_batch_size=16384",
                                   "parallel.dp=1", "training.threads=1"});
  one.schedule.chunks = 1;
  EXPECT_THROW(trident::check_host_resources(one, kGptShape, 1, host, 0, {1}), trident::ConfigError);
  one.parallel.cp = 8;
  EXPECT_NO_THROW(trident::check_host_resources(one, kGptShape, 8, 8 * host, 0, {1}));
}

// NOTE [MoE router] in models/common/router.h: the config check refuses exactly what the router's
// own rules (core/router_options.h) refuse, in their words; a group of one expert routes (its
// score is its expert's), so model.moe_router_groups = model.experts is a config.
TEST(Config, MoeRouterKeysFollowTheRoutersRules) {
  const std::string ds = std::string(TRIDENT_SOURCE_DIR) + "/configs/deepseek-v3-tiny.toml";
  const Config one = trident::load_checked_config(ds, {"model.moe_router_groups=8", "model.moe_router_group_topk=2"});
  EXPECT_EQ(trident::router_options_error(trident::router_options(one.model)), "");
  const trident::ModelConfig base = one.model;
  const std::vector<std::pair<std::string, std::function<void(trident::ModelConfig&)>>> bad = {
      {"model.moe_router_groups=3", [](trident::ModelConfig& m) { m.moe_router_groups = 3; }},
      {"model.moe_router_group_topk=5", [](trident::ModelConfig& m) { m.moe_router_groups = 4, m.moe_router_group_topk = 5; }},
      {"model.moe_top_k=9", [](trident::ModelConfig& m) { m.moe_router_groups = 4, m.moe_top_k = 9; }}};
  for (const auto& [set, apply] : bad) {
    const std::string error = error_of([&, set = set] { trident::load_checked_config(ds, {set}); });
    trident::ModelConfig m = base;
    apply(m);
    const std::string rule = trident::router_options_error(trident::router_options(m));
    EXPECT_FALSE(rule.empty()) << set;
    EXPECT_NE(error.find(rule), std::string::npos) << set << ": " << error;
  }
}
