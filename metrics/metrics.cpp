// metrics.jsonl, loss.svg, step lines and the progress bar: see metrics.h.
#include "metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "metrics/plot_axis.h"

namespace trident {
namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/inf
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Flat keys of each pipeline stage's idle parts, in a fixed order.
std::vector<std::pair<std::string, double>> idle_fields(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < m.stage_idle.size(); ++i) {
    const IdleParts& p = m.stage_idle[i];
    const std::string st = "_s_stage" + std::to_string(i);
    out.insert(out.end(), {{"idle" + st, p.total}, {"idle_inherent" + st, p.inherent}, {"idle_imbalance" + st, p.imbalance},
                           {"idle_transfers" + st, p.transfers}, {"idle_sync" + st, p.sync}});
    if (p.experts >= 0) out.emplace_back("idle_experts" + st, p.experts);
  }
  return out;
}

// The largest expert load, expert-parallel rank load, dropped share and bias range over the MoE
// layers (-1: not kept).
struct WorstMoe {
  double load = 0, rank_load = -1, dropped = -1, bias_range = -1;
};
WorstMoe worst_moe(const StepMetrics& m) {
  WorstMoe w;
  for (const MoeLayerStats& l : m.moe) {
    w.load = std::max(w.load, l.load_max), w.rank_load = std::max(w.rank_load, l.rank_load_max);
    w.dropped = std::max(w.dropped, l.dropped), w.bias_range = std::max(w.bias_range, l.bias_range);
  }
  return w;
}

// Flat keys of the MoE layers' statistics, and moe_load_max over the layers
// (under expert parallelism also each layer's and the worst rank load).
std::vector<std::pair<std::string, double>> moe_fields(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> out;
  if (m.moe.empty()) return out;
  for (const MoeLayerStats& l : m.moe) {
    const std::string at = "_l" + std::to_string(l.layer);
    out.insert(out.end(), {{"moe_load" + at, l.load_max}, {"moe_aux_loss" + at, l.aux_loss}, {"moe_z_loss" + at, l.z_loss}});
    if (l.rank_load_max >= 0) out.emplace_back("moe_rank_load" + at, l.rank_load_max);
    if (l.dropped >= 0) out.emplace_back("moe_dropped" + at, l.dropped);
    if (l.bias_range >= 0) out.emplace_back("moe_bias_range" + at, l.bias_range);
  }
  const WorstMoe w = worst_moe(m);
  out.emplace_back("moe_load_max", w.load);
  if (w.rank_load >= 0) out.emplace_back("moe_rank_load_max", w.rank_load);
  if (w.dropped >= 0) out.emplace_back("moe_dropped_max", w.dropped);
  if (w.bias_range >= 0) out.emplace_back("moe_bias_range_max", w.bias_range);
  return out;
}

// metrics.jsonl's document keys (NOTE [document counts]); none for undivided samples.
std::vector<std::pair<std::string, double>> document_fields(const StepMetrics& m) {
  if (!m.documents) return {};
  return {{"loss_tokens", m.documents->loss_tokens},
          {"padding_share", m.documents->padding_share},
          {"docs_per_sample", m.documents->docs_per_sample}};
}

}  // namespace

std::string to_json(const StepMetrics& m) {
  std::ostringstream os;
  os << "{\"step\":" << m.step << ",\"loss\":" << num(m.loss) << ",\"lr\":" << num(m.lr)
     << ",\"grad_norm\":" << num(m.grad_norm) << ",\"step_time_s\":" << num(m.step_time_s)
     << ",\"tokens_per_s\":" << num(m.tokens_per_s) << ",\"tflops\":" << num(m.tflops) << ",\"mfu\":" << num(m.mfu)
     << ",\"grad_sync_s\":" << num(m.grad_sync_s) << ",\"optimizer_state_bytes\":" << m.optimizer_state_bytes
     << ",\"peak_memory_bytes\":" << m.peak_memory_bytes;
  os << ",\"bubble\":" << num(m.bubble);
  // Flat keys (busy_s_stage0, ...): every metrics.jsonl row stays a flat object.
  for (size_t i = 0; i < m.stage_busy_s.size(); ++i) os << ",\"busy_s_stage" << i << "\":" << num(m.stage_busy_s[i]);
  for (const auto& [key, value] : idle_fields(m)) os << ",\"" << key << "\":" << num(value);
  for (const auto& [key, value] : moe_fields(m)) os << ",\"" << key << "\":" << num(value);
  for (const auto& [key, value] : document_fields(m)) os << ",\"" << key << "\":" << num(value);
  if (m.eval_loss) os << ",\"eval_loss\":" << num(*m.eval_loss);
  os << "}";
  return os.str();
}

