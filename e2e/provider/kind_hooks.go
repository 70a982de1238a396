package provider

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// setEnforcement installs the bundle in mode as an admin would on a real
// cluster: it renders config/default with the mode's component
// (config/components/enforcement; none for deny), replaces the policies,
// bindings, webhook configuration (keeping the CA the webhook injected) and
// the Deployment it yields, and returns once the Deployment has rolled out
// and the webhook Service's ready endpoints are the pods running the
// rendered command line, one per replica. The suite then waits on its
// markers for the verdicts of the mode.
func (k *Kind) setEnforcement(ctx context.Context, mode string) error {
	objs, err := framework.RenderMode(ctx, filepath.Join(k.BinDir, "kubectl"), k.RepoRoot, mode)
	if err != nil {
		return err
	}
	var deploy *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			err = k.env.ReplaceSpec(ctx, o, nil)
		case "ValidatingWebhookConfiguration":
			err = k.env.ReplaceSpec(ctx, o, framework.KeepCABundles)
		case "Deployment":
			deploy = o
		}
		if err != nil {
			return err
		}
	}
	if deploy == nil {
		return fmt.Errorf("config/default in %s mode renders no Deployment", mode)
	}
	if err := k.env.ReplaceSpec(ctx, deploy, nil); err != nil {
		return err
	}
	if err := framework.WaitWebhookRolledOut(ctx, k.env, 5*time.Minute); err != nil {
		return err
	}
	want := framework.ContainerArgs(deploy)
	// The replicas are read from the Deployment the cluster now has: the
	// rendered object's number is decoded as a float64, which NestedInt64
	// reads as 0 (so "2 of 0 ready endpoints" never held: the mode
	// switch's two failed kind runs).
	live, err := k.env.Admin.Kube.AppsV1().Deployments(framework.WebhookNamespace).Get(ctx, framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	replicas := int64(1)
	if live.Spec.Replicas != nil {
		replicas = int64(*live.Spec.Replicas)
	}
	// What the mode's verdicts need is that the Service sends reviews only
	// to pods running the rendered command line: every ready endpoint is
	// such a pod, one per replica. A pod of the old command line that is
	// still terminating is no ready endpoint (a pod on a node that came
	// back from the node-loss case can take long to go), so it is reported,
	// not waited for.
	var why string
	err = framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "the webhook Service's ready endpoints are the pods running "+strings.Join(want, " "), func(ctx context.Context) (bool, string, error) {
		ok, reason, err := k.endpointsRun(ctx, want, replicas)
		if err != nil {
			// Keep the last reason: a failed list says nothing of the pods.
			return false, why + " (then: " + err.Error() + ")", nil
		}
		why = reason
		return ok, why, nil
	})
	if err != nil {
		return err
	}
	flag := framework.EnforcementFlag(deploy)
	if flag == "" {
		flag = "no --enforcement (deny)"
	}
	k.Logf("kind: webhook rolled out with %s (%s)", flag, why)
	return nil
}

// endpointsRun tells whether the webhook Service's ready endpoints are
// exactly replicas pods, each running args, and if not, why.
func (k *Kind) endpointsRun(ctx context.Context, args []string, replicas int64) (bool, string, error) {
	kc := k.env.Admin.Kube
	pods, err := kc.CoreV1().Pods(framework.WebhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: framework.WebhookPodSelector})
	if err != nil {
		return false, "", err
	}
	byIP := map[string]*corev1.Pod{}
	var others []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP != "" {
			byIP[p.Status.PodIP] = p
		}
		if len(p.Spec.Containers) == 0 || !slices.Equal(p.Spec.Containers[0].Args, args) {
			state := string(p.Status.Phase)
			if p.DeletionTimestamp != nil {
				state = "terminating since " + p.DeletionTimestamp.Format(time.RFC3339)
			}
			others = append(others, fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, state))
		}
	}
	eps, err := framework.ReadyWebhookEndpoints(ctx, kc)
	if err != nil {
		return false, "", err
	}
	current := int64(0)
	for _, e := range eps {
		p := byIP[e.Address]
		switch {
		case p == nil:
			return false, "ready endpoint " + e.Address + " is no webhook pod", nil
		case len(p.Spec.Containers) == 0 || !slices.Equal(p.Spec.Containers[0].Args, args):
			return false, "ready endpoint " + e.Address + " is pod " + p.Name + " of the previous command line", nil
		}
		current++
	}
	reason := fmt.Sprintf("%d of %d ready endpoints run it", current, replicas)
	if len(others) > 0 {
		reason += "; pods of another command line, not endpoints: " + strings.Join(others, ", ")
	}
	return current == replicas, reason, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// The webhook serves metrics on the container port named metrics with its
