#include "planner/step.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "planner/model_cost.h"
#include "schedules/generators.h"
#include "schedules/overlap.h"
#include "schedules/simulate.h"

namespace trident::plan {

namespace {

// NOTE [optimizer bytes] The clip norm and AdamW step are bound by memory
// traffic: per parameter they read the fp32 gradient twice (norm, step), the
// fp32 parameter and both moments (20 bytes) and write the parameter and both
// moments (12 bytes); bf16 also writes the 2-byte compute copy.
constexpr double kOptimizerBytesFp32 = 32.0;
constexpr double kOptimizerBytesBf16 = 34.0;

int elem_bytes(const std::string& precision) { return precision == "bf16" ? 2 : 4; }

int parse_int(const std::string& key, const std::string& value) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) throw PlanError("--layout " + key + "=" + value + ": expected an integer");
  return x;
}

// Ring collectives over n devices of a message of `bytes` (Patarasuk and Yuan 2009; NCCL's ring):
// all-reduce moves 2 (n-1)/n of the message over each link in 2 (n-1) steps, all-gather and
// reduce-scatter half of that (what the ZeRO-1 terms below use). Every call also costs the link's
// per-call collective time (the backend's own work: on a loaded host, waking the peer's threads).
struct Link {
  double gbs, lat_us, call_us;
};
Link link(const Cluster& c, bool intra) {
  return intra ? Link{c.intra_bandwidth_gbs, c.intra_latency_us, c.intra_collective_us}
               : Link{c.inter_bandwidth_gbs, c.inter_latency_us, c.inter_collective_us};
}
// `calls` collectives moving an all-reduce's volume of `bytes` in all (one all-reduce, or a
// reduce-scatter and an all-gather: calls = 2).
double ring_allreduce(double bytes, int n, const Link& k, int calls = 1) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / (k.gbs * 1e9) + 2.0 * (n - 1) * k.lat_us * 1e-6 + calls * k.call_us * 1e-6;
}

// NOTE [hierarchical ring] A data-parallel group of dp ranks, tp apart (NOTE [rank order] in
// parallel/layout.h), so k = devices_per_node / tp of them share a node. Inside one node: the node's
// link. Across nodes NCCL runs a ring per channel and spreads the channels over the NICs of the group's
// GPUs on each node; every ring crosses each node boundary once each way, so the k ranks' k NICs carry
// the inter-node traffic in parallel: a per-rank ring bandwidth of min(intra, k x inter), at the
// inter-node latency per step.
Link dp_link(const Cluster& c, int tp, int dp) {
  if (static_cast<int64_t>(tp) * dp <= c.devices_per_node) return link(c, true);
  const int k = std::max(1, std::min(dp, c.devices_per_node / std::max(1, tp)));
  Link out = link(c, false);
  out.gbs = std::min(c.intra_bandwidth_gbs, k * c.inter_bandwidth_gbs);
  return out;
}

int chunks_of(const PlanLayout& l) { return l.chunks > 0 ? l.chunks : sched::default_chunks(l.schedule); }

std::vector<int> layers_per_stage(const ModelConfig& m, const PlanLayout& l) {
  const int stages = l.pp * chunks_of(l);
  if (!l.layers.empty()) return l.layers;
  std::vector<int> out(stages, static_cast<int>(m.layers / stages));
  return out;
}

}  // namespace

PlanLayout parse_layout(const std::string& text, int gpus) {
  PlanLayout l;
  l.dp = -1;
  std::vector<std::string> seen;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw PlanError("--layout '" + text + "': item '" + item + "' is not key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      throw PlanError("--layout '" + text + "': " + k + " given twice");
    seen.push_back(k);
    if (k == "tp") l.tp = parse_int(k, v);
    else if (k == "cp") l.cp = parse_int(k, v);
    else if (k == "cp_comm") l.cp_comm = v;
    else if (k == "ep") l.ep = parse_int(k, v);
    else if (k == "etp") l.etp = parse_int(k, v);
    else if (k == "overlap_moe") l.overlap_moe = parse_int(k, v) != 0;
    else if (k == "pp") l.pp = parse_int(k, v);
    else if (k == "dp") l.dp = parse_int(k, v);
    else if (k == "chunks") l.chunks = parse_int(k, v);
    else if (k == "mbs") l.micro_batch = parse_int(k, v);
    else if (k == "zero") l.zero = parse_int(k, v);
    else if (k == "sp") l.sequence_parallel = parse_int(k, v) != 0;
    else if (k == "first") l.first_layers = parse_int(k, v);
    else if (k == "last") l.last_layers = parse_int(k, v);
    else if (k == "schedule") l.schedule = v;
    else if (k == "mem") l.memory_limit = parse_int(k, v);
    else if (k == "recompute") l.recompute = v;
    else if (k == "layers") {
      std::stringstream ls(v);
      std::string n;
      while (std::getline(ls, n, '+')) l.layers.push_back(parse_int(k, n));
    } else {
      throw PlanError("--layout '" + text + "': unknown key '" + k +
                      "': expected tp, cp, pp, dp, schedule, chunks, mbs, recompute, zero, sp, layers, first, last, "
                      "cp_comm, ep, etp, overlap_moe");
    }
  }
  if (l.tp < 1 || l.pp < 1 || l.cp < 1 || l.ep < 1)
    throw PlanError("--layout '" + text + "': tp, cp, pp and ep must be >= 1");
  if (l.cp_comm != "p2p" && l.cp_comm != "all_gather" && l.cp_comm != "a2a")
    throw PlanError("--layout '" + text + "': cp_comm=" + l.cp_comm + ": expected p2p, all_gather or a2a");
  if (l.cp == 1 && l.cp_comm != "p2p")
    throw PlanError("--layout '" + text + "': cp_comm=" + l.cp_comm + " with cp=1: no sequence is split");
  const std::string model = "tp(" + std::to_string(l.tp) + ")" + (l.cp > 1 ? " x cp(" + std::to_string(l.cp) + ")" : "") +
                            " x pp(" + std::to_string(l.pp) + ")";
  if (l.dp == -1) {
    if (gpus % (l.tp * l.cp * l.pp) != 0)
      throw PlanError("--layout '" + text + "': " + model + " does not divide --gpus " + std::to_string(gpus));
    l.dp = gpus / (l.tp * l.cp * l.pp);
  }
  if (l.dp < 1) throw PlanError("--layout '" + text + "': dp must be >= 1 (or -1: what --gpus leaves)");
  if (l.tp * l.cp * l.pp * l.dp != gpus)
    throw PlanError("--layout '" + text + "': " + model + " x dp(" + std::to_string(l.dp) + ") = " +
                    std::to_string(l.tp * l.cp * l.pp * l.dp) + " but --gpus " + std::to_string(gpus));
  if (l.micro_batch < 1) throw PlanError("--layout '" + text + "': mbs must be >= 1");
  if (l.tp == 1) l.sequence_parallel = false;  // nothing to shard over: off, as Megatron treats it
  if (l.first_layers < 0 || l.last_layers < 0) throw PlanError("--layout '" + text + "': first and last must be >= 1");
  if ((l.first_layers || l.last_layers) && !l.layers.empty())
    throw PlanError("--layout '" + text + "': give layers=A+B+.. or first=/last=, not both");
  if (l.zero != 0 && l.zero != 1) throw PlanError("--layout '" + text + "': zero must be 0 or 1");
  if (l.recompute != "none" && l.recompute != "full" && l.recompute != "selective")
    throw PlanError("--layout '" + text + "': recompute=" + l.recompute + ": expected none, selective or full");
  const auto& kinds = sched::schedule_kinds();
  if (l.schedule != "zb-auto" && std::find(kinds.begin(), kinds.end(), l.schedule) == kinds.end()) {
    std::string all;
    for (const auto& kk : kinds) all += (all.empty() ? "" : ", ") + kk;
    throw PlanError("--layout '" + text + "': schedule=" + l.schedule + ": expected one of " + all + " or zb-auto");
  }
  if (l.schedule == "zb-auto" && l.memory_limit < 1)
    throw PlanError("--layout '" + text + "': schedule=zb-auto needs mem=N >= 1 (micro-batches of activations in "
                    "flight per rank; pp: ZB-1p, 2 x pp: ZB-2p)");
  if (l.schedule != "zb-auto" && l.memory_limit != 0)
    throw PlanError("--layout '" + text + "': mem=" + std::to_string(l.memory_limit) + " with schedule=" + l.schedule +
                    ": only zb-auto has a memory limit");
  return l;
}

