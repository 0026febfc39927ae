#!/usr/bin/env bash
# make demo: boot kurmad on ${DEMO_CONFIG:-examples/pod_networks.json} (the Kurma spec's
# "mynet" bridge network), attach two pods, ping one from the other, tear
# everything down and show that nothing is left. Safe to run twice in a row.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=/var/lib/kurma-demo
RUN=/run/kurma-demo
SOCK=$RUN/kurmad.sock
LOG=$(mktemp /tmp/kurmad-demo.XXXXXX.log)
KURMACTL="bin/kurmactl --socket $SOCK"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

kurmad_pid=""
cleanup() {
  if [ -n "$kurmad_pid" ] && kill -0 "$kurmad_pid" 2>/dev/null; then
    kill -TERM "$kurmad_pid"; wait "$kurmad_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

say "starting kurmad (state $STATE, run $RUN, log $LOG)"
bin/kurmad --config ${DEMO_CONFIG:-examples/pod_networks.json} --state-dir "$STATE" --run-dir "$RUN" >"$LOG" 2>&1 &
kurmad_pid=$!
for _ in $(seq 1 300); do
  [ -S "$SOCK" ] && break
  kill -0 "$kurmad_pid" 2>/dev/null || { cat "$LOG"; echo "kurmad exited" >&2; exit 1; }
  sleep 0.1
done
[ -S "$SOCK" ] || { cat "$LOG"; echo "kurmad did not come up" >&2; exit 1; }
for _ in $(seq 1 100); do
  $KURMACTL net ls -o json | grep -q '"state": *"running"' && break
  sleep 0.1
done
$KURMACTL version

say "kurmactl net ls"
$KURMACTL net ls

say "launching two pods on mynet"
pod1=$($KURMACTL pod create --name demo-1 --net mynet -o json)
pod2=$($KURMACTL pod create --name demo-2 --net mynet -o json)
field() { jq -r "$1" <<<"$2"; }
id1=$(field .id "$pod1"); ns1=$(field .netns "$pod1")
id2=$(field .id "$pod2")
ip2=$(field '.attachments[0].result.ips[0].address' "$pod2"); ip2=${ip2%/*}

say "kurmactl pod ls"
$KURMACTL pod ls

say "pod demo-1 pings pod demo-2 ($ip2) from inside its network namespace"
nsenter --net="$ns1" ping -c 3 -W 2 "$ip2"

say "deleting the pods"
$KURMACTL pod rm "$id1" "$id2"
$KURMACTL pod ls

# Each network's state dir is a filesystem of its own, mounted while kurmad
# runs: its leases are counted before the stop.
leases=$(find "$STATE/networks" -path '*/networks/*' -type f -name '10.*' 2>/dev/null | grep -c . || true)

say "stopping kurmad"
kill -TERM "$kurmad_pid"; wait "$kurmad_pid" || true
kurmad_pid=""

say "what is left"
leftover=0
check() { # label, count
  printf '  %-40s %s\n' "$1" "$2"
  [ "$2" = 0 ] || leftover=1
}
# Only this demo's objects count: tests may run beside it on the same host.
cg="kurma-$(printf %s "$RUN" | sha256sum | cut -c1-8)"   # networkpod's cgroup parent for this run dir
check "veth links on bridge mynet0"   "$(ip -o link show master mynet0 type veth 2>/dev/null | grep -c . || true)"
check "pod network namespaces"        "$(find "$RUN/netns" -mindepth 1 2>/dev/null | grep -c . || true)"
check "mounts under $RUN"             "$(grep -c " $RUN" /proc/self/mountinfo || true)"
check "host-local IP reservations"    "$leases"
check "state dir filesystems mounted"  "$(grep -c " $STATE/networks/" /proc/self/mountinfo || true)"
check "plugin container cgroups"      "$(find /sys/fs/cgroup -maxdepth 3 -name "$cg" 2>/dev/null | grep -c . || true)"
check "plugin container processes"    "$(cat $(find /sys/fs/cgroup -maxdepth 4 -path "*/$cg/*" -name cgroup.procs 2>/dev/null) /dev/null | grep -c . || true)"
check "masquerade rules for pods"     "$(nft list chain inet cni_plugins_masquerade masq_checks 2>/dev/null | grep -c 'saddr' || true)"
ip link del mynet0 2>/dev/null && echo "  (removed the demo's mynet0 bridge, which the bridge plugin leaves by design)"
[ "$leftover" = 0 ] && say "demo finished: nothing left behind" || { echo "something was left behind" >&2; exit 1; }
