// The model interface: what the executor and the trainer know of a model. A
// pipeline Stage (one virtual stage's forward, boundary shapes and parameters)
// and a Model that builds the stages of any layout and describes the whole
// (parameters in a canonical order, tied groups, FLOPs per token). GPT is one
// implementation (models/gpt); the executor's tests run a fake one made of
// linear layers. Layer: above parallel/, below models/ (ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/param.h"  // Param, ParamInfo, TiedGroup
#include "models/common/document_attention.h"
#include "models/common/loss_mask.h"
#include "models/common/side_values.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/recompute.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// A tensor a stage computes with that is not a parameter: no gradient, no
// optimizer state, not in checkpoints (Llama's rotary tables). `name` is for
// messages ("rope.cos"); `tensor` points into the stage.
struct Buffer {
  std::string name;
  at::Tensor* tensor;
};

// NOTE [pipeline side values]
// What a stage's backward needs from every stage's forward of the same
// micro-batch: the pooled balancing loss's expert counts (NOTE [pooled aux
// loss] in models/common/moe_losses.h), read in any layer's backward. A stage
// with side_width() = n > 0 (the same n on every stage) sends n fp32 values
// (SideValues, models/common/side_values.h) beside each activation and
// gradient, a second tensor of the same group of sends, right after the hidden
// state. The executor makes one per micro-batch and chunk holding what the
// previous stage sent (zeros on the first) and hands it to set_side() before
// the training forward, whose layers add their part and keep the pointer for
// their backward. The last stage's values are the micro-batch's totals: sealed
// there, sent back with the gradient and put, sealed, into each stage's
// SideValues before its backward. A sealed SideValues is not added to (the
// re-forward of full recomputation runs inside the backward).

// The columns of a row of Stage::take_moe_stats() after its experts' counts, at experts + each.
enum MoeStatColumn : int64_t { kMoeAux = 0, kMoeZ, kMoeMicroBatches, kMoeAssignments, kMoeBiasRange, kMoeStatExtra };

