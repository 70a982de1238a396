//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// name returns a DNS-1123 name unique to this run.
func name(prefix string) string { return prefix + "-" + rand.String(6) }

// create creates obj as id and deletes it (as admin) when the test ends.
func create(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	t.Helper()
	got, err := createKept(t, id, gvr, obj)
	if err == nil {
		t.Cleanup(func() {
			err := env.Admin.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup %s %s: %v", gvr.Resource, obj.GetName(), err)
			}
		})
	}
	return got, err
}

// createKept creates obj as id and leaves its removal to the test: for an
// object in a namespace the test deletes, which takes the object with it.
func createKept(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	t.Helper()
	return id.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(testContext(t), obj, metav1.CreateOptions{FieldManager: framework.FieldManager})
}

// mustCreate is create that fails the test on any error.
func mustCreate(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got, err := create(t, id, gvr, obj)
	expectCreated(t, id, gvr, obj, err)
	return got
}

// mustCreateKept is createKept that fails the test on any error.
func mustCreateKept(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got, err := createKept(t, id, gvr, obj)
	expectCreated(t, id, gvr, obj, err)
	return got
}

func expectCreated(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, err error) {
	t.Helper()
	framework.ExpectAdmitted(t, fmt.Sprintf("create %s %s as %s", gvr.Resource, obj.GetName(), id.Name), err)
}

func get(t *testing.T, gvr schema.GroupVersionResource, ns, n string) *unstructured.Unstructured {
	t.Helper()
	got, err := env.Admin.Dynamic.Resource(gvr).Namespace(ns).Get(testContext(t), n, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, n, err)
	}
	return got
}

func patch(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, ns, n string, pt types.PatchType, body []byte, sub ...string) error {
	t.Helper()
	opts := metav1.PatchOptions{FieldManager: framework.FieldManager}
	if pt == types.ApplyPatchType {
		opts.Force = new(true)
	}
	_, err := id.Dynamic.Resource(gvr).Namespace(ns).Patch(testContext(t), n, pt, body, opts, sub...)
	return err
}

// epochOf returns the stored holder epoch of a Sandbox.
func epochOf(t *testing.T, ns, n string) string {
	t.Helper()
	return get(t, framework.SandboxGVR, ns, n).GetAnnotations()[fence.AnnotationHolderEpoch]
}

// sandboxWithEpoch creates a Sandbox in the host namespace as the host,
// carrying epoch (none when "").
func sandboxWithEpoch(t *testing.T, epoch string) *unstructured.Unstructured {
	t.Helper()
	b := framework.MakeSandbox(env.HostNamespace, name("sbx"))
	if epoch != "" {
		b.Annotation(fence.AnnotationHolderEpoch, epoch)
	}
	return mustCreate(t, env.Host, framework.SandboxGVR, b.Obj())
}

// rawBody substitutes {{key}} placeholders in a body copied from the contract.
func rawBody(body string, kv ...string) []byte {
	for i := 0; i+1 < len(kv); i += 2 {
		body = strings.ReplaceAll(body, "{{"+kv[i]+"}}", kv[i+1])
	}
	return []byte(body)
}

func requireWebhook(t *testing.T) {
	t.Helper()
	if !env.WebhookInstalled {
		t.Skip("the webhook is not installed on this cluster (see the setup log): webhook-only case not run")
	}
}

func requirePolicy(t *testing.T, policy string) {
	t.Helper()
	if !env.Policies[policy] {
		t.Skipf("ValidatingAdmissionPolicy %s is not installed on this cluster (see the setup log): case not run", policy)
	}
}

// ownedPolicy creates, as the host, an owner of kind (a claim or a
// pool-less Sandbox) carrying the object label selector=<its name>, and the
// owner's per-sandbox policy; it returns both as stored.
func ownedPolicy(t *testing.T, kind string) (owner, policy *unstructured.Unstructured) {
	t.Helper()
	ns, n := env.HostNamespace, name("owner")
	key := fence.DefaultPerSandboxLabelKey
	switch kind {
	case fence.OwnerKindSandboxClaim:
		owner = mustCreate(t, env.Host, framework.ClaimGVR, framework.MakeClaim(ns, n).PodLabel(key, n).Label("e2e-owner", n).Obj())
	default:
		owner = mustCreate(t, env.Host, framework.SandboxGVR, framework.MakeSandbox(ns, n).PodLabel(key, n).Label("e2e-owner", n).Obj())
	}
	cnp, err := env.PerSandboxPolicy(kind, owner.GetName(), string(owner.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return owner, mustCreate(t, env.Host, framework.CNPGVR, cnp)
}

func ownerGVR(kind string) schema.GroupVersionResource {
	if kind == fence.OwnerKindSandboxClaim {
		return framework.ClaimGVR
	}
	return framework.SandboxGVR
}

// expectOwned fails unless policy still exists and still names owner's uid.
func expectOwned(t *testing.T, policy, owner *unstructured.Unstructured) {
	t.Helper()
	got, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(policy.GetNamespace()).Get(testContext(t), policy.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy %s after a refused delete: %v", policy.GetName(), err)
	}
	refs := got.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != owner.GetUID() {
		t.Fatalf("policy %s after a refused delete has owners %v, want exactly %s (uid %s)", policy.GetName(), refs, owner.GetName(), owner.GetUID())
	}
}

// expectCollected waits until the garbage collector deleted policy, and
// fails if it is ever seen without an owner on the way (orphaned).
func expectCollected(t *testing.T, policy *unstructured.Unstructured) {
	t.Helper()
	err := framework.Eventually(testContext(t), 2*time.Minute, 100*time.Millisecond, "policy "+policy.GetName()+" garbage-collected", func(ctx context.Context) (bool, string, error) {
		got, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(policy.GetNamespace()).Get(ctx, policy.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, "", nil
		case err != nil:
			return false, "", err
		case len(got.GetOwnerReferences()) == 0:
			return false, "", fmt.Errorf("policy %s was orphaned: it lives on without an owner", policy.GetName())
		}
		return false, "still present, owned by " + got.GetOwnerReferences()[0].Name, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// grantDeleteCollection gives the host, for this test only, extra rules in
// its namespace beyond the host Role, as a copy-pasted Role might, and waits
// until RBAC allows them.
func grantDeleteCollection(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := testContext(t)
	ns := env.HostNamespace
	kc := env.Admin.Kube
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name("deletecollection-" + what), Namespace: ns}, Rules: rules}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: framework.HostServiceAccount, Namespace: ns}},
	}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.RbacV1().RoleBindings(ns).Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
		_ = kc.RbacV1().Roles(ns).Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	for _, r := range rules {
		for _, res := range r.Resources {
			if err := env.WaitAllowed(ctx, env.Host, authzv1.ResourceAttributes{Namespace: ns, Verb: "deletecollection", Group: r.APIGroups[0], Resource: res}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// requireShipped skips, under a peer engine ($E2E_ENFORCER), a case that
// checks the shipped bundle itself rather than a fence rule.
func requireShipped(t *testing.T) {
	t.Helper()
	framework.RequireShipped(t, env)
}

// repoRoot is the repository root, or the test fails.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// renderWait bounds a wait for a FenceConfig change to be rendered and
// enforced. A peer's fence is static (e2e/bench/peers): it never reads the
// FenceConfig, so such a wait settles at once or never, and waiting a
// minute for it only doubled each peer's run of the suite.
func renderWait() time.Duration {
	if env.Peer != nil {
		return 10 * time.Second
	}
	return time.Minute
}
