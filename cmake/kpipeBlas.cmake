# The matrix products' libraries (core/blas.hpp).
#  - CUDA builds: every product must run in cuBLAS. kpipe calls it itself for bf16 operands and TF32 compute
#    (through Kokkos Kernels' handle), and its fp32 products go through Kokkos Kernels, which reaches cuBLAS
#    only when built with its cuBLAS TPL (without it, its own slow kernels run): required, and linked.
#  - Host builds: the BLAS' own bf16 product, cblas_sbgemm, where the BLAS exports it (OpenBLAS built with
#    BUILD_BFLOAT16, MKL is not tried); otherwise products of bf16 operands widen them to float first.
#    KPIPE_HAVE_VENDOR_BF16_GEMM says which (build_config.hpp).
set(KPIPE_HAVE_VENDOR_BF16_GEMM OFF)
if(Kokkos_DEVICES MATCHES "CUDA")
  get_target_property(kpipe_kk_includes Kokkos::kokkoskernels INTERFACE_INCLUDE_DIRECTORIES)
  set(kpipe_kk_config "")
  foreach(dir IN LISTS kpipe_kk_includes)
    if(EXISTS "${dir}/KokkosKernels_config.h")
      set(kpipe_kk_config "${dir}/KokkosKernels_config.h")
      break()
    endif()
  endforeach()
  if(kpipe_kk_config)
    file(STRINGS "${kpipe_kk_config}" kpipe_kk_cublas REGEX "^#define KOKKOSKERNELS_ENABLE_TPL_CUBLAS")
  endif()
  if(NOT kpipe_kk_cublas)
    message(FATAL_ERROR "kpipe: a CUDA build needs Kokkos Kernels built with its cuBLAS TPL "
                        "(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON; Spack: kokkos-kernels+cublas); the one in "
                        "${KokkosKernels_DIR} was built without it")
  endif()
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "kpipe: matrix products in cuBLAS (Kokkos Kernels' cuBLAS TPL, CUDA::cublas)")
else()
  find_package(BLAS QUIET)
  if(BLAS_FOUND)
    include(CheckCXXSourceCompiles)
    include(CMakePushCheckState)
    cmake_push_check_state(RESET)
    set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES})
    set(CMAKE_REQUIRED_QUIET ON)
    check_cxx_source_compiles([[
      #include <cblas.h>
      int main() {
        bfloat16 a = 0, b = 0;
        float c = 0;
        cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
        return int(c);
      }]] KPIPE_BLAS_HAS_SBGEMM)
    cmake_pop_check_state()
    if(KPIPE_BLAS_HAS_SBGEMM)
      set(KPIPE_HAVE_VENDOR_BF16_GEMM ON)
    endif()
  endif()
  if(KPIPE_HAVE_VENDOR_BF16_GEMM)
    message(STATUS "kpipe: host products of bf16 operands in cblas_sbgemm (${BLAS_LIBRARIES})")
  else()
    message(STATUS "kpipe: the BLAS has no cblas_sbgemm: host products of bf16 operands widen them to float")
  endif()
endif()
