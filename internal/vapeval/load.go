package vapeval

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/yamldocs"
)

// PolicyDir is one shipped policy: policies/<name>/{policy,binding}.yaml.
type PolicyDir struct {
	Dir     string
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// OptIn is true when the binding is not installed by default
	// (binding/binding.yaml, added by a component).
	OptIn bool
}

// LoadPolicyDir reads policy.yaml and binding.yaml strictly: an unknown field
// is an error, as the API server would refuse it. An opt-in policy keeps its
// binding in binding/binding.yaml, which the default install leaves out and
// a component adds; its cases run with the binding, as once opted in.
func LoadPolicyDir(dir string) (*PolicyDir, error) {
	p, err := loadPolicyDir(os.DirFS(dir), ".")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	p.Dir = dir
	return p, nil
}

// LoadBundle reads every <name>/policy.yaml of fsys with its binding, as
// LoadPolicyDir does, sorted by name: the shipped bundle (policies.FS) or a
// checkout's policies/ directory (os.DirFS).
func LoadBundle(fsys fs.FS) ([]*PolicyDir, error) {
	matches, err := fs.Glob(fsys, "*/policy.yaml")
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return nil, errors.New("no <name>/policy.yaml: not a directory of policies")
	}
	sort.Strings(matches)
	var out []*PolicyDir
	for _, m := range matches {
		p, err := loadPolicyDir(fsys, path.Dir(m))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func loadPolicyDir(fsys fs.FS, dir string) (*PolicyDir, error) {
	p := &PolicyDir{Dir: dir, Policy: &admissionregistrationv1.ValidatingAdmissionPolicy{}, Binding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}}
	if err := readStrict(fsys, path.Join(dir, "policy.yaml"), p.Policy); err != nil {
		return nil, err
	}
	binding := path.Join(dir, "binding.yaml")
	if _, err := fs.Stat(fsys, binding); errors.Is(err, fs.ErrNotExist) {
		binding = path.Join(dir, "binding", "binding.yaml")
		p.OptIn = true
	}
	if err := readStrict(fsys, binding, p.Binding); err != nil {
		return nil, err
	}
	if p.Policy.Kind != "ValidatingAdmissionPolicy" || p.Binding.Kind != "ValidatingAdmissionPolicyBinding" {
		return nil, fmt.Errorf("%s: policy.yaml must hold a ValidatingAdmissionPolicy and binding.yaml its binding, got %q and %q", dir, p.Policy.Kind, p.Binding.Kind)
	}
	return p, nil
}

func readStrict(fsys fs.FS, name string, into any) error {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// LoadCRD reads one CustomResourceDefinition from a YAML file.
func LoadCRD(file string) (*apiextensionsv1.CustomResourceDefinition, error) {
	return LoadCRDFS(os.DirFS(filepath.Dir(file)), filepath.Base(file))
}

// LoadCRDFS reads one CustomResourceDefinition from a YAML file of fsys.
func LoadCRDFS(fsys fs.FS, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := readStrict(fsys, name, crd); err != nil {
		return nil, err
	}
	return crd, nil
}

// LoadObjects reads every document of a multi-document YAML file.
func LoadObjects(file string) ([]*unstructured.Unstructured, error) {
	return LoadObjectsFS(os.DirFS(filepath.Dir(file)), filepath.Base(file))
}

// LoadObjectsFS reads every document of a multi-document YAML file of fsys.
func LoadObjectsFS(fsys fs.FS, name string) ([]*unstructured.Unstructured, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	out, err := yamldocs.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// Rendered is bundle with c rendered into every policy that reads
// configuration (internal/policyconfig), as the controller leaves the
// policies on a cluster; bundle itself is not changed.
func Rendered(bundle []*PolicyDir, c policyconfig.Config) []*PolicyDir {
	out := make([]*PolicyDir, len(bundle))
	for i, p := range bundle {
		cp := *p
		cp.Policy = policyconfig.Render(p.Policy, c)
		out[i] = &cp
	}
	return out
}

// FailClosed is bundle with every policy's failurePolicy Fail, so that an
// expression error is a refusal a case sees, never the silent admission the
// shipped Ignore would make of it (an error is a defect there: the
// policies' expressions are total). bundle itself is not changed.
func FailClosed(bundle []*PolicyDir) []*PolicyDir {
	out := make([]*PolicyDir, len(bundle))
	fail := admissionregistrationv1.Fail
	for i, p := range bundle {
		cp := *p
		cp.Policy = p.Policy.DeepCopy()
		cp.Policy.Spec.FailurePolicy = &fail
		out[i] = &cp
	}
	return out
}
