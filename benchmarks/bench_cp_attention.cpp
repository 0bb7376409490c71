// Context-parallel attention alone (models/common/context_attention.h), forward
// and backward of one layer's causal attention, against the whole sequence's
// on one rank: per sequence length, the step time of cp = 1 (SDPA's flash
// kernel) and, at cp = 2 over two forked rank processes (one thread each),
// each cp_comm kind's time per rank and, for the ring, the time its ranks
// waited for transfers (exposed: what the step products did not hide).
//   bench_cp_attention [--seqs 1024,4096] [--heads 8] [--kv-heads 4] [--dim 64] [--reps 3]
// One line per sequence length and kind:
//   RESULT seq=4096 cp=2 kind=p2p ms=... exposed_ms=... whole_ms=...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/context_split.h"
#include "models/common/attention.h"
#include "models/common/context_attention.h"
#include "parallel/thread_group.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<int64_t> seqs = {1024, 4096};
  int64_t heads = 8, kv = 4, dim = 64;
  int reps = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--seqs")) {
      a.seqs.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) a.seqs.push_back(std::atol(item.c_str()));
    } else if (!std::strcmp(argv[i], "--heads")) {
      a.heads = std::atol(value().c_str());
    } else if (!std::strcmp(argv[i], "--kv-heads")) {
      a.kv = std::atol(value().c_str());
    } else if (!std::strcmp(argv[i], "--dim")) {
      a.dim = std::atol(value().c_str());
    } else if (!std::strcmp(argv[i], "--reps")) {
      a.reps = std::atoi(value().c_str());
    } else {
      throw std::runtime_error(std::string("unknown argument '") + argv[i] + "'");
    }
  }
  for (int64_t s : a.seqs)
    if (s < 4 || s % 4 != 0) throw std::runtime_error("--seqs: each length must be a positive multiple of 4");
  if (a.heads < 1 || a.kv < 1 || a.heads % a.kv != 0 || a.dim < 1 || a.reps < 1)
    throw std::runtime_error("--heads, --kv-heads (dividing heads), --dim and --reps must be positive");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `reps` forward + backward passes of fn(q, k, v) (after one warm-up).
template <class Fn>
double time_pass(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, int reps, Fn fn) {
  std::vector<double> t;
  for (int i = 0; i <= reps; ++i) {
    const at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    const auto start = Clock::now();
    fn(q, k, v).sum().backward();
    if (i > 0) t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trident;
  try {
    const Args a = parse(argc, argv);
    at::set_num_threads(1);
    for (const int64_t s : a.seqs) {
      at::manual_seed(3);
      const at::Tensor q = at::randn({1, a.heads, s, a.dim}), k = at::randn({1, a.kv, s, a.dim}),
                       v = at::randn({1, a.kv, s, a.dim});
      const double whole = time_pass(q, k, v, a.reps, [](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
        return causal_attention(x, y, z, 0.0);
      });
      std::printf("RESULT seq=%lld cp=1 kind=sdpa ms=%.3f exposed_ms=0 whole_ms=%.3f\n", static_cast<long long>(s),
                  1e3 * whole, 1e3 * whole);
      for (const char* kind : {"p2p", "all_gather", "a2a"}) {
        if (std::string(kind) == "a2a" && (a.heads % 2 != 0 || a.kv % 2 != 0)) continue;
        const std::vector<std::string> out =
            run_process_group("cp", 2, std::chrono::milliseconds(600000), [&](Group& g) {
              const CpContext cp{&g, parse_cp_comm(kind)};
              const at::Tensor pos = at::tensor(context_positions(s, 2, g.rank), at::kLong);
              const auto mine = [&](const at::Tensor& t) { return t.index_select(2, pos).contiguous(); };
              g.comm_seconds = 0;
              const double ms = 1e3 * time_pass(mine(q), mine(k), mine(v), a.reps,
                                                [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
                                                  return context_attention(cp, x, y, z);
                                                });
              // The ring's waits over the warm-up and the timed passes, per pass.
              const double exposed = std::string(kind) == "p2p" ? 1e3 * g.comm_seconds / (a.reps + 1) : 0.0;
              char line[128];
              std::snprintf(line, sizeof line, "%.3f %.3f", ms, exposed);
              return std::string(line);
            });
        double ms = 0, exposed = 0;
        for (const std::string& o : out) {  // the slower rank's figures
          double m = 0, e = 0;
          if (std::sscanf(o.c_str(), "%lf %lf", &m, &e) != 2) throw std::runtime_error("bad rank output: " + o);
          ms = std::max(ms, m);
          exposed = std::max(exposed, e);
        }
        std::printf("RESULT seq=%lld cp=2 kind=%s ms=%.3f exposed_ms=%.3f whole_ms=%.3f\n", static_cast<long long>(s),
                    kind, ms, exposed, 1e3 * whole);
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cp_attention: %s\n", e.what());
    return 2;
  }
  return 0;
}
