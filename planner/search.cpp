#include "planner/search.h"

#include <algorithm>

#include "planner/model_cost.h"
#include "schedules/generators.h"
#include "schedules/split.h"

namespace trident::plan {

namespace {

// zb-auto is searched only where pp x micro-batches is at most this (NOTE [zb-auto in the search]).
constexpr int64_t kZbAutoSearchSlots = 1024;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// (kind, chunks) pairs worth trying at pp stages: pp = 1 has no pipeline, so one kind stands for all.
std::vector<std::pair<std::string, int>> schedule_choices(int pp, int64_t layers) {
  if (pp == 1) return {{"1f1b", 1}};
  std::vector<std::pair<std::string, int>> out;
  for (const std::string& k : sched::schedule_kinds()) {
    if (k == "interleaved") {
      for (int v : {2, 3, 4, 6, 8})
        if (pp * v <= layers) out.push_back({k, v});
      continue;
    }
    const int v = sched::default_chunks(k);
    if (pp * v <= layers) out.push_back({k, v});
  }
  return out;
}

// The splits to try: uniform when the layers divide, and the balanced split that gives the
// stage with the LM head fewer layers (schedules/split.h) when it differs.
std::vector<std::vector<int>> splits(const Problem& pr, int tp, int stages, int mbs) {
  const ModelConfig& m = pr.model;
  std::vector<std::vector<int>> out;
  if (m.layers % stages == 0) out.push_back({});
  if (stages == 1) return out;
  const LayerFlops lf = layer_flops(m, pr.features, mbs);
  const double layer = (lf.forward() + lf.input_grad() + lf.weight_grad()) / tp;
  const double head = 3 * head_flops(m, mbs, tp) / tp;
  const std::vector<double> costs(static_cast<size_t>(m.layers), layer);
  std::vector<int> b = sched::balanced_split(costs, 0.0, head, stages);
  const bool uniform = std::all_of(b.begin(), b.end(), [&](int n) { return n == b[0]; });
  if (!uniform) out.push_back(b);
  return out;
}

// Memory that no schedule avoids: states of the largest stage plus one micro-batch's activations.
bool surely_too_big(const Problem& pr, const PlanLayout& l) {
  const ModelConfig& m = pr.model;
  const ParamCounts pc = param_counts(m, pr.features, l.tp, l.pp > 1, l.ep, l.expert_tp());
  const double params = static_cast<double>(pc.layer) * static_cast<double>(m.layers) / l.pp;
  const bool apart = l.ep > 1 || l.expert_tp() != l.tp;
  const double experts = apart ? static_cast<double>(pc.layer_experts) * static_cast<double>(m.layers) / l.pp : 0.0;
  const double states = params * (pr.precision == "bf16" ? 10 : 8) +
                        (params - experts) * 8 / (l.zero ? l.dp * l.cp : 1) + experts * 8 / (l.zero ? l.edp() : 1);
  const double act = layer_activation_bytes(m, pr.features, l.micro_batch, l.tp, l.sequence_parallel,
                                            l.recompute, pr.precision == "bf16" ? 2 : 4, l.cp);
  return states + act > pr.cluster.device_memory_gib * 1024.0 * 1024 * 1024;
}

void check_options(const Problem& pr, const SearchOptions& o) {
  if (o.gpus < 1) throw PlanError("--gpus " + std::to_string(o.gpus) + ": expected >= 1");
  if (o.gpus > pr.cluster.devices())
    throw PlanError("--gpus " + std::to_string(o.gpus) + " but the cluster " + pr.cluster.name + " (" +
                    pr.cluster.source + ") has " + std::to_string(pr.cluster.devices()) + " devices");
  if (o.top < 1) throw PlanError("--top " + std::to_string(o.top) + ": expected >= 1");
  if (o.max_cp < 1) throw PlanError("--max-cp " + std::to_string(o.max_cp) + ": expected >= 1");
}

// Micro-batch sizes 1, 2, 4, ... up to the option; with a profile, the sizes it measured.
std::vector<int> micro_batch_sizes(const Problem& pr, const SearchOptions& o) {
  std::vector<int> out;
  if (pr.profile) {
    check_profile_matches(*pr.profile, pr.model, pr.precision);
    for (int mbs : pr.profile->micro_batches())
      if (mbs <= o.max_micro_batch) out.push_back(mbs);
    if (out.empty())
      throw PlanError(pr.profile->source + " measured no micro-batch size <= " + std::to_string(o.max_micro_batch));
  } else {
    for (int mbs = 1; mbs <= o.max_micro_batch; mbs *= 2) out.push_back(mbs);
  }
  return out;
}

// One search in progress: the layouts that fit, in the order tried, and the counts of the result.
struct Searcher {
  const Problem& pr;
  const SearchOptions& o;
  std::vector<int> micro_batches;
  SearchResult res;
  std::vector<Estimate> all;

