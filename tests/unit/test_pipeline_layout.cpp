// parallel.pipeline_layout and the account_for_* keys (core/pipeline_layout.h):
// the layout syntax, the split each gives, and every refusal's one-line message.
// Agreement with megatron-core itself is the reference test MegatronLayout.
#include "core/pipeline_layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "framework/config_tables.h"

namespace trident {
namespace {

using Stages = std::vector<std::string>;
using Counts = std::vector<int64_t>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(PipelineLayout, ExpandsRepeatsGroupsAndCommas) {
  EXPECT_EQ(parse_pipeline_layout("E|(tt|)*2,(t|)*4,tL"), (Stages{"E", "tt", "tt", "t", "t", "t", "t", "tL"}));
  EXPECT_EQ(parse_pipeline_layout("Et*3|t*4|t*3L"), (Stages{"Ettt", "tttt", "tttL"}));
  EXPECT_EQ(parse_pipeline_layout("E,t,t|t,t"), (Stages{"Ett", "tt"}));
  EXPECT_EQ(parse_pipeline_layout("(t*2|)*2,L"), (Stages{"tt", "tt", "L"}));  // x*N inside a group
  EXPECT_EQ(parse_pipeline_layout("Et|(tt|)*0,tL"), (Stages{"Et", "tL"}));
  EXPECT_EQ(parse_pipeline_layout("Et*10L"), (Stages{"EttttttttttL"}));       // counts of several digits
  EXPECT_EQ(parse_pipeline_layout(""), (Stages{""}));
}

TEST(PipelineLayout, SyntaxErrorsNameTheProblemAndPosition) {
  auto err = [](const std::string& s) { return error_of([&] { parse_pipeline_layout(s); }); };
  EXPECT_EQ(err("Et|tX"), "unknown character 'X' at position 4 (known: E embedding, t transformer layer, L loss, m "
                          "multi-token prediction, | ends a stage, ',' (cosmetic), (...)*N and x*N repeat)");
  EXPECT_EQ(err("(Et|tL"), "'(' at position 0 is never closed");
  EXPECT_EQ(err("Et|tL)"), "')' at position 5 closes no '('");
  EXPECT_EQ(err("((t|)*2)*2"), "nested '(' at position 1: groups have one level, as in Megatron's syntax");
  EXPECT_EQ(err("E()*2|tL"), "empty group '()' at position 1");
  EXPECT_EQ(err("(Et|)tL"), "group '(...)' at position 0 needs a repeat count: (...)*N");
  EXPECT_EQ(err("Et*|tL"), "'*' at position 2 must be followed by a repeat count (a whole number)");
  EXPECT_EQ(err("*2Et|tL"), "'*' at position 0 repeats nothing: write x*N or (...)*N");
  EXPECT_EQ(err("Et*2*3|tL"), "a second '*' at position 4: one repeat count per item");
  EXPECT_EQ(err("E(t|)*99999999"), "repeat count at position 6 is too large");
  EXPECT_EQ(err("E(t|)*900000,(t|)*900000"), "the layout expands to more than 1000000 characters");
}

TEST(PipelineLayout, LayersPerChunkAndTheLayerRules) {
  auto split = [](const std::string& s, int64_t layers, int64_t pp, int64_t v) {
    return layout_chunk_layers(parse_pipeline_layout(s), layers, pp, v);
  };
  EXPECT_EQ(split("E|(tt|)*2,(t|)*4,tL", 9, 4, 2), (Counts{0, 2, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(split("Ettt|L", 3, 2, 1), (Counts{3, 0}));
  EXPECT_EQ(split("EtL", 1, 1, 1), (Counts{1}));
  auto err = [&](const std::string& s, int64_t layers, int64_t pp, int64_t v) {
    return error_of([&] { split(s, layers, pp, v); });
  };
  EXPECT_EQ(err("Et|t|tL", 3, 2, 1),
            "has 3 stage(s) but parallel.pp (2) x schedule.chunks (1) = 2 ('|' separates stages)");
  EXPECT_EQ(err("Et||tL", 2, 3, 1),
            "stage 1 is empty: every model chunk needs a transformer layer (t), the embedding (E) or the loss (L)");
  EXPECT_EQ(err("E|t|t|mL", 2, 4, 1), "'m' (a multi-token prediction layer) is not supported: Trident's models have none");
  EXPECT_EQ(err("Et|EtL", 2, 2, 1), "expected the embedding (E) exactly once, found it 2 time(s)");
  EXPECT_EQ(err("Et|tt", 3, 2, 1), "expected the loss (L) exactly once, found it 0 time(s)");
  EXPECT_EQ(err("tE|tL", 2, 2, 1), "the embedding (E) must come first: it starts stage 0");
  EXPECT_EQ(err("Et|tLt", 3, 2, 1), "the loss (L) must come last: it ends the last stage");
  EXPECT_EQ(err("Et|tL", 3, 2, 1), "holds 2 transformer layer(s) (t) but model.layers = 3");
}

TEST(PipelineLayout, AccountedSplitCountsEmbeddingAndLossAsLayers) {
  EXPECT_EQ(accounted_chunk_layers(7, 2, 1, true, false), (Counts{3, 4}));
  EXPECT_EQ(accounted_chunk_layers(7, 2, 1, false, true), (Counts{4, 3}));
  EXPECT_EQ(accounted_chunk_layers(6, 4, 1, true, true), (Counts{1, 2, 2, 1}));
  EXPECT_EQ(accounted_chunk_layers(2, 4, 1, true, true), (Counts{0, 1, 1, 0}));
  EXPECT_EQ(accounted_chunk_layers(6, 2, 2, true, true), (Counts{1, 2, 2, 1}));  // model order, 2 chunks per rank
  EXPECT_EQ(error_of([] { accounted_chunk_layers(6, 4, 1, false, true); }),
            "model.layers (6) + 1 for the loss = 7 must be divisible by parallel.pp (4) x schedule.chunks (1) = 4");
}

// A config as every command reads it: parsed, then the tables' rules (NOTE [config tables]).
Config parse(const std::vector<std::string>& sets) {
  Config c = parse_config("", "x.toml", sets);
  trident::check_config_tables(c, trident::config_tables());
  return c;
}

TEST(PipelineLayout, ConfigKeysGiveTheModelsSplit) {
  // The layout with interleaved chunks; the same split given as pipeline_layers.
  const Config a = parse({"model.layers=9", "parallel.pp=4", "schedule.kind=interleaved", "schedule.chunks=2",
                          "parallel.pipeline_layout=\"E|(tt|)*2,(t|)*4,tL\""});
  EXPECT_EQ(chunk_layers(a), (Counts{0, 2, 2, 1, 1, 1, 1, 1}));
  const Config b = parse({"model.layers=6", "parallel.pp=4", "parallel.account_for_embedding_in_pipeline_split=true",
                          "parallel.account_for_loss_in_pipeline_split=true"});
  EXPECT_EQ(chunk_layers(b), (Counts{1, 2, 2, 1}));
  // A V kind's two chunks per rank count as pp x 2 stages.
  const Config v = parse({"model.layers=4", "parallel.pp=2", "schedule.kind=zb-v",
                          "parallel.pipeline_layout=Et|t|t|tL"});
  EXPECT_EQ(chunk_layers(v), (Counts{1, 1, 1, 1}));
  EXPECT_EQ(chunk_layers(parse({"model.layers=4", "parallel.pp=2", "parallel.pipeline_layers=[1,3]"})), (Counts{1, 3}));
  EXPECT_TRUE(chunk_layers(parse({"model.layers=4", "parallel.pp=2"})).empty());  // uniform
  // The effective config (config.toml) parses again to the same split.
  EXPECT_EQ(chunk_layers(parse_config(to_toml(a), "again.toml")), chunk_layers(a));
}

TEST(PipelineLayout, ConfigRefusalsAreOneLineNamingTheKeys) {
  struct Bad {
    std::vector<std::string> sets;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|ttL", "parallel.pipeline_layers=[1,3]"},
       "x.toml: parallel.pipeline_layout and parallel.pipeline_layers both give the pipeline split: expected one of "
       "them"},
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|ttL", "parallel.pipeline_layers=auto"},
       "x.toml: parallel.pipeline_layout and parallel.pipeline_layers both give the pipeline split"},
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|ttL",
        "parallel.account_for_loss_in_pipeline_split=true"},
       "x.toml: parallel.account_for_loss_in_pipeline_split with parallel.pipeline_layout: the layout places the "
       "embedding (E) and the loss (L) itself; expected one of them (Megatron refuses both too)"},
      {{"model.layers=3", "parallel.pp=2", "parallel.pipeline_layers=[1,2]",
        "parallel.account_for_embedding_in_pipeline_split=true"},
       "x.toml: parallel.account_for_embedding_in_pipeline_split changes the even split only, but "
       "parallel.pipeline_layers gives the split (it would be ignored): expected one of them"},
      {{"model.layers=3", "parallel.account_for_embedding_in_pipeline_split=true"},
       "x.toml: parallel.account_for_embedding_in_pipeline_split has no effect with a single pipeline stage "
       "(parallel.pp x schedule.chunks = 1)"},
      {{"model.layers=4", "parallel.pp=2", "parallel.account_for_embedding_in_pipeline_split=true"},
       "x.toml: parallel.account_for_embedding_in_pipeline_split: model.layers (4) + 1 for the embedding = 5 must be "
       "divisible by parallel.pp (2) x schedule.chunks (1) = 2"},
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|ttL", "schedule.kind=interleaved",
        "schedule.chunks=2"},
       "x.toml: parallel.pipeline_layout = \"Et|ttL\": has 2 stage(s) but parallel.pp (2) x schedule.chunks (2) = 4"},
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|tt(L"},
       "x.toml: parallel.pipeline_layout = \"Et|tt(L\": '(' at position 5 is never closed"},
      {{"model.layers=4", "parallel.pp=2", "parallel.pipeline_layout=Et|tL"},
       "x.toml: parallel.pipeline_layout = \"Et|tL\": holds 2 transformer layer(s) (t) but model.layers = 4"},
  };
  for (const Bad& bc : cases) {
    const std::string msg = error_of([&] { parse(bc.sets); });
    EXPECT_EQ(msg.rfind(bc.expected, 0), 0u) << "expected: " << bc.expected << "\ngot:      " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace trident
