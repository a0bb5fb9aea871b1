#!/usr/bin/env bash
# CPack builds the .deb (cmake/Packaging.cmake): q-queue_VERSION-REVISION_ARCH.deb.
# Checked without installing it on this machine (dpkg -i would replace the
# host's files):
# - its control fields: Package q-queue (two characters or more, policy
#   5.6.1), the version of q --version with the revision of
#   packaging/deb/changelog, Homepage, Conflicts with the packages that also
#   ship /usr/bin/q, Depends from dpkg-shlibdeps (none for a static q alone;
#   with q-nats or a dynamic q, libc6 and liblmdb0 with versions, and not the
#   liblmdb versions q refuses; with q-nats, libnats3.4);
# - its file list: what `cmake --install --prefix /usr` installs, plus the
#   copyright file, changelog.Debian.gz and the lintian overrides;
# - /usr/share/doc/q-queue/copyright is machine-readable (DEP-5) with q's
#   license (LICENSE) for Files: *; changelog.Debian.gz is gzip -9n and names
#   this version;
# - lintian (Debian's) finds no error and no warning, and every override in
#   packaging/deb/lintian-overrides has a comment above it and is used;
# - installed with dpkg --root into a scratch directory (its maintainer
#   scripts run outside a chroot, with DPKG_ROOT set), the postinst makes the
#   user q there, and dpkg refuses it beside a python3-q-text-as-data that
#   ships /usr/bin/q;
# - unpacked, its q runs: --version names the same version and file format
#   as the built q;
# - its maintainer scripts restart the running q-work@ services on an upgrade
#   and stop the q services on removal, as dh_installsystemd's do.
source "$(dirname "$0")/lib.sh" "$@"
need cpack cmake
need dpkg-deb dpkg
need dpkg-shlibdeps dpkg-dev
need file file
need lintian lintian
need systemd-sysusers systemd

[[ -f $BUILD/CPackConfig.cmake ]] ||
  die "no $BUILD/CPackConfig.cmake: is include(cmake/Packaging.cmake) in CMakeLists.txt?"
