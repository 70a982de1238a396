package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// setEnforcement installs the bundle in mode as an admin would: it renders
// config/default with the mode's component (config/components/enforcement;
// none for deny), applies the policies, bindings and webhook configuration
// it yields, and restarts the webhook process with the --enforcement flag
// of the rendered Deployment, so the suite runs exactly what the component
// ships.
func (l *Local) setEnforcement(ctx context.Context, mode string) error {
	dir, err := os.MkdirTemp(l.StateDir, "enforcement-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(filepath.Join(l.RepoRoot, "config"), filepath.Join(dir, "config")); err != nil {
		return err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [config/default]\n"
	if mode != "deny" {
		k += "components: [config/components/enforcement/" + mode + "]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return err
	}
	objs, err := framework.Kustomize(ctx, filepath.Join(l.BinDir, "kubectl"), dir)
	if err != nil {
		return err
	}
	var apply []*unstructured.Unstructured
	flag := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			apply = append(apply, o)
		case "ValidatingWebhookConfiguration":
			if err := framework.PointWebhookAt(o, l.webhookBase, l.webhookCA); err != nil {
				return err
			}
			apply = append(apply, o)
		case "Deployment":
			flag = enforcementFlag(o)
		}
	}
	if flag == "" {
		flag = "--enforcement=deny"
	}
	// Replaced, not server-side applied: validationActions is a set, and
	// apply would merge it with values other field managers own (a test
	// that re-created a binding, say) instead of replacing it.
	for _, o := range apply {
		if err := l.replaceSpec(ctx, o); err != nil {
			return err
		}
	}
	return l.restartWebhookWith(ctx, flag)
}

// replaceSpec PUTs obj's spec (webhooks, for a webhook configuration) over
// the stored object of the same name, or creates it.
func (l *Local) replaceSpec(ctx context.Context, obj *unstructured.Unstructured) error {
	mapper, err := l.Env.Mapper()
	if err != nil {
		return err
	}
	ri, err := framework.ResourceFor(mapper, l.Env.Admin.Dynamic, obj)
	if err != nil {
		return err
	}
	cur, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: framework.FieldManager})
		return err
	}
	if err != nil {
		return err
	}
	for _, k := range []string{"spec", "webhooks"} {
		if v, ok := obj.Object[k]; ok {
			cur.Object[k] = v
		}
	}
	_, err = ri.Update(ctx, cur, metav1.UpdateOptions{FieldManager: framework.FieldManager})
	if err != nil {
		return fmt.Errorf("replace %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// enforcementFlag is the last --enforcement of the Deployment's container
// (the one the binary's flag parsing keeps).
func enforcementFlag(d *unstructured.Unstructured) string {
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	flag := ""
	for _, c := range containers {
		args, _ := c.(map[string]any)["args"].([]any)
		for _, a := range args {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "--enforcement=") {
				flag = s
			}
		}
	}
	return flag
}

// restartWebhookWith stops the webhook process and starts it again with the
// same command line but flag in place of any --enforcement.
func (l *Local) restartWebhookWith(ctx context.Context, flag string) error {
	old, err := l.Component(webhookProcessName)
	if err != nil {
		return err
	}
	old.Stop(5 * time.Second)
	if exited, _ := old.Exited(); !exited {
		return fmt.Errorf("webhook pid %d did not exit", old.Pid)
	}
	var args []string
	for _, a := range old.Args {
		if !strings.HasPrefix(a, "--enforcement=") {
			args = append(args, a)
		}
	}
	args = append(args, flag)
	p, err := cluster.StartProcess(old.Name, filepath.Join(l.StateDir, "bin", webhookProcessName), args, old.LogPath, l.Detached)
	if err != nil {
		return err
	}
	l.CP.Track(p)
	if _, err := WaitWebhookReady(ctx, p, 2*time.Minute); err != nil {
		return err
	}
	l.Logf("local: webhook restarted as pid %d with %s", p.Pid, flag)
	return nil
}
