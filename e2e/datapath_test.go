//go:build e2e && cilium

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/internal/ciliumversion"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// The datapath suite (make e2e-cilium): sandbox pods on kind with Cilium as
// the CNI, their reach measured by connecting, and compared with what
// ciliumreach (e2e/ciliumproof/reach: Cilium's own policy repository)
// computes for the same policies, pods and DNS answers.
//
// Every address a probe sends to is one the test made: fixture containers on
// the kind network (hack/kind/engine.sh keeps it on 198.18.0.0/24, RFC 2544,
// and drops anything forwarded off it). They sit outside every pod range on
// purpose: Cilium gives an address outside the cluster's endpoints a CIDR
// identity, as it gives the Internet and 169.254.169.254, while a toFQDNs or
// toCIDR selector never selects a pod.

// fixtureImage is e2e/cmd/netfixture's image (make e2e-cilium builds it).
const fixtureImage = "sandbox-fence.local/netfixture:dev"

// fixture is one container of the fixture image on the kind network.
type fixture struct {
	name string // container name suffix, and what the echo server writes back
	host string // the DNS name that resolves to it ("" for the DNS server)
	ip   string
}

var ciliumCCNPGVR = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}

func TestDatapathSandboxPodsReachTheirAllowlistAndDNSOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kubectl := filepath.Join(repoRoot(t), "bin", "kubectl")
	if err := cluster.WriteKubeconfig(kubeconfig, map[string]*rest.Config{"admin": env.Admin.Config}, "admin"); err != nil {
		t.Fatal(err)
	}

	dns, echoes := startFixtures(t, ctx)
	forwardTestZones(t, ctx, kubectl, kubeconfig, dns.ip)
	standIn := echoes[len(echoes)-1]
	baselinePath := denyStandIn(t, ctx, dir, standIn.ip)
	startSandboxController(t, dir, kubeconfig)

	// The pods: each host's sandboxes, created as a host creates them
	// (pkg/fence), and a control pod in a namespace the fence does not
	// cover, which shows that every fixture answers.
	allowed, other, widened := echoes[0], echoes[1], echoes[2]
	host := fence.NewClient(env.Host.Dynamic, fence.Options{})
	otherHost := fence.NewClient(env.OtherHost.Dynamic, fence.Options{})
	a := sandboxPod(t, ctx, host, env.HostNamespace, "dp-a", true, []string{allowed.host, ".nip.io"})
	b := sandboxPod(t, ctx, host, env.HostNamespace, "dp-b", true, []string{allowed.host})
	c := sandboxPod(t, ctx, host, env.HostNamespace, "dp-c", false, nil)
	d := sandboxPod(t, ctx, otherHost, env.OtherHostNamespace, "dp-d", true, []string{widened.host})
	if err := host.RemoveEgress(ctx, env.HostNamespace, string(b.owner.GetUID())); err != nil {
		t.Fatalf("deleting %s's policy: %v", b.pod.Name, err)
	}
	control := controlPod(t, ctx)

	// reaches names the fixtures each pod is promised (docs/contract.md):
	// a sandbox pod, its own host's allowlist for it and nothing else, never
	// the stand-in metadata address; the control pod, everything, which
	// shows that every fixture answers, so a refusal is the policy's doing.
	rows := []struct {
		pod     *corev1.Pod
		what    string
		reaches []string
	}{
		{a.pod, "its allowlist (a name, *.nip.io) under the baseline", []string{allowed.name}},
		{b.pod, "policy deleted: the baseline alone", nil},
		{c.pod, "no per-sandbox label: the baseline alone", nil},
		{d.pod, "the other host's sandbox, widened to another name", []string{widened.name}},
		{control, "a namespace the fence does not cover (control)", []string{allowed.name, other.name, widened.name, standIn.name}},
	}
	targets := []fixture{allowed, other, widened, standIn, {name: standIn.name, ip: standIn.ip}}
	predicted := predict(t, ctx, dir, baselinePath, dns, targets, a.pod, b.pod, c.pod, d.pod, control)

	measured := make([][]cell, len(rows))
	var wg sync.WaitGroup
	for i, r := range rows {
		wg.Go(func() { measured[i] = measure(ctx, kubectl, kubeconfig, r.pod, targets, predicted[r.pod.Name]) })
	}
	wg.Wait()

	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pod\ttarget\tpromised\tpredicted\tmeasured\t")
	disagree := 0
	for i, r := range rows {
		for j, tg := range targets {
			e := cell{DNS: tg.host != "", Reached: slices.Contains(r.reaches, tg.name)}
			p, m := predicted[r.pod.Name][j], measured[i][j]
			mark := ""
			if p != m || e != m {
				mark, disagree = "  <- DISAGREES", disagree+1
			}
			fmt.Fprintf(tw, "%s/%s (%s)\t%s\t%s\t%s\t%s%s\t\n", r.pod.Namespace, r.pod.Name, r.what, tg.label(), e, p, m, mark)
		}
	}
	tw.Flush()
	t.Logf("reach of each pod: promised by the contract, predicted by Cilium %s's policy repository (ciliumreach), measured on the wire (Cilium image %s):\n%s",
		ciliumVersion(t), ciliumImage(t), table.String())
	if disagree > 0 {
		t.Fatalf("%d of %d cells: the measured reach differs from the promised or the predicted (table above)", disagree, len(rows)*len(targets))
	}
}

