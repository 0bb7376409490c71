# Finds libtorch through a Python installation of PyTorch (PyPI's torch, CUDA-enabled),
# and the CUDA toolkit that torch's CMake package asks for through PyPI's nvidia-* wheels.
#
# Inputs (cache variables):
#   TRIDENT_PYTHON      the Python whose torch is used (default: .venv/bin/python3 of this
#                       repository, made by scripts/setup.sh; else python3 on PATH)
#   CUDA_TOOLKIT_ROOT_DIR / CUDAToolkit_ROOT  a CUDA toolkit to use instead of the wheels
# Outputs: CMAKE_PREFIX_PATH has torch.utils.cmake_prefix_path; a CUDA toolkit is set up for
# torch's own find_package(CUDA), find_package(CUDAToolkit) and enable_language(CUDA);
# TRIDENT_NCCL_INCLUDE_DIR and TRIDENT_NCCL_LIBRARY name NCCL (nvidia-nccl-cu13).
#
# NOTE [CUDA from wheels]
# PyPI's torch 2.11.0 is built against CUDA 13.0 and depends on the nvidia-* wheels that
# hold CUDA's runtime libraries (site-packages/nvidia/cu13/{include,lib}) and NCCL
# (site-packages/nvidia/nccl). Its CMake package (Caffe2/public/cuda.cmake) still wants a
# toolkit laid out like /usr/local/cuda: bin/nvcc, include/, lib64/ with unversioned .so
# names, and a working nvcc for enable_language(CUDA). The wheels give all of it but the
# layout (cuda-toolkit[nvcc,crt,nvvm,cccl]==13.0.2 pins nvcc to the runtime's 13.0), so this
# file assembles build/cuda-root out of symbolic links into the wheels: nothing is copied
# and nothing is downloaded at configure time. Anything missing is a configure error that
# names the file and the wheel that ships it; nothing CUDA is skipped silently.

set(_trident_default_python python3)
if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python3)
  set(_trident_default_python ${PROJECT_SOURCE_DIR}/.venv/bin/python3)
endif()
set(TRIDENT_PYTHON ${_trident_default_python} CACHE FILEPATH "Python whose PyTorch (libtorch) Trident builds on")

execute_process(
  COMMAND ${TRIDENT_PYTHON} -c
    "import os, torch; print(torch.utils.cmake_prefix_path); print(os.path.dirname(os.path.dirname(torch.__file__))); print(torch.__version__); print(torch.version.cuda or '')"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "TRIDENT_PYTHON=${TRIDENT_PYTHON} cannot import torch (run scripts/setup.sh, which makes "
                      ".venv with the pinned torch, or pass -DTRIDENT_PYTHON=<a python with torch>):\n${_err}")
endif()
string(REPLACE "\n" ";" _out "${_out}")
list(GET _out 0 _torch_prefix)
list(GET _out 1 TRIDENT_SITE_PACKAGES)
list(GET _out 2 TRIDENT_PY_TORCH_VERSION)
list(LENGTH _out _n)
set(TRIDENT_PY_TORCH_CUDA "")
if(_n GREATER 3)
  list(GET _out 3 TRIDENT_PY_TORCH_CUDA)
endif()
list(PREPEND CMAKE_PREFIX_PATH ${_torch_prefix})
if(NOT TRIDENT_PY_TORCH_CUDA)
  message(FATAL_ERROR "torch ${TRIDENT_PY_TORCH_VERSION} of ${TRIDENT_PYTHON} is a CPU-only build: Trident builds "
                      "on the CUDA-enabled one (requirements.txt pins PyPI's torch==2.11.0, CUDA 13.0)")
endif()

# NCCL: the wheel torch depends on (nvidia-nccl-cu13), or an explicit location.
set(_nccl_hint ${TRIDENT_SITE_PACKAGES}/nvidia/nccl)
find_path(TRIDENT_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hint}/include ENV NCCL_INCLUDE_DIR)
find_library(TRIDENT_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hint}/lib ENV NCCL_LIB_DIR)
if(NOT TRIDENT_NCCL_INCLUDE_DIR OR NOT TRIDENT_NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found (nccl.h: ${TRIDENT_NCCL_INCLUDE_DIR}, libnccl: ${TRIDENT_NCCL_LIBRARY}): "
                      "expected under ${_nccl_hint} (the nvidia-nccl-cu13 wheel that torch depends on)")
endif()

