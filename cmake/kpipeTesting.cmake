# kpipe_add_test(NAME name SOURCES a.cpp ... [MPI_RANKS 1 2 4] [LABELS ...])
# Builds one gtest executable; without MPI_RANKS it runs as a plain process, with it once per rank count
# as `mpiexec -n N` (name suffixed _npN), like Cabana's MPI tests.
# Host threads per test process (OMP_NUM_THREADS): 1 keeps the suite's MPI tests within two cores; the OpenMP
# CI job runs with 2, so that the threaded backend and the device path's multi-thread teams are exercised.
# With more than one, idle OpenMP threads sleep instead of spinning (OMP_WAIT_POLICY=passive).
set(KPIPE_TEST_THREADS 1 CACHE STRING
  "OMP_NUM_THREADS for every test process (an MPI test's ranks: at most cores / ranks)")
set(kpipe_test_environment "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=${KPIPE_TEST_THREADS}")
if(KPIPE_TEST_THREADS GREATER 1)
  list(APPEND kpipe_test_environment "OMP_WAIT_POLICY=passive" "OMP_PROC_BIND=false")
endif()
# An MPI test's ranks get no more threads than the cores allow, one at least: threads beyond the cores only
# wait on each other at every kernel's barrier. On 2 cores the device path's layout tests took 188 s as 4 ranks
# of 2 threads and 15 s as 4 ranks of 1 (41 s and 6 s on 2 ranks); the unit tests keep KPIPE_TEST_THREADS.
cmake_host_system_information(RESULT kpipe_test_cores QUERY NUMBER_OF_LOGICAL_CORES)
function(kpipe_rank_threads ranks result)
  math(EXPR threads "${kpipe_test_cores} / ${ranks}")
  if(threads GREATER KPIPE_TEST_THREADS)
    set(threads ${KPIPE_TEST_THREADS})
  elseif(threads LESS 1)
    set(threads 1)
  endif()
  set(${result} ${threads} PARENT_SCOPE)
endfunction()
# Open MPI refuses to start more ranks than cores (the MPI tests use 4 on 2-core machines) and to run as
# root (containers, CI) unless told; other MPIs need neither flag.
set(kpipe_default_mpiexec_flags "")
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE kpipe_mpiexec_version ERROR_QUIET)
if(kpipe_mpiexec_version MATCHES "Open MPI|OpenRTE|open-mpi")
  set(kpipe_default_mpiexec_flags "--oversubscribe")
  execute_process(COMMAND id -u OUTPUT_VARIABLE kpipe_uid OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(kpipe_uid STREQUAL "0")
    list(APPEND kpipe_default_mpiexec_flags "--allow-run-as-root")
  endif()
  # Open MPI binds each of up to two ranks to one core: a rank's threads would share it.
  if(KPIPE_TEST_THREADS GREATER 1)
    list(APPEND kpipe_default_mpiexec_flags "--bind-to" "none")
  endif()
endif()
set(KPIPE_MPIEXEC_FLAGS "${kpipe_default_mpiexec_flags}" CACHE STRING "Extra mpiexec flags for the MPI tests")
function(kpipe_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;MPI_RANKS;LABELS;LIBRARIES" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE kpipe_test_main ${T_LIBRARIES})
  kpipe_warnings(${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(T_MPI_RANKS)
    foreach(n IN LISTS T_MPI_RANKS)
      add_test(NAME ${T_NAME}_np${n}
        COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${KPIPE_MPIEXEC_FLAGS}
                ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
      kpipe_rank_threads(${n} threads)
      math(EXPR processors "${n} * ${threads}")
      set(environment ${kpipe_test_environment})
      list(TRANSFORM environment REPLACE "^OMP_NUM_THREADS=.*" "OMP_NUM_THREADS=${threads}")
      set_tests_properties(${T_NAME}_np${n} PROPERTIES PROCESSORS ${processors} TIMEOUT ${T_TIMEOUT}
        LABELS "mpi;${T_LABELS}" ENVIRONMENT "${environment}")
    endforeach()
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}" PROCESSORS ${KPIPE_TEST_THREADS}
      ENVIRONMENT "${kpipe_test_environment}")
  endif()
endfunction()
