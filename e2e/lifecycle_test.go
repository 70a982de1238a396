//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/lifecycle"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const (
	bystanderNS    = "bystanders"
	optInLabel     = "fence.sandbox.namzu.ai/enabled"
	upgradeMarker  = "e2e.sandbox-fence/upgrade-marker"
	upgradeMessage = "refused by the upgraded holder-epoch policy"
)

// bystanderLoad is a steady stream of writes by users the fence has no
// business refusing: a ServiceAccount that is not a bound host creating,
// updating and deleting ConfigMaps and CiliumNetworkPolicies in an
// opted-in namespace (so its policy writes are routed to the fail-closed
// webhook and the egress policy whenever they are installed).
type bystanderLoad struct {
	id    *framework.Identity
	phase atomic.Value // string
	iters atomic.Int64
	mu    sync.Mutex
	errs  []string
	stop  chan struct{}
	done  chan struct{}
}

func (l *bystanderLoad) run(ctx context.Context) {
	defer close(l.done)
	cms := l.id.Kube.CoreV1().ConfigMaps(bystanderNS)
	cnps := l.id.Dynamic.Resource(fence.CiliumNetworkPolicyGVR).Namespace(bystanderNS)
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		name := "load-" + strconv.Itoa(i)
		fail := func(op string, err error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.errs = append(l.errs, fmt.Sprintf("[%s] %s %s: %v", l.phase.Load(), op, name, err))
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			fail("create ConfigMap", err)
		} else {
			cm.Data["i"] = "updated"
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				fail("update ConfigMap", err)
			}
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				fail("delete ConfigMap", err)
			}
		}
		cnp := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"endpointSelector": map[string]any{"matchLabels": map[string]any{"app": "bystander"}},
				"egress":           []any{map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"app": "db"}}}}},
			},
		}}
		if _, err := cnps.Create(ctx, cnp, metav1.CreateOptions{}); err != nil {
			fail("create CiliumNetworkPolicy", err)
		} else {
			patch := []byte(`{"metadata":{"labels":{"i":"` + strconv.Itoa(i) + `"}}}`)
			if _, err := cnps.Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				fail("patch CiliumNetworkPolicy", err)
			}
			if err := cnps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				fail("delete CiliumNetworkPolicy", err)
			}
		}
		l.iters.Add(1)
	}
}

// advance waits until the load has completed n more iterations: every
// intermediate state of an install step is then exercised by it.
func (l *bystanderLoad) advance(ctx context.Context, n int64) error {
	start := l.iters.Load()
	return framework.Eventually(ctx, time.Minute, 20*time.Millisecond, fmt.Sprintf("%d more bystander iterations", n), func(context.Context) (bool, string, error) {
		return l.iters.Load() >= start+n, strconv.FormatInt(l.iters.Load()-start, 10), nil
	})
}