// admission certificate, issued for the Service's name; its CA is in the
// certificate's Secret (config/components/monitoring's ServiceMonitor).
const (
	webhookCertSecret  = "sandbox-fence-webhook-cert"
	webhookServiceName = "sandbox-fence-webhook." + framework.WebhookNamespace + ".svc"
	webhookMetricsPort = 8443
)

// kindMetrics is framework.WebhookMetrics on kind: a port-forward to each
// ready webhook pod's metrics port, verified as Prometheus verifies it.
type kindMetrics struct{ env *framework.Env }

// Open implements framework.WebhookMetrics.
func (m kindMetrics) Open(ctx context.Context) ([]framework.MetricsEndpoint, func(), error) {
	kc := m.env.Admin.Kube
	sec, err := kc.CoreV1().Secrets(framework.WebhookNamespace).Get(ctx, webhookCertSecret, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("the webhook's CA (Secret %s/%s): %w", framework.WebhookNamespace, webhookCertSecret, err)
	}
	ca := sec.Data["ca.crt"]
	pods, err := kc.CoreV1().Pods(framework.WebhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: framework.WebhookPodSelector})
	if err != nil {
		return nil, nil, err
	}
	var stops []func()
	closeAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	var eps []framework.MetricsEndpoint
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || !podReady(&p) {
			continue
		}
		addr, stop, err := m.env.ForwardPort(ctx, framework.WebhookNamespace, p.Name, webhookMetricsPort)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		stops = append(stops, stop)
		eps = append(eps, framework.MetricsEndpoint{
			Replica:    p.Name,
			URL:        "https://" + addr + "/metrics",
			CA:         ca,
			ServerName: webhookServiceName,
		})
	}
	return eps, closeAll, nil
}

// Where kubeadm keeps kube-apiserver's static pod on a kind control-plane
// node, and the annotation the restart bumps.
const (
	apiserverManifest    = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	restartAnnotation    = "e2e.sandbox-fence.dev/restart"
	apiserverGraceSecond = 2
)

// kindAPIServer is framework.APIServerProcess on kind: kube-apiserver is a
// static pod of the control-plane node, restarted as a kubelet restarts a
// changed static pod. The manifest gets a new restart annotation, so the
// kubelet sees a new pod (a new UID: no crash-loop back-off, however many
// restarts), stops the old one and starts the new one only once the old
// one is gone. etcd, the controller manager and the webhook keep running,
// as in a rolling restart of one API server.
type kindAPIServer struct {
	k     *Kind
	count int
}

func (a *kindAPIServer) controlPlane() (nodes.Node, error) {
	ns, err := a.k.api.Nodes(a.k.ClusterName)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if r, err := n.Role(); err == nil && r == "control-plane" {
			return n, nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no control-plane node", a.k.ClusterName)
}

// running lists the PIDs of the kube-apiserver processes on the node (its
// containers run in the node container's PID namespace's children), read
// from /proc: the offline node image has no crictl.
func running(ctx context.Context, n nodes.Node) (string, error) {
	var out bytes.Buffer
	cmd := n.CommandContext(ctx, "sh", "-c", `for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = kube-apiserver ] && echo "${p#/proc/}"; done; true`)
	cmd.SetStdout(&out)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("listing kube-apiserver processes on %s: %w", n.String(), err)
	}
	return strings.Join(strings.Fields(out.String()), " "), nil
}

