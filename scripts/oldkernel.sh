#!/usr/bin/env bash
# oldkernel.sh: iocorr on a real older kernel. Boots Debian 12's own kernel
# (6.1, the package linux-image-amd64 depends on) in qemu (TCG: no KVM
# needed) with an initramfs of busybox, the release's static iocorr (make
# release) and the ground-truth toucher, and an ext4 image on a virtio disk holding a small model. In the
# guest it runs `iocorr doctor` and `iocorr record --cold` of the toucher
# (which ingests), then `iocorr query --by tensor`; here it checks that:
#   - the kernel booted is the one asked for, and iocorr started on it;
#   - doctor's capability table is what that kernel has: each capability
#     of a feature 6.1 lacks (uprobe_multi 6.6, the readahead tracepoints
#     6.18, mm_filemap_fault 6.12, io_uring_submit_req 6.4) takes its
#     fallback or is NA, naming the feature "not in this kernel";
#   - the record holds the toucher's faults with their file offsets: one
#     major fault on each touched tensor, none on the others, and as many
#     as the toucher's own rusage says (its majflt).
#
#   scripts/oldkernel.sh [KERNEL.deb]     (root; qemu-system-x86, busybox-static)
#   ARCH=arm64 scripts/oldkernel.sh        (qemu-system-arm; dpkg --add-architecture arm64)
#
# KERNEL.deb defaults to Debian's linux-image-6.1.0-*-$ARCH that apt
# downloads into $IOCORR_CACHE/oldkernel (arm64: with busybox-static:arm64).
# On arm64 the user faults take the perf page-faults path: arm64 has no
# exceptions:page_fault_user. The guest's console is kept in
# $WORK/console.log (WORK is printed; KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
cache=${IOCORR_CACHE:-/var/cache/iocorr}/oldkernel
mkdir -p "$cache"
fail() { echo "oldkernel.sh: $*" >&2; exit 1; }
arch=${ARCH:-amd64}
case $arch in
amd64) qemu=(qemu-system-x86_64 -machine q35 -cpu max) console=ttyS0 goarch=amd64 ;;
# pauth-impdef: Debian's arm64 kernel signs return addresses (pointer
# authentication) in its functions, and TCG's emulation of the
# architected QARMA cipher is slow: on an Intel host the guest ran out of
# its 15 minutes halfway, and with the implementation-defined cipher (one
# a real CPU may have; the kernel cannot tell) the whole script took
# 3.1 minutes there.
arm64) qemu=(qemu-system-aarch64 -machine virt -cpu max,pauth-impdef=on) console=ttyAMA0 goarch=arm64 ;;
*) fail "ARCH=$arch: amd64 or arm64" ;;
esac
for tool in "${qemu[0]}" busybox mkfs.ext4; do
	command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install qemu-system-x86 qemu-system-arm busybox-static e2fsprogs)"
done
# fetch PKG: the .deb of a package of $arch, from the cache or apt.
fetch() {
	local deb
	deb=$(ls "$cache/${1%%:*}_"*"_$arch.deb" 2>/dev/null | head -1 || true)
	if [ -z "$deb" ]; then
		(cd "$cache" && apt-get download "${1%%:*}:$arch") >&2 || fail "apt-get download ${1%%:*}:$arch failed"
		deb=$(ls "$cache/${1%%:*}_"*"_$arch.deb" | head -1)
	fi
	echo "$deb"
}

