// The config's rules across keys (each written once, here; the components that
// rely on one assert it): sizes that must fit int64, the model family's and the
// tensor-parallel plan's shapes, the pipeline split, the schedule, training,
// data and checkpoint keys together, and the world's factors.
#include "core/config.h"
#include "core/config_rules.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/data/errors.h"
#include "core/data/megatron_cache.h"
#include "core/data/megatron_dataset.h"
#include "core/json.h"
#include "core/pipeline_layout.h"

namespace trident {

namespace config_rules {

std::string big(Big v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3Lg", v);
  return buf;
}

// The model's parameters (tp = pp = 1): per block the attention (q, o: hidden^2
// each; k, v: hidden x kv_heads x head_dim each) and the MLP (two or, gated,
// three matrices), plus the embedding, the position table where the family
// learns one, and an untied head. Biases and norms are left out: this is a
// lower bound.
Big model_params(const ModelConfig& m, const ModelShape& s) {
  const Big h = m.hidden, kv_width = Big(m.kv()) * (Big(m.hidden) / Big(m.heads));
  const Big ffn = m.ffn_hidden > 0 ? Big(m.ffn_hidden) : 4 * h;
  const Big block = 2 * h * h + 2 * h * kv_width + (s.gated_mlp ? 3 : 2) * h * ffn;
  const Big embed = Big(m.vocab_size) * h * (m.tie_embeddings ? 1 : 2) + (s.position_table ? Big(m.seq_len) * h : 0);
  return Big(m.layers) * block + embed;
}

}  // namespace config_rules

namespace {

using config_rules::Big;
using config_rules::big;
using config_rules::fail;
using config_rules::format_double;
using config_rules::kMaxBytes;
using config_rules::model_params;
using config_rules::n;
using json::quote;

void check_sizes(const Config& c) {
  const ModelConfig& m = c.model;
  const TrainingConfig& t = c.training;
  // The family is not known yet (its table comes later): the widest shape,
  // so that no family's count can overflow.
  const Big params = model_params(m, ModelShape{.gated_mlp = true, .position_table = true});
  if (params * 4 > kMaxBytes) {
    fail(c, "model.layers (" + n(m.layers) + ") x model.hidden (" + n(m.hidden) + ")^2 (and model.ffn_hidden, "
            "model.vocab_size): about " + big(params) + " parameters, " + big(params * 4) +
            " bytes, overflow int64 (NOTE [size checks]): expected a model under 2.3e18 parameters");
  }
  const Big logits = Big(t.micro_batch_size) * Big(m.seq_len) * Big(m.vocab_size);
  if (logits * 4 > kMaxBytes) {
    fail(c, "training.micro_batch_size (" + n(t.micro_batch_size) + ") x model.seq_len (" + n(m.seq_len) +
            ") x model.vocab_size (" + n(m.vocab_size) + ") = " + big(logits) +
            " logits of one micro-batch overflow int64 bytes (NOTE [size checks])");
  }
  const Big step_tokens = Big(t.global_batch_size) * Big(m.seq_len + 1);
  if (step_tokens * 8 > kMaxBytes) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) + ") x model.seq_len (" + n(m.seq_len) +
            ") = " + big(step_tokens) + " tokens per step overflow int64 bytes (NOTE [size checks])");
  }
  if (Big(c.data.synthetic_tokens) * 2 * 4 > kMaxBytes) {  // training and validation tokens, uint32 each
    fail(c, "data.synthetic_tokens (" + n(c.data.synthetic_tokens) + ") overflows int64 bytes (NOTE [size checks])");
  }
  const int64_t max_int = std::numeric_limits<int>::max();
  if (t.global_batch_size / t.micro_batch_size > max_int) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) + ") / training.micro_batch_size (" +
            n(t.micro_batch_size) + ") = " + n(t.global_batch_size / t.micro_batch_size) +
            " micro-batches: expected at most " + n(max_int) + " (a schedule counts them in int)");
  }
  for (const auto& [value, key] : {std::pair{m.layers, "model.layers"}, std::pair{m.heads, "model.heads"},
                                   std::pair{c.parallel.tp, "parallel.tp"}, std::pair{c.parallel.pp, "parallel.pp"},
                                   std::pair{c.parallel.dp, "parallel.dp"}, std::pair{c.schedule.chunks, "schedule.chunks"}}) {
    if (value > max_int) fail(c, std::string(key) + " = " + n(value) + ": expected at most " + n(max_int));
  }
}

