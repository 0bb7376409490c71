// What travels beside the hidden state between pipeline stages for a stage's
// backward: NOTE [pipeline side values] in models/common/model.h.
#pragma once

#include <ATen/ATen.h>

namespace trident {

// One micro-batch's side values at one chunk. `values` is made once, before the
// forward, and then only written in place (the layers' backward functions keep
// the tensor): the layers add their part during the forward, the executor
// copies the received totals in before the backward and seals it.
struct SideValues {
  at::Tensor values;  // (n) fp32 on the stage's device
  bool sealed = false;
};

}  // namespace trident
