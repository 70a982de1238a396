//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/yaml"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/fencectl"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// readerUser runs every kubectl fence case: a user bound to the shipped
// read-only ClusterRole alone (config/vap/kubectl-fence-role.yaml), so a
// read the plugin needs and the role lacks fails the case that makes it.
const (
	readerUser    = "e2e-kubectl-fence-reader"
	readerRole    = "sandbox-fence-kubectl-fence"
	readerBinding = "sandbox-fence-e2e-kubectl-fence"
)

// fenceCtl runs `kubectl fence args...` in process as readerUser (the
// admin's kubeconfig with kubectl's --as): the same command the plugin
// binary runs (cmd/kubectl-fence is only fencectl.NewCommand and
// fencectl.ExitCode), with kubectl's own --kubeconfig and --context flags.
func fenceCtl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	bindReader(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(kc, env.Configs(), framework.ContextAdmin); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := fencectl.NewCommand(fencectl.Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kc, "--context", framework.ContextAdmin, "--as", readerUser}, args...))
	cmd.SetContext(testContext(t))
	code := fencectl.ExitCode(cmd.Execute(), &errOut)
	return code, out.String() + errOut.String()
}

// bindReader binds readerUser to the shipped role once, and waits until the
// API server's authorizer lets readerUser list Sandboxes: right after the
// binding is created, and after an install that put the role back.
func bindReader(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	readerOnce.Do(func() {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: readerBinding},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: readerUser}},
		}
		if _, err := env.Admin.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			readerErr = err
			return
		}
		cfg, err := framework.Impersonating(env.Admin.Config)(readerUser, nil)
		if err != nil {
			readerErr = err
			return
		}
		reader, readerErr = framework.NewIdentity(readerUser, readerUser, nil, cfg)
	})
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	if err := env.WaitAllowed(ctx, reader, authzv1.ResourceAttributes{Verb: "list", Group: fence.SandboxGVR.Group, Resource: fence.SandboxGVR.Resource}); err != nil {
		t.Fatal(err)
	}
}

var (
	readerOnce sync.Once
	reader     *framework.Identity
	readerErr  error
)

func auditReport(t *testing.T) (int, *fencectl.AuditReport) {
	t.Helper()
	code, out := fenceCtl(t, "audit", "-o", "json")
	if code == 2 {
		t.Fatalf("kubectl fence audit could not run: %s", out)
	}
	r := &fencectl.AuditReport{}
	if err := json.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	if (code == 1) != (len(r.Findings) > 0) {
		t.Fatalf("audit exited %d with %d findings: exit 1 must mean findings", code, len(r.Findings))
	}
	return code, r
}

func findingKeys(r *fencectl.AuditReport) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("%s %s/%s %s", f.Kind, f.Namespace, f.Name, f.Check))
	}
	sort.Strings(out)
	return out
}

// waitCleanAudit polls the audit until it reports nothing: per-sandbox
// policies of owners other tests deleted go only when the garbage collector
// gets to them.
func waitCleanAudit(t *testing.T) {
	t.Helper()
	var last []string
	err := framework.Eventually(testContext(t), 90*time.Second, 500*time.Millisecond, "kubectl fence audit finds nothing", func(ctx context.Context) (bool, string, error) {
		_, r := auditReport(t)
		last = last[:0]
		for _, f := range r.Findings {
			last = append(last, fmt.Sprintf("%s %s/%s %s: %s", f.Kind, f.Namespace, f.Name, f.Check, f.Message))
		}
		return len(r.Findings) == 0, strings.Join(last, "; "), nil
	})
	if err != nil {
		t.Fatalf("the suite's cluster never audited clean: %v", err)
	}
}

