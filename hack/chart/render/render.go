// Package render renders and lints a chart the way `helm template
// --include-crds` and `helm lint` do, with Helm's own code and no cluster,
// for the chart's tests and the release's (hack/release).
package render

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

// Namespace is the release namespace docs/install.md installs into
// (helm install -n), the one config/default names.
const Namespace = "sandbox-fence-system"

// Template renders ch with vals as release "sandbox-fence" in Namespace.
func Template(ch *chart.Chart, vals map[string]any, kubeVersion *chartutil.KubeVersion, apiVersions ...string) ([]map[string]any, error) {
	return TemplateIn(ch, Namespace, vals, kubeVersion, apiVersions...)
}

// TemplateIn renders ch with vals as release "sandbox-fence" in namespace,
// client-only, at kubeVersion: Helm's client-only default, v1.20, is below
// the chart's kubeVersion. It returns one object per non-empty document of
// the manifest.
func TemplateIn(ch *chart.Chart, namespace string, vals map[string]any, kubeVersion *chartutil.KubeVersion, apiVersions ...string) ([]map[string]any, error) {
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.IncludeCRDs, inst.Replace = true, true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = "sandbox-fence", namespace, kubeVersion
	// What the API server serves beyond its own kinds (helm template
	// --api-versions), which .Capabilities.APIVersions.Has reads.
	inst.APIVersions = apiVersions
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm template %s %v: %w", ch.Name(), vals, err)
	}
	var out []map[string]any
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("helm template %s: %w\n%s", ch.Name(), err, doc)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out, nil
}

// LintPackage runs Helm's linter over a packaged chart (helm lint X.tgz) at
// kubeVersion and returns every message above INFO.
func LintPackage(pkg string, kubeVersion *chartutil.KubeVersion) []string {
	l := action.NewLint()
	l.Namespace, l.KubeVersion = "default", kubeVersion
	res := l.Run([]string{pkg}, nil)
	var bad []string
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			bad = append(bad, m.Error())
		}
	}
	for _, err := range res.Errors {
		bad = append(bad, err.Error())
	}
	return bad
}

// Images lists the image of every init container and container in objs'
// pod templates (a CronJob's included), in order.
func Images(objs []map[string]any) []string {
	var images []string
	for _, m := range objs {
		spec, _ := m["spec"].(map[string]any)
		if job, ok := spec["jobTemplate"].(map[string]any); ok { // a CronJob's pods
			spec, _ = job["spec"].(map[string]any)
		}
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		for _, key := range []string{"initContainers", "containers"} {
			cs, _ := pod[key].([]any)
			for _, c := range cs {
				if img, _ := c.(map[string]any)["image"].(string); img != "" {
					images = append(images, img)
				}
			}
		}
	}
	return images
}
