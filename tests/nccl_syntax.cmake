# NCCL backend syntax check: the CPU build never compiles the TRIDENT_HAVE_NCCL
# branch of parallel/process_groups.cpp (the one that creates
# ProcessGroupNCCL), so CI parses it with `c++ -fsyntax-only` against Debian's
# c10d headers (which ship ProcessGroupNCCL.hpp) and the CUDA toolkit's
# headers, so it cannot rot unseen. Debian's headers lack
# c10/cuda/impl/cuda_cmake_macros.h, which a CUDA build of PyTorch generates;
# a one-line stand-in in the build tree supplies it.
set(TRIDENT_NCCL_HEADER "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
    set(TRIDENT_NCCL_HEADER ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
  endif()
endforeach()
set(TRIDENT_CUDA_INCLUDE /usr/local/cuda/include CACHE PATH "CUDA toolkit headers for the NCCL syntax check")
if(TRIDENT_NCCL_HEADER AND EXISTS ${TRIDENT_CUDA_INCLUDE}/nccl.h AND EXISTS ${TRIDENT_CUDA_INCLUDE}/cuda_runtime_api.h)
  set(stub ${PROJECT_BINARY_DIR}/nccl-syntax-include)
  file(WRITE ${stub}/c10/cuda/impl/cuda_cmake_macros.h "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
  set(incs -I${PROJECT_SOURCE_DIR})
  foreach(dir ${TORCH_INCLUDE_DIRS})
    if(NOT dir STREQUAL "/usr/include")  # -isystem /usr/include breaks libstdc++'s #include_next
      list(APPEND incs -isystem ${dir})
    endif()
  endforeach()
  add_test(NAME NcclBackendSyntax
           COMMAND ${CMAKE_CXX_COMPILER} -fsyntax-only -std=gnu++17 -D_GLIBCXX_USE_CXX11_ABI=1
                   -DUSE_DISTRIBUTED -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DTRIDENT_HAVE_NCCL ${incs}
                   -isystem ${stub} -isystem ${TRIDENT_CUDA_INCLUDE}
                   ${PROJECT_SOURCE_DIR}/parallel/process_groups.cpp)
  set_tests_properties(NcclBackendSyntax PROPERTIES LABELS unit TIMEOUT 600)
else()
  message(STATUS "NcclBackendSyntax test not added: needs ProcessGroupNCCL.hpp in the torch headers and "
                 "nccl.h + cuda_runtime_api.h in ${TRIDENT_CUDA_INCLUDE}")
endif()