// TestKubectlFenceAuditFindsEachSeededViolation seeds one object of every
// kind of finding into the cluster (what the fence refuses is seeded with
// the binding removed, as "from before the install", or by the admin, whom
// the fence does not check) and requires exactly those findings; on the
// clean cluster before, and after they are removed, it requires none.
func TestKubectlFenceAuditFindsEachSeededViolation(t *testing.T) {
	requireShipped(t)
	ctx := testContext(t)
	waitCleanAudit(t)

	ns := env.HostNamespace
	// Sandboxes the holder-epoch policy would refuse today.
	malformed := framework.MakeSandbox(ns, name("audit-malformed")).Annotation(fence.AnnotationHolderEpoch, "01").Obj()
	oversized := framework.MakeSandbox(ns, name("audit-oversized")).Annotation(fence.AnnotationOperatingModeChangedAt, strings.Repeat("9", 16385)).Obj()
	err := env.WithoutHolderEpochBinding(ctx, func() error {
		for _, s := range []*unstructured.Unstructured{malformed, oversized} {
			if _, err := create(t, env.Admin, framework.SandboxGVR, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A Sandbox holding the orphan finalizer, which the cilium-owner policy
	// refuses from every ServiceAccount outside kube-system,
	// written by the admin.
	orphaning := mustCreate(t, env.Admin, framework.SandboxGVR, framework.MakeSandbox(ns, name("audit-orphaning")).Finalizer("orphan").Obj())

	// A per-sandbox policy of a labelled owner that the egress policy
	// refuses (a toEntities rule), written by the admin.
	shapeOwner := labelledClaim(t, ns, name("audit-shape"))
	badShape := perSandboxPolicy(t, ns, "SandboxClaim", shapeOwner)
	egress, _, _ := unstructured.NestedSlice(badShape.Object, "spec", "egress")
	egress = append(egress, map[string]any{"toEntities": []any{"world"}})
	_ = unstructured.SetNestedSlice(badShape.Object, egress, "spec", "egress")
	mustCreate(t, env.Admin, framework.CNPGVR, badShape)

	// A policy whose owner does not label its pods.
	unlabelled := mustCreate(t, env.Admin, framework.ClaimGVR, framework.MakeClaim(ns, name("audit-unlabelled")).Obj())
	noLabel := mustCreate(t, env.Admin, framework.CNPGVR, perSandboxPolicy(t, ns, "SandboxClaim", unlabelled))

	// A policy without any owner, as an orphaning delete leaves it.
	orphan := perSandboxPolicy(t, ns, "SandboxClaim", shapeOwner)
	orphan.SetName(fence.PolicyNamePrefix + string(uuid.NewUUID()))
	orphan.SetOwnerReferences(nil)
	mustCreate(t, env.Admin, framework.CNPGVR, orphan)

	// A namespace that is not opted in but holds a per-sandbox policy, and
	// one a host is bound to that is not opted in.
	plain := createNamespace(t, name("audit-plain"), nil)
	plainOwner := labelledClaim(t, plain, name("audit-plain"))
	mustCreate(t, env.Admin, framework.CNPGVR, perSandboxPolicy(t, plain, "SandboxClaim", plainOwner))
	hostNS := createNamespace(t, name("audit-hostns"), nil)
	spec := env.FenceConfigSpec()
	spec.Hosts[len(spec.Hosts)-1].Namespaces = append(spec.Hosts[len(spec.Hosts)-1].Namespaces, hostNS)
	if err := env.ConfigureFenceSpec(ctx, fencev1.DefaultConfigName, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.ConfigureFence(context.Background(), fencev1.DefaultConfigName); err != nil {
			t.Errorf("restore the FenceConfig: %v", err)
		}
	})

	code, r := auditReport(t)
	want := []string{
		fmt.Sprintf("CiliumNetworkPolicy %s/%s %s", ns, badShape.GetName(), fencectl.CheckPolicyNotAdmitted),
		fmt.Sprintf("CiliumNetworkPolicy %s/%s %s", ns, noLabel.GetName(), fencectl.CheckOwnerLabel),
		fmt.Sprintf("CiliumNetworkPolicy %s/%s %s", ns, orphan.GetName(), fencectl.CheckOrphanedPolicy),
		// The egress policy refuses an owner-less policy too.
		fmt.Sprintf("CiliumNetworkPolicy %s/%s %s", ns, orphan.GetName(), fencectl.CheckPolicyNotAdmitted),
		fmt.Sprintf("Namespace /%s %s", hostNS, fencectl.CheckNamespaceNotOptedIn),
		fmt.Sprintf("Namespace /%s %s", plain, fencectl.CheckNamespaceNotOptedIn),
		fmt.Sprintf("Sandbox %s/%s %s", ns, malformed.GetName(), fencectl.CheckMalformedAnnotation),
		fmt.Sprintf("Sandbox %s/%s %s", ns, oversized.GetName(), fencectl.CheckOversizedAnnotation),
		fmt.Sprintf("Sandbox %s/%s %s", ns, orphaning.GetName(), fencectl.CheckOrphanFinalizer),
	}
	sort.Strings(want)
	if code != 1 {
		t.Errorf("exit code %d with findings, want 1", code)
	}
	if d := cmp.Diff(want, findingKeys(r)); d != "" {
		t.Errorf("findings (-want +got):\n%s\nreport: %+v", d, r.Findings)
	}
	for _, f := range r.Findings {
		if f.Message == "" || f.By == "" {
			t.Errorf("finding %+v: says neither what nor who", f)
		}
		if f.Name == malformed.GetName() && !strings.Contains(f.Message, `new value "01" is malformed`) {
			t.Errorf("malformed finding does not carry the policy's message: %q", f.Message)
		}
	}

	// The same report as a table and as YAML.
	code, table := fenceCtl(t, "audit")
	if code != 1 || !strings.Contains(table, "KIND") || !strings.Contains(table, badShape.GetName()) {
		t.Errorf("audit (table) exited %d:\n%s", code, table)
	}
	code, y := fenceCtl(t, "audit", "-o", "yaml")
	var fromYAML fencectl.AuditReport
	if err := yaml.Unmarshal([]byte(y), &fromYAML); code != 1 || err != nil || len(fromYAML.Findings) != len(r.Findings) {
		t.Errorf("audit -o yaml exited %d, %v, %d findings:\n%s", code, err, len(fromYAML.Findings), y)
	}
	if code, out := fenceCtl(t, "audit", "-o", "wide"); code != 2 {
		t.Errorf("audit -o wide exited %d, want 2 (cannot run): %s", code, out)
	}

	// As policy reports, written by an admin (--as= drops the reader:
	// the read-only role writes nothing) over a stale report of a namespace
	// with nothing left to audit, and listed as kubectl lists them: the
	// Fail column counts the findings each report holds.
	stale := fmt.Sprintf("{apiVersion: openreports.io/v1alpha1, kind: Report, metadata: {name: %s, namespace: default, labels: {app.kubernetes.io/managed-by: %s}}}", fencectl.ReportName, fencectl.ReportManagedBy)
	if out, err := kubectlAs(t, env.Admin, []byte(stale), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply of a stale report: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := kubectlAs(t, env.Admin, nil, "delete", "reports,clusterreports", "-A", "-l", "app.kubernetes.io/managed-by="+fencectl.ReportManagedBy); err != nil {
			t.Errorf("delete the policy reports: %v\n%s", err, out)
		}
	})
	if code, out := fenceCtl(t, "audit", "-o", "policyreport", "--write"); code != 2 || !strings.Contains(out, "forbidden") {
		t.Errorf("audit --write as the read-only role exited %d, want 2 with forbidden:\n%s", code, out)
	}
	code, out := fenceCtl(t, "audit", "-o", "policyreport", "--write", "--as=")
	if code != 0 || !strings.Contains(out, "report(s), deleted 1 stale") {
		t.Fatalf("audit -o policyreport --write exited %d, want 0 (the reports hold the findings) with the stale report deleted:\n%s", code, out)
	}
	inNamespace := 0
	for _, f := range r.Findings {
		if f.Namespace == ns {
			inNamespace++
		}
	}
	for _, get := range []struct {
		args []string
		fail int
	}{
		{[]string{"get", "reports", "-n", ns, fencectl.ReportName}, inNamespace},
		{[]string{"get", "clusterreports", fencectl.ReportName}, len(r.Findings) - inNamespace},
	} {
		out, err := kubectlAs(t, env.Admin, nil, get.args...)
		t.Logf("kubectl %s:\n%s", strings.Join(get.args, " "), out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 2 {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(get.args, " "), err, out)
			continue
		}
		cols, row := strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(cols) < 3 || cols[1] != "PASS" || cols[2] != "FAIL" || len(row) < 3 || row[2] != fmt.Sprint(get.fail) {
			t.Errorf("kubectl %s: want the columns NAME PASS FAIL and %d failed:\n%s", strings.Join(get.args, " "), get.fail, out)
		}
	}
}

// perSandboxPolicy is the host's per-sandbox policy body for owner.
func perSandboxPolicy(t *testing.T, ns, kind string, owner *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	p, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: kind, Name: owner.GetName(), UID: string(owner.GetUID())},
		Namespace: ns,
		Hosts:     []string{"example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// labelledClaim creates, as the admin, a claim that labels its pods as its
// per-sandbox policy selects them.
func labelledClaim(t *testing.T, ns, n string) *unstructured.Unstructured {
	t.Helper()
	return mustCreate(t, env.Admin, framework.ClaimGVR, framework.MakeClaim(ns, n).PodLabel(fence.DefaultPerSandboxLabelKey, n).Obj())
}

func createNamespace(t *testing.T, n string, labels map[string]string) string {
	t.Helper()
	_, err := env.Admin.Kube.CoreV1().Namespaces().Create(testContext(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Admin.Kube.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", n, err)
		}
	})
	return n
}

func TestKubectlFenceStatusShowsTheOwnerChain(t *testing.T) {
	requireShipped(t)
	ns := env.HostNamespace
	claim := hostClaim(t)
	sbx := framework.MakeSandbox(ns, name("status")).OwnedBy(claim).Mode(fence.ModeSuspended).
		Annotation(fence.AnnotationHolderEpoch, "3").Annotation(fence.AnnotationOperatingModeChangedAt, changedAt).Obj()
	sbx = mustCreate(t, env.Host, framework.SandboxGVR, sbx)
	cnp := mustCreate(t, env.Host, framework.CNPGVR, perSandboxPolicy(t, ns, "SandboxClaim", claim))

	code, out := fenceCtl(t, "status", "-n", ns, sbx.GetName(), "-o", "json")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, out)
	}
	var got fencectl.SandboxStatus
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := fencectl.SandboxStatus{
		APIVersion: fencev1.GroupVersion.String(), Kind: "SandboxStatus",
		Namespace: ns, Name: sbx.GetName(), UID: string(sbx.GetUID()), OperatingMode: fence.ModeSuspended,
		HolderEpoch:            fencectl.Epoch{State: "WellFormed", Value: "3"},
		OperatingModeChangedAt: changedAt, PodTemplateHash: sbx.GetAnnotations()[fence.AnnotationPodTemplateHash],
		Claim: claim.GetName(), Enforcement: "deny",
		EgressPolicies: []fencectl.EgressPolicy{{
			Name: cnp.GetName(),
			OwnerChain: []fencectl.Link{
				{Kind: "CiliumNetworkPolicy", Name: cnp.GetName(), UID: string(cnp.GetUID())},
				{Kind: "SandboxClaim", Name: claim.GetName(), UID: string(claim.GetUID())},
				{Kind: "Sandbox", Name: sbx.GetName(), UID: string(sbx.GetUID())},
			},
			Problems: []string{},
		}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	code, text := fenceCtl(t, "status", "-n", ns, sbx.GetName())
	for _, w := range []string{`Holder epoch:          "3" (WellFormed)`, "Operating mode:        Suspended", "owner check:         ok", "CiliumNetworkPolicy " + cnp.GetName() + " -> SandboxClaim " + claim.GetName() + " -> Sandbox " + sbx.GetName()} {
		if code != 0 || !strings.Contains(text, w) {
			t.Errorf("status (table) exited %d, lacks %q:\n%s", code, w, text)
		}
	}
	if code, out := fenceCtl(t, "status", "-n", ns, "no-such-sandbox"); code != 2 || !strings.Contains(out, "not found") {
		t.Errorf("status of a missing Sandbox exited %d: %s", code, out)
	}
}

func checkReport(t *testing.T) (int, *fencectl.CheckReport) {
	t.Helper()
	code, out := fenceCtl(t, "check", "-o", "json")
	if code == 2 {
		t.Fatalf("kubectl fence check could not run: %s", out)
	}
	r := &fencectl.CheckReport{}
	if err := json.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, out)
	}
	if (code == 1) != (r.Failed() > 0) {
		t.Fatalf("check exited %d with %d failures", code, r.Failed())
	}
	return code, r
}

