// Package node runs a single-node Kubernetes cluster on this Linux machine,
// as root: the local control plane of e2e/cluster plus kube-scheduler,
// kube-proxy and a kubelet on containerd, with a bridge CNI. The e2e suite
// uses it as E2E_PROVIDER=node to run the webhook in-cluster, as a cluster
// admin deploys it from config/default, and to show what only a real node
// can: Service routing, rolling restarts, PDBs, cert-controller rotation.
//
// Everything it changes on the host is named here and undone by Cleanup,
// which works from the state directory alone, so an interrupted run is
// cleaned by the next one (or by `go run ./e2e/node/cmd/nodecluster cleanup`).
package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Host resources the provider creates. The names are distinctive so Cleanup
// and Check never touch anything another program made.
const (
	NodeName = "sandbox-fence-node"
	// AdvertiseIP is the node's and the apiserver's address, on DummyLink.
	// TEST-NET-2: never routed anywhere, and not the TEST-NET-1 subnet eth0
	// sits in on these machines, so no packet for it leaves the host.
	AdvertiseIP = "198.51.100.10"
	// DummyLink holds AdvertiseIP. It is a bridge without ports: these VM
	// kernels have no dummy link type ("Unknown device type"), and a
	// port-less bridge is just as inert.
	DummyLink  = "sf-node0"
	BridgeLink = "sf-cni0"
	PodCIDR    = "10.244.0.0/24"
	// ServiceCIDR is the control plane's --service-cluster-ip-range
	// (e2e/cluster); kube-proxy DNATs it, and an unreachable route keeps
	// any ClusterIP packet kube-proxy did not translate from leaving the host.
	ServiceCIDR = "10.0.0.0/24"
	// CNINetwork names the CNI network (and its libcni cache entries).
	CNINetwork = "sandbox-fence-node"
	// GuardChain holds the filter rule that drops pod traffic to anything
	// but this host and other pods: the workplace allows no other traffic.
	GuardChain = "SANDBOX-FENCE-NODE"
	// GuardInChain (jumped to from INPUT) drops connections from other
	// machines to the apiserver, which must listen on all addresses for
	// pods to reach it at AdvertiseIP.
	GuardInChain = "SANDBOX-FENCE-NODE-IN"
	// CgroupRoot is the kubelet's --cgroup-root: every pod cgroup lives
	// under it in each v1 hierarchy, so teardown finds all of them.
	CgroupRoot = "sandbox-fence-node"
)

const (
	cgroupFS      = "/sys/fs/cgroup"
	sysctlDir     = "/proc/sys"
	libcniResults = "/var/lib/cni/results"
	containerLogs = "/var/log/containers"
	shimSocketDir = "/run/containerd/s"
	// The kubelet's device plugin socket ignores --root-dir.
	kubeletDevicePlugins = "/var/lib/kubelet/device-plugins"
	manifestName         = "host.json"
	commandTimeout       = 30 * time.Second
)

// Manifest records what Prepare found and changed on the host, in the state
// directory, so that Cleanup can restore it from the directory alone.
type Manifest struct {
	StateDir string `json:"stateDir"`
	BinDir   string `json:"binDir"`
	// Sysctls are the values before the run of the kernel settings the
	// node's components change (RestoredSysctls), keyed by path under
	// /proc/sys.
	Sysctls map[string]string `json:"sysctls"`
	// Created lists host directories that did not exist before the run and
	// that the node's components create outside the state directory.
	Created []string `json:"created,omitempty"`
}

func manifestPath(stateDir string) string { return filepath.Join(stateDir, manifestName) }

func readManifest(stateDir string) (*Manifest, error) {
	b, err := os.ReadFile(manifestPath(stateDir))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", manifestPath(stateDir), err)
	}
	return &m, nil
}

func (m *Manifest) write() error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.StateDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(manifestPath(m.StateDir), b, 0o644)
}

