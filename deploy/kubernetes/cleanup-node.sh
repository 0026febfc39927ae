#!/bin/sh
# cleanup-node.sh: removes what kurma leaves on a node once it is
# uninstalled (docs/runtimes.md, "Upgrades, restarts and uninstalling"):
# the networks' bridges, kurma's routes and rules of the Networks across
# the nodes, the plugins' nftables tables (portmap's cni_hostport, the
# bridge plugin's masquerade, kurma-netpol's), flannel's links and tables
# if a flanneld was killed before it could remove them, kurma-cni and its
# conflist if still there, what /var/lib/kurma holds (journal, images, the
# networks' state files and leases) and /run/kurma.
#
# Run it as root on each node after `kubectl delete -f` of kurma's
# manifest, once no pod attached through kurma is left, and before another
# CNI is installed (it would share portmap's table):
#
#   sh cleanup-node.sh [-n] [BRIDGE...]
#
# BRIDGE: a bridge of your own Networks' configs, besides the manifests'
# kurma0 and kurma1; a bridge that still has an interface on it is kept
# (and the script exits 1). -n: say what would be removed, remove nothing.
set -u

dry=
if [ "${1:-}" = "-n" ]; then
	dry=1
	shift
fi
bridges="kurma0 kurma1 $*"
status=0

say() { echo "cleanup-node: $*"; }
# run runs its arguments, or only says them with -n; a failure is named
# and makes the exit status 1.
run() {
	if [ -n "$dry" ]; then
		say "would run: $*"
		return 0
	fi
	if ! "$@"; then
		say "failed: $*" >&2
		status=1
	fi
}

if [ "$(id -u)" != 0 ]; then
	say "must run as root" >&2
	exit 2
fi
# A kurmad in this network namespace (kurma's pod is hostNetwork) serves
# the node still.
netns=$(readlink /proc/self/ns/net)
for c in /proc/[0-9]*/comm; do
	p=${c%/comm}
	if [ "$(cat "$c" 2>/dev/null)" = kurmad ] && [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$netns" ]; then
		say "kurmad runs (pid ${p#/proc/}): uninstall kurma first (kubectl delete -f its manifest)" >&2
		exit 2
	fi
done
if [ -d /run/kurma/netns ] && [ -n "$(ls -A /run/kurma/netns 2>/dev/null)" ]; then
	say "pods attached through kurma are left (/run/kurma/netns: $(ls /run/kurma/netns | tr '\n' ' ')): delete them first" >&2
	exit 2
fi

# The networks' bridges, and flannel's vxlan links.
# link NAME prints NAME's line of `ip -o link show`, nothing when there is
# no such link (sysfs may show another network namespace's).
link() { ip -o -d link show dev "$1" 2>/dev/null; }
for b in $bridges; do
	l=$(link "$b")
	[ -n "$l" ] || continue
	case "$l" in
	*" bridge forward_delay "*) ;;
	*)
		say "kept $b: not a bridge" >&2
		status=1
		continue
		;;
	esac
	ports=$(ip -o link show master "$b" | awk -F': ' '{ sub(/@.*/, "", $2); printf "%s ", $2 }')
	if [ -n "$ports" ]; then
		say "kept bridge $b: interfaces on it: $ports" >&2
		status=1
		continue
	fi
	say "bridge $b"
	run ip link del "$b"
done
for l in flannel.1 flannel-v6.1; do
	if [ -n "$(link "$l")" ]; then
		say "flannel's link $l"
		run ip link del "$l"
	fi
done

# kurma-node's routes and rules of the Networks across the nodes: routing
# protocol 107.
for f in -4 -6; do
	if [ -n "$(ip "$f" route show proto 107 2>/dev/null)" ]; then
		say "IPv${f#-} routes of proto 107"
		run ip "$f" route flush proto 107
	fi
	n=0
	while ip "$f" rule show 2>/dev/null | grep -q ' proto 107'; do
		if [ -n "$dry" ]; then
			say "would remove the IPv${f#-} rules of proto 107:"
			ip "$f" rule show | grep ' proto 107'
			break
		fi
		n=$((n + 1))
		if [ "$n" -gt 1000 ] || ! ip "$f" rule del protocol 107; then
			say "failed: removing the IPv${f#-} rules of proto 107" >&2
			status=1
			break
		fi
	done
done

# The plugins' nftables tables: portmap's (hostPort), the bridge plugin's
# masquerade, kurma-netpol's, flannel's.
if command -v nft >/dev/null 2>&1; then
	tables=$(nft list tables 2>/dev/null | awk '$3 ~ /^(cni_hostport|cni_plugins_masquerade|kurma-netpol-.*|flannel-ipv4|flannel-ipv6)$/ { print $2, $3 }')
	while read -r family name; do
		[ -n "$name" ] || continue
		say "nftables table $family $name"
		run nft delete table "$family" "$name"
	done <<EOF
$tables
EOF
fi

# kurma-cni and its conflist, which the uninstall removes unless kurma-node
# could not tell an uninstall from a restart.
for f in /etc/cni/net.d/00-kurma.conflist /opt/cni/bin/kurma-cni; do
	if [ -e "$f" ]; then
		say "$f"
		run rm -f "$f"
	fi
done

# Files: what is mounted below /var/lib/kurma (a network's state file,
# loop-mounted, should a kurmad have been killed) and prepare-host's shared
# bind of /run/kurma are unmounted, the deepest first; then what the two
# directories hold goes, never crossing into another filesystem. A
# directory that is a mount of its own (a disk for /var/lib/kurma) stays,
# empty.
for d in /var/lib/kurma /run/kurma; do
	[ -d "$d" ] || continue
	self=
	[ "$d" = /run/kurma ] && self=1
	n=0
	while m=$(awk -v d="$d" -v self="$self" '(self && $5 == d) || index($5, d "/") == 1 { print length($5), $5 }' /proc/self/mountinfo |
		sort -rn | head -n 1 | cut -d' ' -f2-) && [ -n "$m" ]; do
		say "unmount $m"
		if [ -n "$dry" ]; then
			break
		fi
		n=$((n + 1))
		if [ "$n" -gt 1000 ] || ! umount "$m"; then
			say "failed: unmount $m" >&2
			status=1
			break
		fi
	done
	say "$d"
	run find "$d" -xdev -mindepth 1 -delete
	[ -n "$dry" ] || rmdir "$d" 2>/dev/null || true
done
exit "$status"
