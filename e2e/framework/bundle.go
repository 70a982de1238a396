package framework

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/ciliumversion"
	"github.com/sandbox-fence/sandbox-fence/internal/reporoot"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/testing/upstream"
)

// Logf is a progress logger.
type Logf func(format string, args ...any)

// RepoRoot finds the repository root (the directory holding the project
// go.mod) from the working directory upwards.
func RepoRoot() (string, error) { return reporoot.Find() }

// CRDs returns the CustomResourceDefinitions the suite installs, with a line
// per choice made: the agent-sandbox CRDs (the project's subsets in
// config/crd/testdata, or upstream's from $SANDBOX_FENCE_UPSTREAM_CRDS), the
// real CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy CRDs from the
// github.com/cilium/cilium module,
// prometheus-operator's and cert-manager's CRDs of the kinds config/ renders,
// openreports.io's Report and ClusterReport (what kubectl fence audit can
// write), and the FenceConfig CRD from config/crd/bases. Nothing falls back: a CRD that
// cannot be read fails the setup.
func CRDs(ctx context.Context, repoRoot string, logf Logf) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	add := func(path string) ([]*unstructured.Unstructured, error) {
		objs, err := ReadYAMLFile(path)
		if err != nil {
			return nil, err
		}
		var crds []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, o)
			}
		}
		if len(crds) == 0 {
			return nil, fmt.Errorf("%s holds no CustomResourceDefinition", path)
		}
		out = append(out, crds...)
		return crds, nil
	}

	if os.Getenv(upstream.EnvAgentSandboxCRDs) != "" {
		dir, err := upstream.AgentSandboxDir(repoRoot)
		if err != nil {
			return nil, err
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		logf("CRDs: upstream agent-sandbox CRDs from %s (%s), spec.conversion stripped (no conversion webhook here: v1alpha1 is served with strategy None)", dir, upstream.EnvAgentSandboxCRDs)
		for _, f := range files {
			crds, err := add(f)
			if err != nil {
				return nil, err
			}
			for _, o := range crds {
				unstructured.RemoveNestedField(o.Object, "spec", "conversion")
			}
		}
	} else {
		testdata := filepath.Join(repoRoot, "config", "crd", "testdata")
		for _, f := range []string{"agents.x-k8s.io_sandboxes.yaml", "extensions.agents.x-k8s.io_sandboxclaims.yaml"} {
			if _, err := add(filepath.Join(testdata, f)); err != nil {
				return nil, err
			}
		}
		logf("CRDs: project agent-sandbox subsets from %s", testdata)
	}
	cilium, version, err := upstream.CiliumCRD(ctx, repoRoot)
	if err != nil {
		return nil, fmt.Errorf("the real CiliumNetworkPolicy CRD (no fallback to the subset): %w", err)
	}
	logf("CRDs: real CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy (the baseline's) CRDs from %s@%s", ciliumversion.Module, version)
	if _, err := add(cilium); err != nil {
		return nil, err
	}
	if _, err := add(filepath.Join(filepath.Dir(cilium), "ciliumclusterwidenetworkpolicies.yaml")); err != nil {
		return nil, err
	}
	bases, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return nil, err
	}
	monitoring, err := PrometheusOperatorCRDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("the ServiceMonitor and PrometheusRule CRDs config/components/monitoring is checked against: %w", err)
	}
	logf("CRDs: ServiceMonitor and PrometheusRule from %s@%s", tst.PrometheusOperatorModule, tst.PrometheusOperatorVersion)
	for _, f := range monitoring {
		if _, err := add(f); err != nil {
			return nil, err
		}
	}
	certManager, err := CertManagerCRDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("the Issuer and Certificate CRDs config/webhook/overlays/cert-manager is checked against: %w", err)
	}
	logf("CRDs: Issuer and Certificate from %s@%s", tst.CertManagerModule, tst.CertManagerVersion)
	for _, f := range certManager {
		if _, err := add(f); err != nil {
			return nil, err
		}
	}
	reports, version, err := upstream.OpenReportsCRDs(ctx, repoRoot)
	if err != nil {
		return nil, fmt.Errorf("the Report and ClusterReport CRDs kubectl fence audit -o policyreport writes: %w", err)
	}
	logf("CRDs: Report and ClusterReport from %s@%s", upstream.OpenReportsModule, version)
	for _, f := range append(reports, bases...) {
		if _, err := add(f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CertManagerCRDs returns the paths of cert-manager's Issuer and Certificate
// CRDs (the release internal/testing pins), so the suite's server-side dry
// run of config/webhook/overlays/cert-manager checks those objects too
// instead of skipping them.
func CertManagerCRDs(ctx context.Context) ([]string, error) {
	dir, err := upstream.ModuleDir(ctx, tst.CertManagerModule, tst.CertManagerVersion)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range tst.CertManagerCRDFiles {
		p := filepath.Join(dir, "deploy", "crds", f)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", tst.CertManagerModule, tst.CertManagerVersion, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// PrometheusOperatorCRDs returns the paths of the ServiceMonitor and
// PrometheusRule CRDs of prometheus-operator (the version the monitoring
// component is validated against offline), so the suite's server-side dry
// run of config/components/monitoring checks them too.
func PrometheusOperatorCRDs(ctx context.Context) ([]string, error) {
	dir, err := upstream.ModuleDir(ctx, tst.PrometheusOperatorModule, tst.PrometheusOperatorVersion)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		p := filepath.Join(dir, "example", "prometheus-operator-crd", f)
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
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