// run executes a host command and returns its combined output; the error
// names the command and carries the output, which is what a user needs.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
		return out.String(), nil
	case <-time.After(commandTimeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s %s: no answer after %s", name, strings.Join(args, " "), commandTimeout)
	}
}

// Requirements checks what the node needs from the machine before anything
// is changed, and says how to get each missing piece.
func Requirements(binDir string) error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the node provider runs a kubelet and containerd: run as root"))
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "ip6tables", "ip6tables-save", "conntrack", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			errs = append(errs, fmt.Errorf("%s not on PATH: run hack/node/setup.sh (apt-get install containerd runc containernetworking-plugins iptables conntrack)", b))
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			errs = append(errs, fmt.Errorf("CNI plugin %s missing in %s: apt-get install containernetworking-plugins", p, CNIBinDir))
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "kubelet", "kube-scheduler", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("%s missing in %s: run hack/tools/build.sh and hack/node/build.sh (make test-node does)", b, binDir))
		}
	}
	if _, err := os.Stat(filepath.Join(cgroupFS, "memory", "memory.limit_in_bytes")); err != nil {
		errs = append(errs, fmt.Errorf("no cgroup v1 memory hierarchy at %s/memory: the node provider is written for the cgroup v1 hosts it was measured on", cgroupFS))
	}
	return errors.Join(errs...)
}

// CNIBinDir is where Debian's containernetworking-plugins installs.
const CNIBinDir = "/usr/lib/cni"

// Prepare records the host's state and creates the host resources the node
// needs: the dummy link with the advertise address, the unreachable route
// for the service range, the pod traffic guard chain and the cgroup root.
func Prepare(stateDir, binDir string) (*Manifest, error) {
	m := &Manifest{StateDir: stateDir, BinDir: binDir, Sysctls: map[string]string{}}
	for _, k := range RestoredSysctls {
		v, err := os.ReadFile(filepath.Join(sysctlDir, k))
		if err != nil {
			return nil, err
		}
		m.Sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, d := range []string{libcniResults, containerLogs, shimSocketDir, "/var/lib/cni", "/run/containerd", kubeletDevicePlugins, "/var/lib/kubelet"} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			m.Created = append(m.Created, d)
		}
	}
	if err := m.write(); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"ip", "link", "add", DummyLink, "type", "bridge"},
		{"ip", "addr", "add", AdvertiseIP + "/32", "dev", DummyLink},
		{"ip", "link", "set", DummyLink, "up"},
		{"ip", "route", "add", "unreachable", ServiceCIDR},
		{"iptables", "-w", "-N", GuardChain},
		// Pod to pod on the bridge (bridged frames reach FORWARD through
		// br_netfilter) and pod to this host (INPUT) stay allowed.
		{"iptables", "-w", "-A", GuardChain, "-i", BridgeLink, "-o", BridgeLink, "-j", "RETURN"},
		{"iptables", "-w", "-A", GuardChain, "-i", BridgeLink, "-m", "comment", "--comment", "sandbox-fence node: pods reach only this host and each other", "-j", "DROP"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-j", GuardChain},
		{"iptables", "-w", "-N", GuardInChain},
		{"iptables", "-w", "-I", "INPUT", "1", "-j", GuardInChain},
	}
	for _, s := range steps {
		if _, err := run(s[0], s[1:]...); err != nil {
			return m, err
		}
	}
	return m, makeCgroupRoot()
}

// GuardAPIServerPort makes the apiserver's port answer only connections to
// loopback and AdvertiseIP: anything arriving for another address of this
// machine came from elsewhere.
func GuardAPIServerPort(port int) error {
	_, err := run("iptables", "-w", "-A", GuardInChain, "-p", "tcp", "--dport", strconv.Itoa(port),
		"!", "-i", "lo", "!", "-d", AdvertiseIP, "-m", "comment", "--comment", "sandbox-fence node: apiserver for this host only", "-j", "DROP")
	return err
}

