// A parameter's compute-dtype copy, made once per weight update (NOTE [cast once per step]).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/param.h"

namespace trident {

// NOTE [cast once per step]
// Under bf16 every use of a weight was an autograd cast of its fp32 master,
// made again for each micro-batch and each recomputation: one cast kernel
// per weight per micro-batch. The cast is kept instead and reused while the
// master is unchanged: its version counter (bumped by every in-place write:
// the optimizer, ZeRO-1's all-gather into the flat buffer, the tied copies'
// refresh, a checkpoint load) is the key, so the first forward after the
// optimizer makes the step's copy. The cast's backward (ToCopyBackward) saves
// no tensor, so every micro-batch's backward, and the I/W split's autograd::grad
// (NOTE [queued dW]), run through the one node into the master's .grad
// exactly as through a fresh cast: the same values, in the same order. Without
// autograd (evaluation) the cast is made and not kept.
//
// Every read of a parameter by a model goes through get() or master(), so the
// cache is also where a stage reports its reads (Stage::set_read_gate).
class CastCache {
 public:
  // Called with the index before each read (NOTE [overlapped parameter gather]).
  void set_read_gate(std::function<void(size_t)> gate) { gate_ = std::move(gate); }
  // params[index] itself (the fp32 master), after the read gate.
  const at::Tensor& master(const std::vector<Param>& params, size_t index) const {
    if (gate_) gate_(index);
    return params[index].tensor;
  }
  // params[index] in `dtype`: the master itself, or its kept copy.
  at::Tensor get(const std::vector<Param>& params, size_t index, at::ScalarType dtype) const {
    const at::Tensor& t = master(params, index);
    if (t.scalar_type() == dtype) return t;
    if (!at::GradMode::is_enabled()) return t.to(dtype);
    if (entries_.size() < params.size()) entries_.resize(params.size());
    Entry& e = entries_[index];
    const int64_t version = static_cast<int64_t>(t._version());
    if (!e.cast.defined() || e.version != version || e.cast.scalar_type() != dtype) {
      e.cast = t.to(dtype);
      e.version = version;
    }
    return e.cast;
  }
  // Bytes the kept copies hold.
  int64_t bytes() const {
    int64_t n = 0;
    for (const Entry& e : entries_)
      if (e.cast.defined()) n += e.cast.numel() * e.cast.element_size();
    return n;
  }

 private:
  struct Entry {
    int64_t version = -1;
    at::Tensor cast;
  };
  mutable std::vector<Entry> entries_;
  std::function<void(size_t)> gate_;
};

}  // namespace trident