  void drop(const std::string& why, int64_t n = 1) { res.dropped[why] += n; }

  // Simulates `l` and keeps its estimate in `into` when the device holds its peak.
  void keep_if_it_fits(const PlanLayout& l, std::vector<Estimate>& into) {
    Estimate e = evaluate(pr, l);
    ++res.evaluated;
    if (!e.fits) return drop("exceeds device memory (peak with the simulated in-flight micro-batches)");
    ++res.fitting;
    into.push_back(std::move(e));
  }

  // Every generated schedule kind: each tp dividing the devices, then each pp of what is left.
  void generated_kinds() {
    const ModelConfig& m = pr.model;
    for (int tp : divisors(o.gpus)) {
      if (tp > pr.cluster.devices_per_node && !o.tp_across_nodes) {
        drop("tp values larger than a node (--tp-across-nodes allows them)");
        continue;
      }
      if (m.heads % tp || m.kv() % tp || m.ffn() % tp || m.hidden % tp) {
        drop("tp values not dividing heads, kv_heads, ffn_hidden or hidden");
        continue;
      }
      if (m.experts > 0 && tp > 1 && !o.moe_tp) {  // NOTE [planned experts]
        drop("tp > 1 for a mixture of experts (--moe-tp searches them)");
        continue;
      }
      for (int cp = 1; cp <= (m.mla() ? 1 : o.max_cp) && tp * cp <= o.gpus; cp *= 2) {
        if (o.gpus % (tp * cp) != 0) continue;
        if (m.seq_len % (2 * cp) != 0 && cp > 1) {
          drop("cp values whose 2 x cp does not divide seq_len");
          continue;
        }
        for (int pp : divisors(o.gpus / (tp * cp))) {
          if (pp > m.layers) {
            drop("pp values larger than the layer count");
            continue;
          }
          schedules_of(tp, cp, pp);
        }
      }
    }
  }

  // At (tp, pp): each schedule kind with its chunks and each micro-batch size the batch and the kind allow.
  void schedules_of(int tp, int cp, int pp) {
    const int dp = o.gpus / (tp * cp * pp);
    for (const auto& [kind, v] : schedule_choices(pp, pr.model.layers)) {
      for (int mbs : micro_batches) {
        if (pr.global_batch % (static_cast<int64_t>(dp) * mbs) != 0) {
          drop("global batch not a multiple of dp x micro-batch");
          continue;
        }
        const int mb_count = static_cast<int>(pr.global_batch / (static_cast<int64_t>(dp) * mbs));
        try {
          sched::check_supported(kind, pp, mb_count, v);
        } catch (const std::exception&) {
          drop("schedule does not support (pp, micro-batches, chunks)");
          continue;
        }
        memory_choices(tp, cp, pp, dp, kind, v, mbs);
      }
    }
  }

  // At one (tp, pp, dp, schedule, micro-batch): each etp and ep the experts allow, layer split,
  // recomputation, sequence parallelism and ZeRO. NOTE [expert grid]: ep folds over the (tp / etp) x
  // cp x dp places; etp = 1 (whole experts, the tp ranks folding into ep) is tried with ep > 1 only
  // (at ep = 1 it holds every expert whole on every rank for the same work).
  void memory_choices(int tp, int cp, int pp, int dp, const std::string& kind, int v, int mbs) {
    const std::vector<std::vector<int>> splits_here = splits(pr, tp, pp * v, mbs);
    std::vector<int> etps = {tp};
    if (tp > 1 && pr.model.experts > 0) etps.push_back(1);
    for (int etp : etps) {
      for (int ep : divisors(tp / etp * cp * dp)) {
        if (ep > 1 && (pr.model.experts == 0 || pr.model.experts % ep != 0)) continue;
        if (etp != tp && ep == 1) continue;
        for (const std::vector<int>& split : splits_here) layouts_of(tp, cp, pp, dp, ep, etp, kind, v, mbs, split);
      }
    }
  }

  void layouts_of(int tp, int cp, int pp, int dp, int ep, int etp, const std::string& kind, int v, int mbs,
                  const std::vector<int>& split) {
    for (const char* rec : {"none", "selective", "full"}) {
      for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
        for (int zero = 0; zero <= (dp * cp > 1 ? 1 : 0); ++zero) {
          PlanLayout l;
          l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.ep = ep, l.schedule = kind, l.chunks = v, l.micro_batch = mbs;
          l.etp = etp == tp ? 0 : etp;
          l.recompute = rec, l.sequence_parallel = sp == 1, l.zero = zero, l.layers = split;
          if (sp && (pr.model.seq_len / cp) % tp) {
            drop("sequence parallelism: tp does not divide seq_len");
            continue;
          }
          if (surely_too_big(pr, l)) {
            drop("exceeds device memory (states and one micro-batch alone)");
            continue;
          }
          keep_if_it_fits(l, all);
          // NOTE [planned overlap]: the same layout with its all-to-alls under overlapped pairs.
          if (ep > 1 && cp == 1 && std::string(rec) != "full" && kind != "gpipe") {
            l.overlap_moe = true;
            try {
              keep_if_it_fits(l, all);
            } catch (const PlanError&) {  // its pairs all at once would deadlock, and the list is too long to try one by one
              drop("overlap_moe: the kind's pairs all at once deadlock (the planner does not pair one at a time)");
            }
          }
        }
      }
    }
  }