// Shapes every family needs for its TP plan (models/gpt/gpt.cpp, models/llama/llama.cpp
// assert them); each family's own rules are in its table (NOTE [config tables]).
void check_model_shape(const Config& c) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  if (m.hidden % m.heads != 0)
    fail(c, "model.hidden (" + n(m.hidden) + ") must be divisible by model.heads (" + n(m.heads) + ")");
  if (m.heads % p.tp != 0)
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide model.heads (" + n(m.heads) + ")");
  if (m.ffn() % p.tp != 0) {
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide the MLP width (" + n(m.ffn()) +
                (m.ffn_hidden > 0 ? ", model.ffn_hidden)" : ", 4 x model.hidden)"));
  }
  if (m.padded_vocab(p.tp) % p.tp != 0)
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide the padded vocabulary (" + n(m.padded_vocab(p.tp)) + ")");
  if (p.sequence_parallel && m.seq_len % p.tp != 0) {
    fail(c, "parallel.sequence_parallel needs model.seq_len (" + n(m.seq_len) +
                ") divisible by parallel.tp (" + n(p.tp) + ")");
  }
  if (m.dropout > 0 && p.tp > 1) {
    fail(c, "model.dropout = " + format_double(m.dropout) + " with parallel.tp = " + n(p.tp) +
                ": expected model.dropout = 0 when parallel.tp > 1 (dropout under tensor parallelism is not "
                "supported yet)");
  }
  const std::string& rc = c.training.recompute;
  if (rc != "none" && m.dropout > 0) {
    // Recomputation replays the CPU generator's state, but a test found the
    // losses of a dropout run still differ from not recomputing.
    fail(c, "training.recompute = " + quote(rc) + " with model.dropout = " + format_double(m.dropout) +
                ": expected training.recompute = \"none\" or model.dropout = 0 (recomputation with dropout is "
                "not supported yet)");
  }
}

// parallel.pipeline_layout and the account_for_* keys (core/pipeline_layout.h):
// each excludes the other ways of giving the split, and must describe one.
void check_megatron_split(const Config& c, int64_t model_chunks) {
  const ParallelConfig& p = c.parallel;
  const bool emb = p.account_for_embedding_in_pipeline_split, loss = p.account_for_loss_in_pipeline_split;
  const std::string account = emb ? "parallel.account_for_embedding_in_pipeline_split"
                                  : "parallel.account_for_loss_in_pipeline_split";
  if (!p.pipeline_layout.empty()) {
    if (!p.pipeline_layers.empty())
      fail(c, "parallel.pipeline_layout and parallel.pipeline_layers both give the pipeline split: expected one of them");
    if (emb || loss)
      fail(c, account + " with parallel.pipeline_layout: the layout places the embedding (E) and the loss (L) "
                        "itself; expected one of them (Megatron refuses both too)");
  } else if ((emb || loss) && !p.pipeline_layers.empty()) {
    fail(c, account + " changes the even split only, but parallel.pipeline_layers gives the split (it would be "
                      "ignored): expected one of them");
  } else if ((emb || loss) && model_chunks == 1) {
    fail(c, account + " has no effect with a single pipeline stage (parallel.pp x schedule.chunks = 1)");
  }
  try {
    chunk_layers(c);
  } catch (const std::invalid_argument& e) {
    if (!p.pipeline_layout.empty()) fail(c, "parallel.pipeline_layout = " + quote(p.pipeline_layout) + ": " + e.what());
    fail(c, account + ": " + e.what());
  }
}