func (f fixture) label() string {
	if f.host == "" {
		return f.ip + ":80"
	}
	return f.host + ":80"
}

// cell is one pod's reach of one target: whether DNS gave the target's
// address (for a name), and whether a connection got the fixture's reply.
type cell struct {
	DNS     bool
	Reached bool
}

func (c cell) String() string {
	s := "refused"
	if c.Reached {
		s = "reached"
	}
	if c.DNS {
		s = "dns ok, " + s
	}
	return s
}

// startFixtures runs the DNS server and the echo servers in the kind
// network, each at an address chosen here, and
// removes them when the test ends, checking that none is left.
func startFixtures(t *testing.T, ctx context.Context) (dns fixture, echoes []fixture) {
	subnet := strings.TrimSpace(engine(t, ctx, "network", "inspect", "kind", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"))
	var prefix netip.Prefix
	for _, s := range strings.Fields(subnet) {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
			prefix = p
		}
	}
	if !prefix.IsValid() || prefix.Bits() > 24 {
		t.Fatalf("the kind network's subnets %q: want an IPv4 one of /24 or wider", subnet)
	}
	// High addresses of the network's first /24: the engine hands out the
	// low ones to the nodes, in order.
	base := prefix.Masked().Addr().As4()
	at := func(n byte) string { return netip.AddrFrom4([4]byte{base[0], base[1], base[2], n}).String() }
	dns = fixture{name: "dns", ip: at(200)}
	echoes = []fixture{
		{name: "allowed", host: "allowed.sbx.example", ip: at(201)},
		{name: "other", host: "other.sbx.example", ip: at(202)},
		{name: "widened", host: "widened.sbx.example", ip: at(203)},
	}
	// The stand-in metadata address, and a *.nip.io-style name for it: the
	// name spells the address, as nip.io's names do.
	meta := at(210)
	echoes = append(echoes, fixture{name: "metadata", host: strings.ReplaceAll(meta, ".", "-") + ".nip.io", ip: meta})

	// The image: into the engine for the fixtures, into every node's
	// containerd for the pods (what kind load image-archive does).
	archive := filepath.Join(repoRoot(t), "bin", "netfixture-image.tar")
	// Cleanups run last first: the containers go, then the image, then the
	// check that neither is left (on an engine the harness does not own,
	// nothing else would remove them).
	t.Cleanup(func() {
		cli := provider.EngineCLI()
		if out, _ := exec.Command(cli, "ps", "-aq", "--filter", "label=sandbox-fence-datapath=1").Output(); len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("fixture containers left after the test: %s", out)
		}
		if exec.Command(cli, "image", "inspect", fixtureImage).Run() == nil {
			t.Errorf("the fixture image %s is left in the engine", fixtureImage)
		}
	})
	engine(t, ctx, "load", "-i", archive)
	t.Cleanup(func() { _, _ = exec.Command(provider.EngineCLI(), "rmi", "-f", fixtureImage).CombinedOutput() })
	clusterName := os.Getenv(provider.EnvKindCluster)
	if clusterName == "" {
		clusterName = "sandbox-fence"
	}
	for _, node := range strings.Fields(engine(t, ctx, "ps", "-q", "--filter", "label=io.x-k8s.kind.cluster="+clusterName)) {
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, provider.EngineCLI(), "exec", "-i", node, "ctr", "-n", "k8s.io", "images", "import", "--all-platforms", "--digests", "-")
		cmd.Stdin = f
		out, err := cmd.CombinedOutput()
		f.Close()
		if err != nil {
			t.Fatalf("importing %s into node %s: %v\n%s", archive, node, err, out)
		}
	}
	records := []string{"dns"}
	for _, e := range echoes {
		records = append(records, e.host+"="+e.ip)
	}
	run := func(f fixture, args ...string) {
		c := "sandbox-fence-dp-" + f.name
		t.Cleanup(func() { _, _ = exec.Command(provider.EngineCLI(), "rm", "-f", c).CombinedOutput() })
		engine(t, ctx, append([]string{"run", "-d", "--name", c, "--label", "sandbox-fence-datapath=1", "--network", "kind", "--ip", f.ip, fixtureImage}, args...)...)
	}
	run(dns, records...)
	for _, e := range echoes {
		run(e, "echo", e.name)
	}
	return dns, echoes
}

