# libtorch parts of parallel/: process groups, tensor-parallel mappings and layers, p2p.
file(GLOB TRIDENT_PARALLEL_TORCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
list(FILTER TRIDENT_PARALLEL_TORCH_SOURCES EXCLUDE REGEX "(layout|data_parallel)\\.cpp$")
add_library(trident_parallel STATIC ${TRIDENT_PARALLEL_TORCH_SOURCES})
target_compile_options(trident_parallel PRIVATE ${TRIDENT_WARNINGS})
target_link_libraries(trident_parallel PUBLIC trident_layout ${TORCH_LIBRARIES})
# Debian's libtorch-dev ships ProcessGroupGloo.hpp, which includes gloo headers.
if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  target_compile_definitions(trident_parallel PUBLIC TRIDENT_HAVE_NCCL)
endif()
