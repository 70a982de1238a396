package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
)

// EnforcementModes are the fence's enforcement modes; deny is the default and
// needs no component.
var EnforcementModes = []string{"deny", "warn", "audit"}

// RenderMode renders config/default in mode as an admin installs it: with
// the mode's component (config/components/enforcement/<mode>; none for
// deny), through kubectl's kustomize.
func RenderMode(ctx context.Context, kubectl, repoRoot, mode string) ([]*unstructured.Unstructured, error) {
	known := false
	for _, m := range EnforcementModes {
		known = known || m == mode
	}
	if !known {
		return nil, fmt.Errorf("enforcement mode %q: want one of %s", mode, strings.Join(EnforcementModes, ", "))
	}
	dir, err := os.MkdirTemp("", "sandbox-fence-enforcement-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(filepath.Join(repoRoot, "config"), filepath.Join(dir, "config")); err != nil {
		return nil, err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [config/default]\n"
	if mode != "deny" {
		k += "components: [config/components/enforcement/" + mode + "]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	return Kustomize(ctx, kubectl, dir)
}

// EnforcementFlag is the last --enforcement of a Deployment's containers
// (the one the binary's flag parsing keeps); "" when none is given.
func EnforcementFlag(d *unstructured.Unstructured) string {
	flag := ""
	for _, a := range ContainerArgs(d) {
		if strings.HasPrefix(a, "--enforcement=") {
			flag = a
		}
	}
	return flag
}

// ContainerArgs are the args of a Deployment's first container.
func ContainerArgs(d *unstructured.Unstructured) []string {
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return nil
	}
	c, _ := containers[0].(map[string]any)
	args, _ := c["args"].([]any)
	var out []string
	for _, a := range args {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ReplaceSpec PUTs obj's spec (webhooks, for a webhook configuration) over
// the stored object of the same name, or creates it. Replaced, not
// server-side applied: validationActions is a set, and apply would merge it
// with values other field managers own (a test that re-created a binding,
// say) instead of replacing it. keep, when set, may carry values of the
// live object over (a caBundle the webhook injected); a conflict with
// another writer is retried on the fresh object.
func (e *Env) ReplaceSpec(ctx context.Context, obj *unstructured.Unstructured, keep func(live, obj *unstructured.Unstructured) error) error {
	mapper, err := e.Mapper()
	if err != nil {
		return err
	}
	ri, err := ResourceFor(mapper, e.Admin.Dynamic, obj)
	if err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
			return err
		}
		if err != nil {
			return err
		}
		want := obj.DeepCopy()
		if err := keepRendered(cur, want); err != nil {
			return err
		}
		if keep != nil {
			if err := keep(cur, want); err != nil {
				return err
			}
		}
		for _, k := range []string{"spec", "webhooks"} {
			if v, ok := want.Object[k]; ok {
				cur.Object[k] = v
			}
		}
		_, err = ri.Update(ctx, cur, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("replace %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// keepRendered carries over what the controller rendered from the
// FenceConfig into the live object (the config variable of a policy, the
// bound-hosts condition of a webhook), as an admin's kubectl apply of the
// shipped object leaves them (internal/policyconfig): the shipped
// placeholders would switch the fence to its unrendered state until the
// controller renders again.
func keepRendered(live, obj *unstructured.Unstructured) error {
	switch obj.GetKind() {
	case "ValidatingAdmissionPolicy":
		var l, o admissionregistrationv1.ValidatingAdmissionPolicy
		if err := fromUnstructured(live, &l); err != nil {
			return err
		}
		if err := fromUnstructured(obj, &o); err != nil {
			return err
		}
		got, ok := policyconfig.PolicyExpression(&l)
		if !ok {
			return nil
		}
		for i := range o.Spec.Variables {
			if o.Spec.Variables[i].Name == policyconfig.Variable {
				o.Spec.Variables[i].Expression = got
			}
		}
		return toUnstructured(&o, obj)
	case "ValidatingWebhookConfiguration":
		var l, o admissionregistrationv1.ValidatingWebhookConfiguration
		if err := fromUnstructured(live, &l); err != nil {
			return err
		}
		if err := fromUnstructured(obj, &o); err != nil {
			return err
		}
		got := policyconfig.WebhookExpressions(&l)
		for i := range o.Webhooks {
			for j := range o.Webhooks[i].MatchConditions {
				if e, ok := got[o.Webhooks[i].Name]; ok && o.Webhooks[i].MatchConditions[j].Name == policyconfig.MatchCondition {
					o.Webhooks[i].MatchConditions[j].Expression = e
				}
			}
		}
		return toUnstructured(&o, obj)
	}
	return nil
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

func toUnstructured(from any, u *unstructured.Unstructured) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(from)
	if err != nil {
		return err
	}
	u.Object = m
	return nil
}

// KeepCABundles is a ReplaceSpec keep function for a webhook configuration
// whose CA the webhook injects itself (--cert-rotation): every webhook of
// obj gets the caBundle the live webhook of the same name has, so the
// replacement does not cut the API server off the webhook until the next
// injection.
func KeepCABundles(live, obj *unstructured.Unstructured) error {
	cas := map[string]any{}
	liveHooks, _, _ := unstructured.NestedSlice(live.Object, "webhooks")
	for _, h := range liveHooks {
		m, _ := h.(map[string]any)
		name, _ := m["name"].(string)
		if ca, ok, _ := unstructured.NestedFieldNoCopy(m, "clientConfig", "caBundle"); ok {
			cas[name] = ca
		}
	}
	hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
	for i, h := range hooks {
		m, _ := h.(map[string]any)
		name, _ := m["name"].(string)
		if ca, ok := cas[name]; ok {
			if err := unstructured.SetNestedField(m, ca, "clientConfig", "caBundle"); err != nil {
				return err
			}
			hooks[i] = m
		}
	}
	return unstructured.SetNestedSlice(obj.Object, hooks, "webhooks")
}