func engine(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, provider.EngineCLI(), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", provider.EngineCLI(), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// forwardTestZones makes the cluster's DNS forward the fixtures' zones to
// the fixture DNS server, as a cluster forwards a private zone, and restarts
// it so the change is live; the Corefile is put back at the end.
func forwardTestZones(t *testing.T, ctx context.Context, kubectl, kubeconfig, server string) {
	cms := env.Admin.Kube.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := cm.Data["Corefile"]
	cm.Data["Corefile"] = "sbx.example:53 nip.io:53 {\n    errors\n    forward . " + server + "\n}\n" + orig
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cm, err := cms.Get(context.Background(), "coredns", metav1.GetOptions{})
		if err == nil {
			cm.Data["Corefile"] = orig
			_, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("restoring CoreDNS's Corefile: %v", err)
		}
	})
	restartCoreDNS(t, ctx, kubectl, kubeconfig)
}

// restartCoreDNS restarts CoreDNS as kubectl does after a configuration
// change, and waits for the rollout.
func restartCoreDNS(t *testing.T, ctx context.Context, kubectl, kubeconfig string) {
	for _, args := range [][]string{
		{"rollout", "restart", "deployment/coredns"},
		{"rollout", "status", "deployment/coredns", "--timeout=2m"},
	} {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", "kube-system"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// denyStandIn adds the stand-in metadata address to the baseline's
// egressDeny, as docs/install.md has an admin add an address to deny, and
// writes the baseline as applied to dir for the prediction.
func denyStandIn(t *testing.T, ctx context.Context, dir, ip string) string {
	ri := env.Admin.Dynamic.Resource(ciliumCCNPGVR)
	base, err := ri.Get(ctx, "sandbox-fence-baseline", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig, _, _ := unstructured.NestedSlice(base.Object, "spec", "egressDeny")
	deny := append(slices.Clone(orig), map[string]any{"toCIDRSet": []any{map[string]any{"cidr": ip + "/32"}}})
	if err := unstructured.SetNestedSlice(base.Object, deny, "spec", "egressDeny"); err != nil {
		t.Fatal(err)
	}
	got, err := ri.Update(ctx, base, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := ri.Get(context.Background(), base.GetName(), metav1.GetOptions{})
		if err == nil {
			_ = unstructured.SetNestedSlice(cur.Object, orig, "spec", "egressDeny")
			_, err = ri.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("restoring the baseline: %v", err)
		}
	})
	b, err := json.Marshal(got.Object)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "baseline.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSandboxController runs agent-sandbox's controller (bin/, built by
// make e2e-cilium from its release) against the cluster, so Sandboxes get
// their pods as in a cluster that runs agent-sandbox; it is stopped, and
// checked gone, at the end.
func startSandboxController(t *testing.T, dir, kubeconfig string) {
	bin := filepath.Join(repoRoot(t), "bin", "agent-sandbox-controller")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("agent-sandbox's controller: %v (make e2e-cilium builds it)", err)
	}
	logPath := filepath.Join(dir, "agent-sandbox-controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-kubeconfig", kubeconfig, "-leader-elect=false",
		"-metrics-bind-address", "0", "-health-probe-bind-address", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			t.Logf("agent-sandbox controller log (last 40 lines):\n%s", cluster.TailFile(logPath, 40))
		}
		if cmd.ProcessState == nil {
			t.Errorf("agent-sandbox's controller (pid %d) did not stop", cmd.Process.Pid)
		}
	})
}