// decisions reads a test webhook's decision count (its metrics are served
// plain for the test: --metrics-secure=false).
func (w *localWebhook) decisions(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(w.metricsPort)+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, webhook.DecisionsMetric+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// waitServing waits until the API server sends reviews to w (its decision
// count grows under the bystander load).
func (w *localWebhook) waitServing(ctx context.Context, l *bystanderLoad) error {
	first, err := w.decisions(ctx)
	if err != nil {
		return err
	}
	return framework.Eventually(ctx, time.Minute, 50*time.Millisecond, "reviews reaching the new webhook", func(ctx context.Context) (bool, string, error) {
		n, err := w.decisions(ctx)
		return n > first, fmt.Sprintf("%v decisions", n), err
	})
}

// waitIdle waits until the API server no longer sends reviews to w: its
// decision count stays the same over 3 bystander iterations, each of which
// writes a CiliumNetworkPolicy that would be routed to it.
func (w *localWebhook) waitIdle(ctx context.Context, l *bystanderLoad) error {
	return framework.Eventually(ctx, time.Minute, 10*time.Millisecond, "no review reaching the old webhook", func(ctx context.Context) (bool, string, error) {
		before, err := w.decisions(ctx)
		if err != nil {
			return false, "", err
		}
		if err := l.advance(ctx, 3); err != nil {
			return false, "", err
		}
		after, err := w.decisions(ctx)
		return after == before, fmt.Sprintf("%v -> %v decisions", before, after), err
	})
}

// TestInstallUpgradeUninstallNeverRefusesBystanders runs the documented
// life cycle (docs/install.md: Install, Upgrade, Uninstall) with the code
// `kubectl fence install|uninstall` runs (internal/lifecycle), on a control
// plane of its own, under a steady load of writes by a ServiceAccount that
// is not a bound host, in an opted-in namespace: ConfigMaps and
// CiliumNetworkPolicies, so each policy write is routed to the fail-closed
// webhook whenever its configuration exists. Install; upgrade to a build
// whose holder-epoch policy and webhook configuration changed, the new
// webhook started before the old one stops (a rolling update); uninstall.
// No bystander write may be refused at any point, and afterwards nothing
// of the bundle is left: no CRD, webhook configuration, policy, binding,
// namespace, cluster-scoped RBAC, labelled object, or namespace label the
// bundle added.
func TestInstallUpgradeUninstallNeverRefusesBystanders(t *testing.T) {
	fc := newFreshCluster(t, true)
	ctx := freshContext(t)
	admin := fc.env.Admin
	if err := fc.env.InstallCRDs(ctx, fc.crds(t, "agents.x-k8s.io", "extensions.agents.x-k8s.io", "cilium.io")); err != nil {
		t.Fatal(err)
	}
	kubectl, err := framework.Kubectl(fc.root)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := framework.RenderBundle(ctx, kubectl, fc.root, logf)
	if err != nil {
		t.Fatal(err)
	}

	// The bystander: its own opted-in namespace (the admin's label, not the
	// bundle's), a Role for ConfigMaps and CiliumNetworkPolicies, a token.
	if _, err := admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bystanderNS, Labels: map[string]string{optInLabel: "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Kube.CoreV1().ServiceAccounts(bystanderNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gitops"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Kube.RbacV1().Roles(bystanderNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gitops"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnetworkpolicies"}, Verbs: []string{"*"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Kube.RbacV1().RoleBindings(bystanderNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gitops"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gitops"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "gitops", Namespace: bystanderNS}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saConfig := func(ns, name string) *rest.Config {
		t.Helper()
		tr, err := admin.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(admin.Config)
		cfg.BearerToken = tr.Status.Token
		return cfg
	}
	by, err := framework.NewIdentity("bystander", "system:serviceaccount:"+bystanderNS+":gitops", nil, saConfig(bystanderNS, "gitops"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.env.WaitAllowed(ctx, by, authzv1.ResourceAttributes{Namespace: bystanderNS, Verb: "create", Group: "cilium.io", Resource: "ciliumnetworkpolicies"}); err != nil {
		t.Fatal(err)
	}

	load := &bystanderLoad{id: by, stop: make(chan struct{}), done: make(chan struct{})}
	load.phase.Store("before install")
	go load.run(ctx)
	stopLoad := sync.OnceFunc(func() { close(load.stop); <-load.done })
	t.Cleanup(stopLoad)
	if err := load.advance(ctx, 3); err != nil {
		t.Fatal(err)
	}

	// The webhook runs as a local process under its shipped ServiceAccount
	// (no kubelet here): started when the Runner would wait for the
	// Deployment, i.e. after the workload step created the ServiceAccount.
	v1 := fc.newLocalWebhook(t, "v1", admin.Config, "--metrics-secure=false")
	v2 := fc.newLocalWebhook(t, "v2", admin.Config, "--metrics-secure=false", "--lookup-timeout=2s")
	startAs := func(w *localWebhook) func(ctx context.Context, _ []*unstructured.Unstructured) error {
		return func(ctx context.Context, _ []*unstructured.Unstructured) error {
			w.setCredentials(saConfig(framework.WebhookNamespace, framework.WebhookName))
			w.start()
			return w.waitReady(ctx)
		}
	}
	every := func(ctx context.Context, s lifecycle.Step) error {
		logf("lifecycle: after %s", s.Name)
		return load.advance(ctx, 3)
	}
	runner := func(ready func(context.Context, []*unstructured.Unstructured) error, after func(context.Context, lifecycle.Step) error) *lifecycle.Runner {
		dc, err := discovery.NewDiscoveryClientForConfig(admin.Config)
		if err != nil {
			t.Fatal(err)
		}
		mapper, err := fc.env.Mapper()
		if err != nil {
			t.Fatal(err)
		}
		return &lifecycle.Runner{Dynamic: admin.Dynamic, Discovery: dc, Mapper: mapper, WebhookReady: ready, Timeout: 2 * time.Minute, Logf: logf, AfterStep: after}
	}
	withVWCs := func(objs []*unstructured.Unstructured, w *localWebhook) []*unstructured.Unstructured {
		var out, vwcs []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "ValidatingWebhookConfiguration" {
				vwcs = append(vwcs, o)
			} else {
				out = append(out, o)
			}
		}
		return append(out, w.pointAt(vwcs)...)
	}

	// Install.
	load.phase.Store("install")
	if err := runner(startAs(v1), every).Install(ctx, withVWCs(bundle.Objects, v1)); err != nil {
		t.Fatal(err)
	}
	if err := v1.waitServing(ctx, load); err != nil {
		t.Fatal(err)
	}
	marker := framework.Marker{
		Name: "upgraded holder-epoch policy", As: admin, Want: upgradeMessage,
		Obj: framework.MakeSandbox(bystanderNS, "upgrade-marker").Annotation(fence.AnnotationHolderEpoch, "1").Annotation(upgradeMarker, "x").Obj(),
	}
	if err := fc.env.WaitAdmitted(ctx, marker, time.Minute); err != nil {
		t.Fatalf("before the upgrade: %v", err)
	}

	// Upgrade: a build whose holder-epoch policy refuses one more thing and
	// whose webhook configuration times out sooner; the new webhook serves
	// before the configuration points at it, the old one stops once no
	// review reaches it.
	upgraded := upgradedBundle(t, bundle.Objects)
	load.phase.Store("upgrade")
	after := func(ctx context.Context, s lifecycle.Step) error {
		if s.Name == "webhook configurations" {
			if err := v2.waitServing(ctx, load); err != nil {
				return err
			}
			if err := v1.waitIdle(ctx, load); err != nil {
				return err
			}
			v1.stop()
		}
		return every(ctx, s)
	}
	if err := runner(startAs(v2), after).Install(ctx, withVWCs(upgraded, v2)); err != nil {
		t.Fatal(err)
	}
	if err := fc.env.WaitDenied(ctx, marker, time.Minute); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	vwc, err := admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range vwc.Webhooks {
		if h.TimeoutSeconds == nil || *h.TimeoutSeconds != 4 {
			t.Errorf("after the upgrade %s has timeoutSeconds %v, want the upgraded 4", h.Name, h.TimeoutSeconds)
		}
	}

	// Uninstall, in the documented order; the webhook's pods go with its
	// Deployment, once no review reaches them.
	load.phase.Store("uninstall")
	afterUninstall := func(ctx context.Context, s lifecycle.Step) error {
		if s.Name == "the webhook workload" {
			if err := v2.waitIdle(ctx, load); err != nil {
				return err
			}
			v2.stop()
		}
		return every(ctx, s)
	}
	if err := runner(nil, afterUninstall).Uninstall(ctx, withVWCs(upgraded, v2)); err != nil {
		t.Fatal(err)
	}
	load.phase.Store("after uninstall")
	if err := load.advance(ctx, 3); err != nil {
		t.Fatal(err)
	}
	stopLoad()
	load.mu.Lock()
	if len(load.errs) > 0 {
		t.Errorf("%d bystander writes refused (of %d iterations, 6 writes each); first ones:\n%s", len(load.errs), load.iters.Load(), strings.Join(load.errs[:min(10, len(load.errs))], "\n"))
	}
	load.mu.Unlock()
	t.Logf("bystander load: %d iterations (ConfigMap create/update/delete, CiliumNetworkPolicy create/patch/delete), none refused", load.iters.Load())

	assertNothingLeft(ctx, t, fc)
}

// upgradedBundle is the bundle as a later build renders it: the
// holder-epoch policy with one more validation, the webhook entries with
// timeoutSeconds 4.
func upgradedBundle(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	changed := 0
	for _, o := range objs {
		o = o.DeepCopy()
		switch {
		case o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == framework.PolicyHolderEpoch:
			vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "validations")
			vs = append(vs, map[string]any{
				"expression": "!('" + upgradeMarker + "' in variables.anns)",
				"message":    upgradeMessage,
				"reason":     "Invalid",
			})
			if err := unstructured.SetNestedSlice(o.Object, vs, "spec", "validations"); err != nil {
				t.Fatal(err)
			}
			changed++
		case o.GetKind() == "ValidatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for i := range hooks {
				hooks[i].(map[string]any)["timeoutSeconds"] = int64(4)
			}
			if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
				t.Fatal(err)
			}
			changed++
		}
		out = append(out, o)
	}
	if changed != 2 {
		t.Fatalf("changed %d objects for the upgrade, want the holder-epoch policy and the webhook configuration", changed)
	}
	return out
}

// assertNothingLeft lists every resource the server serves for objects of
// the bundle, and checks the named leftovers one by one.
func assertNothingLeft(ctx context.Context, t *testing.T, fc *freshCluster) {
	t.Helper()
	admin := fc.env.Admin
	crds, err := admin.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds.Items {
		if g, _, _ := unstructured.NestedString(c.Object, "spec", "group"); g == "fence.sandbox.namzu.ai" {
			t.Errorf("CRD %s left", c.GetName())
		}
	}
	if _, err := admin.Kube.CoreV1().Namespaces().Get(ctx, framework.WebhookNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s: %v, want NotFound", framework.WebhookNamespace, err)
	}
	named := func(kind string, names []string) {
		for _, n := range names {
			if strings.HasPrefix(n, "sandbox-fence") {
				t.Errorf("%s %s left", kind, n)
			}
		}
	}
	vwcs, err := admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vaps, err := admin.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := admin.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crs, err := admin.Kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crbs, err := admin.Kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range vwcs.Items {
		names = append(names, o.Name)
	}
	named("ValidatingWebhookConfiguration", names)
	names = nil
	for _, o := range vaps.Items {
		names = append(names, o.Name)
	}
	named("ValidatingAdmissionPolicy", names)
	names = nil
	for _, o := range bindings.Items {
		names = append(names, o.Name)
	}
	named("ValidatingAdmissionPolicyBinding", names)
	names = nil
	for _, o := range crs.Items {
		names = append(names, o.Name)
	}
	named("ClusterRole", names)
	names = nil
	for _, o := range crbs.Items {
		names = append(names, o.Name)
	}
	named("ClusterRoleBinding", names)

	// Anything labelled as the bundle's, of any resource the server serves.
	dc, err := discovery.NewDiscoveryClientForConfig(admin.Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := discovery.ServerPreferredResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !contains(r.Verbs, "list") {
				continue
			}
			for _, sel := range []string{"app.kubernetes.io/part-of=sandbox-fence", "app.kubernetes.io/name=sandbox-fence"} {
				got, err := admin.Dynamic.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					t.Errorf("listing %s %s: %v", gv.WithResource(r.Name), sel, err)
					continue
				}
				for _, o := range got.Items {
					t.Errorf("%s %s/%s (%s) left", o.GetKind(), o.GetNamespace(), o.GetName(), sel)
				}
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d resources for leftovers", checked)
	}

	// Namespace labels: the bundle adds none; the only fence label left is
	// the opt-in an admin (the test) put on the bystanders' namespace.
	nss, err := admin.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		for k := range ns.Labels {
			if strings.Contains(k, "sandbox-fence") || strings.Contains(k, "sandbox.namzu.ai") {
				if ns.Name == bystanderNS && k == optInLabel {
					continue
				}
				t.Errorf("namespace %s carries %s=%s after the uninstall", ns.Name, k, ns.Labels[k])
			}
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
