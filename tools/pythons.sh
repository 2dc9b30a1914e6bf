#!/usr/bin/env bash
# Makes CPython 3.14 and 3.15 available on a Debian machine whose only
# network is the package registries: a chroot of Debian's development
# suite (sid) with Debian's python3.14 and python3.15 packages, a compiler
# and the tools some tests use.  About 3 minutes the first time; cached.
#
#   tools/pythons.sh                 make (or check) the chroot
#   tools/pythons.sh run CMD...      run CMD inside it, /proc /dev /sys mounted
#   tools/pythons.sh path            print where it is
#   tools/pythons.sh umount          unmount what run/test mounted in it
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
# (libpython3.X-testsuite: CPython's own test.test_asyncio, which the suite
# runs against the loop)
PACKAGES=python3.14,python3.14-dev,python3.14-venv,libpython3.14-testsuite,python3.15,python3.15-dev,python3.15-venv,libpython3.15-testsuite,gcc,libc6-dev,ca-certificates,iproute2,nftables,openssl,util-linux,git
STAMP="$ROOT/.uringloop-stamp"

mounted() { mountpoint -q "$ROOT/$1"; }

mount_all() {
    # the root a mount of its own, as ip netns (the tests' namespaces) needs
    # (private: what is mounted under it is not copied back to the host)
    if ! mountpoint -q "$ROOT"; then mount --bind "$ROOT" "$ROOT"; mount --make-rprivate "$ROOT"; fi
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

umount_all() {
    # never remove a chroot with the host's /dev or /sys still bound in it
    # (what tests mounted inside too, such as ip netns's /run/netns)
    local m
    for m in $(awk -v root="$ROOT/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r); do
        umount -R "$m" 2>/dev/null || umount -lR "$m" 2>/dev/null || true
    done
    if mountpoint -q "$ROOT"; then umount -R "$ROOT" 2>/dev/null || umount -lR "$ROOT"; fi
    if grep -q " $ROOT[/ ]" /proc/mounts; then
        echo "tools/pythons.sh: something is still mounted under $ROOT" >&2; exit 1
    fi
}

make_root() {
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PACKAGES" ]; then
        return 0
    fi
    if [ -f "$STAMP" ]; then
        # made before with other packages: add them in place
        mount_all
        if chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
                PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin sh -c \
                "apt-get update -qq && apt-get install -y -qq ${PACKAGES//,/ }" >/dev/null 2>&1; then
            echo "$PACKAGES" > "$STAMP"
            return 0
        fi
    fi
    if ! command -v debootstrap >/dev/null; then
        apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
    fi
    if [ -d "$ROOT" ]; then umount_all; fi
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
    # the checkout as it is (committed or not); the last build's output
    # (core.c, the .so, build/) is kept, so that an unchanged source is not
    # compiled again (the sources keep their times)
    local kept="$ROOT$tree.kept"
    rm -rf "$kept"; mkdir -p "$kept"
    if [ -d "$ROOT$tree" ]; then
        (cd "$ROOT$tree" && tar -cf - --ignore-failed-read build src/uringloop/core.c \
            src/uringloop/*.so 2>/dev/null) | tar -C "$kept" -xf - 2>/dev/null || true
    fi
    rm -rf "$ROOT$tree"; mkdir -p "$ROOT$tree"
    (cd "$here" && git ls-files -z --cached --others --exclude-standard \
        | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$ROOT$tree" -xf -
    (cd "$kept" && tar -cf - .) | tar -C "$ROOT$tree" -xf -
    rm -rf "$kept"
    chroot "$ROOT" /usr/bin/env -u PIP_FIND_LINKS HOME=/root \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        "${passed_env[@]}" /bin/sh -c '
        set -e
        cd "$1"; shift
        [ -x "$1/bin/python" ] || "python$2" -m venv "$1"
        # the project and its test extra once per pyproject.toml, then
        # only the extension, rebuilt when a source changed
        if ! cmp -s pyproject.toml "$1/uringloop-pyproject.toml"; then
            "$1/bin/python" -m pip install -q -e ".[test]"
            cp pyproject.toml "$1/uringloop-pyproject.toml"
        fi
        "$1/bin/python" setup.py -q build_ext --inplace
        venv=$1; shift 2
        exec "$venv/bin/python" -m pytest "$@"' sh "$tree" "$venv" "$version" "$@"
}

# settings the suite reads, handed into the chroot
passed_env=()
for name in CI URINGLOOP_SHORTCUTS URINGLOOP_DEBUG URINGLOOP_OPT FILES_EXAMPLES; do
    [ -n "${!name+x}" ] && passed_env+=("$name=${!name}")
done

case ${1:-make} in
    make) make_root; mount_all; for v in 3.14 3.15; do chroot "$ROOT" "python$v" -VV; done ;;
    path) echo "$ROOT" ;;
    umount) umount_all ;;
    run) shift; make_root; mount_all
         # PIP_FIND_LINKS names a folder of the host's; the chroot has none
         exec chroot "$ROOT" /usr/bin/env -u PIP_FIND_LINKS HOME=/root \
             PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" ;;
    test) shift; [ $# -ge 1 ] || { echo "usage: $0 test VERSION [PYTEST ARGS...]" >&2; exit 2; }
          test_in_root "$@" ;;
    *) echo "usage: $0 [make|path|run CMD...|test VERSION ...]" >&2; exit 2 ;;
esac