// Layers per model chunk (models/gpt/gpt.cpp's split_layers asserts the result).
void check_pipeline_split(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const int64_t layers = c.model.layers, chunks = c.schedule.chunks, model_chunks = p.pp * chunks;
  // NOTE [pipeline dtype] in runtime/executor.h
  if (p.pipeline_dtype == "bf16" && c.training.precision != "bf16")
    fail(c, "parallel.pipeline_dtype = \"bf16\" needs training.precision = \"bf16\", got " +
                quote(c.training.precision) + ": fp32 training would round its activations to bf16 at pipeline "
                "boundaries only, so its results would depend on the pipeline layout");
  if (p.pipeline_dtype != "auto" && model_chunks == 1)
    fail(c, "parallel.pipeline_dtype = " + quote(p.pipeline_dtype) +
                " has no effect with a single pipeline stage (parallel.pp x schedule.chunks = 1): nothing crosses "
                "a pipeline boundary; leave it \"auto\"");
  if (!p.pipeline_layout.empty() || p.account_for_embedding_in_pipeline_split ||
      p.account_for_loss_in_pipeline_split) {
    check_megatron_split(c, model_chunks);
  } else if (p.auto_split()) {
    if (layers < model_chunks)
      fail(c, "parallel.pipeline_layers = \"auto\" needs at least one layer per model chunk: model.layers (" +
                  n(layers) + ") < parallel.pp x schedule.chunks (" + n(model_chunks) + ")");
  } else if (p.pipeline_layers.empty()) {
    if (layers % model_chunks != 0) {
      fail(c, "model.layers (" + n(layers) + ") must be divisible by parallel.pp (" + n(p.pp) +
                  ") x schedule.chunks (" + n(chunks) + ") = " + n(model_chunks) +
                  ", or give parallel.pipeline_layers");
    }
  } else {
    if (static_cast<int64_t>(p.pipeline_layers.size()) != model_chunks) {
      fail(c, "parallel.pipeline_layers has " + n(p.pipeline_layers.size()) + " entries but parallel.pp (" +
                  n(p.pp) + ") x schedule.chunks (" + n(chunks) + ") = " + n(model_chunks));
    }
    int64_t sum = 0;
    for (int64_t v : p.pipeline_layers) sum += v;
    if (sum != layers)
      fail(c, "parallel.pipeline_layers sums to " + n(sum) + " but model.layers = " + n(layers));
  }
}

void check_schedule(const Config& c) {
  if (!c.parallel.overlap_param_gather && c.parallel.zero != 1)
    fail(c, "parallel.overlap_param_gather = false with parallel.zero = " + n(c.parallel.zero) +
                ": only ZeRO-1 gathers parameters after the step (it would be ignored)");
  const ScheduleConfig& s = c.schedule;
  if (s.kind == "file" && s.file.empty()) fail(c, "schedule.kind = \"file\" needs schedule.file");
  if (s.kind == "zb-auto" && s.memory_limit < 1)
    fail(c, "schedule.kind = \"zb-auto\" needs schedule.memory_limit >= 1 (micro-batches of activations per rank; "
            "parallel.pp gives ZB-1p, twice it ZB-2p)");
  if (s.kind != "zb-auto" && s.memory_limit != 0)
    fail(c, "schedule.memory_limit = " + n(s.memory_limit) + " with schedule.kind = " + quote(s.kind) +
                ": only zb-auto has a memory limit (it would be ignored)");
  if (s.kind != "zb-auto" && s.zb_auto_costs != "unit")
    fail(c, "schedule.zb_auto_costs = " + quote(s.zb_auto_costs) + " with schedule.kind = " + quote(s.kind) +
                ": only zb-auto is searched for costs (it would be ignored)");
  if (s.zb_auto_costs == "measured" && c.parallel.pp == 1)
    fail(c, "schedule.zb_auto_costs = \"measured\" with parallel.pp = 1: one stage has no pipeline list to search "
            "(it would be ignored)");
  if (s.kind != "file" && !s.file.empty()) {
    fail(c, "schedule.file = " + quote(s.file) + " with schedule.kind = " + quote(s.kind) +
                ": expected schedule.kind = \"file\", or no schedule.file (it would be ignored)");
  }
}

// The global batch splits into micro-batches on each of dp ranks.
void check_batch_split(const Config& c, int64_t dp) {
  const TrainingConfig& t = c.training;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) +
                ") must be divisible by training.micro_batch_size (" + n(t.micro_batch_size) +
                ") x parallel.dp (" + n(dp) + ") = " + n(t.micro_batch_size * dp));
  }
}

