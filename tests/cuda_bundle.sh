#!/bin/sh
# The GPU machine's bundle (jobs/device-bundle) from this CUDA build: it packs,
# it is at most 48 MiB, its `./ra gpu-check --dry-run` passes, and it runs in a
# bare Debian root (debootstrap --variant=minbase bookworm: no Open MPI, PMIx,
# hwloc, OpenBLAS, HDF5, oneDNN, jansson, libgomp, not even ssh) under chroot,
# with only the CUDA libraries the bundle leaves to the machine bind-mounted in
# (a GPU machine has them; no GPU is needed, every run here is --backend cpu):
# stories260K's 200 reference tokens, KV-Runahead on 2 ranks through the
# bundle's own mpirun against 1 rank, test_golden, test_chain on 2 ranks, and
# every bundled ELF resolving its libraries from the bundle. Exits 77 in a
# build without CUDA.
#
# Time, on 2 cores: packing 30 s to 100 s (mostly xz, -6 over 150 MB); the
# bare root is made once by debootstrap (30 s to 3 minutes, from the network)
# and cached in ${RA_CACHE_DIR:-$HOME/.cache/runahead}/debroot-bookworm, then
# reused; the runs in it take about 10 s. Under 5 minutes in all. The bare-root part needs root (chroot, mount)
# and, the first time, a Debian mirror (RA_DEBIAN_MIRROR, default
# deb.debian.org); without them it is a partial skip.
. "$(dirname "$0")/lib.sh"
grep -q '^#define HAVE_CUDA 1' "$BUILD/config.h" 2>/dev/null \
    || skip_no_device "cuda_bundle: $BUILD is not a CUDA build (./configure --with-cuda)"
need_fixture stories260K.bin
need_fixture stories260K.bos.greedy200.ids
need_fixture stories260K.bos.logits8.f32

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(now)

# ------------------------------------------------------------ 1. pack
# RA_SKIP_APT/RA_SKIP_PIP: a test installs nothing for the build (jobs/setup
# then only runs make, a no-op in a built tree).
t=$(now)
RA_SKIP_APT=1 RA_SKIP_PIP=1 RA_BUNDLE_BUILD_DIR=$BUILD RA_MODELS_DIR=$MODELS RA_BUNDLE_MAX_MIB=48 \
    "$SRC/jobs/device-bundle" "$TMP/rb.tar.xz" >"$TMP/pack.log" 2>&1 \
    || { tail -n 30 "$TMP/pack.log" >&2; fail "jobs/device-bundle failed (log: $TMP/pack.log)"; finish; }
size=$(wc -c <"$TMP/rb.tar.xz")
echo "time: pack $(took "$t") s ($((size / 1048576)) MiB, $size bytes)"
[ "$size" -le $((48 * 1048576)) ] || fail "the bundle is $size bytes, over 48 MiB"

# ------------------------------------------------------------ 2. unpack, dry run
t=$(now)
mkdir -p "$TMP/host"
tar -C "$TMP/host" -xJf "$TMP/rb.tar.xz" || { fail "cannot unpack $TMP/rb.tar.xz"; finish; }
hb=$TMP/host/runahead-bundle
(cd "$hb" && ./ra gpu-check --dry-run) >"$TMP/dry.log" 2>&1 \
    || { cat "$TMP/dry.log" >&2; fail "./ra gpu-check --dry-run failed in the unpacked bundle"; }
echo "time: unpack + gpu-check --dry-run $(took "$t") s"

# ------------------------------------------------------------ 3. a bare Debian root
expected=$(tr -s ' \n' ' ' <"$MODELS/stories260K.bos.greedy200.ids" | sed 's/^ //; s/ $//')
prompt="1 403 407 261 263 286 280 260"
cache=${RA_CACHE_DIR:-${HOME:-/root}/.cache/runahead}
root=$cache/debroot-bookworm
run=""      # the run's directory inside the root, /opt/cuda-bundle-PID
mounts=""   # what this run mounted, newest first

# mounts_under DIR: the mount points at or below DIR, deepest first.
mounts_under() {
    awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}
