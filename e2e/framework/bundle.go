package framework

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// EnvUpstreamCRDs names a directory of upstream agent-sandbox CRDs to
// install instead of the project's minimal ones (config/crd/testdata).
const EnvUpstreamCRDs = "SANDBOX_FENCE_UPSTREAM_CRDS"

// CiliumVersion is the Cilium release whose CiliumNetworkPolicy CRD the suite
// installs: the real schema, so pruning and defaulting are what a host meets.
const CiliumVersion = "v1.20.2"

const ciliumCRDPath = "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml"

// Logf is a progress logger.
type Logf func(format string, args ...any)

// RepoRoot finds the repository root (the directory holding the project
// go.mod) from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/sandbox-fence/sandbox-fence\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found: run from inside the sandbox-fence checkout")
		}
		dir = parent
	}
}

// CRDs returns the CustomResourceDefinitions the suite installs, with a line
// per choice made: the agent-sandbox CRDs (project subsets, or upstream when
// $SANDBOX_FENCE_UPSTREAM_CRDS is set), the real Cilium CRD (the subset when
// it cannot be fetched), and the FenceConfig CRD from config/crd/bases.
func CRDs(ctx context.Context, repoRoot, binDir string, logf Logf) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	add := func(path string) error {
		objs, err := ReadYAMLFile(path)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				out = append(out, o)
			}
		}
		return nil
	}

	testdata := filepath.Join(repoRoot, "config", "crd", "testdata")
	cilium, err := CiliumCRD(ctx, binDir)
	if err != nil {
		logf("!!! real Cilium CRD unavailable (%v): installing the subset in config/crd/testdata instead", err)
	}

	if up := os.Getenv(EnvUpstreamCRDs); up != "" {
		files, err := filepath.Glob(filepath.Join(up, "*.yaml"))
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("%s=%s holds no *.yaml CRDs", EnvUpstreamCRDs, up)
		}
		logf("CRDs: upstream agent-sandbox CRDs from %s, spec.conversion stripped (no conversion webhook here: v1alpha1 is served with strategy None)", up)
		for _, f := range files {
			if err := add(f); err != nil {
				return nil, err
			}
		}
		for _, o := range out {
			unstructured.RemoveNestedField(o.Object, "spec", "conversion")
		}
	} else {
		files, _ := filepath.Glob(filepath.Join(testdata, "*.yaml"))
		n := 0
		for _, f := range files {
			base := filepath.Base(f)
			if base == "kustomization.yaml" || (cilium != "" && strings.HasPrefix(base, "cilium.io_")) {
				continue
			}
			if err := add(f); err != nil {
				return nil, err
			}
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("no test CRDs in %s; set %s to a directory of upstream CRDs", testdata, EnvUpstreamCRDs)
		}
		logf("CRDs: project test CRDs from %s", testdata)
	}
	if cilium != "" {
		logf("CRDs: real CiliumNetworkPolicy CRD from github.com/cilium/cilium@%s", CiliumVersion)
		if err := add(cilium); err != nil {
			return nil, err
		}
	} else if os.Getenv(EnvUpstreamCRDs) != "" {
		if err := add(filepath.Join(testdata, "cilium.io_ciliumnetworkpolicies.yaml")); err != nil {
			return nil, err
		}
	}
	monitoring, err := PrometheusOperatorCRDs(ctx, binDir)
	if err != nil {
		return nil, fmt.Errorf("the ServiceMonitor and PrometheusRule CRDs config/components/monitoring is checked against: %w", err)
	}
	logf("CRDs: ServiceMonitor and PrometheusRule from github.com/prometheus-operator/prometheus-operator@%s", tst.PrometheusOperatorVersion)
	for _, f := range monitoring {
		if err := add(f); err != nil {
			return nil, err
		}
	}
	bases, _ := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	for _, f := range bases {
		if err := add(f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CiliumCRD returns the path of the real CiliumNetworkPolicy CRD, cached
// under binDir; the first call reads it from the github.com/cilium/cilium
// module.
func CiliumCRD(ctx context.Context, binDir string) (string, error) {
	return moduleFile(ctx, binDir, "github.com/cilium/cilium", CiliumVersion, ciliumCRDPath)
}

// PrometheusOperatorCRDs returns the paths of the ServiceMonitor and
// PrometheusRule CRDs of prometheus-operator (the version the monitoring
// component is validated against offline), so the suite's server-side dry
// run of config/components/monitoring checks them too.
func PrometheusOperatorCRDs(ctx context.Context, binDir string) ([]string, error) {
	var out []string
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		p, err := moduleFile(ctx, binDir, "github.com/prometheus-operator/prometheus-operator", tst.PrometheusOperatorVersion, "example/prometheus-operator-crd/"+f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// moduleFile returns the path of file path of module@version, cached under
// binDir/crds; the first call downloads the module through the Go module
// proxy into a scratch module, so the project go.mod never depends on it.
func moduleFile(ctx context.Context, binDir, module, version, path string) (string, error) {
	cached := filepath.Join(binDir, "crds", filepath.Base(module)+"-"+version, filepath.Base(path))
	if _, err := os.Stat(cached); err == nil {
		return cached, nil
	}
	scratch, err := os.MkdirTemp("", "module-file-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go mod download %s@%s: %v: %s%s", module, version, err, ee.Stderr, out)
		}
		return "", err
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", module, version, mod.Error)
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, path))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", err
	}
	return cached, os.WriteFile(cached, data, 0o644)
}

