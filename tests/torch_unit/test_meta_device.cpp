// Everything on its device (issue 28, item 6), proven on the meta device:
// each family's stages (GPT and Llama, from the registry, their tiny configs),
// under each TP plan and recomputation mode and in fp32 and bf16, have their
// parameters and buffers (Stage::buffers) moved to `meta`, then run forward
// and backward there. Meta tensors have shapes and no data, and ATen refuses
// to mix them with CPU tensors, so a tensor a stage keeps on the CPU (or makes
// there) fails the forward or the backward, naming the first operator that
// mixed the two and its inputs' shapes; a parameter, buffer, output or
// gradient left on the CPU fails naming it. A CUDA run needs the same, and a
// GPU is rarely here.
//
// libtorch's C++ build lacks meta kernels for a few operators (PyTorch adds
// them from Python, torch/_meta_registrations.py): see NOTE [meta fallback].
//
// tp = 2 runs without other ranks: its TP group is a stand-in whose
// collectives complete at once and leave their outputs as they are (on meta
// there is no data to reduce), so each TP rank's shapes and device placement
// are exercised alone.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/library.h>

#include "core/config.h"
#include "models/common/model.h"
#include "models/registry.h"
#include "parallel/process_groups.h"
#include "parallel/recompute.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

const c10::Device kMeta(c10::kMeta);

// NOTE [meta fallback]
// The operators without a meta kernel in libtorch's C++ build that a stage's
// forward and backward meet (registered below) come here. Where a tensor of
// another device (other than a 0-dim CPU scalar) meets a meta one, it throws
// as ATen does, naming the operator and the argument; otherwise it runs the
// operator on CPU zeros of the same shapes and dtypes and returns meta
// tensors of the result's shapes and strides (an out= or in-place argument
// is the meta tensor given, resized). The CPU's arithmetic is thrown away:
// only shapes and devices count.
void meta_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (CPU stand-in, the meta tensor given)
  for (size_t i = 0; i < args.size(); ++i) {
    const bool writes = args[i].alias_info() && args[i].alias_info()->isWrite();
    auto to_cpu = [&](const at::Tensor& t) {
      if (!t.defined() || t.device().is_cpu()) {
        TORCH_CHECK(!t.defined() || t.dim() == 0, op.schema().name(), ": argument '", args[i].name(),
                    "' is on cpu, the others on meta (expected all tensors on the same device)");
        return t;
      }
      TORCH_CHECK(t.is_meta(), op.schema().name(), ": argument '", args[i].name(), "' is on ", t.device());
      at::Tensor cpu = at::zeros(t.sizes(), t.options().device(c10::kCPU));
      if (writes) written.emplace_back(cpu, t);
      return cpu;
    };
    c10::IValue& v = (*stack)[first + i];
    if (v.isTensor()) {
      v = to_cpu(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) list.set(k, to_cpu(list.get(k)));
    } else if (v.isList()) {  // e.g. index's list of optional tensors
      auto list = v.toList();
      for (size_t k = 0; k < list.size(); ++k)
        if (list.get(k).isTensor()) list.set(k, to_cpu(list.get(k).toTensor()));
    }
  }
  op.callBoxed(stack);
  auto to_meta = [&](const at::Tensor& r) {
    if (!r.defined() || !r.device().is_cpu()) return r;
    for (auto& [cpu, meta] : written)
      if (r.is_same(cpu)) return meta.resize_(r.sizes());
    return at::empty_strided(r.sizes(), r.strides(), r.options().device(kMeta));
  };
  const size_t results = op.schema().returns().size();
  for (size_t i = stack->size() - results; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = to_meta(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) list.set(k, to_meta(list.get(k)));
    }
  }
}

// libtorch has a Meta fallback already (it throws), so each operator is named.
TORCH_LIBRARY_IMPL(aten, Meta, m) {
  for (const char* name : {"index_select", "embedding_dense_backward", "native_batch_norm",
                           "native_layer_norm_backward", "where.self", "where.self_out", "logical_and.out",
                           "logical_or.out"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&meta_fallback>());
}

// ATen's "Expected all tensors to be on the same device" names no tensor. A
// RecordFunction callback sees every operator's inputs as it starts and keeps
// the first that mixes meta with a CPU tensor of more than 0 dimensions (a 0-dim CPU
// tensor is a scalar, which ATen accepts anywhere): the failure message then
// gives the operator and the shapes, e.g. a rotary table's (seq_len, head_dim).
std::string g_first_mixed;  // "" until an operator mixes devices

void describe_if_mixed(const at::RecordFunction& fn) {
  if (!g_first_mixed.empty()) return;
  bool meta = false, cpu = false;
  std::string text;
  for (const c10::IValue& v : fn.inputs()) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& t = v.toTensor();
    meta |= t.is_meta();
    cpu |= t.device().is_cpu() && t.dim() > 0;
    text += (text.empty() ? "" : ", ") + t.device().str() + " " + c10::str(t.sizes()) + " " +
            std::string(at::toString(t.scalar_type()));
  }
  if (meta && cpu) g_first_mixed = std::string(fn.name()) + "(" + text + ")";
}

