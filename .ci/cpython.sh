#!/usr/bin/env bash
# .ci/cpython.sh VERSION: print the path of a CPython VERSION interpreter (e.g. 3.14.4), built
# once from the source tarball Debian publishes for it and kept in ~/.cache/kdispatch; print
# nothing (and say why on stderr) when it cannot be fetched or built. A few minutes on 2 cores
# the first time, then instant.
set -uo pipefail
version="$1"
minor="${version%.*}"
prefix="${XDG_CACHE_HOME:-$HOME/.cache}/kdispatch/cpython-$version"
py="$prefix/bin/python$minor"
usable() { [ -x "$py" ] && "$py" -c "import ssl, sqlite3, zlib, ctypes" 2>/dev/null; }
if usable; then
    echo "$py"
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
url="http://deb.debian.org/debian/pool/main/p/python$minor/python${minor}_$version.orig.tar.xz"
if ! curl -fsS --retry 2 -o "$work/src.tar.xz" "$url"; then
    echo "cannot fetch CPython $version ($url)" >&2
    exit 0
fi
tar -xf "$work/src.tar.xz" -C "$work"
if ! (cd "$work"/Python-"$version" && ./configure -q --prefix="$prefix" >/dev/null &&
    make -s -j"$(nproc)" >/dev/null 2>&1 && make -s install >/dev/null 2>&1); then
    echo "building CPython $version failed" >&2
    rm -rf "$prefix"
    exit 0
fi
if usable; then
    echo "$py"
else
    echo "CPython $version built without ssl, sqlite3, zlib or ctypes" >&2
fi
