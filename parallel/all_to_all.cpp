// all_to_all_single as an autograd operation: see all_to_all.h.
#include "parallel/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/autograd_group.h"

namespace trident {

namespace {

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const Group* g,
                            const Group* back, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits,
                            std::string what) {
    ctx->saved_data["group"] = pack_group(back);  // the backward's (NOTE [two expert groups])
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    ctx->saved_data["what"] = what;
    return exchange(*g, x, out_splits, in_splits, what.empty() ? what : "forward " + what);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group* g = &unpack_group(ctx->saved_data["group"]);
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

}  // namespace trident
