# The Debian package of q, made by CPack from the install rules: q, its man
# pages, the shell completions and the systemd units, under /usr.
#
#   cmake -S . -B build && cmake --build build && (cd build && cpack -G DEB)
#
# Depends comes from dpkg-shlibdeps (package dpkg-dev, which needs `file`):
# nothing for the default static q (Q_STATIC); with -DQ_STATIC=OFF, libc6 and
# liblmdb0 (libstdc++ and libgcc are linked statically), plus the liblmdb0
# versions q accepts.
# tests/docs/test_deb.sh builds it and checks it.

set(CPACK_GENERATOR "DEB" CACHE STRING "CPack generators")
set(CPACK_PACKAGE_NAME "q")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "q")
set(CPACK_PACKAGE_CONTACT "q maintainers <q-maintainers@localhost>" CACHE STRING
    "The package's Maintainer field")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "durable message queue in one file, for shell scripts and cron jobs")
set(CPACK_PACKAGE_DESCRIPTION
    "q is a message queue for shell scripts, cron jobs and on-call engineers.
Producers send with 'q send' and return at once; competing consumers receive,
do the slow work and acknowledge, or let 'q work' run a command per message.
Everything lives in one LMDB file that any number of processes share safely:
visibility timeouts, at-least-once delivery, dead letters and redrive,
backoff with jitter, FIFO groups, rate limits. Includes man pages, bash, zsh
and fish completions, and systemd units for workers and periodic jobs.")

# Install under /usr, with DESTDIR: the install rules then see the real prefix
# (the systemd units name /usr/bin/q).
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)            # q_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# q refuses liblmdb 0.9.26 to 0.9.31 at run time (ITS#9278, README.md): the
# package does not install with them. Added to what dpkg-shlibdeps finds.
if(NOT Q_STATIC)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "liblmdb0 (<< 0.9.26) | liblmdb0 (>= 0.9.32)")
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "jq")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