type sandbox struct {
	owner *unstructured.Unstructured
	pod   *corev1.Pod
}

// sandboxPod creates a Sandbox as a host does (fence.Client.CreateWorkspace),
// whose pod runs the fixture image idle, carrying the per-sandbox label when
// labelled, and writes its egress policy for hosts (none when hosts is
// empty); it returns when agent-sandbox's controller has made the pod and it
// runs.
func sandboxPod(t *testing.T, ctx context.Context, c *fence.Client, ns, n string, labelled bool, hosts []string) sandbox {
	t.Helper()
	n = name(n)
	w := framework.MakeSandbox(ns, n).Set([]any{map[string]any{
		"name": "main", "image": fixtureImage, "imagePullPolicy": "Never", "args": []any{"idle"},
	}}, "spec", "podTemplate", "spec", "containers")
	if labelled {
		w = w.PodLabel(fence.DefaultPerSandboxLabelKey, n)
	}
	owner, err := c.CreateWorkspace(ctx, w.Obj(), fence.WriteOptions{Epoch: new(uint64(1))})
	if err != nil {
		t.Fatalf("creating Sandbox %s/%s as its host: %v", ns, n, err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(context.Background(), n, metav1.DeleteOptions{})
	})
	if len(hosts) > 0 {
		if _, err := c.ApplyEgress(ctx, fence.PolicyInput{
			Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandbox, Name: n, UID: string(owner.GetUID())},
			Namespace: ns, Hosts: hosts,
		}); err != nil {
			t.Fatalf("writing %s's policy as its host: %v", n, err)
		}
	}
	var pod *corev1.Pod
	err = framework.Eventually(ctx, 3*time.Minute, time.Second, fmt.Sprintf("Sandbox %s/%s's pod running", ns, n), func(ctx context.Context) (bool, string, error) {
		l, err := env.Admin.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range l.Items {
			if p := &l.Items[i]; slices.ContainsFunc(p.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() }) {
				pod = p
				return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", podState(p), nil
			}
		}
		return false, "no pod from agent-sandbox's controller yet", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sandbox{owner: owner, pod: pod}
}

func podState(p *corev1.Pod) string {
	if p == nil {
		return "none"
	}
	s := fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf(", %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
	}
	return s
}

