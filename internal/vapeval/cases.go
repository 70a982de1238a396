package vapeval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/yaml"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Case is one policies/<name>/tests/<case>.yaml: a request, the FenceConfig
// it runs under, and the verdict the API server must give.
type Case struct {
	// Description says, as a sentence, what the case shows.
	Description string     `json:"description"`
	Request     CaseInput  `json:"request"`
	Params      CaseParams `json:"params,omitempty"`
	Expect      Expect     `json:"expect"`

	// File is where the case was read from.
	File string `json:"-"`
}

// CaseInput is the admission request. GroupVersionKind comes from the object
// (or oldObject); the resource from Resources.
type CaseInput struct {
	Operation   string   `json:"operation"`
	User        string   `json:"user"`
	Groups      []string `json:"groups,omitempty"`
	Namespace   string   `json:"namespace,omitempty"`
	Name        string   `json:"name,omitempty"`
	SubResource string   `json:"subResource,omitempty"`
	// Object is the new object (CREATE, full-object UPDATE).
	Object map[string]any `json:"object,omitempty"`
	// ObjectFrom, instead of Object, names a base object the case starts
	// from: tests/bases/<name>.yaml beside the cases, the valid object most
	// cases share. ObjectPatch (RFC 6902) then changes it, so a case states
	// only how it differs. LoadCases builds Object from the two.
	ObjectFrom  string `json:"objectFrom,omitempty"`
	ObjectPatch []any  `json:"objectPatch,omitempty"`
	// OldObject is the stored object (UPDATE, DELETE).
	OldObject map[string]any `json:"oldObject,omitempty"`
	// OldObjectFrom and OldObjectPatch build OldObject from a base object
	// as ObjectFrom and ObjectPatch build Object.
	OldObjectFrom  string `json:"oldObjectFrom,omitempty"`
	OldObjectPatch []any  `json:"oldObjectPatch,omitempty"`
	// MergePatch, when set, makes the new object oldObject with this JSON
	// merge patch (RFC 7386) applied: the shape of the host's unfenced writes.
	MergePatch map[string]any `json:"mergePatch,omitempty"`
	// JSONPatch, when set, makes the new object oldObject with this JSON
	// Patch (RFC 6902) applied: the shape of the host's fenced writes.
	JSONPatch []any `json:"jsonPatch,omitempty"`
	// Options are the CreateOptions, UpdateOptions or DeleteOptions.
	Options map[string]any `json:"options,omitempty"`
	DryRun  bool           `json:"dryRun,omitempty"`
	// Collection makes a DELETE one item of a delete-collection: the API
	// server then admits each item with the stored object as oldObject and
	// no request name.
	Collection bool `json:"collection,omitempty"`
}

// CaseParams selects the configuration rendered into the policies
// (internal/policyconfig): the shared default FenceConfig (policies/testdata/
// fenceconfig.yaml), this spec, a FenceConfig that does not exist, or the
// shipped placeholder that no controller has rendered yet.
type CaseParams struct {
	Absent     bool           `json:"absent,omitempty"`
	Unrendered bool           `json:"unrendered,omitempty"`
	Spec       map[string]any `json:"spec,omitempty"`
	// Preexisting marks a spec the FenceConfig schema refuses today but a
	// cluster may still hold: one stored before the schema learnt the rule,
	// which CRD validation ratcheting keeps while nobody changes it. A test
	// requires the schema to refuse it, so the case shows what the policy
	// does with an upgrade's leftovers, not with an impossible config.
	Preexisting bool `json:"preexisting,omitempty"`
}

// Expect is the verdict.
type Expect struct {
	Allowed bool `json:"allowed"`
	// Code is the HTTP status of a denial.
	Code int32 `json:"code,omitempty"`
	// Messages must all appear in the denial's message.
	Messages []string `json:"messages,omitempty"`
	// Policy, when set, is the policy that must have denied.
	Policy string `json:"policy,omitempty"`
	// AuditAnnotations, when set, are exactly the audit annotations the
	// policies must record ("<policy>/<key>": value), admitted or denied.
	AuditAnnotations map[string]string `json:"auditAnnotations,omitempty"`
}

// LoadCases reads every tests/*.yaml of a policy directory, sorted by name.
func LoadCases(dir string) ([]*Case, error) {
	return LoadCaseFiles(filepath.Join(dir, "tests"))
}

