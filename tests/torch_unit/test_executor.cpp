// The executor against a model that is not GPT: a fake Stage made of a few
// linear layers, run by every schedule on p ranks (threads of this process,
// each with its own Gloo group over one shared in-memory store). Its losses
// and every parameter's gradient must equal the same stages run one after
// another in a single thread, bit for bit (every schedule adds micro-batch
// gradients in ascending order). The GradObserver's "final" calls are checked
// against the end of the step. Every kind runs under the nccl-rules backend
// too (NOTE [NCCL rules on the CPU] in parallel/nccl_rules.h), and the lists
// the executor ran before NOTE [pair order] fail under it.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/thread_group.h"
#include "runtime/executor.h"
#include "schedules/generators.h"
#include "../schedule_helpers.h"

namespace trident {
namespace {

constexpr int64_t kWidth = 8, kSeq = 4, kVocab = 11, kMbs = 2;

// Virtual stage s of a toy model: (first) an embedding, then two linear +
// tanh layers, then (last) a squared-error loss against the targets.
class FakeStage : public Stage {
 public:
  FakeStage(int stage, int stages) : first_(stage == 0), last_(stage == stages - 1) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + stage);
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      Param p;
      p.info.name = "s" + std::to_string(stage) + "." + name;
      p.info.full_shape = shape;
      p.tensor = at::normal(0.0, 0.5, shape, gen).requires_grad_(true);
      params_.push_back(p);
    };
    if (first_) add("emb", {kVocab, kWidth});
    add("w1", {kWidth, kWidth});
    add("b1", {kWidth});
    add("w2", {kWidth, kWidth});
  }
  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) override {
    size_t i = 0;
    at::Tensor x = first_ ? at::embedding(params_[i++].tensor, input) : input;  // (mbs, seq, width)
    x = at::tanh(linear(x, params_[i].tensor, params_[i + 1].tensor));
    x = linear(x, params_[i + 2].tensor, at::Tensor());
    if (!last_) return x;
    return (x.sum(-1) - targets.to(at::kFloat) / kVocab).pow(2).mean();
  }
  std::vector<int64_t> input_shape(int64_t mbs) const override { return {mbs, kSeq, kWidth}; }
  std::vector<int64_t> output_shape(int64_t mbs) const override { return {mbs, kSeq, kWidth}; }
  std::vector<Param>& params() override { return params_; }
  // What each forward was handed: its first document's length, 0 for none.
  void set_documents(std::shared_ptr<const Documents> docs) override {
    if (docs) seen_docs.push_back(docs->lengths.at(0).at(0));
  }
  std::vector<int64_t> seen_docs;

 private:
  bool first_, last_;
  std::vector<Param> params_;
};

MicroBatch batch(int mb) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77 + mb);
  at::Tensor t = at::randint(kVocab, {kMbs, kSeq + 1}, gen);
  return {t.narrow(1, 0, kSeq).contiguous(), t.narrow(1, 1, kSeq).contiguous()};
}

struct Result {
  double loss_sum = 0;
  std::map<std::string, at::Tensor> grads;
};

// All stages in order in one thread: the independent reference.
Result sequential(int stages, int m) {
  std::vector<std::unique_ptr<FakeStage>> st;
  for (int s = 0; s < stages; ++s) st.push_back(std::make_unique<FakeStage>(s, stages));
  Result r;
  for (int mb = 0; mb < m; ++mb) {
    MicroBatch b = batch(mb);
    at::Tensor x = b.input;
    for (int s = 0; s < stages; ++s) x = st[static_cast<size_t>(s)]->forward(x, s == stages - 1 ? b.targets : at::Tensor());
    r.loss_sum += x.item<double>();
    (x * (1.0 / m)).backward();
  }
  for (auto& s : st)
    for (Param& p : s->params()) r.grads[p.info.name] = p.tensor.grad();
  return r;
}

// Records each chunk's gradients when the executor calls them final.
struct Snapshots : GradObserver {
  std::vector<Stage*> stages;
  std::map<int, int> begun;
  std::map<std::string, at::Tensor> at_final;
  void final_backward_begins(int chunk) override { ++begun[chunk]; }
  void grads_final(int chunk) override {
    EXPECT_EQ(begun[chunk], 1) << "chunk " << chunk << ": grads_final before final_backward_begins";
    for (Param& p : stages[static_cast<size_t>(chunk)]->params()) at_final[p.info.name] = p.tensor.grad().clone();
  }
};

