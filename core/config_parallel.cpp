// The [parallel] and [schedule] sections: their keys, and the rules across
// them: the pipeline split (core/pipeline_layout.h), the schedule's keys
// together, the batch's split over dp, the world's factors, and the rules
// handed in as tables (model families, schedule kinds: NOTE [config tables]).
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/pipeline_layout.h"

namespace trident {

namespace config_rules {

std::vector<Field> parallel_fields() {
  return {
      TRIDENT_FIELD(parallel, tp, at_least(1), "tensor-parallel size"),
      TRIDENT_FIELD(parallel, pp, at_least(1), "pipeline-parallel size (stages)"),
      TRIDENT_FIELD(parallel, dp, auto_or_at_least_1(),
                    "data-parallel size; -1 = world size / (tp * cp * pp)"),
      TRIDENT_FIELD(parallel, sequence_parallel, any(),
                    "shard LayerNorm/dropout regions along the sequence over tp"),
      TRIDENT_FIELD(parallel, pipeline_layers, auto_or_at_least_1(),
                    "layers per model chunk (pp * chunks entries); empty = uniform; \"auto\" = balanced by a profiling pass"),
      TRIDENT_FIELD(parallel, pipeline_layout, any(),
                    "Megatron's --pipeline-model-parallel-layout: E embedding, t transformer layer, L loss, a bar "
                    "ends a stage (pp * chunks stages, model order); empty = none"),
      TRIDENT_FIELD(parallel, account_for_embedding_in_pipeline_split, any(),
                    "the even split counts the embedding as one layer (Megatron's option of that name)"),
      TRIDENT_FIELD(parallel, account_for_loss_in_pipeline_split, any(),
                    "the even split counts the loss (final norm, head, loss) as one layer (Megatron's option)"),
      TRIDENT_FIELD(parallel, pipeline_dtype, one_of({"auto", "fp32", "bf16"}),
                    "dtype of the activations and gradients sent between pipeline stages; auto = training.precision "
                    "(Megatron's pipeline_dtype); bf16 needs training.precision = bf16"),
      TRIDENT_FIELD(parallel, backend, one_of({"auto", "gloo", "nccl", "nccl-rules"}),
                    "collective backend; auto = nccl on cuda, gloo on cpu; nccl-rules = test backend: Gloo on cpu "
                    "with NCCL's point-to-point rules"),
      TRIDENT_FIELD(parallel, timeout_s, between(kMinTimeoutS, kMaxTimeoutS),
                    "timeout of every collective, in seconds (NOTE [timeout bounds])"),
      TRIDENT_FIELD(parallel, dp_bucket_mb, above_at_most(0, 1048576), "size of a data-parallel gradient bucket, in MiB"),
      TRIDENT_FIELD(parallel, overlap_grad_reduce, any(),
                    "all-reduce each gradient bucket over dp during the backward, once it is final"),
      TRIDENT_FIELD(parallel, overlap_param_gather, any(),
                    "zero = 1: all-gather the updated parameter shards while the next step's forward runs, each "
                    "bucket finished before the first forward that reads it (Megatron's overlap_param_gather)"),
      TRIDENT_FIELD(parallel, zero, between(0, 1),
                    "0: every dp rank keeps all optimizer state; 1: ZeRO-1, state sharded over dp"),
      TRIDENT_FIELD(parallel, ep, at_least(1),
                    "expert-parallel size: each MoE layer's experts split over ep data-parallel replicas, tokens "
                    "moved to them by all-to-all (Megatron's expert_model_parallel_size); divides (tp / etp) x dp "
                    "and model.experts"),
      TRIDENT_FIELD(parallel, etp, at_least(0),
                    "expert tensor-parallel size: each expert split over etp of the tp ranks (Megatron's "
                    "expert_tensor_parallel_size), a divisor of parallel.tp; 0 = parallel.tp (Megatron's default); "
                    "below tp the tp / etp groups of etp ranks each route a slice of the tokens and fold into ep "
                    "(1: whole experts)"),
      TRIDENT_FIELD(parallel, moe_dispatcher, one_of({"alltoall", "allgather"}),
                    "how routed tokens reach their experts' ranks under ep > 1: alltoall = each row to its expert's "
                    "rank and back; allgather = every token gathered, outputs reduce-scattered (Megatron's "
                    "moe_token_dispatcher_type)"),
      TRIDENT_FIELD(parallel, cp, at_least(1),
                    "context-parallel size: each sequence split over cp ranks, chunks r and 2cp-1-r on rank r "
                    "(Megatron's context_parallel_size); 2 x cp divides model.seq_len"),
      TRIDENT_FIELD(parallel, cp_comm, one_of({"p2p", "all_gather", "a2a"}),
                    "how attention sees the whole sequence under cp > 1: p2p = ring of key/value blocks, all_gather = "
                    "keys and values gathered per layer, a2a = heads scattered and the sequence gathered (Ulysses; "
                    "heads / tp divisible by cp) (Megatron's cp_comm_type)"),
  };
}

std::vector<Field> schedule_fields() {
  return {
      TRIDENT_FIELD(schedule, kind, kind_rule(), "pipeline schedule"),
      TRIDENT_FIELD(schedule, chunks, at_least(0),
                    "chunks (virtual stages) per pipeline rank; 0 or absent = what the kind needs (2 for the V "
                    "kinds zb-v, v-half, v-min and dualpipev, else 1)"),
      TRIDENT_FIELD(schedule, file, any(), "schedule text file when kind = \"file\""),
      TRIDENT_FIELD(schedule, memory_limit, at_least(0),
                    "kind = \"zb-auto\": micro-batches of activations in flight per rank at most (pp: ZB-1p, "
                    "2 x pp: ZB-2p); 0 with every other kind"),
      TRIDENT_FIELD(schedule, zb_auto_costs, one_of({"unit", "measured"}),
                    "kind = \"zb-auto\": the costs its list is searched for: unit (F, B, W = 1, 2, 1) or measured "
                    "(each stage's F, I, W and the links timed over two ZB-H1 passes before the first step)"),
      TRIDENT_FIELD(schedule, overlap_moe, any(),
                    "under parallel.ep > 1: run each backward with the forward after it as one overlapped pair, each "
                    "one's expert all-to-alls under the other's compute (DeepSeek-V3's DualPipe overlap, Megatron's "
                    "combined 1F1B), in any generated kind that has such pairs"),
  };
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
  if (s.overlap_moe) {  // NOTE [overlapped pairs] in schedules/overlap.h
    const std::string why = "schedule.overlap_moe = true ";
    if (c.parallel.ep == 1)
      fail(c, why + "with parallel.ep = 1: there is no expert all-to-all to hide (pairs would only make forwards "
                    "wait for backwards)");
    if (c.parallel.moe_dispatcher != "alltoall")
      fail(c, why + "with parallel.moe_dispatcher = " + quote(c.parallel.moe_dispatcher) +
                  ": only the all-to-all dispatcher has its forward and backward exchanges on groups of their own");
    if (c.training.recompute == "full")
      fail(c, why + "with training.recompute = \"full\": recomputation re-runs a forward, its all-to-alls "
                    "included, inside the backward, beside the paired forward's own (\"selective\" recomputes "
                    "only the attention core, which has none)");
    if (c.parallel.cp > 1)
      fail(c, why + "with parallel.cp = " + n(c.parallel.cp) + ": both halves of a pair would exchange keys and "
                    "values over the one context-parallel group from two threads, which NCCL would match in either "
                    "order; not built (expected parallel.cp = 1)");
    if (s.kind == "gpipe")
      fail(c, why + "with schedule.kind = \"gpipe\": it runs every forward before any backward, so no backward "
                    "has a forward to pair with");
  }
  if (s.kind != "file" && !s.file.empty()) {
    fail(c, "schedule.file = " + quote(s.file) + " with schedule.kind = " + quote(s.kind) +
                ": expected schedule.kind = \"file\", or no schedule.file (it would be ignored)");
  }
}

}  // namespace config_rules

namespace {

using namespace config_rules;
using json::quote;

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

// "a, b or c"
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

}  // namespace

int64_t chunks_per_rank(const Config& c) {
  if (c.schedule.chunks < 1)
    throw std::logic_error(c.source + ": schedule.chunks is unresolved: check_config_tables() resolves it");
  return c.schedule.chunks;
}

const ModelFamilyRules& model_family(const Config& c, const std::vector<ModelFamilyRules>& families) {
  std::vector<std::string> known;
  for (const ModelFamilyRules& f : families) {
    if (f.name == c.model.arch) return f;
    known.push_back(quote(f.name));
  }
  fail(c, "model.arch = " + quote(c.model.arch) + ": expected one of " + listed(known));
}

void check_model_family(const Config& c, const std::vector<ModelFamilyRules>& families) {
  const ModelFamilyRules& family = model_family(c, families);
  check_moe_keys(c, family.features);
  family.check(c);
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

void check_layout_factors(const std::string& where, int64_t world, int64_t tp, int64_t pp, int64_t dp, int64_t ep,
                          int64_t cp, int64_t etp) {
  const std::string factors =
      "tp(" + n(tp) + ")" + (cp != 1 ? " x cp(" + n(cp) + ")" : std::string()) + " x pp(" + n(pp) + ") x dp(" + n(dp) + ")";
  if (world < 1 || tp < 1 || pp < 1 || dp < 1 || cp < 1) {
    throw ConfigError(where + ": every factor must be >= 1, got " + factors + " with WORLD_SIZE = " + n(world));
  }
  const int64_t product = tp * cp * pp * dp;
  if (product != world) {
    throw ConfigError(where + ": " + factors + " = " + n(product) + " but WORLD_SIZE = " + n(world));
  }
  if (etp < 0 || etp > tp)
    throw ConfigError(where + ": parallel.etp (" + n(etp) + ") must be at most parallel.tp (" + n(tp) +
                      "): an expert is split over some of the tensor-parallel ranks, never more (NOTE [expert grid])");
  if (etp != 0 && tp % etp != 0)
    throw ConfigError(where + ": parallel.etp (" + n(etp) + ") must divide parallel.tp (" + n(tp) +
                      "): each tp group is etp ranks splitting an expert times tp / etp token slices (NOTE [expert grid])");
  const int64_t places = (etp == 0 ? 1 : tp / etp) * cp * dp;
  if (ep < 1 || places % ep != 0) {
    if (places == dp)
      throw ConfigError(where + ": parallel.ep (" + n(ep) + ") must divide parallel.dp (" + n(dp) +
                        "): the experts are split over ep of the data-parallel replicas (NOTE [expert grid])" +
                        (tp > 1 && ep > 0 && (tp * dp) % ep == 0 ? "; with parallel.etp = 1 the tp ranks fold into ep too"
                                                                  : ""));
    throw ConfigError(where + ": parallel.ep (" + n(ep) + ") must divide (tp / etp) x " + (cp > 1 ? "cp x " : "") +
                      "dp = (" + n(tp) + " / " + n(etp == 0 ? tp : etp) + ") x " + (cp > 1 ? n(cp) + " x " : "") + n(dp) +
                      " = " + n(places) + ": ep x etp ranks hold one set of experts (NOTE [expert grid])");
  }
}

void resolve_world(Config& c, int64_t world_size) {
  ParallelConfig& p = c.parallel;
  if (world_size < 1) fail(c, "WORLD_SIZE = " + n(world_size) + ": expected an integer >= 1");
  if (p.dp == -1) {
    const int64_t model = p.tp * p.cp * p.pp;
    const std::string what = p.cp != 1 ? "tp x cp x pp" : "tp x pp";
    if (world_size % model != 0) {
      fail(c, "parallel: WORLD_SIZE = " + n(world_size) + " is not divisible by tp(" + n(p.tp) + ")" +
                  (p.cp != 1 ? " x cp(" + n(p.cp) + ")" : std::string()) + " x pp(" + n(p.pp) + ") = " + n(model) +
                  " (parallel.dp = -1 asks for world / (" + what + "))");
    }
    p.dp = world_size / model;
  }
  check_layout_factors(c.source + ": parallel", world_size, p.tp, p.pp, p.dp, p.ep, p.cp, p.etp);
  check_batch_split(c, p.dp);
}

}  // namespace trident