// controlPod runs the fixture image idle in a namespace of its own, which
// the baseline does not select.
func controlPod(t *testing.T, ctx context.Context) *corev1.Pod {
	t.Helper()
	ns := name("dp-control")
	if _, err := env.Admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "control", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: fixtureImage, ImagePullPolicy: corev1.PullNever, Args: []string{"idle"},
		}}},
	}
	if _, err := env.Admin.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := framework.Eventually(ctx, 3*time.Minute, time.Second, "the control pod running", func(ctx context.Context) (bool, string, error) {
		p, err := env.Admin.Kube.CoreV1().Pods(ns).Get(ctx, "control", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, podState(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// predict asks ciliumreach, once per live per-sandbox policy and once with
// none, what each pod reaches: a flow is allowed when any of those allows
// it, as Cilium adds the allows of every policy that selects a pod (the
// baseline, with its deny, is in every request). DNS is the flow to the
// kube-dns pod on UDP 53.
func predict(t *testing.T, ctx context.Context, dir, baseline string, dns fixture, targets []fixture, pods ...*corev1.Pod) map[string][]cell {
	t.Helper()
	bin := filepath.Join(dir, "ciliumreach")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("ciliumproof", "reach")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ciliumreach: %v\n%s", err, out)
	}

	dnsPods, err := env.Admin.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dnsPods.Items) == 0 {
		t.Fatalf("kube-dns pods: %v (%d)", err, len(dnsPods.Items))
	}
	all := append(slices.Clone(pods), &dnsPods.Items[0])
	var reqPods []protocol.Pod
	for _, p := range all {
		ns, err := env.Admin.Kube.CoreV1().Namespaces().Get(ctx, p.Namespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reqPods = append(reqPods, protocol.Pod{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels,
			NamespaceLabels: ns.Labels, ServiceAccount: p.Spec.ServiceAccountName})
	}
	var answers []protocol.DNSAnswer
	for _, tg := range targets {
		if tg.host != "" {
			answers = append(answers, protocol.DNSAnswer{Name: tg.host, IPs: []string{tg.ip}})
		}
	}
	var lookups []protocol.Lookup
	for _, p := range pods {
		lookups = append(lookups, protocol.Lookup{From: []string{p.Name}, To: []protocol.Peer{{Pod: dnsPods.Items[0].Name}}, Ports: []string{"UDP/53"}})
		for _, tg := range targets {
			lookups = append(lookups, protocol.Lookup{From: []string{p.Name}, To: []protocol.Peer{{IP: tg.ip}}, Ports: []string{"TCP/80"}})
		}
	}
	policies := []json.RawMessage{nil}
	for _, ns := range []string{env.HostNamespace, env.OtherHostNamespace} {
		l, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			b, err := json.Marshal(p.Object)
			if err != nil {
				t.Fatal(err)
			}
			policies = append(policies, b)
		}
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for i, pol := range policies {
		if err := enc.Encode(protocol.Request{ID: i + 1, Baseline: baseline, Policy: pol, Pods: reqPods, DNS: answers, Lookups: lookups}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ciliumreach: %v\n%s", err, stderr.String())
	}
	got := map[string][]cell{}
	for _, p := range pods {
		got[p.Name] = make([]cell, len(targets))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var ans protocol.Answer
		if err := json.Unmarshal(sc.Bytes(), &ans); err != nil {
			t.Fatal(err)
		}
		if ans.Error != "" || ans.ParseError != "" || len(ans.Dropped) > 0 || len(ans.Unresolved) > 0 {
			t.Fatalf("ciliumreach cannot predict request %d: %+v", ans.ID, ans)
		}
		if len(ans.Verdicts) != len(lookups) {
			t.Fatalf("ciliumreach: %d verdicts for %d lookups", len(ans.Verdicts), len(lookups))
		}
		v := 0
		for _, p := range pods {
			dnsOK := ans.Verdicts[v].Allowed
			v++
			for j, tg := range targets {
				c := &got[p.Name][j]
				c.DNS = c.DNS || (dnsOK && tg.host != "")
				c.Reached = c.Reached || ans.Verdicts[v].Allowed
				v++
			}
		}
		n++
	}
	if n != len(policies) {
		t.Fatalf("ciliumreach answered %d of %d requests", n, len(policies))
	}
	return got
}

// probeResult is e2e/cmd/netfixture's probe output for one target.
type probeResult struct {
	Target   string   `json:"target"`
	Resolved []string `json:"resolved"`
	Reply    string   `json:"reply"`
}

// measure probes every target from pod, in rounds of one connection
// attempt each (2-second timeout), until a round agrees with want and two
// more rounds confirm it, or 90 seconds pass (a policy takes a moment to
// reach the datapath); it returns the last round. A target counts as
// reached only when the fixture it names wrote back its own name.
func measure(ctx context.Context, kubectl, kubeconfig string, pod *corev1.Pod, targets []fixture, want []cell) []cell {
	args := []string{"--kubeconfig", kubeconfig, "-n", pod.Namespace, "exec", pod.Name, "--", "/netfixture", "probe"}
	for _, tg := range targets {
		h := tg.ip
		if tg.host != "" {
			h = tg.host + "."
		}
		args = append(args, h+":80")
	}
	var last []cell
	agreed := 0
	// The error is the timeout: the last round, which then disagrees, is the
	// measurement the caller reports.
	_ = framework.Eventually(ctx, 90*time.Second, time.Second, "reach of "+pod.Name, func(ctx context.Context) (bool, string, error) {
		out, err := exec.CommandContext(ctx, kubectl, args...).Output()
		last = make([]cell, len(targets))
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(out))
			for j, tg := range targets {
				var r probeResult
				if dec.Decode(&r) != nil {
					break
				}
				last[j] = cell{DNS: tg.host != "" && slices.Contains(r.Resolved, tg.ip), Reached: r.Reply == tg.name}
			}
		}
		if slices.Equal(last, want) {
			agreed++
		} else {
			agreed = 0
		}
		return agreed == 3, "", nil
	})
	return last
}

// ciliumImage is the image the agents on the nodes run.
func ciliumImage(t *testing.T) string {
	ds, err := env.Admin.Kube.AppsV1().DaemonSets("kube-system").Get(context.Background(), "cilium", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Cilium's DaemonSet: %v", err)
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}

// ciliumVersion is the Cilium release the project pins, which ciliumreach is
// built from (internal/ciliumversion).
func ciliumVersion(t *testing.T) string {
	v, err := ciliumversion.Read(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