// cgroupHierarchies lists the mounted v1 hierarchies (cpu, memory, ...,
// name=systemd) as directories under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // cpu,cpuacct style symlinks point at a listed directory
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// makeCgroupRoot creates CgroupRoot in every hierarchy: the kubelet refuses
// a --cgroup-root that does not exist. A new cpuset cgroup starts with no
// CPUs and no memory nodes; it inherits its parent's so tasks can join it.
func makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, CgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// Cleanup undoes everything a node run may have left, from the state
// directory alone: processes, mounts, links, routes, iptables rules, cgroups,
// sysctls and files outside the state directory. It is safe to run when
// nothing is left, and runs before every start and after every stop.
func Cleanup(stateDir string, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	m, err := readManifest(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		m = &Manifest{StateDir: stateDir}
	} else if err != nil {
		return err
	}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// Processes first: containers (everything in our cgroups), then our
	// daemons and the containerd shims, which live outside the pod cgroups.
	note(killCgroupTasks())
	for _, pid := range ownedPids(stateDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	note(waitPidsGone(stateDir, 10*time.Second))

	// Mounts: overlay rootfs, shm, projected volumes, network namespaces.
	note(unmountUnder(stateDir))

	// Network.
	for _, link := range bridgePorts() {
		_, _ = run("ip", "link", "del", link)
	}
	for _, link := range []string{BridgeLink, DummyLink} {
		if linkExists(link) {
			_, err := run("ip", "link", "del", link)
			note(err)
		}
	}
	if out, _ := run("ip", "route", "show", "type", "unreachable", ServiceCIDR); strings.TrimSpace(out) != "" {
		_, err := run("ip", "route", "del", "unreachable", ServiceCIDR)
		note(err)
	}
	note(cleanIptables(m.BinDir))

	// cgroups, deepest first, once their tasks are gone.
	note(removeCgroupRoot())

	for _, d := range changedSysctls(m) {
		note(os.WriteFile(filepath.Join(sysctlDir, d.key), []byte(d.was), 0o644))
	}

	// Files the components write outside the state directory: libcni's
	// result cache (our bridge and containerd's loopback network; a killed
	// pod never gets the CNI DEL that would remove them) and the kubelet's
	// device plugin socket when the run created its directory.
	for _, f := range ownCNIResults(stateDir) {
		note(os.Remove(f))
	}
	if slices.Contains(m.Created, kubeletDevicePlugins) {
		if err := os.Remove(filepath.Join(kubeletDevicePlugins, "kubelet.sock")); err != nil && !errors.Is(err, os.ErrNotExist) {
			note(err)
		}
	}
	if entries, err := os.ReadDir(containerLogs); err == nil {
		for _, e := range entries {
			p := filepath.Join(containerLogs, e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, stateDir+"/") {
				note(os.Remove(p))
			}
		}
	}
	// Directories we made and that are empty now (shim socket dir, libcni
	// cache, /var/log/containers): deepest first.
	created := append([]string(nil), m.Created...)
	sort.Sort(sort.Reverse(sort.StringSlice(created)))
	for _, d := range created {
		if d == shimSocketDir {
			removeDeadSockets(d)
		}
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && !isNotEmpty(err) {
			note(err)
		}
	}
	if len(errs) == 0 {
		logf("node cleanup: nothing of a node run is left (state %s)", stateDir)
	}
	return errors.Join(errs...)
}

// RestoredSysctls are the kernel settings a node run changes: the bridge
// plugin turns on IP forwarding, and the kubelet (protectKernelDefaults
// false) sets its "kernel tunables" — among them kernel.panic=10 and
// kernel.panic_on_oops=1, which must not outlive the run on a shared VM.
var RestoredSysctls = []string{
	"net/ipv4/ip_forward",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

type sysctlDiff struct{ key, was, now string }

func changedSysctls(m *Manifest) []sysctlDiff {
	var out []sysctlDiff
	for _, k := range RestoredSysctls {
		was, ok := m.Sysctls[k]
		if !ok {
			continue
		}
		cur, err := os.ReadFile(filepath.Join(sysctlDir, k))
		if err == nil && strings.TrimSpace(string(cur)) != was {
			out = append(out, sysctlDiff{key: k, was: was, now: strings.TrimSpace(string(cur))})
		}
	}
	return out
}

// ownCNIResults lists libcni's cached results for our pods: each names the
// pod's network namespace, which lives under our state directory.
func ownCNIResults(stateDir string) []string {
	entries, err := os.ReadDir(libcniResults)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(libcniResults, e.Name())
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(stateDir+"/")) {
			out = append(out, p)
		}
	}
	return out
}

