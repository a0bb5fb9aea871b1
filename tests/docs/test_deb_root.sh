#!/usr/bin/env bash
# The .deb as a user meets it: installed on a clean Debian 12 root, then used
# against a NATS cluster.
# - a clean root: debootstrap --variant=minbase bookworm from the host's
#   Debian mirror (kept as BUILD/deb-root.tar.gz for the next run; a fresh
#   clone makes it anew, a couple of minutes);
# - `apt-get install ./q-queue_*.deb` inside it (a chroot): the package's
#   Depends, libnats3.4 among them, come from the archive; `dpkg -s` says it
#   is installed and /usr/bin/q-nats is there;
# - the installed q, run inside the chroot (which shares the host's loopback),
#   creates a queue on a 3-node cluster that needs TLS and a password
#   (scripts/nats-cluster --tls --auth), sends, receives and acks, with the
#   CA and the credentials from NATS_CA, NATS_USER and NATS_PASSWORD, and a
#   wrong password exits 77 naming the authorization violation;
# - and a queue file in the root works as well.
# Needs root (chroot, mount): skipped (77) otherwise.
source "$(dirname "$0")/lib.sh" "$@"
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (debootstrap, chroot)"
  trap - EXIT
  rm -rf "$T"
  exit 77
fi
need debootstrap debootstrap
need cpack cmake
need nats-server nats-server
need openssl openssl
[[ -x $(dirname "$Q")/q-nats ]] || die "no q-nats beside $Q: the package would lack the NATS backend"

(cd "$BUILD" && cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$T/pkg") >"$T/log" 2>&1 ||
  die "cpack failed: $(tail -n 20 "$T/log")"
debs=("$T"/pkg/*.deb)
((${#debs[@]} == 1)) && [[ -f ${debs[0]} ]] || die "cpack made no single .deb: $(ls "$T/pkg")"
deb=${debs[0]}

# The clean root, made once per build tree.
root=$T/root
cache=$BUILD/deb-root.tar.gz
mirror=$(awk '/^URIs:/ { print $2; exit } /^deb / { print $2; exit }' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null)
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$root"
if [[ -f $cache ]]; then
  tar -xzf "$cache" -C "$root" || die "cannot unpack $cache (remove it to make a new root)"
else
  started=$SECONDS
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$T/debootstrap.log" 2>&1 ||
    die "debootstrap bookworm from $mirror failed: $(tail -n 5 "$T/debootstrap.log")"
  echo "debootstrap: $((SECONDS - started)) s" >&2
  tar -czf "$cache.tmp" -C "$root" . && mv "$cache.tmp" "$cache"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
mounted=()
cleanup_root() {
  local m
  for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null; done
  [[ -n ${CL:-} ]] && "$SRC/scripts/nats-cluster" stop "$CL" >/dev/null 2>&1
}
trap 'cleanup_root; _cleanup' EXIT
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"; }

# The package, with its dependencies from the archive.
cp "$deb" "$root/tmp/"
in_root apt-get update >"$T/apt.log" 2>&1 || die "apt-get update in the clean root failed: $(tail -n 5 "$T/apt.log")"
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  "/tmp/$(basename "$deb")" >>"$T/apt.log" 2>&1 ||
  die "apt-get install ./$(basename "$deb") in a clean Debian 12 root failed: $(tail -n 10 "$T/apt.log")"
in_root dpkg -s q-queue | grep -q '^Status: install ok installed' || fail "q-queue is not installed in the root"
in_root dpkg -s libnats3.4 | grep -q '^Status: install ok installed' || fail "libnats3.4 did not come with q-queue"
[[ -x $root/usr/bin/q-nats ]] || fail "the root has no /usr/bin/q-nats"
in_root q --version >"$T/v" 2>&1 || fail "q --version in the root: $(cat "$T/v")"

# A queue file.
in_root sh -c 'q -f /tmp/x.q create smoke && q -f /tmp/x.q send smoke hello >/dev/null &&
  q -f /tmp/x.q receive smoke | cut -f4' >"$T/file.out" 2>&1
[[ $(cat "$T/file.out") == hello ]] || fail "a queue file in the root: $(cat "$T/file.out")"

# A cluster with TLS and a password, on the host's loopback.
CL=$T/cluster
urls=$("$SRC/scripts/nats-cluster" start --tls --auth "$CL" 3) || die "the TLS cluster did not start"
# shellcheck source=/dev/null
source "$CL/env"
cp "$NATS_TEST_CA" "$root/tmp/ca.pem"
location=$urls/debroot
[[ $location == tls://* ]] || fail "the TLS cluster's location is $location, not tls://"
out=$(in_root env NATS_CA=/tmp/ca.pem NATS_USER="$NATS_TEST_USER" NATS_PASSWORD="$NATS_TEST_PASSWORD" sh -c "
  q -f '$location' create x && q -f '$location' send x 'from the package' >/dev/null &&
  r=\$(q -f '$location' receive x) && q -f '$location' ack x \"\$(printf '%s' \"\$r\" | cut -f2)\" &&
  printf '%s\n' \"\$r\" | cut -f4" 2>&1)
[[ $out == 'from the package' ]] || fail "the installed q on a TLS cluster with a password: $out"
grep -qF "$NATS_TEST_PASSWORD" <<<"$out" && fail "the password appeared in the output: $out"
# And a wrong password is refused at once with 77, naming no secret.
in_root env NATS_CA=/tmp/ca.pem NATS_USER="$NATS_TEST_USER" NATS_PASSWORD=wrong-deb q -f "$location" list \
  >"$T/wrong" 2>&1
rc=$?
((rc == 77)) || fail "a wrong password from the installed q: exit $rc, want 77: $(cat "$T/wrong")"
grep -qi 'authorization violation' "$T/wrong" || fail "a wrong password: $(cat "$T/wrong")"