tensorboard::Scalars to_scalars(const StepMetrics& m) {
  auto f = [](double v) { return static_cast<float>(v); };
  tensorboard::Scalars s = {{"loss", f(m.loss)},
                            {"lr", f(m.lr)},
                            {"grad_norm", f(m.grad_norm)},
                            {"step_time_s", f(m.step_time_s)},
                            {"tokens_per_s", f(m.tokens_per_s)},
                            {"tflops", f(m.tflops)},
                            {"mfu", f(m.mfu)},
                            {"grad_sync_s", f(m.grad_sync_s)},
                            {"optimizer_state_bytes", f(static_cast<double>(m.optimizer_state_bytes))},
                            {"peak_memory_bytes", f(static_cast<double>(m.peak_memory_bytes))},
                            {"bubble", f(m.bubble)}};
  for (size_t i = 0; i < m.stage_busy_s.size(); ++i) s.emplace_back("busy_s_stage" + std::to_string(i), f(m.stage_busy_s[i]));
  for (const auto& [key, value] : idle_fields(m)) s.emplace_back(key, f(value));
  for (const auto& [key, value] : moe_fields(m)) s.emplace_back(key, f(value));
  for (const auto& [key, value] : document_fields(m)) s.emplace_back(key, f(value));
  if (m.eval_loss) s.emplace_back("eval_loss", f(*m.eval_loss));
  return s;
}

std::string format_step_line(const StepMetrics& m, int64_t total_steps) {
  std::ostringstream os;
  os << "step " << m.step << "/" << total_steps << " | loss " << fmt("%.4f", m.loss) << " | lr " << fmt("%.2e", m.lr)
     << " | grad-norm " << fmt("%.3f", m.grad_norm) << " | " << fmt("%.1f", m.tokens_per_s / 1000.0) << "k tok/s | "
     << fmt("%.3f", m.tflops) << " TFLOP/s | MFU " << fmt("%.1f", 100.0 * m.mfu) << "% | bubble "
     << fmt("%.1f", 100.0 * m.bubble) << "%";
  if (!m.moe.empty()) {
    const WorstMoe w = worst_moe(m);
    os << " | moe-load " << fmt("%.2f", w.load);
    if (w.rank_load >= 0) os << " | rank-load " << fmt("%.2f", w.rank_load);  // expert parallelism's busiest rank
    if (w.dropped >= 0) os << " | dropped " << fmt("%.1f", 100.0 * w.dropped) << "%";
    if (w.bias_range >= 0) os << " | bias-range " << fmt("%.2e", w.bias_range);
  }
  if (m.documents)
    os << " | loss-tokens " << fmt("%.0f", m.documents->loss_tokens) << " | padding "
       << fmt("%.1f", 100.0 * m.documents->padding_share) << "% | docs/sample " << fmt("%.2f", m.documents->docs_per_sample);
  if (m.eval_loss) os << " | eval-loss " << fmt("%.4f", *m.eval_loss);
  return os.str();
}

std::string format_progress(int64_t done, int64_t total, double elapsed_s, int width) {
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
  bar += std::to_string(done) + "/" + std::to_string(total);
  if (done > 0 && done < total) {
    const int64_t eta = static_cast<int64_t>(elapsed_s / static_cast<double>(done) * static_cast<double>(total - done));
    char buf[32];
    std::snprintf(buf, sizeof buf, "  ETA %lld:%02lld", static_cast<long long>(eta / 60), static_cast<long long>(eta % 60));
    bar += buf;
  }
  return bar;
}

