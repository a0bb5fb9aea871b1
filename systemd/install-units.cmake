# Runs at install time (from systemd/CMakeLists.txt's install(CODE)): writes
# each unit with @Q_BINARY@ replaced by the installed q's path, then installs
# it like install(FILES) would (DESTDIR and the install manifest included).
if(IS_ABSOLUTE "${Q_UNIT_BINDIR}")
  set(Q_BINARY "${Q_UNIT_BINDIR}/q")
else()
  set(Q_BINARY "${CMAKE_INSTALL_PREFIX}/${Q_UNIT_BINDIR}/q")
endif()
if(IS_ABSOLUTE "${Q_UNIT_DIR}")
  set(unit_dir "${Q_UNIT_DIR}")
else()
  set(unit_dir "${CMAKE_INSTALL_PREFIX}/${Q_UNIT_DIR}")
endif()

file(GLOB units "${Q_UNIT_SOURCE_DIR}/*.service.in" "${Q_UNIT_SOURCE_DIR}/*.timer")
set(staged)
foreach(unit IN LISTS units)
  get_filename_component(name "${unit}" NAME)
  string(REGEX REPLACE "\\.in$" "" name "${name}")
  file(READ "${unit}" text)
  string(CONFIGURE "${text}" text @ONLY)
  file(WRITE "${Q_UNIT_BUILD_DIR}/units/${name}" "${text}")
  list(APPEND staged "${Q_UNIT_BUILD_DIR}/units/${name}")
endforeach()
file(INSTALL DESTINATION "${unit_dir}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES ${staged})