std::string layout_text(const PlanLayout& l) {
  std::string out = "tp=" + std::to_string(l.tp) + ",pp=" + std::to_string(l.pp) + ",dp=" + std::to_string(l.dp) +
                    ",schedule=" + l.schedule + ",chunks=" + std::to_string(chunks_of(l)) +
                    ",mbs=" + std::to_string(l.micro_batch) + ",recompute=" + l.recompute +
                    ",zero=" + std::to_string(l.zero) + ",sp=" + std::to_string(l.sequence_parallel ? 1 : 0);
  if (l.schedule == "zb-auto") out += ",mem=" + std::to_string(l.memory_limit);
  if (l.cp > 1) out += ",cp=" + std::to_string(l.cp) + ",cp_comm=" + l.cp_comm;
  if (l.ep > 1) out += ",ep=" + std::to_string(l.ep);
  if (l.expert_tp() != l.tp) out += ",etp=" + std::to_string(l.etp);
  if (l.overlap_moe) out += ",overlap_moe=1";
  if (!l.layers.empty()) {
    out += ",layers=";
    for (size_t i = 0; i < l.layers.size(); ++i) out += (i ? "+" : "") + std::to_string(l.layers[i]);
  }
  return out;
}

Runtime runtime_named(const std::string& name) {
  Runtime r;
  r.name = name;
  if (name == "trident") {
    r.description = "trident: gradients reduced bucket by bucket in the last backward (overlap_grad_reduce), "
                    "ZeRO-1's all-gather bucket by bucket in the next forward (overlap_param_gather), TP collectives "
                    "exposed";
  } else if (name == "megatron") {
    r.attention = AttentionKernel::Flash;
    r.gather_during_forward = r.tp_comm_overlap = r.megatron_buckets = true;
    r.description = "megatron: --overlap-grad-reduce (reduce-scatter per bucket in the last backward), "
                    "--overlap-param-gather (all-gather per bucket in the next forward), --tp-comm-overlap, "
                    "flash attention";
  } else if (name == "megatron-2021") {
    r.attention = AttentionKernel::Unfused;
    r.grads_during_backward = false;
    r.description = "megatron-2021: one gradient all-reduce after the pipeline flush, collectives exposed, "
                    "unfused attention (bmm, softmax, dropout)";
  } else {
    throw PlanError("runtime '" + name + "': expected trident, megatron or megatron-2021");
  }
  return r;
}

PlanLayout resolve_layers(const ModelConfig& m, PlanLayout l) {
  const int stages = l.pp * chunks_of(l);
  const std::string at = "layout " + layout_text(l) + ": ";
  if ((l.first_layers || l.last_layers) && stages < 2)
    throw PlanError(at + "first= and last= need pp x chunks > 1 (one stage holds every layer)");
  if (!l.layers.empty() || stages < 2) return l;
  const int64_t total = m.layers;
  if (l.first_layers || l.last_layers) {
    // Megatron's rule: the given ends, the rest spread evenly over the stages between.
    const int ends = (l.first_layers ? 1 : 0) + (l.last_layers ? 1 : 0);
    const int64_t rest = total - l.first_layers - l.last_layers, middle = stages - ends;
    if (middle < 1 ? rest != 0 : (rest < middle || rest % middle != 0))
      throw PlanError(at + "model.layers = " + std::to_string(total) + " less first/last leaves " +
                      std::to_string(rest) + ", not a positive multiple of the " + std::to_string(middle) +
                      " other stages");
    std::vector<int> out(stages, middle > 0 ? static_cast<int>(rest / middle) : 0);
    if (l.first_layers) out.front() = l.first_layers;
    if (l.last_layers) out.back() = l.last_layers;
    l.layers = out;
  } else if (total % stages != 0 && total >= stages) {
    // The planner's split: floor(L / S) each, the remainder one layer more on the middle stages first
    // (the first holds the embedding, the last the LM head's GEMM), then on the first, then the last.
    std::vector<int> out(stages, static_cast<int>(total / stages));
    int64_t extra = total % stages;
    std::vector<int> order;
    for (int i = 1; i + 1 < stages; ++i) order.push_back(i);
    order.push_back(0);
    order.push_back(stages - 1);
    for (size_t i = 0; extra > 0; ++i, --extra) ++out[order[i]];
    l.layers = out;
  }
  l.first_layers = l.last_layers = 0;
  return l;
}

