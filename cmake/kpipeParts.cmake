# kpipe_add_part(NAME [DEPENDS part...] [PUBLIC lib...] [PRIVATE lib...])
# One part of the library (src/kpipe/NAME/*.cpp) as the library kpipe_NAME (kpipe::NAME once installed),
# linked to the parts it DEPENDS on. Its sources and its users see an include tree holding only kpipe/NAME
# and, through the parts it depends on, theirs: an include of any other part does not compile. The parts are
# collected in KPIPE_PARTS, bottom first.
set(KPIPE_PARTS_DIR ${CMAKE_CURRENT_BINARY_DIR}/parts)
set(KPIPE_PARTS "")

function(kpipe_add_part name)
  cmake_parse_arguments(P "" "" "DEPENDS;PUBLIC;PRIVATE" ${ARGN})
  set(source_dir ${CMAKE_CURRENT_SOURCE_DIR}/kpipe/${name})
  foreach(dependency IN LISTS P_DEPENDS)
    if(NOT TARGET kpipe_${dependency})
      message(FATAL_ERROR "kpipe part ${name} depends on ${dependency}, which is not declared below it")
    endif()
  endforeach()
  # The part's include tree: parts/NAME/kpipe/NAME -> src/kpipe/NAME.
  file(MAKE_DIRECTORY ${KPIPE_PARTS_DIR}/${name}/kpipe)
  file(REMOVE ${KPIPE_PARTS_DIR}/${name}/kpipe/${name})
  file(CREATE_LINK ${source_dir} ${KPIPE_PARTS_DIR}/${name}/kpipe/${name} SYMBOLIC)
  file(GLOB sources CONFIGURE_DEPENDS ${source_dir}/*.cpp)
  add_library(kpipe_${name} ${sources})
  add_library(kpipe::${name} ALIAS kpipe_${name})
  set_target_properties(kpipe_${name} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  target_include_directories(kpipe_${name} PUBLIC
    $<BUILD_INTERFACE:${KPIPE_PARTS_DIR}/${name}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  list(TRANSFORM P_DEPENDS PREPEND kpipe_)
  target_link_libraries(kpipe_${name} PUBLIC ${P_DEPENDS} ${P_PUBLIC} PRIVATE ${P_PRIVATE})
  kpipe_warnings(kpipe_${name})
  # -fno-trapping-math: kpipe never traps on floating-point exceptions, and without it GCC will not
  # if-convert (so not vectorize) loops with float comparisons. -fno-math-errno: kpipe never reads errno, and
  # with it GCC calls the library's sqrt for a negative argument, a branch per element that keeps loops with
  # a square root (AdamW's) scalar. Results do not change (no reassociation; sqrt is correctly rounded either
  # way).
  target_compile_options(kpipe_${name} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-fno-trapping-math>
                         $<$<CXX_COMPILER_ID:GNU,Clang>:-fno-math-errno>)
  # -ffp-contract=off: a kernel's host and device paths (core/kernel_path.hpp) add the same terms in the same
  # order, and must then give the same bits; GCC's default (fast) fuses a product into the following add
  # wherever inlining shows it one, which differs between two loop shapes of the same sum. PUBLIC within this
  # build: tests and benchmarks instantiate the same inline kernels. (On a GPU only the device path runs.)
  target_compile_options(kpipe_${name} PUBLIC
                         $<BUILD_INTERFACE:$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang>>:-ffp-contract=off>>)
  kpipe_native_arch(kpipe_${name})
  set(KPIPE_PARTS ${KPIPE_PARTS} kpipe_${name} PARENT_SCOPE)
endfunction()

# On CUDA builds the kernels run on the GPU and the host code is not where time goes: -march=native would only
# tie the binary to the build host's CPU (often a login node unlike the compute nodes).
if(KPIPE_ENABLE_NATIVE_ARCH AND Kokkos_DEVICES MATCHES "CUDA")
  message(STATUS "kpipe: CUDA build: KPIPE_ENABLE_NATIVE_ARCH ignored (kernels run on the GPU)")
elseif(KPIPE_ENABLE_NATIVE_ARCH)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native KPIPE_HAVE_MARCH_NATIVE)
  # GCC stops at 256-bit vectors on AVX-512 CPUs unless told otherwise; the elementwise kernels (GeLU,
  # softmax) run 10-17% faster at full width here (kpipe_bench_layers). Ignored where there is no AVX-512.
  check_cxx_compiler_flag(-mprefer-vector-width=512 KPIPE_HAVE_VECTOR_WIDTH_512)
  if(NOT KPIPE_HAVE_MARCH_NATIVE)
    message(STATUS "kpipe: ${CMAKE_CXX_COMPILER_ID} does not take -march=native; kernels use the default target")
  endif()
endif()

# The host kernels vectorize to the build machine's widest SIMD only when told which CPU it is. PUBLIC within
# this build (tests, benchmarks and apps instantiate the same inline kernels: one target for all copies), not
# passed on to projects that use an installed kpipe.
function(kpipe_native_arch target)
  if(KPIPE_ENABLE_NATIVE_ARCH AND KPIPE_HAVE_MARCH_NATIVE AND NOT Kokkos_DEVICES MATCHES "CUDA")
    target_compile_options(${target} PUBLIC $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-march=native>>)
    if(KPIPE_HAVE_VECTOR_WIDTH_512)
      target_compile_options(${target} PUBLIC $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-mprefer-vector-width=512>>)
    endif()
  endif()
endfunction()