// LoadCaseFiles reads the cases of every path: a case file, or a directory
// whose *.yaml are cases, sorted by name. A case's base objects
// (objectFrom) are bases/<name>.yaml beside its file.
func LoadCaseFiles(paths ...string) ([]*Case, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		in, err := filepath.Glob(filepath.Join(p, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(in)
		files = append(files, in...)
	}
	bases := map[string]baseObjects{}
	var out []*Case
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		c := &Case{File: f}
		if err := yaml.UnmarshalStrict(b, c); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		dir := filepath.Join(filepath.Dir(f), "bases")
		if _, ok := bases[dir]; !ok {
			bases[dir] = baseObjects{dir: dir, read: map[string]map[string]any{}}
		}
		if err := c.Request.resolveBase(bases[dir]); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Name is the case's file name without extension.
func (c *Case) Name() string { return strings.TrimSuffix(filepath.Base(c.File), ".yaml") }

func (c *Case) check() error {
	var errs []error
	if c.Description == "" {
		errs = append(errs, errors.New("description: say in a sentence what the case shows"))
	}
	switch c.Request.Operation {
	case "CREATE", "UPDATE", "DELETE":
	default:
		errs = append(errs, fmt.Errorf("request.operation: %q is not CREATE, UPDATE or DELETE", c.Request.Operation))
	}
	if c.Request.User == "" {
		errs = append(errs, errors.New("request.user: required"))
	}
	if c.Request.MergePatch != nil && c.Request.JSONPatch != nil {
		errs = append(errs, errors.New("request: mergePatch and jsonPatch are exclusive"))
	}
	if (c.Request.MergePatch != nil || c.Request.JSONPatch != nil) &&
		(c.Request.OldObject == nil && c.Request.OldObjectFrom == "" || c.Request.Object != nil || c.Request.ObjectFrom != "") {
		errs = append(errs, errors.New("request: a patch applies to oldObject and replaces object"))
	}
	if c.Request.ObjectFrom != "" && c.Request.Object != nil {
		errs = append(errs, errors.New("request: objectFrom and object are exclusive (objectFrom plus objectPatch builds object)"))
	}
	if c.Request.ObjectPatch != nil && c.Request.ObjectFrom == "" {
		errs = append(errs, errors.New("request: objectPatch changes the base objectFrom names; name one"))
	}
	if c.Request.OldObjectFrom != "" && c.Request.OldObject != nil {
		errs = append(errs, errors.New("request: oldObjectFrom and oldObject are exclusive (oldObjectFrom plus oldObjectPatch builds oldObject)"))
	}
	if c.Request.OldObjectPatch != nil && c.Request.OldObjectFrom == "" {
		errs = append(errs, errors.New("request: oldObjectPatch changes the base oldObjectFrom names; name one"))
	}
	if n := btoi(c.Params.Absent) + btoi(c.Params.Unrendered) + btoi(c.Params.Spec != nil); n > 1 {
		errs = append(errs, errors.New("params: absent, unrendered and spec are exclusive"))
	}
	if c.Params.Preexisting && c.Params.Spec == nil {
		errs = append(errs, errors.New("params: preexisting describes a spec"))
	}
	if c.Request.Collection && (c.Request.Operation != "DELETE" || c.Request.Name != "") {
		errs = append(errs, errors.New("request: collection is a DELETE without a name"))
	}
	if c.Expect.Allowed && (c.Expect.Code != 0 || len(c.Expect.Messages) > 0 || c.Expect.Policy != "") {
		errs = append(errs, errors.New("expect: an admitted case has no code, messages or policy"))
	}
	if !c.Expect.Allowed && (c.Expect.Code == 0 || len(c.Expect.Messages) == 0) {
		errs = append(errs, errors.New("expect: a denial needs its code and at least one message substring"))
	}
	return errors.Join(errs...)
}

// baseObjects are the tests/bases/ of one policy, each read once.
type baseObjects struct {
	dir  string
	read map[string]map[string]any
}

// get returns a copy of the base object name; field is the case's field
// that names it, for the error.
func (b baseObjects) get(name, field string) (map[string]any, error) {
	obj, ok := b.read[name]
	if !ok {
		path := filepath.Join(b.dir, name+".yaml")
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if err := yaml.UnmarshalStrict(raw, &obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", field, path, err)
		}
		b.read[name] = obj
	}
	return runtime.DeepCopyJSON(obj), nil
}

// resolveBase builds Object from ObjectFrom (a base object) and
// ObjectPatch, and OldObject from OldObjectFrom and OldObjectPatch.
func (in *CaseInput) resolveBase(bases baseObjects) error {
	var err error
	if in.ObjectFrom != "" {
		if in.Object, err = bases.build(in.ObjectFrom, in.ObjectPatch, "objectFrom", "objectPatch"); err != nil {
			return err
		}
	}
	if in.OldObjectFrom != "" {
		if in.OldObject, err = bases.build(in.OldObjectFrom, in.OldObjectPatch, "oldObjectFrom", "oldObjectPatch"); err != nil {
			return err
		}
	}
	return nil
}

// build is the base object name with patch (RFC 6902, optional) applied;
// from and patchField are the case's fields, for the error.
func (b baseObjects) build(name string, patch []any, from, patchField string) (map[string]any, error) {
	base, err := b.get(name, "request."+from)
	if err != nil || patch == nil {
		return base, err
	}
	return applyPatch(base, nil, patch, "request."+patchField+" (on bases/"+name+".yaml)")
}

// Resources maps the kinds cases use to their resources: the served
// versions of the kinds pkg/fence and api/v1alpha1 name.
var Resources = []Resource{
	{GVK: fence.SandboxGVK, Resource: fence.SandboxGVR.Resource, Namespaced: true},
	{GVK: atVersion(fence.SandboxGVK, "v1alpha1"), Resource: fence.SandboxGVR.Resource, Namespaced: true},
	{GVK: fence.SandboxClaimGVK, Resource: fence.SandboxClaimGVR.Resource, Namespaced: true},
	{GVK: atVersion(fence.SandboxClaimGVK, "v1alpha1"), Resource: fence.SandboxClaimGVR.Resource, Namespaced: true},
	{GVK: fence.CiliumNetworkPolicyGVK, Resource: fence.CiliumNetworkPolicyGVR.Resource, Namespaced: true},
	{GVK: fencev1alpha1.GroupVersion.WithKind(fencev1alpha1.Kind), Resource: fencev1alpha1.Resource},
}

// atVersion is gvk at another served version.
func atVersion(gvk schema.GroupVersionKind, version string) schema.GroupVersionKind {
	gvk.Version = version
	return gvk
}

// BuildRequest turns the case into an admission request, applying a patch
// to oldObject when the case has one.
func (in CaseInput) BuildRequest() (Request, error) {
	var obj, old *unstructured.Unstructured
	if in.OldObject != nil {
		old = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(in.OldObject)}
	}
	switch {
	case in.Object != nil:
		obj = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(in.Object)}
	case in.MergePatch != nil || in.JSONPatch != nil:
		field := "request.jsonPatch"
		if in.MergePatch != nil {
			field = "request.mergePatch"
		}
		patched, err := applyPatch(in.OldObject, in.MergePatch, in.JSONPatch, field)
		if err != nil {
			return Request{}, err
		}
		obj = &unstructured.Unstructured{Object: patched}
	}
	ref := obj
	if ref == nil {
		ref = old
	}
	if ref == nil {
		return Request{}, errors.New("request: needs object or oldObject (a DELETE's oldObject is the stored object)")
	}
	gvk := ref.GroupVersionKind()
	var gvr schema.GroupVersionResource
	for _, r := range Resources {
		if r.GVK == gvk {
			gvr = r.GVR()
		}
	}
	if gvr.Empty() {
		return Request{}, fmt.Errorf("request: no resource known for %v", gvk)
	}
	ns, name := in.Namespace, in.Name
	if ns == "" {
		ns = ref.GetNamespace()
	}
	if name == "" && !in.Collection {
		name = ref.GetName()
	}
	r := Request{
		Operation:   admission.Operation(in.Operation),
		Kind:        gvk,
		Resource:    gvr,
		SubResource: in.SubResource,
		Namespace:   ns,
		Name:        name,
		DryRun:      in.DryRun,
		User:        &user.DefaultInfo{Name: in.User, Groups: in.Groups},
	}
	// Typed nils would reach CEL as objects; leave the interface nil instead.
	if obj != nil {
		r.Object = obj
	}
	if old != nil {
		r.OldObject = old
	}
	opts, err := options(r.Operation, in.Options)
	if err != nil {
		return Request{}, err
	}
	r.Options = opts
	return r, nil
}