const at::CallbackHandle g_watch = at::addGlobalCallback(
    at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
      describe_if_mixed(fn);
      return nullptr;
    }).needsInputs(true));

// What threw, and the first operator that mixed devices if one did.
std::string threw(const char* pass, const c10::Error& e) {
  std::string out = std::string(pass) + " threw: " + e.what_without_backtrace();
  if (!g_first_mixed.empty()) out += " (first operator given a CPU tensor: " + g_first_mixed + ")";
  return out + "\n";
}

class DoneWork : public c10d::Work {
 public:
  DoneWork() { finish(); }
};

// A TP group's collectives on meta tensors: nothing to move, done at once.
class ShapeOnlyBackend : public c10d::Backend {
 public:
  ShapeOnlyBackend(int rank, int size) : c10d::Backend(rank, size) {}
  const std::string getBackendName() const override { return "shape-only"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return done();
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                           const c10d::AllgatherOptions&) override {
    return done();
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor&, at::Tensor&, const c10d::AllgatherOptions&) override {
    return done();
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor&, at::Tensor&,
                                                      const c10d::ReduceScatterOptions&) override {
    return done();
  }

 private:
  static c10::intrusive_ptr<c10d::Work> done() { return c10::make_intrusive<DoneWork>(); }
};

struct TpPlan {
  int size;
  bool sequence_parallel;
  std::string name() const { return "tp" + std::to_string(size) + (sequence_parallel ? "_sp" : ""); }
};

struct Case {
  std::string family;  // a config in configs/: <family>-tiny.toml
  TpPlan tp;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.family << " " << c.tp.name(); }

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.family + "_" + info.param.tp.name();
}

const char* recompute_name(Recompute r) {
  return r == Recompute::kNone ? "none" : r == Recompute::kFull ? "full" : "selective";
}

// "" when every tensor is on meta, else one line per tensor that is not.
std::string off_meta(const std::string& what, const at::Tensor& t) {
  if (!t.defined()) return what + " is undefined\n";
  return t.device() == kMeta ? "" : what + " is on " + t.device().str() + "\n";
}

// `stage` on meta: its parameters and buffers moved, one forward and one
// backward (the first stage takes token ids, the last targets); returns one
// line per tensor found off meta, or what threw ("" when all is well).
std::string run_on_meta(Stage& stage, int64_t seq_len, bool first, bool last) {
  for (Param& p : stage.params()) p.tensor = p.tensor.detach().to(kMeta).requires_grad_(true);
  stage.move_buffers(kMeta);
  std::string bad;
  for (const Param& p : stage.params()) bad += off_meta("parameter " + p.info.name, p.tensor);
  for (const Buffer& b : stage.buffers()) bad += off_meta("buffer " + b.name, *b.tensor);
  if (!bad.empty()) return bad;

  const int64_t mbs = 2;
  const auto ids = at::TensorOptions().dtype(at::kLong).device(kMeta);
  const at::Tensor input = first ? at::zeros({mbs, seq_len}, ids)
                                 : at::zeros(stage.input_shape(mbs), at::TensorOptions(kMeta)).requires_grad_(true);
  const at::Tensor targets = last ? at::zeros({mbs, seq_len}, ids) : at::Tensor();
  at::Tensor out;
  g_first_mixed.clear();
  try {
    out = stage.forward(input, targets);
  } catch (const c10::Error& e) {
    return threw("forward", e);
  }
  bad += off_meta("the output", out);
  if (!bad.empty()) return bad;
  try {
    if (last)
      out.backward();
    else
      out.backward(at::ones_like(out));
  } catch (const c10::Error& e) {
    return threw("backward", e);
  }
  for (const Param& p : stage.params()) bad += off_meta("gradient of " + p.info.name, p.tensor.grad());
  if (!first) bad += off_meta("gradient of the input", input.grad());
  return bad;
}

class MetaDevice : public testing::TestWithParam<Case> {};

