# Every external dependency of kpipe, found once, here.
include(kpipeKokkos)
find_package(MPI REQUIRED COMPONENTS CXX)
# Parallel or serial HDF5 alike: a checkpoint's layout is created by one process and every rank writes its
# own tensors into it (docs/checkpoint-format.md); Debian's and Spack's default builds are parallel.
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
# zlib (HDF5's own deflate): token files' chunks are compressed on many threads and written as stored.
find_package(ZLIB REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(tomlplusplus QUIET)
set(KPIPE_TOMLPLUSPLUS_PACKAGE ${tomlplusplus_FOUND})  # recorded in kpipe's package config
if(NOT tomlplusplus_FOUND)
  # Debian's toml++ 3.x ships a config; older ones only a header.
  find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED GLOBAL)
  target_include_directories(tomlplusplus::tomlplusplus INTERFACE ${TOMLPP_INCLUDE_DIR})
endif()
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED GLOBAL)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
include(kpipeBlas)
if(KPIPE_ENABLE_NCCL)
  # NCCL moves device buffers on a CUDA stream: only a CUDA Kokkos has either.
  if(NOT Kokkos_DEVICES MATCHES "CUDA")
    message(FATAL_ERROR "kpipe: KPIPE_ENABLE_NCCL=ON needs a Kokkos with the CUDA backend; this one has "
                        "${Kokkos_DEVICES} (${Kokkos_DIR})")
  endif()
  find_package(CUDAToolkit REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
endif()
# SentencePiece: the BPE tokenizer (kpipe-prepare --tokenizer bpe, and decoding a BPE model's output).
# AUTO uses it where found; ON requires it; OFF leaves it out (byte tokens only: a BPE token file or
# checkpoint is then refused with a message saying so).
set(KPIPE_ENABLE_SENTENCEPIECE AUTO CACHE STRING "BPE tokenizer through SentencePiece: AUTO, ON or OFF")
set_property(CACHE KPIPE_ENABLE_SENTENCEPIECE PROPERTY STRINGS AUTO ON OFF)
set(KPIPE_HAVE_SENTENCEPIECE OFF)
if(KPIPE_ENABLE_SENTENCEPIECE STREQUAL "ON")
  find_package(SentencePiece REQUIRED)
  set(KPIPE_HAVE_SENTENCEPIECE ON)
elseif(KPIPE_ENABLE_SENTENCEPIECE STREQUAL "AUTO")
  find_package(SentencePiece QUIET)
  set(KPIPE_HAVE_SENTENCEPIECE ${SentencePiece_FOUND})
elseif(NOT KPIPE_ENABLE_SENTENCEPIECE STREQUAL "OFF")
  message(FATAL_ERROR "KPIPE_ENABLE_SENTENCEPIECE = ${KPIPE_ENABLE_SENTENCEPIECE}: expected AUTO, ON or OFF")
endif()
if(KPIPE_HAVE_SENTENCEPIECE)
  message(STATUS "kpipe: BPE tokenizer through SentencePiece ${SentencePiece_VERSION}")
else()
  message(STATUS "kpipe: no SentencePiece (KPIPE_ENABLE_SENTENCEPIECE = ${KPIPE_ENABLE_SENTENCEPIECE}): byte tokens only")
endif()