void check_training(const Config& c) {
  const TrainingConfig& t = c.training;
  const ParallelConfig& p = c.parallel;
  if (t.global_batch_size % t.micro_batch_size != 0) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) +
                ") must be divisible by training.micro_batch_size (" + n(t.micro_batch_size) + ")");
  }
  if (p.dp >= 1) check_batch_split(c, p.dp);
  if (t.min_lr > t.lr)
    fail(c, "training.min_lr (" + format_double(t.min_lr) + ") must be <= training.lr (" + format_double(t.lr) + ")");
  if (p.backend == "nccl" && t.device != "cuda")
    fail(c, "parallel.backend = \"nccl\" needs training.device = \"cuda\" (NCCL moves device memory only), got " +
                quote(t.device));
  if (p.backend == "nccl-rules" && t.device != "cpu")
    fail(c, "parallel.backend = \"nccl-rules\" is a CPU test backend (Gloo with NCCL's point-to-point rules) and needs "
            "training.device = \"cpu\", got " + quote(t.device));
  if (p.backend == "gloo" && t.device == "cuda")
    fail(c, "parallel.backend = \"gloo\" with training.device = \"cuda\" is not supported: Gloo's send/recv read "
            "host memory, so the pipeline's device buffers cannot travel over it (use \"nccl\" or \"auto\")");
  if (c.logging.trace && c.logging.trace_step > t.steps) {
    fail(c, "logging.trace_step = " + n(c.logging.trace_step) + " but training.steps = " + n(t.steps) +
                ": expected logging.trace_step <= training.steps when logging.trace = true (no step would be traced)");
  }
}

