// Expert parallelism's dispatch and combine: see expert_parallel.h.
#include "parallel/expert_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "core/host_read.h"
#include "parallel/all_to_all.h"

namespace trident {

namespace {
thread_local int t_micro_batch = -1;  // ExpertMicroBatch's
}  // namespace

ExpertMicroBatch::ExpertMicroBatch(int mb) : prev_(t_micro_batch) { t_micro_batch = mb; }
ExpertMicroBatch::~ExpertMicroBatch() { t_micro_batch = prev_; }

std::string expert_call_name(const EpContext& ep) {
  return "micro-batch " + std::to_string(t_micro_batch) + " layer " + std::to_string(ep.layer);
}

ExpertExchange plan_exchange(const EpContext& ep, const at::Tensor& counts) {
  const int64_t n = ep.size(), experts = counts.size(0);
  if (experts % n != 0)
    throw std::invalid_argument("plan_exchange: " + std::to_string(experts) + " experts do not split over ep = " +
                                std::to_string(n));
  const int64_t local = experts / n;
  at::NoGradGuard no_grad;
  // received[j][e]: source rank j's rows for local expert e (NOTE [expert dispatch]).
  at::Tensor received = at::empty({n, local}, counts.options());
  if (ep.group) {
    at::Tensor mine = counts.contiguous().view({n, local});  // row j: the counts for rank j's experts
    all_to_all(*ep.group, received, mine, std::vector<int64_t>(n, 1), std::vector<int64_t>(n, 1),
               "forward " + expert_call_name(ep) + " counts");
  } else {
    received.copy_(counts.view({1, local}));
  }
  // One host read for both splits: this rank's per-rank sums, then the received per-rank sums.
  const at::Tensor host =
      read_to_host(at::cat({counts.view({n, local}).sum(1), received.sum(1)}), "expert-parallel splits");
  const int64_t* h = host.data_ptr<int64_t>();
  ExpertExchange x;
  x.send_splits.assign(h, h + n);
  x.recv_splits.assign(h + n, h + 2 * n);
  int64_t rows = 0;
  for (int64_t r : x.recv_splits) rows += r;
  x.local_counts = received.sum(0);
  const at::Tensor ids = at::arange(local, counts.options()).repeat({n});
  const at::Tensor expert_of_row = at::repeat_interleave(ids, received.reshape({-1}), /*dim=*/0, /*output_size=*/rows);
  x.order = std::get<1>(expert_of_row.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  x.inverse = at::empty_like(x.order).scatter_(0, x.order, at::arange(rows, x.order.options()));
  return x;
}

at::Tensor dispatch_rows(const EpContext& ep, const at::Tensor& rows, const ExpertExchange& x) {
  const at::Tensor received = ep.group ? all_to_all_rows(*ep.group, rows, x.recv_splits, x.send_splits, &ep.backward(),
                                                            expert_call_name(ep) + " dispatch") : rows;
  return received.index_select(0, x.order);
}

at::Tensor combine_rows(const EpContext& ep, const at::Tensor& rows, const ExpertExchange& x) {
  const at::Tensor back = rows.index_select(0, x.inverse);
  return ep.group ? all_to_all_rows(*ep.group, back, x.send_splits, x.recv_splits, &ep.backward(),
                                         expert_call_name(ep) + " combine") : back;
}

}  // namespace trident
