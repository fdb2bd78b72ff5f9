#!/usr/bin/env bash
# shellcheck disable=SC2015 # "A && B || fail" is meant: fail when either fails.
# examples/twohost/run.sh: the reference serving stack on "two hosts" made of two
# network namespaces joined by one veth pair (10.200.0.1/30 and 10.200.0.2/30,
# addresses that exist only inside them). The prefill engine runs in one, the
# decode engine and the proxy in the other, and the KV cache crosses the veth
# over NIXL: UCX on its TCP transport, and LIBFABRIC on its tcp/sockets
# providers. For each backend the script checks completions against the
# decode engine's local answers, runs a short benchmark through the proxy,
# checks that every socket of the programs is on 10.200.0.x or loopback in
# their namespace, and prints the KV bytes the veth carried. See README.md.
#
#   sudo examples/twohost/run.sh                       # both backends, pull connector
#   sudo examples/twohost/run.sh -backend LIBFABRIC -connector push
#
# Exit status: 0 passed, 1 failed, 2 usage, 77 skipped (not root, no NIXL, no
# iproute2, or namespaces cannot be made here); a skip says why on stderr.
# The namespaces, the veth and every program started are removed on every exit.
set -uo pipefail

usage() {
	cat >&2 <<'EOF'
usage: run.sh [-backend UCX|LIBFABRIC|both] [-connector pull|push] [-num-prompts N]
              [-input-len N] [-output-len N] [-rate R] [-out DIR] [-bin DIR] [-name NAME]
  -backend      NIXL backend(s) to run over (both: UCX, then LIBFABRIC)      [both]
  -connector    gonixl connector: pull (NixlConnector) or push                [pull]
  -num-prompts, -input-len, -output-len, -rate: the benchmark             [20 512 16 4]
  -out DIR      logs and benchmark results (kept)                      [a new temp dir]
  -bin DIR      prebuilt engine, proxy and bench (go build -tags nixl)   [built into -out]
  -name NAME    prefix of the namespaces and veth, [a-z0-9], <= 10 chars     [gnx<pid>]
EOF
	exit 2
}

backends=both connector=pull prompts=20 input_len=512 output_len=16 rate=4 out='' bin='' name=gnx$$
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || usage
	case $1 in
	-backend | --backend) backends=$2 ;;
	-connector | --connector) connector=$2 ;;
	-num-prompts | --num-prompts) prompts=$2 ;;
	-input-len | --input-len) input_len=$2 ;;
	-output-len | --output-len) output_len=$2 ;;
	-rate | --rate) rate=$2 ;;
	-out | --out) out=$2 ;;
	-bin | --bin) bin=$2 ;;
	-name | --name) name=$2 ;;
	*) usage ;;
	esac
	shift 2
done
case $backends in
both) backends="UCX LIBFABRIC" ;;
UCX | ucx) backends=UCX ;;
LIBFABRIC | libfabric) backends=LIBFABRIC ;;
*) echo "twohost: -backend $backends: want UCX, LIBFABRIC or both" >&2 && usage ;;
esac
case $connector in pull | push) ;; *) echo "twohost: -connector $connector: want pull or push" >&2 && usage ;; esac
for n in "$prompts" "$input_len" "$output_len"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "twohost: $n is not a positive integer" >&2 && usage; }
done
[[ $name =~ ^[a-z0-9]{1,10}$ ]] || { echo "twohost: -name $name: want 1-10 of [a-z0-9] (veth names are 15 bytes at most)" >&2 && usage; }

skip() {
	echo "twohost: SKIP: $*" >&2
	exit 77
}
log() { echo "twohost: $*"; }