  // NOTE [zb-auto in the search] The memory-bounded zero-bubble lists are searched for each layout's
  // own stage costs (schedules/generators_auto.cpp), which takes far longer than a generated kind:
  // so zb-auto is tried on the fastest pipelined layouts found above (kernel, split and memory
  // choices kept, one chunk), each with the limits pp (ZB-1p), 3pp/2 and 2pp (ZB-2p); a limit
  // whose simulated in-flight activations exceed the device's memory is dropped like any layout,
  // so the limit reported is the one that fits.
  std::vector<PlanLayout> zb_auto_bases() const {
    std::vector<const Estimate*> order;
    for (const Estimate& e : all)
      if (e.layout.pp > 1) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const Estimate* a, const Estimate* b) { return a->step_s < b->step_s; });
    std::vector<PlanLayout> bases;
    for (const Estimate* e : order) {
      if (static_cast<int>(bases.size()) == std::max(o.top, 3)) break;
      PlanLayout b = e->layout;
      if ((b.chunks > 0 ? b.chunks : sched::default_chunks(b.schedule)) != 1) {  // the same layout, one chunk per rank
        const auto sp = splits(pr, b.tp, b.pp, b.micro_batch);
        if (sp.empty()) continue;
        b.layers = sp.back();
      }
      b.schedule = "zb-auto", b.chunks = 1;
      if (std::none_of(bases.begin(), bases.end(), [&](const PlanLayout& x) { return layout_text(x) == layout_text(b); }))
        bases.push_back(b);
    }
    return bases;
  }

  // zb-auto at each base with each of its memory limits (NOTE [zb-auto in the search]).
  void zb_auto() {
    std::vector<Estimate> found;
    for (const PlanLayout& b : zb_auto_bases()) {
      const int mb_count = static_cast<int>(pr.global_batch / (static_cast<int64_t>(b.dp) * b.micro_batch));
      if (static_cast<int64_t>(mb_count) * b.pp > kZbAutoSearchSlots) {
        drop("zb-auto: pp x micro-batches above " + std::to_string(kZbAutoSearchSlots) + " (its list search takes seconds)");
        continue;
      }
      std::vector<int> limits{b.pp, (3 * b.pp + 1) / 2, 2 * b.pp};
      limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
      for (int limit : limits) {
        PlanLayout z = b;
        z.memory_limit = limit;
        keep_if_it_fits(z, found);
      }
    }
    for (Estimate& e : found) all.push_back(std::move(e));
  }

  // The result with the `top` fastest layouts; throws naming the reasons when none fits.
  SearchResult best() {
    if (all.empty()) {
      std::string why;
      for (const auto& [k, n] : res.dropped) why += "\n  " + std::to_string(n) + " x " + k;
      throw PlanError("no layout of " + std::to_string(o.gpus) + " devices fits:" + why);
    }
    const size_t k = std::min(all.size(), static_cast<size_t>(o.top));
    std::partial_sort(all.begin(), all.begin() + static_cast<long>(k), all.end(),
                      [](const Estimate& a, const Estimate& b) {  // ties: less memory first, then the layout's text
                        if (a.step_s != b.step_s) return a.step_s < b.step_s;
                        if (a.peak_memory != b.peak_memory) return a.peak_memory < b.peak_memory;
                        return layout_text(a.layout) < layout_text(b.layout);
                      });
    all.resize(k);
    res.best = std::move(all);
    return std::move(res);
  }
};

}  // namespace

SearchResult search(const Problem& pr, const SearchOptions& o) {
  check_options(pr, o);
  Searcher s{pr, o, micro_batch_sizes(pr, o), {}, {}};
  s.generated_kinds();
  s.zb_auto();
  return s.best();
}

LongestSequence longest_sequence(const Problem& pr, const SearchOptions& o, int doublings) {
  LongestSequence out;
  Problem p = pr;
  out.at_longest = search(p, o);  // throws when nothing fits at the model's own length
  out.seq_len = p.model.seq_len;
  for (int i = 0; i < doublings; ++i) {
    p.model.seq_len *= 2;
    try {
      out.at_longest = search(p, o);
      out.seq_len = p.model.seq_len;
    } catch (const PlanError&) {
      out.first_too_long = p.model.seq_len;
      break;
    }
  }
  return out;
}

}  // namespace trident::plan
