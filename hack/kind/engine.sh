#!/usr/bin/env bash
# The Docker engine `make e2e-kind` runs kind on when the machine has none:
# Debian's dockerd (hack/kind/setup.sh installs it) with its own data-root,
# exec-root, pid file and socket under STATE (default .dev/kind-engine), and
# hack/kind/runcwrap as its default runtime. `down` stops it and removes
# everything it created: containers, networks, processes, mounts, cgroups,
# iptables rules and chains, host directories, and the kernel settings that
# dockerd and the kubelets in the nodes change on the host.
#
#   hack/kind/engine.sh up      start it (no-op when it already runs); prints DOCKER_HOST=...
#   hack/kind/engine.sh down    stop it, clean up, then check; exit 1 on any leftover
#   hack/kind/engine.sh check   list leftovers of a run; exit 1 when any
#   hack/kind/engine.sh logs DIR  copy the engine's log into DIR
#
# Only this engine's own objects are touched: everything it made is found
# by its state directory, its bridge name and the chain names below. A
# user's engine (DOCKER_HOST, a running Docker) is never started, stopped or
# cleaned here: hack/kind/e2e.sh uses it as it is.
#
# No packet from a container leaves this machine: the engine makes no
# default bridge, the kind network's bridge is sf-kind0 on 198.18.0.0/24
# (RFC 2544, never routed), a guard chain drops anything forwarded between
# it and any other interface, and the containers' DNS upstream is the host's
# loopback, where nothing answers.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
state=${KIND_ENGINE_STATE:-$root/.dev/kind-engine}
bin=${BIN:-$root/bin}
sock=$state/docker.sock
pidfile=$state/dockerd.pid
log=$state/dockerd.log
before=$state/before.env
bridge=sf-kind0
subnet=198.18.0.0/24
gateway=198.18.0.1
guard=SANDBOX-FENCE-KIND
export DOCKER_HOST=unix://$sock
export DOCKER_CONFIG=$state/cli

# Kernel settings that are not per network namespace, which dockerd or a
# kubelet in a privileged node container writes on the host (the kubelet's
# "kernel tunables": kernel.panic=10 on a shared VM is not something to
# leave behind).
sysctls=(
  net.ipv4.ip_forward
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.netfilter.nf_conntrack_max
)
# Host paths dockerd or kind create when they are missing (dockerd 20.10
# writes its identity key into /etc/docker).
host_dirs=(/etc/docker/key.json /etc/docker /lib/modules /run/containerd /var/lib/docker /var/lib/containerd)

say() { echo "engine: $*" >&2; }
fail() {
  echo "e2e-kind: engine: $*" >&2
  exit 1
}

# The record of the host before up, kept in memory: down removes the file.
before_txt=$(cat "$before" 2>/dev/null || true)
existed() { grep -qxF "existed $1" <<<"$before_txt"; }

running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

sysctl_get() { cat "/proc/sys/${1//.//}" 2>/dev/null || true; }