unmount_all() { # unmount_all DIR: every mount at or below DIR; fails if one stays
    for m in $(mounts_under "$1"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    [ -z "$(mounts_under "$1")" ]
}
cleanup() {
    for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    mounts=""
    # Nothing is removed from under a mount (a bind mount of the host's files).
    if [ -n "$run" ] && [ -d "$root$run" ]; then
        if unmount_all "$root$run"; then rm -rf "$root$run"; else echo "cuda_bundle: $root$run still has mounts, left" >&2; fi
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 1' HUP INT TERM
mnt() { # mnt TARGET MOUNT-ARGS...: mount MOUNT-ARGS TARGET, TARGET recorded for cleanup
    target=$1; shift
    mount "$@" "$target" || return 1
    mounts="$target $mounts"
}
# inroot LIMIT CMD: CMD (a sh command line) run in the bundle's directory inside the root,
# in a clean environment (nothing of CTest's OMPI_* or LD_LIBRARY_PATH), with CUDA_HOME naming
# the CUDA libraries bound in (ra looks there, as on a GPU machine that sets it).
inroot() {
    timeout -k 10 "$1" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        LANG=C TERM=dumb CUDA_HOME="${cuda_home-$run/cuda}" chroot "$root" /bin/sh -c "cd $run/runahead-bundle && $2" 9>&-
}

# make_root: the cached root, made once: debootstrap into a temporary directory, then rename.
make_root() {
    [ -x "$root/bin/sh" ] && [ -x "$root/usr/bin/ldd" ] && return 0
    if ! command -v debootstrap >/dev/null 2>&1 && ! [ -x /usr/sbin/debootstrap ]; then
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
            || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; }
        } >"$TMP/apt.log" 2>&1 || { tail -n 5 "$TMP/apt.log"; skip_part "no debootstrap, and apt-get install debootstrap failed (no network?): the bare-root run is unchecked"; return 1; }
    fi
    for d in "$root".new.*; do [ -d "$d" ] && unmount_all "$d" && rm -rf "$d"; done   # a killed run's
    echo "cuda_bundle: making the bare root $root with debootstrap (once; 30 s to 3 minutes)"
    new=$(mktemp -d "$root.new.XXXXXX") || { fail "cannot create a directory beside $root"; return 1; }
    if PATH=$PATH:/usr/sbin:/sbin timeout -k 10 400 debootstrap --variant=minbase bookworm "$new" ${RA_DEBIAN_MIRROR:-} \
            >"$TMP/debootstrap.log" 2>&1 \
        && [ -x "$new/bin/sh" ] && mv -T "$new" "$root"; then
        return 0
    fi
    tail -n 10 "$TMP/debootstrap.log"
    unmount_all "$new" && rm -rf "$new"
    skip_part "debootstrap --variant=minbase bookworm failed (no network? log: $TMP/debootstrap.log): the bare-root run is unchecked"
    return 1
}