void check_data(const Config& c) {
  const DataConfig& d = c.data;
  if (d.source == "file" && d.path.empty() && d.paths.empty())
    fail(c, "data.source = \"file\" needs data.path (the prefix written by `trident data prepare`) or data.paths");
  if (!d.path.empty() && !d.paths.empty())
    fail(c, "data.path = " + quote(d.path) + " and data.paths: expected one of them (data.paths is a blend)");
  if (!d.paths.empty() && d.source != "file")
    fail(c, "data.paths reads files: it needs data.source = \"file\", got " + quote(d.source));
  if (d.format == "megatron" && d.source != "file")
    fail(c, "data.format = \"megatron\" reads data.path: it needs data.source = \"file\", got " + quote(d.source));
  if (!d.split.empty() && d.format != "megatron")
    fail(c, "data.split = " + quote(d.split) + " with data.format = " + quote(d.format) +
                ": expected data.format = \"megatron\" (a Trident token file is split when prepared: "
                "PREFIX.train.bin and PREFIX.val.bin)");
  if (!d.split.empty()) {
    try {
      const auto shares = data::parse_split(d.split);
      if (c.training.eval_interval > 0 && shares[1] == 0)
        fail(c, "data.split = " + quote(d.split) + " has no valid share but training.eval_interval = " +
                    n(c.training.eval_interval) + ": expected a second part > 0");
    } catch (const data::DataError& e) {
      fail(c, e.what());
    }
  }
  if (d.format == "megatron" && c.training.eval_interval > 0 && d.split.empty())
    fail(c, "data.format = \"megatron\" with training.eval_interval = " + n(c.training.eval_interval) +
                " needs data.split (e.g. \"969,30,1\"): without it every document trains and none validates");
  if (d.order == "megatron" && d.format != "megatron")
    fail(c, "data.order = \"megatron\" needs data.format = \"megatron\" (it walks the documents of PREFIX.idx), got "
            "data.format = " + quote(d.format) + " with data.source = " + quote(d.source) +
                ": use data.order = \"stream\"");
  if (!d.cache_dir.empty() && data_order(c) != "megatron")
    fail(c, "data.cache_dir = " + quote(d.cache_dir) + " holds Megatron's index caches, which only data.order = "
            "\"megatron\" reads; this run's order is \"" + data_order(c) + "\"");
  if (!d.cache_dir.empty() && d.split.empty())
    fail(c, "data.cache_dir = " + quote(d.cache_dir) + " needs data.split: the index caches megatron-core reads "
            "and writes are described by the split string (Megatron's --split; \"100,0,0\" trains on every "
            "document as no data.split does)");
  if (const std::string problem = data::cache_tokenizer_problem(d.cache_tokenizer); !problem.empty())
    fail(c, "data.cache_tokenizer = " + quote(d.cache_tokenizer) + ": " + problem);
  if (d.cache_tokenizer != kNullTokenizerIdentifiers && d.cache_dir.empty())
    fail(c, "data.cache_tokenizer = " + quote(d.cache_tokenizer) + " names the tokenizer in the index caches written "
            "to data.cache_dir, which is not set: expected data.cache_dir, or no data.cache_tokenizer");
  if (data_order(c) == "megatron" && c.training.seed > 0xffffffffLL)
    fail(c, "training.seed = " + n(c.training.seed) + " with data.order = \"megatron\": numpy's RandomState, "
                "which Megatron's order draws from, takes seeds below 2^32");
  if (data_order(c) == "megatron" && c.model.seq_len < 2)
    fail(c, "model.seq_len = " + n(c.model.seq_len) + " with data.order = \"megatron\": megatron-core's sample "
                "index needs a sequence length of at least 2");
  if (d.source == "synthetic" && !d.path.empty()) {
    fail(c, "data.path = " + quote(d.path) + " with data.source = \"synthetic\": expected data.source = \"file\", "
                "or no data.path (synthetic data reads no file)");
  }
  if (d.source == "synthetic" && d.synthetic_tokens <= c.model.seq_len) {
    fail(c, "data.synthetic_tokens (" + n(d.synthetic_tokens) + ") must exceed model.seq_len (" +
                n(c.model.seq_len) + "): a sample needs seq_len + 1 tokens");
  }
  if (!d.tokenizer_dir.empty() && d.tokenizer == "byte") {
    fail(c, "data.tokenizer_dir = " + quote(d.tokenizer_dir) + " with data.tokenizer = " + quote(d.tokenizer) +
                ": expected data.tokenizer = \"gpt2\" or \"hf\", or no data.tokenizer_dir (only gpt2 and hf read "
                "a vocabulary directory)");
  }
  if (d.tokenizer == "hf" && d.tokenizer_dir.empty())
    fail(c, "data.tokenizer = \"hf\" needs data.tokenizer_dir (the folder holding tokenizer.json)");
  // The tokenizer's ids must be rows of the embedding: a smaller vocabulary
  // trains (synthetic data draws below it) but saves a model that eval and
  // generate refuse. hf's size is known only once tokenizer.json is read.
  const int64_t tokenizer_vocab = d.tokenizer == "byte" ? 256 : d.tokenizer == "gpt2" ? 50257 : 0;
  if (c.model.vocab_size < tokenizer_vocab)
    fail(c, "model.vocab_size = " + n(c.model.vocab_size) + " is smaller than data.tokenizer = " + quote(d.tokenizer) +
                "'s " + n(tokenizer_vocab) + " tokens: expected model.vocab_size >= " + n(tokenizer_vocab));
}

void check_checkpoint(const Config& c) {
  if (c.checkpoint.interval > 0 && c.checkpoint.dir.empty())
    fail(c, "checkpoint.interval = " + n(c.checkpoint.interval) + " needs checkpoint.dir");
  if (c.checkpoint.resume && c.checkpoint.dir.empty()) fail(c, "checkpoint.resume = true needs checkpoint.dir");
  if (c.checkpoint.async && c.checkpoint.dir.empty()) fail(c, "checkpoint.async = true needs checkpoint.dir");
  if (c.checkpoint.async && c.checkpoint.interval == 0)
    fail(c, "checkpoint.async = true writes the checkpoint.interval saves in the background, but checkpoint.interval = 0: "
            "the only save is the run's last, which is synchronous; expected checkpoint.interval > 0");
  if (c.training.exit_after_steps > 0 && c.checkpoint.dir.empty())
    fail(c, "training.exit_after_steps = " + n(c.training.exit_after_steps) +
                " needs checkpoint.dir: the run would stop with nothing to continue from");
  if (c.training.exit_after_steps >= c.training.steps && c.training.exit_after_steps > 0)
    fail(c, "training.exit_after_steps = " + n(c.training.exit_after_steps) + " is not before training.steps = " +
                n(c.training.steps) + ": expected 0 (off) or a step in [1, " + n(c.training.steps - 1) + "]");
}

}  // namespace