// InstallCRDs applies crds and waits until they are Established.
func (e *Env) InstallCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	if err := e.Apply(ctx, crds, ApplyOptions{}); err != nil {
		return err
	}
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.GetName())
	}
	return e.WaitCRDsEstablished(ctx, names)
}

// Bundle is the rendered product: what `kubectl apply -k config/default`
// installs.
type Bundle struct {
	Objects []*unstructured.Unstructured
}

// RenderBundle renders config/default with the built kubectl, exactly as an
// admin's `kubectl apply -k config/default` would see it.
func RenderBundle(ctx context.Context, kubectl, repoRoot string, logf Logf) (*Bundle, error) {
	objs, err := Kustomize(ctx, kubectl, filepath.Join(repoRoot, "config", "default"))
	if err != nil {
		return nil, err
	}
	b := &Bundle{Objects: objs}
	for _, kind := range []string{"CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"} {
		if !b.has(kind) {
			return nil, fmt.Errorf("config/default renders no %s: the bundle is incomplete", kind)
		}
	}
	return b, nil
}

func (b *Bundle) has(kind string) bool {
	for _, o := range b.Objects {
		if o.GetKind() == kind {
			return true
		}
	}
	return false
}

// Split separates the bundle into CRDs, the webhook configuration (applied
// only once its backend answers) and everything else.
func (b *Bundle) Split() (crds, webhookConfigs, rest []*unstructured.Unstructured) {
	for _, o := range b.Objects {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, o)
		case "ValidatingWebhookConfiguration":
			webhookConfigs = append(webhookConfigs, o)
		default:
			rest = append(rest, o)
		}
	}
	// Namespaces first: everything namespaced needs one.
	ordered := make([]*unstructured.Unstructured, 0, len(rest))
	for _, o := range rest {
		if o.GetKind() == "Namespace" {
			ordered = append(ordered, o)
		}
	}
	for _, o := range rest {
		if o.GetKind() != "Namespace" {
			ordered = append(ordered, o)
		}
	}
	return crds, webhookConfigs, ordered
}

// PointWebhookAt rewrites every webhook of a ValidatingWebhookConfiguration
// from the in-cluster Service to url+path with the given CA, keeping the
// rules, matchConditions, selectors and policies exactly as shipped: the local
// suite then tests the shipped admission rules against a local process.
func PointWebhookAt(vwc *unstructured.Unstructured, baseURL string, caBundle []byte) error {
	hooks, _, err := unstructured.NestedSlice(vwc.Object, "webhooks")
	if err != nil {
		return err
	}
	for i, h := range hooks {
		hm, ok := h.(map[string]any)
		if !ok {
			return fmt.Errorf("%s webhooks[%d] is not an object", vwc.GetName(), i)
		}
		path, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "path")
		if path == "" {
			return fmt.Errorf("%s webhooks[%d] (%v) has no clientConfig.service.path to keep", vwc.GetName(), i, hm["name"])
		}
		hm["clientConfig"] = map[string]any{
			"url":      strings.TrimSuffix(baseURL, "/") + path,
			"caBundle": caBundleString(caBundle),
		}
		hooks[i] = hm
	}
	return unstructured.SetNestedSlice(vwc.Object, hooks, "webhooks")
}

func caBundleString(pem []byte) string {
	return base64.StdEncoding.EncodeToString(pem)
}

// StderrLogf is the Logf of a suite or command: one line on stderr, with
// its prefix and a millisecond clock, so interleaved component logs can be
// lined up with the test's own steps.
func StderrLogf(prefix string) Logf {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s: %s\n", prefix, time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}
