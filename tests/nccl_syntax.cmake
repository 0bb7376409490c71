# CUDA/NCCL syntax check: the CPU build never compiles the TRIDENT_HAVE_CUDA /
# TRIDENT_HAVE_NCCL branches (parallel/backend.cpp: device count and
# selection, synchronization, ProcessGroupNCCL with its stream options), so CI
# parses them with `c++ -fsyntax-only` against Debian's c10/c10d headers (which
# ship c10/cuda and ProcessGroupNCCL.hpp) and the CUDA toolkit's headers, with
# the CUDA build's macros defined, so they cannot rot unseen. The files that
# call into backend.h are parsed the same way, so a CUDA build's macros break
# none of them. Debian's headers lack c10/cuda/impl/cuda_cmake_macros.h, which a
# CUDA build of PyTorch generates; a one-line stand-in in the build tree
# supplies it. These are libtorch 1.13 headers: the libtorch 2.x side of
# backend.h is compiled only by a CUDA build (benchmarks/gpu/run.sh).
set(TRIDENT_NCCL_HEADER "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
    set(TRIDENT_NCCL_HEADER ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
  endif()
endforeach()
set(TRIDENT_CUDA_INCLUDE /usr/local/cuda/include CACHE PATH "CUDA toolkit headers for the NCCL syntax check")
set(TRIDENT_C10_CUDA_HEADER "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS ${dir}/c10/cuda/CUDAFunctions.h)
    set(TRIDENT_C10_CUDA_HEADER ${dir}/c10/cuda/CUDAFunctions.h)
  endif()
endforeach()
if(TRIDENT_NCCL_HEADER AND TRIDENT_C10_CUDA_HEADER AND EXISTS ${TRIDENT_CUDA_INCLUDE}/nccl.h
   AND EXISTS ${TRIDENT_CUDA_INCLUDE}/cuda_runtime_api.h)
  set(stub ${PROJECT_BINARY_DIR}/nccl-syntax-include)
  file(WRITE ${stub}/c10/cuda/impl/cuda_cmake_macros.h "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
  set(incs -I${PROJECT_SOURCE_DIR})
  foreach(dir ${TORCH_INCLUDE_DIRS})
    if(NOT dir STREQUAL "/usr/include")  # -isystem /usr/include breaks libstdc++'s #include_next
      list(APPEND incs -isystem ${dir})
    endif()
  endforeach()
  # test name -> file; NcclBackendSyntax is the one with the CUDA branches.
  set(files NcclBackendSyntax parallel/backend.cpp
            NcclBackendSyntax.process_groups parallel/process_groups.cpp
            NcclBackendSyntax.executor schedules/executor.cpp
            NcclBackendSyntax.data_parallel parallel/data_parallel.cpp
            NcclBackendSyntax.trainer framework/trainer.cpp)
  list(LENGTH files n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET files ${i} name)
    list(GET files ${j} file)
    add_test(NAME ${name}
             COMMAND ${CMAKE_CXX_COMPILER} -fsyntax-only -std=gnu++17 -D_GLIBCXX_USE_CXX11_ABI=1
                     -DUSE_DISTRIBUTED -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DTRIDENT_HAVE_CUDA -DTRIDENT_HAVE_NCCL
                     ${incs} -isystem ${stub} -isystem ${TRIDENT_CUDA_INCLUDE} ${PROJECT_SOURCE_DIR}/${file})
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 600)
  endforeach()
else()
  message(STATUS "NcclBackendSyntax tests not added: need ProcessGroupNCCL.hpp and c10/cuda in the torch headers "
                 "and nccl.h + cuda_runtime_api.h in ${TRIDENT_CUDA_INCLUDE}")
endif()