namespace {

// The expert dimensions (ep, etp) and schedule.overlap_moe's rules (core/config_parallel.cpp), for
// the layouts the planner prices.
void check_expert_layout(const ModelConfig& m, const PlanLayout& l, const std::string& at) {
  // NOTE [planned experts] in planner/model_cost.h: layouts Trident runs for a mixture of experts.
  if (l.ep > 1 && m.experts == 0)
    throw PlanError(at + "ep(" + std::to_string(l.ep) + ") with model.arch = \"" + m.arch + "\": a dense model has no experts");
  // NOTE [expert grid] in parallel/layout.h: the experts fold over the (tp / etp) x cp x dp places of
  // a stage; etp divides tp.
  if (l.etp < 0 || (l.etp != 0 && l.tp % l.etp != 0))
    throw PlanError(at + "etp(" + std::to_string(l.etp) + ") must divide tp(" + std::to_string(l.tp) +
                    "): each expert is split over etp of the tp ranks");
  if (l.expert_tp() != l.tp && m.experts == 0)
    throw PlanError(at + "etp(" + std::to_string(l.etp) + ") with model.arch = \"" + m.arch + "\": a dense model has no experts");
  const int places = l.tp / l.expert_tp() * l.cp * l.dp;
  if (l.ep > 1 && (m.experts % l.ep != 0 || places % l.ep != 0))
    throw PlanError(at + "ep(" + std::to_string(l.ep) + ") must divide model.experts = " + std::to_string(m.experts) +
                    " and " + (places == l.dp ? "dp = " : "(tp / etp) x cp x dp = ") + std::to_string(places) +
                    " (the experts fold over the data-parallel replicas" +
                    (places == l.dp ? std::string() : ", the context-parallel ranks and the tp ranks at etp = 1") + ")");
  if (l.overlap_moe && l.ep == 1)
    throw PlanError(at + "overlap_moe=1 with ep(1): there is no expert all-to-all to hide");
  if (l.overlap_moe && l.recompute == "full")
    throw PlanError(at + "overlap_moe=1 with recompute=full: a recomputed forward would issue its all-to-alls "
                    "inside the backward");
  if (l.overlap_moe && l.cp > 1)
    throw PlanError(at + "overlap_moe=1 with cp(" + std::to_string(l.cp) + "): a pair's two halves would exchange keys "
                    "and values over one context-parallel group");
  if (l.overlap_moe && l.schedule == "gpipe")
    throw PlanError(at + "overlap_moe=1 with schedule=gpipe: no backward has a forward after it to pair with");
}

// layers=A+B+... has one entry per virtual stage, each >= 1, summing to the model's; without it the
// layers divide evenly over pp x chunks.
void check_layer_split(const ModelConfig& m, const PlanLayout& l, const std::string& at) {
  const int v = chunks_of(l);
  if (!l.layers.empty()) {
    if (static_cast<int>(l.layers.size()) != l.pp * v)
      throw PlanError(at + "layers has " + std::to_string(l.layers.size()) + " entries, expected pp x chunks = " +
                      std::to_string(l.pp * v));
    int64_t sum = 0;
    for (int n : l.layers) {
      if (n < 1) throw PlanError(at + "every entry of layers must be >= 1");
      sum += n;
    }
    if (sum != m.layers)
      throw PlanError(at + "layers sum to " + std::to_string(sum) + ", model.layers = " + std::to_string(m.layers));
  } else if (m.layers % (l.pp * v) != 0) {
    throw PlanError(at + "model.layers = " + std::to_string(m.layers) + " is not a multiple of pp x chunks = " +
                    std::to_string(l.pp * v) + ": give layers=A+B+... or first=/last= for an uneven split");
  }
}

}  // namespace

void check_layout(const Problem& pr, const PlanLayout& given) {
  const ModelConfig& m = pr.model;
  const PlanLayout l = resolve_layers(m, given);
  const std::string at = "layout " + layout_text(l) + ": ";
  const int devices = l.tp * l.cp * l.pp * l.dp;
  if (devices > pr.cluster.devices())
    throw PlanError(at + std::to_string(devices) + " devices but the cluster " + pr.cluster.name + " has " +
                    std::to_string(pr.cluster.devices()));
  for (auto [name, value] : {std::pair<const char*, int64_t>{"heads", m.heads}, {"kv_heads", m.kv()},
                             {"ffn_hidden", m.ffn()}, {"hidden", m.hidden}})
    if (value % l.tp != 0)
      throw PlanError(at + "tp(" + std::to_string(l.tp) + ") does not divide model." + name + " = " + std::to_string(value));
  check_expert_layout(m, l, at);
  if (m.mla() && l.cp > 1)
    throw PlanError(at + "cp(" + std::to_string(l.cp) + ") with model.arch = \"" + m.arch +
                    "\": multi-head latent attention does not run under context parallelism yet");
  if (m.seq_len % (2 * l.cp) != 0)
    throw PlanError(at + "cp(" + std::to_string(l.cp) + "): 2 x cp does not divide model.seq_len = " +
                    std::to_string(m.seq_len));
  if (l.sequence_parallel && (m.seq_len / l.cp) % l.tp != 0)
    throw PlanError(at + "sequence parallelism: tp(" + std::to_string(l.tp) + ") does not divide model.seq_len" +
                    (l.cp > 1 ? " / cp" : "") + " = " + std::to_string(m.seq_len / l.cp));
  if (l.cp_comm == "a2a" && ((m.heads / l.tp) % l.cp != 0 || (m.kv() / l.tp) % l.cp != 0))
    throw PlanError(at + "cp_comm=a2a: cp(" + std::to_string(l.cp) + ") does not divide the heads or key/value heads "
                    "per tp rank");
  if (l.zero == 1 && l.dp * l.cp == 1) throw PlanError(at + "zero=1 needs dp x cp > 1");
  check_layer_split(m, l, at);
  if (pr.profile) {
    check_profile_matches(*pr.profile, m, pr.precision);
    pr.profile->at(l.micro_batch);  // throws naming the sizes it has
  }
  const int64_t per_step = static_cast<int64_t>(l.dp) * l.micro_batch;
  if (pr.global_batch % per_step != 0)
    throw PlanError(at + "global batch " + std::to_string(pr.global_batch) + " is not a multiple of dp x mbs = " +
                    std::to_string(per_step));
  try {
    // zb-auto's lists are of ZB-H1's family (one chunk, the loop placement).
    sched::check_supported(l.schedule == "zb-auto" ? "zb-h1" : l.schedule, l.pp,
                           static_cast<int>(pr.global_batch / per_step), chunks_of(l));
  } catch (const std::exception& e) {
    throw PlanError(at + e.what());
  }
}

