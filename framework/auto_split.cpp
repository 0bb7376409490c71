// Balanced pipeline split from measured costs: see auto_split.h.
#include "framework/auto_split.h"

#include <sstream>

#include "schedules/simulate.h"
#include "schedules/split.h"

namespace trident {
namespace {

// Bubble of `schedule` when virtual stage s costs seconds[s] (F : B : W as
// 1 : 2 : 1 of that, the simulator's default shape).
double simulated_bubble(const sched::Schedule& schedule, const std::vector<double>& seconds) {
  double mean = 0;
  for (double x : seconds) mean += x;
  mean /= static_cast<double>(seconds.size());
  sched::Costs costs;
  for (double x : seconds) costs.stage_scale.push_back(x / mean);
  return sched::simulate_stats(schedule, costs).bubble_fraction;
}

std::string list(const std::vector<double>& v, double scale) {
  std::ostringstream os;
  os.precision(3);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i] * scale;
  return os.str();
}

}  // namespace

std::string AutoSplit::describe() const {
  std::ostringstream os;
  os << "auto split: layers per virtual stage [";
  for (size_t i = 0; i < layers.size(); ++i) os << (i ? ", " : "") << layers[i];
  os << "], predicted ms per micro-batch [" << list(stage_seconds, 1e3) << "]; most even split ["
     << list(uniform_seconds, 1e3) << "]; simulated bubble " << bubble << " (most even split: " << uniform_bubble
     << ")";
  return os.str();
}

AutoSplit choose_auto_split(const Model& model, const sched::Schedule& schedule, int64_t mbs, const Group& world) {
  const int stages = schedule.virtual_stages();
  LayerCosts costs;
  int64_t n = 0;
  at::Tensor meta = at::zeros({1}, at::kLong);
  if (world.rank == 0) {
    costs = model.profile(mbs, 3);
    n = static_cast<int64_t>(costs.layers.size());
    meta.fill_(n);
  }
  broadcast(world, meta, 0);
  n = meta.item<int64_t>();
  at::Tensor t = at::zeros({n + 2}, at::kDouble);
  if (world.rank == 0) {
    for (int64_t i = 0; i < n; ++i) t[i] = costs.layers[static_cast<size_t>(i)];
    t[n] = costs.embedding;
    t[n + 1] = costs.head;
  }
  broadcast(world, t, 0);  // every rank splits from rank 0's figures, so all agree
  std::vector<double> layers(t.data_ptr<double>(), t.data_ptr<double>() + n);
  const double emb = t[n].item<double>(), head = t[n + 1].item<double>();

  AutoSplit out;
  const std::vector<int> chosen = sched::balanced_split(layers, emb, head, stages);
  std::vector<int> even(static_cast<size_t>(stages), static_cast<int>(n / stages));
  for (int64_t i = 0; i < n % stages; ++i) ++even[static_cast<size_t>(i)];
  out.layers.assign(chosen.begin(), chosen.end());
  out.stage_seconds = sched::split_stage_costs(layers, emb, head, chosen);
  out.uniform_seconds = sched::split_stage_costs(layers, emb, head, even);
  out.bubble = simulated_bubble(schedule, out.stage_seconds);
  out.uniform_bubble = simulated_bubble(schedule, out.uniform_seconds);
  return out;
}

}  // namespace trident