deb=${1:-}
if [ -z "$deb" ]; then
	pkg=$(apt-cache depends "linux-image-$arch:$arch" | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	[ -n "$pkg" ] || fail "apt knows no kernel linux-image-$arch depends on"
	deb=$(fetch "$pkg")
fi
work=$(mktemp -d /tmp/iocorr-oldkernel.XXXXXX)
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT
echo "oldkernel.sh: $deb, work in $work" >&2

dpkg-deb -x "$deb" "$work/pkg"
vmlinuz=$(ls "$work"/pkg/boot/vmlinuz-*)
release=${vmlinuz##*/vmlinuz-}
mods="$work/pkg/lib/modules/$release/kernel"

# The initramfs: busybox, the static binaries, the modules the disk needs
# (Debian builds virtio and ext4 as modules), loaded by /init in a few
# passes so that each finds the ones it depends on.
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,mnt,tmp,lib/modules}
if [ "$arch" = amd64 ]; then
	cp "$(command -v busybox)" "$root/bin/busybox"
else
	dpkg-deb -x "$(fetch busybox-static)" "$work/busybox"
	cp "$work/busybox/bin/busybox" "$root/bin/busybox"
fi
# The guest runs the release binary itself (make release's, static and
# stripped): it proves what a user downloads runs doctor and records on a
# machine with no Go, clang or node. Only this arch's binary is made, so
# that the two guests of CI, started at once, never build the same file.
bin="dist/iocorr-$(make -s version)-linux-$goarch"
make -s "$bin" >&2
# A static binary has no program interpreter (no PT_INTERP).
! readelf -l "$bin" | grep -q INTERP || fail "$bin is not static: it names an interpreter"
echo "oldkernel.sh: the guest runs $bin ($(stat -c %s "$bin") bytes)" >&2
cp "$bin" "$root/bin/iocorr"
CGO_ENABLED=0 GOARCH=$goarch go build -trimpath -o "$root/bin/toucher" ./testdata/toucher
go build -trimpath -o "$work/iocorr" ./cmd/iocorr
for m in drivers/virtio/virtio drivers/virtio/virtio_ring drivers/virtio/virtio_mmio drivers/virtio/virtio_pci_modern_dev \
	drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci drivers/block/virtio_blk \
	lib/crc16 crypto/crc32c_generic fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4; do
	# Built in where the package has no module of it (arm64: virtio).
	if [ -e "$mods/$m.ko" ]; then cp "$mods/$m.ko" "$root/lib/modules/"; fi
done

# The model on an ext4 disk, and three pages to touch: the second page
# wholly inside each of three tensors.
mkdir -p "$work/disk"
"$work/iocorr" synth -o "$work/disk/m.gguf" --layers 2 --embd 256 --ff 512 --heads 4 >&2
touched="blk.0.attn_q.weight blk.1.ffn_up.weight output.weight"
pages=$("$work/iocorr" inspect --format csv "$work/disk/m.gguf" | awk -F, -v want="$touched" '
	BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) t[w[i]] = 1 }
	{ gsub(/"/, "") } # every text cell is quoted; no name here has a comma
	t[$1] { p = int(($4 + 4095) / 4096) + 1; if ((p + 1) * 4096 > $4 + $5) exit 1; out = out (out ? "," : "") p }
	END { print out }')
[ "$(echo "$pages" | tr ',' '\n' | wc -l)" -eq 3 ] || fail "cannot place a page in each of $touched"
truncate -s 64M "$work/disk.img"
mkfs.ext4 -q -d "$work/disk" "$work/disk.img"

cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tracefs nodev /sys/kernel/tracing
mount -t cgroup2 nodev /sys/fs/cgroup
for pass in 1 2 3; do for m in /lib/modules/*.ko; do insmod \$m 2>/dev/null; done; done
mount -t ext4 /dev/vda /mnt || echo "@@@ mount failed"
echo "@@@ kernel \$(uname -r)"
echo "@@@ doctor"
iocorr doctor
echo "@@@ doctor exit \$?"
for without in "" bpf_loop; do
	echo "@@@ record \$without"
	IOCORR_WITHOUT=\$without iocorr record -o /mnt/run\$without --cold --model /mnt/m.gguf -- toucher -file /mnt/m.gguf -pages $pages
	echo "@@@ record \$without exit \$?"
	echo "@@@ query \$without"
	iocorr query -i /mnt/run\$without --by tensor --format csv
	echo "@@@ query \$without exit \$?"
done
# The pagecache tier: recorded, its page cache on a path (6.1 counts a
# bpf_loop callback's stack with its caller's: the programs keep under its
# 512 bytes together).
echo "@@@ record pagecache"
iocorr record -o /mnt/runpagecache --probe pagecache --cold --model /mnt/m.gguf -- toucher -file /mnt/m.gguf -pages $pages
echo "@@@ record pagecache exit \$?"
echo "@@@ query pagecache"
iocorr query -i /mnt/runpagecache --by tensor --format csv
echo "@@@ query pagecache exit \$?"
echo "@@@ meta pagecache"
tr -d '\n' </mnt/runpagecache/meta.json | grep -o '"name": *"page cache"[^}]*'
umount /mnt
echo "@@@ done"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# TCG: minutes, not seconds; the timeout bounds a guest that hangs.
# thread=single: with one host thread per vCPU (MTTCG), a vCPU can go on
# executing a stale translation of kernel text another vCPU just patched.
# Attaching a syscall tracepoint patches syscall_trace_enter's static
# branch through int3 while the other vCPU makes syscalls, and 1 guest in
# 3 then spun at that int3 on both vCPUs for good (the soft lockups of two
# CI runs; the NMI backtrace showed the int3 trap while memory already held
# the patched jmp). Two vCPUs stay, so per-CPU paths are still exercised.
# softlockup_panic: a lockup ends the guest at once, its panic on the console.
timeout "${OLDKERNEL_TIMEOUT:-900}" "${qemu[@]}" -accel tcg,thread=single -smp 2 -m 2048 \
	-kernel "$vmlinuz" -initrd "$work/initrd.gz" -append "console=$console panic=-1 softlockup_panic=1 quiet" \
	-drive "file=$work/disk.img,if=virtio,format=raw" -display none -serial "file:$work/console.log" \
	-no-reboot || fail "qemu failed or timed out; the console's end:
$(tail -30 "$work/console.log")"
log="$work/console.log"
tr -d '\r' <"$log" >"$log.txt"
log="$log.txt"
section() { awk -v s="@@@ $1" '$0 == s { on = 1; next } /^@@@ / { on = 0 } on' "$log"; }

grep -q "^@@@ kernel $release\$" "$log" || fail "the guest did not run $release:
$(tail -30 "$log")"
! grep -q '^@@@ mount failed$' "$log" || fail "the guest could not mount its ext4 virtio disk:
$(grep -i 'virtio\|vda\|ext4\|insmod' "$log" | tail -20)"
grep -q '^@@@ done$' "$log" || fail "the guest did not finish:
$(tail -30 "$log")"
for step in doctor "record " "query " "record bpf_loop" "query bpf_loop" "record pagecache" "query pagecache"; do
	grep -q "^@@@ $step exit 0\$" "$log" || fail "iocorr $step failed on $release:
$(section "$step" | tail -30)"
done

# Doctor: the capability rows of what 6.1 lacks.
doctor=$(section doctor)
echo "$doctor" | grep '^capability\|capability ' >&2 || true
check_cap() { # capability, feature it lacks
	echo "$doctor" | grep -F "capability $1" | grep -F "$2" | grep -qF "not in this kernel" ||
		fail "doctor on $release does not say $1 lacks $2:
$(echo "$doctor" | grep -F "capability $1")"
}
check_cap "op probes" "uprobe_multi"
check_cap "readahead trigger" "readahead/page_cache_sync_ra"
check_cap "page cache" "filemap/mm_filemap_fault"
check_cap "io_uring" "io_uring_submit_req"
[ "$arch" = amd64 ] || check_cap "faults" "page_fault_user"
if echo "$doctor" | grep -F "capability loops" | grep -qi "fallback"; then
	fail "doctor on $release: loops took a fallback, but 6.1 has bpf_loop"
fi

# Each record, on the primary paths and with bpf_loop switched off (the
# bounded loops then pass this older verifier): one major fault per
# touched tensor, none elsewhere, and the toucher's own count.
echo "oldkernel.sh: $release: the pagecache tier's page cache: $(section "meta pagecache")" >&2
# 6.1's verifier takes the page-cache programs since the run replacement
# moved out of page_add's own frame: the tier records there, never NA.
section "meta pagecache" | grep -q '"path"' ||
	fail "the pagecache tier on $release took no path: $(section "meta pagecache")"
for without in "" bpf_loop pagecache; do
majflt=$(section "record $without" | sed -n 's/.*"majflt": *\([0-9]*\).*/\1/p' | head -1)
[ -n "$majflt" ] || fail "the toucher reported no majflt:
$(section "record $without" | tail -20)"
section "query $without" | awk -F, -v want="$touched" -v majflt="$majflt" '
	BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) t[w[i]] = 1 }
	/^#/ || /^iocorr: / { next }
	{ gsub(/"/, "") } # every text cell is quoted; no name here has a comma
	!hdr && /^tensor,/ { for (i = 1; i <= NF; i++) col[$i] = i; tc = col["tensor"]; mc = col["major_faults"]; hdr = 1; next }
	hdr { name = $tc; m = $mc; sum += m
	  if ((name in t) && m != 1) { print "tensor " name ": " m " major faults, touched one page" > "/dev/stderr"; bad = 1 }
	  if (!(name in t) && name !~ /^\[/ && m != 0) { print "tensor " name ": " m " major faults, untouched" > "/dev/stderr"; bad = 1 }
	  if (name in t) seen[name] = 1 }
	END { for (k in t) if (!seen[k]) { print "no row for " k > "/dev/stderr"; bad = 1 }
	      if (sum != majflt) { print sum " major faults recorded, the toucher counted " majflt > "/dev/stderr"; bad = 1 }
	      exit bad }' || fail "the record on $release without '$without' is not the toucher's:
$(section "query $without")"
done
echo "oldkernel.sh: $release: iocorr started, doctor names what the kernel lacks, and the toucher's $majflt major faults are on its tensors" >&2