func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}

// killCgroupTasks SIGKILLs every task in CgroupRoot in every hierarchy until
// none is left: a container that forks while being killed is caught by the
// next pass.
func killCgroupTasks() error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := cgroupTasks()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in the %s cgroups survived SIGKILL", pids, CgroupRoot)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond) // polling cgroup.procs: the kernel has no wait for foreign pids
	}
}

func cgroupTasks() []int {
	seen := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, CgroupRoot)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

func removeCgroupRoot() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, CgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Children sort after their parents; remove in reverse.
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ownedPids finds the processes of a node run by their command line: every
// component started from the state directory or with a path in it (kubelet,
// containerd, kube-proxy, the control plane), and the containerd shims that
// talk to our containerd socket.
func ownedPids(stateDir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	// This process and its ancestors (go run, make) may name the state
	// directory on their command line; they are not the node's.
	mine := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !mine[pid]; pid = parentPid(pid) {
		mine[pid] = true
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || mine[pid] {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if bytes.Contains(b, []byte(stateDir+"/")) {
			out = append(out, pid)
		}
	}
	return out
}

func parentPid(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Field 4, after the parenthesised command (which may hold spaces).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func waitPidsGone(stateDir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		pids := ownedPids(stateDir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of the node run survived SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond) // polling /proc: no wait() on processes we did not start
	}
}

// mountsUnder returns the mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// unescapeMount decodes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dir string) error {
	for pass := 0; pass < 5; pass++ {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("mounts still under %s: %v", dir, left)
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// bridgePorts lists the links enslaved to BridgeLink (the pods' veths).
func bridgePorts() []string {
	entries, err := os.ReadDir(filepath.Join("/sys/class/net", BridgeLink, "brif"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// cleanIptables removes the guard chain, kube-proxy's chains (kube-proxy
// --cleanup, the supported way) and any rule that names our bridge or pod
// range, such as a bridge-plugin masquerade rule from another configuration.
func cleanIptables(binDir string) error {
	var errs []error
	if binDir != "" {
		if kp := filepath.Join(binDir, "kube-proxy"); fileExists(kp) && (iptablesMentions("iptables", "KUBE-") || iptablesMentions("ip6tables", "KUBE-")) {
			if _, err := run(kp, "--cleanup", "--v=0"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, g := range []struct{ from, chain string }{{"FORWARD", GuardChain}, {"INPUT", GuardInChain}} {
		for {
			if _, err := run("iptables", "-w", "-C", g.from, "-j", g.chain); err != nil {
				break
			}
			if _, err := run("iptables", "-w", "-D", g.from, "-j", g.chain); err != nil {
				errs = append(errs, err)
				break
			}
		}
		if _, err := run("iptables", "-w", "-n", "-L", g.chain); err == nil {
			if _, err := run("iptables", "-w", "-F", g.chain); err != nil {
				errs = append(errs, err)
			}
			if _, err := run("iptables", "-w", "-X", g.chain); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The kubelet's own canary, hint and firewall chains, IPv4 and IPv6
	// (kube-proxy --cleanup leaves the kubelet's alone).
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			for _, chain := range iptablesChains(ipt, table) {
				if strings.HasPrefix(chain, "KUBE-") {
					deleteChain(ipt, table, chain)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func iptablesMentions(ipt, s string) bool {
	out, err := run(ipt + "-save")
	return err == nil && strings.Contains(out, s)
}

// iptablesChains lists the user chains of a table; ipt is iptables or
// ip6tables.
func iptablesChains(ipt, table string) []string {
	out, err := run(ipt+"-save", "-t", table)
	if err != nil {
		return nil
	}
	var chains []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, ":") {
			name := strings.Fields(line[1:])[0]
			switch name {
			case "INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING":
				continue
			}
			chains = append(chains, name)
		}
	}
	return chains
}

// deleteChain removes every jump to chain in table, then the chain.
func deleteChain(ipt, table, chain string) {
	out, err := run(ipt+"-save", "-t", table)
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j "+chain) {
			args := append([]string{"-w", "-t", table, "-D"}, splitRule(line[3:])...)
			_, _ = run(ipt, args...)
		}
	}
	_, _ = run(ipt, "-w", "-t", table, "-F", chain)
	_, _ = run(ipt, "-w", "-t", table, "-X", chain)
}

// splitRule splits an iptables-save rule into arguments, keeping quoted
// comments whole.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQuote = !inQuote
		case c == ' ' && !inQuote:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// removeDeadSockets removes shim sockets nobody listens on any more (a
// killed shim leaves its socket behind).
func removeDeadSockets(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	listening, _ := os.ReadFile("/proc/net/unix")
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !bytes.Contains(listening, []byte(p)) {
			_ = os.Remove(p)
		}
	}
}

// Check lists what a node run left on the host; empty means clean. It is the
// teardown's acceptance test (docs/e2e.md lists the checks).
func Check(stateDir string) []string {
	stateDir, _ = filepath.Abs(stateDir)
	var left []string
	if pids := ownedPids(stateDir); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes running from %s: %v", stateDir, pids))
	}
	if pids := cgroupTasks(); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes in the %s cgroups: %v", CgroupRoot, pids))
	}
	for _, h := range cgroupHierarchies() {
		if fileExists(filepath.Join(h, CgroupRoot)) {
			left = append(left, "cgroup "+filepath.Join(h, CgroupRoot))
		}
	}
	if mps := mountsUnder(stateDir); len(mps) > 0 {
		left = append(left, fmt.Sprintf("mounts under %s: %v", stateDir, mps))
	}
	for _, l := range []string{BridgeLink, DummyLink} {
		if linkExists(l) {
			left = append(left, "network link "+l)
		}
	}
	if out, _ := run("ip", "-o", "addr", "show"); strings.Contains(out, " "+AdvertiseIP+"/") {
		left = append(left, "address "+AdvertiseIP)
	}
	if out, _ := run("ip", "route", "show", "table", "all"); strings.Contains(out, ServiceCIDR) || strings.Contains(out, PodCIDR) {
		left = append(left, "routes for "+ServiceCIDR+" or "+PodCIDR)
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if out, err := run(ipt + "-save"); err == nil {
			for _, s := range []string{GuardChain, "KUBE-", "CNI-", BridgeLink, "10.244.0."} {
				if strings.Contains(out, s) {
					left = append(left, ipt+" rules or chains mentioning "+s)
				}
			}
		}
	}
	if m, err := readManifest(stateDir); err == nil {
		for _, d := range changedSysctls(m) {
			left = append(left, fmt.Sprintf("sysctl %s is %s, was %s", strings.ReplaceAll(d.key, "/", "."), d.now, d.was))
		}
	}
	if own := ownCNIResults(stateDir); len(own) > 0 {
		left = append(left, fmt.Sprintf("libcni cache entries %v", own))
	}
	if m, err := readManifest(stateDir); err == nil {
		for _, d := range m.Created {
			if fileExists(d) {
				left = append(left, "directory "+d+" (created by the run)")
			}
		}
	}
	if entries, err := os.ReadDir(containerLogs); err == nil {
		for _, e := range entries {
			if t, err := os.Readlink(filepath.Join(containerLogs, e.Name())); err == nil && strings.HasPrefix(t, stateDir+"/") {
				left = append(left, "container log link "+filepath.Join(containerLogs, e.Name()))
			}
		}
	}
	return left
}
