#!/usr/bin/env bash
# CPack builds the .deb (cmake/Packaging.cmake): its control fields are right
# (Depends from dpkg-shlibdeps: none for the static q, else libc6 and liblmdb0
# with versions, and not the liblmdb versions q refuses), its file
# list is q, the man pages, the completions and the systemd units under /usr,
# and, unpacked into a scratch root with dpkg -x, its q runs: --version names
# the same version and file format as the built q.
source "$(dirname "$0")/lib.sh" "$@"
need cpack cmake
need dpkg-deb dpkg
need dpkg-shlibdeps dpkg-dev
need file file

[[ -f $BUILD/CPackConfig.cmake ]] ||
  die "no $BUILD/CPackConfig.cmake: is include(cmake/Packaging.cmake) in CMakeLists.txt?"
(cd "$BUILD" && cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$T/pkg") >"$T/log" 2>&1 ||
  die "cpack failed: $(tail -n 20 "$T/log")"
debs=("$T"/pkg/*.deb)
((${#debs[@]} == 1)) && [[ -f ${debs[0]} ]] || die "cpack made no single .deb: $(ls "$T/pkg")"
deb=${debs[0]}

# Control fields.
field() { dpkg-deb --field "$deb" "$1"; }
version=$("$Q" --version | sed -n 's/^q \([^ ]*\) .*/\1/p')
[[ $(field Package) == q ]] || fail "Package: $(field Package)"
[[ $(field Version) == "$version" ]] || fail "Version: '$(field Version)', q --version says '$version'"
[[ $(field Architecture) == "$(dpkg --print-architecture)" ]] || fail "Architecture: $(field Architecture)"
[[ $(basename "$deb") == "q_${version}_$(dpkg --print-architecture).deb" ]] || fail "file name $(basename "$deb")"
[[ -n $(field Maintainer) ]] || fail "no Maintainer"
[[ -n $(field Description) ]] || fail "no Description"
depends=$(dpkg-deb --field "$deb" Depends)
if file -L "$Q" | grep -qE 'statically linked|static-pie linked'; then
  # The default build (Q_STATIC): nothing to depend on.
  [[ -z $depends ]] || fail "a static q needs no Depends, got: $depends"
else
  grep -qE '(^|, )libc6 \(>= [0-9.]+\)' <<<"$depends" || fail "Depends lacks a versioned libc6: $depends"
  grep -qE '(^|, )liblmdb0 \(>= [0-9.]+\)' <<<"$depends" || fail "Depends lacks a versioned liblmdb0: $depends"
  grep -qF 'liblmdb0 (<< 0.9.26) | liblmdb0 (>= 0.9.32)' <<<"$depends" ||
    fail "Depends does not keep out liblmdb 0.9.26 to 0.9.31, which q refuses: $depends"
  grep -q 'libstdc++' <<<"$depends" && fail "Depends has libstdc++ though q links it statically: $depends"
fi

# The file list: what `cmake --install --prefix /usr` installs, nothing else.
dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }' | sort >"$T/files"
{
  echo usr/bin/q
  echo usr/share/man/man1/q.1.gz
  echo usr/share/man/man7/q.7.gz
  for c in $(subs q); do echo "usr/share/man/man1/q-$c.1.gz"; done
  echo usr/share/bash-completion/completions/q
  echo usr/share/zsh/vendor-completions/_q
  echo usr/share/fish/vendor_completions.d/q.fish
  for u in "$SRC"/systemd/*.service.in "$SRC"/systemd/*.timer; do
    echo "usr/lib/systemd/system/$(basename "$u" .in)"
  done
} | sort >"$T/want"
same_set "files of $(basename "$deb")" "$(cat "$T/want")" "$(cat "$T/files")" >/dev/null
dpkg-deb --contents "$deb" | awk '$1 ~ /^-/ && $2 != "root/root" { print }' | grep . &&
  fail "files not owned by root/root"

# Unpacked into a scratch root, q runs (its libraries are the host's: the
# Depends above) and is the q that was built, stripped.
dpkg -x "$deb" "$T/root" || die "dpkg -x failed"
got=$("$T/root/usr/bin/q" --version) || fail "the packaged q --version failed"
[[ $got == "$("$Q" --version)" ]] || fail "the packaged q --version says '$got', the built one '$("$Q" --version)'"
file "$T/root/usr/bin/q" | grep -q 'not stripped' && fail "usr/bin/q is not stripped"
grep -q '^ExecStart=/usr/bin/q work %i ' "$T/root/usr/lib/systemd/system/q-work@.service" ||
  fail "q-work@.service in the package does not run /usr/bin/q"
Q_FILE=$T/x.q "$T/root/usr/bin/q" create smoke >/dev/null && Q_FILE=$T/x.q "$T/root/usr/bin/q" list | grep -qx smoke ||
  fail "the packaged q cannot create and list a queue"
