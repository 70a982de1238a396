package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// DecodeYAML splits a multi-document YAML (or JSON) stream into objects,
// skipping empty documents.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ReadYAMLFile decodes a manifest file.
func ReadYAMLFile(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeYAML(b)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return objs, nil
}

// Kustomize renders dir with `kubectl kustomize` (the kubectl built by make
// tools, so the kustomize version is the one shipped with the cluster).
func Kustomize(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %v: %s", dir, err, stderr.String())
	}
	return DecodeYAML(out)
}

// ResourceFor maps an object's kind to its resource client.
func ResourceFor(mapper meta.RESTMapper, dyn dynamic.Interface, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %q: no resource for kind %s: %w", gvk.Kind, obj.GetName(), gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return dyn.Resource(m.Resource), nil
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// DryRun sends every apply with dryRun=All (kubectl --dry-run=server).
	DryRun bool
	// FieldManager defaults to FieldManager. Server-side apply removes the
	// fields a manager stops applying, so writes with different intent (the
	// bundle install, the operator's FenceConfig binding, a dry run) use
	// different managers, as different people would.
	FieldManager string
}

// Apply server-side applies objs as the admin (force conflicts: the harness
// owns what it installs), in order.
func (e *Env) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) error {
	mapper, err := e.Mapper()
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		if err := applyOne(ctx, mapper, e.Admin.Dynamic, obj, opts); err != nil {
			// A kind the mapper has not seen may be a CRD installed a moment
			// ago: refresh discovery once before giving up.
			if meta.IsNoMatchError(errors.Unwrap(err)) || meta.IsNoMatchError(err) {
				mapper.Reset()
				err = applyOne(ctx, mapper, e.Admin.Dynamic, obj, opts)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func applyOne(ctx context.Context, mapper meta.RESTMapper, dyn dynamic.Interface, obj *unstructured.Unstructured, opts ApplyOptions) error {
	ri, err := ResourceFor(mapper, dyn, obj)
	if err != nil {
		return err
	}
	body, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	manager := opts.FieldManager
	if manager == "" {
		manager = FieldManager
	}
	po := metav1.PatchOptions{FieldManager: manager, Force: ptrTo(true)}
	if opts.DryRun {
		po.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, po); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// WaitCRDsEstablished polls until every named CRD reports Established and
// NamesAccepted, then refreshes the REST mapper.
func (e *Env) WaitCRDsEstablished(ctx context.Context, names []string) error {
	for _, n := range names {
		err := Eventually(ctx, time.Minute, 200*time.Millisecond, "CRD "+n+" established", func(ctx context.Context) (bool, string, error) {
			crd, err := e.Admin.Dynamic.Resource(CRDGVR).Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, "not found", nil
			}
			if err != nil {
				return false, "", err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			ok := map[string]bool{}
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["status"] == "True" {
					ok[fmt.Sprint(cm["type"])] = true
				}
			}
			if ok["Established"] && ok["NamesAccepted"] {
				return true, "", nil
			}
			return false, fmt.Sprintf("conditions %v", conds), nil
		})
		if err != nil {
			return err
		}
	}
	m, err := e.Mapper()
	if err != nil {
		return err
	}
	m.Reset()
	return nil
}

// DryRunCreateOrReplace asks the server whether it would accept each object
// as written, with dryRun=All: a create when the object does not exist, a
// full replace (kubectl replace --dry-run=server) when it does. Unlike a
// server-side apply it never merges with what is live, so an object the
// harness installed differently (the local webhook URL) is judged on the
// manifest alone.
func (e *Env) DryRunCreateOrReplace(ctx context.Context, obj *unstructured.Unstructured) error {
	mapper, err := e.Mapper()
	if err != nil {
		return err
	}
	ri, err := ResourceFor(mapper, e.Admin.Dynamic, obj)
	if err != nil {
		mapper.Reset()
		if ri, err = ResourceFor(mapper, e.Admin.Dynamic, obj); err != nil {
			return err
		}
	}
	dry := []string{metav1.DryRunAll}
	live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: dry, FieldManager: FieldManager})
	case err == nil:
		o := obj.DeepCopy()
		o.SetResourceVersion(live.GetResourceVersion())
		_, err = ri.Update(ctx, o, metav1.UpdateOptions{DryRun: dry, FieldManager: FieldManager})
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}
