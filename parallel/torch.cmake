# libtorch parts of parallel/: process groups, tensor-parallel mappings and layers, p2p,
# and backend.cpp, which reaches CUDA and NCCL through libtrident_cuda.so (parallel/backend.h,
# NOTE [CUDA on demand] in parallel/cuda_runtime.h).
file(GLOB TRIDENT_PARALLEL_TORCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
list(FILTER TRIDENT_PARALLEL_TORCH_SOURCES EXCLUDE REGEX "(layout|device|cuda_runtime)\\.cpp$")
add_library(trident_parallel STATIC ${TRIDENT_PARALLEL_TORCH_SOURCES})
target_compile_options(trident_parallel PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_parallel PUBLIC trident_layout trident_foundation_torch trident_net
                                              ${TRIDENT_TORCH_LIBRARIES} ${CMAKE_DL_LIBS})

# One build, CUDA-enabled (NOTE [CUDA from wheels] in cmake/TorchFromPython.cmake): PyPI's
# libtorch lists c10_cuda and torch_cuda in TORCH_CUDA_LIBRARIES, and its headers ship
# ProcessGroupNCCL.hpp. A missing piece is a configure error, never a quieter build.
if(NOT TORCH_CUDA_LIBRARIES)
  message(FATAL_ERROR "the libtorch found (Torch_DIR=${Torch_DIR}) has no CUDA libraries: Trident builds on "
                      "PyPI's CUDA-enabled torch (requirements.txt, scripts/setup.sh)")
endif()
set(_nccl_header "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
    set(_nccl_header ${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp)
  endif()
endforeach()
if(NOT _nccl_header)
  message(FATAL_ERROR "the libtorch found (Torch_DIR=${Torch_DIR}) has no torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
endif()

# libtrident_cuda.so: everything CUDA and NCCL (NOTE [CUDA on demand]). It sits beside
# trident-torch in the build folder, and every program that links trident_parallel finds it
# there through its run path (dlopen searches the calling program's).
find_package(CUDAToolkit REQUIRED)  # cuda_runtime.cpp reads the runtime's version and device names
add_library(trident_cuda SHARED cuda_runtime.cpp)
target_compile_options(trident_cuda PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_cuda PRIVATE ${TORCH_LIBRARIES} CUDA::cudart ${TRIDENT_NCCL_LIBRARY})
target_include_directories(trident_cuda SYSTEM PRIVATE ${TRIDENT_NCCL_INCLUDE_DIR})
target_compile_definitions(trident_cuda PRIVATE USE_DISTRIBUTED USE_C10D_GLOO USE_C10D_NCCL)
set_target_properties(trident_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
add_dependencies(trident_parallel trident_cuda)
target_link_options(trident_parallel INTERFACE "LINKER:-rpath,${PROJECT_BINARY_DIR}")
# The describe_build() line where the library is not loaded names the build's CUDA version.
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _cuda_build_version "${CUDAToolkit_VERSION}")
target_compile_definitions(trident_parallel PRIVATE TRIDENT_CUDA_BUILD_VERSION="${_cuda_build_version}")

# NOTE [Gloo headers]
# libtorch 2.11 links Gloo statically into libtorch_cpu.so (gloo's 2025-12 sources) but the
# wheel ships none of Gloo's headers, which ProcessGroupGloo.hpp includes. No package
# registry this project reaches has that Gloo's headers; Debian's libgloo-dev (2022-05) is
# the one that has any. They differ from libtorch's Gloo (rendezvous::Store gained a base
# class and five virtual functions), so Trident uses them only to parse ProcessGroupGloo.hpp
# and never to lay out or run Gloo code of its own: it calls four functions libtorch
# exports (ProcessGroupGloo's constructor, Options' constructor, createDeviceForHostname
# and createDeviceForInterface), every ProcessGroupGloo member whose type comes from Gloo
# is a shared_ptr (its size does not depend on Gloo's headers), and everything after
# construction goes through c10d::Backend's virtual functions. tests/abi/gloo_abi.sh checks
# the object file: it defines no symbol of namespace gloo and references only gloo symbols
# that libtorch_cpu.so defines.
find_path(TRIDENT_GLOO_INCLUDE_DIR gloo/rendezvous/store.h HINTS ${TRIDENT_VENDOR_DIR}/gloo-headers)
if(NOT TRIDENT_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "Gloo's headers (gloo/rendezvous/store.h) not found: apt-get install libgloo-dev "
                      "(scripts/setup.sh does), or TRIDENT_VENDOR_DIR with gloo-headers/ (benchmarks/gpu/vendor.sh). "
                      "See NOTE [Gloo headers] in parallel/torch.cmake")
endif()
# -idirafter: after libtorch's own include paths, so a libtorch that ships Gloo's headers wins.
target_compile_options(trident_parallel PUBLIC -idirafter ${TRIDENT_GLOO_INCLUDE_DIR})

# USE_DISTRIBUTED and USE_C10D_* open the c10d backend headers.
target_compile_definitions(trident_parallel PUBLIC USE_DISTRIBUTED USE_C10D_GLOO USE_C10D_NCCL)
message(STATUS "Trident: libtorch ${Torch_VERSION} from ${Torch_DIR}; CUDA ${CUDAToolkit_VERSION}, "
               "NCCL ${TRIDENT_NCCL_LIBRARY}; Gloo headers ${TRIDENT_GLOO_INCLUDE_DIR}; TORCH_CXX_FLAGS '${TORCH_CXX_FLAGS}'")
