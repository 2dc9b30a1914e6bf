#!/usr/bin/env bash
# Makes CPython 3.14 and 3.15 available on a Debian machine whose only
# network is the package registries: a chroot of Debian's development
# suite (sid) with Debian's python3.14 and python3.15 packages, a compiler
# and the tools some tests use.  About 3 minutes the first time; cached.
#
#   tools/pythons.sh                 make (or check) the chroot
#   tools/pythons.sh run CMD...      run CMD inside it, /proc /dev /sys mounted
#   tools/pythons.sh path            print where it is
#   tools/pythons.sh test 3.14 [PYTEST ARGS...]
#                                    copy this checkout into the chroot,
#                                    install it with its test extra in a
#                                    venv of that Python (kept between runs)
#                                    and run its suite there
#
# The chroot lives in $URINGLOOP_PYTHONS_ROOT (default
# /var/cache/uringloop/sid) and is reused while its stamp names the same
# package list; delete the folder to make it anew.  Needs root.
set -euo pipefail

ROOT=${URINGLOOP_PYTHONS_ROOT:-/var/cache/uringloop/sid}
MIRROR=${URINGLOOP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3.14,python3.14-dev,python3.14-venv,python3.15,python3.15-dev,python3.15-venv,gcc,libc6-dev,ca-certificates,iproute2,nftables,openssl,util-linux,git
STAMP="$ROOT/.uringloop-stamp"

mounted() { mountpoint -q "$ROOT/$1"; }

mount_all() {
    for d in proc sys dev; do
        mkdir -p "$ROOT/$d"
        mounted "$d" && continue
        case $d in
            proc) mount -t proc proc "$ROOT/proc" ;;
            *) mount --rbind "/$d" "$ROOT/$d"; mount --make-rslave "$ROOT/$d" ;;
        esac
    done
    # pip and the tests reach the registries with the host's resolver and CAs
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
}

make_root() {
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PACKAGES" ]; then
        return 0
    fi
    if ! command -v debootstrap >/dev/null; then
        apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
    fi
    rm -rf "$ROOT.partial"
    mkdir -p "$(dirname "$ROOT")"
    debootstrap --variant=minbase --include="$PACKAGES" sid "$ROOT.partial" "$MIRROR" \
        > "$(dirname "$ROOT")/debootstrap.log" 2>&1 \
        || { tail -30 "$(dirname "$ROOT")/debootstrap.log" >&2; exit 1; }
    rm -rf "$ROOT"
    mv "$ROOT.partial" "$ROOT"
    echo "$PACKAGES" > "$STAMP"
}

test_in_root() {
    local version=$1; shift
    local here; here=$(cd "$(dirname "$0")/.." && pwd)
    local tree="/work/uringloop-$version" venv="/opt/venv-$version"
    make_root; mount_all
    # the checkout as it is (committed or not), without what a build left
    rm -rf "$ROOT$tree"; mkdir -p "$ROOT$tree"
    (cd "$here" && git ls-files -z --cached --others --exclude-standard \
        | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$ROOT$tree" -xf -
    chroot "$ROOT" /usr/bin/env -u PIP_FIND_LINKS HOME=/root \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        "${passed_env[@]}" /bin/sh -c '
        set -e
        cd "$1"; shift
        [ -x "$1/bin/python" ] || "python$2" -m venv "$1"
        "$1/bin/python" -m pip install -q -e ".[test]"
        venv=$1; shift 2
        exec "$venv/bin/python" -m pytest "$@"' sh "$tree" "$venv" "$version" "$@"
}

# settings the suite reads, handed into the chroot
passed_env=()
for name in CI URINGLOOP_SHORTCUTS URINGLOOP_DEBUG URINGLOOP_OPT; do
    [ -n "${!name+x}" ] && passed_env+=("$name=${!name}")
done

case ${1:-make} in
    make) make_root; mount_all; for v in 3.14 3.15; do chroot "$ROOT" "python$v" -VV; done ;;
    path) echo "$ROOT" ;;
    run) shift; make_root; mount_all
         # PIP_FIND_LINKS names a folder of the host's; the chroot has none
         exec chroot "$ROOT" /usr/bin/env -u PIP_FIND_LINKS HOME=/root \
             PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" ;;
    test) shift; [ $# -ge 1 ] || { echo "usage: $0 test VERSION [PYTEST ARGS...]" >&2; exit 2; }
          test_in_root "$@" ;;
    *) echo "usage: $0 [make|path|run CMD...|test VERSION ...]" >&2; exit 2 ;;
esac
