// Data parallelism's three parts, each alone: the ZeRO-1 shard ranges, the
// gradient buffer (views, bucket order, places, the DP average with and
// without overlap and sharding), the finalisation (the norm counts every
// parameter once; the tied copies' reductions), and the ZeRO-1 optimizer
// (its segments tile the owned range; after a step every rank holds the
// same parameters as a replicated AdamW). DP ranks are threads of this
// process over loopback Gloo (parallel/thread_group.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "parallel/grad_buffer.h"
#include "parallel/grad_finalize.h"
#include "parallel/thread_group.h"
#include "parallel/zero_optimizer.h"

namespace trident {
namespace {

using std::chrono::milliseconds;

Param make_param(const std::string& name, std::vector<int64_t> shape, double start) {
  Param p;
  p.info.name = name;
  p.info.full_shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  p.tensor = (at::arange(n, at::kFloat) + start).reshape(shape).requires_grad_(true);
  return p;
}

// Three parameters in two chunks: a (2x3) and b (4) in chunk 0, c (5) in chunk 1.
struct Params {
  std::vector<Param> all{make_param("a", {2, 3}, 0), make_param("b", {4}, 10), make_param("c", {5}, 20)};
  std::vector<std::vector<Param*>> chunks() { return {{&all[0], &all[1]}, {&all[2]}}; }
};

// A bucket cap of `elements` floats.
double bucket_mb_for(int64_t elements) { return static_cast<double>(elements) * 4 / (1024 * 1024); }

Group solo(const std::string& name) {
  Group g;
  g.name = name;
  g.members = {0};
  return g;
}

auto bucketed = [](const Param&) { return GradPlace::kBucket; };

// Elements of bucket b that this rank owns and that hold parameters.
int64_t owned_used(const GradBuffer& buf, const GradBuffer::Bucket& b) {
  const ShardRange own = buf.owned(b);
  return std::max<int64_t>(0, std::min(own.hi, b.used) - own.lo);
}

TEST(ZeroShard, OwnedRangesTileThePaddedBucket) {
  // 10 used elements padded to 12 over dp = 3: three parts of 4.
  int64_t next = 0;
  for (int r = 0; r < 3; ++r) {
    const ShardRange s = owned_range(12, 10, 3, r, true);
    EXPECT_EQ(s.lo, next);
    EXPECT_EQ(s.hi - s.lo, 4);
    next = s.hi;
  }
  EXPECT_EQ(next, 12);
  const ShardRange whole = owned_range(12, 10, 3, 1, false);  // not sharded: every used element
  EXPECT_EQ(whole.lo, 0);
  EXPECT_EQ(whole.hi, 10);
  EXPECT_THROW(owned_range(10, 10, 3, 0, true), std::logic_error);  // not padded to a multiple of dp
  EXPECT_THROW(owned_range(12, 10, 3, 3, true), std::logic_error);  // no such rank
}

TEST(GradBuffer, ParamsBecomeViewsOfBucketsInReverseOrder) {
  Params ps;
  const Group dp = solo("dp");
  GradBufferOptions o;
  o.bucket_mb = bucket_mb_for(5);  // a bucket closes once it holds 5 or more elements
  GradBuffer buf(ps.chunks(), dp, o, bucketed);
  // Reverse forward order: c (5) fills the first bucket, then b and a share the second.
  ASSERT_EQ(buf.buckets().size(), 2u);
  EXPECT_EQ(buf.buckets()[0]->params, (std::vector<size_t>{2}));
  EXPECT_EQ(buf.buckets()[1]->params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(buf.buckets()[1]->used, 10);
  // Values kept, and every tensor and gradient is a view of its bucket.
  EXPECT_TRUE(ps.all[0].tensor.equal((at::arange(6, at::kFloat)).reshape({2, 3})));
  EXPECT_TRUE(ps.all[2].tensor.equal(at::arange(5, at::kFloat) + 20));
  const auto& b1 = *buf.buckets()[1];
  EXPECT_EQ(ps.all[1].tensor.data_ptr<float>(), b1.data.data_ptr<float>());
  EXPECT_EQ(ps.all[0].tensor.data_ptr<float>(), b1.data.data_ptr<float>() + 4);
  EXPECT_EQ(ps.all[0].tensor.grad().data_ptr<float>(), b1.grad.data_ptr<float>() + 4);
  EXPECT_EQ(buf.dp_reduced_elements(), 0);  // dp = 1 reduces nothing
}

TEST(GradBuffer, LateAndLocalGradientsGetBucketsOfTheirOwn) {
  Params ps;
  ps.all[1].info.sequence_parallel_grad = true;
  const Group dp = solo("dp");
  GradBufferOptions o;
  GradBuffer buf(ps.chunks(), dp, o, [](const Param& p) {
    if (p.info.name == "a") return GradPlace::kLateTied;
    if (p.info.name == "b") return GradPlace::kLateSequenceParallel;
    return GradPlace::kLocal;
  });
  ASSERT_EQ(buf.buckets().size(), 2u);
  const auto& late = *buf.buckets()[0];
  EXPECT_TRUE(late.late);
  EXPECT_EQ(late.params, (std::vector<size_t>{1, 0}));  // sequence-parallel ones first
  EXPECT_EQ(late.sp_end, 4);
  EXPECT_TRUE(buf.buckets()[1]->local);
  // The late bucket's sequence-parallel part is what is reduced over TP first.
  buf.zero_grads();
  buf.wait_reduction();
  EXPECT_EQ(buf.sequence_parallel_grads().numel(), 4);
  buf.reduce_late();
  // The local tied copy (c, 5 elements) is stepped through its primary: not counted.
  EXPECT_EQ(buf.stepped_params(), 6 + 4);
  // What the norm and the optimizer see: a and b, whole; not the local c.
  const std::vector<OwnedGrad> owned = buf.owned_grads();
  ASSERT_EQ(owned.size(), 2u);
  EXPECT_EQ(owned[0].param, &ps.all[1]);
  EXPECT_EQ(owned[1].param, &ps.all[0]);
  EXPECT_EQ(owned[1].numel, 6);
  EXPECT_TRUE(owned[1].grad.is_alias_of(ps.all[0].tensor.grad()));
}

// Each DP rank r sets every gradient to r + 1 (directly, or through a
// backward with the buffer's hooks armed), then reduce() must leave the
// average 1.5 in everything the rank owns.
void check_average(bool overlap, bool sharded, bool through_backward) {
  const auto errors = run_thread_group("dp", 2, milliseconds(30000), [&](Group& dp) {
    Params ps;
    GradBufferOptions o;
    o.overlap = overlap;
    o.sharded = sharded;
    o.bucket_mb = bucket_mb_for(5);
    GradBuffer buf(ps.chunks(), dp, o, bucketed);
    const double mine = dp.rank + 1;
    for (int step = 0; step < 2; ++step) {  // twice: zero_grads must reset everything
      buf.zero_grads();
      if (through_backward) {
        const auto chunks = ps.chunks();
        for (int c : {1, 0}) {
          buf.final_backward_begins(c);
          for (Param* p : chunks[static_cast<size_t>(c)]) (p->tensor * mine).sum().backward();
          buf.grads_final(c);
        }
      } else {
        for (Param& p : ps.all) p.tensor.mutable_grad().fill_(mine);
      }
      buf.wait_reduction();
      buf.reduce_late();
      for (const auto& b : buf.buckets()) {
        at::Tensor g = b->grad.narrow(0, buf.owned(*b).lo, owned_used(buf, *b));
        if (!g.eq(1.5).all().item<bool>())
          throw std::runtime_error("rank " + std::to_string(dp.rank) + " step " + std::to_string(step) +
                                   ": owned gradient not the DP average 1.5");
      }
    }
    if (buf.dp_reduced_elements() != 15) throw std::runtime_error("expected 15 reduced elements");
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(GradBuffer, AveragesOverDp) { check_average(false, false, false); }
TEST(GradBuffer, AveragesOverDpOverlappedWithTheBackward) { check_average(true, false, true); }
TEST(GradBuffer, ShardedReduceScatterAveragesTheOwnedShard) { check_average(true, true, true); }

TEST(GradFinalizer, PlacesAndTiedPairs) {
  Params ps;
  ps.all[0].info.name = "emb";
  ps.all[2].info.name = "emb";
  ps.all[2].info.tied_copy = true;
  ps.all[1].info.sequence_parallel_grad = true;
  const std::map<std::string, bool> local{{"emb", true}};
  EXPECT_EQ(grad_place(ps.all[0], local, true), GradPlace::kLateTied);
  EXPECT_EQ(grad_place(ps.all[2], local, true), GradPlace::kLocal);
  EXPECT_EQ(grad_place(ps.all[1], local, true), GradPlace::kLateSequenceParallel);
  EXPECT_EQ(grad_place(ps.all[1], local, false), GradPlace::kBucket);
  const std::map<std::string, bool> remote{{"emb", false}};
  EXPECT_EQ(grad_place(ps.all[2], remote, false), GradPlace::kLateTied);
  std::vector<Param*> all{&ps.all[0], &ps.all[1], &ps.all[2]};
  const TiedParams t = find_tied(all, local);
  ASSERT_EQ(t.pairs.size(), 1u);
  EXPECT_EQ(t.pairs[0].first, &ps.all[0]);
  EXPECT_EQ(t.pairs[0].second, &ps.all[2]);
  EXPECT_EQ(find_tied(all, remote).remote.size(), 2u);
  std::vector<Param*> copy_only{&ps.all[2]};
  EXPECT_THROW(find_tied(copy_only, local), std::logic_error);
}

// Tied copies on one pipeline rank are added there; split over the first
// and the last rank they are all-reduced; anywhere else is refused.
TEST(GradFinalizer, TiedPlacementOfTheCopies) {
  const std::vector<TiedGroup> tied{{"emb", {0, 3}}, {"pos", {1, 1}}};
  const auto rank_of = [](int stage) { return stage; };  // one stage per pipeline rank
  EXPECT_EQ(tied_placement(tied, rank_of, 0, 4), (std::map<std::string, bool>{{"emb", false}}));
  EXPECT_EQ(tied_placement(tied, rank_of, 1, 4), (std::map<std::string, bool>{{"pos", true}}));
  EXPECT_TRUE(tied_placement(tied, rank_of, 2, 4).empty());
  EXPECT_THROW(tied_placement({{"emb", {0, 2}}}, rank_of, 0, 4), std::runtime_error);
  std::vector<ParamInfo> unique(2);
  unique[0].name = "b";
  unique[1].name = "a";
  EXPECT_EQ(norm_slots(unique), (std::map<std::string, size_t>{{"b", 0}, {"a", 1}}));
}

// Two TP ranks: "w" is split over TP (each rank holds half of its gradient),
// "r" is replicated (counted on TP rank 0 only); the norm must be that of
// the full gradient, sqrt(sum of squares), on both ranks.
TEST(GradFinalizer, NormCountsEachParameterOnceOverTp) {
  const auto errors = run_thread_group("tp", 2, milliseconds(30000), [&](Group& tp) {
    Param w = make_param("w", {2}, 0), r = make_param("r", {3}, 0);
    w.info.shard_dim = 0;
    const Group dp = solo("dp");
    GradBufferOptions o;
    GradBuffer buf({{&w, &r}}, dp, o, bucketed);
    buf.zero_grads();
    // Full w gradient [1, 2, 3, 4]: rank 0 holds [1, 2], rank 1 [3, 4]; r's is [5, 6, 7] on both.
    w.tensor.mutable_grad().copy_(at::arange(2, at::kFloat) + 1 + 2 * tp.rank);
    r.tensor.mutable_grad().copy_(at::arange(3, at::kFloat) + 5);
    GradFinalizer fin({&dp, &tp, &tp, &tp}, {}, NormInputs{{{"w", 0}, {"r", 1}}, buf.owned_grads()});
    const double norm = fin.grad_norm().item<double>();
    const double want = std::sqrt(1.0 + 4 + 9 + 16 + 25 + 36 + 49);
    if (norm != want)
      throw std::runtime_error("rank " + std::to_string(tp.rank) + ": norm " + std::to_string(norm) + " != " +
                               std::to_string(want));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(GradFinalizer, TiedCopyAddsIntoItsPrimaryAndTakesItsValue) {
  Param prim = make_param("emb", {3}, 0), copy = make_param("emb", {3}, 100);
  copy.info.tied_copy = true;
  const Group g = solo("g");
  std::vector<Param*> all{&prim, &copy};
  const std::map<std::string, bool> local{{"emb", true}};
  GradBuffer buf({all}, g, GradBufferOptions{},
                 [&](const Param& p) { return grad_place(p, local, false); });
  GradFinalizer fin({&g, &g, &g, &g}, find_tied(all, local), NormInputs{{{"emb", 0}}, buf.owned_grads()});
  buf.zero_grads();
  prim.tensor.mutable_grad().fill_(1);
  copy.tensor.mutable_grad().fill_(2);
  buf.wait_reduction();
  fin.reduce_model_parallel(buf.sequence_parallel_grads());
  buf.reduce_late();
  EXPECT_TRUE(prim.tensor.grad().eq(3).all().item<bool>());
  EXPECT_TRUE(copy.tensor.grad().eq(0).all().item<bool>());
  EXPECT_DOUBLE_EQ(fin.grad_norm().item<double>(), std::sqrt(27.0));  // the copy is not counted again
  {
    at::NoGradGuard no_grad;
    prim.tensor.add_(1);
  }
  fin.copy_tied();
  EXPECT_TRUE(copy.tensor.equal(prim.tensor));
}

// ZeRO-1 on two DP ranks against a replicated AdamW: each rank's segments
// tile its shard, its state is about half, and after the gather every rank
// holds exactly the parameters the replicated optimizer computes.
TEST(ZeroOptimizer, ShardedStepEqualsTheReplicatedOne) {
  const auto errors = run_thread_group("dp", 2, milliseconds(30000), [&](Group& dp) {
    Params sharded_ps, replicated_ps;
    GradBufferOptions so, ro;
    so.sharded = true;
    so.bucket_mb = ro.bucket_mb = bucket_mb_for(5);
    GradBuffer sharded(sharded_ps.chunks(), dp, so, bucketed);
    const Group one = solo("one");
    GradBuffer replicated(replicated_ps.chunks(), one, ro, bucketed);
    ZeroOptimizer zs(sharded, AdamWOptions{}), zr(replicated, AdamWOptions{});
    int64_t owned = 0;
    for (const auto& b : sharded.buckets()) owned += owned_used(sharded, *b);
    int64_t seg = 0;
    for (const auto& s : zs.adam().segments()) seg += s.numel;
    if (seg != owned) throw std::runtime_error("segments cover " + std::to_string(seg) + " of " +
                                               std::to_string(owned) + " owned elements");
    for (int step = 0; step < 3; ++step) {
      sharded.zero_grads();
      replicated.zero_grads();
      for (size_t i = 0; i < 3; ++i) {
        at::Tensor g = at::arange(sharded_ps.all[i].tensor.numel(), at::kFloat).reshape(
                           sharded_ps.all[i].tensor.sizes()) * (0.1 * (step + 1));
        sharded_ps.all[i].tensor.mutable_grad().copy_(g);  // the same on both ranks: the average is g
        replicated_ps.all[i].tensor.mutable_grad().copy_(g);
      }
      sharded.wait_reduction();
      zs.step(1e-2);
      zr.step(1e-2);
    }
    for (size_t i = 0; i < 3; ++i)
      if (!sharded_ps.all[i].tensor.equal(replicated_ps.all[i].tensor))
        throw std::runtime_error("rank " + std::to_string(dp.rank) + ": " + sharded_ps.all[i].info.name +
                                 " differs from the replicated AdamW's");
    if (zs.adam().state_bytes() * 2 > zr.adam().state_bytes() + 2 * 8 * 4)
      throw std::runtime_error("sharded state " + std::to_string(zs.adam().state_bytes()) + " bytes vs " +
                               std::to_string(zr.adam().state_bytes()) + " replicated");
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// ZeRO-1 with the overlapped gather (NOTE [overlapped parameter gather]), on
// two DP ranks under nccl-rules (an all-gather's output lands at its wait):
// after step() the gathers are pending and the shards of the other rank still
// hold the last values; wait_gather(b) finishes bucket b alone; after every
// wait each rank holds what the replicated AdamW computes, as with the gather
// finished in the step.
TEST(ZeroOptimizer, OverlappedGatherLandsAtItsWait) {
  const auto errors = run_thread_group("dp", 2, milliseconds(30000), [&](Group& dp) {
    Params sharded_ps, replicated_ps;
    GradBufferOptions so, ro;
    so.sharded = true;
    so.bucket_mb = ro.bucket_mb = bucket_mb_for(5);
    GradBuffer sharded(sharded_ps.chunks(), dp, so, bucketed);
    const Group one = solo("one");
    GradBuffer replicated(replicated_ps.chunks(), one, ro, bucketed);
    ZeroOptimizer zs(sharded, AdamWOptions{}, /*overlap_gather=*/true), zr(replicated, AdamWOptions{});
    auto fail = [&](const std::string& what) { throw std::runtime_error("rank " + std::to_string(dp.rank) + ": " + what); };
    if (sharded.buckets().size() < 2) fail("expected two buckets");
    for (int step = 0; step < 2; ++step) {
      sharded.zero_grads();
      replicated.zero_grads();
      for (size_t i = 0; i < 3; ++i) {
        at::Tensor g = at::arange(sharded_ps.all[i].tensor.numel(), at::kFloat).reshape(
                           sharded_ps.all[i].tensor.sizes()) * (0.1 * (step + 1));
        sharded_ps.all[i].tensor.mutable_grad().copy_(g);
        replicated_ps.all[i].tensor.mutable_grad().copy_(g);
      }
      sharded.wait_reduction();
      std::vector<at::Tensor> before;
      for (const auto& b : sharded.buckets()) before.push_back(b->data.clone());
      zs.step(1e-2);
      zr.step(1e-2);
      if (!zs.gather_pending()) fail("no gather pending after an overlapped step");
      for (size_t b = 0; b < sharded.buckets().size(); ++b) {
        const GradBuffer::Bucket& bucket = *sharded.buckets()[b];
        const ShardRange own = sharded.owned(bucket);
        // The other rank's shard: its old values until the wait.
        const int64_t lo = own.lo == 0 ? own.hi : 0, n = bucket.data.numel() / 2;
        if (!bucket.data.narrow(0, lo, n).equal(before[b].narrow(0, lo, n)))
          fail("bucket " + std::to_string(b) + " changed before its wait");
        zs.wait_gather(b);
        if (bucket.data.narrow(0, lo, n).equal(before[b].narrow(0, lo, n)))
          fail("bucket " + std::to_string(b) + " unchanged after its wait");
        if ((b + 1 < sharded.buckets().size()) != zs.gather_pending()) fail("pending after the last wait, or not before");
      }
    }
    for (size_t i = 0; i < 3; ++i)
      if (!sharded_ps.all[i].tensor.equal(replicated_ps.all[i].tensor))
        fail(sharded_ps.all[i].info.name + " differs from the replicated AdamW's");
  }, "nccl-rules");
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace trident