func failedChecks(r *fencectl.CheckReport) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// TestKubectlFenceCheckNamesEachMissingPiece removes one piece of the
// installation at a time, requires check to fail naming exactly that piece,
// restores it, and waits until the fence enforces again.
func TestKubectlFenceCheckNamesEachMissingPiece(t *testing.T) {
	requireShipped(t)
	// The case before may have changed the FenceConfig and put it back.
	if code, r, _ := checkUntil(t, nil); code != 0 {
		t.Fatalf("check fails on the suite's installation: %v", failedChecks(r))
	}
	ctx := testContext(t)
	// version names the cluster's Kubernetes and the installed webhook's image.
	sv, err := env.Admin.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// On the local control plane the webhook is a process: no image.
	images := []string{}
	d, err := env.Admin.Kube.AppsV1().Deployments(framework.WebhookNamespace).Get(ctx, framework.WebhookName, metav1.GetOptions{})
	switch {
	case err == nil:
		images = append(images, d.Spec.Template.Spec.Containers[0].Image)
	case !apierrors.IsNotFound(err):
		t.Fatal(err)
	}
	code, out := fenceCtl(t, "version", "-o", "json")
	v := &fencectl.VersionReport{}
	if err := json.Unmarshal([]byte(out), v); code != 0 || err != nil || v.Server == nil {
		t.Fatalf("kubectl fence version exited %d (%v): %s", code, err, out)
	}
	if want := (fencectl.ServerVersion{Kubernetes: sv.GitVersion, WebhookImages: images}); !cmp.Equal(want, *v.Server) {
		t.Errorf("kubectl fence version: server %+v, want %+v", *v.Server, want)
	}
	ar := env.Admin.Kube.AdmissionregistrationV1()
	repair := framework.PolicyHolderEpochRepair
	type missingPiece struct {
		name   string
		want   []string
		remove func() (restore func() error, err error)
	}
	cases := []missingPiece{{
		name: "the FenceConfig",
		want: []string{"FenceConfig " + fencev1.DefaultConfigName},
		remove: func() (func() error, error) {
			err := env.Admin.Dynamic.Resource(fencev1.GroupVersionResource).Delete(ctx, fencev1.DefaultConfigName, metav1.DeleteOptions{})
			return func() error { return env.ConfigureFence(ctx, fencev1.DefaultConfigName) }, err
		},
	}, {
		name: "a binding",
		want: []string{"ValidatingAdmissionPolicyBinding " + repair + "-binding"},
		remove: func() (func() error, error) {
			saved, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, repair+"-binding", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return func() error {
				saved.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels}
				_, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, saved, metav1.CreateOptions{})
				return err
			}, ar.ValidatingAdmissionPolicyBindings().Delete(ctx, repair+"-binding", metav1.DeleteOptions{})
		},
	}, {
		name: "a policy",
		want: []string{"ValidatingAdmissionPolicy " + repair},
		remove: func() (func() error, error) {
			saved, err := ar.ValidatingAdmissionPolicies().Get(ctx, repair, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return func() error {
				saved.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels}
				saved.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
				_, err := ar.ValidatingAdmissionPolicies().Create(ctx, saved, metav1.CreateOptions{})
				return err
			}, ar.ValidatingAdmissionPolicies().Delete(ctx, repair, metav1.DeleteOptions{})
		},
	}, {
		name: "one binding in another enforcement mode",
		want: []string{"Enforcement mode"},
		remove: func() (func() error, error) {
			set := func(actions string) error {
				_, err := ar.ValidatingAdmissionPolicyBindings().Patch(ctx, repair+"-binding", types.MergePatchType,
					[]byte(`{"spec":{"validationActions":`+actions+`}}`), metav1.PatchOptions{})
				return err
			}
			return func() error { return set(`["Deny"]`) }, set(`["Warn","Audit"]`)
		},
	}, {
		name: "the opt-in label of a host's namespace",
		want: []string{"Opted-in namespaces"},
		remove: func() (func() error, error) {
			label := func(v string) error {
				_, err := env.Admin.Kube.CoreV1().Namespaces().Patch(ctx, env.OtherHostNamespace, types.MergePatchType,
					[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, fencev1.FencedNamespaceLabel, v)), metav1.PatchOptions{})
				return err
			}
			return func() error { return label(`"true"`) }, label("null")
		},
	}, {
		name: "the webhook configuration",
		want: []string{"ValidatingWebhookConfiguration " + framework.WebhookConfigName},
		remove: func() (func() error, error) {
			vwcs := ar.ValidatingWebhookConfigurations()
			saved, err := vwcs.Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return func() error {
				saved.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations}
				_, err := vwcs.Create(ctx, saved, metav1.CreateOptions{})
				return err
			}, vwcs.Delete(ctx, framework.WebhookConfigName, metav1.DeleteOptions{})
		},
	}, {
		name: "the CiliumNetworkPolicy CRD",
		want: []string{"CRD ciliumnetworkpolicies.cilium.io"},
		remove: func() (func() error, error) {
			return removeCRD(ctx, "ciliumnetworkpolicies.cilium.io")
		},
	}}
	if env.WebhookProcess != nil && !env.InCluster {
		cases = append(cases, missingPiece{
			name: "the webhook's CA bundle",
			// A URL webhook is dialled with the bundle, so without a usable
			// one its endpoint fails too.
			want: []string{"Webhook cilium-egress.fence.sandbox.namzu.ai CA bundle", "Webhook cilium-egress.fence.sandbox.namzu.ai endpoints"},
			remove: func() (func() error, error) {
				return replaceCABundles(ctx, framework.WebhookConfigName, tst.SelfSignedCAPEM(t, "expired", time.Now().Add(-time.Hour)))
			},
		})
	} else {
		t.Logf("the webhook's CA bundle is not replaced here: in the cluster, cert-controller injects it again while check runs (the local provider replaces it)")
	}
	if env.WebhookProcess != nil {
		cases = append(cases, missingPiece{
			name: "the webhook's endpoint",
			want: []string{"Webhook cilium-egress.fence.sandbox.namzu.ai endpoints"},
			remove: func() (func() error, error) {
				return func() error { return env.WebhookProcess.Start(ctx) }, env.WebhookProcess.Stop(ctx)
			},
		})
	} else {
		t.Logf("the webhook runs as a Deployment here: its endpoint is not taken away (the local provider does)")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			restore, err := tc.remove()
			if restore != nil {
				t.Cleanup(func() {
					if err := restore(); err != nil {
						t.Errorf("restore %s: %v", tc.name, err)
					}
					if err := env.WaitForEnforcement(context.Background(), logf); err != nil {
						t.Errorf("enforcement after restoring %s: %v", tc.name, err)
					}
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			if code, r, d := checkUntil(t, tc.want); code != 1 || d != "" {
				t.Errorf("check exited %d; failed checks (-want +got):\n%s\n%+v", code, d, r.Checks)
			}
		})
	}
	if code, r, _ := checkUntil(t, nil); code != 0 {
		t.Errorf("check fails after every piece was restored: %v", failedChecks(r))
	}
}

