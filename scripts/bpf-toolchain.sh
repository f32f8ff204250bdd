#!/usr/bin/env bash
# Checks this machine's BPF toolchain against bpf/TOOLCHAIN, the versions
# that produced the committed objects. Exit 0 when they match (or FORCE=1),
# 2 when they differ, 1 when the check itself cannot run. One line on stderr
# says what differs, so `make generate` never silently produces other bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
pins=bpf/TOOLCHAIN
[ -r "$pins" ] || { echo "bpf-toolchain: cannot read $pins" >&2; exit 1; }

diffs=()
while read -r kind name want; do
	case "$kind" in
	'' | '#'*) continue ;;
	deb)
		have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null) || have="not installed"
		;;
	gomod)
		have=$(go list -m -f '{{.Version}}' "$name" 2>/dev/null) || have="not in go.mod"
		;;
	*)
		echo "bpf-toolchain: $pins: unknown kind \"$kind\"" >&2
		exit 1
		;;
	esac
	[ "$have" = "$want" ] || diffs+=("$name $have (pinned $want)")
done <"$pins"

[ ${#diffs[@]} -eq 0 ] && exit 0
line=$(IFS=';'; echo "${diffs[*]}" | sed 's/;/, /g')
if [ "${FORCE:-}" = 1 ]; then
	echo "bpf-toolchain: FORCE=1: generating with $line: the objects will not be byte-identical to the committed ones" >&2
	exit 0
fi
echo "bpf-toolchain: this machine has $line: the objects would not be byte-identical to the committed ones; install the pinned versions or run with FORCE=1" >&2
exit 2