// Restart implements framework.APIServerProcess.
func (a *kindAPIServer) Restart(ctx context.Context) error {
	n, err := a.controlPlane()
	if err != nil {
		return err
	}
	old, err := running(ctx, n)
	if err != nil {
		return err
	}
	if old == "" || strings.Contains(old, " ") {
		return fmt.Errorf("want one kube-apiserver process on %s before the restart, found pids %q", n.String(), old)
	}
	var raw bytes.Buffer
	cat := n.CommandContext(ctx, "cat", apiserverManifest)
	cat.SetStdout(&raw)
	if err := cat.Run(); err != nil {
		return fmt.Errorf("reading %s on %s: %w", apiserverManifest, n.String(), err)
	}
	var pod map[string]any
	if err := yaml.Unmarshal(raw.Bytes(), &pod); err != nil {
		return fmt.Errorf("%s on %s: %w", apiserverManifest, n.String(), err)
	}
	a.count++
	if err := unstructured.SetNestedField(pod, strconv.Itoa(a.count), "metadata", "annotations", restartAnnotation); err != nil {
		return err
	}
	// kube-apiserver takes seconds to drain on SIGTERM; its state is in
	// etcd, so a short grace is enough for a restart (from the second one
	// on: the kubelet stops a pod with the grace it was started with).
	if err := unstructured.SetNestedField(pod, int64(apiserverGraceSecond), "spec", "terminationGracePeriodSeconds"); err != nil {
		return err
	}
	b, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	// Written beside the manifests directory, then renamed into it: the
	// kubelet never reads half a file.
	write := n.CommandContext(ctx, "sh", "-c", "cat > /etc/kubernetes/kube-apiserver.yaml.next && mv /etc/kubernetes/kube-apiserver.yaml.next "+apiserverManifest)
	write.SetStdin(bytes.NewReader(b))
	if err := write.Run(); err != nil {
		return fmt.Errorf("writing %s on %s: %w", apiserverManifest, n.String(), err)
	}
	start := time.Now()
	// The old process gone and one new one running: /readyz before that
	// may be the old server's.
	err = framework.Eventually(ctx, 3*time.Minute, 250*time.Millisecond, "a new kube-apiserver process on "+n.String()+" (was pid "+old+")", func(ctx context.Context) (bool, string, error) {
		pids, err := running(ctx, n)
		if err != nil {
			return false, err.Error(), nil
		}
		return pids != "" && !strings.Contains(pids, " ") && pids != old, "pids: " + pids, nil
	})
	if err != nil {
		return err
	}
	err = framework.Eventually(ctx, 3*time.Minute, 50*time.Millisecond, "kube-apiserver /readyz after a restart", func(ctx context.Context) (bool, string, error) {
		body, err := a.k.env.Admin.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error() + " " + string(body), nil
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	readyAt := time.Now()
	a.k.Logf("kind: kube-apiserver static pod restarted on %s in %s", n.String(), readyAt.Sub(start).Round(100*time.Millisecond))
	// The only API server removes its address from the kubernetes
	// Service's EndpointSlice when it stops, and kube-proxy then rejects
	// connections to the Service address on every node. Pods, the webhook
	// among them, reach the API server again only once it has added its
	// address back and each node's kube-proxy has seen that, seconds after
	// /readyz (RELIABILITY.md finding 8). Restart returns then, so a case
	// times the fence, not kube-proxy.
	if err := a.waitRouted(ctx); err != nil {
		return err
	}
	a.k.Logf("kind: every node routes the kubernetes Service to kube-apiserver again %s after /readyz", time.Since(readyAt).Round(100*time.Millisecond))
	return nil
}

// waitRouted waits until a TCP connection from every node to the
// kubernetes Service's address is accepted, as a pod's would be.
func (a *kindAPIServer) waitRouted(ctx context.Context) error {
	svc, err := a.k.env.Admin.Kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the kubernetes Service: %w", err)
	}
	addr := fmt.Sprintf("/dev/tcp/%s/%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	ns, err := a.k.api.Nodes(a.k.ClusterName)
	if err != nil {
		return err
	}
	for _, n := range ns {
		err := framework.Eventually(ctx, 3*time.Minute, 250*time.Millisecond, "node "+n.String()+" routes the kubernetes Service ("+svc.Spec.ClusterIP+")", func(ctx context.Context) (bool, string, error) {
			cmd := n.CommandContext(ctx, "timeout", "1", "bash", "-c", "exec 3<>"+addr)
			var out bytes.Buffer
			cmd.SetStderr(&out)
			if err := cmd.Run(); err != nil {
				return false, strings.TrimSpace(out.String()), nil
			}
			return true, "", nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// mirrorRegistry makes every node resolve images named host/... at a plain
// HTTP registry on port of the machine running the suite: containerd's
// hosts.toml for host (kind.yaml points containerd at /etc/containerd/
// certs.d), whose server is the node's default gateway, the address a kind
// node reaches its host by. containerd reads the file on each pull, so no
// restart is needed.
func (k *Kind) mirrorRegistry(ctx context.Context, host string, port int) error {
	ns, err := k.api.Nodes(k.ClusterName)
	if err != nil {
		return err
	}
	if len(ns) == 0 {
		return fmt.Errorf("cluster %s has no nodes", k.ClusterName)
	}
	for _, n := range ns {
		var route bytes.Buffer
		cmd := n.CommandContext(ctx, "ip", "-4", "route", "show", "default")
		cmd.SetStdout(&route)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("reading node %s's default route: %w", n.String(), err)
		}
		f := strings.Fields(route.String())
		i := slices.Index(f, "via")
		if i < 0 || i+1 >= len(f) {
			return fmt.Errorf("node %s has no default gateway (ip route: %q)", n.String(), route.String())
		}
		server := fmt.Sprintf("http://%s:%d", f[i+1], port)
		toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", server, server)
		dir := "/etc/containerd/certs.d/" + host
		cmd = n.CommandContext(ctx, "sh", "-c", `mkdir -p "$1" && cat >"$1/hosts.toml"`, "sh", dir)
		cmd.SetStdin(strings.NewReader(toml))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("writing %s/hosts.toml on node %s: %w", dir, n.String(), err)
		}
		k.Logf("kind: node %s pulls %s/... from %s", n.String(), host, server)
	}
	return nil
}
