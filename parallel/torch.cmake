# libtorch parts of parallel/: process groups, tensor-parallel mappings and layers, p2p,
# and backend.cpp, the one translation unit with CUDA code (parallel/backend.h).
file(GLOB TRIDENT_PARALLEL_TORCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
list(FILTER TRIDENT_PARALLEL_TORCH_SOURCES EXCLUDE REGEX "(layout|device|data_parallel)\\.cpp$")
add_library(trident_parallel STATIC ${TRIDENT_PARALLEL_TORCH_SOURCES})
target_compile_options(trident_parallel PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_parallel PUBLIC trident_layout ${TORCH_LIBRARIES})

# Two builds. A libtorch built with CUDA (e.g. the one in a PyTorch install,
# given by -DCMAKE_PREFIX_PATH) lists c10_cuda and the CUDA runtime in
# TORCH_CUDA_LIBRARIES (TorchConfig.cmake); Debian's CPU-only libtorch leaves it
# empty. Debian's headers ship ProcessGroupNCCL.hpp all the same, so NCCL is
# taken only from a CUDA libtorch.
set(TRIDENT_HAVE_CUDA OFF)
set(TRIDENT_HAVE_NCCL OFF)
if(TORCH_CUDA_LIBRARIES)
  set(TRIDENT_HAVE_CUDA ON)
  # USE_DISTRIBUTED and USE_C10D_* open the c10d backend headers (libtorch's own
  # targets may set them too; Debian's do).
  target_compile_definitions(trident_parallel PUBLIC TRIDENT_HAVE_CUDA USE_DISTRIBUTED USE_C10D_GLOO)
  if(TRIDENT_VENDOR_DIR AND EXISTS ${TRIDENT_VENDOR_DIR}/gloo-fallback/gloo/algorithm.h)
    # Searched after every other include path: used only if libtorch lacks Gloo's headers.
    target_compile_options(trident_parallel PUBLIC -idirafter ${TRIDENT_VENDOR_DIR}/gloo-fallback)
  endif()
  find_package(CUDAToolkit QUIET)  # backend.cpp reads the runtime's version and device names
  if(TARGET CUDA::cudart)
    target_link_libraries(trident_parallel PUBLIC CUDA::cudart)
  endif()
  foreach(dir ${TORCH_INCLUDE_DIRS})
    if(EXISTS ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
      set(TRIDENT_HAVE_NCCL ON)
    endif()
  endforeach()
  if(TRIDENT_HAVE_NCCL)
    target_compile_definitions(trident_parallel PUBLIC TRIDENT_HAVE_NCCL USE_C10D_NCCL)
  endif()
endif()
if(TRIDENT_REQUIRE_CUDA AND NOT TRIDENT_HAVE_CUDA)
  message(FATAL_ERROR "TRIDENT_REQUIRE_CUDA is on but the libtorch found (Torch_DIR=${Torch_DIR}) has no CUDA: "
                      "pass -DCMAKE_PREFIX_PATH=<a CUDA-enabled libtorch>, e.g. "
                      "$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')")
endif()
message(STATUS "Trident: libtorch ${Torch_VERSION} from ${Torch_DIR}; CUDA ${TRIDENT_HAVE_CUDA}, NCCL ${TRIDENT_HAVE_NCCL}; "
               "TORCH_CXX_FLAGS '${TORCH_CXX_FLAGS}'")