// Every rank of a p-rank pipeline as a thread running `schedule`; returns
// the merged result and each rank's error.
Result run_pipeline(const sched::Schedule& schedule, const std::string& backend, std::vector<std::string>* errors_out,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  const int p = schedule.pipeline_ranks, m = schedule.microbatches, v = schedule.chunks;
  const std::string kind = "list";
  std::vector<Result> per_rank(static_cast<size_t>(p));
  const std::vector<std::string> errors = run_thread_group("pp", p, timeout, [&](Group& pp) {
    const int rank = pp.rank;
    std::vector<std::unique_ptr<FakeStage>> mine;
    std::vector<Stage*> raw;
    for (int c = 0; c < v; ++c) {
      mine.push_back(std::make_unique<FakeStage>(schedule.stage_of(rank, c), p * v));
      raw.push_back(mine.back().get());
    }
    Executor exec(raw, pp, schedule.stage_map(), kMbs);
    Snapshots snap;
    snap.stages = raw;
    ExecutorStats stats = exec.run(schedule.ranks[static_cast<size_t>(rank)], batch, 1.0 / m, &snap);
    Result& r = per_rank[static_cast<size_t>(rank)];
    r.loss_sum = stats.loss_sum();
    for (auto& s : mine)
      for (Param& prm : s->params()) {
        r.grads[prm.info.name] = prm.tensor.grad();
        EXPECT_TRUE(snap.at_final.count(prm.info.name)) << prm.info.name << " never declared final";
        if (snap.at_final.count(prm.info.name)) {
          EXPECT_TRUE(at::equal(snap.at_final[prm.info.name], prm.tensor.grad()))
              << prm.info.name << " changed after grads_final (" << kind << " p=" << p << " v=" << v << ")";
        }
      }
  }, backend);
  Result merged;
  for (int rank = 0; rank < p; ++rank) {
    merged.loss_sum += per_rank[static_cast<size_t>(rank)].loss_sum;
    for (auto& [name, g] : per_rank[static_cast<size_t>(rank)].grads) merged.grads[name] = g;
  }
  *errors_out = errors;
  return merged;
}

Result pipelined(const std::string& kind, int p, int m, int v, const std::string& backend = "gloo") {
  std::vector<std::string> errors;
  Result r = run_pipeline(sched::generate(kind, p, m, v), backend, &errors);
  for (int rank = 0; rank < p; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  return r;
}

bool same_grads(const Result& a, const Result& b) {
  if (a.grads.size() != b.grads.size()) return false;
  for (const auto& [name, g] : a.grads)
    if (!b.grads.count(name) || !b.grads.at(name).defined() || !at::equal(b.grads.at(name), g)) return false;
  return true;
}

void expect_same(const std::string& kind, int p, int v, int m, const std::string& backend = "gloo") {
  const Result ref = sequential(p * v, m);
  const Result got = pipelined(kind, p, m, v, backend);
  EXPECT_EQ(got.loss_sum, ref.loss_sum) << kind << " p=" << p << " v=" << v;
  ASSERT_EQ(got.grads.size(), ref.grads.size()) << kind << " p=" << p << " v=" << v;
  for (const auto& [name, g] : ref.grads) {
    ASSERT_TRUE(got.grads.count(name) && got.grads.at(name).defined()) << name;
    EXPECT_TRUE(at::equal(got.grads.at(name), g)) << kind << " p=" << p << " v=" << v << ": gradient of " << name
                                                   << " differs by " << (got.grads.at(name) - g).abs().max().item<double>();
  }
}

TEST(ExecutorFakeStage, EveryScheduleMatchesSequentialStages) {
  for (int p : {1, 2, 4})
    for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) expect_same(kind, p, 1, 8);
}

TEST(ExecutorFakeStage, InterleavedTwoChunksMatchesSequentialStages) {
  for (int p : {1, 2, 4}) expect_same("interleaved", p, 2, 8);
}

