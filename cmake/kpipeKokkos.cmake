# Defines kpipe::KokkosDeps, one target that carries Kokkos and Kokkos Kernels whichever way they were
# installed. Used by kpipe's own build and by its installed package config.
#  - Spack / standalone Kokkos 4.x, 5.x: exports Kokkos::kokkos and Kokkos::kokkoskernels with usage
#    requirements.
#  - Trilinos-bundled Kokkos 3.4 (Debian 12): targets trilinos_kokkos* carry no include directories;
#    the headers live in Kokkos_INCLUDE_DIRS (/usr/include/trilinos).
if(TARGET kpipe::KokkosDeps)
  return()
endif()
# kpipe_Kokkos_DIR, kpipe_KokkosKernels_DIR: set by an installed kpipe's package config to the ones it was
# built with (searched before the system's); empty in kpipe's own build.
find_package(Kokkos REQUIRED HINTS ${kpipe_Kokkos_DIR})
find_package(KokkosKernels REQUIRED HINTS ${kpipe_KokkosKernels_DIR})
add_library(kpipe::KokkosDeps INTERFACE IMPORTED GLOBAL)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(kpipe::KokkosDeps INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
elseif(TARGET trilinos_kokkoskernels)
  target_include_directories(kpipe::KokkosDeps SYSTEM INTERFACE ${Kokkos_INCLUDE_DIRS})
  target_link_libraries(kpipe::KokkosDeps INTERFACE trilinos_kokkoskernels)
else()
  message(FATAL_ERROR "kpipe: found Kokkos ${Kokkos_VERSION} but no Kokkos Kernels target "
                      "(looked for Kokkos::kokkoskernels and trilinos_kokkoskernels)")
endif()
