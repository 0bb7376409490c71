// The config against the machine: a lower bound of one rank's memory (its
// parameters with AdamW's state, a micro-batch's logits, the activations its
// schedule keeps in flight, the synthetic tokens) against the host's memory
// and cores and the CUDA device's memory, before anything is allocated.
#include "core/config.h"
#include "core/config_rules.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/activation_memory.h"
#include "core/json.h"
#include "core/pipeline_layout.h"

namespace trident {

namespace {

using config_rules::Big;
using config_rules::big;
using config_rules::fail;
using config_rules::model_params;
using config_rules::n;
using json::quote;

// A lower bound of the activations one rank holds at its peak (NOTE [size checks]):
// the (micro-batch, chunk) pairs its schedule keeps alive at once (peak_inflight, per
// pipeline rank, from the schedule simulator) times the fewest layers any chunk has,
// times what one layer keeps for a micro-batch (NOTE [activation memory]) less the
// attention core, which a fused attention kernel does not keep; with any
// recomputation only the layer's input (Trident's selective recomputation keeps
// less than the formula's count). Measured peaks of gpt-tiny and llama-tiny were
// 1.03 to 1.22 times this bound (tp 1 and 2, sequence parallel, pp 2), 1.9 with
// dropout, 2.1 with full and 13 with selective recomputation (notes of issue 30).
// With every rank on this host the mean over pipeline ranks,
// else the least. Sets `pairs` and `layers`.
Big activation_lower_bound(const Config& c, const ModelFeatures& shape, const std::vector<int>& peak_inflight,
                           bool all_ranks_here, Big& pairs, int64_t& layers) {
  if (peak_inflight.empty()) return 0;
  const ParallelConfig& p = c.parallel;
  const int64_t stages = p.pp * std::max<int64_t>(c.schedule.chunks, 1);
  const std::vector<int64_t> split = chunk_layers(c);
  if (p.auto_split())
    layers = 1;  // the profiled split is not known yet
  else if (!split.empty())
    layers = *std::min_element(split.begin(), split.end());
  else
    layers = c.model.layers / stages;
  Big sum = 0;
  int least = peak_inflight.front();
  for (int k : peak_inflight) sum += k, least = std::min(least, k);
  pairs = all_ranks_here ? sum / Big(peak_inflight.size()) : Big(least);
  const std::string kept = c.training.recompute == "none" ? "selective" : "full";
  const int elem_bytes = c.training.precision == "bf16" ? 2 : 4;
  return pairs * Big(layers) *
         Big(layer_activation_bytes(c.model, shape, c.training.micro_batch_size, p.tp, p.sequence_parallel, kept,
                                    elem_bytes, p.cp));
}

}  // namespace

namespace {

// A lower bound of one rank's memory (NOTE [size checks]): its share of the
// parameters with their fp32 weight, gradient and AdamW moments (16 bytes;
// ZeRO-1 shards the moments over dp), one micro-batch's fp32 logits, the
// activations the schedule keeps in flight and, where they live with the
// rank, the synthetic tokens (uint32, training and validation).
struct RankMemory {
  Big params = 0, state = 0, logits = 0, tokens = 0, acts = 0, pairs = 0;
  Big experts = 0, expert_state = 0;  // of params and state: the routed experts' (over ep x pp, not tp)
  int64_t stage_layers = 0;
  Big total() const { return state + logits + tokens + acts; }
  // "(P parameters of ... : S; logits ...: L; ...)", naming the keys behind each term.
  std::string explain(const Config& c) const {
    const ModelConfig& m = c.model;
    return "(" + big(params) + " parameters of model.layers = " + n(m.layers) + ", model.hidden = " + n(m.hidden) +
           ", model.vocab_size = " + n(m.vocab_size) + " over parallel.tp x parallel.pp, 16 bytes each with "
           "AdamW: " + big(state) +
           (experts == 0 ? std::string()
                         : ", of which the routed experts' (model.experts = " + n(m.experts) + " x 3 x model.hidden x "
                           "model.moe_ffn_hidden per MoE layer, " + big(experts) + " parameters over parallel.etp x parallel.ep = " +
                           n(c.parallel.expert_tp()) + " x " + n(c.parallel.ep) +
                           " x parallel.pp): " + big(expert_state)) +
           "; logits of training.micro_batch_size x model.seq_len x model.vocab_size: " +
           big(logits) + (c.training.device == "cpu" ? "; data.synthetic_tokens: " + big(tokens) : std::string()) +
           (pairs == 0 ? ""
                       : "; activations of " + big(pairs) + " micro-batch(es) in flight under schedule.kind = " +
                             quote(c.schedule.kind) + ", " + n(stage_layers) +
                             " layer(s) each, of training.micro_batch_size x model.seq_len: " + big(acts)) +
           ")";
  }
};

RankMemory rank_memory(const Config& c, const ModelFeatures& shape, const std::vector<int>& peak_inflight,
                       bool all_ranks_here) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const TrainingConfig& t = c.training;
  RankMemory r;
  const Big dp = p.dp > 0 ? Big(p.dp) : 1;
  // The routed experts split over etp x ep x pp (NOTE [expert grid]), their moments under ZeRO-1
  // over the expert-data-parallel replicas ((tp / etp) x cp x dp / ep); the rest over tp x pp and dp.
  const Big etp = Big(p.expert_tp());
  const Big all_experts = config_rules::expert_params(m), ep = Big(p.ep),
            edp = std::max<Big>(Big(p.tp) / etp * Big(p.cp) * dp / ep, 1);
  r.experts = all_experts / (etp * ep * Big(p.pp));
  const Big dense = (model_params(m, shape) - all_experts) / (Big(p.tp) * Big(p.pp));
  r.params = dense + r.experts;
  r.expert_state = r.experts * (8 + (p.zero == 1 ? 8 / edp : 8));
  r.state = dense * (8 + (p.zero == 1 ? 8 / (dp * Big(p.cp)) : 8)) + r.expert_state;  // ZeRO-1 over dp x cp
  r.logits = Big(t.micro_batch_size) * Big(m.seq_len / p.cp) * Big(m.vocab_size) / Big(p.tp) * 4;
  r.tokens = c.data.source == "synthetic" ? Big(c.data.synthetic_tokens) * 4 : 0;
  r.acts = activation_lower_bound(c, shape, peak_inflight, all_ranks_here, r.pairs, r.stage_layers);
  return r;
}

}  // namespace