(cd "$BUILD" && cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$T/pkg") >"$T/log" 2>&1 ||
  die "cpack failed: $(tail -n 20 "$T/log")"
debs=("$T"/pkg/*.deb)
((${#debs[@]} == 1)) && [[ -f ${debs[0]} ]] || die "cpack made no single .deb: $(ls "$T/pkg")"
deb=${debs[0]}

# Control fields.
field() { dpkg-deb --field "$deb" "$1"; }
pkg=q-queue
version=$("$Q" --version | sed -n 's/^q \([^ ]*\) .*/\1/p')
revision=$(sed -n '1s/^q-queue ([^)]*-\([^)]*\)).*/\1/p' "$SRC/packaging/deb/changelog")
[[ -n $revision ]] || die "packaging/deb/changelog: no 'q-queue (VERSION-REVISION)' on its first line"
full=$version-$revision
[[ $(field Package) == "$pkg" ]] || fail "Package: $(field Package)"
[[ $(field Version) == "$full" ]] ||
  fail "Version: '$(field Version)', want '$full' (q --version's, packaging/deb/changelog's revision)"
[[ $(field Architecture) == "$(dpkg --print-architecture)" ]] || fail "Architecture: $(field Architecture)"
[[ $(basename "$deb") == "${pkg}_${full}_$(dpkg --print-architecture).deb" ]] || fail "file name $(basename "$deb")"
[[ -n $(field Maintainer) ]] || fail "no Maintainer"
[[ -n $(field Description) ]] || fail "no Description"
[[ $(field Homepage) == https://* ]] || fail "Homepage: '$(field Homepage)'"
for other in python3-q-text-as-data q-text-as-data; do
  field Conflicts | tr ',' '\n' | sed 's/^ *//; s/ .*//' | grep -qx "$other" ||
    fail "Conflicts lacks $other (it ships /usr/bin/q too): '$(field Conflicts)'"
done
depends=$(dpkg-deb --field "$deb" Depends)
qnats=$(dirname "$Q")/q-nats
if [[ -x $qnats ]]; then
  # q-nats is linked with libnats (a shared library only) and liblmdb.
  grep -qE '(^|, )libnats3\.4 \(>= [0-9.]+\)' <<<"$depends" || fail "Depends lacks a versioned libnats3.4 (q-nats): $depends"
fi
if file -L "$Q" | grep -qE 'statically linked|static-pie linked' && [[ ! -x $qnats ]]; then
  # A static q alone: nothing to depend on.
  [[ -z $depends ]] || fail "a static q needs no Depends, got: $depends"
else
  grep -qE '(^|, )libc6 \(>= [0-9.]+\)' <<<"$depends" || fail "Depends lacks a versioned libc6: $depends"
  grep -qE '(^|, )liblmdb0 \(>= [0-9.]+\)' <<<"$depends" || fail "Depends lacks a versioned liblmdb0: $depends"
  grep -qF 'liblmdb0 (<< 0.9.26) | liblmdb0 (>= 0.9.32)' <<<"$depends" ||
    fail "Depends does not keep out liblmdb 0.9.26 to 0.9.31, which q refuses: $depends"
  # q and q-nats link libstdc++ statically; q-serve cannot (libcpp-httplib.so
  # shares C++ objects with it).
  [[ ! -x $(dirname "$Q")/q-serve ]] && grep -q 'libstdc++' <<<"$depends" &&
    fail "Depends has libstdc++ though q links it statically: $depends"
fi

# The file list: what `cmake --install --prefix /usr` installs, nothing else.
dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }' | sort >"$T/files"
{
  echo usr/bin/q
  [[ -x $qnats ]] && echo usr/bin/q-nats && echo usr/share/man/man1/q-nats.1.gz
  [[ -x $(dirname "$Q")/q-serve ]] && echo usr/bin/q-serve
  echo usr/share/man/man1/q.1.gz
  echo usr/share/man/man7/q.7.gz
  for c in $(subs q); do echo "usr/share/man/man1/q-$c.1.gz"; done
  echo usr/share/bash-completion/completions/q
  echo usr/share/zsh/vendor-completions/_q
  echo usr/share/fish/vendor_completions.d/q.fish
  for u in "$SRC"/systemd/*.service.in "$SRC"/systemd/*.timer; do
    echo "usr/lib/systemd/system/$(basename "$u" .in)"
  done
  echo usr/lib/sysusers.d/q.conf
  echo usr/lib/tmpfiles.d/q.conf
  echo usr/lib/tmpfiles.d/q-prometheus.conf
  echo "usr/share/doc/$pkg/copyright"
  echo "usr/share/doc/$pkg/changelog.Debian.gz"
  echo "usr/share/lintian/overrides/$pkg"
} | sort >"$T/want"
same_set "files of $(basename "$deb")" "$(cat "$T/want")" "$(cat "$T/files")" >/dev/null
dpkg-deb --contents "$deb" | awk '$1 ~ /^-/ && $2 != "root/root" { print }' | grep . &&
  fail "files not owned by root/root"

# Unpacked into a scratch root, q runs (its libraries are the host's: the
# Depends above) and is the q that was built, stripped.
dpkg -x "$deb" "$T/root" || die "dpkg -x failed"
got=$("$T/root/usr/bin/q" --version) || fail "the packaged q --version failed"
# The first line: the version and file format (the next ones name the
# backends and libraries, which differ between q and q-nats).
[[ ${got%%$'\n'*} == "$("$Q" --version | head -n 1)" ]] || fail "the packaged q --version says '$got', the built one '$("$Q" --version)'"
file "$T/root/usr/bin/q" | grep -q 'not stripped' && fail "usr/bin/q is not stripped"
grep -q '^ExecStart=/usr/bin/q work %i ' "$T/root/usr/lib/systemd/system/q-work@.service" ||
  fail "q-work@.service in the package does not run /usr/bin/q"
Q_FILE=$T/x.q "$T/root/usr/bin/q" create smoke >/dev/null && Q_FILE=$T/x.q "$T/root/usr/bin/q" list | grep -qx smoke ||
  fail "the packaged q cannot create and list a queue"
if [[ -x $qnats ]]; then
  got=$("$T/root/usr/bin/q-nats" --version) || fail "the packaged q-nats --version failed"
  [[ ${got%%$'\n'*} == "$("$Q" --version | head -n 1)" ]] || fail "the packaged q-nats --version says '$got', q '$("$Q" --version)'"
  file "$T/root/usr/bin/q-nats" | grep -q 'not stripped' && fail "usr/bin/q-nats is not stripped"
  [[ $(readlink "$T/root/usr/share/man/man1/q-nats.1.gz") == q.1.gz ]] ||
    fail "usr/share/man/man1/q-nats.1.gz is not a link to q.1.gz"
fi
# (A clean Debian 12 root with the package installed by apt and talking to a
# cluster: tests/docs/test_deb_root.sh.)

# The copyright file: DEP-5, q's own files under LICENSE's license.
c=$T/root/usr/share/doc/$pkg/copyright
head -n 1 "$c" | grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
  fail "copyright: not machine-readable (no DEP-5 Format: line)"
awk 'BEGIN { RS = "" } /^Files: \*\n/ && /\nLicense: Expat(\n|$)/ { found = 1 } END { exit !found }' "$c" ||
  fail "copyright: no 'Files: *' paragraph with License: Expat"
# Every license named is given as a stand-alone paragraph, and Expat's text is LICENSE's.
for name in $(sed -n 's/^License: //p' "$c" | sort -u | tr ' ' '_'); do
  name=${name//_/ }
  awk -v n="$name" 'BEGIN { RS = "" } index($0, "License: " n "\n") == 1 { found = 1 } END { exit !found }' "$c" ||
    fail "copyright: License: $name has no stand-alone paragraph with its text"
done
awk 'BEGIN { RS = "" } index($0, "License: Expat\n") == 1 { sub(/^[^\n]*\n/, ""); print; exit }' "$c" |
  sed 's/^ //; s/^\.$//' >"$T/expat"
sed -n '/^Permission/,$p' "$SRC/LICENSE" | diff -q - "$T/expat" >/dev/null ||
  fail "copyright: the Expat text is not LICENSE's"
grep -q '^Copyright: .*q authors' "$c" && grep -qF "$(grep -m1 '^Copyright' "$SRC/LICENSE" | sed 's/Copyright (c) //')" "$c" ||
  fail "copyright: the holder is not LICENSE's"

# changelog.Debian.gz: gzip -9n (no name, no time stamp; "maximum compression"
# in the header), and its first entry is this version.
cl=$T/root/usr/share/doc/$pkg/changelog.Debian.gz
gzip -t "$cl" || fail "changelog.Debian.gz is not gzip"
read -r -a header < <(od -An -tu1 -N10 "$cl")
((header[3] == 0)) || fail "changelog.Debian.gz stores a file name (gzip without -n)"
((header[4] + header[5] + header[6] + header[7] == 0)) || fail "changelog.Debian.gz has a time stamp (gzip without -n)"
((header[8] == 2)) || fail "changelog.Debian.gz is not gzip -9"
zcat "$cl" | head -n 1 | grep -qF "$pkg ($full) " || fail "changelog.Debian.gz: its first entry is not $pkg ($full)"

# lintian: no error and no warning; overrides documented and used. (Not
# --show-overrides: with it, lintian fails on the overridden tags too.)
lintian --fail-on error,warning --display-info "$deb" >"$T/lintian" 2>&1
rc=$?
cat "$T/lintian" >&2
((rc == 0)) || fail "lintian exited $rc (an error or a warning above)"
grep -q 'unused-override\|mismatched-override' "$T/lintian" &&
  fail "packaging/deb/lintian-overrides has an override lintian does not use"
awk '/^[^#[:space:]]/ && prev !~ /^#/ { print FILENAME ":" NR ": an override without a comment above it: " $0; bad = 1 }
     { prev = $0 } END { exit bad }' "$SRC/packaging/deb/lintian-overrides" >"$T/bad-overrides" ||
  fail "$(cat "$T/bad-overrides")"

# Installed into a scratch root with dpkg --root (maintainer scripts run
# outside a chroot with DPKG_ROOT set): the postinst makes the user q there.
# A python3-q-text-as-data that ships /usr/bin/q keeps it out.
r=$T/dpkgroot
mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/etc"
: >"$r/var/lib/dpkg/status"
: >"$r/var/lib/dpkg/available"
dpkg_root() {
  dpkg --root="$r" --log=/dev/null --force-not-root --force-script-chrootless \
    --force-depends --no-triggers "$@"
}
mkdir -p "$T/other/DEBIAN" "$T/other/usr/bin"
printf '#!/bin/sh\n' >"$T/other/usr/bin/q"
chmod 755 "$T/other/usr/bin/q"
printf 'Package: python3-q-text-as-data\nVersion: 3.1.6-3\nArchitecture: all\nMaintainer: test <test@localhost>\nDescription: a stand-in that ships /usr/bin/q\n' \
  >"$T/other/DEBIAN/control"
dpkg-deb --root-owner-group -b "$T/other" "$T/other.deb" >/dev/null || die "cannot build the stand-in package"
dpkg_root -i "$T/other.deb" >"$T/dpkg" 2>&1 || die "dpkg --root cannot install the stand-in: $(cat "$T/dpkg")"
if dpkg_root -i "$deb" >"$T/dpkg" 2>&1; then
  fail "dpkg installed $pkg beside python3-q-text-as-data"
else
  grep -q 'conflicts with python3-q-text-as-data' "$T/dpkg" ||
    fail "dpkg refused $pkg, but not for the conflict: $(cat "$T/dpkg")"
fi
dpkg_root -r python3-q-text-as-data >"$T/dpkg" 2>&1 || die "dpkg --root -r failed: $(cat "$T/dpkg")"
dpkg_root -i "$deb" >"$T/dpkg" 2>&1 || fail "dpkg --root -i $pkg failed: $(cat "$T/dpkg")"
[[ -x $r/usr/bin/q ]] || fail "dpkg --root -i: no usr/bin/q"
grep -q '^q:x:[0-9]*:[0-9]*:[^:]*:/var/lib/q:' "$r/etc/passwd" 2>/dev/null ||
  fail "the postinst did not make the user q: $(cat "$T/dpkg"; cat "$r/etc/passwd" 2>&1)"
dpkg_root -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed' || fail "dpkg --root: $pkg is not installed"

# The maintainer scripts (issue 27 item 6), as dh_installsystemd writes them:
# an upgrade restarts the running q-work@ (and q-serve) services, so they run
# the new q; a removal stops every q service before the binary goes, then
# reloads systemd. Each script runs here as dpkg runs it ($1, $2), with
# systemd's tools stubbed to log their arguments, and the "is systemd
# running" directory (/run/systemd/system) pointed at a scratch one, which
# exists or not.
dpkg-deb -e "$deb" "$T/control" || die "dpkg-deb -e failed"
for s in postinst prerm postrm; do
  [[ -f $T/control/$s ]] || { fail "the package has no $s"; continue; }
  [[ $(stat -c %a "$T/control/$s") == 755 ]] || fail "$s: mode $(stat -c %a "$T/control/$s"), not 755"
  sh -n "$T/control/$s" || fail "$s: not a valid sh script"
  sed "s|/run/systemd/system|$T/run-systemd|g" "$T/control/$s" >"$T/$s"
done
mkdir -p "$T/stubs"
for tool in deb-systemd-invoke systemctl systemd-sysusers systemd-tmpfiles; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$tool" "$T/calls" >"$T/stubs/$tool"
  chmod 755 "$T/stubs/$tool"
done
script_calls() { # SCRIPT ARGS...: what it called of systemd's tools
  : >"$T/calls"
  env -u DPKG_ROOT PATH="$T/stubs:/usr/bin:/bin" sh "$T/$@" >/dev/null 2>&1 || echo "exit $?" >>"$T/calls"
  grep -v 'systemd-sysusers\|systemd-tmpfiles' "$T/calls"
}
stop="deb-systemd-invoke stop q-work@*.service q-drain@*.timer q-drain@*.service q-stats.timer q-prometheus.timer q-serve.service"
restart="deb-systemd-invoke try-restart q-work@*.service q-serve.service"
mkdir -p "$T/run-systemd"
[[ $(script_calls postinst configure 0.1.0-1) == "systemctl --system daemon-reload"$'\n'"$restart" ]] ||
  fail "postinst configure OLD (an upgrade) does not restart the running q-work@: $(cat "$T/calls")"
[[ -z $(script_calls postinst configure '') ]] ||
  fail "postinst configure (a first install) touched services: $(cat "$T/calls")"
[[ $(script_calls prerm remove) == "$stop" ]] ||
  fail "prerm remove does not stop the q services: $(cat "$T/calls")"
[[ -z $(script_calls prerm upgrade 0.1.0-2) ]] ||
  fail "prerm upgrade stopped services (the postinst restarts them): $(cat "$T/calls")"
[[ $(script_calls postrm remove) == "systemctl --system daemon-reload" ]] ||
  fail "postrm remove does not reload systemd: $(cat "$T/calls")"
[[ $(script_calls postrm purge) == "systemctl --system daemon-reload" ]] ||
  fail "postrm purge does not reload systemd: $(cat "$T/calls")"
[[ -z $(script_calls postrm upgrade 0.1.0-2) ]] || fail "postrm upgrade: $(cat "$T/calls")"
# No systemd running (a container, a chroot): nothing is called, nothing fails.
rmdir "$T/run-systemd"
for args in "postinst configure 0.1.0-1" "prerm remove" "postrm remove"; do
  # shellcheck disable=SC2086
  [[ -z $(script_calls $args) ]] || fail "$args without systemd: $(cat "$T/calls")"
done
# Into another root (DPKG_ROOT), this system's services are left alone.
mkdir -p "$T/run-systemd"
: >"$T/calls"
DPKG_ROOT=$T/elsewhere PATH="$T/stubs:/usr/bin:/bin" sh "$T/prerm" remove >/dev/null 2>&1
[[ ! -s $T/calls ]] || fail "prerm remove with DPKG_ROOT stopped this system's services: $(cat "$T/calls")"
