// Device and backend choice (parallel/device.h): one CUDA device per local
// rank, backend "auto", and the errors for what a build or a node lacks.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "parallel/device.h"
#include "tests/error_of.h"

namespace trident {
namespace {

// The message of the std::runtime_error a call throws.
template <typename F>
std::string error_of(F f) {
  return testing::error_of<std::runtime_error>(f);
}

TEST(Device, CpuIgnoresCudaFacts) {
  for (bool built : {false, true})
    for (int count : {0, 4}) {
      const DeviceChoice d = choose_device("cpu", built, count, 3);
      EXPECT_FALSE(d.cuda);
      EXPECT_EQ(d.index, -1);
      EXPECT_EQ(d.str(), "cpu");
    }
}

TEST(Device, LocalRankPicksTheDevice) {
  for (int lr = 0; lr < 8; ++lr) {
    const DeviceChoice d = choose_device("cuda", true, 8, lr);
    EXPECT_TRUE(d.cuda);
    EXPECT_EQ(d.index, lr);
    EXPECT_EQ(d.str(), "cuda:" + std::to_string(lr));
  }
  EXPECT_EQ(choose_device("cuda", true, 1, 0).index, 0);
}

TEST(Device, CudaInACpuBuildSaysSo) {
  const std::string e = error_of([] { choose_device("cuda", false, 8, 0); });
  EXPECT_NE(e.find("this build of Trident has no CUDA"), std::string::npos) << e;
  EXPECT_NE(e.find("CPU-only libtorch"), std::string::npos) << e;
  EXPECT_NE(e.find("-DCMAKE_PREFIX_PATH"), std::string::npos) << e;
}

TEST(Device, TooFewDevices) {
  const std::string e = error_of([] { choose_device("cuda", true, 2, 2); });
  EXPECT_NE(e.find("LOCAL_RANK = 2 needs CUDA device 2 but this process sees only 2"), std::string::npos) << e;
  const std::string none = error_of([] { choose_device("cuda", true, 0, 0); });
  EXPECT_NE(none.find("sees no CUDA device"), std::string::npos) << none;
  const std::string neg = error_of([] { choose_device("cuda", true, 4, -1); });
  EXPECT_NE(neg.find("LOCAL_RANK = -1"), std::string::npos) << neg;
}

TEST(Device, UnknownDevice) {
  const std::string e = error_of([] { choose_device("tpu", true, 1, 0); });
  EXPECT_NE(e.find("training.device = \"tpu\""), std::string::npos) << e;
}

TEST(Backend, AutoFollowsTheDevice) {
  EXPECT_EQ(resolve_backend("auto", "cpu", false), "gloo");
  EXPECT_EQ(resolve_backend("auto", "cpu", true), "gloo");
  EXPECT_EQ(resolve_backend("auto", "cuda", true), "nccl");
  EXPECT_EQ(resolve_backend("gloo", "cpu", true), "gloo");
  EXPECT_EQ(resolve_backend("nccl", "cuda", true), "nccl");
}

TEST(Backend, MismatchesAreErrors) {
  EXPECT_NE(error_of([] { resolve_backend("nccl", "cpu", true); }).find("needs training.device = \"cuda\""),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_backend("gloo", "cuda", true); }).find("Gloo's send/recv read host memory"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_backend("auto", "cuda", false); }).find("has no NCCL"), std::string::npos);
  EXPECT_NE(error_of([] { resolve_backend("mpi", "cpu", true); }).find("parallel.backend = \"mpi\""),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_backend("auto", "gpu", true); }).find("training.device = \"gpu\""),
            std::string::npos);
}

}  // namespace
}  // namespace trident