func options(op admission.Operation, raw map[string]any) (runtime.Object, error) {
	var into runtime.Object
	switch op {
	case admission.Create:
		into = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}}
	case admission.Update:
		into = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "UpdateOptions"}}
	case admission.Delete:
		into = &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}}
	}
	if raw == nil {
		return into, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return nil, fmt.Errorf("request.options: %w", err)
	}
	return into, nil
}

// applyPatch applies merge (RFC 7386) or ops (RFC 6902) to old; field is
// the case's field the patch came from, for the error.
func applyPatch(old map[string]any, merge map[string]any, ops []any, field string) (map[string]any, error) {
	doc, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	var out []byte
	if merge != nil {
		p, err := json.Marshal(merge)
		if err != nil {
			return nil, err
		}
		if out, err = jsonpatch.MergePatch(doc, p); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	} else {
		p, err := json.Marshal(ops)
		if err != nil {
			return nil, err
		}
		patch, err := jsonpatch.DecodePatch(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if out, err = patch.Apply(doc); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	var m map[string]any
	return m, json.Unmarshal(out, &m)
}

// Verdict is what the plugin answered.
type Verdict struct {
	Allowed bool
	Code    int32
	Reason  metav1.StatusReason
	Message string
	// AuditAnnotations are what the request would add to the audit log.
	AuditAnnotations map[string]string
}

// Run evaluates the case's request.
func (h *Harness) Run(ctx context.Context, in CaseInput) (Verdict, error) {
	req, err := in.BuildRequest()
	if err != nil {
		return Verdict{}, err
	}
	out := h.Evaluate(ctx, req)
	if out.Err == nil {
		return Verdict{Allowed: true, AuditAnnotations: out.AuditAnnotations}, nil
	}
	var status *apierrors.StatusError
	if !errors.As(out.Err, &status) {
		return Verdict{}, fmt.Errorf("the plugin failed instead of answering: %w", out.Err)
	}
	s := status.Status()
	return Verdict{Code: s.Code, Reason: s.Reason, Message: s.Message, AuditAnnotations: out.AuditAnnotations}, nil
}

// Problems lists every way v differs from what c expects, plus denials that
// break the project's rules whatever the case says: a message
// without its family prefix, a compilation error.
func (c *Case) Problems(v Verdict) []string {
	var out []string
	if strings.Contains(v.Message, "compilation error:") {
		out = append(out, "the policy did not compile: "+v.Message)
	}
	if c.Expect.AuditAnnotations != nil && !maps.Equal(c.Expect.AuditAnnotations, v.AuditAnnotations) {
		out = append(out, fmt.Sprintf("audit annotations %v, want %v", v.AuditAnnotations, c.Expect.AuditAnnotations))
	}
	if v.Allowed != c.Expect.Allowed {
		if v.Allowed {
			return append(out, "admitted, want denied")
		}
		return append(out, fmt.Sprintf("denied (%d %s): %s; want admitted", v.Code, v.Reason, v.Message))
	}
	if v.Allowed {
		return out
	}
	if v.Code != c.Expect.Code {
		out = append(out, fmt.Sprintf("code %d, want %d (message: %s)", v.Code, c.Expect.Code, v.Message))
	}
	for _, m := range c.Expect.Messages {
		if !strings.Contains(v.Message, m) {
			out = append(out, fmt.Sprintf("message %q does not contain %q", v.Message, m))
		}
	}
	if c.Expect.Policy != "" && !strings.Contains(v.Message, "ValidatingAdmissionPolicy '"+c.Expect.Policy+"'") {
		out = append(out, fmt.Sprintf("message %q is not from policy %s", v.Message, c.Expect.Policy))
	}
	// The one denial the policies do not word: the plugin's own refusal when
	// a binding's param is missing (parameterNotFoundAction Deny).
	policyWorded := strings.Contains(v.Message, " denied request: ") && !strings.Contains(v.Message, " denied request: failed to configure binding: ")
	if policyWorded &&
		!strings.Contains(v.Message, " denied request: holder-epoch: ") && !strings.Contains(v.Message, " denied request: cilium-fence: ") {
		out = append(out, "a policy denial must start with holder-epoch: or cilium-fence: (contract §8.1): "+v.Message)
	}
	if strings.Contains(v.Message, " denied request: ") && (v.Code != 422 || v.Reason != metav1.StatusReasonInvalid) {
		out = append(out, fmt.Sprintf("a policy denial must be 422 Invalid (contract §8.1), got %d %s", v.Code, v.Reason))
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