TEST(ExecutorNcclRules, EveryKindMatchesSequentialStages) {
  // Under NCCL's matching and stream order (no tags, one stream, a receive
  // holding it), including the shapes whose pair order the generators had
  // to fix (zb-v p = 2 m = 3, interleaved p = 2 m = 5, dualpipev p = 3 m = 6).
  for (const char* kind : {"gpipe", "1f1b", "zb-h1"}) expect_same(kind, 2, 1, 5, "nccl-rules");
  expect_same("1f1b", 4, 1, 6, "nccl-rules");
  expect_same("interleaved", 2, 2, 5, "nccl-rules");
  expect_same("interleaved", 2, 2, 4, "nccl-rules");
  expect_same("zb-v", 2, 2, 3, "nccl-rules");
  expect_same("dualpipev", 3, 2, 6, "nccl-rules");
}

using testing::unordered_communication;
using testing::with_prefetched_receives;

TEST(ExecutorNcclRules, PrefetchedReceivesDeadlock) {
  // gpipe p = 2, m = 1 with each receive posted before the compute ahead of
  // its consumer: Gloo runs it; under NCCL's rules rank 0's stream holds RB0
  // ahead of SF0 and rank 1's RF0 ahead of SB0, and the deadline names them.
  const sched::Schedule prefetched = with_prefetched_receives(sched::generate("gpipe", 2, 1));
  std::vector<std::string> errors;
  const Result gloo = run_pipeline(prefetched, "gloo", &errors);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(gloo.loss_sum, sequential(2, 1).loss_sum);
  run_pipeline(prefetched, "nccl-rules", &errors, std::chrono::milliseconds(2000));
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors) EXPECT_NE(e.find("deadlock under NCCL's rules"), std::string::npos) << e;
  EXPECT_NE(errors[0].find("receive #0 from rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("receive #0 from rank 0"), std::string::npos) << errors[1];
}

TEST(ExecutorNcclRules, UnorderedReceivesFail) {
  // zb-v p = 2, m = 3 with each receive right before its compute: rank 0
  // sends SF2 before SB0.1, rank 1 receives RB0.1 first. Under NCCL's
  // matching the k-th send meets the k-th receive: the same-shaped tensors
  // land in each other's buffers, or the groups wait on each other; either
  // way the step does not produce the sequential result (the validator
  // refuses such a list before it runs: tests/unit/test_pair_order.cpp).
  const sched::Schedule unordered = unordered_communication(sched::generate_compute("zb-v", 2, 3));
  std::vector<std::string> errors;
  const Result nccl = run_pipeline(unordered, "nccl-rules", &errors, std::chrono::milliseconds(4000));
  const bool failed = errors != std::vector<std::string>{"", ""};
  EXPECT_TRUE(failed || !same_grads(nccl, sequential(4, 3)));
  // The same schedule as generate() orders it runs (ExecutorNcclRules.EveryKindMatchesSequentialStages).
}

TEST(ExecutorNcclRules, EvaluationMatchesSequentialStages) {
  for (const auto& [kind, p, v] : std::vector<std::tuple<std::string, int, int>>{
           {"1f1b", 2, 1}, {"1f1b", 3, 1}, {"interleaved", 2, 2}, {"zb-v", 2, 2}}) {
    const sched::Schedule schedule = sched::generate(kind, p, 4, v);
    double ref = 0;
    {
      at::NoGradGuard no_grad;
      std::vector<std::unique_ptr<FakeStage>> st;
      for (int s = 0; s < p * v; ++s) st.push_back(std::make_unique<FakeStage>(s, p * v));
      for (int mb = 0; mb < 4; ++mb) {
        MicroBatch b = batch(mb);
        at::Tensor x = b.input;
        for (int s = 0; s < p * v; ++s) x = st[static_cast<size_t>(s)]->forward(x, s == p * v - 1 ? b.targets : at::Tensor());
        ref += x.item<double>();
      }
    }
    std::vector<double> loss(static_cast<size_t>(p), 0);
    const auto errors = run_thread_group("pp", p, std::chrono::milliseconds(20000), [&](Group& pp) {
      std::vector<std::unique_ptr<FakeStage>> mine;
      std::vector<Stage*> raw;
      for (int c = 0; c < v; ++c) {
        mine.push_back(std::make_unique<FakeStage>(schedule.stage_of(pp.rank, c), p * v));
        raw.push_back(mine.back().get());
      }
      Executor exec(raw, pp, schedule.stage_map(), kMbs);
      loss[static_cast<size_t>(pp.rank)] = exec.forward_only(4, batch).item<double>();
    }, "nccl-rules");
    double sum = 0;
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(errors[static_cast<size_t>(r)], "") << kind << " rank " << r;
      sum += loss[static_cast<size_t>(r)];
    }
    EXPECT_EQ(sum, ref) << kind << " p=" << p << " v=" << v;
  }
}

