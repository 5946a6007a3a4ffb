#!/bin/sh
# bundle.sh PREFIX: make an installed stackshot tree (cmake --install, or
# the .deb's /usr) self-contained, for an application image that lacks the
# agent's libraries: every library the core, the modules and the gRPC
# helper program (stackshot-grpc-helper) need, except glibc's own, is
# copied next to them into PREFIX/lib, and every library there and the
# helper get the run path $ORIGIN, so that the tree works wherever it is
# copied (an init container's emptyDir). The application image still needs
# glibc as recent as the build machine's (Debian 12: 2.36); a musl image
# (Alpine) cannot load the agent.
set -eu
lib="$1/lib"
[ -e "$lib/libstackshot-core.so" ] || { echo "bundle.sh: no $lib/libstackshot-core.so" >&2; exit 1; }
command -v patchelf >/dev/null || { echo "bundle.sh: patchelf is needed" >&2; exit 1; }
for so in "$lib"/libstackshot-*.so "$lib"/stackshot-*-helper; do
    ldd "$so" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r dep; do
    case "$(basename "$dep")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
    libutil.so.* | ld-linux*) ;; # glibc: the application's own
    libstackshot*) ;;
    *) cp -L "$dep" "$lib/" ;;
    esac
done
for so in "$lib"/*.so* "$lib"/stackshot-*-helper; do
    [ -L "$so" ] || patchelf --set-rpath '$ORIGIN' "$so"
done
