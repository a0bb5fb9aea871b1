# The Debian package of q, q-queue, made by CPack from the install rules: q,
# q-nats (the NATS JetStream backend), its man pages, the shell completions, the systemd units and the sysusers.d
# and tmpfiles.d entries, under /usr; plus what Debian wants of every package
# (packaging/deb/): /usr/share/doc/q-queue/copyright (machine-readable),
# changelog.Debian.gz, the lintian overrides, and a postinst that makes the
# user q.
#
# The name: Debian's policy (5.6.1) wants two characters or more, and
# python3-q-text-as-data (and upstream's q-text-as-data) already ship a
# /usr/bin/q: q-queue installs /usr/bin/q as well and conflicts with them
# (README.md, "Packages"). Build with --prefix /usr/local to have both.
#
#   cmake -S . -B build && cmake --build build && (cd build && cpack -G DEB)
#
# Depends comes from dpkg-shlibdeps (package dpkg-dev, which needs `file`):
# the static q needs nothing; q-nats, the NATS backend, is linked dynamically
# (libnats is a shared library only), so the package depends on libnats3.4,
# liblmdb0 and libc6 (libstdc++ and libgcc are linked statically), plus the
# liblmdb0 versions q accepts.
#
# One package, not a second q-nats package: a user who installs q gets the
# nats:// and tls:// locations q(1) documents, at the cost of libnats3.4 and
# what it pulls (libssl3, libprotobuf-c1: about 1 MB), which every Debian 12
# machine can install; two packages would make "q -f nats://..." fail after
# "apt-get install q-queue" with an error that names a package to add.
# tests/docs/test_deb.sh builds it and checks it.

set(CPACK_GENERATOR "DEB" CACHE STRING "CPack generators")
# The version and Debian revision come from packaging/deb/changelog's first
# line, whose upstream part must be the project's version.
set(q_deb_changelog "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/changelog")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${q_deb_changelog}")
file(STRINGS "${q_deb_changelog}" q_deb_head LIMIT_COUNT 1)
if(NOT q_deb_head MATCHES "^q-queue \\(([^)-]+)-([^)]+)\\) ")
  message(FATAL_ERROR "packaging/deb/changelog: the first line is not 'q-queue (VERSION-REVISION) ...': ${q_deb_head}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "packaging/deb/changelog is at ${CMAKE_MATCH_1}, the project at ${PROJECT_VERSION}: add an entry")
endif()
set(CPACK_DEBIAN_PACKAGE_RELEASE "${CMAKE_MATCH_2}")

set(CPACK_PACKAGE_NAME "q-queue")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(Q_HOMEPAGE "https://q.example.org/" CACHE STRING
    "The package's Homepage field (the project's public page)")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${Q_HOMEPAGE}")
set(CPACK_PACKAGE_VENDOR "q")
# The Maintainer field; the default is the address the repository's commits
# carry (lintian refuses a host without a domain, such as localhost). Keep
# packaging/deb/changelog's signature line in step.
set(Q_PACKAGE_MAINTAINER "q maintainers <maintainers@users.noreply.a-seed-93af315d.example>" CACHE STRING
    "The package's Maintainer field")
set(CPACK_PACKAGE_CONTACT "${Q_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "durable message queue in one file, for shell scripts and cron jobs")
set(CPACK_PACKAGE_DESCRIPTION
    "q is a message queue for shell scripts, cron jobs and on-call engineers.
Producers send with 'q send' and return at once; competing consumers receive,
do the slow work and acknowledge, or let 'q work' run a command per message.
Everything lives in one LMDB file that any number of processes share safely:
visibility timeouts, at-least-once delivery, dead letters and redrive,
backoff with jitter, FIFO groups, rate limits. The same commands run on a
NATS JetStream cluster (nats:// and tls:// locations, through q-nats).
Includes man pages, bash, zsh and fish completions, and systemd units for
workers and periodic jobs.")

# Install under /usr, with DESTDIR: the install rules then see the real prefix
# (the systemd units name /usr/bin/q).
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)            # q-queue_VERSION-REVISION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# q refuses liblmdb 0.9.26 to 0.9.31 at run time (ITS#9278, README.md): the
# package does not install with them. Added to what dpkg-shlibdeps finds.
if(NOT Q_STATIC OR Q_NATS)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "liblmdb0 (<< 0.9.26) | liblmdb0 (>= 0.9.32)")
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "jq")
set(CPACK_DEBIAN_PACKAGE_CONFLICTS "python3-q-text-as-data, q-text-as-data")
# postinst: the user q, /var/lib/q, and q-work@/q-serve restarted on an
# upgrade; prerm/postrm: the services stopped and forgotten on removal.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/postinst"
    "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/prerm"
    "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# Debian's files, in the install component "deb" that only the package gets
# (a plain cmake --install leaves them out). changelog.Debian.gz: gzip -9n,
# as lintian wants (the best compression, no time stamp).
set(q_deb_doc "share/doc/${CPACK_PACKAGE_NAME}")
execute_process(COMMAND gzip -9nc "${q_deb_changelog}"
                OUTPUT_FILE "${CMAKE_CURRENT_BINARY_DIR}/changelog.Debian.gz"
                RESULT_VARIABLE q_gzip_rc)
if(NOT q_gzip_rc EQUAL 0)
  message(FATAL_ERROR "gzip packaging/deb/changelog failed (${q_gzip_rc})")
endif()
install(FILES "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/copyright"
              "${CMAKE_CURRENT_BINARY_DIR}/changelog.Debian.gz"
        DESTINATION "${q_deb_doc}" COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES "${CMAKE_CURRENT_SOURCE_DIR}/packaging/deb/lintian-overrides"
        DESTINATION share/lintian/overrides RENAME "${CPACK_PACKAGE_NAME}"
        COMPONENT deb EXCLUDE_FROM_ALL)
# Everything the default install has (ALL), then the component deb.
set(CPACK_INSTALL_CMAKE_PROJECTS
    "${CMAKE_BINARY_DIR};${PROJECT_NAME};ALL;/"
    "${CMAKE_BINARY_DIR};${PROJECT_NAME};deb;/")

include(CPack)
