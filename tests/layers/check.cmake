# The build's rule that a part includes only the parts below it (cmake/kpipeParts.cmake), shown on the
# compiler: a source of PART that includes a header of its own part compiles with PART's include tree, and
# one that includes ABOVE's header (a part above PART) fails with the header not found.
# Arguments: -DCXX=... -DPARTS_DIR=<build>/src/parts -DPART=schedule -DALLOWED=kpipe/schedule/schedule.hpp
#            -DABOVE=kpipe/runtime/trainer.hpp -DSOURCE_DIR=<src> -DWORK_DIR=...
file(MAKE_DIRECTORY ${WORK_DIR})
foreach(header ${ALLOWED} ${ABOVE})
  if(NOT EXISTS ${SOURCE_DIR}/${header})
    message(FATAL_ERROR "${header} does not exist: the check would prove nothing")
  endif()
endforeach()
# The part's include flags: its own tree and core's (schedule depends on core alone).
set(flags -std=c++17 -fsyntax-only -I${PARTS_DIR}/${PART} -I${PARTS_DIR}/core)
file(WRITE ${WORK_DIR}/allowed.cpp "#include \"${ALLOWED}\"\nint main() { return 0; }\n")
file(WRITE ${WORK_DIR}/upward.cpp "#include \"${ABOVE}\"\nint main() { return 0; }\n")
execute_process(COMMAND ${CXX} ${flags} ${WORK_DIR}/allowed.cpp RESULT_VARIABLE rc ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "a part's own header does not compile with its include tree:\n${out}")
endif()
execute_process(COMMAND ${CXX} ${flags} ${WORK_DIR}/upward.cpp RESULT_VARIABLE rc ERROR_VARIABLE out)
if(NOT rc)
  message(FATAL_ERROR "${PART} includes ${ABOVE} and it compiled: the build does not refuse an upward include")
endif()
string(FIND "${out}" "${ABOVE}" named)
if(named EQUAL -1 OR NOT out MATCHES "No such file|not found")
  message(FATAL_ERROR "the upward include failed for another reason than the missing header:\n${out}")
endif()
message(STATUS "${PART} cannot include ${ABOVE}: ${out}")