# --- what the script needs; anything missing is a skip, not a failure
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces and a veth pair (ip netns, ip link); run it as root, e.g. sudo $0"
command -v ip >/dev/null 2>&1 || skip "needs iproute2's ip command (apt-get install iproute2)"
command -v curl >/dev/null 2>&1 || skip "needs curl"
command -v ss >/dev/null 2>&1 || skip "needs ss (iproute2) to check the programs' sockets"
NIXL_PREFIX=${NIXL_PREFIX:-/opt/nvidia/nvda_nixl}
plugins=${NIXL_PLUGIN_DIR:-$NIXL_PREFIX/lib/x86_64-linux-gnu/plugins}
[ -f "$NIXL_PREFIX/include/nixl.h" ] || skip "no NIXL at $NIXL_PREFIX (no include/nixl.h); install NIXL or set NIXL_PREFIX"
for b in $backends; do
	[ -f "$plugins/libplugin_$b.so" ] || skip "no NIXL $b plugin at $plugins/libplugin_$b.so (set NIXL_PLUGIN_DIR)"
done

ns_p=$name-p ns_d=$name-d # prefill's and decode's namespaces
dev_p=${name}p dev_d=${name}d # the veth ends, one in each
addr_p=10.200.0.1 addr_d=10.200.0.2
for ns in $ns_p $ns_d; do
	[ ! -e "/run/netns/$ns" ] || { echo "twohost: namespace $ns already exists; pick another -name" >&2 && exit 1; }
done

if [ -z "$out" ]; then out=$(mktemp -d /tmp/twohost.XXXXXX) || exit 1; fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