namespace config_rules {

void check_relations(const Config& c) {
  check_sizes(c);  // before any product below is formed in int64
  check_model_shape(c);
  check_schedule(c);
  check_training(c);
  check_data(c);
  check_checkpoint(c);
}

void check_model_relations(const Config& c) {
  check_sizes(c);
  check_model_shape(c);
}

}  // namespace config_rules

int64_t chunks_per_rank(const Config& c) {
  if (c.schedule.chunks < 1)
    throw std::logic_error(c.source + ": schedule.chunks is unresolved: check_config_tables() resolves it");
  return c.schedule.chunks;
}

void config_fail(const Config& c, const std::string& msg) { fail(c, msg); }

std::string config_number(double v) { return format_double(v); }

namespace {

// "a, b or c"
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

}  // namespace

const ModelFamilyRules& model_family(const Config& c, const std::vector<ModelFamilyRules>& families) {
  std::vector<std::string> known;
  for (const ModelFamilyRules& f : families) {
    if (f.arch == c.model.arch) return f;
    known.push_back(quote(f.arch));
  }
  fail(c, "model.arch = " + quote(c.model.arch) + ": expected one of " + listed(known));
}

void check_model_family(const Config& c, const std::vector<ModelFamilyRules>& families) {
  model_family(c, families).check(c);
}

void check_config_tables(Config& c, const ConfigTables& t) {
  check_model_family(c, t.families);
  ScheduleConfig& s = c.schedule;
  const ScheduleKindChunks* kind = nullptr;
  std::vector<std::string> known, several;
  for (const ScheduleKindChunks& k : t.kinds) {
    if (k.kind == s.kind) kind = &k;
    known.push_back(quote(k.kind));
    if (k.chunks != 1) several.push_back(quote(k.kind));
  }
  if (!kind) fail(c, "schedule.kind = " + quote(s.kind) + ": expected one of " + listed(known));
  if (kind->chunks == 1 && s.chunks > 1)
    fail(c, "schedule.chunks = " + n(s.chunks) + " needs schedule.kind = " + listed(several) + ", got " + quote(s.kind));
  if (kind->chunks > 1 && s.chunks != kind->chunks && s.chunks != 0)
    fail(c, "schedule.chunks = " + n(s.chunks) + ": schedule.kind = " + quote(s.kind) + " runs " + n(kind->chunks) +
                " chunks per rank (leave schedule.chunks out, or set " + n(kind->chunks) + ")");
  if (s.chunks == 0) s.chunks = std::max<int64_t>(kind->chunks, 1);  // absent: the kind's
  check_pipeline_split(c);
}

void check_layout_factors(const std::string& where, int64_t world, int64_t tp, int64_t pp, int64_t dp) {
  const std::string factors = "tp(" + n(tp) + ") x pp(" + n(pp) + ") x dp(" + n(dp) + ")";
  if (world < 1 || tp < 1 || pp < 1 || dp < 1) {
    throw ConfigError(where + ": every factor must be >= 1, got " + factors + " with WORLD_SIZE = " + n(world));
  }
  const int64_t product = tp * pp * dp;
  if (product != world) {
    throw ConfigError(where + ": " + factors + " = " + n(product) + " but WORLD_SIZE = " + n(world));
  }
}

void resolve_world(Config& c, int64_t world_size) {
  ParallelConfig& p = c.parallel;
  if (world_size < 1) fail(c, "WORLD_SIZE = " + n(world_size) + ": expected an integer >= 1");
  if (p.dp == -1) {
    if (world_size % (p.tp * p.pp) != 0) {
      fail(c, "parallel: WORLD_SIZE = " + n(world_size) + " is not divisible by tp(" + n(p.tp) + ") x pp(" +
                  n(p.pp) + ") = " + n(p.tp * p.pp) + " (parallel.dp = -1 asks for world / (tp x pp))");
    }
    p.dp = world_size / (p.tp * p.pp);
  }
  check_layout_factors(c.source + ": parallel", world_size, p.tp, p.pp, p.dp);
  check_batch_split(c, p.dp);
}

}  // namespace trident
