// The [training] section: its keys, and the rules across them (the batch,
// the device and its backend, precision, tracing).
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"

#include <string>
#include <vector>

#include "core/json.h"

namespace trident {

namespace config_rules {

std::vector<Field> training_fields() {
  return {
      TRIDENT_FIELD(training, steps, at_least(1), "optimizer steps"),
      TRIDENT_FIELD(training, micro_batch_size, at_least(1), "samples per micro-batch"),
      TRIDENT_FIELD(training, global_batch_size, at_least(1), "samples per step over all DP ranks"),
      TRIDENT_FIELD(training, seed, at_least(0), "seeds the initial weights and the data order"),
      TRIDENT_FIELD(training, lr, positive(), "peak learning rate"),
      TRIDENT_FIELD(training, min_lr, at_least(0), "floor of the cosine decay"),
      TRIDENT_FIELD(training, warmup_steps, at_least(0), "linear warm-up steps"),
      TRIDENT_FIELD(training, weight_decay, at_least(0), "AdamW decay (not on biases and norms)"),
      TRIDENT_FIELD(training, beta1, unit_open(), "AdamW beta1"),
      TRIDENT_FIELD(training, beta2, unit_open(), "AdamW beta2"),
      TRIDENT_FIELD(training, eps, positive(), "AdamW epsilon"),
      TRIDENT_FIELD(training, grad_clip, at_least(0), "clip by global gradient norm; 0 disables"),
      TRIDENT_FIELD(training, eval_interval, at_least(0), "evaluate every N steps; 0 disables"),
      TRIDENT_FIELD(training, eval_batches, at_least(1), "validation global batches per evaluation"),
      TRIDENT_FIELD(training, threads, between(1, 1024),
                    "intra-op threads per rank (at most the host's cores: checked when training starts)"),
      TRIDENT_FIELD(training, peak_tflops, at_least(0),
                    "device peak for MFU; 0 = measure a matmul at start-up (cuda: in the compute dtype)"),
      TRIDENT_FIELD(training, device, one_of({"cpu", "cuda"}), "device every rank computes on; cuda = CUDA device LOCAL_RANK (a CUDA build)"),
      TRIDENT_FIELD(training, exit_after_steps, at_least(0),
                    "stop cleanly after this step with a checkpoint (the LR schedule still follows steps); 0 = off"),
      TRIDENT_FIELD(training, precision, one_of({"fp32", "bf16"}),
                    "bf16: bf16 weights and compute, fp32 master weights and gradients"),
      TRIDENT_FIELD(training, recompute, one_of({"none", "full", "selective"}),
                    "activation recomputation: every block, or the attention core and the MLP up projection + GELU"),
  };
}

void check_training(const Config& c) {
  const TrainingConfig& t = c.training;
  const ParallelConfig& p = c.parallel;
  if (t.global_batch_size % t.micro_batch_size != 0) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) +
                ") must be divisible by training.micro_batch_size (" + n(t.micro_batch_size) + ")");
  }
  if (p.dp >= 1) check_batch_split(c, p.dp);
  if (t.min_lr > t.lr)
    fail(c, "training.min_lr (" + format_double(t.min_lr) + ") must be <= training.lr (" + format_double(t.lr) + ")");
  if (p.backend == "nccl" && t.device != "cuda")
    fail(c, "parallel.backend = \"nccl\" needs training.device = \"cuda\" (NCCL moves device memory only), got " +
                quote(t.device));
  if (p.backend == "nccl-rules" && t.device != "cpu")
    fail(c, "parallel.backend = \"nccl-rules\" is a CPU test backend (Gloo with NCCL's point-to-point rules) and needs "
            "training.device = \"cpu\", got " + quote(t.device));
  if (p.backend == "gloo" && t.device == "cuda")
    fail(c, "parallel.backend = \"gloo\" with training.device = \"cuda\" is not supported: Gloo's send/recv read "
            "host memory, so the pipeline's device buffers cannot travel over it (use \"nccl\" or \"auto\")");
  if (c.logging.trace && c.logging.trace_step > t.steps) {
    fail(c, "logging.trace_step = " + n(c.logging.trace_step) + " but training.steps = " + n(t.steps) +
                ": expected logging.trace_step <= training.steps when logging.trace = true (no step would be traced)");
  }
}

}  // namespace config_rules

}  // namespace trident