# bind_cuda DIR: the CUDA libraries the bundle leaves to the machine (those the host resolves
# for the bundled programs, each one bind-mounted read-only) into DIR inside the root.
bind_cuda() {
    mkdir -p "$root$1"
    "$hb/ra" sh -c 'for f; do [ -f "$f" ] && ldd "$f" 2>/dev/null; done; true' sh \
        "$hb"/bin/* "$hb"/bin/tests/* "$hb"/lib/*.so* | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u >"$TMP/cuda-libs"
    n=0
    while read -r name path; do
        case $name in libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvidia-*|libnvrtc*|libnvJitLink*) ;; *) continue ;; esac
        : >"$root$1/$name"
        mnt "$root$1/$name" --bind "$(readlink -f "$path")" || return 1
        mount -o remount,bind,ro "$root$1/$name" 2>/dev/null || true
        n=$((n + 1))
    done <"$TMP/cuda-libs"
    echo "cuda_bundle: $n CUDA libraries of the host bound into the root's $1"
}

bare_root() {
    [ "$(id -u)" -eq 0 ] || { skip_part "not root: the bare-root run (chroot, mount) is unchecked"; return; }
    case $cache in *[!A-Za-z0-9_./+-]*) skip_part "the cache path '$cache' has odd characters: the bare-root run is unchecked"; return ;; esac
    mkdir -p "$cache" || { fail "cannot create $cache"; return; }
    # One run at a time in the cached root (two build trees testing at once).
    exec 9>"$root.lock"
    flock -w 600 9 || { fail "cannot lock $root.lock"; return; }
    t=$(now)
    make_root || return
    echo "time: bare root $(took "$t") s"

    t=$(now)
    # What a killed earlier run left: mounts, run directories (the lock is ours).
    unmount_all "$root" || { fail "mounts left in $root from an earlier run: $(mounts_under "$root" | tr '\n' ' ')"; return; }
    rm -rf "$root"/opt/cuda-bundle-*
    # The root has none of the project's packages: nothing the bundle must bring.
    lacks=$(find "$root" -xdev \( -name 'libmpi.so*' -o -name 'libopen-pal.so*' -o -name 'libpmix.so*' \
        -o -name 'libhwloc.so*' -o -name 'libevent_core*' -o -name 'libopenblas*' -o -name 'liblapack*' -o -name 'libblas*' \
        -o -name 'libhdf5*' -o -name 'libdnnl*' -o -name 'libjansson*' -o -name 'libgomp*' -o -name 'libgfortran*' \
        -o -name 'libcuda*' -o -path '*bin/mpirun' -o -path '*bin/orterun' -o -path '*bin/ssh' -o -path '*bin/rsh' \) -print | head -n 5)
    [ -z "$lacks" ] || { fail "the bare root $root is not bare: $(echo "$lacks" | tr '\n' ' ')"; return; }

    run=/opt/cuda-bundle-$$
    mkdir -p "$root$run" && tar -C "$root$run" -xJf "$TMP/rb.tar.xz" || { fail "cannot unpack the bundle into $root$run"; return; }
    # What Open MPI needs of the machine: /proc, /sys (hwloc's topology), a fresh /tmp (its
    # session directory) and /dev/shm; the device nodes are debootstrap's own. No /etc/hosts,
    # no ssh: mpirun must start its local daemon without it (ra: OMPI_MCA_plm=isolated).
    { mnt "$root/proc" -t proc proc && mnt "$root/sys" -t sysfs -o ro sysfs \
        && mnt "$root/tmp" -t tmpfs -o mode=1777,size=1g tmpfs && mnt "$root/dev/shm" -t tmpfs -o mode=1777,size=1g tmpfs; } \
        || { skip_part "cannot mount /proc, /sys, /tmp, /dev/shm in the bare root (no CAP_SYS_ADMIN?): unchecked"; return; }
    inroot 10 ': >/dev/null && head -c 1 /dev/urandom >/dev/null' \
        || { fail "the bare root's /dev/null or /dev/urandom is unusable (a nodev file system under $cache?)"; return; }
    bind_cuda "$run/cuda/lib64" || { fail "cannot bind the host's CUDA libraries into the root"; return; }
    echo "time: root set up $(took "$t") s"

    t=$(now)
    # Without the launcher nothing of the project resolves in the root...
    inroot 30 'ldd bin/runahead' >"$TMP/ldd-bare" 2>&1
    grep -q 'libmpi.so.40 => not found' "$TMP/ldd-bare" \
        || { cat "$TMP/ldd-bare" >&2; fail "bin/runahead found libmpi.so.40 in the bare root outside the bundle"; }
    # ...and through it every bundled ELF resolves: from the bundle, the CUDA libraries, or glibc and
    # the compiler runtime of the root.
    inroot 120 "./ra sh -c 'for f; do
            [ -f \"\$f\" ] && case \$(head -c 4 \"\$f\") in *ELF) ldd \"\$f\" | sed \"s|^|\$f: |\" ;; esac
        done; true' sh bin/* bin/tests/* bin/jobs/* lib/*.so* lib/openmpi/*.so lib/pmix/*.so" >"$TMP/ldd-ra" 2>&1
    # (The driver, libcuda.so.1, is the GPU machine's: it is absent here without a GPU, as on the host.)
    grep 'not found' "$TMP/ldd-ra" | grep -Ev '[[:space:]](libcuda\.so|libnvidia-)' >"$TMP/ldd-missing"
    [ ! -s "$TMP/ldd-missing" ] \
        || { head -n 10 "$TMP/ldd-missing" >&2; fail "bundled files with unresolved libraries in the bare root"; }
    awk '$3 == "=>" && $4 ~ /^\// { print $2, $4 }' "$TMP/ldd-ra" | sort -u | while read -r name path; do
        case $path in "$run"/*) continue ;; esac
        case $name in ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|libstdc++.so*|libgcc_s.so*) continue ;; esac
        echo "$name => $path"
    done >"$TMP/ldd-foreign"
    [ ! -s "$TMP/ldd-foreign" ] || { cat "$TMP/ldd-foreign" >&2; fail "bundled files resolve libraries from the bare root, not the bundle"; }
    inroot 60 "./ra gpu-check --dry-run" >"$TMP/dry-root.log" 2>&1 \
        || { cat "$TMP/dry-root.log" >&2; fail "./ra gpu-check --dry-run failed in the bare root"; }
    echo "time: libraries in the root $(took "$t") s"

    hint() { grep -q 'plm_rsh_agent' "$1" && echo "the bundle's Open MPI wants ssh/rsh to start its local daemon: ra must set OMPI_MCA_plm=isolated where neither is found" >&2; }
    t=$(now)
    if ! got=$(inroot 120 "./ra runahead --model models/stories260K.bin --prompt-ids 1 --generate 200 --output ids --backend cpu" \
            2>"$TMP/golden.err"); then
        tail -n 20 "$TMP/golden.err" >&2; hint "$TMP/golden.err"; fail "bare root: ./ra runahead (stories260K, 200 tokens) failed"
    else
        got=$(echo "$got" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
        [ "$got" = "$expected" ] || fail "bare root: stories260K's 200 greedy tokens differ from the reference: '$got'"
    fi
    echo "time: golden, 200 tokens $(took "$t") s"

    t=$(now)
    args="--model models/stories260K.bin --prompt-ids \"$prompt\" -n 16 --ignore-eos -o ids --backend cpu --method kvr"
    if ! one=$(inroot 120 "./ra runahead $args" 2>"$TMP/one.err"); then
        tail -n 20 "$TMP/one.err" >&2; hint "$TMP/one.err"; fail "bare root: runahead on 1 rank failed"
    elif ! two=$(inroot 180 "./ra mpirun -np 2 --oversubscribe runahead $args" 2>"$TMP/two.err"); then
        tail -n 20 "$TMP/two.err" >&2; hint "$TMP/two.err"; fail "bare root: ./ra mpirun -np 2 runahead --method kvr failed"
    else
        [ "$(echo "$one" | wc -w)" -eq 16 ] || fail "bare root: 1 rank gave '$one', not 16 ids"
        [ "$two" = "$one" ] || fail "bare root: KV-Runahead on 2 ranks gave '$two', 1 rank '$one'"
        # Where runahead links no CUDA library (the backend a module, lib/librunahead-cuda.so,
        # loaded only for --backend cuda), the CPU path runs with none in sight.
        if ! grep -Eq '[[:space:]]lib(cudart|cublas|nccl)' "$TMP/ldd-bare"; then
            if ! nocuda=$(cuda_home="" inroot 120 "./ra runahead $args" 2>"$TMP/nocuda.err"); then
                tail -n 20 "$TMP/nocuda.err" >&2; fail "bare root: runahead --backend cpu failed without the CUDA libraries"
            else
                [ "$nocuda" = "$one" ] || fail "bare root: without the CUDA libraries runahead gave '$nocuda', with them '$one'"
            fi
        fi
    fi
    echo "time: kvr, 1 and 2 ranks $(took "$t") s"

    t=$(now)
    inroot 120 "./ra bin/tests/test_golden" >"$TMP/test_golden.log" 2>&1 \
        || { tail -n 20 "$TMP/test_golden.log" >&2; fail "bare root: test_golden failed"; }
    inroot 180 "./ra mpirun -np 2 --oversubscribe bin/tests/test_chain models/stories260K.bin" >"$TMP/test_chain.log" 2>&1 \
        || { tail -n 20 "$TMP/test_chain.log" >&2; hint "$TMP/test_chain.log"; fail "bare root: test_chain on 2 ranks failed"; }
    echo "time: test_golden, test_chain on 2 ranks $(took "$t") s"
}
bare_root
cleanup
echo "time: all $(took "$t_all") s"
# The unpacked bundle (150 MB) and the archive stay only for a failure's post-mortem.
[ "$failures" -ne 0 ] || rm -rf "$TMP/host" "$TMP/rb.tar.xz"
finish
