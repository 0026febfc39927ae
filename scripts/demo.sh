#!/usr/bin/env bash
# make demo: build what the demo runs, boot kurmad on ${DEMO_CONFIG:-examples/pod_networks.json}
# (the Kurma spec's "mynet" bridge network), attach two pods, ping one from
# the other, tear everything down, remove what the demo made on the host
# (its state and run dirs, its log, the bridge and nft table the bridge
# plugin leaves by design, when the demo made them) and show that nothing
# is left. Safe to run twice in a row; test/e2e's TestMakeDemo holds it to
# leaving the host as it found it.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=/var/lib/kurma-demo
RUN=/run/kurma-demo
SOCK=$RUN/kurmad.sock
CONFIG=${DEMO_CONFIG:-examples/pod_networks.json}
KURMACTL="bin/kurmactl --socket $SOCK"
STEPS=10
n=0
step() { n=$((n + 1)); printf '\n\033[1m== [%d/%d] %s\033[0m\n' "$n" "$STEPS" "$*"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# What the demo may make on the host, as it was before: only what was not
# there goes at the end (tests, or an installed kurma, may run beside it).
bridges=(mynet0 webnet0)
masq_table="inet cni_plugins_masquerade"
had_link=()
for b in "${bridges[@]}"; do ip link show "$b" >/dev/null 2>&1 && had_link+=("$b"); done
had_table=no; nft list table $masq_table >/dev/null 2>&1 && had_table=yes
tables_before=$(nft list tables 2>/dev/null | sort)
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
for d in "$STATE" "$RUN"; do
  if [ -e "$d" ]; then
    echo "make demo: $d exists (left by a demo that failed?): remove it, or see what is in it, first" >&2
    exit 1
  fi
done

step "building kurmad, kurma-init, kurmactl, kurma-agent and kurma-cni (make build)"
make --no-print-directory -s build
step "building the plugin image the demo's networks run (images/out/cni-netplugin.aci; not the Kubernetes-only flannel image)"
make --no-print-directory -s netplugin

LOG=$(mktemp /tmp/kurmad-demo.XXXXXX.log)
kurmad_pid=""
cleanup() {
  if [ -n "$kurmad_pid" ] && kill -0 "$kurmad_pid" 2>/dev/null; then
    kill -TERM "$kurmad_pid"; wait "$kurmad_pid" 2>/dev/null || true
  fi
  if [ -n "$kurmad_pid" ]; then
    echo "make demo failed; kurmad's log is $LOG, its state and run dirs $STATE and $RUN" >&2
  fi
}
trap cleanup EXIT

# --stop-plugins: the demo removes everything it made, so its kurmad's stop
# is an uninstall's (a plain SIGTERM leaves the plugin containers running
# for the next kurmad to adopt).
step "starting kurmad on $CONFIG (state $STATE, run $RUN, log $LOG)"
bin/kurmad --config "$CONFIG" --state-dir "$STATE" --run-dir "$RUN" --stop-plugins >"$LOG" 2>&1 &
kurmad_pid=$!
for _ in $(seq 1 300); do
  [ -S "$SOCK" ] && break
  kill -0 "$kurmad_pid" 2>/dev/null || { cat "$LOG"; echo "kurmad exited" >&2; exit 1; }
  sleep 0.1
done

step "waiting until mynet, the network the pods join, runs (kurmactl wait)"
$KURMACTL wait --networks mynet --timeout 2m
$KURMACTL version
$KURMACTL net ls

step "launching two pods on mynet"
pod1=$($KURMACTL pod create --name demo-1 --net mynet -o json)
pod2=$($KURMACTL pod create --name demo-2 --net mynet -o json)
field() { jq -r "$1" <<<"$2"; }
id1=$(field .id "$pod1"); ns1=$(field .netns "$pod1")
id2=$(field .id "$pod2")
ip2=$(field '.attachments[0].result.ips[0].address' "$pod2"); ip2=${ip2%/*}
$KURMACTL pod ls

step "pod demo-1 pings pod demo-2 ($ip2) from inside its network namespace"
nsenter --net="$ns1" ping -c 3 -W 2 "$ip2"

step "deleting the pods"
$KURMACTL pod rm "$id1" "$id2"
$KURMACTL pod ls

# Each network's state dir is a filesystem of its own, mounted while kurmad
# runs: its leases are counted before the stop.
leases=$(find "$STATE/networks" -path '*/networks/*' -type f -name '10.*' 2>/dev/null | grep -c . || true)

step "stopping kurmad and its plugin containers"
kill -TERM "$kurmad_pid"; wait "$kurmad_pid" || true
kurmad_pid=""
trap - EXIT

step "removing what the demo made on the host"
gone() { printf '  removed %s\n' "$*"; }
for b in "${bridges[@]}"; do
  case " ${had_link[*]-} " in *" $b "*) continue ;; esac
  # The bridge plugin leaves its bridge by design; it goes once no port
  # (no pod's veth) is left on it.
  if ip link show "$b" >/dev/null 2>&1 && [ -z "$(ip -o link show master "$b" 2>/dev/null)" ]; then
    ip link del "$b" && gone "bridge $b"
  fi
done
# Likewise the nft table of bridge's ipMasq, once no rule for a pod is left.
if [ "$had_table" = no ] && nft list table $masq_table >/dev/null 2>&1 &&
   ! nft list chain $masq_table masq_checks 2>/dev/null | grep -q saddr; then
  nft delete table $masq_table && gone "nft table $masq_table"
fi
if [ "$forward_before" = 0 ] && [ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ]; then
  echo 0 >/proc/sys/net/ipv4/ip_forward && gone "net.ipv4.ip_forward=1 (the bridge plugin's isGateway sets it)"
fi
if grep -qE " ($STATE|$RUN)[/ ]" /proc/self/mountinfo; then
  echo "make demo: something is still mounted under $STATE or $RUN; kept them" >&2
else
  rm -rf "$STATE" "$RUN" && gone "$STATE (images, journal, the networks' state) and $RUN"
fi
rm -f "$LOG" && gone "kurmad's log $LOG"

step "what is left"
leftover=0
check() { # label, count
  printf '  %-58s %s\n' "$1" "$2"
  [ "$2" = 0 ] || leftover=1
}
count() { grep -c . || true; }
# Only this demo's objects count: tests may run beside it on the same host.
cg="kurma-$(printf %s "$RUN" | sha256sum | cut -c1-8)"   # networkpod's cgroup parent for this run dir
made_links=0
for b in "${bridges[@]}"; do
  case " ${had_link[*]-} " in *" $b "*) continue ;; esac
  ip link show "$b" >/dev/null 2>&1 && made_links=$((made_links + 1))
done
check "bridges the demo made (${bridges[*]})"            "$made_links"
check "veth links on bridge mynet0"                       "$(ip -o link show master mynet0 type veth 2>/dev/null | count)"
check "nft tables the demo made"                          "$(comm -13 <(echo "$tables_before") <(nft list tables 2>/dev/null | sort) | count)"
check "nft masquerade rules for the demo's pods"          "$(nft list ruleset 2>/dev/null | grep -c 'saddr 10\.10\.' || true)"
check "mounts under $RUN or $STATE"                        "$(grep -E " ($STATE|$RUN)[/ ]" /proc/self/mountinfo | count)"
check "pod network namespaces"                            "$(find "$RUN/netns" -mindepth 1 2>/dev/null | count)"
check "host-local IP reservations of the deleted pods"    "$leases"
check "plugin container cgroups"                          "$(find /sys/fs/cgroup -maxdepth 3 -name "$cg" 2>/dev/null | count)"
check "plugin container processes"                        "$(cat $(find /sys/fs/cgroup -maxdepth 4 -path "*/$cg/*" -name cgroup.procs 2>/dev/null) /dev/null | count)"
check "files under $STATE (images, journal, state)"       "$(find "$STATE" 2>/dev/null | count)"
check "files under $RUN"                                   "$(find "$RUN" 2>/dev/null | count)"
check "kurmad's log $LOG"                                  "$(find "$LOG" 2>/dev/null | count)"
[ "$leftover" = 0 ] && say "demo finished: nothing left behind" || { echo "something was left behind" >&2; exit 1; }
