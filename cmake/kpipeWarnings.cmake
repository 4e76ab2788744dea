# kpipe_warnings(TARGET): the warnings kpipe's own code is compiled with. KPIPE_WARNINGS_AS_ERRORS makes them
# errors (CI's CUDA job does). Dependencies' headers (Kokkos, Kokkos Kernels, MPI, HDF5, ...) come from
# imported targets, so they are system headers and their warnings never count against kpipe.
option(KPIPE_WARNINGS_AS_ERRORS "Fail the build on warnings in kpipe's own code" OFF)
function(kpipe_warnings target)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang|NVIDIA")
    return()
  endif()
  set(flags -Wall -Wextra)
  if(KPIPE_WARNINGS_AS_ERRORS)
    list(APPEND flags -Werror)
    if(CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper")
      # nvcc's own diagnostics as well (nvcc_wrapper sends this kind to nvcc, -Werror to the host compiler).
      list(APPEND flags -Werror=all-warnings)
    endif()
  endif()
  target_compile_options(${target} PRIVATE ${flags})
endfunction()