std::string loss_svg(const std::vector<StepMetrics>& steps, const std::string& title) {
  const double W = 640, H = 400, L = 60, R = 20, T = 40, B = 50;
  double lo = INFINITY, hi = -INFINITY;
  int64_t smax = 1;
  for (const auto& m : steps) {
    for (double v : {m.loss, m.eval_loss.value_or(m.loss)})
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    smax = std::max(smax, m.step);
  }
  // Round 1-2-5 ticks on both axes (plot_axis.h): the axes run from tick to tick.
  const Axis ya = round_axis(lo, hi, 5);
  const Axis xa = round_axis(steps.empty() ? 1 : static_cast<double>(steps.front().step), static_cast<double>(smax),
                             5, true);
  lo = ya.lo, hi = ya.hi;
  auto x = [&](double s) { return L + (W - L - R) * (s - xa.lo) / (xa.hi - xa.lo); };
  auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title << "</text>\n"
     << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n"
     << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
  for (double v : ya.ticks)
    os << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
       << "\" stroke=\"#e5e5e5\"/><text x=\"" << L - 6 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">"
       << tick_label(v, ya.step) << "</text>\n";
  for (double s : xa.ticks)
    os << "<line x1=\"" << x(s) << "\" x2=\"" << x(s) << "\" y1=\"" << H - B << "\" y2=\"" << H - B + 4
       << "\" stroke=\"black\"/><text x=\"" << x(s) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">"
       << tick_label(s, xa.step) << "</text>\n";
  os << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step</text>\n"
     << "<text x=\"16\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 16 " << (T + H - B) / 2
     << ")\" text-anchor=\"middle\">loss</text>\n<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"";
  for (const auto& m : steps)
    if (std::isfinite(m.loss)) os << x(static_cast<double>(m.step)) << "," << y(m.loss) << " ";
  os << "\"/>\n";
  bool any_eval = false;
  for (const auto& m : steps)
    if (m.eval_loss && std::isfinite(*m.eval_loss)) {
      any_eval = true;
      os << "<circle cx=\"" << x(static_cast<double>(m.step)) << "\" cy=\"" << y(*m.eval_loss)
         << "\" r=\"4\" fill=\"#d62728\"/>\n";
    }
  os << "<text x=\"" << W - R - 150 << "\" y=\"" << T + 10 << "\" fill=\"#1f77b4\">&#9472; train loss</text>\n";
  if (any_eval) os << "<text x=\"" << W - R - 150 << "\" y=\"" << T + 26 << "\" fill=\"#d62728\">&#9679; eval loss</text>\n";
  os << "</svg>\n";
  return os.str();
}

namespace {

// The number after "key": in one metrics.jsonl line (written by to_json above).
std::optional<double> json_number(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nullopt;
  const char* start = line.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return v;
}

}  // namespace

void make_log_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // A folder the user named that cannot be made is bad input (exit 2), not a failed run.
  if (ec) throw ConfigError("cannot create logging.dir '" + dir + "': " + ec.message());
}

RunLog::RunLog(const std::string& dir, const std::string& title, int64_t continue_after, bool tensorboard)
    : dir_(dir), title_(title) {
  make_log_dir(dir);
  std::string kept;  // rows of steps <= continue_after, also in history_ for loss.svg
  if (continue_after >= 0) {
    std::ifstream old(dir + "/metrics.jsonl");
    for (std::string line; std::getline(old, line);) {
      const auto step = json_number(line, "step");
      if (!step || *step > static_cast<double>(continue_after)) continue;
      StepMetrics m;
      m.step = static_cast<int64_t>(*step);
      m.loss = json_number(line, "loss").value_or(0);
      m.lr = json_number(line, "lr").value_or(0);
      m.grad_norm = json_number(line, "grad_norm").value_or(0);
      m.eval_loss = json_number(line, "eval_loss");
      history_.push_back(m);
      kept += line + "\n";
    }
  }
  jsonl_.open(dir + "/metrics.jsonl", std::ios::trunc);
  jsonl_ << kept;
  if (!jsonl_) throw std::runtime_error("cannot write '" + dir + "/metrics.jsonl'");
  if (tensorboard) events_ = std::make_unique<tensorboard::EventWriter>(dir);
}

void RunLog::write_config(const std::string& toml_text) {
  std::ofstream f(dir_ + "/config.toml", std::ios::trunc);
  f << toml_text;
  if (!f) throw std::runtime_error("cannot write '" + dir_ + "/config.toml'");
}

void RunLog::append(const StepMetrics& m) {
  history_.push_back(m);
  jsonl_ << to_json(m) << "\n";
  jsonl_.flush();
  if (events_) events_->add(m.step, to_scalars(m));
  // NOTE [loss.svg during the run]: redrawn at the first logged step and then at
  // most once a second (drawing is linear in the steps so far, so every step
  // would make a long run's logging quadratic), atomically, so a run stopped by
  // Ctrl-C or killed leaves a whole plot of its logged steps up to about a
  // second before; finish() draws the last one.
  const auto now = std::chrono::steady_clock::now();
  if (!drawn_ || now - last_drawn_ >= std::chrono::seconds(1)) write_plot();
}

void RunLog::write_plot() {
  write_file_atomic(dir_ + "/loss.svg", loss_svg(history_, title_));
  drawn_ = true;
  last_drawn_ = std::chrono::steady_clock::now();
}

void RunLog::finish() { write_plot(); }

}  // namespace trident
