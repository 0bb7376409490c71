// Expert parallelism's dispatch and combine: see expert_parallel.h.
#include "parallel/expert_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "core/host_read.h"

namespace trident {

namespace {

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const Group* g,
                            const Group* back, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits,
                            std::string what) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(back);  // the backward's (NOTE [two expert groups])
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    ctx->saved_data["what"] = what;
    return exchange(*g, x, out_splits, in_splits, what.empty() ? what : "forward " + what);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group* g = reinterpret_cast<const Group*>(ctx->saved_data["group"].toInt());
    // The way back: what came from rank i returns to it.
    const std::string what = ctx->saved_data["what"].toStringRef();
    return {exchange(*g, grads[0], ctx->saved_data["in"].toIntVector(), ctx->saved_data["out"].toIntVector(),
                     what.empty() ? what : "backward " + what),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
  static at::Tensor exchange(const Group& g, const at::Tensor& x, const std::vector<int64_t>& out_splits,
                             const std::vector<int64_t>& in_splits, const std::string& what) {
    int64_t rows = 0;
    for (int64_t n : out_splits) rows += n;
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = rows;
    at::Tensor in = x.contiguous();
    at::Tensor out = at::empty(shape, x.options());
    all_to_all(g, out, in, out_splits, in_splits, what);
    return out;
  }
};

}  // namespace

at::Tensor all_to_all_rows(const Group& g, const at::Tensor& x, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits, const Group* back, const std::string& what) {
  return AllToAllRows::apply(x, &g, back ? back : &g, out_splits, in_splits, what);
}

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