class Stage {
 public:
  virtual ~Stage() = default;
  // First virtual stage: `input` holds token ids (mbs, seq) int64; every other
  // stage gets the previous stage's output. The last stage returns the
  // micro-batch's mean loss (a scalar) given `targets`; the others return the
  // tensor sent to the next stage.
  virtual at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) = 0;
  // Shape of the tensor this stage receives from the previous one (not asked
  // of the first stage) and of the one it sends on (not asked of the last).
  virtual std::vector<int64_t> input_shape(int64_t micro_batch_size) const = 0;
  virtual std::vector<int64_t> output_shape(int64_t micro_batch_size) const = 0;
  // Parameters with their metadata (global name, TP shard, tied copy, ...).
  // The trainer may replace a Param's tensor by a view of the same values
  // (data-parallel buckets); the stage must read params() at every forward.
  virtual std::vector<Param>& params() = 0;
  // Buffers (see Buffer) live where the stage computes: the trainer moves
  // them to training.device once, as it moves the parameters into the
  // device's buckets, so no forward copies a table from the host.
  virtual std::vector<Buffer> buffers() { return {}; }
  void move_buffers(const c10::Device& device) {
    for (const Buffer& b : buffers()) *b.tensor = b.tensor->to(device);
  }
  // Activation recomputation (NOTE [recomputation]); a stage that cannot
  // recompute says so rather than silently keeping its activations.
  virtual void set_recompute(Recompute mode) {
    if (mode != Recompute::kNone) throw std::invalid_argument("this model does not support activation recomputation");
  }
  // Training (the default) or evaluation: evaluation and generation apply no
  // dropout. A stage without dropout or other train-only behaviour has nothing
  // to switch.
  virtual void set_training(bool training) { (void)training; }
  // Mixed precision (NOTE [bf16] in models/gpt/gpt.h): the dtype of the
  // matmuls (set_compute_dtype, below); parameters and gradients stay fp32.
  // The dtype of the tensors this stage receives and sends (its hidden-state
  // input and output, and their gradients backward): parallel.pipeline_dtype
  // (NOTE [pipeline dtype] in runtime/executor.h). A stage returns its
  // output in it; fp32 unless set.
  virtual void set_boundary_dtype(at::ScalarType dtype) {
    if (dtype != at::kFloat) throw std::invalid_argument("this model sends fp32 between pipeline stages only");
  }
  virtual at::ScalarType boundary_dtype() const { return at::kFloat; }
  // A stage holding the whole model on one rank (embedding and head, tp = 1):
  // next-token logits (batch, seq, vocab_size) of token ids (batch, seq),
  // vocabulary padding dropped. For eval, generate and interop checks;
  // training uses forward().
  virtual at::Tensor logits(const at::Tensor& ids) const {
    (void)ids;
    throw std::logic_error("this stage does not compute logits");
  }
  // What the last stage's loss is scaled by in the backward (1 / micro-batches):
  // the scale of the balancing losses an MoE layer adds to its own backward
  // (NOTE [aux loss in the backward] in models/common/moe_losses.h). A model without
  // such losses has nothing to scale.
  virtual void set_loss_scale(double scale) { (void)scale; }
  // NOTE [pipeline side values]: 0 (the default) sends none. set_side(nullptr)
  // before a forward that is not training (evaluation).
  virtual int64_t side_width() const { return 0; }
  // NOTE [packed documents] in models/common/document_attention.h: the
  // documents of the micro-batch the next forward computes (every stage's, not
  // only the first's: positions and attention are every layer's), or nullptr
  // for an undivided sample. A stage that cannot keep attention inside
  // documents says so.
  virtual void set_documents(std::shared_ptr<const Documents> docs) {
    if (docs) throw std::invalid_argument("this model does not train on packed documents");
  }
  // NOTE [token-weighted loss] in models/common/loss_mask.h: the mask the last stage's next
  // forward weighs its per-token losses with, or nullptr (the micro-batch's mean). A stage
  // whose loss cannot take one says so.
  virtual void set_loss_mask(std::shared_ptr<const LossMask> mask) {
    if (mask) throw std::invalid_argument("this model does not train with loss masks");
  }
  virtual void set_side(std::shared_ptr<SideValues> side) { (void)side; }
  // A mixture of experts' statistics since the last call, (model.layers,
  // experts + kMoeStatExtra) fp64 on the stage's device, and resets them;
  // undefined when the stage has no MoE layer or ran no training forward
  // (NOTE [MoE stats] in models/common/moe_layer.cpp; the columns after the
  // experts' counts are MoeStatColumn's).
  virtual at::Tensor take_moe_stats() { return at::Tensor(); }
  // NOTE [expert bias]: `loads` (layers, experts) fp64 on the stage's
  // device, the tokens each expert received in the step over the whole world;
  // each correction bias this stage holds moves by `rate` toward balance.
  virtual void update_expert_bias(const at::Tensor& loads, double rate) { (void)loads, (void)rate; }
  virtual void set_compute_dtype(at::ScalarType dtype) {
    if (dtype != at::kFloat) throw std::invalid_argument("this model does not support mixed precision");
  }
  // `gate(i)` is called before every read of params()[i]'s values (forward,
  // recomputation, logits): data parallelism finishes that parameter's
  // overlapped gather there (NOTE [overlapped parameter gather] in
  // parallel/zero_optimizer.h). A stage that cannot report its reads says so.
  virtual void set_read_gate(std::function<void(size_t)> gate) {
    (void)gate;
    throw std::logic_error("this model does not report its parameter reads (set parallel.overlap_param_gather = false)");
  }
};

// Forward + backward seconds of one micro-batch: each layer's, and the extra
// of the first stage (embedding) and of the last (head and loss). Input of
// the balanced split (parallel.pipeline_layers = "auto").
struct LayerCosts {
  std::vector<double> layers;
  double embedding = 0, head = 0;
};

// The whole model, as the trainer sees it.
class Model {
 public:
  virtual ~Model() = default;
  // Virtual stage `stage` of `num_stages` for this rank's TP slice, its
  // share of the experts (ep) and of each sequence (cp: NOTE [context split]
  // in core/context_split.h; the stage's boundary shapes hold seq_len / cp
  // tokens, the first stage takes (mbs, seq_len / cp) token ids).
  virtual std::unique_ptr<Stage> make_stage(int stage, int num_stages, const TpContext& tp, int64_t seed,
                                            const EpContext& ep = EpContext{},
                                            const CpContext& cp = CpContext{}) const = 0;
  // Every parameter of the full model once, in a canonical order (the grad
  // norm adds per-parameter squares in this order on every layout). Tied
  // copies are left out: ParamInfo::tied_copy marks a second copy of the
  // parameter of the same name, whose gradient is added to the first's.
  virtual std::vector<ParamInfo> unique_params(int num_stages) const = 0;
  virtual std::vector<TiedGroup> tied_groups(int num_stages) const = 0;
  // Times each layer, the embedding and the head on this process (tp = 1).
  virtual LayerCosts profile(int64_t micro_batch_size, int reps) const = 0;
  // Model FLOPs of forward + backward per token (for MFU).
  virtual double flops_per_token() const = 0;
};

}  // namespace trident