namespace {

// NOTE [planned expert parallelism] Under ep > 1 every MoE layer sends each token's k rows to the
// ranks of their experts and brings them back: per micro-batch two all-to-alls forward (dispatch,
// combine) and two backward, each moving (ep - 1) / ep of b·s·k·h elements of this rank over the ep
// group's link (its ranks tp apart inside the dp replicas, ep fastest: on one node while tp x ep fits
// it; NOTE [expert grid] in parallel/layout.h), plus the splits exchanged first (latency). Exposed:
// unless overlap_moe pairs them with compute (NOTE [planned overlap]). A mean layer
// carries its share of the MoE layers' (NOTE [planned experts]). The routed experts' memory divides by
// ep, their gradients reduce and ZeRO-1 shards over the expert-data-parallel group (dp / ep).
// Returns one layer's forward seconds (the backward's are the same).
double expert_all_to_alls(const Problem& pr, const PlanLayout& l, int64_t seq, int e) {
  if (l.ep <= 1) return 0.0;
  const ModelConfig& m = pr.model;
  const Cluster& c = pr.cluster;
  const double n = l.ep, share = mlp_shape(m, pr.features).moe_share;
  // An ep group spans ep places of etp ranks each; at etp = 1 each tp rank dispatches its 1/tp of the
  // tokens (NOTE [experts under tensor parallelism]).
  const Link el = link(c, static_cast<int64_t>(l.expert_tp()) * l.ep <= c.devices_per_node);
  const double rows = static_cast<double>(l.micro_batch * seq) * static_cast<double>(m.moe_top_k) *
                      static_cast<double>(m.hidden) * e / static_cast<double>(l.tp / l.expert_tp());
  const double a2a = (n - 1) / n * rows / (el.gbs * 1e9) + 2 * el.lat_us * 1e-6 + 2 * el.call_us * 1e-6;
  return share * 2 * a2a;
}

// What every cost of one layout's step reads: the layout with its layers written out and checked,
// the runtime, and the stretch of ranks that outnumber a node's compute slots and share them (a
// profile measured how this model shares the machine it ran on: 2 ranks' worth of compute over its
// slowdown).
struct Setting {
  Setting(const Problem& problem, const PlanLayout& given);
  const Problem& pr;
  const ModelConfig& m;
  const Cluster& c;
  const PlanLayout l;
  const Runtime rt;
  const int v, stages, e, mb_count;
  const double slow;        // every compute cost stretched alike by the sharing
  const double t, ov0, ov;  // tp; the per-action overhead, and stretched by the sharing
  ModelConfig ml;           // a rank's share of each sequence under context parallelism: its s / cp tokens
  double msg = 0;           // one (b, s / cp, h) activation
  bool sp = false;
};

PlanLayout checked_layout(const Problem& pr, const PlanLayout& given) {
  const PlanLayout l = resolve_layers(pr.model, given);
  check_layout(pr, l);
  return l;
}

Setting::Setting(const Problem& problem, const PlanLayout& given)
    : pr(problem),
      m(problem.model),
      c(problem.cluster),
      l(checked_layout(problem, given)),
      rt(runtime_named(problem.runtime)),
      v(chunks_of(l)),
      stages(l.pp * v),
      e(elem_bytes(problem.precision)),
      mb_count(static_cast<int>(problem.global_batch / (static_cast<int64_t>(l.dp) * l.micro_batch))),
      slow(c.compute_sharing(static_cast<int64_t>(l.tp) * l.cp * l.pp * l.dp,
                             pr.profile ? 2 / pr.profile->at(l.micro_batch).pipeline_slowdown : 0.0)),
      t(l.tp),
      ov0(c.action_overhead_us * 1e-6),
      ov(ov0 * slow),
      ml(m) {
  ml.seq_len = m.seq_len / l.cp;
  msg = static_cast<double>(l.micro_batch * ml.seq_len * m.hidden) * e;
  sp = l.sequence_parallel && l.tp > 1;
}

Device shared_device(const Setting& s) {
  const Cluster& c = s.c;
  Device dev;
  dev.peak_flops = c.peak_tflops(s.pr.precision) * 1e12 / s.slow;
  dev.gemm_efficiency = c.gemm_efficiency;
  dev.attention_efficiency = c.attention_efficiency > 0 ? c.attention_efficiency : c.gemm_efficiency;
  dev.memory_bytes_per_s = c.memory_bandwidth_gbs * 1e9 / s.slow;
  dev.gemm_fixed_s = c.gemm_fixed_us * 1e-6 * s.slow;
  dev.elem_bytes = s.e;
  return dev;
}

// Seconds of one layer's exchanges in its forward and in its backward.
struct Exchange {
  double f = 0, b = 0;
};

// NOTE [planned context parallelism] The attention of a rank's s / cp queries over the whole
// sequence: cp times what layer_times priced for s / cp tokens alone, a cp-th of the whole
// sequence's under the same kernel model (the ring's steps skip the masked half blocks as a
// causal kernel does: NOTE [ring steps] in models/common/context_attention.cpp; Ulysses runs
// heads / cp over all s), so MFU keeps its meaning at every cp. The exchanges, per layer and
// micro-batch, over the cp group's link (its ranks tp apart after tp's, on one node while tp x cp
// fits it): the ring's cp − 1 key/value blocks forward, each hidden behind one step's attention
// (what exceeds it is exposed), and backward the block with its fp32 dK/dV accumulator, plus the
// accumulator's last trip home; all_gather's all-gather of keys and values forward and
// reduce-scatter backward, exposed; a2a's four all-to-alls (q, k, v, out) each way, exposed.
// Scales lt's attention to the whole sequence's and returns the exchanges.
Exchange context_exchanges(const Setting& s, LayerTimes& lt) {
  const PlanLayout& l = s.l;
  const ModelConfig& m = s.m;
  const int e = s.e;
  Exchange cp;
  if (l.cp <= 1) return cp;
  const double n = l.cp;
  lt.attn_f *= n, lt.attn_b *= n;
  const bool intra = static_cast<int64_t>(l.tp) * l.cp <= s.c.devices_per_node;
  const Link cl = link(s.c, intra);
  const double kv_block = static_cast<double>(l.micro_batch * s.ml.seq_len) * 2 *
                          static_cast<double>(m.kv() / l.tp * m.head_dim()) * e;  // k and v of one rank
  const double q_bytes = static_cast<double>(l.micro_batch * s.ml.seq_len * m.heads / l.tp * m.head_dim()) * e;
  auto xfer = [&](double bytes) { return bytes / (cl.gbs * 1e9) + cl.lat_us * 1e-6; };
  if (l.cp_comm == "p2p") {
    const double acc = kv_block * 4 / e;  // the fp32 dK/dV accumulator
    cp.f = (n - 1) * (std::max(0.0, xfer(kv_block) - lt.attn_f / n) + cl.call_us * 1e-6);
    cp.b = (n - 1) * (std::max(0.0, xfer(kv_block + acc) - lt.attn_b / n) + cl.call_us * 1e-6) + xfer(acc);
  } else if (l.cp_comm == "all_gather") {
    cp.f = ring_allreduce(kv_block * n, l.cp, cl) / 2;  // an all-gather: half an all-reduce's volume
    cp.b = cp.f;
  } else {
    auto a2a = [&](double bytes) { return (n - 1) / n * bytes / (cl.gbs * 1e9) + cl.lat_us * 1e-6 + cl.call_us * 1e-6; };
    cp.f = 2 * a2a(q_bytes) + a2a(kv_block);
    cp.b = cp.f;
  }
  return cp;
}

// Tensor parallelism: 2 all-reduces (or all-gather + reduce-scatter pairs with SP: the same volume
// in twice the calls) in each layer's forward and 2 in its backward (Shoeybi et al. 2019); inside a
// node unless tp exceeds it. With --tp-comm-overlap (SP only) each all-gather and reduce-scatter is
// split into tp chunks pipelined with the GEMM it feeds or drains (the backward's input-gradient
// GEMMs have the forward's shapes). Returns one pass's (forward or backward) seconds of one layer.
double tensor_collectives(const Setting& s, const LayerTimes& lt) {
  const PlanLayout& l = s.l;
  const bool tp_intra = l.tp <= s.c.devices_per_node && s.c.devices_per_node % l.tp == 0;
  const Link tl = link(s.c, tp_intra);
  double tp_pass = l.tp > 1 ? 2 * ring_allreduce(s.msg, l.tp, tl, s.sp ? 2 : 1) : 0.0;
  if (l.tp > 1 && s.sp && s.rt.tp_comm_overlap) {
    const double one = ring_allreduce(s.msg, l.tp, tl, 2) / 2;  // one all-gather or reduce-scatter
    tp_pass = 0;
    for (double g : {lt.gemm_qkv, lt.gemm_proj, lt.gemm_fc1, lt.gemm_fc2}) tp_pass += exposed_chunked(one, g, l.tp);
  }
  return tp_pass;
}

// One layer of one micro-batch on one rank: its compute, each dimension's exchanges apart, and what
// recomputation adds to its backward (a stage of n layers pays n of each).
struct LayerCost {
  LayerTimes lt;
  HeadTimes ht;
  double layer_f = 0, layer_i = 0;  // compute: forward, input-gradient backward
  double tp_pass = 0;               // forward's, and the backward's as much
  Exchange cp, ep;
  double rec_gemm = 0, rec_tp = 0, rec_cp = 0, rec_ep = 0;
  std::pair<double, double> host;  // (forward, backward) host seconds per layer beyond its FLOPs
};

LayerCost layer_cost(const Setting& s) {
  const PlanLayout& l = s.l;
  const Device dev = shared_device(s);
  LayerCost lc;
  lc.lt = layer_times(s.ml, s.pr.features, l.micro_batch, l.tp, s.sp, s.rt.attention, dev);
  lc.ht = head_times(s.ml, l.micro_batch, l.tp, s.rt.attention, dev);
  lc.cp = context_exchanges(s, lc.lt);
  // NOTE [planned expert parallelism] (expert_all_to_alls): a layer's all-to-alls, forward and backward.
  lc.ep.f = lc.ep.b = expert_all_to_alls(s.pr, l, s.ml.seq_len, s.e);
  lc.tp_pass = tensor_collectives(s, lc.lt);
  const LayerTimes& lt = lc.lt;
  lc.layer_f = lt.gemm_f + lt.attn_f + lt.elem_f, lc.layer_i = lt.gemm_i + lt.attn_b + lt.elem_b;
  lc.rec_gemm = l.recompute == "full" ? lc.layer_f : l.recompute == "selective" ? lt.attn_f : 0.0;
  lc.rec_tp = l.recompute == "full" ? lc.tp_pass : 0.0;
  lc.rec_cp = l.recompute == "none" ? 0.0 : lc.cp.f;  // the attention core reruns its exchanges
  lc.rec_ep = l.recompute == "full" ? lc.ep.f : 0.0;    // a recomputed layer dispatches again
  lc.host = s.c.layer_overhead_s(s.pr.features);
  lc.host.first *= s.slow, lc.host.second *= s.slow;
  return lc;
}

// Per virtual stage, one micro-batch: the simulator's costs (in milliseconds, its unit) and the
// breakdown's parts (in seconds).
struct Parts {
  double gemm = 0, rec = 0, tp = 0, over = 0, cp = 0, ep = 0;
};
struct StagePrice {
  sched::StageCosts cost;
  Parts parts;
};

// A stage's forward f, backward i + w and weight gradient w (seconds) with the parts that are not
// GEMM time: the GEMMs are what remains.
StagePrice stage_price(const LayerCost& lc, double n, double f, double i, double w, double rec, double over) {
  StagePrice sp;
  sp.cost = {f * 1e3, (i + w) * 1e3, w * 1e3};
  Parts& p = sp.parts;
  p.tp = n * (2 * lc.tp_pass + lc.rec_tp);
  p.cp = n * (lc.cp.f + lc.cp.b + lc.rec_cp);
  p.ep = n * (lc.ep.f + lc.ep.b + lc.rec_ep);
  p.rec = rec;
  p.over = over;
  p.gemm = f + i + w - p.tp - p.cp - p.ep - p.rec - p.over;
  return sp;
}

// A stage of n layers priced from the FLOPs, with the cluster's per-action and per-layer host time.
StagePrice modelled_stage(const Setting& s, const LayerCost& lc, double n, bool last, bool split_w) {
  const HeadTimes& ht = lc.ht;
  const double ov = s.ov;
  double f = n * (lc.layer_f + lc.tp_pass + lc.cp.f + lc.ep.f) + (last ? ht.gemm + ht.loss_f : 0);
  double w = n * lc.lt.gemm_w + (last ? ht.gemm : 0);
  double i = n * (lc.layer_i + lc.tp_pass + lc.rec_gemm + lc.rec_tp + lc.cp.b + lc.rec_cp + lc.ep.b + lc.rec_ep) +
             (last ? ht.gemm + ht.loss_b : 0);
  // Host time per layer beyond its FLOPs: the forward's once more for a fully recomputed layer.
  const double host_f = n * lc.host.first,
               host_i = n * (lc.host.second + (s.l.recompute == "full" ? lc.host.first : 0));
  const double overhead = ov * (split_w ? 3 : 2) + host_f + host_i;
  f += ov + host_f;
  i += ov + host_i;
  if (split_w) w += ov;
  return stage_price(lc, n, f, i, w, n * lc.rec_gemm, overhead);
}

// With a measured profile (NOTE [measured profile]): its pieces, each scaled so that the pieces of one
// stage's action carry one action overhead (the profile's whole-model F and B carried one); under TP,
// what exceeds the cluster's per-layer host time divides by tp. ZB schedules split B into I and W as
// the profile measured them.
struct Measured {
  const MicroBatchProfile* prof = nullptr;
  int rc = 0;                             // recompute_index of the layout's recomputation
  double kf = 0, kb[3] = {0, 0, 0};  // seconds of one action's pieces per millisecond the profile measured
};

Measured measured(const Setting& s) {
  Measured out;
  if (!s.pr.profile) return out;
  out.prof = &s.pr.profile->at(s.l.micro_batch);
  out.rc = recompute_index(s.l.recompute);
  // Its overhead out, the sharing in.
  auto scale = [&](double whole_ms) { return std::max(0.0, whole_ms * 1e-3 - s.ov0) / whole_ms * s.slow; };
  out.kf = scale(out.prof->forward_ms(s.pr.profile->layers));
  for (int mode = 0; mode < 3; ++mode) out.kb[mode] = scale(out.prof->backward_ms(mode, s.pr.profile->layers));
  return out;
}

StagePrice measured_stage(const Setting& s, const LayerCost& lc, const Measured& ms, double n, bool first, bool last,
                          bool split_w) {
  const MicroBatchProfile* prof = ms.prof;
  const double ov = s.ov;
  auto tp_scaled = [&](double x, double host) { return std::min(x, host) + std::max(0.0, x - host) / s.t; };
  auto piece = [&](double layer_ms, double emb_ms, double head_ms, double k, double host) {
    return n * tp_scaled(layer_ms * k, host) + (first ? tp_scaled(emb_ms * k, host) : 0.0) +
           (last ? tp_scaled(head_ms * k, host) : 0.0);
  };
  auto backward = [&](int mode) {
    return piece(prof->layer_backward_ms[mode], prof->embedding_backward_ms[mode], prof->head_backward_ms[mode],
                 ms.kb[mode], lc.host.second);
  };
  const double comp_f =
      piece(prof->layer_forward_ms, prof->embedding_forward_ms, prof->head_forward_ms, ms.kf, lc.host.first);
  double comp_b0 = backward(0), comp_b = std::max(comp_b0, backward(ms.rc));
  if (split_w) {  // the measured cost of a split backward, its recomputation extra kept
    const double extra = comp_b - comp_b0;
    comp_b0 *= prof->split_backward_ratio;
    comp_b = comp_b0 + extra;
  }
  double w = split_w ? comp_b0 * prof->weight_share : 0.0;
  double i = comp_b - w + ov + n * (lc.tp_pass + lc.rec_tp + lc.cp.b + lc.rec_cp + lc.ep.b + lc.rec_ep);
  const double f = comp_f + ov + n * (lc.tp_pass + lc.cp.f + lc.ep.f);
  if (split_w) w += ov;
  return stage_price(lc, n, f, i, w, comp_b - comp_b0, ov * (split_w ? 3 : 2));
}

// Pipeline transfers: one (b, s, h) message per boundary, inter-node when the two stages' devices
// are on different nodes (NOTE [rank order] in parallel/layout.h: stage i starts at rank i*dp*tp).
// Milliseconds per boundary.
std::vector<double> pipeline_latency(const Setting& s, const sched::Schedule& sc) {
  const PlanLayout& l = s.l;
  const Cluster& c = s.c;
  std::vector<double> latency(s.stages - 1, 0.0);
  for (int vs = 0; vs + 1 < s.stages; ++vs) {
    const int r0 = sc.rank_of(vs), r1 = sc.rank_of(vs + 1);
    if (r0 == r1) continue;
    const int64_t slab = static_cast<int64_t>(l.dp) * l.cp * l.tp;  // a stage's ranks (NOTE [rank order])
    const int64_t g0 = r0 * slab, g1 = r1 * slab;
    const bool intra = g0 / c.devices_per_node == g1 / c.devices_per_node;
    const Link pl = link(c, intra);
    const double busy_lat = intra ? c.intra_pipeline_latency_us : c.inter_pipeline_latency_us;
    latency[vs] = (s.msg / (pl.gbs * 1e9) + (busy_lat > 0 ? busy_lat : pl.lat_us) * 1e-6) * 1e3;
  }
  return latency;
}

// NOTE [planned overlap] With overlap_moe each backward runs with the forward after it (NOTE
// [overlapped pairs] in schedules/overlap.h), and the simulator prices each pair from the
// all-to-alls' share of its F and B (Costs::expert_comm): what it hides comes off the ep_comm
// column (overlap_hidden). The pairs are made on the kind's list (zb-auto's after its search).
void mark_expert_comm(const Setting& s, const LayerCost& lc, const std::vector<int>& nl, sched::Costs& costs) {
  if (!s.l.overlap_moe) return;
  for (int vs = 0; vs < s.stages; ++vs) costs.stage_costs[vs].expert_comm = nl[vs] * lc.ep.f * 1e3;
}

sched::Schedule overlap_paired(const Setting& s, sched::Schedule sc) {
  if (!s.l.overlap_moe) return sc;
  try {
    sc = sched::overlap_pairs(sc, /*one_by_one=*/false);  // NOTE [planned overlap]: thousands of layouts
  } catch (const sched::ScheduleError& err) {
    throw PlanError("layout " + layout_text(s.l) + ": " + err.what());
  }
  if (sched::count_pairs(sc) == 0)
    throw PlanError("layout " + layout_text(s.l) + ": overlap_moe=1 but schedule=" + s.l.schedule + " with " +
                    std::to_string(s.mb_count) + " micro-batches has no backward followed by a forward to pair");
  return sc;
}

// The schedule simulated with its stage costs, and without the transfers (the bubble's reference).
struct Pipeline {
  sched::Schedule sc;
  sched::Costs costs;
  std::vector<Parts> parts;
  sched::TimelineStats st, st0;
};

Pipeline simulate_pipeline(const Setting& s, const LayerCost& lc, const std::vector<int>& nl) {
  const PlanLayout& l = s.l;
  Pipeline p;
  // zb-auto: its stage costs are those of ZB-H1's family (split W, the loop placement); the list
  // itself is searched below, once the costs and the link latencies are known.
  const bool zb_auto = l.schedule == "zb-auto";
  p.sc = sched::generate_compute(zb_auto ? "zb-h1" : l.schedule, l.pp, s.mb_count, s.v);
  bool split_w = false;
  for (const auto& list : p.sc.ranks)
    for (const auto& a : list)
      if (a.kind == sched::ActionKind::W) split_w = true;
  const Measured ms = measured(s);
  p.parts.resize(s.stages);
  p.costs.stage_costs.resize(s.stages);
  for (int vs = 0; vs < s.stages; ++vs) {
    const bool first = vs == 0, last = vs == s.stages - 1;
    const StagePrice sp = ms.prof ? measured_stage(s, lc, ms, nl[vs], first, last, split_w)
                                  : modelled_stage(s, lc, nl[vs], last, split_w);
    p.costs.stage_costs[vs] = sp.cost;
    p.parts[vs] = sp.parts;
  }
  mark_expert_comm(s, lc, nl, p.costs);
  const sched::Costs free_costs = p.costs;
  p.costs.latency = pipeline_latency(s, p.sc);
  // The step's bubble, not the paper's span: neither runtime planned runs optimizer post-validation.
  if (zb_auto) p.sc = sched::zb_auto(l.pp, s.mb_count, p.costs, l.memory_limit, sched::ZbObjective::kStep);
  p.sc = overlap_paired(s, p.sc);
  p.st = sched::simulate_stats(p.sc, p.costs);
  p.st0 = s.stages > 1 ? sched::simulate_stats(p.sc, free_costs) : p.st;
  return p;
}

// What every pipeline rank's memory and data parallelism read: the parameter counts and groups, the
// activations of a layer and of the head, and where a tied head sits.
struct Footprint {
  ParamCounts pc;
  int dpc = 0;                 // the dense gradients' group (NOTE [context grid])
  int edp = 0;                 // the routed experts' gradients' group (NOTE [planned expert parallelism])
  bool experts_apart = false;  // their own buckets and ZeRO shards
  double layer_act = 0, head_act = 0;
  bool tied = false, tied_on_one_rank = false;
  double head_copy = 0;
};

Footprint footprint(const Setting& s, const Pipeline& p) {
  const PlanLayout& l = s.l;
  const ModelConfig& m = s.m;
  const int e = s.e;
  Footprint fp;
  fp.pc = param_counts(m, s.pr.features, l.tp, l.pp > 1, l.ep, l.expert_tp());
  fp.dpc = l.dp * l.cp;
  fp.edp = l.edp();
  fp.experts_apart = l.ep > 1 || l.expert_tp() != l.tp;
  // all_gather keeps the gathered keys and values of the whole sequence for its backward.
  const double gathered = l.cp > 1 && l.cp_comm == "all_gather" && l.recompute != "full"
                              ? static_cast<double>(l.micro_batch * m.seq_len) * 2 *
                                    static_cast<double>(m.kv() / l.tp * m.head_dim()) * e
                              : 0.0;
  fp.layer_act =
      layer_activation_bytes(m, s.pr.features, l.micro_batch, l.tp, l.sequence_parallel, l.recompute, e, l.cp) +
      gathered;
  fp.head_act = static_cast<double>(l.micro_batch * s.ml.seq_len) *
                (static_cast<double>(m.padded_vocab(l.tp)) / s.t * e + static_cast<double>(m.hidden) * e);
  // A tied head on the rank that holds the embedding (V placement puts the last stage on rank 0)
  // shares the embedding's matrix instead of a copy.
  fp.tied = !s.pr.features.untied_head || m.tie_embeddings;
  fp.tied_on_one_rank = fp.tied && l.pp > 1 && p.sc.rank_of(0) == p.sc.rank_of(s.stages - 1);
  fp.head_copy = static_cast<double>(m.padded_vocab(l.tp) / l.tp * m.hidden);
  return fp;
}

// One pipeline rank's share of the model over its chunks, and its compute windows for one micro-batch.
struct RankShare {
  double params = 0, experts = 0, act_chunk = 0, backward_one = 0, forward_one = 0;
};

RankShare rank_share(const Setting& s, const Pipeline& p, const std::vector<int>& nl, const Footprint& fp, int r) {
  RankShare rs;
  for (int ch = 0; ch < s.v; ++ch) {
    const int vs = p.sc.stage_of(r, ch);
    rs.params += nl[vs] * static_cast<double>(fp.pc.layer);
    if (fp.experts_apart) rs.experts += nl[vs] * static_cast<double>(fp.pc.layer_experts);
    if (vs == 0) rs.params += static_cast<double>(fp.pc.embedding);
    if (vs == s.stages - 1) rs.params += static_cast<double>(fp.pc.head) - (fp.tied_on_one_rank ? fp.head_copy : 0.0);
    rs.act_chunk = std::max(rs.act_chunk, nl[vs] * fp.layer_act + (vs == s.stages - 1 ? fp.head_act : 0.0));
    rs.backward_one += p.costs.stage_costs[vs].backward * 1e-3;
    rs.forward_one += p.costs.stage_costs[vs].forward * 1e-3;
  }
  return rs;
}

RankMemory rank_memory(const Setting& s, const Footprint& fp, const RankShare& rs, int peak_inflight) {
  const PlanLayout& l = s.l;
  RankMemory rm;
  rm.params = rs.params * (s.pr.precision == "bf16" ? 6 : 4);  // fp32 master (+ bf16 compute copy)
  rm.grads = rs.params * 4;                                     // fp32 gradients
  // AdamW moments (ZeRO-1 shards them over dp x cp; the routed experts' under ep > 1 over dp / ep)
  rm.optimizer = (rs.params - rs.experts) * 8 / (l.zero ? fp.dpc : 1) + rs.experts * 8 / (l.zero ? fp.edp : 1);
  rm.peak_inflight = peak_inflight;
  rm.activations = rm.peak_inflight * rs.act_chunk;
  rm.boundary = l.pp > 1 ? 2 * s.msg : 0.0;
  return rm;
}

// Data parallelism: fp32 gradients reduced in buckets (NOTE [runtimes] says when and how big): a ring
// all-reduce per bucket, or with ZeRO-1 a reduce-scatter per bucket and an all-gather of the
// updated parameters per bucket, each half the volume and the steps of the all-reduce but a call of
// its own. What overlaps is exposed as NOTE [bucketed overlap] says: the reduction behind this
// rank's last backward and the idle time after it, the gather behind the next step's idle start
// and first forward. Under ep > 1 the routed experts' gradients are buckets of their own over
// dp / ep, on the link of ranks tp x ep apart; the rest over dp x cp. Exposed seconds of rank r.
double data_parallel_exposed(const Setting& s, const Pipeline& p, const Footprint& fp, const RankShare& rs, int r) {
  const PlanLayout& l = s.l;
  const Runtime& rt = s.rt;
  const double bucket = s.pr.dp_bucket_mb * 1024 * 1024;
  double dp_s = 0;
  for (const auto& [group, grads, gl] :
       {std::tuple<int, double, Link>{fp.dpc, (rs.params - rs.experts) * 4, dp_link(s.c, l.tp, fp.dpc)},
        std::tuple<int, double, Link>{fp.edp, rs.experts * 4, dp_link(s.c, l.expert_tp() * l.ep, fp.edp)}}) {
    if (group <= 1 || grads <= 0) continue;
    const double n = group;
    const double per_bucket = rt.megatron_buckets ? std::max(4e7, 1e6 * n) * 4 : bucket;
    const double buckets = rt.grads_during_backward ? std::max(1.0, std::ceil(grads / per_bucket)) : 1.0;
    auto one = [&](double bytes, double share) {  // share 1: all-reduce, 1/2: reduce-scatter or all-gather
      return share * 2 * (n - 1) / n * bytes / buckets / (gl.gbs * 1e9) + share * 2 * (n - 1) * gl.lat_us * 1e-6 +
             gl.call_us * 1e-6;
    };
    const double reduce = one(grads, l.zero ? 0.5 : 1.0);
    const bool overlap = rt.grads_during_backward && (rt.name != "trident" || s.pr.overlap_grad_reduce);
    const double tail = (p.st.step_time - p.st.end[r]) * 1e-3, head = p.st.first_start[r] * 1e-3;
    dp_s += overlap ? exposed_after_window(reduce, static_cast<int64_t>(buckets), rs.backward_one + tail)
                    : buckets * reduce;
    if (l.zero) {
      const double gather = one(rt.megatron_buckets ? grads / 4 * s.e : grads, 0.5);
      const bool hidden = rt.gather_during_forward || (rt.name == "trident" && s.pr.overlap_param_gather);
      dp_s += hidden ? exposed_after_window(gather, static_cast<int64_t>(buckets), rs.forward_one + head)
                  : buckets * gather;
    }
  }
  return dp_s;
}

// The optimizer step of one pipeline rank: NOTE [optimizer bytes] over the memory bandwidth. With a
// profile: its measured step overhead (the whole model on one rank) in the share of the model's
// parameters this pipeline rank updates. Host-bound work (per tensor, loading, logging) does not
// shrink with tp or ZeRO's sharding, so neither divides it.
double optimizer_seconds(const Setting& s, const Footprint& fp, const RankShare& rs) {
  const PlanLayout& l = s.l;
  const MicroBatchProfile* prof = s.pr.profile ? &s.pr.profile->at(l.micro_batch) : nullptr;
  const double share = rs.params * s.t / static_cast<double>(total_params(s.m, s.pr.features));
  return s.slow * (prof ? prof->step_overhead_ms * 1e-3 * share
                        : ((rs.params - rs.experts) / (l.zero ? fp.dpc : 1) + rs.experts / (l.zero ? fp.edp : 1)) *
                              (s.pr.precision == "bf16" ? kOptimizerBytesBf16 : kOptimizerBytesFp32) /
                              (s.c.memory_bandwidth_gbs * 1e9));
}

// The busiest rank's work, split into its parts (its simulated busy time is their sum times m); under
// overlap_moe less what the pairs hid on that rank (NOTE [planned overlap]).
Breakdown busiest_work(const Setting& s, const Pipeline& p) {
  int busiest = 0;
  for (int r = 0; r < s.l.pp; ++r)
    if (p.st.busy[r] > p.st.busy[busiest]) busiest = r;
  const int mb_count = s.mb_count;
  Breakdown b;
  for (int ch = 0; ch < s.v; ++ch) {
    const Parts& pa = p.parts[p.sc.stage_of(busiest, ch)];
    b.compute += mb_count * (pa.gemm + pa.over);
    b.recompute += mb_count * pa.rec;
    b.tp_comm += mb_count * pa.tp;
    b.cp_comm += mb_count * pa.cp;
    b.ep_comm += mb_count * pa.ep;
  }
  if (s.l.overlap_moe) {
    double alone = 0;
    for (int ch = 0; ch < s.v; ++ch) {
      const sched::StageCosts& sc = p.costs.stage_costs[p.sc.stage_of(busiest, ch)];
      alone += mb_count * sc.forward + mb_count * sc.backward;
    }
    b.ep_comm = std::max(0.0, b.ep_comm - std::max(0.0, alone - p.st.busy[busiest]) * 1e-3);
  }
  return b;
}

// The step's small collectives (latency and call time only): the gradient norm's all-reduce over the
// model-parallel ranks (tp x pp, and dp when ZeRO-1 shards the gradients), the tied embedding's
// gradient between its first and last stage, and on a logged step the loss over pp and dp and the
// pipeline's busy times gathered over pp.
double step_sync(const Setting& s, const Footprint& fp) {
  const PlanLayout& l = s.l;
  const Link sl = link(s.c, static_cast<int64_t>(l.tp) * l.cp * l.pp * l.dp <= s.c.devices_per_node);
  auto small = [&](int n) { return ring_allreduce(8.0 * static_cast<double>(s.m.layers), n, sl); };
  double sync = small(l.tp * l.pp) + (l.zero ? small(fp.dpc) : 0.0);
  if (fp.tied && l.pp > 1 && !fp.tied_on_one_rank) sync += ring_allreduce(fp.head_copy * 4, 2, sl);
  const double logged = 1.0 / static_cast<double>(std::max<int64_t>(1, s.pr.log_interval));
  sync += logged * (2 * small(l.pp) + small(fp.dpc));
  return sync;
}

}  // namespace

