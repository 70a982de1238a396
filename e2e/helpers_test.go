//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	got, err := id.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(testContext(t), obj, metav1.CreateOptions{FieldManager: framework.FieldManager})
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

// mustCreate is create that fails the test on any error.
func mustCreate(t *testing.T, id *framework.Identity, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got, err := create(t, id, gvr, obj)
	framework.ExpectAdmitted(t, fmt.Sprintf("create %s %s as %s", gvr.Resource, obj.GetName(), id.Name), err)
	return got
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
		opts.Force = ptr(true)
	}
	_, err := id.Dynamic.Resource(gvr).Namespace(ns).Patch(testContext(t), n, pt, body, opts, sub...)
	return err
}

func ptr[T any](v T) *T { return &v }

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

// rawBody substitutes {{key}} placeholders in a contract body (contract §3.2, §4.1).
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

// requireShipped skips, under a peer engine ($E2E_ENFORCER), a case that
// checks the shipped bundle itself rather than a fence rule.
func requireShipped(t *testing.T) {
	t.Helper()
	framework.RequireShipped(t, env)
}
