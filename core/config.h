// Config sections: one plain struct per TOML section, each with defaults and a
// one-line reminder per field. What every key means, its allowed values and
// the checks across keys are documented once, in configs/README.md (its
// tables are tested against the schema). Pure C++ (no libtorch): each
// section's table of keys sits with the rules across them, one file a section
// (config_model.cpp, config_parallel.cpp with [schedule], config_training.cpp,
// config_data.cpp, config_run.cpp with [checkpoint] and [logging];
// core/config_schema.h); parsing and text in config.cpp; the host and device
// memory checks in config_resources.cpp; all run before any process group exists.
#pragma once

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.h"

namespace trident {


struct ModelConfig {
  std::string arch = "gpt";        // model family (models/families.h): "gpt" (GPT-2), "llama", "mixtral", ...
  int64_t layers = 2;              // transformer blocks
  int64_t hidden = 64;             // model width
  int64_t heads = 4;               // attention heads (hidden % heads == 0)
  int64_t ffn_hidden = 0;          // MLP width; 0 means 4 * hidden
  int64_t seq_len = 32;            // tokens per sample
  int64_t vocab_size = 256;        // tokenizer vocabulary (before padding)
  int64_t vocab_pad_multiple = 8;  // padded vocab is a multiple of this * tp
  double dropout = 0.0;            // dropout probability (0 keeps runs exact)
  double init_std = 0.02;          // std of the normal init
  double layernorm_eps = 1e-5;     // LayerNorm (gpt) or RMSNorm (llama) epsilon
  std::string init_from;           // Hugging Face directory to start from; empty = random init
  // Llama only (check_config refuses them for gpt).
  int64_t kv_heads = 0;                       // key/value heads (grouped-query attention); 0 = heads
  bool tie_embeddings = true;                 // LM head shares the word embedding (gpt: always)
  double rope_theta = 10000.0;                // rotary base
  std::string rope_scaling = "none";          // "none" | "llama3" (Llama 3.1) | "yarn" (YaRN; DeepSeek-V3)
  double rope_factor = 8.0;                   // llama3 or yarn scaling: factor
  double rope_low_freq_factor = 1.0;          // llama3 scaling: low_freq_factor
  double rope_high_freq_factor = 4.0;         // llama3 scaling: high_freq_factor
  int64_t rope_original_max_position = 8192;  // llama3 or yarn scaling: original_max_position_embeddings
  double rope_beta_fast = 32.0;               // yarn: rotations where the ramp from extrapolation starts
  double rope_beta_slow = 1.0;                // yarn: rotations where interpolation takes over
  double rope_mscale = 0.0;                   // yarn: mscale (0 = absent)
  double rope_mscale_all_dim = 0.0;           // yarn: mscale_all_dim (0 = absent)
  int64_t kv_channels = 0;  // width of one attention head; 0 = hidden / heads (qwen3_moe's head_dim; Megatron's name)
  // Mixture of experts (the MoE families: mixtral, qwen2_moe, qwen3_moe, deepseek_v3;
  // check_config refuses them for a dense family, NOTE [MoE keys]).
  int64_t experts = 0;               // routed experts per layer; 0 = a dense MLP
  int64_t moe_ffn_hidden = 0;        // each routed expert's SwiGLU width; 0 = ffn_hidden
  int64_t moe_shared_ffn_hidden = 0; // the shared expert's width (qwen2_moe: gated by a sigmoid); 0 = none
  int64_t moe_first_dense = 0;       // the first layers keep a dense MLP of ffn_hidden (DeepSeek-V3's first_k_dense_replace)
  int64_t moe_top_k = 2;             // experts per token
  bool moe_norm_topk_prob = true;    // the chosen experts' weights renormalised to sum 1
  double moe_aux_loss_coeff = 0.0;   // Switch/GShard load-balancing loss per layer
  std::string moe_aux_loss = "aux_loss";  // over the micro-batch ("aux_loss") or per sequence ("seq_aux_loss"), Megatron's names
  double moe_z_loss_coeff = 0.0;     // router z-loss per layer (ST-MoE)
  double moe_capacity_factor = 0.0;  // > 0: each expert takes at most ceil(T K / E x this) of a rank's assignments; 0 = no dropping
  std::string moe_token_drop_policy = "probs";  // past capacity, drop the lowest weights ("probs") or the latest tokens ("position")
  // The router (NOTE [MoE router] in models/common/router.h; Megatron's moe_router_* keys).
  std::string moe_score_function = "softmax";  // "softmax" | "sigmoid"
  int64_t moe_router_groups = 1;               // groups of experts (1: no group limit; DeepSeek-V3's n_group)
  int64_t moe_router_group_topk = 1;           // groups a token may choose from (DeepSeek-V3's topk_group)
  double moe_routed_scaling_factor = 1.0;      // the chosen experts' weights times this
  bool moe_expert_bias = false;                // a score-correction bias per expert that chooses, never weights
  double moe_bias_update_rate = 0.0;           // > 0: the bias moves by this toward balance once per step
  // Multi-head latent attention (deepseek_v3 only; Hugging Face's names).
  int64_t q_lora_rank = 0;       // the queries' low-rank width; 0 = q projected from the hidden state directly
  int64_t kv_lora_rank = 0;      // the keys' and values' shared latent width
  int64_t qk_nope_head_dim = 0;  // each q/k head's part without rotary embedding
  int64_t qk_rope_head_dim = 0;  // each q/k head's rotary part (one key part shared by every head)
  int64_t v_head_dim = 0;        // each value head's width

  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
  // Multi-head latent attention (deepseek_v3): set by model.kv_lora_rank.
  bool mla() const { return kv_lora_rank > 0; }
  // The width the rotary embedding turns: MLA's rotary part, else the whole head.
  int64_t rope_dim() const { return mla() ? qk_rope_head_dim : head_dim(); }
  // NOTE [YaRN]: what the rotary tables are multiplied by (1 unless yarn), and
  // what MLA's softmax scale is (deepseek_v3 under yarn with mscale_all_dim).
  double rope_attention_factor() const;
  double mla_softmax_scale() const;
  int64_t moe_ffn() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn(); }
  // Whether layer l's MLP is a mixture of experts (the layers from moe_first_dense on).
  bool moe_layer(int64_t l) const { return experts > 0 && l >= moe_first_dense; }
  // Vocabulary padded up to a multiple of vocab_pad_multiple * tp (Megatron).
  int64_t padded_vocab(int64_t tp) const {
    const int64_t m = vocab_pad_multiple * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

struct ParallelConfig {
  int64_t tp = 1;                            // tensor-parallel size
  int64_t pp = 1;                            // pipeline-parallel size
  int64_t dp = -1;                           // data-parallel size; -1 = world / (tp * pp)
  bool sequence_parallel = false;            // shard LayerNorm/dropout regions along seq
  std::vector<int64_t> pipeline_layers;      // explicit layers per chunk (pp * chunks entries); empty = uniform;
                                             // [-1] = "auto" (balanced by a profiling pass, see auto_split())
  std::string pipeline_layout;                         // Megatron's layout string, e.g. "Et|(tt|)*2,tL"; "" = none (core/pipeline_layout.h)
  bool account_for_embedding_in_pipeline_split = false;  // the even split counts the embedding as a layer (Megatron)
  bool account_for_loss_in_pipeline_split = false;       // the even split counts the loss (norm, head) as a layer
  std::string pipeline_dtype = "auto";       // "auto" (= training.precision) | "fp32" | "bf16": what crosses pipeline boundaries
  std::string backend = "auto";              // "auto" | "gloo" | "nccl"
  double timeout_s = 60.0;                   // collective timeout in seconds
  bool auto_split() const { return pipeline_layers == std::vector<int64_t>{-1}; }
  double dp_bucket_mb = 25.0;                // data-parallel gradient bucket size, MiB
  bool overlap_grad_reduce = true;           // reduce buckets during the backward
  bool overlap_param_gather = true;          // zero = 1: the gather finished by the next forward
  int64_t zero = 0;                          // 0 or 1 (ZeRO-1: optimizer state sharded over dp)
  int64_t ep = 1;                            // expert-parallel size: the MoE experts split over ep of the (tp / etp) x cp x dp places
  int64_t etp = 0;                           // expert tensor-parallel size: a divisor of tp (0, the default: tp)
  std::string moe_dispatcher = "alltoall";   // "alltoall" | "allgather": how tokens reach their experts' ranks
  int64_t cp = 1;                            // context-parallel size: each sequence split over cp ranks
  std::string cp_comm = "p2p";               // "p2p" (ring) | "all_gather" | "a2a" (Ulysses): how attention sees the sequence
  int64_t expert_tp() const { return etp == 0 ? tp : etp; }  // etp with its default resolved (NOTE [expert grid])
};

struct ScheduleConfig {
  std::string kind = "1f1b";  // a generator's kind (schedules/generators.h) or "file"
  int64_t chunks = 0;         // chunks (virtual stages) per pipeline rank; 0 = the kind's: 2 for zb-v, v-half, v-min, dualpipev, else 1
  std::string file;           // schedule text file when kind = "file"
  int64_t memory_limit = 0;   // kind = "zb-auto": micro-batches of activations in flight per rank at most (0: not zb-auto)
  std::string zb_auto_costs = "unit";  // kind = "zb-auto": "unit" (F, B, W = 1, 2, 1) or "measured" at start (NOTE [measured zb-auto])
  bool overlap_moe = false;  // overlapped forward-backward pairs, each one's all-to-alls under the other's compute (NOTE [overlapped pairs])
};

struct TrainingConfig {
  int64_t steps = 10;               // optimizer steps
  int64_t micro_batch_size = 1;     // samples per micro-batch
  int64_t global_batch_size = 8;    // samples per step over all DP ranks
  int64_t seed = 1234;              // seeds init and data order
  double lr = 1e-3;                 // peak learning rate
  double min_lr = 1e-4;             // floor of the cosine decay
  int64_t warmup_steps = 0;         // linear warm-up steps
  double weight_decay = 0.1;        // AdamW decay (not applied to biases and norms)
  double beta1 = 0.9;               // AdamW beta1
  double beta2 = 0.95;              // AdamW beta2
  double eps = 1e-8;                // AdamW epsilon
  double grad_clip = 1.0;           // clip by global norm; 0 disables
  int64_t eval_interval = 0;        // evaluate every N steps; 0 disables
  int64_t eval_batches = 2;         // validation global batches per evaluation
  int64_t threads = 1;              // intra-op threads per rank
  double peak_tflops = 0.0;         // device peak for MFU; 0 = measure a matmul at start-up
  std::string device = "cpu";       // "cpu" | "cuda"
  int64_t exit_after_steps = 0;     // stop cleanly after this step, with a checkpoint; 0 = run all steps
  std::string precision = "fp32";   // "fp32" | "bf16" (fp32 master weights and gradients)
  std::string recompute = "none";   // "none" | "full" (each block) | "selective" (attention core)
};

// One entry of data.paths: a dataset prefix and its weight in the blend.
struct WeightedPath {
  double weight = 1;
  std::string path;
  bool operator==(const WeightedPath& o) const { return weight == o.weight && path == o.path; }
};

// megatron-core's NullTokenizer's unique_identifiers, data.cache_tokenizer's default.
inline constexpr const char* kNullTokenizerIdentifiers =
    "{\"class\": \"megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer\"}";

struct DataConfig {
  std::string source = "synthetic";  // "synthetic" | "file" (a prepared token file)
  std::string path;                  // prefix written by `trident data prepare`
  std::string format = "trident";    // "trident" (PREFIX.train.bin, .val.bin) | "megatron" (PREFIX.bin, .idx)
  std::vector<WeightedPath> paths;   // a blend [[weight, PREFIX], ...] instead of data.path
  std::string split;                 // megatron: train,valid,test shares by documents ("969,30,1"); "" = all train
  std::string cache_dir;             // megatron order: megatron-core's index caches (path_to_cache), read or written
  // The tokenizer's unique_identifiers (JSON) in the descriptions of the caches written to cache_dir.
  std::string cache_tokenizer = kNullTokenizerIdentifiers;
  std::string order = "auto";        // "auto" | "stream" | "megatron": which samples each step reads (data_order())
  std::string tokenizer = "byte";    // "byte" | "gpt2"
  std::string tokenizer_dir;         // directory with encoder.json and vocab.bpe (gpt2) or tokenizer.json (hf)
  int64_t synthetic_tokens = 65536;  // tokens generated for source = "synthetic"
  // Document boundaries in the samples (datasets/documents.h, NOTE [sample documents]).
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  int64_t eod_token = -1;             // the end-of-document id; -1 = the tokenizer's own (none for byte)
  bool completion_only_loss = false;  // megatron: read PREFIX.lossmask, the loss on completions only
};

struct CheckpointConfig {
  std::string dir;       // where checkpoints go; empty disables
  int64_t interval = 0;  // also save every N steps; 0 = only at the end of the run
  int64_t keep = 2;      // complete checkpoints kept in dir (older ones are deleted)
  bool resume = false;   // continue from dir's latest checkpoint (any layout), if it has one
  bool async = false;    // interval saves copied to host memory and written behind training (NOTE [asynchronous checkpoints])
};

struct LoggingConfig {
  std::string dir = "runs/default";  // run directory: config.toml, metrics.jsonl, loss.svg, rank-R.json
  int64_t log_interval = 1;          // log (step line, metrics.jsonl row, loss reduction) every N steps
  bool progress = true;              // progress bar when stdout is a terminal
  bool trace = false;                // write trace.json and timeline.svg of step trace_step
  int64_t trace_step = 2;            // the step logging.trace records
  bool tensorboard = false;          // also write the logged rows to a TensorBoard event file in dir
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  ScheduleConfig schedule;
  TrainingConfig training;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  std::string source = "<defaults>";  // file the config came from (for messages)
  // NOTE [given keys] The keys ("section.key") the file or a --set gave, whatever their value. A
  // key the model does not read is refused when given, even at its default: a user who wrote
  // model.moe_top_k = 2 for a dense model meant something that would not happen. to_toml writes
  // such a key commented out where the config neither gives nor reads it (model_key_unread), so a
  // run's config.toml and a checkpoint's manifest read back. Not part of operator== (values only).
  std::set<std::string> given;
  bool gave(const std::string& key) const { return given.count(key) > 0; }
};

// NOTE [given keys]: the rope scaling keys and the model.rope_scaling values that read them
// (NOTE [YaRN] in core/config_model.cpp).
struct RopeScalingKey {
  const char* key;         // "model.rope_beta_fast"
  const char* read_by;     // the message's words: "\"llama3\" or \"yarn\""
  bool llama3 = false, yarn = false;
  double (*value)(const ModelConfig& m) = nullptr;  // the key's member, as a number
};
const std::vector<RopeScalingKey>& rope_scaling_keys();
// Whether c's model reads no value of [model] key `key` ("model.moe_top_k"): an MoE key without
// experts (NOTE [MoE keys]), a rope scaling key the rope scaling does not read.
bool model_key_unread(const Config& c, const std::string& key);

// NOTE [plan reads no data] What a command does with the config. `trident plan` (kPlan) reads no
// data: the [data] section's rules across keys (a sample needs data.synthetic_tokens >
// model.seq_len, data.path with data.source, ...) are about a training run's samples and would
// refuse a plan of a 128K-token model for the synthetic data's default size; every key's own rule
// and every other section's rules still apply.
enum class ConfigUse { kRun, kPlan };

// Parses a TOML file, then applies `section.key=value` overrides in order.
// Throws ConfigError naming file, key, value and expectation.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   ConfigUse use = ConfigUse::kRun);
// Same from a TOML string (tests); `name` stands in for the file in messages.
Config parse_config(const std::string& toml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {}, ConfigUse use = ConfigUse::kRun);

// Every check that needs no world size and no table (NOTE [config tables]),
// each rule written once: per-key ranges, model/TP divisibility, schedule,
// batch, data (not for kPlan) and checkpoint keys. Called by the parsers. Throws ConfigError
// naming the key, the value and what was expected.
void check_config(const Config& c, ConfigUse use = ConfigUse::kRun);
// NOTE [config tables] What the config's rules need from the layers above the
// foundation, which it does not see (ARCHITECTURE.md), handed in as data: each
// model family (model.arch) with its rules, each schedule kind with the chunks
// per rank it runs. The parsers check each key and every rule between keys
// that needs neither; check_config_tables() checks the rest and resolves
// schedule.chunks. Trident's tables are framework/config_tables.h's
// config_tables(); every command that reads a config applies them.
// NOTE [model features] What a family's blocks have beyond the model keys,
// set once in its rules file (models/<family>/<family>_rules.cpp) and handed
// in with its rules: the size formulas (the parameter count, NOTE
// [activation memory]), the planner, the model code and the Hugging Face
// tables read these, so that nothing outside the rules files and the
// registry names a family (model.arch).
enum class AttentionKind {
  kGrouped,  // q, k, v and o, model.kv_heads key/value heads (grouped-query; multi-query at 1)
  kLatent,   // multi-head latent attention: the model.*_lora_rank and *_head_dim keys (NOTE [MLA keys])
};
enum class SharedExperts { kNone, kOptional, kRequired };  // model.moe_shared_ffn_hidden: refused, 0 or more, >= 1
struct ModelFeatures {
  // Three MLP matrices (gate, up, down) and four ffn-wide activations with RMSNorms and no biases
  // (Llama's decoder); else GPT-2's block: two matrices and two activations, LayerNorms, a bias on
  // every matrix, dropout.
  bool gated_mlp = false;
  bool position_table = false;  // a learned model.seq_len x model.hidden position embedding, else rotary (model.rope_*)
  bool moe = false;             // reads model.experts and the model.moe_* keys (NOTE [MoE keys])
  bool untied_head = false;     // reads model.tie_embeddings (else the LM head is always the word embedding)
  AttentionKind attention = AttentionKind::kGrouped;
  bool qkv_bias = false;      // the Llama decoder's q, k and v projections have biases (zeros at init)
  bool qk_norm = false;       // each head's q and k RMS-normed (one weight of a head's width) before the rotation
  bool head_dim_key = false;  // reads model.kv_channels: a head width other than hidden / heads
  SharedExperts shared_experts = SharedExperts::kNone;
  bool shared_expert_gate = false;  // the shared experts' output times sigmoid(x · w), w one (1, hidden) weight
  bool dense_first_layers = false;  // reads model.moe_first_dense: the first layers keep a dense MLP
};
struct ModelFamilyRules {
  std::string name;  // the model.arch it is named by
  // The family's rules (keys it does not read, shapes it needs); throws
  // ConfigError through config_fail() for a model it cannot build.
  void (*check)(const Config& c) = nullptr;
  ModelFeatures features;
};
struct ScheduleKindChunks {
  std::string kind;    // schedule.kind
  int64_t chunks = 1;  // the chunks per rank it runs; 0: any number (absent: 1)
};
struct ConfigTables {
  std::vector<ModelFamilyRules> families;
  std::vector<ScheduleKindChunks> kinds;
};
// model.arch is a family of t and passes its rules; schedule.kind is a kind of
// t and schedule.chunks fits it (absent (0) becomes the kind's); then the
// pipeline split over pp x chunks model chunks. Throws ConfigError.
void check_config_tables(Config& c, const ConfigTables& t);
// The model part of the same (for check_model_config's callers).
void check_model_family(const Config& c, const std::vector<ModelFamilyRules>& families);
// The family named by model.arch; throws ConfigError naming the known ones.
const ModelFamilyRules& model_family(const Config& c, const std::vector<ModelFamilyRules>& families);
// What this host can hold, before anything is allocated (NOTE [size checks] in
// config_rules.h): training.threads at most host_cores, and on training.device =
// "cpu" a lower bound of ranks_on_host ranks' memory (parameters with AdamW
// state, a micro-batch's logits, synthetic tokens, and the activations of the
// (micro-batch, chunk) pairs the schedule keeps in flight: peak_inflight per
// pipeline rank, from the schedule simulator; empty leaves them out) at most
// host_bytes, for a model of `features` (its family's, NOTE [model features]).
// schedule.chunks must be resolved. A value <= 0 skips its check.
// Throws ConfigError naming the keys and the estimate.
void check_host_resources(const Config& c, const ModelFeatures& features, int64_t ranks_on_host, int64_t host_bytes,
                          int64_t host_cores, const std::vector<int>& peak_inflight = {});
// The same lower bound of one rank's memory (less the synthetic tokens, which
// stay on the host) against the total memory of the CUDA device it computes
// on, on training.device = "cuda": one rank per device, holding the least any
// pipeline rank keeps in flight. device_bytes <= 0 skips the check. Throws
// ConfigError naming the keys and the estimate.
void check_device_memory(const Config& c, const ModelFeatures& features, int device_index, int64_t device_bytes,
                         const std::vector<int>& peak_inflight = {});
// Throws ConfigError "<c.source>: <msg>" (for the rules of a family).
[[noreturn]] void config_fail(const Config& c, const std::string& msg);
// A number in a message as the config's text writes it: the shortest decimal
// that reads back exactly, always a TOML float ("0.1", "4.0").
std::string config_number(double v);
// The layout arithmetic, for resolve_world and parallel/layout.cpp alike:
// every factor >= 1, tp * cp * pp * dp == world, etp tp or 1 (0 = tp) and ep
// dividing (tp / etp) x dp (NOTE [expert grid] in parallel/layout.h). Throws
// ConfigError, e.g. "<where>: tp(2) x pp(4) x dp(2) = 16 but WORLD_SIZE = 8".
void check_layout_factors(const std::string& where, int64_t world, int64_t tp, int64_t pp, int64_t dp,
                          int64_t ep = 1, int64_t cp = 1, int64_t etp = 0);
// Resolves parallel.dp = -1 against the world size, then checks the layout
// (check_layout_factors) and the batch split over the resolved dp.
void resolve_world(Config& c, int64_t world_size);

// The effective config as TOML text (every key, defaults included, each with
// its one-line comment). parse_config(to_toml(c), ...) == c.
std::string to_toml(const Config& c);

// Micro-batches per step on each DP rank: global_batch_size / (micro_batch_size * dp).
// Needs a resolved dp (after resolve_world); throws ConfigError otherwise.
int64_t num_microbatches(const Config& c);

// parallel.pipeline_dtype resolved: "auto" is training.precision ("fp32" or "bf16").
std::string pipeline_dtype(const Config& c);

// data.order resolved: "auto" is "megatron" for data.format = "megatron", else "stream".
std::string data_order(const Config& c);

// Every key equal; `source` is ignored.
bool operator==(const Config& a, const Config& b);
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }

// One key of the schema, from the single table that parsing, --set, to_toml
// and validation all read (configs/README.md documents the same keys).
struct ConfigKey {
  std::string name;           // "section.key"
  std::string type;           // "integer" | "number" | "boolean" | "string" | "array of integers"
  std::string default_value;  // as TOML text
  std::string expect;         // constraint, e.g. "an integer >= 1"
  std::string doc;            // one-line meaning
};
std::vector<ConfigKey> config_keys();

}  // namespace trident