// One cost per dimension: tensor (tensor_collectives), context (context_exchanges), expert
// (expert_all_to_alls), pipeline (simulate_pipeline), overlap (overlap_paired, busiest_work), data
// (data_parallel_exposed), and the memory and optimizer of each pipeline rank.
Estimate evaluate(const Problem& pr, const PlanLayout& given) {
  const Setting s(pr, given);
  const PlanLayout& l = s.l;
  const LayerCost lc = layer_cost(s);
  const std::vector<int> nl = layers_per_stage(s.m, l);
  const Pipeline p = simulate_pipeline(s, lc, nl);

  Estimate est;
  est.layout = l;
  est.layout.chunks = s.v;
  est.microbatches = s.mb_count;
  const double pipe_s = p.st.step_time * 1e-3, pipe_free_s = p.st0.step_time * 1e-3;
  // Per pipeline rank: parameters, the DP reduce, the optimizer, memory.
  const Footprint fp = footprint(s, p);
  double dp_worst = 0, opt_worst = 0;
  for (int r = 0; r < l.pp; ++r) {
    const RankShare rs = rank_share(s, p, nl, fp, r);
    est.memory.push_back(rank_memory(s, fp, rs, p.st.peak_inflight[r]));
    dp_worst = std::max(dp_worst, data_parallel_exposed(s, p, fp, rs, r));
    opt_worst = std::max(opt_worst, optimizer_seconds(s, fp, rs));
  }
  for (const auto& rm : est.memory) est.peak_memory = std::max(est.peak_memory, rm.total());
  est.fits = est.peak_memory <= s.c.device_memory_gib * 1024.0 * 1024 * 1024;

  Breakdown& b = est.breakdown;
  b = busiest_work(s, p);
  b.bubble = std::max(0.0, pipe_free_s - (b.compute + b.recompute + b.tp_comm + b.cp_comm + b.ep_comm));
  b.pp_comm = std::max(0.0, pipe_s - pipe_free_s);
  b.dp_exposed = dp_worst;
  b.optimizer = opt_worst;
  b.step_sync = step_sync(s, fp);
  est.step_s = pipe_s + dp_worst + opt_worst + b.step_sync;

  const int devices = l.tp * l.cp * l.pp * l.dp;
  const ModelConfig& m = s.m;
  est.tokens_per_s = static_cast<double>(pr.global_batch * m.seq_len) / est.step_s;
  est.tflops_per_device = step_flops(m, pr.features, pr.global_batch, l.recompute, l.tp) / est.step_s / devices / 1e12;
  est.mfu = step_flops(m, pr.features, pr.global_batch, "none", l.tp) / est.step_s / devices / (s.c.peak_tflops(pr.precision) * 1e12);
  return est;
}

}  // namespace trident::plan