// Packed documents reach every stage's forward, the middle stages' included,
// each micro-batch's own (its first document is mb + 1 tokens long here).
TEST(ExecutorFakeStage, PackedDocumentsReachEveryStage) {
  const sched::Schedule schedule = sched::generate("1f1b", 3, 4, 1);
  auto packed = [](int mb) {
    MicroBatch b = batch(mb);
    b.documents = std::make_shared<const Documents>(
        Documents{DocumentLengths(kMbs, std::vector<int64_t>{mb + 1, kSeq - mb - 1 > 0 ? kSeq - mb - 1 : 1}), {}});
    return b;
  };
  std::vector<std::vector<int64_t>> seen(3);
  const std::vector<std::string> errors = run_thread_group("pp", 3, std::chrono::milliseconds(20000), [&](Group& pp) {
    FakeStage stage(pp.rank, 3);
    Executor exec({&stage}, pp, schedule.stage_map(), kMbs);
    exec.set_packed_documents(true);
    exec.run(schedule.ranks[static_cast<size_t>(pp.rank)], packed, 0.25);
    seen[static_cast<size_t>(pp.rank)] = stage.seen_docs;
  }, "gloo");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
    EXPECT_EQ(seen[static_cast<size_t>(rank)], (std::vector<int64_t>{1, 2, 3, 4})) << "rank " << rank;
  }
}

TEST(ExecutorFakeStage, RejectsAScheduleForAnotherPipeline) {
  Group pp;
  pp.members = {0};
  FakeStage s(0, 1);
  const sched::Schedule two = sched::empty_schedule(2, 1, 1);
  EXPECT_THROW(Executor({&s}, pp, two.stage_map(), kMbs), std::logic_error);
}

TEST(ExecutorFakeStage, ZbVAndDualPipeVMatchSequentialStages) {
  for (int p : {1, 2}) {
    expect_same("zb-v", p, 2, 4 * p);
    expect_same("dualpipev", p, 2, 4 * p);
  }
}

// The GradObserver hears grads_final(c) at chunk c's REDUCE_GRAD and
// final_backward_begins(c) before the last B or I of c ahead of it.
struct CallLog : GradObserver {
  std::vector<std::string> calls;
  void final_backward_begins(int chunk) override { calls.push_back("begins " + std::to_string(chunk)); }
  void grads_final(int chunk) override { calls.push_back("final " + std::to_string(chunk)); }
};

TEST(ExecutorFakeStage, GradsAreFinalAtTheReduceGradAction) {
  Group pp;
  pp.members = {0};
  FakeStage s0(0, 2), s1(1, 2);
  // p = 1, v = 2: chunk 1's backwards come first, so its REDUCE_GRAD does too.
  const sched::Schedule sch = sched::generate("interleaved", 1, 2, 2);
  ASSERT_EQ(sched::to_text(sch), "pipeline p=1 m=2 v=2\n0: F0 SF0 RF0.1 F0.1 B0.1 SB0.1 F1 SF1 RB0 B0 RF1.1 F1.1 "
                                 "B1.1 SB1.1 RD.1 RB1 B1 RD\n");
  Executor exec({&s0, &s1}, pp, sch.stage_map(), kMbs);
  CallLog log;
  exec.run(sch.ranks[0], batch, 0.5, &log);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"begins 1", "final 1", "begins 0", "final 0"}));
  // A list without a chunk's REDUCE_GRAD is refused, naming the chunk.
  sched::ActionList bare = sch.ranks[0];
  bare.erase(bare.begin() + 14);  // RD.1
  try {
    exec.run(bare, batch, 0.5, &log);
    ADD_FAILURE() << "a list without RD.1 ran";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("no REDUCE_GRAD for chunk 1 (RD.1)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trident