// checkUntil polls check until it fails exactly the checks named in want,
// for at most 30 s, and returns the last report and its difference from
// want. The controller renders a changed FenceConfig into the policies
// within moments; until then check rightly names the policies too.
func checkUntil(t *testing.T, want []string) (code int, r *fencectl.CheckReport, diff string) {
	t.Helper()
	// The difference is the caller's to report, so a timeout is not an error here.
	_ = framework.Eventually(testContext(t), 30*time.Second, 250*time.Millisecond, "kubectl fence check fails exactly the expected checks",
		func(context.Context) (bool, string, error) {
			code, r = checkReport(t)
			diff = cmp.Diff(want, failedChecks(r))
			return diff == "", diff, nil
		})
	return code, r, diff
}

// replaceCABundles sets every webhook's caBundle in the configuration to
// bundle with one JSON Patch (its test ops keep a concurrent change from
// being overwritten) and returns what puts the old bundles back.
func replaceCABundles(ctx context.Context, name string, bundle []byte) (func() error, error) {
	vwcs := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	saved, err := vwcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	set := func(from, to func(i int) []byte) error {
		var ops []map[string]any
		for i := range saved.Webhooks {
			path := fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i)
			ops = append(ops, map[string]any{"op": "test", "path": path, "value": from(i)}, map[string]any{"op": "replace", "path": path, "value": to(i)})
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		_, err = vwcs.Patch(ctx, name, types.JSONPatchType, b, metav1.PatchOptions{})
		return err
	}
	old := func(i int) []byte { return saved.Webhooks[i].ClientConfig.CABundle }
	replacement := func(int) []byte { return bundle }
	return func() error { return set(replacement, old) }, set(old, replacement)
}

