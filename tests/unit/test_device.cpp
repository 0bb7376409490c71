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
  for (int count : {0, 4}) {
    const DeviceChoice d = choose_device("cpu", count, 3);
    EXPECT_FALSE(d.cuda);
    EXPECT_EQ(d.index, -1);
    EXPECT_EQ(d.str(), "cpu");
  }
}

TEST(Device, LocalRankPicksTheDevice) {
  for (int lr = 0; lr < 8; ++lr) {
    const DeviceChoice d = choose_device("cuda", 8, lr);
    EXPECT_TRUE(d.cuda);
    EXPECT_EQ(d.index, lr);
    EXPECT_EQ(d.str(), "cuda:" + std::to_string(lr));
  }
  EXPECT_EQ(choose_device("cuda", 1, 0).index, 0);
}

TEST(Device, TooFewDevices) {
  const std::string e = error_of([] { choose_device("cuda", 2, 2); });
  EXPECT_NE(e.find("LOCAL_RANK = 2 needs CUDA device 2 but this process sees only 2"), std::string::npos) << e;
  const std::string none = error_of([] { choose_device("cuda", 0, 0); });
  EXPECT_NE(none.find("training.device = \"cuda\" but this process sees 0 CUDA devices"), std::string::npos) << none;
  const std::string neg = error_of([] { choose_device("cuda", 4, -1); });
  EXPECT_NE(neg.find("LOCAL_RANK = -1"), std::string::npos) << neg;
}

// Names and pairs are check_config's rules (test_config); here they are invariants.
TEST(Device, UnknownDeviceIsAnInternalError) { EXPECT_THROW(choose_device("tpu", 1, 0), std::logic_error); }

TEST(Backend, AutoFollowsTheDevice) {
  EXPECT_EQ(resolve_backend("auto", "cpu"), "gloo");
  EXPECT_EQ(resolve_backend("auto", "cuda"), "nccl");
  EXPECT_EQ(resolve_backend("gloo", "cpu"), "gloo");
  EXPECT_EQ(resolve_backend("nccl", "cuda"), "nccl");
}

TEST(Backend, MismatchesAreInternalErrors) {
  EXPECT_THROW(resolve_backend("nccl", "cpu"), std::logic_error);
  EXPECT_THROW(resolve_backend("gloo", "cuda"), std::logic_error);
  EXPECT_THROW(resolve_backend("mpi", "cpu"), std::logic_error);
  EXPECT_THROW(resolve_backend("auto", "gpu"), std::logic_error);
}

}  // namespace
}  // namespace trident