TEST_P(MetaDevice, EveryStageRunsForwardAndBackwardOnMeta) {
  const Case& c = GetParam();
  const Config cfg = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + c.family + "-tiny.toml");
  const std::unique_ptr<Model> model = make_model(cfg);
  for (int tp_rank = 0; tp_rank < c.tp.size; ++tp_rank) {
    Group group;
    group.name = "tp";
    for (int r = 0; r < c.tp.size; ++r) group.members.push_back(r);
    group.rank = tp_rank;
    group.device = kMeta;
    if (c.tp.size > 1) group.pg = c10::make_intrusive<ShapeOnlyBackend>(tp_rank, c.tp.size);
    const TpContext tp{&group, c.tp.sequence_parallel};
    for (int stages : {1, 4})  // the whole model; first, middle and last stages of four
      for (int index = 0; index < stages; ++index)
        for (Recompute recompute : {Recompute::kNone, Recompute::kFull, Recompute::kSelective})
          for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
            std::unique_ptr<Stage> stage = model->make_stage(index, stages, tp, /*seed=*/1);
            stage->set_recompute(recompute);
            stage->set_compute_dtype(dtype);
            const std::string bad = run_on_meta(*stage, cfg.model.seq_len, index == 0, index == stages - 1);
            EXPECT_EQ(bad, "") << c.family << " stage " << index << " of " << stages << ", " << c.tp.name()
                               << " rank " << tp_rank << ", recompute " << recompute_name(recompute) << ", "
                               << at::toString(dtype) << ": not everything is on meta";
          }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MetaDevice,
                         testing::Values(Case{"gpt", {1, false}}, Case{"gpt", {1, true}}, Case{"gpt", {2, false}},
                                         Case{"gpt", {2, true}}, Case{"llama", {1, false}}, Case{"llama", {1, true}},
                                         Case{"llama", {2, false}}, Case{"llama", {2, true}}),
                         case_name);

// The check is not vacuous: a middle stage that multiplies by a table it
// keeps on the CPU fails naming the operator and the table's shape, unless it
// lists the table as a buffer (then the table moves with the stage).
class TableStage : public Stage {
 public:
  explicit TableStage(bool listed) : listed_(listed) {
    ParamInfo info;
    info.name = "scale";
    info.full_shape = {8};
    params_.push_back({at::ones({8}).requires_grad_(true), info});
  }
  at::Tensor forward(const at::Tensor& input, const at::Tensor&) override {
    return input * params_[0].tensor * table_;  // (mbs, 4, 8)
  }
  std::vector<int64_t> input_shape(int64_t mbs) const override { return {mbs, 4, 8}; }
  std::vector<int64_t> output_shape(int64_t mbs) const override { return {mbs, 4, 8}; }
  std::vector<Param>& params() override { return params_; }
  std::vector<Buffer> buffers() override {
    if (!listed_) return {};
    return {{"table", &table_}};
  }

 private:
  bool listed_;
  std::vector<Param> params_;
  at::Tensor table_ = at::ones({4, 8});
};

TEST(MetaDeviceCheck, AStageKeepingATableOnTheCpuFailsNamingIt) {
  TableStage unlisted(false);
  const std::string bad = run_on_meta(unlisted, 4, false, false);
  EXPECT_NE(bad.find("forward threw: Expected all tensors to be on the same device"), std::string::npos) << bad;
  EXPECT_NE(bad.find("aten::mul(meta [2, 4, 8] Float, cpu [4, 8] Float)"), std::string::npos) << bad;
  TableStage listed(true);
  EXPECT_EQ(run_on_meta(listed, 4, false, false), "");
}

// NOTE [meta fallback]'s kernel gives the CPU's shapes on meta and refuses a
// CPU tensor among meta ones, as ATen's own meta kernels do.
TEST(MetaDeviceCheck, FallbackKernelKeepsShapesAndRefusesCpuTensors) {
  const at::Tensor table = at::zeros({5, 3}, at::TensorOptions(kMeta));
  const at::Tensor picked = at::index_select(table, 0, at::zeros({2}, at::TensorOptions(at::kLong).device(kMeta)));
  EXPECT_TRUE(picked.is_meta());
  EXPECT_EQ(picked.sizes(), (std::vector<int64_t>{2, 3}));
  try {
    at::index_select(table, 0, at::zeros({2}, at::kLong));
    ADD_FAILURE() << "index_select took a CPU index for a meta table";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("argument 'index' is on cpu"), std::string::npos)
        << e.what_without_backtrace();
  }
}

}  // namespace
}  // namespace trident
