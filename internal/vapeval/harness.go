package vapeval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/apiserver/pkg/warning"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/featuregate"
)

// Resource is a kind the REST mapper must know: the request kinds.
type Resource struct {
	GVK        schema.GroupVersionKind
	Resource   string
	Namespaced bool
}

// GVR returns the resource's group, version and resource.
func (r Resource) GVR() schema.GroupVersionResource {
	return r.GVK.GroupVersion().WithResource(r.Resource)
}

// Env is what the plugin sees: policies with their bindings (configuration
// rendered, see Rendered), namespaces, and the resources to map.
type Env struct {
	Policies   []*PolicyDir
	Namespaces []*corev1.Namespace
	Resources  []Resource
}

// Harness is a started validating admission policy plugin.
type Harness struct {
	plugin *validating.Plugin
	stop   chan struct{}
	mapper meta.RESTMapper
}

// Start builds the plugin the way kube-apiserver does (NewPlugin, the
// generic plugin initializer, ValidateInitialization, informers) over fake
// clients holding env. The policies and bindings are defaulted copies.
func Start(ctx context.Context, env Env) (*Harness, error) {
	var objs []runtime.Object
	// A policy with several bindings (as installed on a cluster) comes once
	// per binding; it is loaded once.
	seen := map[string]bool{}
	for _, p := range env.Policies {
		pol, b := p.Policy.DeepCopy(), p.Binding.DeepCopy()
		Defaults(pol, b)
		if !seen[pol.Name] {
			objs = append(objs, pol)
			seen[pol.Name] = true
		}
		objs = append(objs, b)
	}
	for _, ns := range env.Namespaces {
		ns = ns.DeepCopy()
		// As the API server does on every write of a namespace.
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
		objs = append(objs, ns)
	}
	client := fake.NewClientset(objs...)

	mapper := meta.NewDefaultRESTMapper(nil)
	listKinds := map[schema.GroupVersionResource]string{}
	for _, r := range env.Resources {
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		mapper.AddSpecific(r.GVK, r.GVR(), r.GVK.GroupVersion().WithResource(r.Resource), scope)
		listKinds[r.GVR()] = r.GVK.Kind + "List"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)

	factory := informers.NewSharedInformerFactory(client, 0)
	stop := make(chan struct{})
	plugin, err := validating.NewPlugin(nil)
	if err != nil {
		return nil, err
	}
	initializer.New(client, dyn, factory, authorizerfactory.NewAlwaysAllowAuthorizer(),
		featuregate.NewFeatureGate(), compatibility.DefaultBuildEffectiveVersion(), stop, mapper).Initialize(plugin)
	if err := plugin.ValidateInitialization(); err != nil {
		close(stop)
		return nil, err
	}
	factory.Start(stop)
	h := &Harness{plugin: plugin, stop: stop, mapper: mapper}
	// Ready means the policy, binding and namespace informers synced.
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return plugin.WaitForReady(), nil
	})
	if err != nil {
		h.Stop()
		return nil, fmt.Errorf("the validating admission policy plugin never became ready: %w", err)
	}
	return h, nil
}

// Stop ends the plugin's informers.
func (h *Harness) Stop() { close(h.stop) }

// Request is one admission request.
type Request struct {
	Operation   admission.Operation
	Kind        schema.GroupVersionKind
	Resource    schema.GroupVersionResource
	SubResource string
	Namespace   string
	Name        string
	Object      runtime.Object
	OldObject   runtime.Object
	Options     runtime.Object
	DryRun      bool
	User        user.Info
}

// Validate runs one request through every loaded policy. nil means admitted;
// a denial is the *apierrors.StatusError the API server would return.
func (h *Harness) Validate(ctx context.Context, r Request) error {
	return h.Evaluate(ctx, r).Err
}

// Outcome is everything the plugin produced for one request: the denial
// (nil when admitted), the audit annotations it recorded (keyed
// "<policy>/<key>", plus the API server's own
// "validation.policy.admission.k8s.io/validation_failure" under an Audit
// binding) and the warnings it sent (under a Warn binding).
type Outcome struct {
	Err              error
	AuditAnnotations map[string]string
	Warnings         []string
}

// Evaluate runs one request through every loaded policy and keeps what the
// API server would write to the audit log and send as warnings.
func (h *Harness) Evaluate(ctx context.Context, r Request) Outcome {
	rec := &recorder{attrs: admission.NewAttributesRecord(r.Object, r.OldObject, r.Kind, r.Namespace, r.Name, r.Resource,
		r.SubResource, r.Operation, r.Options, r.DryRun, r.User)}
	rec.Attributes = rec.attrs
	err := h.plugin.Validate(warning.WithWarningRecorder(ctx, rec), rec, objectInterfaces{})
	return Outcome{Err: err, AuditAnnotations: rec.annotations, Warnings: rec.warnings}
}

// recorder passes the request's attributes on and keeps a copy of every
// audit annotation and warning: the record keeps its annotations private.
type recorder struct {
	admission.Attributes
	attrs       admission.Attributes
	mu          sync.Mutex
	annotations map[string]string
	warnings    []string
}

func (r *recorder) AddAnnotation(key, value string) error {
	return r.AddAnnotationWithLevel(key, value, auditinternal.LevelMetadata)
}

func (r *recorder) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	if err := r.attrs.AddAnnotationWithLevel(key, value, level); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	r.annotations[key] = value
	return nil
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, text)
}

// ErrNotReady reports a plugin that answered before its sources synced.
var ErrNotReady = errors.New("not yet ready to handle request")

// objectInterfaces serves unstructured objects only: the policies match the
// exact request version, so nothing is ever converted.
type objectInterfaces struct{}

func (objectInterfaces) GetObjectCreater() runtime.ObjectCreater     { return unstructuredScheme }
func (objectInterfaces) GetObjectTyper() runtime.ObjectTyper         { return unstructuredScheme }
func (objectInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return unstructuredScheme }
func (objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return unstructuredScheme }
func (objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return runtime.NewEquivalentResourceRegistry()
}

var unstructuredScheme = unstructuredObjects{}

type unstructuredObjects struct{}

func (unstructuredObjects) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

func (unstructuredObjects) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{obj.GetObjectKind().GroupVersionKind()}, false, nil
}

func (unstructuredObjects) Recognizes(schema.GroupVersionKind) bool { return true }

func (unstructuredObjects) Default(runtime.Object) {}

func (unstructuredObjects) Convert(in, out, context any) error {
	return fmt.Errorf("vapeval converts nothing: a policy matched a version other than the request's")
}

func (unstructuredObjects) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	if gvk, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{in.GetObjectKind().GroupVersionKind()}); ok && gvk == in.GetObjectKind().GroupVersionKind() {
		return in, nil
	}
	return nil, fmt.Errorf("vapeval converts nothing: %v to %v", in.GetObjectKind().GroupVersionKind(), gv)
}

func (unstructuredObjects) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}