up() {
  [[ $(id -u) == 0 ]] || fail "starting a Docker engine needs root"
  command -v dockerd >/dev/null || fail "dockerd is not installed (hack/kind/setup.sh installs Debian's docker.io)"
  if running && docker info >/dev/null 2>&1; then
    printf 'DOCKER_HOST=%s\nDOCKER_CONFIG=%s\n' "$DOCKER_HOST" "$DOCKER_CONFIG"
    return
  fi
  if [[ -d $state ]]; then
    say "a previous engine left $state: cleaning it first"
    down
  fi
  foreign_engine
  mkdir -p "$state"/{data,exec,cli}
  # What the host looked like before, so down puts it back.
  {
    for s in "${sysctls[@]}"; do echo "sysctl $s $(sysctl_get "$s")"; done
    for d in "${host_dirs[@]}"; do [[ -e $d ]] && echo "existed $d"; done
    echo "forward_policy $(iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3}')"
    for h in /sys/fs/cgroup/*/docker; do [[ -d $h ]] && echo "existed $h"; done
  } >"$before"
  before_txt=$(cat "$before")

  (cd "$root"/hack && CGO_ENABLED=0 go build -o "$bin"/runcwrap ./kind/runcwrap)

  say "starting dockerd (state $state)"
  # setsid: the daemon outlives this script; down stops it by its pid file.
  setsid dockerd \
    --data-root "$state"/data --exec-root "$state"/exec --pidfile "$pidfile" \
    -H "$DOCKER_HOST" --bridge=none --ip-masq=true \
    --add-runtime "runcwrap=$bin/runcwrap" --default-runtime runcwrap \
    --dns 127.0.0.1 --storage-driver overlay2 \
    </dev/null >"$log" 2>&1 &
  for _ in $(seq 100); do
    docker info >/dev/null 2>&1 && break
    running || [[ ! -f $pidfile ]] || break
    sleep 0.2
  done
  docker info >/dev/null 2>&1 || { tail -n 20 "$log" >&2; fail "dockerd did not come up (log above, full log $log)"; }

  # The kind network, made before kind so that its bridge has a name the
  # guard can match (kind uses a network called kind when one exists).
  docker network create --driver bridge --subnet "$subnet" --gateway "$gateway" \
    -o com.docker.network.bridge.name="$bridge" \
    -o com.docker.network.bridge.enable_ip_masquerade=false kind >/dev/null
  iptables -N "$guard"
  iptables -A "$guard" -i "$bridge" -o "$bridge" -j RETURN
  iptables -A "$guard" -i "$bridge" -j DROP
  iptables -A "$guard" -o "$bridge" -j DROP
  iptables -I FORWARD 1 -j "$guard"
  say "up in ${SECONDS}s: DOCKER_HOST=$DOCKER_HOST, bridge $bridge $subnet"
  printf 'DOCKER_HOST=%s\nDOCKER_CONFIG=%s\n' "$DOCKER_HOST" "$DOCKER_CONFIG"
}

# foreign_engine handles what another checkout's engine (another state
# directory) made: the bridge and chain names are fixed, so two engines
# cannot run at once. A live one is refused with the command that stops it;
# the leftovers of one that died without down (a killed CI job) are removed.
# foreign_pid prints the pid of a running engine of ours (runcwrap as its
# default runtime) whose state is not this one.
foreign_pid() {
  local pid
  for pid in $(pgrep -x dockerd || true); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--default-runtime runcwrap" || continue
    [[ $(foreign_state "$pid") == "$state" ]] && continue
    echo "$pid"
    return
  done
}
foreign_state() {
  local s
  s=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n '/^--pidfile$/{n;p}')
  echo "${s%/dockerd.pid}"
}

foreign_engine() {
  local pid
  pid=$(foreign_pid)
  [[ -z $pid ]] || fail "another sandbox-fence engine is running (dockerd pid $pid, state $(foreign_state "$pid")) and owns bridge $bridge: stop it with 'KIND_ENGINE_STATE=$(foreign_state "$pid") hack/kind/engine.sh down', then run again"
  local stale=0
  ip link show "$bridge" >/dev/null 2>&1 && stale=1
  command -v iptables >/dev/null && iptables -S "$guard" >/dev/null 2>&1 && stale=1
  ((stale)) || return 0
  say "bridge $bridge or chain $guard is left from an engine that no longer runs: removing them"
  bridge_delete
  iptables_clean
}

# bridge_delete deletes our bridge and the veths still on it. A container's
# network namespace outlives its processes while something holds it (the
# nsfs mount of a daemon that was killed, in another checkout's state), and
# so does its veth; deleting our end takes the peer with it.
bridge_delete() {
  ip link show "$bridge" >/dev/null 2>&1 || return 0
  local l
  for l in $(ip -o link show master "$bridge" | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
    ip link delete "$l" 2>/dev/null || true
  done
  ip link delete "$bridge" 2>/dev/null || true
}

# iptables_clean removes every rule that jumps to one of our chains or
# names our bridge, then the chains themselves (the filter and nat tables,
# where dockerd writes).
iptables_clean() {
  command -v iptables >/dev/null || return 0
  local t rule chain
  for t in filter nat; do
    { iptables -t "$t" -S 2>/dev/null | grep -E -- "-A [A-Z]+ .*(-j (DOCKER[A-Z0-9-]*|$guard)\b|$bridge)" || true; } | while read -r rule; do
      # shellcheck disable=SC2086 # the rule is re-split into its words on purpose
      iptables -t "$t" ${rule/-A /-D } 2>/dev/null || true
    done
    for chain in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' | grep -E "^(DOCKER[A-Z0-9-]*|$guard)$"); do
      iptables -t "$t" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' | grep -E "^(DOCKER[A-Z0-9-]*|$guard)$"); do
      iptables -t "$t" -X "$chain" 2>/dev/null || true
    done
  done
}

down() {
  if [[ -n $(foreign_pid) ]]; then
    # up refused to start next to another engine: the bridge, the chains
    # and the host settings are that engine's, so only our state goes.
    say "another engine runs (dockerd pid $(foreign_pid)): leaving its bridge, chains and settings alone"
    rm -rf "$state"
    return 0
  fi
  if running; then
    local pid
    pid=$(cat "$pidfile")
    # Containers first, so that their mounts and cgroups go with them, then
    # the networks; then the daemon, which stops its containerd.
    docker ps -aq 2>/dev/null | xargs -r docker rm -f >/dev/null 2>&1 || true
    docker network ls -q --filter type=custom 2>/dev/null | xargs -r docker network rm >/dev/null 2>&1 || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # Anything still running from our state (containerd, shims, containers).
  local pids
  pids=$(pgrep -f -- "$state/" || true)
  if [[ -n $pids ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  fi
  # Mounts under the state directory, deepest first.
  awk -v s="$state/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  # A dockerd that was killed (a run cut short) leaves its bridge: no other
  # engine runs (above), so it is ours.
  bridge_delete
  # The kernel tears a container's network namespace down, and its veth
  # with it, asynchronously after the last process exits.
  for _ in $(seq 75); do ip -br link 2>/dev/null | grep -q '^veth' || break; sleep 0.2; done
  iptables_clean
  if [[ -n $before_txt ]]; then
    local kind key value
    while read -r kind key value; do
      case $kind in
      sysctl)
        [[ -n $value && $(sysctl_get "$key") != "$value" ]] && echo "$value" >"/proc/sys/${key//.//}" 2>/dev/null
        ;;
      forward_policy)
        [[ -n $key ]] && iptables -P FORWARD "$key" 2>/dev/null
        ;;
      esac
    done <<<"$before_txt"
    # Host directories and cgroups that were not there before.
    for d in "${host_dirs[@]}" /sys/fs/cgroup/*/docker; do
      [[ -e $d ]] || continue
      existed "$d" && continue
      if [[ $d == /sys/fs/cgroup/* ]]; then
        find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      else
        rm -rf "$d"
      fi
    done
  fi
  rm -rf "$state"
  check
}

check() {
  local left=()
  [[ -n $(pgrep -f -- "$state/" || true) ]] && left+=("processes: $(pgrep -fa -- "$state/" | cut -c1-120 | tr '\n' ';')")
  pgrep -x dockerd >/dev/null && pgrep -fa dockerd | grep -qF -- "$state" && left+=("dockerd")
  grep -qF " $state/" /proc/self/mounts && left+=("mounts under $state")
  ip link show "$bridge" >/dev/null 2>&1 && left+=("link $bridge")
  ip -br link 2>/dev/null | grep -qE '^(docker0|veth)' && left+=("links: $(ip -br link | awk '/^(docker0|veth)/ {print $1}' | tr '\n' ' ')")
  if command -v iptables >/dev/null; then
    local r
    r=$(for t in filter nat; do iptables -t "$t" -S 2>/dev/null; done | grep -E "DOCKER|$guard|$bridge" || true)
    [[ -n $r ]] && left+=("iptables: $(echo "$r" | tr '\n' ';')")
  fi
  # BPF programs and maps are the kernel's, not a namespace's: a Cilium agent
  # in a node (make e2e-cilium) loads them, and they must go with the node.
  if command -v bpftool >/dev/null; then
    local p
    p=$(bpftool prog show 2>/dev/null | awk '$3 == "name" && $4 ~ /^cil_/ {print $4}'; bpftool map show 2>/dev/null | awk '$3 == "name" && $4 ~ /^cilium_/ {print $4}')
    [[ -n $p ]] && left+=("BPF programs and maps: $(echo "$p" | sort | uniq -c | awk '{print $2 " x" $1}' | tr '\n' ' ')")
  else
    left+=("bpftool is missing, so BPF programs cannot be checked (hack/kind/setup.sh installs it)")
  fi
  for h in /sys/fs/cgroup/*/docker; do
    [[ -d $h ]] && ! existed "$h" && left+=("cgroup $h")
  done
  if [[ -n $before_txt ]]; then
    for d in "${host_dirs[@]}"; do
      [[ -e $d ]] && ! existed "$d" && left+=("host path $d")
    done
  fi
  [[ -e $state ]] && left+=("state $state")
  if ((${#left[@]})); then
    printf 'engine: left behind: %s\n' "${left[@]}" >&2
    return 1
  fi
  say "clean: no process, mount, link, iptables rule, BPF program or state of the engine left"
}

case ${1:-} in
up) up ;;
down) down ;;
check) check ;;
logs)
  [[ -n ${2:-} ]] || fail "logs needs a directory"
  mkdir -p "$2"
  [[ -f $log ]] && cp "$log" "$2"/dockerd.log
  ;;
*)
  echo "usage: $0 up|down|check|logs DIR" >&2
  exit 2
  ;;
esac