# --- cleanup on every exit path: the programs started (by pid), anything
# still inside our namespaces, the namespaces, and the veth if still on the host.
pids=()
made_ns=()
# stop_pids: SIGTERM to every program started, SIGKILL after 20 s; it sets
# stop_bad to "pid:status" of each that did not exit 0.
stop_pids() {
	local p i rc
	stop_bad=
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for ((i = 0; i < 200; i++)); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
		rc=$?
		[ "$rc" = 0 ] || stop_bad+=" $p:$rc"
	done
	pids=()
}
cleanup() {
	local rc=$? ns p
	trap - EXIT INT TERM
	stop_pids
	for ns in "${made_ns[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null || echo "twohost: could not remove namespace $ns" >&2
	done
	ip link del "$dev_p" 2>/dev/null
	[ ${#made_ns[@]} -eq 0 ] || log "removed namespaces ${made_ns[*]} (and the veth in them); logs in $out"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	echo "twohost: FAIL: $*" >&2
	exit 1
}

# --- programs
if [ -z "$bin" ]; then
	command -v go >/dev/null 2>&1 || skip "needs the Go toolchain to build the programs (or -bin DIR with them built)"
	bin=$out/bin
	root=$(cd "$(dirname "$0")/../.." && pwd)
	log "building engine, proxy and bench (-tags nixl) into $bin"
	for p in engine proxy bench; do
		(cd "$root" && go build -tags nixl -o "$bin/$p" "./examples/$p") || fail "go build ./examples/$p"
	done
fi
for p in engine proxy bench; do [ -x "$bin/$p" ] || fail "no $bin/$p"; done
export LD_LIBRARY_PATH="$NIXL_PREFIX/lib/x86_64-linux-gnu:$NIXL_PREFIX/lib:$NIXL_PREFIX/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NIXL_PLUGIN_DIR=$plugins

# --- the two hosts
ip netns add "$ns_p" || skip "cannot create a network namespace here (ip netns add $ns_p failed; a container without CAP_SYS_ADMIN?)"
made_ns+=("$ns_p")
ip netns add "$ns_d" || fail "ip netns add $ns_d"
made_ns+=("$ns_d")
ip link add "$dev_p" type veth peer name "$dev_d" || skip "cannot create a veth pair here (ip link add ... type veth failed)"
ip link set "$dev_p" netns "$ns_p" && ip link set "$dev_d" netns "$ns_d" || fail "moving the veth ends into the namespaces"
ip -n "$ns_p" addr add $addr_p/30 dev "$dev_p" && ip -n "$ns_d" addr add $addr_d/30 dev "$dev_d" || fail "addresses"
for ns in $ns_p $ns_d; do ip -n "$ns" link set lo up || fail "lo up in $ns"; done
ip -n "$ns_p" link set "$dev_p" up && ip -n "$ns_d" link set "$dev_d" up || fail "veth up"
log "namespaces $ns_p ($dev_p $addr_p/30: prefill) and $ns_d ($dev_d $addr_d/30: decode, proxy, bench); no other interface but lo, no route off the /30"

# in NS CMD...: run CMD inside namespace NS.
nsx() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@"
}

# wait_ok NS URL PID WHAT: wait (60 s at most) for URL to answer 200 from
# inside NS while PID lives.
wait_ok() {
	local i
	for ((i = 0; i < 600; i++)); do
		kill -0 "$3" 2>/dev/null || fail "$4 exited; its log:$(echo && tail -n 20 "$out/$4.log")"
		[ "$(nsx "$1" curl -s -o /dev/null -m 2 -w '%{http_code}' "$2")" = 200 ] && return 0
		sleep 0.1
	done
	fail "$4 not healthy at $2 after 60 s; its log:$(echo && tail -n 20 "$out/$4.log")"
}

# prompt I N: a prompt of N words (one token per word), unlike every other I.
prompt() {
	local i words=()
	for ((i = 0; i < $2; i++)); do words+=("w$1x$i"); done
	echo "${words[*]}"
}

# completion NS URL PROMPT: the completion's text; fails unless HTTP 200 with
# output_len completion tokens.
completion() {
	local body code
	body=$(nsx "$1" curl -s -m 60 -w '\n%{http_code}' "$2/v1/completions" -H 'Content-Type: application/json' \
		-d "{\"model\":\"twohost\",\"prompt\":\"$3\",\"max_tokens\":$output_len,\"ignore_eos\":true}") || return 1
	code=${body##*$'\n'}
	body=${body%$'\n'*}
	[ "$code" = 200 ] || { echo "HTTP $code: $body" >&2 && return 1; }
	[[ $body == *"\"completion_tokens\":$output_len,"* ]] || { echo "not $output_len completion tokens: $body" >&2 && return 1; }
	sed -n 's/.*"text":"\([^"]*\)".*/\1/p' <<<"$body"
}

# xfers NS URL: an engine's NIXL transfers over its ranks and their mean
# time in ms (vllm:nixl_xfer_time_seconds_count and _sum).
xfers() {
	nsx "$1" curl -s -m 5 "$2/metrics" | awk '/^vllm:nixl_xfer_time_seconds_count/ {n += $NF} /^vllm:nixl_xfer_time_seconds_sum/ {s += $NF}
		END {printf "%d %.1f\n", n, n ? 1000 * s / n : 0}'
}

# veth_bytes NS DEV: tx and rx bytes of DEV.
veth_bytes() {
	nsx "$1" cat "/sys/class/net/$2/statistics/tx_bytes" "/sys/class/net/$2/statistics/rx_bytes" | tr '\n' ' '
}

# check_sockets NS: every TCP/UDP socket in NS is bound to 10.200.0.x or
# loopback (no wildcard, so no listener on every interface), and its peer
# is 10.200.0.x, loopback or none; the list is kept in -out.
check_sockets() {
	local bad
	nsx "$1" ss -tuanpH >"$out/sockets-$1.txt"
	bad=$(awk '{
		l = $5; sub(/:[^:]*$/, "", l); p = $6; sub(/:[^:]*$/, "", p)
		if (l !~ /^(10\.200\.0\.[12]|127\..*)$/ || p !~ /^(10\.200\.0\.[12]|127\..*|0\.0\.0\.0|\*)$/) print
	}' "$out/sockets-$1.txt")
	[ -z "$bad" ] || fail "sockets in $1 off 10.200.0.x and loopback:$(echo && echo "$bad")"
	log "sockets in $1 ($(wc -l <"$out/sockets-$1.txt") TCP/UDP): all on 10.200.0.x or loopback; listening: $(awk '$2=="LISTEN" {print $5}' "$out/sockets-$1.txt" | sort -u | tr '\n' ' ')"
}

# run_backend B: the stack over NIXL backend B, checked and benchmarked.
run_backend() {
	local b=$1 env_p env_d model pp dp xp bp i text local_text moved xfer_ms before after res verified
	# Each namespace shares the host's IPC and file system, so UCX would
	# otherwise move the KV through shared memory (posix/sysv/cma) and never
	# touch the veth: UCX_TLS=tcp keeps it on the TCP transport of the veth.
	# libfabric's tcp and sockets providers take the first interface that is
	# not loopback unless told: both are pinned to the veth. FI_PROVIDER, if
	# set (e.g. sockets), passes through.
	case $b in
	UCX)
		env_p=(UCX_TLS=tcp UCX_NET_DEVICES="$dev_p")
		env_d=(UCX_TLS=tcp UCX_NET_DEVICES="$dev_d")
		;;
	LIBFABRIC)
		env_p=(FI_TCP_IFACE="$dev_p" FI_SOCKETS_IFACE="$dev_p")
		env_d=(FI_TCP_IFACE="$dev_d" FI_SOCKETS_IFACE="$dev_d")
		;;
	esac
	local common=(env NIXL_LOG_LEVEL="${NIXL_LOG_LEVEL:-INFO}" UCX_LOG_LEVEL="${UCX_LOG_LEVEL:-warn}" UCX_ERROR_SIGNALS=)
	model=(-model qwen2.5-7b -tp 2 -num-blocks 384 -served-model-name twohost -agent nixl -nixl-backend "$b"
		-connector "$connector" -drain-timeout 10s -connector-log=false)
	log "=== $b, $connector connector: prefill in $ns_p, decode + proxy + bench in $ns_d (qwen2.5-7b KV geometry, TP 2, 384 blocks per rank)"
	log "    prefill env: ${env_p[*]}; decode env: ${env_d[*]}"
	read -r before _ <<<"$(veth_bytes "$ns_p" "$dev_p")"

	ip netns exec "$ns_p" "${common[@]}" "${env_p[@]}" "$bin/engine" "${model[@]}" -role prefill -engine-id "prefill-$b" \
		-host $addr_p -port 8100 -side-channel-host $addr_p -side-channel-port 5600 >"$out/prefill-$b.log" 2>&1 &
	pp=$!
	pids+=("$pp")
	ip netns exec "$ns_d" "${common[@]}" "${env_d[@]}" "$bin/engine" "${model[@]}" -role decode -engine-id "decode-$b" \
		-host $addr_d -port 8200 -side-channel-host $addr_d -side-channel-port 5600 >"$out/decode-$b.log" 2>&1 &
	dp=$!
	pids+=("$dp")
	wait_ok "$ns_p" http://$addr_p:8100/health "$pp" "prefill-$b"
	wait_ok "$ns_d" http://$addr_d:8200/health "$dp" "decode-$b"
	ip netns exec "$ns_d" "$bin/proxy" -host $addr_d -port 8192 -prefill $addr_p:8100 -decode $addr_d:8200 >"$out/proxy-$b.log" 2>&1 &
	xp=$!
	pids+=("$xp")
	wait_ok "$ns_d" http://$addr_d:8192/healthcheck "$xp" "proxy-$b"
	[ "$(ip netns identify "$pp")" = "$ns_p" ] && [ "$(ip netns identify "$dp")" = "$ns_d" ] && [ "$(ip netns identify "$xp")" = "$ns_d" ] ||
		fail "a program is not in its namespace"
	log "up: prefill http://$addr_p:8100 (pid $pp, in $(ip netns identify "$pp")), decode http://$addr_d:8200 (pid $dp), proxy http://$addr_d:8192 (pid $xp)"
	[ "$b" = LIBFABRIC ] && grep -ho 'Created [0-9]* rails[^"]*\|fabric_attr->name .*' "$out/prefill-$b.log" | sort -u | sed 's/^/twohost:     prefill libfabric: /'

	# 1. The KV bytes decode got across the veth are right: the engines'
	# text is a function of the KV decode holds, so a disaggregated answer
	# must equal decode's local answer to the same prompt.
	for ((i = 0; i < 4; i++)); do
		text=$(completion "$ns_d" http://$addr_d:8192 "$(prompt "c$i$b" "$input_len")") || fail "$b: completion $i through the proxy"
		local_text=$(completion "$ns_d" http://$addr_d:8200 "$(prompt "c$i$b" "$input_len")") || fail "$b: completion $i on decode alone"
		[ -n "$text" ] && [ "$text" = "$local_text" ] || fail "$b: completion $i through the proxy is \"$text\", decode alone says \"$local_text\""
	done
	log "4 completions of $input_len tokens through the proxy: HTTP 200, $output_len tokens each, text equal to decode's local answers"

	# 2. The benchmark, through the proxy, from decode's namespace.
	# In the background, so that a signal stops it at once (bash runs traps
	# only once a foreground command ends).
	ip netns exec "$ns_d" "$bin/bench" -base-url http://$addr_d:8192 -model twohost -random-input-len "$input_len" \
		-random-output-len "$output_len" -num-prompts "$prompts" -request-rate "$rate" -result-dir "$out/bench-$b" >"$out/bench-$b.log" 2>&1 &
	bp=$!
	pids+=("$bp")
	wait "$bp"
	res=$?
	pids=("$pp" "$dp" "$xp")
	sed 's/^/twohost: bench | /' "$out/bench-$b.log"
	[ "$res" = 0 ] || fail "$b: bench exited $res"

	if [ "$connector" = push ]; then read -r moved xfer_ms <<<"$(xfers "$ns_p" http://$addr_p:8100)"; else read -r moved xfer_ms <<<"$(xfers "$ns_d" http://$addr_d:8200)"; fi
	# At least one per request and rank (TP 2): the 4 checks and the bench's.
	[ "$moved" -ge $(((prompts + 4) * 2)) ] || fail "$b: $moved NIXL transfers on the $([ "$connector" = push ] && echo prefill || echo decode) engine, want >= $(((prompts + 4) * 2))"
	check_sockets "$ns_p"
	check_sockets "$ns_d"
	stop_pids
	[ -z "$stop_bad" ] || fail "$b: on SIGTERM these programs (pid:exit status) did not shut down cleanly:$stop_bad (prefill $pp, decode $dp, proxy $xp)"
	read -r after _ <<<"$(veth_bytes "$ns_p" "$dev_p")"
	grep -h '"msg":"stopped"' "$out/decode-$b.log" | grep -q '"kv_verify_failures":0' || fail "$b: decode reports KV verify failures: $(grep -h '"msg":"stopped"' "$out/decode-$b.log")"
	verified=$(grep -h '"msg":"stopped"' "$out/decode-$b.log" | sed -n 's/.*"kv_bytes_verified":\([0-9]*\).*/\1/p')
	[ "${verified:-0}" -gt 0 ] || fail "$b: decode verified no KV bytes"
	# The KV crossed the veth, not shared memory: prefill's end sent at least
	# the bytes decode verified (pull reads them, push writes them).
	[ $((after - before)) -ge "$verified" ] || fail "$b: decode verified $verified KV bytes but prefill's veth end sent only $((after - before)): the KV did not cross the veth"
	log "$b ok: $moved NIXL transfers (mean $xfer_ms ms each), decode verified $verified KV bytes, 0 verify failures; prefill's veth end sent $((after - before)) bytes"
}

for b in $backends; do run_backend "$b"; done
log "PASS: $backends"
