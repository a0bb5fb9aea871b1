# cmake -DSCDOC=... -DGZIP=... -DSRC=page.scd -DOUT=page.N -P scdoc.cmake
# Builds one man page: scdoc reads SRC on stdin and writes OUT; with GZIP, OUT
# is then compressed to OUT.gz (-n: no name or time stamp, so the page is the
# same on every build).
execute_process(COMMAND ${SCDOC}
  INPUT_FILE ${SRC}
  OUTPUT_FILE ${OUT}
  ERROR_VARIABLE err
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT})
  message(FATAL_ERROR "scdoc ${SRC}: ${err}")
endif()
if(GZIP)
  execute_process(COMMAND ${GZIP} -9nf ${OUT} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${OUT} failed")
  endif()
endif()