# The CUDA toolkit: an explicit one wins; else the wheels (NOTE [CUDA from wheels]).
if(CUDA_TOOLKIT_ROOT_DIR OR CUDAToolkit_ROOT)
  message(STATUS "Trident: CUDA toolkit given: ${CUDA_TOOLKIT_ROOT_DIR}${CUDAToolkit_ROOT}")
  return()
endif()
string(REGEX MATCH "^[0-9]+" _cuda_major "${TRIDENT_PY_TORCH_CUDA}")
set(_cu ${TRIDENT_SITE_PACKAGES}/nvidia/cu${_cuda_major})
set(_missing "")
foreach(f bin/nvcc bin/nvcc.profile nvvm/bin/cicc include/cuda_runtime.h include/crt/host_config.h include/cuda.h
          include/nv/target lib/libcudart.so.${_cuda_major} lib/libcudart_static.a)
  if(NOT EXISTS ${_cu}/${f})
    list(APPEND _missing ${_cu}/${f})
  endif()
endforeach()
if(_missing)
  # A machine with a CUDA toolkit of its own (the GPU machine: nvcc on PATH) uses it.
  find_program(_system_nvcc nvcc)
  if(_system_nvcc)
    get_filename_component(_system_cuda ${_system_nvcc} REALPATH)
    get_filename_component(_system_cuda ${_system_cuda} DIRECTORY)
    get_filename_component(_system_cuda ${_system_cuda} DIRECTORY)
    set(CUDA_TOOLKIT_ROOT_DIR ${_system_cuda} CACHE PATH "CUDA toolkit (of nvcc on PATH)" FORCE)
    set(CUDAToolkit_ROOT ${_system_cuda} CACHE PATH "CUDA toolkit (of nvcc on PATH)" FORCE)
    message(STATUS "Trident: the wheels lack ${_missing}; using the CUDA toolkit of ${_system_nvcc}")
    return()
  endif()
  message(FATAL_ERROR "CUDA ${TRIDENT_PY_TORCH_CUDA} toolkit incomplete: ${_missing} missing and no nvcc on PATH. "
                      "torch's CMake package needs nvcc and CUDA's headers: install requirements.txt "
                      "(cuda-toolkit[nvcc,crt,nvvm,cccl]) into ${TRIDENT_PYTHON}'s environment, or pass "
                      "-DCUDA_TOOLKIT_ROOT_DIR=<a CUDA ${TRIDENT_PY_TORCH_CUDA} toolkit>")
endif()
set(_root ${PROJECT_BINARY_DIR}/cuda-root)
file(MAKE_DIRECTORY ${_root}/lib64)
foreach(d bin include nvvm)
  file(CREATE_LINK ${_cu}/${d} ${_root}/${d} SYMBOLIC)
endforeach()
# lib64: every library of the wheels under its versioned and unversioned names.
file(GLOB _libs ${_cu}/lib/lib*.so* ${_cu}/lib/lib*.a ${TRIDENT_SITE_PACKAGES}/nvidia/*/lib/lib*.so*)
foreach(lib ${_libs})
  get_filename_component(name ${lib} NAME)
  file(CREATE_LINK ${lib} ${_root}/lib64/${name} SYMBOLIC)
  string(REGEX REPLACE "\\.so\\..*$" ".so" plain ${name})
  if(NOT plain STREQUAL name AND NOT EXISTS ${_root}/lib64/${plain})
    file(CREATE_LINK ${lib} ${_root}/lib64/${plain} SYMBOLIC)
  endif()
endforeach()
set(CUDA_TOOLKIT_ROOT_DIR ${_root} CACHE PATH "CUDA toolkit (assembled from the nvidia-* wheels)" FORCE)
set(CUDAToolkit_ROOT ${_root} CACHE PATH "CUDA toolkit (assembled from the nvidia-* wheels)" FORCE)
set(CMAKE_CUDA_COMPILER ${_root}/bin/nvcc CACHE FILEPATH "nvcc from the nvidia-cuda-nvcc wheel" FORCE)
# nvcc resolves its own path into the wheel, whose libraries sit in lib/, not the lib64/ its
# nvcc.profile names: tell its link steps where cudart_static and cudadevrt are.
set(CMAKE_CUDA_FLAGS "-L${_cu}/lib" CACHE STRING "CUDA flags (the wheel's library folder for nvcc's own links)")
message(STATUS "Trident: CUDA ${TRIDENT_PY_TORCH_CUDA} toolkit assembled from ${_cu} in ${_root}")