// removeCRD deletes a CRD (and so every object of it) and returns what
// re-creates it.
func removeCRD(ctx context.Context, n string) (func() error, error) {
	crds := env.Admin.Dynamic.Resource(framework.CRDGVR)
	saved, err := crds.Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if err := crds.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	restore := func() error {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": saved.GetAPIVersion(), "kind": saved.GetKind(), "spec": saved.Object["spec"]}}
		obj.SetName(n)
		obj.SetLabels(saved.GetLabels())
		if err := framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "CRD "+n+" recreated", func(ctx context.Context) (bool, string, error) {
			_, err := crds.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return false, "the old one is still being deleted", nil
			}
			return err == nil, "", err
		}); err != nil {
			return err
		}
		if err := env.WaitCRDsEstablished(ctx, []string{n}); err != nil {
			return err
		}
		// Until discovery serves it again, nothing can map the kind.
		m, err := env.Mapper()
		if err != nil {
			return err
		}
		gk := schema.GroupKind{Group: saved.Object["spec"].(map[string]any)["group"].(string), Kind: saved.Object["spec"].(map[string]any)["names"].(map[string]any)["kind"].(string)}
		return framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "discovery serves "+n, func(context.Context) (bool, string, error) {
			m.Reset()
			_, err := m.RESTMapping(gk)
			return err == nil, fmt.Sprint(err), nil
		})
	}
	return restore, framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "CRD "+n+" gone", func(ctx context.Context) (bool, string, error) {
		_, err := crds.Get(ctx, n, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there", nil
	})
}