void check_host_resources(const Config& c, const ModelFeatures& shape, int64_t ranks_on_host, int64_t host_bytes,
                          int64_t host_cores, const std::vector<int>& peak_inflight) {
  const ParallelConfig& p = c.parallel;
  const TrainingConfig& t = c.training;
  if (host_cores > 0 && t.threads > host_cores) {
    fail(c, "training.threads = " + n(t.threads) + " but this host has " + n(host_cores) +
                " cores: expected at most " + n(host_cores) + " (more threads than cores only contend)");
  }
  if (host_bytes <= 0 || t.device != "cpu") return;  // cuda: check_device_memory
  const bool all_here = ranks_on_host >= p.tp * p.cp * p.pp * std::max<int64_t>(p.dp, 1);
  const RankMemory rank = rank_memory(c, shape, peak_inflight, all_here);
  const Big total = rank.total() * Big(std::max<int64_t>(ranks_on_host, 1));
  if (total > Big(host_bytes)) {
    fail(c, "needs at least " + big(total) + " bytes of host memory but this host has " + big(host_bytes) +
                " (MemTotal): " + n(ranks_on_host) + " rank(s) x " + rank.explain(c));
  }
}

void check_device_memory(const Config& c, const ModelFeatures& shape, int device_index, int64_t device_bytes,
                         const std::vector<int>& peak_inflight) {
  if (device_bytes <= 0 || c.training.device != "cuda") return;
  // One rank per device; the tokens stay on the host. Which pipeline rank this
  // device holds is not known before the rendezvous: the least in flight.
  RankMemory rank = rank_memory(c, shape, peak_inflight, false);
  rank.tokens = 0;
  if (rank.total() > Big(device_bytes)) {
    fail(c, "needs at least " + big(rank.total()) + " bytes of device memory but CUDA device " +
                std::to_string(device_index) + " has " + big(device_bytes) + " (its total memory): one rank x " + rank.explain(c));
  }
}

}  // namespace trident
