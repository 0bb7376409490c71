// NOTE [CUDA on demand] (parallel/cuda_runtime.h): libtorch's CUDA libraries are in the
// process exactly where libtrident_cuda.so was loaded, before main where an NVIDIA driver is
// present, and loading it registers libtorch_cuda's kernels as linking did.
#include <dlfcn.h>
#include <link.h>

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>

#include "parallel/backend.h"
#include "parallel/cuda_runtime.h"

namespace trident {
namespace {

bool mapped(const std::string& name) {
  struct Seek {
    std::string name;
    bool found = false;
  } seek{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Seek*>(data);
        if (info->dlpi_name && std::string(info->dlpi_name).find(s->name) != std::string::npos) s->found = true;
        return 0;
      },
      &seek);
  return seek.found;
}

bool cuda_kernel_registered() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor").hasKernelForDispatchKey(
      c10::DispatchKey::CUDA);
}

TEST(CudaRuntime, LoadedBeforeMainWhereADriverIsAndByForceElsewhere) {
  // Decided before main, before anything could ask libtorch for its CUDA hooks.
  EXPECT_TRUE(cuda_runtime_decided_before_main());
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  const bool has_driver = driver != nullptr;
  if (driver) dlclose(driver);
  const std::regex loaded_line(R"(^libtorch [0-9.]+, CUDA [0-9]+\.[0-9]+ build \(runtime [0-9]+\.[0-9]+\), NCCL [0-9]+\.[0-9]+\.[0-9]+, [0-9]+ CUDA device\(s\).*)");
  if (has_driver) {
    EXPECT_NE(load_cuda_runtime(), nullptr);
    EXPECT_TRUE(mapped("libtorch_cuda.so"));
    EXPECT_TRUE(cuda_kernel_registered());
    EXPECT_TRUE(std::regex_match(describe_build(), loaded_line)) << describe_build();
    return;  // loaded before main: what follows is the driverless machine's
  }
  // No driver: nothing of CUDA in the process, no device, and the start-up line says why.
  EXPECT_EQ(load_cuda_runtime(), nullptr);
  EXPECT_FALSE(mapped("libtorch_cuda.so"));
  EXPECT_FALSE(mapped("libnccl.so"));
  EXPECT_FALSE(cuda_kernel_registered());
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_NE(cuda_runtime_absent_reason().find("no NVIDIA driver"), std::string::npos);
  EXPECT_TRUE(std::regex_match(describe_build(),
                               std::regex(R"(^libtorch [0-9.]+, CUDA [0-9]+\.[0-9]+ build \(not loaded: no NVIDIA driver\), 0 CUDA device\(s\)$)")))
      << describe_build();
  EXPECT_THROW(set_cuda_device(0), std::runtime_error);

  // Forced: the library loads without a driver, and with it libtorch_cuda's registrations.
  CudaRuntime* r = load_cuda_runtime(/*force=*/true);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(load_cuda_runtime(), r);
  EXPECT_TRUE(mapped("libtorch_cuda.so"));
  EXPECT_TRUE(mapped("libnccl.so"));
  EXPECT_TRUE(cuda_kernel_registered());
  EXPECT_EQ(r->device_count(), 0);
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_EQ(cuda_runtime_absent_reason(), "");
  EXPECT_TRUE(std::regex_match(describe_build(), loaded_line)) << describe_build();
  EXPECT_NE(r->make_clock(), nullptr);
}

}  // namespace
}  // namespace trident
